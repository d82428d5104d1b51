#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs zc_teardown (how a flow ends: EOF, reconnects on the same tuple,
# sends cancelled at detach) with the two-port network it needs (zc_env.sh).
. "$(dirname "$0")/zc_env.sh"
exec "$(dirname "$0")/zc_teardown"

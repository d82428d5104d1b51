#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs zc_security (the zero-copy path against a hostile user or peer) with
# the two-port network it needs (zc_env.sh).
. "$(dirname "$0")/zc_env.sh"
exec "$(dirname "$0")/zc_security"

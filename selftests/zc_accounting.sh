#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs zc_accounting (what the zero-copy path charges and counts: CQs against
# RLIMIT_MEMLOCK) with the two-port network it needs (zc_env.sh).
. "$(dirname "$0")/zc_env.sh"
exec "$(dirname "$0")/zc_accounting"

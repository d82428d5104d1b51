#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs zc_sends (zero-copy sends behind unsent plain bytes, and with
# scatter-gather off on the sending port) with the two-port network it
# needs (zc_env.sh); the test turns `sg` off on port a and back on.
. "$(dirname "$0")/zc_env.sh"
export ZN_IF_A
exec "$(dirname "$0")/zc_sends"

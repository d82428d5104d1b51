#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs zc_test (the zero-copy ABI: CQs, flow attach/detach, work requests,
# bad inputs, the flow lifecycle) with the two-port network it needs
# (zc_env.sh). The backlog case freezes the NIC for a moment (ZN_WIRE).
. "$(dirname "$0")/zc_env.sh"
exec "$(dirname "$0")/zc_test"

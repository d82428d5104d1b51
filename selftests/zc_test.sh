#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs zc_test (the zero-copy ABI: CQs, flow attach/detach, work requests,
# bad inputs, the flow lifecycle) with the two-port network it needs: side a
# and side b are the ZeroNIC's ports in their own network namespaces (see
# qemu/guest/net-setup), whose names and side b's address it exports.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/net_lib.sh"

zn_need_topology two-port
zn_loaded || zn_load
zn_net_ready || zn_net_setup >/dev/null 2>&1
zn_net_ready || { ktap_print_header; ktap_exit_fail_msg "the two ports are not set up"; }
export ZN_NS_A ZN_NS_B ZN_ADDR_B=${ZN_ADDR_B%/*}
# The backlog case freezes the NIC for a moment (the model's fault control).
export ZN_WIRE=$ZN_ROOT/qemu/guest/zn-wire
exec "$(dirname "$0")/zc_test"

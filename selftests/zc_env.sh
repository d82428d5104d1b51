#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# What the zero-copy C tests (zc_test, zc_*.c) need, sourced by their
# wrappers: the module loaded and the two-port network set up (side a and
# side b are the ZeroNIC's ports in their own network namespaces, see
# qemu/guest/net-setup), with the namespaces' names, side b's address and
# the model's fault control (ZN_WIRE) exported.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/net_lib.sh"

zn_need_topology two-port
zn_loaded || zn_load
zn_net_ready || zn_net_setup >/dev/null 2>&1
zn_net_ready || { ktap_print_header; ktap_exit_fail_msg "the two ports are not set up"; }
export ZN_NS_A ZN_NS_B ZN_ADDR_B=${ZN_ADDR_B%/*} ZN_ADDR6_B=${ZN_ADDR6_B%/*}
export ZN_WIRE=$ZN_ROOT/qemu/guest/zn-wire

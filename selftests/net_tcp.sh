#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# TCP across the link between side a and side b (topology two-port: the
# ZeroNIC's two ports, each in its own netns; or any pair given by the ZN_*
# variables, see qemu/guest/net-setup): byte-exact transfers of 1 B, 1 MiB
# and 32 MiB in both directions, then iperf3 with one and with four streams.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/net_lib.sh"

IPERF_SECS=${ZN_IPERF_SECS:-3}
port=5300

iperf() { # iperf FROM STREAMS PORT
	local gbps
	gbps=$(zn_iperf "$1" "$IPERF_SECS" "$2" "$3") || { echo "$gbps"; return 1; }
	zn_diag "iperf3 $1->$(zn_other "$1"), $2 stream(s), ${IPERF_SECS}s: $gbps Gbit/s"
}

zn_net_start 9

# Without IP connectivity every case would wait out its timeouts: fail them
# at once instead.
linked=1
if ! zn_in a ping -n -q -c 2 -w 10 "$ZN_ADDR_B" >/dev/null; then
	ktap_print_msg "no ping reply a->b: failing the TCP cases without running them"
	linked=0
fi
tcp_case() { # tcp_case DESC CMD...
	local desc=$1
	shift
	if [ "$linked" = 1 ]; then zn_case "$desc" "$@"; else ktap_test_fail "$desc"; fi
}

tcp_case "the transfer check fails on one corrupted byte" zn_xfer_catches_corruption $((port += 1))
for size in 1 1048576 33554432; do
	tcp_case "TCP a->b, $size bytes, byte-exact" zn_xfer a "$size" $((port += 1))
	tcp_case "TCP b->a, $size bytes, byte-exact" zn_xfer b "$size" $((port += 1))
done
tcp_case "iperf3 a->b, 1 stream, nonzero throughput" iperf a 1 $((port += 1))
tcp_case "iperf3 a->b, 4 parallel streams, nonzero throughput" iperf a 4 $((port += 1))

ktap_finished

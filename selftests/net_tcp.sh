#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# TCP across the link between side a and side b (topology two-port: the
# ZeroNIC's two ports, each in its own netns; or any pair given by the ZN_*
# variables, see qemu/guest/net-setup): byte-exact transfers of 1 B, 1 MiB
# and 32 MiB in both directions, the NIC's TSO of plain TCP (on, and off
# with ethtool -K), TX doorbell batching over xmit_more, then iperf3 with
# one and with four streams.
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

# ethstat SIDE NAME: one ethtool -S counter of that side's port.
ethstat() { zn_in "$1" ethtool -S "$(zn_side_if "$1")" | awk -v k="$2:" '$1 == k { print $2 }'; }

# tso_sends PORT: a 32 MiB transfer a->b leaves as plain TSO sends the NIC
# segments (hardware spec §8): tx0_tso grows, each send made several frames.
tso_sends() {
	local t0 f0 t1 f1
	t0=$(ethstat a tx0_tso) f0=$(ethstat a tx0_tso_frames)
	zn_xfer a 33554432 "$1" || return 1
	t1=$(ethstat a tx0_tso) f1=$(ethstat a tx0_tso_frames)
	zn_diag "side a: +$((t1 - t0)) TSO sends, +$((f1 - f0)) frames"
	[ $((t1 - t0)) -gt 0 ] && [ $((f1 - f0)) -gt $((t1 - t0)) ]
}

# tso_off PORT: with ethtool -K tso off the stack segments: byte-exact, and
# no TSO send.
tso_off() {
	local t0 t1 rc=0
	zn_in a ethtool -K "$ZN_IF_A" tso off || return 1
	t0=$(ethstat a tx0_tso)
	zn_xfer a 4194304 "$1" || rc=1
	t1=$(ethstat a tx0_tso)
	zn_in a ethtool -K "$ZN_IF_A" tso on || rc=1
	zn_diag "side a with tso off: +$((t1 - t0)) TSO sends"
	[ "$rc" = 0 ] && [ "$t1" = "$t0" ]
}

# tx_batching PORT: with tso off the stack hands the driver each GSO skb
# as a list of MSS segments (xmit_more set on all but the last), and BQL
# lets the qdisc dequeue in bulk: the driver rings one TX doorbell per
# batch, not per descriptor (patches 0033, 0034; module parameter
# tx_batch, default 1). Byte-exact, and at most three doorbells per four
# descriptors: without batching there is one per descriptor; with it the
# ratio follows the GSO skbs' size, which TCP's pacing sets (one run 0.27,
# 129 for 478; a 1-vCPU guest on a slower host 0.51, 243 for 477, which the
# half this case asked before failed).
tx_batching() {
	local d0 b0 d1 b1 rc=0
	zn_in a ethtool -K "$ZN_IF_A" tso off || return 1
	d0=$(ethstat a prof_tx_descs) b0=$(ethstat a prof_db_tx)
	zn_xfer a 4194304 "$1" || rc=1
	d1=$(ethstat a prof_tx_descs) b1=$(ethstat a prof_db_tx)
	zn_in a ethtool -K "$ZN_IF_A" tso on || rc=1
	zn_diag "side a with tso off: +$((d1 - d0)) TX descriptors, +$((b1 - b0)) TX doorbells"
	[ "$rc" = 0 ] && [ $((d1 - d0)) -gt 0 ] && [ $((4 * (b1 - b0))) -le $((3 * (d1 - d0))) ]
}

zn_net_start 12

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
# Over a veth pair (ZN_* set by hand) there are no ZeroNIC counters.
tso_case() { # tso_case DESC CMD...
	if [ -z "$(ethstat a tx0_tso)" ]; then
		ktap_test_skip "$1 (not a ZeroNIC port: no tx0_tso counter)"
	else
		tcp_case "$@"
	fi
}
tso_case "TCP a->b, 32 MiB: NIC-segmented TSO sends (tx0_tso)" tso_sends $((port += 1))
tso_case "TCP a->b with tso off: byte-exact, no TSO send" tso_off $((port += 1))
tso_case "TCP a->b with tso off: byte-exact, at most three TX doorbells per four descriptors (xmit_more)" tx_batching $((port += 1))
tcp_case "iperf3 a->b, 1 stream, nonzero throughput" iperf a 1 $((port += 1))
tcp_case "iperf3 a->b, 4 parallel streams, nonzero throughput" iperf a 4 $((port += 1))

ktap_finished

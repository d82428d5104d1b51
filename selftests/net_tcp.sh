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

# Two transfers each carry the counter checks of two cases, so that no
# transfer is made only to be counted: the byte-exact 32 MiB a->b one those
# of TSO, and one 4 MiB a->b with tso off those of tso off and of TX
# batching. Each zn_case runs in a subshell, so the transfer's result and
# side a's ethtool -S before and after it go to files in $SNAPS, which
# the checking case reads: TAG.rc, TAG.0 and TAG.1.
SNAPS=$(mktemp -d)
trap 'rm -rf "$SNAPS"' EXIT

# xfer_snap TAG SIZE PORT: a byte-exact transfer of SIZE bytes a->b
# (zn_xfer), with side a's counters saved before and after (none over a
# veth pair: grew says so); fails as zn_xfer does.
xfer_snap() {
	local tag=$SNAPS/$1 rc=0
	rm -f "$tag".rc "$tag".0 "$tag".1
	zn_in a ethtool -S "$ZN_IF_A" >"$tag.0" 2>/dev/null
	zn_xfer a "$2" "$3" || rc=1
	zn_in a ethtool -S "$ZN_IF_A" >"$tag.1" 2>/dev/null
	echo "$rc" >"$tag.rc"
	return "$rc"
}

# grew TAG NAME: how much counter NAME of side a grew over transfer TAG;
# fails (saying why) if that transfer failed or left no counters.
grew() {
	local tag=$SNAPS/$1 v0 v1
	[ "$(cat "$tag.rc" 2>/dev/null)" = 0 ] ||
		{ echo "transfer $1 failed or did not run: no counters to check" >&2; return 1; }
	v0=$(awk -v k="$2:" '$1 == k { print $2 }' "$tag.0")
	v1=$(awk -v k="$2:" '$1 == k { print $2 }' "$tag.1")
	[ -n "$v0" ] && [ -n "$v1" ] || { echo "no counter $2 around transfer $1" >&2; return 1; }
	echo $((v1 - v0))
}

# tso_sends: the byte-exact 32 MiB transfer a->b (xfer_snap tso) left as
# plain TSO sends the NIC segments (hardware spec §8): tx0_tso grew, each
# send made several frames.
tso_sends() {
	local t f
	t=$(grew tso tx0_tso) && f=$(grew tso tx0_tso_frames) || return 1
	zn_diag "side a: +$t TSO sends, +$f frames"
	[ "$t" -gt 0 ] && [ "$f" -gt "$t" ]
}

# tso_off PORT: with ethtool -K tso off the stack segments: a 4 MiB
# transfer a->b is byte-exact, and no TSO send. tx_batching checks the same
# transfer's doorbells.
tso_off() {
	local t rc=0
	zn_in a ethtool -K "$ZN_IF_A" tso off || return 1
	xfer_snap tsooff 4194304 "$1" || rc=1
	zn_in a ethtool -K "$ZN_IF_A" tso on || rc=1
	[ "$rc" = 0 ] || return 1
	t=$(grew tsooff tx0_tso) || return 1
	zn_diag "side a with tso off: +$t TSO sends"
	[ "$t" = 0 ]
}

# tx_batching: with tso off the stack hands the driver each GSO skb
# as a list of MSS segments (xmit_more set on all but the last), and BQL
# lets the qdisc dequeue in bulk: the driver rings one TX doorbell per
# batch, not per descriptor (patches 0033, 0034; module parameter
# tx_batch, default 1). The tso-off transfer of tso_off was byte-exact, and
# it took at most three doorbells per four descriptors: without batching
# there is one per descriptor; with it the ratio follows the GSO skbs'
# size, which TCP's pacing sets (one run 0.27, 129 for 478; a 1-vCPU guest
# on a slower host 0.51, 243 for 477, which the half this case asked before
# failed).
tx_batching() {
	local d b
	d=$(grew tsooff prof_tx_descs) && b=$(grew tsooff prof_db_tx) || return 1
	zn_diag "side a with tso off: +$d TX descriptors, +$b TX doorbells"
	[ "$d" -gt 0 ] && [ $((4 * b)) -le $((3 * d)) ]
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
for size in 1 1048576; do
	tcp_case "TCP a->b, $size bytes, byte-exact" zn_xfer a "$size" $((port += 1))
	tcp_case "TCP b->a, $size bytes, byte-exact" zn_xfer b "$size" $((port += 1))
done
# Side a's counters around this one are tso_sends'.
tcp_case "TCP a->b, 33554432 bytes, byte-exact" xfer_snap tso 33554432 $((port += 1))
tcp_case "TCP b->a, 33554432 bytes, byte-exact" zn_xfer b 33554432 $((port += 1))
# Over a veth pair (ZN_* set by hand) there are no ZeroNIC counters.
tso_case() { # tso_case DESC CMD...
	if [ -z "$(ethstat a tx0_tso)" ]; then
		ktap_test_skip "$1 (not a ZeroNIC port: no tx0_tso counter)"
	else
		tcp_case "$@"
	fi
}
tso_case "TCP a->b, 32 MiB: NIC-segmented TSO sends (tx0_tso)" tso_sends
tso_case "TCP a->b with tso off: byte-exact, no TSO send" tso_off $((port += 1))
tso_case "TCP a->b with tso off: byte-exact, at most three TX doorbells per four descriptors (xmit_more)" tx_batching
tcp_case "iperf3 a->b, 1 stream, nonzero throughput" iperf a 1 $((port += 1))
tcp_case "iperf3 a->b, 4 parallel streams, nonzero throughput" iperf a 4 $((port += 1))

ktap_finished

#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# TCP over an impaired wire (topology two-port; suite.conf runs it on the
# line started with --wire loss=1): byte-exact transfers both ways while the
# model drops frames, shown to have happened (the wire's loss counter and
# TCP's retransmissions move); then with reordering, duplication and delay
# added at run time (their counters move too), and iperf3. A clean wire gets
# loss=1 for the test. The wire is left as it was found.
set -u
. "$(dirname "$0")/lib.sh"

zn_need_topology two-port

. "$(dirname "$0")/net_lib.sh"

ZN_WIRE=$ZN_ROOT/qemu/guest/zn-wire
SIZE=${ZN_IMPAIRED_SIZE:-4194304}
port=5400

# The wire's settings ("loss=.. reorder=.. dup=.. delay=.. rate=..") and the
# sum of one of its counters over both directions, from the model's stats.
wire_settings() {
	"$ZN_WIRE" stats | sed -n '/^wire /{s/.* \(loss=[^ ]* reorder=[^ ]* dup=[^ ]* delay=[^ ]* rate=[^ ]*\).*/\1/p;q}'
}
wire_count() {
	"$ZN_WIRE" stats | awk -v k="$1" '/^wire / { for (i = 2; i <= NF; i++) if (split($i, kv, "=") == 2 && kv[1] == k) n += kv[2] } END { print n + 0 }'
}

zn_net_start 9
found=$(wire_settings)
trap '[ -z "$found" ] || "$ZN_WIRE" $found >/dev/null 2>&1' EXIT

impaired() {
	[ -n "$found" ] || { echo "no wire line in the model's stats"; return 1; }
	case "$found" in
	loss=0\ *) "$ZN_WIRE" loss=1 >/dev/null || return 1 ;;
	esac
	zn_diag "wire at the start: $found; now: $(wire_settings)"
	case "$(wire_settings)" in
	loss=0\ *) echo "the wire does not drop frames: $(wire_settings)"; return 1 ;;
	esac
}
zn_case_here "the wire drops frames (loss > 0)" impaired

lost0=$(wire_count lost) retrans0=$(( $(zn_tcp_retrans a) + $(zn_tcp_retrans b) ))
zn_case "TCP a->b, $SIZE bytes over the lossy wire, byte-exact" zn_xfer a "$SIZE" $((port += 1))
zn_case "TCP b->a, $SIZE bytes over the lossy wire, byte-exact" zn_xfer b "$SIZE" $((port += 1))
lost_and_retransmitted() {
	local lost retrans
	lost=$(( $(wire_count lost) - lost0 ))
	retrans=$(( $(zn_tcp_retrans a) + $(zn_tcp_retrans b) - retrans0 ))
	zn_diag "during the transfers: $lost frames lost on the wire, $retrans TCP segments retransmitted"
	[ "$lost" -gt 0 ] && [ "$retrans" -gt 0 ]
}
zn_case "the wire lost frames during them and TCP retransmitted" lost_and_retransmitted

more() { "$ZN_WIRE" reorder=2 dup=1 delay=100us >/dev/null && zn_diag "wire now: $(wire_settings)"; }
zn_case_here "reordering, duplication and delay added at run time" more
reo0=$(wire_count reordered) dup0=$(wire_count duplicated)
zn_case "TCP a->b, $SIZE bytes with loss, reordering and duplicates, byte-exact" zn_xfer a "$SIZE" $((port += 1))
zn_case "TCP b->a, $SIZE bytes with loss, reordering and duplicates, byte-exact" zn_xfer b "$SIZE" $((port += 1))
reordered_and_duplicated() {
	local reo dup
	reo=$(( $(wire_count reordered) - reo0 )) dup=$(( $(wire_count duplicated) - dup0 ))
	zn_diag "during the transfers: $reo frames reordered, $dup duplicated"
	[ "$reo" -gt 0 ] && [ "$dup" -gt 0 ]
}
zn_case "the wire reordered and duplicated frames during them" reordered_and_duplicated

iperf() {
	local gbps
	gbps=$(zn_iperf a 3 1 $((port += 1))) || { echo "$gbps"; return 1; }
	zn_diag "iperf3 a->b, 1 stream, 3 s on the impaired wire: $gbps Gbit/s"
}
zn_case "iperf3 a->b on the impaired wire, nonzero throughput" iperf

ktap_finished

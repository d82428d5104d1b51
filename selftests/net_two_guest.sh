#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Data across two guests (topology two-guest, guest a; guest b runs
# selftests/net_peer.sh): guest a's port 0 and guest b's port 0 are cabled
# through the model's wire. b answers pings, DF pings at the full MTU pass,
# byte-exact TCP transfers pass both ways (b's checker answers with its
# verdict for a->b; a checks b->a itself), b's checker catches a flipped
# byte, and iperf3 moves data. Guest b boots alongside a, so the first case
# waits for it.
set -u
. "$(dirname "$0")/lib.sh"

zn_need_topology two-guest

. "$(dirname "$0")/net_lib.sh"

XFER_PORT=5301 IPERF_PORT=5201
SIZE=${ZN_TWO_GUEST_SIZE:-4194304}
# Guest b boots with a; it may take a minute or two more under load.
PEER_WAIT=${ZN_PEER_WAIT:-180}

ktap_print_header
# A test before may have reloaded the module: configure a's port again.
zn_net_setup >/dev/null 2>&1
if [ -z "${ZN_IF_A:-}" ]; then
	ktap_set_plan 1
	ktap_test_fail "guest a's port is set up (no net_device of the NIC)"
	ktap_finished
fi
ktap_print_msg "guest a: $ZN_IF_A $ZN_ADDR_A; guest b: $ZN_ADDR_B"
ktap_set_plan 6

peer_up() {
	local i
	for i in $(seq "$PEER_WAIT"); do
		ping -n -q -c 1 -W 1 "$ZN_ADDR_B" >/dev/null 2>&1 && break
	done
	ping -n -q -c 3 -i 0.2 -w 10 "$ZN_ADDR_B" >/dev/null || { echo "no ping reply from guest b within ${PEER_WAIT}s"; return 1; }
	# And its checker listens (it starts after b's network setup).
	for i in $(seq 60); do
		timeout 5 bash -c "exec 3<>/dev/tcp/$ZN_ADDR_B/$XFER_PORT" 2>/dev/null && return 0
		sleep 1
	done
	echo "guest b's checker does not listen on $ZN_ADDR_B:$XFER_PORT"
	return 1
}
zn_case "guest b answers pings across the wire and its servers listen" peer_up

mtu=$(cat "/sys/class/net/$ZN_IF_A/mtu")
zn_case "DF ping a->b of $((mtu - 28)) bytes (MTU $mtu) and back" \
	ping -n -q -c 3 -i 0.2 -w 10 -M do -s $((mtu - 28)) "$ZN_ADDR_B"

xfer() { python3 "$ZN_XFER" "$1" --host "$ZN_ADDR_B" --port "$XFER_PORT" --size "$SIZE" --seed "$2" "${@:3}"; }
zn_case "TCP a->b, $SIZE bytes, byte-exact (guest b's verdict)" xfer check 11
zn_case "TCP b->a, $SIZE bytes, byte-exact" xfer fetch 12
corrupt_caught() {
	local out
	if out=$(xfer check 13 --corrupt 777777); then
		echo "a corrupted transfer passed guest b's check: $out"
		return 1
	fi
	echo "$out" | grep -q '^peer: mismatch:' || { echo "$out"; return 1; }
}
zn_case "guest b's check fails on one corrupted byte" corrupt_caught

iperf() {
	local out gbps
	out=$(timeout 60 iperf3 -c "$ZN_ADDR_B" -p "$IPERF_PORT" -t 3 -J) || { echo "iperf3 failed: $out" | head -n 20; return 1; }
	gbps=$(printf '%s' "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)
if "error" in r:
    sys.exit("iperf3: " + r["error"])
recv = r["end"]["sum_received"]
if recv["bytes"] <= 0:
    sys.exit("iperf3 moved no data: %r" % recv)
print("%.3f" % (recv["bits_per_second"] / 1e9))
') || return 1
	zn_diag "iperf3 a->b across the guests, 3 s: $gbps Gbit/s"
}
zn_case "iperf3 a->b across the guests, nonzero throughput" iperf

ktap_finished

#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The link between side a and side b (topology two-port: the ZeroNIC's two
# ports, each in its own netns; or any pair given by the ZN_* variables, see
# qemu/guest/net-setup): carrier, ping both ways up to the MTU with DF, ARP,
# the interface counters, and MTU changes (1500, 9000, back), with pings
# larger than the MTU refused locally under DF and fragmented without it.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/net_lib.sh"

# IPv4 + ICMP headers: a ping of S payload bytes is an S + 28 byte packet.
HDRS=28
COUNT=20

carrier() {
	local s v
	for s in a b; do
		v=$(zn_in "$s" cat "/sys/class/net/$(zn_side_if "$s")/carrier") ||
			{ echo "side $s: cannot read carrier"; return 1; }
		[ "$v" = 1 ] || { echo "side $s: carrier=$v"; return 1; }
	done
}

# pings FROM SIZE...: 3 DF pings of each size from side FROM, all answered
# (-c with -w fails unless every reply arrives).
pings() {
	local from=$1 s to
	shift
	to=$(zn_side_addr "$(zn_other "$from")")
	for s in "$@"; do
		zn_in "$from" ping -n -q -c 3 -i 0.2 -w 10 -M "do" -s "$s" "$to" ||
			{ echo "side $from: DF ping of $s bytes to $to failed"; return 1; }
	done
}

# too_big FROM SIZE: a DF ping that cannot fit the MTU fails locally with
# EMSGSIZE, sending nothing, and the link still works afterwards.
too_big() {
	local from=$1 s=$2 out
	if out=$(zn_in "$from" ping -n -c 1 -w 3 -M "do" -s "$s" "$(zn_side_addr "$(zn_other "$from")")" 2>&1); then
		echo "side $from: a DF ping of $s bytes over MTU $(zn_mtu "$from") succeeded: $out"
		return 1
	fi
	echo "$out" | grep -q 'message too long' || { echo "no local EMSGSIZE: $out"; return 1; }
	pings "$from" 56
}

# neigh SIDE: SIDE's neighbour entry for the other side's address holds the
# other side's MAC.
neigh() {
	local s=$1 o mac entry
	o=$(zn_other "$s")
	mac=$(zn_in "$o" cat "/sys/class/net/$(zn_side_if "$o")/address")
	entry=$(zn_in "$s" ip neigh show "$(zn_side_addr "$o")" dev "$(zn_side_if "$s")")
	echo "$entry" | grep -Eq "lladdr $mac (REACHABLE|STALE|DELAY|PROBE)" ||
		{ echo "side $s: want lladdr $mac, have '$entry'"; return 1; }
}
neighs() { neigh a && neigh b; }

# counters SIDE BEFORE AFTER: between two zn_stats snapshots of SIDE, at
# least COUNT packets of COUNT * (SIZE + HDRS) bytes each way (the driver may
# or may not count the Ethernet header; other traffic only adds).
counters() {
	local s=$1 size=$2 rp0 rb0 tp0 tb0 rp1 rb1 tp1 tb1 min_b
	read -r rp0 rb0 tp0 tb0 <<<"$3"
	read -r rp1 rb1 tp1 tb1 <<<"$4"
	min_b=$((COUNT * (size + HDRS)))
	zn_diag "side $s: rx +$((rp1 - rp0)) packets +$((rb1 - rb0)) bytes, tx +$((tp1 - tp0)) packets +$((tb1 - tb0)) bytes; want >= $COUNT packets, $min_b bytes each way"
	[ $((rp1 - rp0)) -ge "$COUNT" ] && [ $((tp1 - tp0)) -ge "$COUNT" ] &&
		[ $((rb1 - rb0)) -ge "$min_b" ] && [ $((tb1 - tb0)) -ge "$min_b" ]
}

set_mtu() {
	local m=$1 s
	for s in a b; do
		zn_in "$s" ip link set dev "$(zn_side_if "$s")" mtu "$m" || return 1
		[ "$(zn_mtu "$s")" = "$m" ] || { echo "side $s: mtu $(zn_mtu "$s"), want $m"; return 1; }
	done
	# The port may bounce on an MTU change: wait for carrier again.
	for s in a b; do zn_net_carrier "$(zn_side_ns "$s")" "$(zn_side_if "$s")"; done
}

# at_mtu M: DF pings of the largest size each way.
at_mtu() { pings a 56 $(($1 - HDRS)) && pings b 56 $(($1 - HDRS)); }

zn_net_start 15

mtu_a=$(zn_mtu a) mtu_b=$(zn_mtu b)
mtu=$((mtu_a < mtu_b ? mtu_a : mtu_b))

zn_case "carrier is up on both sides" carrier
zn_case "DF ping a->b of 56, 1000 and $((mtu - HDRS)) bytes (MTU $mtu)" pings a 56 1000 $((mtu - HDRS))
zn_case "DF ping b->a of 56, 1000 and $((mtu - HDRS)) bytes (MTU $mtu)" pings b 56 1000 $((mtu - HDRS))
zn_case "ARP resolved: each side's neighbour entry holds the other's MAC" neighs

before_a=$(zn_stats a) before_b=$(zn_stats b)
flood() { zn_in a ping -n -q -c "$COUNT" -i 0.05 -w 30 -s 1000 "$ZN_ADDR_B"; }
zn_case "$COUNT pings of 1000 bytes a->b, all answered" flood
after_a=$(zn_stats a) after_b=$(zn_stats b)
zn_case "side a counters: $COUNT requests out, $COUNT replies in" counters a 1000 "$before_a" "$after_a"
zn_case "side b counters: $COUNT requests in, $COUNT replies out" counters b 1000 "$before_b" "$after_b"

zn_case "MTU 1500 on both sides" set_mtu 1500
zn_case "DF pings up to 1472 bytes both ways at MTU 1500" at_mtu 1500
zn_case "DF ping of 1473 bytes refused locally at MTU 1500" too_big a 1473
zn_case "ping of 4000 bytes without DF is fragmented and answered at MTU 1500" \
	zn_in a ping -n -q -c 3 -i 0.2 -w 10 -M dont -s 4000 "$ZN_ADDR_B"
zn_case "MTU 9000 on both sides" set_mtu 9000
zn_case "DF pings up to 8972 bytes both ways at MTU 9000" at_mtu 9000
zn_case "DF ping of 8973 bytes refused locally at MTU 9000" too_big b 8973

restore() {
	zn_in a ip link set dev "$ZN_IF_A" mtu "$mtu_a" &&
		zn_in b ip link set dev "$ZN_IF_B" mtu "$mtu_b" &&
		zn_net_carrier "$ZN_NS_A" "$ZN_IF_A" && zn_net_carrier "$ZN_NS_B" "$ZN_IF_B" &&
		pings a 56 $((mtu - HDRS))
}
zn_case "MTUs back to $mtu_a/$mtu_b, DF pings of $((mtu - HDRS)) bytes pass" restore

ktap_finished

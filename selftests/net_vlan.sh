#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# 802.1Q VLANs over the link (topology two-port): a VLAN device on each side
# (id 100, 10.93.0.1/2), DF pings through it up to its full MTU (the frame
# on the wire is MTU + 18 bytes: Ethernet header and the 4-byte tag) both
# ways, byte-exact TCP transfers through it both ways (full-size segments),
# and the same pings at MTU 9000. The NIC carries tagged frames up to
# MTU + 18 (docs/hardware.md) and the driver's RX buffers hold them; a NIC
# or driver that drops them fails here rather than silently losing them.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/net_lib.sh"

VID=100
VADDR_A=10.93.0.1 VADDR_B=10.93.0.2
HDRS=28
SIZE=${ZN_VLAN_SIZE:-4194304}
# A link that drops full-size tagged frames stalls TCP: give up after 30 s.
export ZN_XFER_TIMEOUT=${ZN_XFER_TIMEOUT:-30}
port=5500

zn_net_start 8
mtu_a=$(zn_mtu a) mtu_b=$(zn_mtu b)
vlan_a=$ZN_IF_A.$VID vlan_b=$ZN_IF_B.$VID

cleanup() {
	zn_in a ip link del "$vlan_a" 2>/dev/null
	zn_in b ip link del "$vlan_b" 2>/dev/null
	zn_in a ip link set dev "$ZN_IF_A" mtu "$mtu_a" 2>/dev/null
	zn_in b ip link set dev "$ZN_IF_B" mtu "$mtu_b" 2>/dev/null
}
trap cleanup EXIT

vlans_up() {
	local s dev vdev addr
	for s in a b; do
		dev=$(zn_side_if "$s") vdev=$dev.$VID
		addr=$([ "$s" = a ] && echo "$VADDR_A" || echo "$VADDR_B")
		zn_in "$s" ip link add link "$dev" name "$vdev" type vlan id "$VID" &&
			zn_in "$s" ip addr add "$addr/24" dev "$vdev" &&
			zn_in "$s" ip link set dev "$vdev" up || { echo "side $s: cannot set up $vdev"; return 1; }
	done
	zn_net_carrier "$ZN_NS_A" "$vlan_a"
	zn_net_carrier "$ZN_NS_B" "$vlan_b"
}
zn_case_here "VLAN $VID devices on both ports ($vlan_a $VADDR_A, $vlan_b $VADDR_B)" vlans_up

# vping FROM SIZE...: 3 DF pings of each size through the VLAN, all answered.
vping() {
	local from=$1 s to
	shift
	to=$([ "$from" = a ] && echo "$VADDR_B" || echo "$VADDR_A")
	for s in "$@"; do
		zn_in "$from" ping -n -q -c 3 -i 0.2 -w 10 -M do -s "$s" "$to" >/dev/null ||
			{ echo "side $from: DF ping of $s bytes to $to through VLAN $VID failed"; return 1; }
	done
}
mtu=$((mtu_a < mtu_b ? mtu_a : mtu_b))
zn_case "DF ping a->b through the VLAN: 56 bytes and the full MTU ($((mtu - HDRS)) bytes, $((mtu + 18))-byte frames)" \
	vping a 56 $((mtu - HDRS))
zn_case "DF ping b->a through the VLAN: 56 bytes and the full MTU ($((mtu - HDRS)) bytes)" \
	vping b 56 $((mtu - HDRS))
zn_case "TCP a->b through the VLAN, $SIZE bytes, byte-exact" zn_xfer a "$SIZE" $((port += 1)) --to "$VADDR_B"
zn_case "TCP b->a through the VLAN, $SIZE bytes, byte-exact" zn_xfer b "$SIZE" $((port += 1)) --to "$VADDR_A"

jumbo() {
	local s
	for s in a b; do
		zn_in "$s" ip link set dev "$(zn_side_if "$s")" mtu 9000 || return 1
		zn_in "$s" ip link set dev "$(zn_side_if "$s").$VID" mtu 9000 || return 1
	done
	zn_net_carrier "$ZN_NS_A" "$vlan_a"
	zn_net_carrier "$ZN_NS_B" "$vlan_b"
}
zn_case_here "MTU 9000 on the ports and the VLAN devices" jumbo
jumbo_pings() { vping a $((9000 - HDRS)) && vping b $((9000 - HDRS)); }
zn_case "DF pings of $((9000 - HDRS)) bytes through the VLAN both ways at MTU 9000" jumbo_pings

removed() {
	cleanup
	! zn_in a ip link show dev "$vlan_a" >/dev/null 2>&1 || { echo "$vlan_a still there"; return 1; }
	zn_in a ping -n -q -c 2 -w 10 -M do -s $((mtu_a - HDRS)) "$ZN_ADDR_B" >/dev/null ||
		{ echo "the untagged link does not work at MTU $mtu_a afterwards"; return 1; }
}
zn_case_here "VLAN devices removed, MTUs restored, the untagged link still works" removed

ktap_finished

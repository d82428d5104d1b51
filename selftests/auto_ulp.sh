#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# net.ipv4.tcp_auto_ulp (patch 0040, docs/uapi.md "Attaching every
# connection of a namespace"), topology two-port: with the setting
# "zeronic" in both sides' namespaces, connections of a program that never
# sets TCP_ULP (auto_ulp.py: it reads TCP_ULP back) are attached at
# accept() and at a connect() that returns 0, and stay plain where the ULP
# refuses them. Cases:
#  1. off ("") by default, per namespace;
#  2. a name no registered ULP has is refused (ENOENT), nothing changes;
#  3. an unprivileged user cannot set it;
#  4. "zeronic" set in both sides' namespaces, the host's stays "";
#  5. a blocking connect and its accept are attached, 16 MiB echoed byte
#     for byte, the NIC placed bytes of it (zc_rx_placed_bytes);
#  6. a non-blocking connect is attached by the connect() that completes it;
#  7. a non-blocking connect without that second connect() stays plain
#     (documented), its accepted end is attached, the echo still exact;
#  8. a loopback connection stays plain at both ends (the ULP refuses it:
#     not over a ZeroNIC port), the echo exact;
#  9. set back to "", new connections are not attached;
# 10. no region, pin or flow left afterwards.
set -u
. "$(dirname "$0")/lib.sh"

zn_need_topology two-port

. "$(dirname "$0")/net_lib.sh"

PY=$(dirname "$0")/auto_ulp.py
PERF=$ZN_ROOT/target/release/zn-perf
SYSCTL=net.ipv4.tcp_auto_ulp

zn_load
zn_net_start 10

TMPD=$(mktemp -d)
trap 'zn_in a sysctl -qw $SYSCTL= 2>/dev/null; zn_in b sysctl -qw $SYSCTL= 2>/dev/null; rm -rf "$TMPD"' EXIT
ADDR_B=${ZN_ADDR_B%/*}
BEFORE=$(zn_nic_use "$PERF")

# placed: zc_rx_placed_bytes of both ports.
placed() {
	local s
	for s in a b; do
		zn_in $s ethtool -S "$(zn_side_if $s)"
	done | awk '$1 == "zc_rx_placed_bytes:" { n += $2 } END { printf "%.0f\n", n }'
}

# pair NAME PORT MODE BYTES [SERVER_SIDE SERVER_ADDR CLIENT_SIDE]: one
# connection, server on b and client on a unless given; prints "ACCEPTED
# CONNECTED ECHO" (the ULPs each end read, "-" for none; "ok" or what
# differed).
pair() {
	local name=$1 port=$2 mode=$3 bytes=$4 ss=${5:-b} addr=${6:-$ADDR_B} cs=${7:-a} spid ZN_PFX
	zn_pfx "$ss"
	"${ZN_PFX[@]}" timeout -k 5 60 python3 "$PY" server "$addr" "$port" 1 >"$TMPD/$name.srv" 2>&1 &
	spid=$!
	zn_wait_listen "$ss" "$port" "$spid" || { kill "$spid"; echo "- - server did not listen"; return 1; }
	zn_in "$cs" timeout -k 5 60 python3 "$PY" client "$addr" "$port" "$mode" "$bytes" >"$TMPD/$name.cli" 2>&1
	wait "$spid"
	echo "$(awk '/^accepted/ { print $2 }' "$TMPD/$name.srv") $(awk '/^connected/ { print $2 }' "$TMPD/$name.cli") $(grep -q '^echo ok' "$TMPD/$name.cli" && echo ok || tr '\n' ' ' <"$TMPD/$name.cli")"
}

# expect NAME PORT MODE BYTES WANT_ACCEPTED WANT_CONNECTED [SIDES...]
expect() {
	local got want="$5 $6 ok"
	got=$(pair "$1" "$2" "$3" "$4" "${@:7}")
	[ "$got" = "$want" ] || { echo "got '$got', want '$want'"; cat "$TMPD/$1.srv" "$TMPD/$1.cli"; return 1; }
}

off_by_default() {
	local s v
	for s in a b; do
		v=$(zn_in $s sysctl -n $SYSCTL) || { echo "no $SYSCTL in side $s's namespace"; return 1; }
		[ -z "$v" ] || { echo "side $s: '$v', want ''"; return 1; }
	done
}
zn_case "$SYSCTL is off (\"\") by default in each namespace" off_by_default

unknown_refused() {
	local out
	# sysctl names the errno (dash's echo says "I/O error" for any).
	if out=$(zn_in a sysctl -w $SYSCTL=nosuch 2>&1); then
		echo "writing 'nosuch' succeeded"
		return 1
	fi
	grep -q 'No such file or directory' <<<"$out" || { echo "writing 'nosuch': '$out', want ENOENT"; return 1; }
	[ -z "$(zn_in a sysctl -n $SYSCTL)" ] || { echo "the setting changed"; return 1; }
}
zn_case "a name no registered ULP has is refused with ENOENT, the setting unchanged" unknown_refused

unprivileged_refused() {
	if zn_in a setpriv --reuid=65534 --regid=65534 --clear-groups sh -c "echo zeronic > /proc/sys/net/ipv4/tcp_auto_ulp" 2>/dev/null; then
		echo "user nobody set it"
		return 1
	fi
	[ -z "$(zn_in a sysctl -n $SYSCTL)" ] || { echo "the setting changed"; return 1; }
}
zn_case "an unprivileged user cannot set it" unprivileged_refused

set_both() {
	local s
	for s in a b; do
		zn_in $s sysctl -qw $SYSCTL=zeronic || return 1
		[ "$(zn_in $s sysctl -n $SYSCTL)" = zeronic ] || { echo "side $s reads '$(zn_in $s sysctl -n $SYSCTL)'"; return 1; }
	done
	[ -z "$(sysctl -n $SYSCTL)" ] || { echo "the host's namespace reads '$(sysctl -n $SYSCTL)'"; return 1; }
}
zn_case "set to zeronic in both sides' namespaces; the host's stays \"\"" set_both

blocking() {
	local p0 p1
	p0=$(placed)
	expect blocking 7101 blocking $((16 << 20)) zeronic zeronic || return 1
	p1=$(placed)
	zn_diag "blocking: the NIC placed $((p1 - p0)) bytes of the 32 MiB both ways"
	[ $((p1 - p0)) -gt 0 ] || { echo "the NIC placed nothing"; return 1; }
}
zn_case "a blocking connect and its accept are attached; 16 MiB echoed exactly, placed by the NIC" blocking

zn_case "a non-blocking connect is attached by the connect() that completes it" \
	expect reconnect 7102 nonblock-reconnect $((1 << 20)) zeronic zeronic

zn_case "a non-blocking connect without a second connect() stays plain; its accepted end is attached" \
	expect nonblock 7103 nonblock $((1 << 20)) zeronic -

loopback() {
	zn_in b ip link set lo up || return 1
	expect loopback 7104 blocking $((1 << 20)) - - b 127.0.0.1 b
}
zn_case "a loopback connection stays plain at both ends (the ULP refuses it), the echo exact" loopback

turned_off() {
	local s
	for s in a b; do
		zn_in $s sysctl -qw $SYSCTL= || return 1
	done
	expect off 7105 blocking $((1 << 20)) - -
}
zn_case "set back to \"\": new connections are not attached" turned_off

zn_case "no region, pin or flow left afterwards" zn_nic_use_back "$PERF" "$BEFORE" 11

ktap_finished

#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ethtool's configuration operations on a port and what they do to the NIC:
# channels (-l/-L), rings (-g/-G, tcp-data-split, hds-thresh), coalescing
# (-c/-C, rx-cqe-frames) read back from the NIC's registers (BAR2), link
# settings, and per-queue statistics (netdev netlink qstats) against
# `ip -s link` and `ethtool -S`. Two-port topology; side a is zn0.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/net_lib.sh"

zn_net_start 8

# One process of zn_ynl.py (the 7.3 tree's netlink library; it speaks what
# Debian 12's ethtool 6.1 predates: tcp-data-split, hds-thresh,
# rx-cqe-frames, qstats) answers every request, in side a's netns: loading
# a spec costs some 20 s under TCG.
# Through two FIFOs opened by this shell, not a coprocess: bash does not
# hand a coprocess's descriptors to the subshells the cases run in.
ynl_dir=$(mktemp -d)
mkfifo "$ynl_dir/req" "$ynl_dir/rep"
zn_in a python3 "$(dirname "$0")/zn_ynl.py" <"$ynl_dir/req" >"$ynl_dir/rep" &
ynl_pid=$!
exec {YNL_REQ}>"$ynl_dir/req" {YNL_REP}<"$ynl_dir/rep"
trap 'exec {YNL_REQ}>&-; kill $ynl_pid 2>/dev/null; rm -rf "$ynl_dir"' EXIT
# ynl FAMILY do|dump OP JSON: prints the reply; fails on a netlink error.
ynl() {
	local reply
	echo "$*" >&"$YNL_REQ"
	read -r -t 180 reply <&"$YNL_REP" || { echo "zn_ynl.py did not answer: $*"; return 1; }
	echo "$reply"
	case "$reply" in '{"error": '*) return 1 ;; esac
}
HDR='"header": {"dev-name": "'$ZN_IF_A'"}'
# get JSON KEY: one value of a JSON object on stdin ("" if absent).
get() { python3 -c 'import json, sys; print(json.load(sys.stdin).get(sys.argv[1], ""))' "$1"; }
rings() { ynl ethtool do rings-get "{$HDR}" | get "$1"; }
coal() { ynl ethtool do coalesce-get "{$HDR}" | get "$1"; }

# reg OFFSET: a 32-bit register of the NIC's register file (BAR2), read
# through the PCI function's resource2 as zn-probe does.
reg() {
	python3 - "$ZN_PCI/resource2" "$1" <<'PY'
import mmap, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
m = mmap.mmap(fd, 0x10000, mmap.MAP_SHARED, mmap.PROT_READ)
print(struct.unpack_from("<I", m, int(sys.argv[2], 0))[0])
PY
}
# Port 0's vectors (hardware spec, Appendix A): vec_block(v) = 0x200 + 16 v,
# vec_rx(0) = 1, vec_tx(0) = 2; VEC_ITR_USECS +4, VEC_ITR_ENTRIES +8;
# PORT_COALESCE_BYTES = port_block(0) + 0x10 = 0x1010.
RX_USECS=$((0x200 + 16 + 4)) RX_ENTRIES=$((0x200 + 16 + 8))
TX_USECS=$((0x200 + 32 + 4)) TX_ENTRIES=$((0x200 + 32 + 8))
COALESCE_BYTES=0x1010

# expect WHAT GOT WANT
expect() { [ "$2" = "$3" ] || { echo "$1: got '$2', want '$3'"; return 1; }; }
refused() { ! "$@" >/dev/null 2>&1 || { echo "accepted: $*"; return 1; }; }
pings() { zn_in a ping -c "${1:-5}" -i 0.2 -W 2 "$ZN_ADDR_B" >/dev/null || { echo "pings failed"; return 1; }; }

# REG_MAX_QP (hardware spec, Appendix A): queue pairs per port the NIC serves.
MAX_QP_REG=0x038
# qp_stat QP SLOT: a queue pair's QSTAT_* counter of port 0 (qp_block(0, qp)
# + QP_STATS = 0x2000 + 0x200 qp + 0x100; slot 0 = QSTAT_RX_PACKETS).
qp_stat() {
	python3 - "$ZN_PCI/resource2" $((0x2000 + 0x200 * $1 + 0x100 + 8 * $2)) <<'PY'
import mmap, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
m = mmap.mmap(fd, 0x10000, mmap.MAP_SHARED, mmap.PROT_READ)
print(struct.unpack_from("<Q", m, int(sys.argv[2]))[0])
PY
}
# napis: "NAPI-ID IRQ" of each NAPI of side a's port, one per line.
napis() {
	local ifindex
	ifindex=$(zn_in a cat "/sys/class/net/$ZN_IF_A/ifindex")
	ynl netdev dump napi-get "{\"ifindex\": $ifindex}" | python3 -c '
import json, sys
for n in json.load(sys.stdin):
    print(n["id"], n.get("irq", "none"))'
}
channels() {
	local out max n rx0 rx1 q1 i
	out=$(ynl ethtool do channels-get "{$HDR}") || return 1
	echo "$out"
	max=$(reg $MAX_QP_REG)
	[ "$max" -ge 2 ] || { echo "the NIC serves $max queue pairs per port (the harness gives it vectors for 2)"; return 1; }
	expect combined-max "$(get combined-max <<<"$out")" "$max" || return 1
	expect other-max "$(get other-max <<<"$out")" 1 || return 1
	expect other-count "$(get other-count <<<"$out")" 1 || return 1
	n=$(get combined-count <<<"$out")
	# One per CPU by default, at most what the NIC serves.
	expect combined-count "$n" "$(( $(nproc) < max ? $(nproc) : max ))" || return 1
	refused zn_in a ethtool -L "$ZN_IF_A" other 0 || return 1
	refused zn_in a ethtool -L "$ZN_IF_A" rx 1 tx 1 combined 0 || return 1
	refused zn_in a ethtool -L "$ZN_IF_A" combined $((max + 1)) || return 1
	zn_in a ethtool -L "$ZN_IF_A" combined "$max" || return 1
	expect queues "$(zn_in a ls "/sys/class/net/$ZN_IF_A/queues" | grep -c '^rx-')" "$max" || return 1
	# One NAPI per queue pair, each with its RX vector's IRQ.
	out=$(napis) || return 1
	echo "$out"
	expect napis "$(wc -l <<<"$out")" "$max" || return 1
	! grep -q ' none$' <<<"$out" || { echo "a NAPI reports no IRQ"; return 1; }
	# RSS spreads connections over the queue pairs: 16 short TCP
	# connections to different ports reach queue pair 1 too.
	rx0=$(qp_stat 0 0) rx1=$(qp_stat 1 0)
	for i in $(seq 1 16); do
		zn_in a timeout 10 bash -c "exec 3<>/dev/tcp/$ZN_ADDR_B/$((6000 + i))" 2>/dev/null || true
	done
	pings 5 || return 1
	q1=$(( $(qp_stat 1 0) - rx1 ))
	echo "frames on queue pair 0: $(( $(qp_stat 0 0) - rx0 )), on queue pair 1: $q1"
	[ "$q1" -gt 0 ] || { echo "nothing was steered to queue pair 1"; return 1; }
	zn_in a ethtool -L "$ZN_IF_A" combined 1 || return 1
	expect queues "$(zn_in a ls "/sys/class/net/$ZN_IF_A/queues" | grep -c '^rx-')" 1 || return 1
	expect napis "$(napis | wc -l)" 1 || return 1
	pings 5 || return 1
	zn_in a ethtool -L "$ZN_IF_A" combined "$n"
}
zn_case "ethtool -l/-L: combined channels are queue pairs, each with its NAPI and IRQ; RSS uses them" channels

ring_sizes() {
	local rx tx max
	rx=$(rings rx) tx=$(rings tx) max=$(rings rx-max)
	echo "rx $rx tx $tx max $max"
	expect tx-max "$(rings tx-max)" "$max" || return 1
	[ $((max & (max - 1))) = 0 ] && [ "$max" -ge "$rx" ] || { echo "bad max $max"; return 1; }
	zn_in a ethtool -G "$ZN_IF_A" rx 100 tx 40 || return 1
	expect "rx after -G rx 100" "$(rings rx)" 128 || return 1
	expect "tx after -G tx 40" "$(rings tx)" 64 || return 1
	pings 5 || return 1
	refused zn_in a ethtool -G "$ZN_IF_A" rx 8 || return 1
	refused zn_in a ethtool -G "$ZN_IF_A" tx $((max * 2)) || return 1
	zn_in a ethtool -G "$ZN_IF_A" rx "$rx" tx "$tx" || return 1
	expect "rx restored" "$(rings rx)" "$rx" && pings 3
}
zn_case "ethtool -G: sizes round up to a power of two, stay within the maximum, carry traffic" ring_sizes

moderation() {
	zn_in a ethtool -c "$ZN_IF_A" | grep -E '^(rx|tx)-(usecs|frames):'
	expect "default rx-usecs" "$(coal rx-usecs)" 0 || return 1
	expect "default tx-usecs/frames" "$(coal tx-usecs)/$(coal tx-max-frames)" 64/32 || return 1
	expect "default registers" "$(reg $RX_USECS)/$(reg $RX_ENTRIES) $(reg $TX_USECS)/$(reg $TX_ENTRIES)" "0/1 64/32" || return 1
	zn_in a ethtool -C "$ZN_IF_A" rx-usecs 50 rx-frames 16 tx-usecs 100 tx-frames 8 || return 1
	expect "registers" "$(reg $RX_USECS)/$(reg $RX_ENTRIES) $(reg $TX_USECS)/$(reg $TX_ENTRIES)" "50/16 100/8" || return 1
	expect "ethtool -c" "$(coal rx-usecs)/$(coal rx-max-frames) $(coal tx-usecs)/$(coal tx-max-frames)" "50/16 100/8" || return 1
	pings 5 || return 1
	# Time only: a count no ring reaches.
	zn_in a ethtool -C "$ZN_IF_A" rx-usecs 20 rx-frames 0 || return 1
	expect "rx-frames 0" "$(reg $RX_ENTRIES) $(coal rx-max-frames)" "4294967295 0" || return 1
	refused zn_in a ethtool -C "$ZN_IF_A" rx-usecs 0 rx-frames 8 || return 1
	refused zn_in a ethtool -C "$ZN_IF_A" rx-usecs 0 rx-frames 0 || return 1
	refused zn_in a ethtool -C "$ZN_IF_A" adaptive-rx on || return 1
	zn_in a ethtool -C "$ZN_IF_A" rx-usecs 0 rx-frames 1 tx-usecs 64 tx-frames 32 || return 1
	expect "restored" "$(reg $RX_USECS)/$(reg $RX_ENTRIES) $(reg $TX_USECS)/$(reg $TX_ENTRIES)" "0/1 64/32"
}
zn_case "ethtool -C: rx/tx-usecs and -frames are the port vectors' VEC_ITR_USECS/ENTRIES" moderation

cqe() {
	local mtu max
	mtu=$(zn_mtu a)
	max=$(( (65455 + mtu - 41) / (mtu - 40) ))
	expect "rx-cqe-frames at MTU $mtu" "$(coal rx-cqe-frames)" "$max" || return 1
	expect "default limit" "$(reg $COALESCE_BYTES)" 65455 || return 1
	ynl ethtool do coalesce-set "{$HDR, \"rx-cqe-frames\": 2}" >/dev/null || return 1
	expect "2 frames" "$(reg $COALESCE_BYTES) $(coal rx-cqe-frames)" "$((2 * (mtu - 40))) 2" || return 1
	ynl ethtool do coalesce-set "{$HDR, \"rx-cqe-frames\": 1}" >/dev/null || return 1
	expect "1 frame: no coalescing" "$(reg $COALESCE_BYTES)" 0 || return 1
	refused ynl ethtool do coalesce-set "{$HDR, \"rx-cqe-frames\": 0}" || return 1
	refused ynl ethtool do coalesce-set "{$HDR, \"rx-cqe-frames\": $((max + 1))}" || return 1
	refused ynl ethtool do coalesce-set "{$HDR, \"rx-cqe-nsecs\": 1000}" || return 1
	ynl ethtool do coalesce-set "{$HDR, \"rx-cqe-frames\": $max}" >/dev/null || return 1
	expect "back to the default" "$(reg $COALESCE_BYTES)" 65455
}
zn_case "rx-cqe-frames is the header-entry coalescing limit (PORT_COALESCE_BYTES)" cqe

split() {
	expect "default" "$(rings tcp-data-split) $(rings hds-thresh) $(rings hds-thresh-max)" "enabled 0 0" || return 1
	ynl ethtool do rings-set "{$HDR, \"tcp-data-split\": \"disabled\"}" >/dev/null || return 1
	expect "off" "$(rings tcp-data-split)" disabled || return 1
	pings 3 || return 1
	refused ynl ethtool do rings-set "{$HDR, \"hds-thresh\": 1}" || return 1
	ynl ethtool do rings-set "{$HDR, \"tcp-data-split\": \"enabled\"}" >/dev/null || return 1
	expect "on" "$(rings tcp-data-split)" enabled || return 1
	ynl ethtool do rings-set "{$HDR, \"tcp-data-split\": \"unknown\"}" >/dev/null || return 1
	expect "unconfigured reads as on" "$(rings tcp-data-split)" enabled
}
zn_case "tcp-data-split: on unless set off; hds-thresh is 0 and nothing else" split

link() {
	local out
	out=$(zn_in a ethtool "$ZN_IF_A") || return 1
	printf '%s\n' "$out" | grep -E 'Speed|Duplex|Port:|Auto-negotiation|Link detected'
	for l in 'Speed: Unknown!' 'Duplex: Full' 'Port: Other' 'Auto-negotiation: off' 'Link detected: yes'; do
		printf '%s\n' "$out" | grep -qF "$l" || { echo "no '$l'"; return 1; }
	done
	refused zn_in a ethtool -s "$ZN_IF_A" speed 1000 duplex full
}
zn_case "link settings: an emulated wire, full duplex, no autonegotiation, no fixed speed" link

# sums: "rx-packets rx-bytes tx-packets tx-bytes" from the four sources, one
# line each: qstats (device), qstats (sum of queues), ip -s link, ethtool -S.
sums() {
	local ifindex
	ifindex=$(zn_in a cat "/sys/class/net/$ZN_IF_A/ifindex")
	ynl netdev dump qstats-get "{\"ifindex\": $ifindex}" | python3 -c '
import json, sys
d = json.load(sys.stdin)[0]
print(d["rx-packets"], d["rx-bytes"], d["tx-packets"], d["tx-bytes"])'
	ynl netdev dump qstats-get "{\"ifindex\": $ifindex, \"scope\": \"queue\"}" | python3 -c '
import json, sys
s = {"rx": [0, 0], "tx": [0, 0]}
for q in json.load(sys.stdin):
    t = q["queue-type"]
    s[t][0] += q[t + "-packets"]
    s[t][1] += q[t + "-bytes"]
print(*s["rx"], *s["tx"])'
	zn_stats a
	zn_in a ethtool -S "$ZN_IF_A" | awk '$1 ~ /^rx[0-9]+_packets:/ {rp += $2} $1 ~ /^rx[0-9]+_bytes:/ {rb += $2}
		$1 ~ /^tx[0-9]+_packets:/ {tp += $2} $1 ~ /^tx[0-9]+_bytes:/ {tb += $2}
		END {print rp + 0, rb + 0, tp + 0, tb + 0}'
}
qstats() {
	local out i n
	# Every queue pair active: the per-queue dump covers active queues
	# only (the device's total adds the base statistics of the others).
	n=$(zn_in a ethtool -l "$ZN_IF_A" | awk '/^Combined:/ {print $2}' | tail -n1)
	zn_in a ethtool -L "$ZN_IF_A" combined "$(reg $MAX_QP_REG)" || return 1
	pings 10 || return 1
	# Quiet link: retry while a stray frame (neighbour discovery) lands
	# between two reads.
	for i in 1 2 3 4 5; do
		out=$(sums) || return 1
		[ "$(sort -u <<<"$out" | wc -l)" = 1 ] && break
		zn_nap 0.5
	done
	paste -d' ' <(printf '%s\n' "qstats:" "queues:" "ip -s link:" "ethtool -S:") - <<<"$out"
	zn_in a ethtool -L "$ZN_IF_A" combined "$n" || return 1
	[ "$(sort -u <<<"$out" | wc -l)" = 1 ] || { echo "the four sources disagree"; return 1; }
	[ "$(cut -d' ' -f1 <<<"$out" | head -n1)" -ge 10 ] || { echo "too few packets counted"; return 1; }
}
zn_case "qstats (device and per queue), ip -s link and ethtool -S agree" qstats

# csum_counts: "csum-unnecessary csum-none" summed over the RX queues (RSS
# puts a flow on any of them).
csum_counts() {
	local ifindex
	ifindex=$(zn_in a cat "/sys/class/net/$ZN_IF_A/ifindex")
	ynl netdev dump qstats-get "{\"ifindex\": $ifindex, \"scope\": \"queue\"}" | python3 -c '
import json, sys
qs = [q for q in json.load(sys.stdin) if q["queue-type"] == "rx"]
print(sum(q.get("rx-csum-unnecessary", 0) for q in qs), sum(q.get("rx-csum-none", 0) for q in qs))'
}
rx_csum() {
	local u0 n0 u1 n1 u2 n2
	read -r u0 n0 <<<"$(csum_counts)"
	zn_in a ethtool -K "$ZN_IF_A" rx off || return 1
	zn_iperf b 1 1 5301 >/dev/null || { zn_in a ethtool -K "$ZN_IF_A" rx on; return 1; }
	read -r u1 n1 <<<"$(csum_counts)"
	zn_in a ethtool -K "$ZN_IF_A" rx on || return 1
	zn_iperf b 1 1 5302 >/dev/null || return 1
	read -r u2 n2 <<<"$(csum_counts)"
	echo "csum-unnecessary $u0 -> $u1 -> $u2, csum-none $n0 -> $n1 -> $n2"
	# Packets, not bytes: the NIC hands up coalesced segments of up to 64 KiB,
	# so a loaded TCG host may see only some 50 in a one-second transfer.
	# No CHECKSUM_UNNECESSARY while off is what tells the modes apart.
	[ "$u1" = "$u0" ] && [ "$n1" -gt $((n0 + 10)) ] && [ "$u2" -gt $((u1 + 10)) ]
}
zn_case "rx checksumming off: TCP arrives CHECKSUM_NONE; on: CHECKSUM_UNNECESSARY" rx_csum

ktap_finished

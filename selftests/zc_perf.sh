#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Acceptance tests of the zero-copy transfers (topology two-port): zn-perf
# (tools/zn-perf, target/release/zn-perf) between the NIC's two ports, side
# a (client) and side b (server) in their own network namespaces (see
# qemu/guest/net-setup). Every case checks the client's JSON document, which
# holds both ends' results, with python3's json module:
#
#  - both ends exit 0, every flow moved exactly the bytes asked in each of
#    its directions, and the digest of every stream (SHA-256; XXH64 with
#    ZN_PERF_HASH=xxh64) agrees end to end (--verify): every receiver
#    hashes every byte it got, and the client compares that with the
#    digest of the stream the sender generates,
#    computed once before the cases (zn-perf digest, --digests) rather than
#    by every sender hashing what it generates, which under TCG cost about
#    as much as the receiving;
#  - an offloaded receiver accounts for every byte as placed or copied
#    (placed + copied = received); an offloaded sender's NIC read every byte
#    (merged + txcopied >= sent);
#  - on the clean wire the payload was placed, not copied: copied is at most
#    what arrived before the attach, which zn-perf makes zero (both ends
#    attach and post before the first payload byte), so copied = 0 and no
#    completion is flagged COPIED (the receive window ends at the posted
#    room, so a lagging receiver stalls its peer instead of being copied
#    to; docs/design.md), but for at most one window-scale unit's bytes
#    (128) per COPIED completion: the window's granularity lets a peer put
#    that much past a room that ran out (docs/uapi.md). Under loss the
#    copies are reported;
#  - no flow ends reset (state attached or eof when its counters are read,
#    no error event while zn-perf detaches it);
#  - each wire case exercised what it exists for, as floors on the change
#    of both namespaces' TCP counters and both ports' NIC counters over the
#    case (zp_floors): at 1% and 5% loss each end retransmitted, and each
#    port placed frames out of order and dropped duplicates; on the clean
#    wire a receiver out of posted room stalled its peer (zero windows);
#  - after each run (both processes gone) the NIC-wide query shows
#    mr_in_use, pinned_pages and flows_in_use back to their value before it.
#
# Cases: both receive modes (message, stream) on a clean wire, at 1% loss
# and at 5% loss with reordering and duplication (qemu/guest/zn-wire), each
# transfer both ways at once (--bidir); the same over IPv6 on the clean wire
# and at 1% loss; an offloaded sender to a plain Linux TCP receiver and a
# plain sender to an offloaded receiver, over IPv4 and over IPv6; 64
# concurrent offloaded flows; an offloaded and a plain zn-perf pair at the
# same time over the same ports.
#
# Sizes (per direction; the ports run at MTU 65280 during the test, restored
# after, since at MTU 1500 TCG moves only about 20 MiB/s): the six
# wire/mode cases move 256 MiB each way, each receiver posting a sixteenth
# of that (zp_room), so every flow turns its posted room over 16 times per
# direction. The interop cases move 256M, the 64 flows 4M each, the mixed
# pairs 128M each. ZN_PERF_CLEAN, ZN_PERF_LOSS1, ZN_PERF_LOSS5 override the
# sizes of the clean, 1% and 5% loss cases (make check-soak: 1G each, 64
# MiB posted), ZN_PERF_WIRES the wires ("clean 1 5"), ZN_PERF_WIRES6 the
# wires of the IPv6 cases ("clean 1"), and ZN_PERF_EXTRA=0 leaves out the
# interop, 64-flow and mixed cases (make check-quick: the clean wire's two
# receive modes at 32M, over IPv4 and IPv6). The floors scale with the
# sizes and apply from 64 MiB up.
#
# Stream digests: every receiver hashes what it got; what it is compared
# with, the SHA-256 of each stream a case sends (flow i of a case sends the
# stream of seed 1 + i; the shorter ones are prefixes of the longest), is
# computed once (zn-perf digest) and given to the clients (--digests), so
# the senders generate their streams without hashing them. On the host,
# `zc_perf.sh --digests FILE` writes them (scripts/check does, to
# out/check/zc_perf.digests: a second natively); in the guest that file is
# used if it was made for this zn-perf binary and these sizes, else the
# digests are computed here (about 10 s of TCG with SHA-256).
set -u
ZN_ROOT=$(cd "$(dirname "$0")/.." && pwd)
PERF=${ZN_PERF_BIN:-$ZN_ROOT/target/release/zn-perf}
CLEAN=${ZN_PERF_CLEAN:-256M}
LOSS1=${ZN_PERF_LOSS1:-256M}
LOSS5=${ZN_PERF_LOSS5:-256M}
WIRES=${ZN_PERF_WIRES:-clean 1 5}
WIRES6=${ZN_PERF_WIRES6:-clean 1}
EXTRA=${ZN_PERF_EXTRA:-1}
# The digest (zn-perf --hash): the SHA-256 of every stream, as the
# acceptance asks; ZN_PERF_HASH=xxh64 checks its XXH64 instead (the
# receivers' hashing then costs about 0.4 guest CPU-seconds per GiB
# instead of 9, for quick runs; docs/testing.md). zn-perf refuses any
# other name (its first use is zn-perf digest).
HASH=${ZN_PERF_HASH:-sha256}
HOST_DIGESTS=$ZN_ROOT/out/check/zc_perf.digests

# zp_digest_head: the first line of a digest file: this zn-perf binary and
# the lengths of seed 1's stream.
zp_digest_head() {
	echo "# zn-perf $(sha256sum "$PERF" | cut -d' ' -f1) $HASH seed 1: 4M,128M,256M,$CLEAN,$LOSS1,$LOSS5; seeds 2-64: 4M"
}

# zp_digests OUT: the digest file (two processes: both CPUs).
zp_digests() {
	local out=$1 p rc=0
	zp_digest_head >"$out" || return 1
	"$PERF" digest --hash "$HASH" --seed 1 -n "4M,128M,256M,$CLEAN,$LOSS1,$LOSS5" >"$out.1" &
	p=$!
	"$PERF" digest --hash "$HASH" --seed 2 -P 63 -n 4M >"$out.2" || rc=1
	wait "$p" || rc=1
	cat "$out.1" "$out.2" >>"$out" || rc=1
	rm -f "$out.1" "$out.2"
	return "$rc"
}

if [ "${1:-}" = --digests ]; then
	zp_digests "${2:?zc_perf.sh --digests FILE}"
	exit
fi

. "$ZN_ROOT/selftests/lib.sh"

zn_need_topology two-port

. "$ZN_ROOT/selftests/net_lib.sh"

WIRE=$ZN_ROOT/qemu/guest/zn-wire
MTU=65280
# Seconds either zn-perf may take (its own stall timeout is 30 s).
TMO=600

zn_load
# Two receive modes per wire, then interop (2), 64 flows and mixed pairs.
zn_net_start $((($(wc -w <<<"$WIRES") + $(wc -w <<<"$WIRES6")) * 2 + (EXTRA == 0 ? 0 : 6)))

if [ ! -x "$PERF" ]; then
	ktap_exit_fail_msg "no $PERF (cargo build --release --workspace)"
fi

TMPD=$(mktemp -d)
ADDR_B=${ZN_ADDR_B%/*}
ADDR6_B=${ZN_ADDR6_B%/*}
# The server's address for zp_pair (zp_wires and the IPv6 cases set it).
HOST=$ADDR_B
MTU_A=$(zn_mtu a)
MTU_B=$(zn_mtu b)
cleanup() {
	"$WIRE" loss=0 reorder=0 dup=0 >/dev/null 2>&1
	zn_in a ip link set dev "$ZN_IF_A" mtu "$MTU_A" 2>/dev/null
	zn_in b ip link set dev "$ZN_IF_B" mtu "$MTU_B" 2>/dev/null
	rm -rf "$TMPD"
}
trap cleanup EXIT

cat >"$TMPD/check.py" <<'EOF'
# check.py DOC.json NAME BYTES FLOWS CLEAN(0|1): the checks of zc_perf.sh
# on a zn-perf client's JSON document; prints one summary line, and on
# failure what failed (exit 1).
import json, sys

path, name, nbytes, nflows, clean = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
bad = []
# The largest window-scale unit a connection here can have: the kernel picks
# the scale from the larger of tcp_rmem[2] and rmem_max (a window clamp only
# lowers it), as tcp_select_initial_window() does.
rmem = max(int(open("/proc/sys/net/ipv4/tcp_rmem").read().split()[2]),
           int(open("/proc/sys/net/core/rmem_max").read()))
UNIT = 1 << min(14, max(0, rmem.bit_length() - 1 - 15))
try:
    doc = json.load(open(path))
except (OSError, ValueError) as e:
    sys.exit("%s: no JSON document: %s" % (name, e))
if doc.get("verified") is not True:
    bad.append("not verified (verified=%r)" % doc.get("verified"))
res = doc["results"]
if len(res) != 1:
    bad.append("%d results" % len(res))
r = res[0]
if r.get("verified") is not True:
    bad.append("result not verified")
sides = {"a": r["local"], "b": r["remote"]}
if sides["b"] is None:
    sys.exit("%s: no result of the server" % name)
mib = nbytes / 2**20
parts = []
for s, side in sides.items():
    role = side["role"]
    sends = role in ("send", "both")
    recvs = role in ("recv", "both")
    if len(side["flows"]) != nflows:
        bad.append("side %s: %d flows, not %d" % (s, len(side["flows"]), nflows))
    tot = {"rx_placed_bytes": 0, "rx_copied_bytes": 0, "tx_merged_bytes": 0, "tx_copied_bytes": 0}
    for f in side["flows"]:
        i = f["index"]
        if sends and f["tx_bytes"] != nbytes:
            bad.append("side %s flow %d: sent %d bytes, not %d" % (s, i, f["tx_bytes"], nbytes))
        if recvs and f["rx_bytes"] != nbytes:
            bad.append("side %s flow %d: received %d bytes, not %d" % (s, i, f["rx_bytes"], nbytes))
        if side["mode"] != "offload":
            continue
        c = f["counters"]
        if c is None:
            bad.append("side %s flow %d: offloaded without counters" % (s, i))
            continue
        for k in tot:
            tot[k] += c[k]
        if c["state"] not in ("attached", "eof"):
            bad.append("side %s flow %d: state %s" % (s, i, c["state"]))
        if recvs:
            if c["rx_placed_bytes"] + c["rx_copied_bytes"] != f["rx_bytes"]:
                bad.append("side %s flow %d: placed %d + copied %d != received %d" % (
                    s, i, c["rx_placed_bytes"], c["rx_copied_bytes"], f["rx_bytes"]))
            # Clean wire: nothing copied but, each time a receiver's room
            # ran out with the peer holding more, at most a window-scale
            # unit's bytes past it (docs/uapi.md, flow control); each such
            # time flags one completion COPIED.
            if clean and c["rx_copied_bytes"] > UNIT * f["copied_completions"]:
                bad.append("side %s flow %d: clean wire, but %d bytes copied (%d completions flagged COPIED, unit %d)" % (
                    s, i, c["rx_copied_bytes"], f["copied_completions"], UNIT))
        if sends and c["tx_merged_bytes"] + c["tx_copied_bytes"] < f["tx_bytes"]:
            bad.append("side %s flow %d: merged %d + txcopied %d < sent %d" % (
                s, i, c["tx_merged_bytes"], c["tx_copied_bytes"], f["tx_bytes"]))
    cpu = side["cpu"]["seconds_per_gib"]
    p = "%s %s %s%s %.1f MiB/s CPU %s s/GiB" % (
        s, role, side["mode"], "/" + side["rx_mode"] if side["rx_mode"] else "",
        side["bytes"] / 2**20 / max(side["seconds"], 1e-9),
        "-" if cpu is None else "%.0f" % cpu)
    if side["mode"] == "offload":
        p += " placed %d copied %d merged %d txcopied %d" % (
            tot["rx_placed_bytes"], tot["rx_copied_bytes"], tot["tx_merged_bytes"], tot["tx_copied_bytes"])
    parts.append(p)
print("%s: %d x %g MiB: %s" % (name, nflows, mib, "; ".join(parts)))
if bad:
    for b in bad[:20]:
        print(b)
    if len(bad) > 20:
        print("... %d more" % (len(bad) - 20))
    sys.exit(1)
EOF

# zp_pair NAME PORT "SERVER OPTIONS" "CLIENT OPTIONS": one zn-perf test,
# server on side b, client on side a; the client's JSON document in
# $TMPD/NAME.json. Fails, with the ends' errors, if either end fails.
zp_pair() {
	local name=$1 port=$2 srv=$3 cli=$4 spid rc=0 ZN_PFX
	zn_pfx b
	# shellcheck disable=SC2086 # option lists
	"${ZN_PFX[@]}" timeout "$TMO" "$PERF" server --once --json -p "$port" $srv \
		>"$TMPD/$name.srv.json" 2>"$TMPD/$name.srv.err" &
	spid=$!
	if ! zn_wait_listen b "$port" "$spid"; then
		kill "$spid" 2>/dev/null
		wait "$spid"
		cat "$TMPD/$name.srv.err"
		return 1
	fi
	# shellcheck disable=SC2086
	if ! zn_in a timeout "$TMO" "$PERF" client "$HOST" -p "$port" --json $cli \
		>"$TMPD/$name.json" 2>"$TMPD/$name.err"; then
		echo "client ($cli) failed:"
		cat "$TMPD/$name.err"
		rc=1
	fi
	if ! wait "$spid"; then
		echo "server ($srv) failed:"
		grep -v 'server listening' "$TMPD/$name.srv.err"
		rc=1
	fi
	return "$rc"
}

# zp_check NAME BYTES FLOWS CLEAN: check.py on NAME's document; its summary
# line becomes a KTAP diagnostic.
zp_check() {
	local out rc=0
	out=$(python3 "$TMPD/check.py" "$TMPD/$1.json" "$@") || rc=$?
	zn_diag "$(printf '%s\n' "$out" | head -n 1)"
	[ "$rc" = 0 ] || printf '%s\n' "$out" | tail -n +2
	return "$rc"
}

# zp_counters SIDE: the counters that say what a case exercised, as
# "NAME VALUE" lines (totals since boot: a case's share is the change):
# the port's NIC counters (ethtool -S: frames placed out of order, dropped
# as duplicates, handed to the normal path for lack of posted space or
# out-of-order room, dropped for a full header queue) and the namespace's
# TCP counters (retransmissions, prunes and collapses, which copy, and how
# often a receiver out of posted room stalled its peer: zero windows
# advertised, window probes).
zp_counters() {
	zn_in "$1" ethtool -S "$(zn_side_if "$1")" |
		awk '$1 ~ /^hw_rx_(ooo_frames|dup_frames|fallback|ooo_full|hdrq_full):$/ { sub(":", "", $1); print $1, $2 }'
	zn_in "$1" nstat -az TcpRetransSegs TcpExtTCPToZeroWindowAdv TcpExtTCPWinProbe TcpExtPruneCalled \
		TcpExtTCPRcvCollapsed TcpExtTCPLossProbes | awk '/^Tcp/ { print $1, $2 }'
}

# zp_delta BEFORE AFTER: "NAME=CHANGE" words, in AFTER's order.
zp_delta() {
	awk 'NR == FNR { v[$1] = $2; next } { printf "%s=%d ", $1, $2 - v[$1] }' "$1" "$2"
}

# zp_floors WIRE BYTES DELTA_A DELTA_B: fails, saying which, unless the case
# exercised what its wire is there for. Expected counts scale with the bytes
# (in 64 KiB segments, MTU 65280): at 1% loss each direction loses and
# duplicates about 1 in 100 of them, at 5% (2% reordered) loses 5 in 100.
# Seen per side at 256 MiB (4096 segments), 2026-12-06: zero windows 11-13
# on the clean wire; at 1% 49-59 retransmissions, 435-691 frames placed out
# of order, 41-52 duplicates; at 5% 261-328, 1101-1404 and 43-47. The
# floors are a quarter to a third of the fewest seen (a Poisson count of
# mean 50 falls to 13 about once in 10^9 runs); under 64 MiB (the quick
# tier) there are none.
zp_floors() {
	local wire=$1 segs=$(($2 >> 16)) delta_a=$3 delta_b=$4 s kv k want got rc=0
	local -A d
	[ "$segs" -ge 1024 ] || return 0
	for s in a b; do
		d=()
		if [ "$s" = a ]; then kv=$delta_a; else kv=$delta_b; fi
		for kv in $kv; do d[${kv%%=*}]=${kv#*=}; done
		case $wire in
		clean) set -- TcpExtTCPToZeroWindowAdv 1 ;;
		1) set -- TcpRetransSegs $((segs / 300)) hw_rx_ooo_frames $((segs / 40)) hw_rx_dup_frames $((segs / 300)) ;;
		5) set -- TcpRetransSegs $((segs / 60)) hw_rx_ooo_frames $((segs / 10)) hw_rx_dup_frames $((segs / 300)) ;;
		esac
		while [ $# -gt 0 ]; do
			k=$1 want=$2
			shift 2
			got=${d[$k]:-0}
			if [ "$got" -lt "$want" ]; then
				echo "side $s: $k rose by $got over the case, below its floor $want: the case did not exercise what it is for"
				rc=1
			fi
		done
	done
	return "$rc"
}

# zp_case NAME PORT BYTES FLOWS CLEAN "SERVER OPTIONS" "CLIENT OPTIONS"
# [WIRE]: a run, its checks, what it exercised (with WIRE, its floors), and
# the NIC's counters back afterwards.
zp_case() {
	local name=$1 port=$2 bytes=$3 flows=$4 clean=$5 srv=$6 cli=$7 wire=${8:-} before rc=0 t0 s da db
	before=$(zn_nic_use "$PERF") || return 1
	for s in a b; do zp_counters "$s" >"$TMPD/$name.$s.before"; done
	t0=$SECONDS
	zp_pair "$name" "$port" "$srv" "$cli" || rc=1
	zn_diag "$name: $((SECONDS - t0)) s"
	for s in a b; do zp_counters "$s" >"$TMPD/$name.$s.after"; done
	da=$(zp_delta "$TMPD/$name.a.before" "$TMPD/$name.a.after")
	db=$(zp_delta "$TMPD/$name.b.before" "$TMPD/$name.b.after")
	zn_diag "$name: a: $da"
	zn_diag "$name: b: $db"
	[ "$rc" = 0 ] && { zp_check "$name" "$bytes" "$flows" "$clean" || rc=$?; }
	[ "$rc" = 0 ] && [ -n "$wire" ] && { zp_floors "$wire" "$bytes" "$da" "$db" || rc=1; }
	zn_nic_use_back "$PERF" "$before" 5 || rc=1
	return "$rc"
}

bytes_of() { numfmt --from=iec "$1"; }

zp_wire() { "$WIRE" "$@" >/dev/null || echo "zn-wire $* failed"; }

zp_set_mtu() {
	zn_in a ip link set dev "$ZN_IF_A" mtu "$1" &&
		zn_in b ip link set dev "$ZN_IF_B" mtu "$1"
}

# zp_room BYTES: the receive room a wire case's receiver posts per flow, a
# sixteenth of what it receives (a power of two, 1-64 MiB): 16 MiB at
# 256 MiB, as 64 segments of 256K or a 16M ring. zn-perf clamps the TCP
# window to a quarter of it, at most 4 MiB. With --verify under TCG the
# ends are CPU-bound and the receiving side of a bidirectional run falls
# behind by all its posted room now and then: the receive window, which
# ends at the posted room, then stalls the sender (nothing is copied on the
# clean wire; zp_floors asks for at least one such stall).
zp_room() {
	local r=$((1 << 20))
	while [ $((r * 2)) -le $(($1 / 16)) ] && [ "$r" -lt $((64 << 20)) ]; do r=$((r * 2)); done
	echo "$r"
}
MSG="-s 256K"
# The interop and mixed cases' receivers: 16 MiB.
RXM="--rx message --rx-depth 64"

# The stream digests (see the top): the host's, or computed here.
DIG="--hash $HASH --digests $TMPD/digests"
t0=$SECONDS
if [ -r "$HOST_DIGESTS" ] && [ "$(head -n 1 "$HOST_DIGESTS")" = "$(zp_digest_head)" ]; then
	cp "$HOST_DIGESTS" "$TMPD/digests" || ktap_exit_fail_msg "cannot copy $HOST_DIGESTS"
	zn_diag "$HASH of the $(($(wc -l <"$TMPD/digests") - 1)) sent streams from the host ($HOST_DIGESTS)"
else
	zp_digests "$TMPD/digests" || ktap_exit_fail_msg "zn-perf digest failed"
	zn_diag "$HASH of the $(($(wc -l <"$TMPD/digests") - 1)) sent streams computed here in $((SECONDS - t0)) s (none from the host for this binary)"
fi

zp_set_mtu "$MTU" || ktap_exit_fail_msg "cannot set MTU $MTU on $ZN_IF_A/$ZN_IF_B"
zn_diag "MTU $MTU on both ports; wires $WIRES: clean $CLEAN, 1% loss $LOSS1, 5% loss $LOSS5 each way"

# zp_wires FAMILY WIRES PORT0: the wire cases over IPv4 (FAMILY 4) or IPv6
# (6), on ports from PORT0 + 1 up.
zp_wires() {
	local fam=$1 wires=$2 n=$3 wire size clean what room rx rxo host=$ADDR_B bind="" v=""
	if [ "$fam" = 6 ]; then
		host=$ADDR6_B bind="-B ::" v="IPv6, "
	fi
	for wire in $wires; do
		case $wire in
		clean) size=$CLEAN; clean=1 ;;
		1) size=$LOSS1; clean=0 ;;
		5) size=$LOSS5; clean=0 ;;
		esac
		if [ "$wire" = clean ]; then
			zp_wire loss=0 reorder=0 dup=0
			what="${v}clean wire"
		else
			zp_wire loss="$wire" reorder=2 dup=1
			what="$v$wire% loss, reordering, duplication"
		fi
		room=$(zp_room "$(bytes_of "$size")")
		for rx in message stream; do
			n=$((n + 1))
			if [ "$rx" = message ]; then
				rxo="--rx message --rx-depth $((room >> 18))"
			else
				rxo="--rx stream --ring $((room >> 20))M"
			fi
			HOST=$host zn_case "$what: $size each way, offloaded both ends, rx $rx, $((room >> 20)) MiB posted, verified, placed not copied$([ "$clean" = 1 ] || echo ' (copies reported)')$([ "$(bytes_of "$size")" -lt $((64 << 20)) ] || echo ', events at their floors'), NIC counters back" \
				zp_case "bidir$fam-$wire-$rx" "$n" "$(bytes_of "$size")" 1 "$clean" \
				"--mode offload $bind $rxo" "--mode offload $rxo $MSG -n $size --bidir --verify $DIG" "$wire"
		done
	done
	zp_wire loss=0 reorder=0 dup=0
}

zp_wires 4 "$WIRES" 5300
zp_wires 6 "$WIRES6" 5320
if [ "$EXTRA" = 0 ]; then
	ktap_finished
	exit
fi

zn_case "interop: offloaded sender to a plain Linux TCP receiver, 256M verified, NIC counters back" \
	zp_case interop-off-plain 5311 "$(bytes_of 256M)" 1 1 "--mode plain" "--mode offload -n 256M --verify $DIG"
zn_case "interop: plain Linux TCP sender to an offloaded receiver, 256M verified, placed not copied, NIC counters back" \
	zp_case interop-plain-off 5312 "$(bytes_of 256M)" 1 1 "--mode offload $RXM" "--mode plain $MSG -n 256M --verify $DIG"
HOST=$ADDR6_B zn_case "interop over IPv6: offloaded sender to a plain Linux TCP receiver, 256M verified, NIC counters back" \
	zp_case interop6-off-plain 5316 "$(bytes_of 256M)" 1 1 "--mode plain -B ::" "--mode offload -n 256M --verify $DIG"
HOST=$ADDR6_B zn_case "interop over IPv6: plain Linux TCP sender to an offloaded receiver, 256M verified, placed not copied, NIC counters back" \
	zp_case interop6-plain-off 5317 "$(bytes_of 256M)" 1 1 "--mode offload -B :: $RXM" "--mode plain $MSG -n 256M --verify $DIG"

# 64 flows: less memory per flow (64 flows x 2 ends in a guest of 1 GiB):
# 512K of sends and 2M of receives per flow.
zn_case "64 concurrent offloaded flows, 4M each verified, placed not copied, NIC counters back" \
	zp_case p64 5313 "$(bytes_of 4M)" 64 1 "--mode offload --rx-depth 32" \
	"--mode offload -P 64 --tx-depth 8 -n 4M --verify $DIG"

# zp_mixed: an offloaded pair and a plain pair at the same time.
zp_mixed() {
	local before rc=0 r p1 p2
	before=$(zn_nic_use "$PERF") || return 1
	zp_pair mixed-off 5314 "--mode offload $RXM" "--mode offload $MSG -n 128M --verify $DIG" >"$TMPD/mixed-off.out" 2>&1 &
	p1=$!
	zp_pair mixed-plain 5315 "--mode plain" "--mode plain -n 128M --verify $DIG" >"$TMPD/mixed-plain.out" 2>&1 &
	p2=$!
	wait "$p1" || { cat "$TMPD/mixed-off.out"; rc=1; }
	wait "$p2" || { cat "$TMPD/mixed-plain.out"; rc=1; }
	if [ "$rc" = 0 ]; then
		zp_check mixed-off "$(bytes_of 128M)" 1 1 || rc=$?
		zp_check mixed-plain "$(bytes_of 128M)" 1 1 || { r=$?; [ "$rc" != 0 ] && [ "$rc" != 3 ] || rc=$r; }
	fi
	zn_nic_use_back "$PERF" "$before" 5 || rc=1
	return "$rc"
}
zn_case "an offloaded and a plain pair at once on the same ports, 128M each verified, NIC counters back" zp_mixed

ktap_finished

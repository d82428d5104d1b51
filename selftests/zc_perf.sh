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
#  - after each run (both processes gone) the NIC-wide query shows
#    mr_in_use, pinned_pages and flows_in_use back to their value before it.
#
# Cases: both receive modes (message, stream) on a clean wire, at 1% loss
# and at 5% loss with reordering and duplication (qemu/guest/zn-wire), each
# transfer both ways at once (--bidir); an offloaded sender to a plain Linux
# TCP receiver and a plain sender to an offloaded receiver; 64 concurrent
# offloaded flows; an offloaded and a plain zn-perf pair at the same time
# over the same ports.
#
# Sizes (per direction; the ports run at MTU 65280 during the test, restored
# after, since at MTU 1500 TCG moves only about 20 MiB/s): the six
# wire/mode cases move 1 GiB each way. The interop cases move 256M, the 64
# flows 4M each, the mixed pairs 128M each. ZN_PERF_CLEAN, ZN_PERF_LOSS1,
# ZN_PERF_LOSS5 override the sizes of the clean, 1% and 5% loss cases.
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
CLEAN=${ZN_PERF_CLEAN:-1G}
LOSS1=${ZN_PERF_LOSS1:-1G}
LOSS5=${ZN_PERF_LOSS5:-1G}
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
zn_net_start 10

if [ ! -x "$PERF" ]; then
	ktap_exit_fail_msg "no $PERF (cargo build --release --workspace)"
fi

TMPD=$(mktemp -d)
ADDR_B=${ZN_ADDR_B%/*}
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
	if ! zn_in a timeout "$TMO" "$PERF" client "$ADDR_B" -p "$port" --json $cli \
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

# zp_why SIDE: what says why a receiver copied: the port's fallback
# counters (ethtool -S: frames the NIC handed to the normal path for lack of
# posted space or out-of-order room, or dropped for a full header queue)
# and TCP's prune and collapse counters (a pruned queue is copied); and how
# often a receiver out of posted room stalled its peer (zero windows
# advertised, window probes sent).
zp_why() {
	local ifc
	ifc=$(zn_side_if "$1")
	{
		zn_in "$1" ethtool -S "$ifc" | awk '$1 ~ /^hw_rx_(fallback|ooo_full|hdrq_full|dup_frames):$/ { print $1 $2 }'
		zn_in "$1" nstat -az TcpExtPruneCalled TcpExtTCPRcvCollapsed TcpExtTCPLossProbes TcpRetransSegs \
			TcpExtTCPToZeroWindowAdv TcpExtTCPWinProbe |
			awk '/^Tcp/ { print $1 "=" $2 }'
	} | tr '\n' ' '
}

# zp_case NAME PORT BYTES FLOWS CLEAN "SERVER OPTIONS" "CLIENT OPTIONS":
# a run, its checks, and the NIC's counters back afterwards.
zp_case() {
	local name=$1 port=$2 bytes=$3 flows=$4 clean=$5 srv=$6 cli=$7 before rc=0 t0
	before=$(zn_nic_use "$PERF") || return 1
	t0=$SECONDS
	zp_pair "$name" "$port" "$srv" "$cli" || rc=1
	zn_diag "$name: $((SECONDS - t0)) s"
	# Totals since boot (the namespaces' TCP counters, the ports' NIC
	# counters): the case's share is the change from the line before.
	zn_diag "$name: a: $(zp_why a)"
	zn_diag "$name: b: $(zp_why b)"
	[ "$rc" = 0 ] && { zp_check "$name" "$bytes" "$flows" "$clean" || rc=$?; }
	zn_nic_use_back "$PERF" "$before" 5 || rc=1
	return "$rc"
}

bytes_of() { numfmt --from=iec "$1"; }

zp_wire() { "$WIRE" "$@" >/dev/null || echo "zn-wire $* failed"; }

zp_set_mtu() {
	zn_in a ip link set dev "$ZN_IF_A" mtu "$1" &&
		zn_in b ip link set dev "$ZN_IF_B" mtu "$1"
}

# Receivers post 64 MiB per flow (256 segments of 256K, or a 64M ring), and
# zn-perf clamps their TCP window to a quarter of that, at most 4 MiB. With
# --verify under TCG the ends are CPU-bound and the receiving side of a
# bidirectional run falls behind by all its posted room now and then: the
# receive window, which ends at the posted room, then stalls the sender
# (nothing is copied on the clean wire).
MSG="-s 256K"
RXM="--rx message --rx-depth 256"
RXS="--rx stream --ring 64M"

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
zn_diag "MTU $MTU on both ports; clean $CLEAN, 1% loss $LOSS1, 5% loss $LOSS5 each way"

n=0
for wire in clean 1 5; do
	case $wire in
	clean) size=$CLEAN; clean=1 ;;
	1) size=$LOSS1; clean=0 ;;
	5) size=$LOSS5; clean=0 ;;
	esac
	if [ "$wire" = clean ]; then
		zp_wire loss=0 reorder=0 dup=0
		what="clean wire"
	else
		zp_wire loss="$wire" reorder=2 dup=1
		what="$wire% loss, reordering, duplication"
	fi
	for rx in message stream; do
		n=$((n + 1))
		if [ "$rx" = message ]; then rxo=$RXM; else rxo=$RXS; fi
		zn_case "$what: $size each way, offloaded both ends, rx $rx, verified, placed not copied$([ "$clean" = 1 ] || echo ' (copies reported)'), NIC counters back" \
			zp_case "bidir-$wire-$rx" $((5300 + n)) "$(bytes_of "$size")" 1 "$clean" \
			"--mode offload $rxo" "--mode offload $rxo $MSG -n $size --bidir --verify $DIG"
	done
done
zp_wire loss=0 reorder=0 dup=0

zn_case "interop: offloaded sender to a plain Linux TCP receiver, 256M verified, NIC counters back" \
	zp_case interop-off-plain 5311 "$(bytes_of 256M)" 1 1 "--mode plain" "--mode offload -n 256M --verify $DIG"
zn_case "interop: plain Linux TCP sender to an offloaded receiver, 256M verified, placed not copied, NIC counters back" \
	zp_case interop-plain-off 5312 "$(bytes_of 256M)" 1 1 "--mode offload $RXM" "--mode plain $MSG -n 256M --verify $DIG"

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

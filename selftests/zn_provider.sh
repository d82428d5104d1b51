#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The provider library's C ABI end to end (topology two-port): zn_example
# (lib/zeronic-c/examples/zn_example.c, linked with target/release/
# libzeronic.so) serves on side b in stream mode and sends from side a in
# message mode through the registration cache. Cases:
#  1. the transfer: both ends exit 0, the server received every byte the
#     client sent, each placed by the NIC or copied (placed + copied =
#     bytes; at most one block copied: the client sends as soon as it has
#     attached, so its first bytes may reach the server's socket before the
#     server attached, and those are delivered by copy)
#     and read by the TX merge unit (merged >= bytes);
#  2. the cache is never stale: each block was sent from memory replaced
#     after the last send (munmap+mmap at the same address, madvise
#     DONTNEED, free+malloc, mremap away + new mapping), and the server got
#     exactly the letters "AABCDEF"; the cache counted 1 hit, 6 misses and
#     5 invalidations;
#  3. the same run with the hooks' invalidation switched off
#     (ZN_CACHE_NOHOOKS=1) sends stale pages: the server's letters differ
#     from "AABCDEF" (the check of case 2 can fail);
#  4. zn_cq_wait on an empty CQ whose eventfd was signalled first (a
#     spurious wake-up: the eventfd stays signalled for entries already
#     polled) sleeps on to its timeout and returns 0, never early;
#  5. afterwards the NIC holds no region, pin or flow more than before.
set -u
. "$(dirname "$0")/lib.sh"

zn_need_topology two-port

. "$(dirname "$0")/net_lib.sh"

EX=$(dirname "$0")/zn_example
PERF=$ZN_ROOT/target/release/zn-perf

zn_load
zn_net_start 5

[ -x "$EX" ] || ktap_exit_fail_msg "no $EX (make selftests-build after cargo build --release --workspace)"

TMPD=$(mktemp -d)
trap 'rm -rf "$TMPD"' EXIT
ADDR_B=${ZN_ADDR_B%/*}

# run NAME PORT [ENV...]: server on b, client on a; outputs in $TMPD/NAME.*
run() {
	local name=$1 port=$2 spid rc=0 ZN_PFX
	shift 2
	zn_pfx b
	"${ZN_PFX[@]}" timeout 120 env "$@" "$EX" server "$port" >"$TMPD/$name.srv" 2>&1 &
	spid=$!
	zn_wait_listen b "$port" "$spid" || { kill "$spid"; return 1; }
	zn_in a timeout 120 env "$@" "$EX" client "$ADDR_B" "$port" >"$TMPD/$name.cli" 2>&1 || rc=1
	wait "$spid" || rc=1
	sed 's/^/# /' "$TMPD/$name.srv" "$TMPD/$name.cli" >&3
	return $rc
}

word() { sed -n "s/.* $2 \([^ ]*\).*/\1/p" "$1" | head -1; }

BEFORE=$(zn_nic_use "$PERF")

transfer() {
	run main 5301 || return 1
	local s=$TMPD/main.srv c=$TMPD/main.cli
	[ "$(word "$s" bytes)" = "$(word "$c" bytes)" ] || { echo "bytes differ"; return 1; }
	[ "$(word "$s" bytes)" = $((7 * 65536)) ] || { echo "not 7 blocks"; return 1; }
	# Every byte placed or copied; copies are bytes that arrived before the
	# server attached (the receive window then ends at the posted ring, so
	# nothing later is copied), at most the first block here.
	[ $(($(word "$s" placed) + $(word "$s" copied))) = "$(word "$s" bytes)" ] || { echo "placed + copied != bytes"; return 1; }
	[ "$(word "$s" placed)" -ge $((6 * 65536)) ] || { echo "fewer than 6 of 7 blocks placed"; return 1; }
	[ "$(word "$c" merged)" -ge "$(word "$c" bytes)" ] || { echo "merged < sent"; return 1; }
}
zn_case "provider C example: 7 x 64 KiB from side a to side b, placed (or copied) and merged" transfer

never_stale() {
	local s=$TMPD/main.srv c=$TMPD/main.cli
	[ -s "$s" ] || { echo "no server output"; return 1; }
	[ "$(word "$s" blocks)" = AABCDEF ] || { echo "server got $(word "$s" blocks)"; return 1; }
	[ "$(word "$c" blocks)" = AABCDEF ] || { echo "client sent $(word "$c" blocks)"; return 1; }
	[ "$(word "$c" hits) $(word "$c" misses) $(word "$c" invalidations)" = "1 6 5" ] ||
		{ echo "cache hits/misses/invalidations: $(word "$c" hits) $(word "$c" misses) $(word "$c" invalidations), not 1 6 5"; return 1; }
}
zn_case "registration cache never stale: munmap+mmap, DONTNEED, free+malloc, mremap (server got AABCDEF)" never_stale

stale_without_hooks() {
	run nohooks 5302 ZN_CACHE_NOHOOKS=1 || return 1
	local got
	got=$(word "$TMPD/nohooks.srv" blocks)
	[ -n "$got" ] && [ "$got" != AABCDEF ] || { echo "without invalidation the server still got '$got'"; return 1; }
	echo "without invalidation the server got $got"
}
zn_case "without the hooks' invalidation the stale pages go out (the check can fail)" stale_without_hooks

spurious_wakeup() {
	local out
	out=$("$EX" wait 400) || { echo "$out"; return 1; }
	echo "$out"
}
zn_case "zn_cq_wait sleeps on after a spurious wake-up of an empty CQ: 0 after 400 ms, not early" spurious_wakeup

zn_case "no region, pin or flow left on the NIC" zn_nic_use_back "$PERF" "$BEFORE" 5

ktap_finished

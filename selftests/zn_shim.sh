#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Unmodified applications over the LD_PRELOAD shim (target/release/
# libzn_shim.so, docs/shim.md), topology two-port: servers on side b,
# clients on side a, each run with the shim on both ends (the runs are
# selftests/zn_shim_lib.sh's; iperf3 also once without, the control that
# the set-up itself works: the comparison of every application with and
# without the shim is make bench's, scripts/bench-guest's shim part).
# Every case checks the application's own correctness (iperf3: bytes
# received = bytes sent; redis: values read back equal, byte for
# byte, what was written; nginx: the file's SHA-256; sockperf, its server
# and client waiting in select, poll or epoll: every reply equal to its
# request, none dropped, duplicated or out of order) and that the offload
# carried the bytes (zc_account): the shim's per-process counters
# (ZN_SHIM_STATS) show the connections offloaded and the application's
# bytes read through them, the flows' own counters (the shim's log line per
# connection) that every byte a flow delivered was placed by the NIC or
# copied, and every copy is explained: during set-up (bytes that came
# before the NIC placed any of the flow: queued before the attach or
# arriving while the NIC's flow was installed; at most the receive buffer
# TCP starts a connection with, tcp_rmem's default), or in frames the NIC
# handed to the normal path for lack of posted space (the port's
# hw_rx_fallback less hw_rx_ooo_full: the receive window ends at the posted
# room give or take a window-scale unit, so a frame may cross the room's
# end). Nothing else may be copied: small segments, ring wraps and
# segments that reach a busy socket's backlog are placed. Each case prints
# its throughput (or requests/s, or sockperf's latency) with the shim and,
# for the bulk cases, the guest's CPU seconds per GiB moved (system-wide,
# /proc/stat). Last, once every application exited, no region, pin or
# flow of NIC 0 is left (zn-perf query).
#
# ZN_SHIM_SECS: seconds per iperf3 run (default 3).
# ZN_SHIM_SOCKPERF_SECS: seconds per sockperf client run (-t, default 1).
# ZN_SHIM_CASES: run only the cases named (words of: iperf iperfz iperfr
# redis nginx sockperf torture zcsend sendfile loopback disabled); the others are reported as
# skipped, never passed. For development runs; make check runs them all.
set -u
. "$(dirname "$0")/lib.sh"

zn_need_topology two-port

. "$(dirname "$0")/net_lib.sh"
. "$(dirname "$0")/zn_shim_lib.sh"

SHIM=$ZN_ROOT/target/release/libzn_shim.so
SECS=${ZN_SHIM_SECS:-3}

PERF=$ZN_ROOT/target/release/zn-perf

zn_load
zn_net_start 12

[ -e "$SHIM" ] || ktap_exit_fail_msg "no $SHIM (cargo build --release --workspace)"

BEFORE=$(zn_nic_use "$PERF")

TMPD=$(mktemp -d)
REDIS_PIDS=()
cleanup() {
	local p
	for p in "${REDIS_PIDS[@]}"; do kill "$p" 2>/dev/null; done
	rm -rf "$TMPD"
}
trap cleanup EXIT
ADDR_B=${ZN_ADDR_B%/*}

# shim_case KEY "description" command...: zn_case, unless ZN_SHIM_CASES
# names other cases only (then a skip that says so).
shim_case() {
	local key=$1 desc=$2 out rc=0 t0
	shift 2
	if [ -n "${ZN_SHIM_CASES:-}" ] && [[ " $ZN_SHIM_CASES " != *" $key "* ]]; then
		ktap_test_skip "$desc (not selected: ZN_SHIM_CASES=$ZN_SHIM_CASES)"
		return
	fi
	t0=$(zn_now)
	out=$("$@" 2>&1) || rc=$?
	zn_diag "$key: $(zn_secs_since "$t0") s"
	[ -z "$out" ] || [ "$rc" = 0 ] || printf '%s\n' "$out" | sed 's/^/# /'
	if [ "$rc" = 0 ]; then
		ktap_test_pass "$desc"
	else
		ktap_test_fail "$desc"
	fi
}

# zc_snap: "placed copied merged nospace" summed over both ports: the
# driver's zc_* counters and the frames the NIC handed to the normal path
# for lack of posted space (hw_rx_fallback counts those and the frames that
# found the out-of-order room full, hw_rx_ooo_full). One ethtool call per
# port (each costs a process in the port's namespace).
zc_snap() {
	local s
	for s in a b; do
		zn_in $s ethtool -S "$(zn_side_if $s)"
	done | awk '{ v[$1] += $2 }
		END { printf "%.0f %.0f %.0f %.0f\n", v["zc_rx_placed_bytes:"], v["zc_rx_copied_bytes:"], v["zc_tx_merged_bytes:"], v["hw_rx_fallback:"] - v["hw_rx_ooo_full:"] }'
}

# why_snap: "name=value" of the counters that say why a frame took the
# normal path (the ports' hw_rx_* fallback, out-of-order, header-queue,
# duplicate and placement-error counters; TCP's prune and collapse).
why_snap() {
	local s
	for s in a b; do
		zn_in $s ethtool -S "$(zn_side_if $s)" |
			awk -v s=$s '$1 ~ /^hw_rx_(normal|fallback|ooo_full|hdrq_full|dup_frames|place_err|csum_err):$/ { sub(/:$/, "", $1); print s ":" $1 "=" $2 }'
		zn_in $s nstat -az TcpExtPruneCalled TcpExtTCPRcvCollapsed | awk -v s=$s '/^Tcp/ { print s ":" $1 "=" $2 }'
	done | tr '\n' ' '
}

# why_delta "BEFORE" "AFTER": the counters of why_snap that changed.
why_delta() {
	awk -v a="$1" -v b="$2" 'BEGIN {
		n = split(a, x, " "); for (i = 1; i <= n; i++) { split(x[i], kv, "="); v[kv[1]] = kv[2] }
		n = split(b, y, " "); for (i = 1; i <= n; i++) { split(y[i], kv, "="); if (kv[2] != v[kv[1]]) printf "%s+%d ", kv[1], kv[2] - v[kv[1]] }
	}'
}

# zc_account "SNAP_BEFORE" "SNAP_AFTER" MIN_RX MIN_TX LOG...: where the
# received bytes of the flows whose close lines are in the shim logs LOG...
# came from. Fails unless: every flow delivered exactly the bytes it placed
# plus those it copied; the application read at least MIN_RX bytes through
# the flows (the shim's rx_bytes, from the .stats files next to the logs);
# the ports' counters cover the flows' (placed and copied); the NIC read at
# least MIN_TX sent bytes from registered memory (zc_tx_merged_bytes); no
# flow copied more during set-up (before the NIC placed any of its bytes,
# the shim's rx_setup_copied) than a new connection's receive buffer holds
# (tcp_rmem's default: the peer cannot send more before the attach); and
# every byte copied later is in a frame the NIC handed to the normal path
# for lack of posted space (at most MTU - 40 payload bytes each). Prints
# what it found.
zc_account() {
	local before=$1 after=$2 minrx=$3 mintx=$4 mss sums read f rmem
	shift 4
	mss=$(($(zn_mtu b) - 40))
	rmem=$(zn_in b cat /proc/sys/net/ipv4/tcp_rmem | awk '{ print $2 }')
	# shellcheck disable=SC2086 # the snapshots' words
	set -- $before $after "$@"
	local dp=$(($5 - $1)) dc=$(($6 - $2)) dm=$(($7 - $3)) dns=$(($8 - $4))
	shift 8
	local logs=("$@")
	sums=$(cat "$@" 2>/dev/null | awk -v rmem="$rmem" '
		/ rx_delivered / {
			for (i = 1; i < NF; i++) v[$i] = $(i + 1)
			d = v["rx_delivered"]; p = v["rx_placed"]; c = v["rx_copied"]
			a = v["rx_setup_copied"]
			n++; D += d; P += p; C += c; A += a
			if (d != p + c || a > rmem) bad = bad " [" $0 "]"
		}
		END { printf "%d %d %d %d %d %s", n, D, P, C, A, (bad == "" ? "-" : bad) }')
	read=0
	for f in "$@"; do
		read=$((read + $(shimstat "${f%.log}.stats" rx_bytes)))
	done
	set -- $sums
	local n=$1 D=$2 P=$3 C=$4 A=$5 bad
	shift 5
	bad=$*
	local late=$((C - A))
	echo "$n flows delivered $D bytes: placed $P, copied $C ($A during set-up, $late later); the application read $read; ports: placed $dp copied $dc merged $dm, $dns frames without posted space"
	# The flows that copied, and the copied completions (up to 10 each).
	cat "${logs[@]}" 2>/dev/null | grep -E ' rx_copied [1-9]|copied completion' | head -20
	[ "$n" -gt 0 ] || { echo "no flow reported its counters"; return 1; }
	[ "$bad" = - ] || { echo "flows whose delivered bytes are not placed + copied, or that copied more than $rmem bytes during set-up:$bad"; return 1; }
	[ "$read" -ge "$minrx" ] || { echo "the application read $read bytes through the flows, less than its $minrx"; return 1; }
	[ "$dp" -ge "$P" ] && [ "$dc" -ge "$C" ] || { echo "the ports' counters do not cover the flows'"; return 1; }
	[ "$dm" -ge "$mintx" ] || { echo "merged $dm < the $mintx bytes sent"; return 1; }
	[ "$late" -le $((dns * mss)) ] || { echo "$late bytes copied after set-up, more than $dns frames without posted space carry"; return 1; }
}

# shimstat FILE KEY: the sum of KEY over the shim's exit reports in FILE.
shimstat() {
	awk -v k="$2" '{ for (i = 1; i < NF; i++) if ($i == k) s += $(i + 1) } END { print s + 0 }' "$1" 2>/dev/null
}

# attach_summary LOG...: how long the shim's attaches took (its
# "attached in" log lines), apart for those whose memory came from the
# pool ("pool hit") and those that allocated and registered it: count,
# mean microseconds of the whole attach, of each step (the words after
# "attached in N us: pool hit|miss"), and of the checks before it.
attach_summary() {
	cat "$@" 2>/dev/null | awk '
		/ attached in / {
			h = / pool hit / ? "hit" : "miss"
			n[h]++
			for (i = 1; i < NF; i++) {
				if ($i == "checks") ck[h] += $(i + 1)
				if ($i == "in" && $(i - 1) == "attached") tot[h] += $(i + 1)
			}
			split($0, a, " us: "); m = split(a[2], w, " ")
			for (i = 1; i < m; i += 2) {
				if (w[i] == "pool") continue
				v = w[i + 1]; sub(/[^0-9].*/, "", v)
				if (!((h, w[i]) in s)) o[h, ++k[h]] = w[i]
				s[h, w[i]] += v
			}
		}
		END {
			if (!n["hit"] && !n["miss"]) { print "no attach logged"; exit }
			sep = ""
			for (j = 1; j <= 2; j++) {
				h = j == 1 ? "miss" : "hit"
				if (!n[h]) continue
				printf "%s%d pool %s%s, mean %.0f us (checks before it %.0f):", sep, n[h], h, (h == "hit" ? "s" : "es"), tot[h] / n[h], ck[h] / n[h]
				for (i = 1; i <= k[h]; i++) printf " %s %.0f", o[h, i], s[h, o[h, i]] / n[h]
				sep = "; "
			}
			printf "\n"
		}'
}

# release_summary LOG...: the shim's releases of connections ("released
# in" lines): how many had their memory pooled, and the mean microseconds
# of each kind (detach included).
release_summary() {
	cat "$@" 2>/dev/null | awk '
		/ released in / {
			h = / then pooled / ? "pooled" : "deregistered"
			n[h]++
			for (i = 1; i < NF; i++) if ($i == "in" && $(i - 1) == "released") t[h] += $(i + 1)
		}
		END { printf "%d pooled (mean %.0f us), %d deregistered (mean %.0f us)\n", n["pooled"], n["pooled"] ? t["pooled"] / n["pooled"] : 0, n["deregistered"], n["deregistered"] ? t["deregistered"] / n["deregistered"] : 0 }'
}

# iperf_case [--control] NAME PORT [options]: with the shim. --control:
# first the same run without the shim (on PORT; the shim's on PORT + 1),
# the control that iperf3, the ports and the test's set-up work, so that a
# failure with the shim is the shim's.
iperf_case() {
	local control=0 name port with without c0 c1 off acc rc=0 w0 opts
	[ "$1" != --control ] || { control=1; shift; }
	name=$1 port=$2
	shift 2
	opts=" $* "
	if [ "$control" = 1 ]; then
		without=$(iperf 0 "$name-plain" "$port" "$@") || { echo "without the shim (the control): $without"; return 1; }
		zn_diag "$name: without the shim (the control) ${without% *} (Gbit/s bytes)"
	fi
	c0=$(zc_snap)
	w0=$(why_snap)
	with=$(iperf 1 "$name-shim" $((port + 1)) "$@") || { echo "with the shim: $with"; tail "$TMPD/$name-shim.log" 2>/dev/null; return 1; }
	c1=$(zc_snap)
	zn_diag "$name: normal-path counters: $(why_delta "$w0" "$(why_snap)")"
	off=$(shimstat "$TMPD/$name-shim.stats" offloaded)
	# shellcheck disable=SC2046 # "GBITS BYTES CPU"
	set -- $with
	acc=$(zc_account "$c0" "$c1" "$2" "$2" "$TMPD/$name-shim.log") || rc=$?
	zn_diag "$name: with shim ${with% *} (Gbit/s bytes), CPU ${with##* } s/GiB; offloaded connections $off"
	zn_diag "$name: ${acc//$'\n'/; }"
	zn_diag "$name: shim counters: $(tr '\n' ';' <"$TMPD/$name-shim.stats")"
	[ "$off" -ge 4 ] || { echo "only $off connections offloaded (control and data, both ends)"; return 1; }
	if [[ $opts == *" -Z "* ]]; then
		# -Z sends with sendfile: zero-copy from the file's pages (the NIC
		# reads them, zc_tx_merged_bytes), none through the staging copy.
		[ "$(shimstat "$TMPD/$name-shim.stats" sendfile_zc_bytes)" -ge "$2" ] &&
			[ "$(shimstat "$TMPD/$name-shim.stats" sendfile_copied_bytes)" = 0 ] ||
			{ echo "-Z: $(shimstat "$TMPD/$name-shim.stats" sendfile_zc_bytes) bytes sent zero-copy from the file, $(shimstat "$TMPD/$name-shim.stats" sendfile_copied_bytes) copied, for $2 received"; return 1; }
	fi
	return "$rc"
}

shim_case iperf "iperf3 (select, read/write) over the shim, and once without (the control)" iperf_case --control iperf 5401
shim_case iperfz "iperf3 -Z (sendfile) over the shim" iperf_case iperfz 5411 -Z
shim_case iperfr "iperf3 -R (server sends) over the shim" iperf_case iperfr 5421 -R

# Requests per redis-benchmark run (values up to 1 KiB, and 64 KiB), over
# 4 connections (each costs an attach with the shim): enough to check the
# data path and the accounting; ZN_SHIM_REDIS_N, ZN_SHIM_REDIS_N64 for
# steadier figures.
REDIS_N=${ZN_SHIM_REDIS_N:-200}
REDIS_N64=${ZN_SHIM_REDIS_N64:-64}

redis_case() {
	local with c0 c1 off acc rc=0 w0 nopool
	c0=$(zc_snap)
	w0=$(why_snap)
	with=$(redis_run 1 redis-shim 6401) || { echo "with the shim: $with"; tail "$TMPD/redis-shim.log" "$TMPD/redis-shim-cli.log" 2>/dev/null; return 1; }
	c1=$(zc_snap)
	zn_diag "redis: normal-path counters: $(why_delta "$w0" "$(why_snap)")"
	if [ "${ZN_SHIM_REDIS_NOPOOL:-0}" = 1 ]; then
		# For comparing: the same with the pool off (not in make check).
		nopool=$(ZN_SHIM_POOL=0 redis_run 1 redis-nopool 6402) || { echo "with the shim, no pool: $nopool"; return 1; }
		zn_diag "redis requests/s SET/GET with shim, ZN_SHIM_POOL=0:$nopool"
		zn_diag "redis: ZN_SHIM_POOL=0 attach times, server: $(attach_summary "$TMPD/redis-nopool.log"); clients: $(attach_summary "$TMPD/redis-nopool-cli.log")"
		zn_diag "redis: ZN_SHIM_POOL=0 releases, server: $(release_summary "$TMPD/redis-nopool.log"); clients: $(release_summary "$TMPD/redis-nopool-cli.log")"
	fi
	off=$(shimstat "$TMPD/redis-shim.stats" offloaded)
	# The server read at least the 64 KiB SETs' values and sent the GETs'
	# (-P 1 and -P 16).
	acc=$(zc_account "$c0" "$c1" $((2 * REDIS_N64 * 65536)) $((2 * REDIS_N64 * 65536)) "$TMPD/redis-shim.log" "$TMPD/redis-shim-cli.log") || rc=$?
	zn_diag "redis requests/s SET/GET with shim:$with"
	zn_diag "redis: ${acc//$'\n'/; }"
	zn_diag "redis: attach times, server: $(attach_summary "$TMPD/redis-shim.log"); clients: $(attach_summary "$TMPD/redis-shim-cli.log")"
	zn_diag "redis: releases, server: $(release_summary "$TMPD/redis-shim.log"); clients: $(release_summary "$TMPD/redis-shim-cli.log")"
	zn_diag "redis: server offloaded $off connections; server counters: $(tr '\n' ';' <"$TMPD/redis-shim.stats")"
	[ "$off" -ge 8 ] || { echo "server offloaded only $off connections"; return 1; }
	return "$rc"
}
shim_case redis "redis-server + redis-benchmark (epoll, accept4, BGSAVE fork) over the shim" redis_case

nginx_case() {
	local with c0 c1 off acc rc=0 w0
	c0=$(zc_snap)
	w0=$(why_snap)
	with=$(nginx_run 1 nginx-shim 8081) || { echo "with the shim: $with"; tail "$TMPD/nginx-shim.log" 2>/dev/null; return 1; }
	c1=$(zc_snap)
	zn_diag "nginx: normal-path counters: $(why_delta "$w0" "$(why_snap)")"
	off=$(shimstat "$TMPD/nginx-shim.stats" offloaded)
	acc=$(zc_account "$c0" "$c1" $((16 << 20)) $((16 << 20)) "$TMPD/nginx-shim.log" "$TMPD/nginx-shim-cli.log") || rc=$?
	zn_diag "nginx: with shim ${with} (curl MiB/s, wrk 4 KiB requests/s, CPU s/GiB of the curl); offloaded $off"
	zn_diag "nginx: ${acc//$'\n'/; }"
	zn_diag "nginx: attach times, server: $(attach_summary "$TMPD/nginx-shim.log"); clients: $(attach_summary "$TMPD/nginx-shim-cli.log")"
	zn_diag "nginx: releases, server: $(release_summary "$TMPD/nginx-shim.log"); clients: $(release_summary "$TMPD/nginx-shim-cli.log")"
	zn_diag "nginx: shim counters: $(tr '\n' ';' <"$TMPD/nginx-shim.stats")"
	[ "$off" -ge 2 ] || { echo "nginx offloaded only $off connections"; return 1; }
	# sendfile on: the 16 MiB went zero-copy from the file's pages.
	[ "$(shimstat "$TMPD/nginx-shim.stats" sendfile_zc_bytes)" -ge $((16 << 20)) ] ||
		{ echo "nginx sent $(shimstat "$TMPD/nginx-shim.stats" sendfile_zc_bytes) bytes zero-copy with sendfile, not the file's 16 MiB"; grep -m3 sendfile "$TMPD/nginx-shim.log"; return 1; }
	return "$rc"
}
shim_case nginx "nginx (sendfile, epoll, worker fork) + curl (16 MiB, SHA-256) and wrk over the shim" nginx_case

# sockperf ping-pong over TCP, its server and its client each waiting in
# select, poll or epoll. sockperf takes -F (the I/O multiplexer) only with
# a feed file (-f), whose "T:" line makes the connection TCP (--tcp
# conflicts with -f); without -F it blocks in recvfrom. Each client runs
# ZN_SHIM_SOCKPERF_SECS seconds (default 1) after sockperf's fixed 2 s
# warm-up sleep; it measures the latency (half the round trip) of 64-byte
# messages over the 0.4 s to the end less 50 ms.
SOCKPERF_SECS=${ZN_SHIM_SOCKPERF_SECS:-1}
SOCKPERF_MSG=64

# Both ends offloaded, per multiplexer, and the accounting of zc_account
# over the three runs with the shim. The messages are small: the shim
# copies each send into its registered staging memory (below
# ZN_SHIM_ZC_THRESHOLD; the NIC reads it from there, which
# zc_tx_merged_bytes counts), and the NIC places every received message
# into the ring (the application's read copies it out, as the kernel's
# path would). So what the counters show is that the NIC, not the kernel's
# copying path, carried both directions; not a zero-copy send.
sockperf_case() {
	local mux mname with c0 c1 w0 acc rc=0 port=11403 minrx=0
	local v a q50 q99 sent rcvd off_s rx_s off_c rx_c logs=()
	c0=$(zc_snap)
	w0=$(why_snap)
	for mux in s p e; do
		case $mux in s) mname=select ;; p) mname=poll ;; e) mname=epoll ;; esac
		with=$(sockperf_run 1 "sockperf-$mux-shim" "$port" "$mux") || { echo "-F $mux with the shim: $with"; tail "$TMPD/sockperf-$mux-shim.log" "$TMPD/sockperf-$mux-shim-cli.log" 2>/dev/null; return 1; }
		port=$((port + 1))
		read -r v a q50 q99 sent rcvd <<<"$with"
		read -r off_s rx_s off_c rx_c < <(awk '{ for (i = 1; i < NF; i++) if ($i == "offloaded" || $i == "rx_bytes") s[FILENAME, $i] += $(i + 1) }
			END { f = ARGV[1]; g = ARGV[2]; print s[f, "offloaded"] + 0, s[f, "rx_bytes"] + 0, s[g, "offloaded"] + 0, s[g, "rx_bytes"] + 0 }' \
			"$TMPD/sockperf-$mux-shim.stats" "$TMPD/sockperf-$mux-shim-cli.stats" 2>/dev/null)
		zn_diag "sockperf $mname: latency usec avg/p50/p99 with shim $a/$q50/$q99 ($v valid); offloaded: server ${off_s:-0}, client ${off_c:-0}; read through the shim: server ${rx_s:-0}, client ${rx_c:-0} bytes"
		[ "${off_s:-0}" -ge 1 ] && [ "${off_c:-0}" -ge 1 ] || { echo "-F $mux: offloaded ${off_s:-0} connection(s) in the server, ${off_c:-0} in the client"; return 1; }
		# Every message the server handled, and every reply the client
		# counted, was read through the offloaded connection.
		[ "$rx_s" -ge $((sent * SOCKPERF_MSG)) ] && [ "$rx_c" -ge $((rcvd * SOCKPERF_MSG)) ] ||
			{ echo "-F $mux: the server read $rx_s bytes through the shim for $sent messages, the client $rx_c for $rcvd replies"; return 1; }
		minrx=$((minrx + (sent + rcvd) * SOCKPERF_MSG))
		logs+=("$TMPD/sockperf-$mux-shim.log" "$TMPD/sockperf-$mux-shim-cli.log")
	done
	c1=$(zc_snap)
	zn_diag "sockperf: normal-path counters: $(why_delta "$w0" "$(why_snap)")"
	# Both directions: the messages the server handled and the replies the
	# client received were read, and sent from staging, at least.
	acc=$(zc_account "$c0" "$c1" "$minrx" "$minrx" "${logs[@]}") || rc=$?
	zn_diag "sockperf: ${acc//$'\n'/; }"
	return "$rc"
}
shim_case sockperf "sockperf ping-pong (TCP; select, poll, epoll on both ends) over the shim" sockperf_case

# The socket semantics of docs/shim.md, case by case (zn_shim_torture.py).
torture_case() {
	local spid rc=0 ZN_PFX t=$ZN_ROOT/selftests/zn_shim_torture.py
	zn_pfx b
	"${ZN_PFX[@]}" env LD_PRELOAD="$SHIM" ZN_SHIM_STATS="$TMPD/torture-srv.stats" timeout -k 5 300 python3 "$t" server "$ADDR_B" 5501 \
		>"$TMPD/torture.srv" 2>&1 &
	spid=$!
	zn_wait_listen b 5501 "$spid" || { kill "$spid"; return 1; }
	zn_in a env LD_PRELOAD="$SHIM" ZN_SHIM_STATS="$TMPD/torture-cli.stats" ZN_SHIM_LOG="$TMPD/torture-cli.log" timeout -k 5 240 python3 "$t" client "$ADDR_B" 5501 \
		>"$TMPD/torture.cli" 2>&1 || rc=1
	wait "$spid" || rc=1
	sed 's/^/# /' "$TMPD/torture.cli" >&3
	[ "$rc" = 0 ] || { cat "$TMPD/torture.srv"; return 1; }
	[ "$(shimstat "$TMPD/torture-srv.stats" offloaded)" -ge 10 ] || { echo "server offloaded $(shimstat "$TMPD/torture-srv.stats" offloaded) connections"; return 1; }
	# The pool (docs/shim.md): both ends reused released connections'
	# memory (the pool case alone makes 3 hits each), the client released
	# 6 at once into a pool of 4, and nothing was refused or stale.
	local side k
	for side in srv cli; do
		zn_diag "torture: $side pool: $(for k in pool_hits pool_misses pool_returned pool_full pool_refused stale_cqes; do printf '%s %s ' $k "$(shimstat "$TMPD/torture-$side.stats" $k)"; done)"
		[ "$(shimstat "$TMPD/torture-$side.stats" pool_hits)" -ge 3 ] || { echo "$side: fewer than 3 attaches from the pool"; return 1; }
		[ "$(shimstat "$TMPD/torture-$side.stats" pool_refused)" = 0 ] && [ "$(shimstat "$TMPD/torture-$side.stats" stale_cqes)" = 0 ] ||
			{ echo "$side: memory refused by the pool, or completions of another flow"; grep 'not pooled' "$TMPD/torture-cli.log"; return 1; }
	done
	[ "$(shimstat "$TMPD/torture-cli.stats" pool_full)" -ge 2 ] || { echo "client: 6 connections released at once, but the pool of 4 was full for fewer than 2"; return 1; }
}
shim_case torture "fork, dup/dup2/F_DUPFD, SCM_RIGHTS, O_NONBLOCK/FIONBIO, select/poll/epoll (ET, ONESHOT, nested), half-close, EOF, ECONNRESET, EINTR" torture_case

# Zero-copy sends: the applications above only send on non-blocking
# sockets, which the shim copies through its staging memory; socat writes
# its -b bytes with blocking write()s, which at ZN_SHIM_ZC_THRESHOLD or
# more go zero-copy (registered through the cache, posted, returning once
# ACKed). 8 MiB of random bytes in 1 MiB writes, both ends under the shim:
# the received file's SHA-256 is the sent one's, the sender's shim counted
# zero-copy sends for at least 7 MiB of it (socat reads a file in 1 MiB
# pieces), and the flows' counters account for every byte (zc_account).
zcsend_case() {
	local spid c0 c1 rc=0 zcb acc ZN_PFX
	head -c $((8 << 20)) /dev/urandom >"$TMPD/zc.in" || return 1
	c0=$(zc_snap)
	zn_pfx b
	"${ZN_PFX[@]}" env LD_PRELOAD="$SHIM" ZN_SHIM_STATS="$TMPD/zcsend-srv.stats" ZN_SHIM_LOG="$TMPD/zcsend-srv.log" \
		timeout -k 5 120 socat -u -b 1048576 TCP-LISTEN:5451,bind="$ADDR_B" OPEN:"$TMPD/zc.out",creat,trunc \
		>"$TMPD/zcsend.srv" 2>&1 &
	spid=$!
	zn_wait_listen b 5451 "$spid" || { kill "$spid"; return 1; }
	zn_in a env LD_PRELOAD="$SHIM" ZN_SHIM_STATS="$TMPD/zcsend.stats" ZN_SHIM_LOG="$TMPD/zcsend.log" \
		timeout -k 5 120 socat -u -b 1048576 OPEN:"$TMPD/zc.in" TCP:"$ADDR_B":5451 >"$TMPD/zcsend.cli" 2>&1 ||
		{ echo "socat client failed:"; tail -5 "$TMPD/zcsend.cli"; kill "$spid"; return 1; }
	wait "$spid" || { echo "socat server failed:"; tail -5 "$TMPD/zcsend.srv"; return 1; }
	c1=$(zc_snap)
	[ "$(sha256sum <"$TMPD/zc.in")" = "$(sha256sum <"$TMPD/zc.out")" ] ||
		{ echo "received $(stat -c %s "$TMPD/zc.out") bytes whose SHA-256 differs from the 8 MiB sent"; return 1; }
	zcb=$(shimstat "$TMPD/zcsend.stats" tx_zc_bytes)
	zn_diag "zcsend: sender's shim counters: $(tr '\n' ';' <"$TMPD/zcsend.stats")"
	[ "$(shimstat "$TMPD/zcsend.stats" offloaded)" -ge 1 ] && [ "$(shimstat "$TMPD/zcsend-srv.stats" offloaded)" -ge 1 ] ||
		{ echo "not offloaded at both ends"; return 1; }
	[ "$zcb" -ge $((7 << 20)) ] || { echo "only $zcb bytes sent zero-copy"; return 1; }
	acc=$(zc_account "$c0" "$c1" $((8 << 20)) $((8 << 20)) "$TMPD/zcsend.log" "$TMPD/zcsend-srv.log") || { echo "$acc"; rc=1; }
	zn_diag "zcsend: ${acc//$'\n'/; }"
	rm -f "$TMPD/zc.in" "$TMPD/zc.out"
	return "$rc"
}
shim_case zcsend "blocking 1 MiB sends (socat) go zero-copy through the shim, 8 MiB SHA-256 checked" zcsend_case

# sendfile zero-copy (docs/shim.md, "sendfile"): zn_shim_sendfile.py sends
# a file of 3 MiB + 4321 bytes (random) with libc's sendfile: from an
# offset pointer at 1000 in odd counts, from the file position at 5 with a
# count beyond the end and then EOF, beyond the end and a count of 0, and
# on a non-blocking socket through EAGAIN; each return value, *offset and
# the file position checked by the script; the server's SHA-256 of what it
# received is the client's of what it must be. Both ends under the shim:
# the client's shim sent every byte zero-copy from the file's pages
# (sendfile_zc_bytes, no fallback, nothing copied), and zc_account. Then
# the same with registration refused: the client without CAP_IPC_LOCK and
# a memlock limit of 3 MiB (its ring and staging, 2 MiB, fit; a 2 MiB
# file window does not): MR_REG fails with ENOMEM, and every byte goes
# the copy path, counted (sendfile_fallbacks) and still byte-exact.
sendfile_run() {
	local name=$1 port=$2 spid rcv snt ZN_PFX t=$ZN_ROOT/selftests/zn_shim_sendfile.py
	shift 2
	zn_pfx b
	"${ZN_PFX[@]}" env LD_PRELOAD="$SHIM" ZN_SHIM_STATS="$TMPD/$name-srv.stats" ZN_SHIM_LOG="$TMPD/$name-srv.log" \
		timeout -k 5 120 python3 "$t" server "$ADDR_B" "$port" >"$TMPD/$name.srv" 2>&1 &
	spid=$!
	zn_wait_listen b "$port" "$spid" || { kill "$spid"; return 1; }
	zn_in a "$@" env LD_PRELOAD="$SHIM" ZN_SHIM_STATS="$TMPD/$name.stats" ZN_SHIM_LOG="$TMPD/$name.log" \
		timeout -k 5 120 python3 "$t" client "$ADDR_B" "$port" "$TMPD/sf.in" >"$TMPD/$name.cli" 2>&1 ||
		{ echo "$name: client failed ($?):"; tail -n 5 "$TMPD/$name.cli" "$TMPD/$name.log" "$TMPD/$name.srv" "$TMPD/$name-srv.log"; kill "$spid" 2>/dev/null; return 1; }
	wait "$spid" || { echo "$name: server failed:"; tail -5 "$TMPD/$name.srv"; return 1; }
	rcv=$(awk '/^received/ { print $2, $3 }' "$TMPD/$name.srv")
	snt=$(awk '/^sent/ { print $2, $3 }' "$TMPD/$name.cli")
	zn_diag "$name: $(cat "$TMPD/$name.cli"); client's counters: $(for k in offloaded sendfile_bytes sendfile_zc_bytes sendfile_copied_bytes sendfile_fallbacks sendfile_maps sendfile_map_hits tx_staged_sends; do printf '%s %s ' $k "$(shimstat "$TMPD/$name.stats" $k)"; done)"
	[ -n "$snt" ] && [ "$rcv" = "$snt" ] || { echo "$name: the server received '$rcv' (bytes SHA-256), the client sent '$snt'"; return 1; }
	[ "$(shimstat "$TMPD/$name.stats" offloaded)" -ge 1 ] && [ "$(shimstat "$TMPD/$name-srv.stats" offloaded)" -ge 1 ] ||
		{ echo "$name: not offloaded at both ends"; return 1; }
}

sendfile_case() {
	local c0 c1 total acc rc=0 k
	head -c $(((3 << 20) + 4321)) /dev/urandom >"$TMPD/sf.in" || return 1
	c0=$(zc_snap)
	sendfile_run sendfile 5461 || return 1
	c1=$(zc_snap)
	total=$(awk '/^sent/ { print $2 }' "$TMPD/sendfile.cli")
	[ "$(shimstat "$TMPD/sendfile.stats" sendfile_zc_bytes)" = "$total" ] &&
		[ "$(shimstat "$TMPD/sendfile.stats" sendfile_fallbacks)" = 0 ] &&
		[ "$(shimstat "$TMPD/sendfile.stats" sendfile_copied_bytes)" = 0 ] ||
		{ echo "not all $total bytes sent zero-copy from the file:"; grep sendfile "$TMPD/sendfile.log" | head -5; return 1; }
	acc=$(zc_account "$c0" "$c1" "$total" "$total" "$TMPD/sendfile.log" "$TMPD/sendfile-srv.log") || { echo "$acc"; rc=1; }
	zn_diag "sendfile: ${acc//$'\n'/; }"
	# Registration refused: the copy path, counted.
	sendfile_run sendfile-refused 5462 setpriv --bounding-set=-ipc_lock prlimit --memlock=$((3 << 20)) -- || return 1
	k=$(shimstat "$TMPD/sendfile-refused.stats" sendfile_fallbacks)
	[ "$k" -ge 1 ] && [ "$(shimstat "$TMPD/sendfile-refused.stats" sendfile_zc_bytes)" = 0 ] &&
		[ "$(shimstat "$TMPD/sendfile-refused.stats" sendfile_copied_bytes)" = "$total" ] &&
		grep -q 'copied, not zero-copy: registration' "$TMPD/sendfile-refused.log" ||
		{ echo "registration refused: expected every byte copied, counted, with the reason logged:"; grep sendfile "$TMPD/sendfile-refused.log" | head -5; return 1; }
	zn_diag "sendfile-refused: $(grep -m1 'copied, not zero-copy' "$TMPD/sendfile-refused.log")"
	rm -f "$TMPD/sf.in"
	return "$rc"
}
shim_case sendfile "sendfile zero-copy from the page cache (offsets, *offset, file position, EOF, non-blocking), SHA-256; the copy path when registration is refused" sendfile_case

# Fallbacks: loopback connections pass through, counted.
loopback_case() {
	local out
	out=$(zn_in b env LD_PRELOAD="$SHIM" ZN_SHIM_STATS=- python3 -c '
import socket, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
def srv():
    c, _ = s.accept(); c.sendall(c.recv(100) * 2); c.close()
threading.Thread(target=srv).start()
c = socket.create_connection(("127.0.0.1", s.getsockname()[1])); c.sendall(b"zn"); print(c.recv(100))
' 2>&1)
	echo "$out" | grep -q "b'znzn'" || { echo "$out"; return 1; }
	echo "$out" | grep -q "offloaded 0 .*loopback 2" || { echo "$out"; return 1; }
}
shim_case loopback "loopback TCP passes through, both ends counted as loopback fallbacks" loopback_case

disabled_case() {
	local out
	out=$(iperf 1 iperf-off 5431 -t 1) || { echo "$out"; return 1; }
	[ "$(shimstat "$TMPD/iperf-off.stats" offloaded)" -ge 2 ] || { echo "expected offload in the control run"; return 1; }
	out=$(ZN_SHIM=0 iperf 1 iperf-dis 5441 -t 1) || { echo "$out"; return 1; }
	[ "$(shimstat "$TMPD/iperf-dis.stats" offloaded)" = 0 ] || { echo "ZN_SHIM=0 still offloaded"; return 1; }
	[ "$(shimstat "$TMPD/iperf-dis.stats" disabled)" -ge 2 ] || { echo "ZN_SHIM=0: fallbacks not counted as disabled"; return 1; }
}
shim_case disabled "ZN_SHIM=0 disables the offload (counted), the same run offloads without it" disabled_case

# Every application exited: their regions, pins and flows are gone (a
# connection's last close detaches it and deregisters its memory; the
# kernel lets go once the sockets are closed).
zn_case "no region, pin or flow left once the applications exited" zn_nic_use_back "$PERF" "$BEFORE" 11

ktap_finished

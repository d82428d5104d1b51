#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Unmodified applications over the LD_PRELOAD shim (target/release/
# libzn_shim.so, docs/shim.md), topology two-port: servers on side b,
# clients on side a, each run with the shim on both ends (the runs are
# selftests/zn_shim_lib.sh's; iperf3 also once without, the control that
# the set-up itself works: the comparison of every application with and
# without the shim is make bench's, scripts/bench-guest's shim part).
# The shim only attaches each connection (setsockopt TCP_ULP "zeronic");
# the socket then serves itself in the kernel. Every case checks the
# application's own correctness (iperf3: bytes received = bytes sent;
# redis: values read back equal, byte for byte, what was written, and a
# BGSAVE fork; nginx: the file's SHA-256 over sendfile; sockperf, its
# server and client waiting in select, poll or epoll: every reply equal to
# its request, none dropped, duplicated or out of order), that the shim
# attached the connections (its per-process counters, ZN_SHIM_STATS), and
# that the NIC carried the bytes (served_account): every byte the
# applications received was placed by the NIC (the ports'
# zc_rx_placed_bytes), or came in a frame the NIC handed to the normal
# path for lack of room in the ring (hw_rx_fallback less hw_rx_ooo_full,
# at most MTU - 40 payload bytes each), or arrived before the attach (at
# most the receive buffer TCP starts a connection with, tcp_rmem's
# default, per connection). Each case prints its throughput (or
# requests/s, or sockperf's latency) with the shim and, for the bulk
# cases, the guest's CPU seconds per GiB moved (system-wide, /proc/stat).
# Last, once every application exited, no region, pin or flow of NIC 0 is
# left (zn-perf query).
#
# ZN_SHIM_SECS: seconds per iperf3 run (default 3).
# ZN_SHIM_SOCKPERF_SECS: seconds per sockperf client run (-t, default 1).
# ZN_SHIM_CASES: run only the cases named (words of: iperf iperfz iperfr
# redis nginx sockperf torture socat sendfile memlock loopback disabled);
# the others are reported as skipped, never passed. For development runs;
# make check runs them all.
set -u
. "$(dirname "$0")/lib.sh"

zn_need_topology two-port

. "$(dirname "$0")/net_lib.sh"
. "$(dirname "$0")/zn_shim_lib.sh"

SHIM=$ZN_ROOT/target/release/libzn_shim.so
SECS=${ZN_SHIM_SECS:-3}

PERF=$ZN_ROOT/target/release/zn-perf

zn_load
zn_net_start 13

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

# rx_snap: "placed nospace" summed over both ports: the bytes the NIC
# placed for attached sockets (zc_rx_placed_bytes) and the frames it
# handed to the normal path for lack of room (hw_rx_fallback counts those
# and the frames that found the out-of-order room full, hw_rx_ooo_full).
# One ethtool call per port (each costs a process in the port's namespace).
rx_snap() {
	local s
	for s in a b; do
		zn_in $s ethtool -S "$(zn_side_if $s)"
	done | awk '{ v[$1] += $2 }
		END { printf "%.0f %.0f\n", v["zc_rx_placed_bytes:"], v["hw_rx_fallback:"] - v["hw_rx_ooo_full:"] }'
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

# shimstat FILE... KEY: the sum of KEY over the shim's exit reports in the
# files.
shimstat() {
	local k=${*: -1}
	awk -v k="$k" '{ for (i = 1; i < NF; i++) if ($i == k) s += $(i + 1) } END { print s + 0 }' "${@:1:$#-1}" 2>/dev/null
}

# served_account "SNAP_BEFORE" "SNAP_AFTER" RX STATS...: whether the NIC
# carried the RX bytes the applications received over the connections
# the shim attached (their count: the "attached" counters of the STATS
# files). Fails unless some bytes were placed and placed + frames without
# room x (MTU - 40) + attached connections x tcp_rmem's default covers RX.
# Prints what it found.
served_account() {
	local rx=$3 mss rmem n cover
	mss=$(($(zn_mtu b) - 40))
	rmem=$(zn_in b cat /proc/sys/net/ipv4/tcp_rmem | awk '{ print $2 }')
	# shellcheck disable=SC2086 # the snapshots' words
	set -- $1 $2 "${@:4}"
	local placed=$(($3 - $1)) nospace=$(($4 - $2))
	shift 4
	n=$(shimstat "$@" attached)
	cover=$((placed + nospace * mss + n * rmem))
	echo "received $rx bytes over $n attached connections: the NIC placed $placed, $nospace frames without room"
	[ "$placed" -gt 0 ] || { echo "the NIC placed nothing"; return 1; }
	[ "$cover" -ge "$rx" ] || { echo "placed + frames without room + set-up ($cover) do not cover the $rx bytes received"; return 1; }
}

# attached_both SERVER_STATS CLIENT_STATS MIN: at least MIN attached
# connections at each end, none refused but for a reason the case expects
# (none here).
attached_both() {
	local srv cli k bad=""
	srv=$(shimstat "$1" attached) cli=$(shimstat "$2" attached)
	for k in not_zeronic ipv6 not_established has_ulp unsupported memlock table_full nic_error no_driver other_error connect_failed; do
		[ "$(shimstat "$1" "$2" $k)" = 0 ] || bad+=" $k $(shimstat "$1" "$2" $k)"
	done
	[ "$srv" -ge "$3" ] && [ "$cli" -ge "$3" ] && [ -z "$bad" ] ||
		{ echo "attached: server $srv, client $cli (want $3 each); refused:${bad:- none}"; return 1; }
}

# iperf_case [--control] NAME PORT [options]: with the shim. --control:
# first the same run without the shim (on PORT; the shim's on PORT + 1),
# the control that iperf3, the ports and the test's set-up work, so that a
# failure with the shim is the shim's.
iperf_case() {
	local control=0 name port with without c0 c1 acc rc=0 w0
	[ "$1" != --control ] || { control=1; shift; }
	name=$1 port=$2
	shift 2
	if [ "$control" = 1 ]; then
		without=$(iperf 0 "$name-plain" "$port" "$@") || { echo "without the shim (the control): $without"; return 1; }
		zn_diag "$name: without the shim (the control) ${without% *} (Gbit/s bytes)"
	fi
	c0=$(rx_snap)
	w0=$(why_snap)
	with=$(iperf 1 "$name-shim" $((port + 1)) "$@") || { echo "with the shim: $with"; tail "$TMPD/$name-shim.log" 2>/dev/null; return 1; }
	c1=$(rx_snap)
	zn_diag "$name: normal-path counters: $(why_delta "$w0" "$(why_snap)")"
	# shellcheck disable=SC2046 # "GBITS BYTES CPU"
	set -- $with
	acc=$(served_account "$c0" "$c1" "$2" "$TMPD/$name-shim.stats") || rc=$?
	zn_diag "$name: with shim ${with% *} (Gbit/s bytes), CPU ${with##* } s/GiB"
	zn_diag "$name: ${acc//$'\n'/; }"
	zn_diag "$name: shim counters: $(tr '\n' ';' <"$TMPD/$name-shim.stats")"
	# Control and data connection, both ends (one stats file: iperf()
	# gives both ends the same name).
	[ "$(shimstat "$TMPD/$name-shim.stats" attached)" -ge 4 ] ||
		{ echo "only $(shimstat "$TMPD/$name-shim.stats" attached) connections attached (control and data, both ends)"; return 1; }
	return "$rc"
}

shim_case iperf "iperf3 (select, read/write) over the shim, and once without (the control)" iperf_case --control iperf 5401
shim_case iperfz "iperf3 -Z (sendfile) over the shim" iperf_case iperfz 5411 -Z
shim_case iperfr "iperf3 -R (server sends) over the shim" iperf_case iperfr 5421 -R

# Requests per redis-benchmark run (values up to 1 KiB, and 64 KiB), over
# 4 connections: enough to check the data path and the accounting;
# ZN_SHIM_REDIS_N, ZN_SHIM_REDIS_N64 for steadier figures.
REDIS_N=${ZN_SHIM_REDIS_N:-200}
REDIS_N64=${ZN_SHIM_REDIS_N64:-64}

redis_case() {
	local with c0 c1 acc rc=0 w0
	c0=$(rx_snap)
	w0=$(why_snap)
	with=$(redis_run 1 redis-shim 6401) || { echo "with the shim: $with"; tail "$TMPD/redis-shim.log" "$TMPD/redis-shim-cli.log" 2>/dev/null; return 1; }
	c1=$(rx_snap)
	zn_diag "redis: normal-path counters: $(why_delta "$w0" "$(why_snap)")"
	# The server read at least the 64 KiB SETs' values, the clients the
	# GETs' (-P 1 and -P 16).
	acc=$(served_account "$c0" "$c1" $((4 * REDIS_N64 * 65536)) "$TMPD/redis-shim.stats" "$TMPD/redis-shim-cli.stats") || rc=$?
	zn_diag "redis requests/s SET/GET with shim:$with"
	zn_diag "redis: ${acc//$'\n'/; }"
	zn_diag "redis: server counters: $(tr '\n' ';' <"$TMPD/redis-shim.stats")"
	attached_both "$TMPD/redis-shim.stats" "$TMPD/redis-shim-cli.stats" 8 || return 1
	return "$rc"
}
shim_case redis "redis-server + redis-benchmark (epoll, accept4, BGSAVE fork) over the shim" redis_case

nginx_case() {
	local with c0 c1 acc rc=0 w0
	c0=$(rx_snap)
	w0=$(why_snap)
	with=$(nginx_run 1 nginx-shim 8081) || { echo "with the shim: $with"; tail "$TMPD/nginx-shim.log" 2>/dev/null; return 1; }
	c1=$(rx_snap)
	zn_diag "nginx: normal-path counters: $(why_delta "$w0" "$(why_snap)")"
	acc=$(served_account "$c0" "$c1" $((16 << 20)) "$TMPD/nginx-shim.stats" "$TMPD/nginx-shim-cli.stats") || rc=$?
	zn_diag "nginx: with shim ${with} (curl MiB/s, wrk 4 KiB requests/s, CPU s/GiB of the curl)"
	zn_diag "nginx: ${acc//$'\n'/; }"
	zn_diag "nginx: shim counters: $(tr '\n' ';' <"$TMPD/nginx-shim.stats")"
	attached_both "$TMPD/nginx-shim.stats" "$TMPD/nginx-shim-cli.stats" 2 || return 1
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

# Both ends attached, per multiplexer, and the NIC placed the messages
# both ways (served_account over the three runs).
sockperf_case() {
	local mux mname with c0 c1 w0 acc rc=0 port=11403 rx=0 stats=()
	local v a q50 q99 sent rcvd
	c0=$(rx_snap)
	w0=$(why_snap)
	for mux in s p e; do
		case $mux in s) mname=select ;; p) mname=poll ;; e) mname=epoll ;; esac
		with=$(sockperf_run 1 "sockperf-$mux-shim" "$port" "$mux") || { echo "-F $mux with the shim: $with"; tail "$TMPD/sockperf-$mux-shim.log" "$TMPD/sockperf-$mux-shim-cli.log" 2>/dev/null; return 1; }
		port=$((port + 1))
		read -r v a q50 q99 sent rcvd <<<"$with"
		zn_diag "sockperf $mname: latency usec avg/p50/p99 with shim $a/$q50/$q99 ($v valid)"
		attached_both "$TMPD/sockperf-$mux-shim.stats" "$TMPD/sockperf-$mux-shim-cli.stats" 1 || { echo "-F $mux"; return 1; }
		rx=$((rx + (sent + rcvd) * SOCKPERF_MSG))
		stats+=("$TMPD/sockperf-$mux-shim.stats" "$TMPD/sockperf-$mux-shim-cli.stats")
	done
	c1=$(rx_snap)
	zn_diag "sockperf: normal-path counters: $(why_delta "$w0" "$(why_snap)")"
	acc=$(served_account "$c0" "$c1" "$rx" "${stats[@]}") || rc=$?
	zn_diag "sockperf: ${acc//$'\n'/; }"
	return "$rc"
}
shim_case sockperf "sockperf ping-pong (TCP; select, poll, epoll on both ends) over the shim" sockperf_case

# The socket semantics of docs/shim.md, case by case (zn_shim_torture.py),
# both ends under the shim; its non-blocking connect is attached at its
# first data call (attached_late).
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
	zn_diag "torture: client counters: $(tr '\n' ';' <"$TMPD/torture-cli.stats")"
	attached_both "$TMPD/torture-srv.stats" "$TMPD/torture-cli.stats" 10 || return 1
	[ "$(shimstat "$TMPD/torture-cli.stats" attached_late)" -ge 1 ] ||
		{ echo "the non-blocking connect was not attached late"; grep Late "$TMPD/torture-cli.log"; return 1; }
}
shim_case torture "fork, dup/dup2/F_DUPFD, SCM_RIGHTS, O_NONBLOCK/FIONBIO, select/poll/epoll (ET, ONESHOT, nested), half-close, EOF, ECONNRESET, EINTR, non-blocking connect" torture_case

# Blocking 1 MiB writes (socat): 8 MiB of random bytes, both ends under
# the shim, the received file's SHA-256 is the sent one's.
socat_case() {
	local spid c0 c1 acc ZN_PFX
	head -c $((8 << 20)) /dev/urandom >"$TMPD/zc.in" || return 1
	c0=$(rx_snap)
	zn_pfx b
	"${ZN_PFX[@]}" env LD_PRELOAD="$SHIM" ZN_SHIM_STATS="$TMPD/socat-srv.stats" \
		timeout -k 5 120 socat -u -b 1048576 TCP-LISTEN:5451,bind="$ADDR_B" OPEN:"$TMPD/zc.out",creat,trunc \
		>"$TMPD/socat.srv" 2>&1 &
	spid=$!
	zn_wait_listen b 5451 "$spid" || { kill "$spid"; return 1; }
	zn_in a env LD_PRELOAD="$SHIM" ZN_SHIM_STATS="$TMPD/socat.stats" \
		timeout -k 5 120 socat -u -b 1048576 OPEN:"$TMPD/zc.in" TCP:"$ADDR_B":5451 >"$TMPD/socat.cli" 2>&1 ||
		{ echo "socat client failed:"; tail -5 "$TMPD/socat.cli"; kill "$spid"; return 1; }
	wait "$spid" || { echo "socat server failed:"; tail -5 "$TMPD/socat.srv"; return 1; }
	c1=$(rx_snap)
	[ "$(sha256sum <"$TMPD/zc.in")" = "$(sha256sum <"$TMPD/zc.out")" ] ||
		{ echo "received $(stat -c %s "$TMPD/zc.out") bytes whose SHA-256 differs from the 8 MiB sent"; return 1; }
	attached_both "$TMPD/socat-srv.stats" "$TMPD/socat.stats" 1 || return 1
	acc=$(served_account "$c0" "$c1" $((8 << 20)) "$TMPD/socat-srv.stats" "$TMPD/socat.stats") || { echo "$acc"; return 1; }
	zn_diag "socat: ${acc//$'\n'/; }"
	rm -f "$TMPD/zc.in" "$TMPD/zc.out"
}
shim_case socat "blocking 1 MiB writes (socat) over the shim, 8 MiB SHA-256 checked" socat_case

# sendfile (zn_shim_sendfile.py): a file of 3 MiB + 4321 bytes (random)
# sent with libc's sendfile: from an offset pointer at 1000 in odd counts,
# from the file position at 5 with a count beyond the end and then EOF,
# beyond the end and a count of 0, and on a non-blocking socket through
# EAGAIN; each return value, *offset and the file position checked by the
# script; the server's SHA-256 of what it received is the client's of
# what it must be. Both ends attached.
sendfile_case() {
	local spid rcv snt ZN_PFX t=$ZN_ROOT/selftests/zn_shim_sendfile.py
	head -c $(((3 << 20) + 4321)) /dev/urandom >"$TMPD/sf.in" || return 1
	zn_pfx b
	"${ZN_PFX[@]}" env LD_PRELOAD="$SHIM" ZN_SHIM_STATS="$TMPD/sendfile-srv.stats" \
		timeout -k 5 120 python3 "$t" server "$ADDR_B" 5461 >"$TMPD/sendfile.srv" 2>&1 &
	spid=$!
	zn_wait_listen b 5461 "$spid" || { kill "$spid"; return 1; }
	zn_in a env LD_PRELOAD="$SHIM" ZN_SHIM_STATS="$TMPD/sendfile.stats" \
		timeout -k 5 120 python3 "$t" client "$ADDR_B" 5461 "$TMPD/sf.in" >"$TMPD/sendfile.cli" 2>&1 ||
		{ echo "client failed ($?):"; tail -n 5 "$TMPD/sendfile.cli" "$TMPD/sendfile.srv"; kill "$spid" 2>/dev/null; return 1; }
	wait "$spid" || { echo "server failed:"; tail -5 "$TMPD/sendfile.srv"; return 1; }
	rcv=$(awk '/^received/ { print $2, $3 }' "$TMPD/sendfile.srv")
	snt=$(awk '/^sent/ { print $2, $3 }' "$TMPD/sendfile.cli")
	zn_diag "sendfile: $(cat "$TMPD/sendfile.cli")"
	[ -n "$snt" ] && [ "$rcv" = "$snt" ] || { echo "the server received '$rcv' (bytes SHA-256), the client sent '$snt'"; return 1; }
	attached_both "$TMPD/sendfile-srv.stats" "$TMPD/sendfile.stats" 1 || return 1
	rm -f "$TMPD/sf.in"
}
shim_case sendfile "sendfile (offsets, *offset, file position, EOF, non-blocking) over attached sockets, SHA-256" sendfile_case

# An attach the kernel refuses leaves the connection as it was: a client
# without CAP_IPC_LOCK whose memlock limit (512 KiB) is below the ring
# (4 MiB, the module's ring_kib) gets ENOMEM (counted as memlock), and its transfer still completes
# over plain TCP, byte-exact.
memlock_case() {
	local spid out ZN_PFX t=$ZN_ROOT/selftests/zn_shim_torture.py
	zn_pfx b
	"${ZN_PFX[@]}" env LD_PRELOAD="$SHIM" ZN_SHIM_STATS="$TMPD/memlock-srv.stats" timeout -k 5 120 python3 "$t" server "$ADDR_B" 5521 \
		>"$TMPD/memlock.srv" 2>&1 &
	spid=$!
	zn_wait_listen b 5521 "$spid" || { kill "$spid"; return 1; }
	out=$(zn_in a setpriv --bounding-set=-ipc_lock prlimit --memlock=$((512 << 10)) -- \
		env LD_PRELOAD="$SHIM" ZN_SHIM_STATS="$TMPD/memlock.stats" ZN_SHIM_LOG="$TMPD/memlock.log" \
		timeout -k 5 60 python3 -c '
import os, socket, sys
addr, port = sys.argv[1], int(sys.argv[2])
data = os.urandom(4 << 20)
s = socket.create_connection((addr, port)); s.sendall(b"echo\n")
got = bytearray()
import threading
def rd():
    while True:
        d = s.recv(1 << 16)
        if not d: break
        got.extend(d)
t = threading.Thread(target=rd); t.start()
s.sendall(data); s.shutdown(socket.SHUT_WR); t.join()
print("ok" if bytes(got) == data + b"total %d\n" % len(data) else "differs: %d bytes" % len(got))
socket.create_connection((addr, port)).sendall(b"quit\n")
' "$ADDR_B" 5521 2>&1) || { echo "client: $out"; kill "$spid"; return 1; }
	wait "$spid" || { echo "server failed:"; tail -5 "$TMPD/memlock.srv"; return 1; }
	[ "$out" = ok ] || { echo "client: $out"; return 1; }
	zn_diag "memlock: $(grep -m1 'not attached' "$TMPD/memlock.log")"
	[ "$(shimstat "$TMPD/memlock.stats" memlock)" = 2 ] && [ "$(shimstat "$TMPD/memlock.stats" attached)" = 0 ] ||
		{ echo "client: expected both connections refused with ENOMEM: $(cat "$TMPD/memlock.stats")"; return 1; }
	[ "$(shimstat "$TMPD/memlock-srv.stats" attached)" = 2 ] || { echo "server: $(cat "$TMPD/memlock-srv.stats")"; return 1; }
}
shim_case memlock "an attach refused (ENOMEM, memlock 512 KiB) is counted and the 4 MiB echo still completes over plain TCP" memlock_case

# Fallbacks: loopback connections pass through, counted as not over a
# ZeroNIC port (ENODEV).
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
	echo "$out" | grep -q "connections 2 attached 0 .* not_zeronic 2 " || { echo "$out"; return 1; }
}
shim_case loopback "loopback TCP passes through, both ends counted as not_zeronic (ENODEV)" loopback_case

disabled_case() {
	local out
	out=$(iperf 1 iperf-on 5431 -t 1) || { echo "$out"; return 1; }
	[ "$(shimstat "$TMPD/iperf-on.stats" attached)" -ge 2 ] || { echo "expected attaches in the control run"; return 1; }
	out=$(ZN_SHIM=0 iperf 1 iperf-dis 5441 -t 1) || { echo "$out"; return 1; }
	[ "$(shimstat "$TMPD/iperf-dis.stats" attached)" = 0 ] || { echo "ZN_SHIM=0 still attached"; return 1; }
	[ "$(shimstat "$TMPD/iperf-dis.stats" disabled)" -ge 2 ] || { echo "ZN_SHIM=0: not counted as disabled"; return 1; }
}
shim_case disabled "ZN_SHIM=0 attaches nothing (counted), the same run attaches without it" disabled_case

# Every application exited: their regions, pins and flows are gone (the
# kernel detaches a socket at its last close).
zn_case "no region, pin or flow left once the applications exited" zn_nic_use_back "$PERF" "$BEFORE" 11

ktap_finished

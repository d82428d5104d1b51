# shellcheck shell=bash
# SPDX-License-Identifier: GPL-2.0
# The application runs of selftests/zn_shim.sh, each with or without the
# LD_PRELOAD shim, shared with scripts/bench-guest's shim part, which runs
# each both ways and prints the ratios (the comparison the test leaves to
# the benchmark). Every run checks the application's own correctness and
# fails (prints why, returns 1) if it does not hold. Sourced after lib.sh
# and net_lib.sh (two-port: servers on side b, clients on side a), by a
# script that sets:
#
#   SHIM           target/release/libzn_shim.so
#   TMPD           a scratch directory (the runs' outputs, the shim's logs
#                  and .stats files, named after each run)
#   ADDR_B         side b's address, without the prefix length
#   SECS           seconds per iperf3 run
#   REDIS_N        redis-benchmark requests per run up to 1 KiB values
#   REDIS_N64      the same for 64 KiB values
#   REDIS_PIDS     an array the redis-servers' pids are added to, for the
#                  script's clean-up
#   SOCKPERF_SECS  seconds per sockperf client run (-t)
#   SOCKPERF_MSG   sockperf's message size in bytes

# shim_busy: the guest's non-idle CPU seconds so far (all CPUs, /proc/stat).
shim_busy() {
	awk '$1 == "cpu" { hz = 100; print ($2 + $3 + $4 + $7 + $8) / hz }' /proc/stat
}

# pre SHIM(0|1) NAME: the command prefix of a run with or without the shim.
pre() {
	if [ "$1" = 1 ]; then
		echo env LD_PRELOAD="$SHIM" ZN_SHIM_STATS="$TMPD/$2.stats" ZN_SHIM_LOG="$TMPD/$2.log"
	else
		echo env
	fi
}

# iperf SHIM NAME PORT [iperf3 client options]: one iperf3 run; prints
# "GBITS BYTES CPU_S_PER_GIB" or fails.
iperf() {
	local shim=$1 name=$2 port=$3 spid b0 b1 out ZN_PFX t0 t1
	shift 3
	t0=$(zn_now)
	zn_pfx b
	# shellcheck disable=SC2046 # the prefix words
	"${ZN_PFX[@]}" timeout -k 5 $((SECS + 100)) $(pre "$shim" "$name") iperf3 -s -1 -B "$ADDR_B" -p "$port" >"$TMPD/$name.srv" 2>&1 &
	spid=$!
	zn_wait_listen b "$port" "$spid" || { kill "$spid"; return 1; }
	b0=$(shim_busy)
	# shellcheck disable=SC2046
	zn_in a timeout -k 5 $((SECS + 60)) $(pre "$shim" "$name") iperf3 -c "$ADDR_B" -p "$port" -t "$SECS" -J "$@" \
		>"$TMPD/$name.json" 2>"$TMPD/$name.err" || { cat "$TMPD/$name.err" "$TMPD/$name.json" | tail -20; kill "$spid"; return 1; }
	t1=$(zn_now)
	wait "$spid" || { echo "iperf3 server failed:"; tail -5 "$TMPD/$name.srv"; return 1; }
	b1=$(shim_busy)
	zn_diag "$name: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s to the client's exit, $(zn_secs_since "$t1") s more for the server's"
	# iperf3 -J's document, one member per line (cJSON's layout): the
	# top-level "error", end.sum_sent's and end.sum_received's bytes, the
	# latter's rate. awk, not python3's json: under TCG an interpreter's
	# start costs about 0.3 s.
	awk -v b0="$b0" -v b1="$b1" '
		/^[ \t]"error":/ { e = $0; sub(/^[^:]*:[ \t]*"/, "", e); sub(/",?[ \t]*$/, "", e); err = e }
		/"sum_sent":/ { k = "s"; next }
		/"sum_received":/ { k = "r"; next }
		k != "" && /"bytes":/ { n[k] = $2 + 0 }
		k == "r" && /"bits_per_second":/ { bps = $2 + 0 }
		k != "" && /}/ { seen[k] = 1; k = "" }
		END {
			if (err != "") { print "iperf3: " err > "/dev/stderr"; exit 1 }
			if (!seen["s"] || !seen["r"]) { print "iperf3 printed no JSON with end.sum_sent and end.sum_received" > "/dev/stderr"; exit 1 }
			# iperf3 stops counting at the end of the test: bytes still in
			# flight then are sent but not received, with or without the shim.
			if (n["r"] <= 0 || n["r"] > n["s"]) { printf "sent %.0f bytes, received %.0f\n", n["s"], n["r"] > "/dev/stderr"; exit 1 }
			printf "%.3f %.0f %.1f\n", bps / 1e9, n["r"], (b1 - b0) / (n["r"] / 2^30)
		}' "$TMPD/$name.json"
}

# redis_start SHIM NAME PORT: a redis-server on side b (no persistence
# files outside $TMPD).
redis_start() {
	local ZN_PFX
	zn_pfx b
	# shellcheck disable=SC2046
	"${ZN_PFX[@]}" timeout 900 $(pre "$1" "$2") redis-server --bind "$ADDR_B" --port "$3" --protected-mode no \
		--save '' --appendonly no --dir "$TMPD" --dbfilename "$2.rdb" >"$TMPD/$2.srv" 2>&1 &
	REDIS_PIDS+=($!)
	zn_wait_listen b "$3" "$!"
}

# redis_bench SHIM NAME PORT: redis-benchmark SET/GET at 3 B, 1 KiB, 64 KiB
# (plain and -P 16); prints "size:rps_set/rps_get ..." and checks a 1 MiB
# value written and read back through redis-cli, and a BGSAVE under load.
redis_run() {
	local shim=$1 name=$2 port=$3 out d p n res="" b0 b1 h1 h2 ZN_PFX
	redis_start "$shim" "$name" "$port" || return 1
	b0=$(shim_busy)
	for d in 3 1024 65536; do
		for p in 1 16; do
			# 64 KiB values: fewer requests (TCG).
			n=$REDIS_N
			[ "$d" -le 1024 ] || n=$REDIS_N64
			# shellcheck disable=SC2046
			out=$(zn_in a timeout -k 5 120 $(pre "$shim" "$name-cli") redis-benchmark -h "$ADDR_B" -p "$port" \
				-t set,get -n "$n" -c 4 -d "$d" -P "$p" -q --csv 2>&1) || { echo "redis-benchmark -d $d -P $p: $out"; return 1; }
			res+=" d$d/P$p:$(echo "$out" | awk -F'"' '/^"SET"/ { s = $4 } /^"GET"/ { g = $4 } END { printf "%s/%s", s, g }')"
		done
	done
	b1=$(shim_busy)
	# A 1 MiB value, and a BGSAVE (fork) while a benchmark runs.
	head -c 1048576 /dev/urandom | base64 -w0 >"$TMPD/$name.val"
	h1=$(sha256sum <"$TMPD/$name.val" | cut -d' ' -f1)
	# shellcheck disable=SC2046
	zn_in a timeout -k 5 60 $(pre "$shim" "$name-cli") redis-cli -h "$ADDR_B" -p "$port" -x SET big <"$TMPD/$name.val" >/dev/null || { echo "SET big failed"; return 1; }
	# shellcheck disable=SC2046
	zn_in a timeout -k 5 120 $(pre "$shim" "$name-cli") redis-benchmark -h "$ADDR_B" -p "$port" -t set -n 400 -c 4 -d 1024 -q >/dev/null 2>&1 &
	local bpid=$!
	# shellcheck disable=SC2046
	zn_in a timeout -k 5 60 $(pre "$shim" "$name-cli") redis-cli -h "$ADDR_B" -p "$port" BGSAVE >/dev/null || { echo "BGSAVE failed"; return 1; }
	wait "$bpid" || { echo "benchmark during BGSAVE failed"; return 1; }
	# shellcheck disable=SC2046
	h2=$(zn_in a timeout -k 5 60 $(pre "$shim" "$name-cli") redis-cli -h "$ADDR_B" -p "$port" --raw GET big | head -c -1 | sha256sum | cut -d' ' -f1)
	[ "$h1" = "$h2" ] || { echo "1 MiB value read back differs ($h1 vs $h2)"; return 1; }
	for _ in $(seq 50); do
		[ -s "$TMPD/$name.rdb" ] && break
		zn_nap 0.2
	done
	[ -s "$TMPD/$name.rdb" ] || { echo "BGSAVE wrote no $name.rdb"; return 1; }
	# shellcheck disable=SC2046
	zn_in a timeout -k 5 60 $(pre "$shim" "$name-cli") redis-cli -h "$ADDR_B" -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1
	echo "$res cpu $(awk -v a="$b0" -v b="$b1" 'BEGIN { printf "%.1f", b - a }')s"
}

# nginx_run SHIM NAME PORT: nginx (sendfile on, epoll, FIONBIO, a worker
# process) on side b serving a 16 MiB file; curl fetches it (SHA-256
# checked), then wrk measures requests/s for a 4 KiB file. Prints
# "MIB_S RPS CPU_S_PER_GIB".
nginx_run() {
	local shim=$1 name=$2 port=$3 d=$TMPD/$2 npid h1 h2 b0 b1 t0 t1 rps ZN_PFX
	mkdir -p "$d/www" "$d/tmp"
	[ -e "$TMPD/big" ] || head -c $((16 << 20)) /dev/urandom >"$TMPD/big"
	cp "$TMPD/big" "$d/www/big"
	head -c 4096 /dev/urandom >"$d/www/small"
	cat >"$d/nginx.conf" <<CONF
daemon off;
master_process on;
worker_processes 1;
user root;
pid $d/nginx.pid;
error_log $d/error.log;
events { use epoll; }
http {
	sendfile on;
	access_log off;
	client_body_temp_path $d/tmp;
	server {
		listen $ADDR_B:$port;
		root $d/www;
	}
}
CONF
	zn_pfx b
	# shellcheck disable=SC2046
	"${ZN_PFX[@]}" timeout 600 $(pre "$shim" "$name") nginx -e "$d/error.log" -p "$d" -c "$d/nginx.conf" >"$d/out" 2>&1 &
	npid=$!
	zn_wait_listen b "$port" "$npid" || { cat "$d/out" "$d/error.log"; kill "$npid"; return 1; }
	h1=$(sha256sum <"$TMPD/big" | cut -d' ' -f1)
	b0=$(shim_busy)
	t0=$(zn_now)
	# shellcheck disable=SC2046
	h2=$(zn_in a timeout -k 5 300 $(pre "$shim" "$name-cli") curl -sS "http://$ADDR_B:$port/big" | sha256sum | cut -d' ' -f1)
	t1=$(zn_now)
	b1=$(shim_busy)
	# shellcheck disable=SC2046
	zn_in a timeout -k 5 60 $(pre "$shim" "$name-cli") wrk -t1 -c4 -d3s "http://$ADDR_B:$port/small" >"$d/wrk" 2>&1
	rps=$(awk '/^Requests\/sec:/ { print $2 }' "$d/wrk")
	kill -QUIT "$npid" 2>/dev/null
	wait "$npid" 2>/dev/null
	[ "$h1" = "$h2" ] || { echo "curl's 16 MiB differ from the file ($h2 vs $h1)"; tail -5 "$d/error.log"; return 1; }
	awk -v r="$rps" 'BEGIN { exit !(r > 0) }' || { echo "wrk measured '$rps' requests/s:"; cat "$d/wrk"; return 1; }
	awk -v a="$t0" -v b="$t1" -v c0="$b0" -v c1="$b1" -v r="$rps" \
		'BEGIN { printf "%.1f %s %.1f", 16 / (b - a), r, (c1 - c0) / (16 / 1024) }'
}

# sockperf_run SHIM NAME PORT MUX: one sockperf server (side b) and
# ping-pong client (side a), both with -F MUX (s, p or e); prints "VALID
# AVG P50 P99 SENT RECEIVED" (valid observations, latencies in usec,
# messages of the whole run) or fails. Correctness is sockperf's own: the
# client checks every reply against its request byte for byte
# (--data-integrity, a mismatch ends it with an ERROR), and counts dropped,
# duplicated and out-of-order replies; here every run must have valid
# observations and none of those, and the server must have received every
# message the client sent. Both ends must say they wait in MUX.
# sockperf's exit status is 0 even for a bad option: its output decides.
sockperf_run() {
	local shim=$1 name=$2 port=$3 mux=$4 spid i ZN_PFX
	echo "T:$ADDR_B:$port" >"$TMPD/$name.feed"
	zn_pfx b
	# shellcheck disable=SC2046 # the prefix words
	"${ZN_PFX[@]}" timeout -k 5 120 $(pre "$shim" "$name") sockperf server -f "$TMPD/$name.feed" -F "$mux" \
		>"$TMPD/$name.srv" 2>&1 &
	spid=$!
	zn_wait_listen b "$port" "$spid" || { kill "$spid"; cat "$TMPD/$name.srv"; return 1; }
	# Not --no-rdtsc: sockperf 3.7 then still converts its 400 ms warm-up
	# window with the TSC's rate (measured against clock_gettime over
	# 0.1 s at start, which TCG's TSC passes), so it counts no valid
	# observations in a short run.
	# shellcheck disable=SC2046
	zn_in a timeout -k 5 60 $(pre "$shim" "$name-cli") sockperf ping-pong -f "$TMPD/$name.feed" -F "$mux" \
		-t "$SOCKPERF_SECS" -m "$SOCKPERF_MSG" --data-integrity >"$TMPD/$name.cli" 2>&1 ||
		{ echo "sockperf client exited with $?:"; tail -20 "$TMPD/$name.cli"; kill "$spid"; return 1; }
	# The server closes the connection at the client's EOF; then it has
	# handled every message it will, and is told to exit (SIGINT).
	for ((i = 0; i < 200; i++)); do
		zn_tcp_has "$spid" "$port" 01 || break
		zn_nap 0.05
	done
	! zn_tcp_has "$spid" "$port" 01 || { echo "the server still holds the connection 10 s after the client's exit"; kill "$spid"; return 1; }
	kill -INT "$spid"
	wait "$spid" || { echo "sockperf server exited with $?:"; tail -20 "$TMPD/$name.srv"; return 1; }
	awk -v mux="$mux" '
		BEGIN { m = mux == "s" ? "select" : mux == "p" ? "poll" : "epoll" }
		# count(WHAT): N of "# WHAT messages = N" ("" if absent).
		function count(what) { return match($0, "# " what " messages = [0-9]+") ? substr($0, RSTART + length(what) + 14, RLENGTH - length(what) - 14) : "" }
		{ gsub(/\033\[[0-9;]*m/, "") }
		FILENAME == ARGV[1] && index($0, "using " m "() to block") { smux = 1 }
		FILENAME == ARGV[1] && /Total [0-9]+ messages received and handled/ { srv = $3 }
		FILENAME == ARGV[1] { next }
		index($0, "using " m "() to block") { cmux = 1 }
		/ERROR/ { err = err "[" $0 "] " }
		/\[Total Run\]/ { for (i = 1; i <= NF; i++) { split($i, kv, "[=;]"); if (kv[1] == "SentMessages") S = kv[2]; if (kv[1] == "ReceivedMessages") R = kv[2] } }
		/\[Valid Duration\]/ { for (i = 1; i <= NF; i++) { split($i, kv, "[=;]"); if (kv[1] == "SentMessages") vs = kv[2]; if (kv[1] == "ReceivedMessages") vr = kv[2] } }
		/avg-latency=/ { split($0, a, "avg-latency="); avg = a[2] + 0 }
		/# dropped messages/ { drop = count("dropped"); dup = count("duplicated"); ooo = count("out-of-order"); seen = 1 }
		/percentile 50\.000 =/ { p50 = $NF }
		/percentile 99\.000 =/ { p99 = $NF }
		END {
			if (!smux || !cmux) { print "sockperf does not say it waits in " m "() (server " smux + 0 ", client " cmux + 0 ")"; exit 1 }
			if (err != "") { print "sockperf reported: " err; exit 1 }
			if (!seen || drop == "" || dup == "" || ooo == "" || vr == "" || p50 == "" || p99 == "" || S == "") { print "no statistics in the client output"; exit 1 }
			if (vr <= 0 || vr != vs) { print "valid duration: " vs " messages sent, " vr " received"; exit 1 }
			if (drop != 0 || dup != 0 || ooo != 0) { print "dropped " drop ", duplicated " dup ", out-of-order " ooo; exit 1 }
			if (srv != S) { print "the client sent " S " messages, the server handled " srv; exit 1 }
			printf "%d %.3f %.3f %.3f %d %d\n", vr, avg, p50, p99, S, R
		}' "$TMPD/$name.srv" "$TMPD/$name.cli" || { tail -20 "$TMPD/$name.cli" "$TMPD/$name.srv"; return 1; }
}

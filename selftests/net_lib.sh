# shellcheck shell=bash
# Helpers of the network selftests (net_*.sh) and scripts/bench-net. Sourced
# after lib.sh. The two ends of the link are sides a and b, described only by
# ZN_NS_A/B, ZN_IF_A/B and ZN_ADDR_A/B (see qemu/guest/net-setup), so the
# same tests run over the ZeroNIC ports or over a veth pair (zn_net_veth).

# shellcheck source=qemu/guest/net-setup
. "$ZN_ROOT/qemu/guest/net-setup"

# Diagnostics printed even from inside zn_case, which captures its output.
exec 3>&1
zn_diag() { echo "# $*" >&3; }

zn_side_ns()   { if [ "$1" = a ]; then echo "${ZN_NS_A:-}"; else echo "${ZN_NS_B:-}"; fi; }
zn_side_if()   { if [ "$1" = a ]; then echo "${ZN_IF_A:-}"; else echo "${ZN_IF_B:-}"; fi; }
zn_side_addr() { if [ "$1" = a ]; then echo "${ZN_ADDR_A:-}"; else echo "${ZN_ADDR_B:-}"; fi; }
zn_other()     { if [ "$1" = a ]; then echo b; else echo a; fi; }

# zn_in SIDE CMD...: runs CMD in that side's netns (here if it has none).
# zn_pfx SIDE sets ZN_PFX to the same as a command prefix, for background
# jobs whose $! must be the command itself (ip netns exec execs it).
# Neither starts a subshell; zn_in runs an ip command as ip -n NS, which
# enters the netns as ip netns exec does (a mount namespace with the
# netns's /sys) without the second program.
# zn_pfx also sets ZN_PFX_NS to the netns ("" for none).
zn_pfx() {
	ZN_PFX_NS=${ZN_NS_B:-}
	[ "$1" != a ] || ZN_PFX_NS=${ZN_NS_A:-}
	ZN_PFX=()
	[ -z "$ZN_PFX_NS" ] || ZN_PFX=(ip netns exec "$ZN_PFX_NS")
}
zn_in() {
	local ZN_PFX ZN_PFX_NS
	zn_pfx "$1"
	shift
	if [ "${1:-}" = ip ] && [ -n "$ZN_PFX_NS" ]; then
		shift
		ip -n "$ZN_PFX_NS" "$@"
		return
	fi
	"${ZN_PFX[@]}" "$@"
}

# Both sides exist in this guest.
zn_net_ready() {
	[ -n "${ZN_IF_A:-}" ] && [ -n "${ZN_IF_B:-}" ] &&
		zn_in a ip link show dev "$ZN_IF_A" >/dev/null 2>&1 &&
		zn_in b ip link show dev "$ZN_IF_B" >/dev/null 2>&1
}

# zn_net_start PLAN: KTAP header and plan once both sides are there. In a
# NIC topology the ports are set up again if needed (a test before may have
# reloaded the module); missing ports there are a failure, not a skip.
zn_net_start() {
	ktap_print_header
	case "${ZN_TOPOLOGY:-}" in
	two-port|two-guest)
		if ! zn_net_ready; then
			# Its warnings as KTAP diagnostics; not in a subshell: it exports.
			local log
			log=$(mktemp)
			zn_net_setup 2>"$log"
			sed 's/^/# /' "$log"
			rm -f "$log"
		fi
		;;
	esac
	if zn_net_ready; then
		ktap_print_msg "side a: ${ZN_IF_A} ${ZN_ADDR_A}${ZN_NS_A:+ netns $ZN_NS_A}, side b: ${ZN_IF_B} ${ZN_ADDR_B}${ZN_NS_B:+ netns $ZN_NS_B}"
		ktap_set_plan "$1"
		return
	fi
	case "${ZN_TOPOLOGY:-}" in
	two-port)
		ktap_set_plan 1
		ktap_test_fail "the driver's net_devices are set up (ZN_IF_A='${ZN_IF_A:-}' ZN_IF_B='${ZN_IF_B:-}')"
		ktap_finished
		;;
	*)
		ktap_skip_all "needs both link ends in this guest (ZN_IF_A, ZN_IF_B; topology two-port or a veth pair)"
		exit "$KSFT_SKIP"
		;;
	esac
}

# zn_mtu SIDE: the interface's MTU.
zn_mtu() {
	zn_in "$1" cat "/sys/class/net/$(zn_side_if "$1")/mtu"
}

# zn_stats SIDE: "rx_packets rx_bytes tx_packets tx_bytes" of the interface
# (the sysfs view of the stats ip -s prints; one process, no interpreter).
zn_stats() {
	local d v
	d=/sys/class/net/$(zn_side_if "$1")/statistics
	v=$(zn_in "$1" cat "$d/rx_packets" "$d/rx_bytes" "$d/tx_packets" "$d/tx_bytes") || return 1
	echo $v
}

# zn_tcp_has PID PORT STATE: a TCP socket with local port PORT is in STATE
# (/proc/net/tcp's hex: 01 established, 0A listening) in the network
# namespace of process PID: its /proc/PID/net/tcp and tcp6, read by this
# shell, where under TCG a program (ss in the netns) would cost 0.1-0.2 s.
zn_tcp_has() {
	local hex f _sl laddr _raddr st _rest
	printf -v hex '%04X' "$2"
	for f in "/proc/$1/net/tcp" "/proc/$1/net/tcp6"; do
		[ -r "$f" ] || continue
		while read -r _sl laddr _raddr st _rest; do
			[ "$st" = "$3" ] && [ "${laddr##*:}" = "$hex" ] && return 0
		done <"$f"
	done
	return 1
}

# zn_wait_listen SIDE PORT [PID]: waits up to 10 s for a TCP listener on
# PORT in SIDE's namespace. With PID, the server's (the $! of a command
# started with zn_pfx's prefix: ip netns exec execs it), the check reads
# the server's own view of its namespace without starting a program every
# 50 ms, and fails at once if the server exited; without, it polls ss.
# (Until ip netns exec has entered SIDE's namespace, the process sees the
# initial one, where nothing listens on the tests' ports.)
zn_wait_listen() {
	local i
	if [ -n "${3:-}" ]; then
		for ((i = 0; i < 200; i++)); do
			zn_tcp_has "$3" "$2" 0A && return 0
			kill -0 "$3" 2>/dev/null || { echo "the server (pid $3) exited before listening on port $2"; return 1; }
			zn_nap 0.05
		done
	else
		for ((i = 0; i < 100; i++)); do
			zn_in "$1" ss -Hltn "sport = :$2" | grep -q . && return 0
			zn_nap 0.1
		done
	fi
	echo "nothing listens on port $2 on side $1 after 10 s"
	return 1
}

# zn_iperf FROM SECS STREAMS PORT: iperf3 from side FROM to the other side's
# address; prints the received throughput in Gbit/s with 3 decimals, fails
# (with iperf3's words) if the run errs or moves no data.
zn_iperf() {
	local from=$1 secs=$2 streams=$3 port=$4 to spid out rc=0 ZN_PFX
	to=$(zn_other "$from")
	# -1: the server serves this one test and exits.
	zn_pfx "$to"
	"${ZN_PFX[@]}" iperf3 -s -1 -B "$(zn_side_addr "$to")" -p "$port" >/dev/null 2>&1 &
	spid=$!
	if ! zn_wait_listen "$to" "$port" "$spid"; then
		kill "$spid" 2>/dev/null
		wait "$spid" 2>/dev/null
		return 1
	fi
	out=$(zn_in "$from" timeout $((secs + 60)) iperf3 -c "$(zn_side_addr "$to")" -p "$port" \
		-t "$secs" -P "$streams" -J) || rc=$?
	kill "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	# iperf3 -J's document, one member per line (cJSON's layout): the
	# top-level "error", and end.sum_received's bytes and rate. awk, not
	# python3's json: under TCG an interpreter's start costs about 0.3 s.
	printf '%s' "$out" | awk '
		/^[ \t]"error":/ { e = $0; sub(/^[^:]*:[ \t]*"/, "", e); sub(/",?[ \t]*$/, "", e); err = e }
		/"sum_received":/ { r = 1; next }
		r && /"bytes":/ { b = $2 + 0 }
		r && /"bits_per_second":/ { bps = $2 + 0 }
		r && /}/ { r = 0; seen = 1 }
		END {
			if (err != "") { print "iperf3: " err > "/dev/stderr"; exit 1 }
			if (!seen) { print "iperf3 printed no JSON with end.sum_received" > "/dev/stderr"; exit 1 }
			if (b <= 0 || bps <= 0) { printf "iperf3 moved no data: %.0f bytes, %.0f bit/s\n", b, bps > "/dev/stderr"; exit 1 }
			printf "%.3f\n", bps / 1e9
		}' || return 1
	[ "$rc" = 0 ] || { echo "iperf3 client exited with $rc"; return 1; }
}

ZN_XFER=$ZN_ROOT/selftests/net_xfer.py

# zn_xfer FROM SIZE PORT [--to ADDR] [net_xfer.py send options]: a TCP
# transfer of SIZE seeded bytes from side FROM to the other side (its
# ZN_ADDR_*, or ADDR), checked byte for byte by the receiver, which prints
# its verdict. Give each call its own PORT (zn_case runs it in a subshell).
# ZN_XFER_TIMEOUT: seconds either end waits for data (120).
zn_xfer() {
	local from=$1 size=$2 port=$3 to addr rpid out rc=0 ZN_PFX tmo=${ZN_XFER_TIMEOUT:-120}
	shift 3
	to=$(zn_other "$from")
	addr=$(zn_side_addr "$to")
	if [ "${1:-}" = --to ]; then
		addr=$2
		shift 2
	fi
	# The receiver may take minutes under TCG for 32 MiB; its timeout ends it.
	zn_pfx "$to"
	out=$(mktemp)
	"${ZN_PFX[@]}" python3 "$ZN_XFER" recv --bind "$addr" --port "$port" \
		--size "$size" --seed "$size" --timeout "$tmo" >"$out" 2>&1 &
	rpid=$!
	zn_wait_listen "$to" "$port" "$rpid" || { kill "$rpid"; wait "$rpid"; cat "$out"; rm -f "$out"; return 1; }
	zn_in "$from" python3 "$ZN_XFER" send --host "$addr" --port "$port" \
		--size "$size" --seed "$size" --timeout "$tmo" "$@" || { echo "sender failed"; rc=1; }
	wait "$rpid" || rc=1
	cat "$out"
	rm -f "$out"
	return "$rc"
}

# zn_xfer_catches_corruption PORT [--to ADDR]: the check itself can fail:
# a 1 MiB transfer with one flipped byte is reported as a mismatch.
zn_xfer_catches_corruption() {
	local out
	if out=$(zn_xfer a 1048576 "$@" --corrupt 777777); then
		echo "a corrupted transfer passed the check: $out"
		return 1
	fi
	echo "$out" | grep -q '^mismatch:' || { echo "$out"; return 1; }
}

# zn_tcp_retrans SIDE: TCP segments side SIDE's netns retransmitted so far.
zn_tcp_retrans() {
	zn_in "$1" awk '$1 == "Tcp:" { if (!n) { for (i = 2; i <= NF; i++) if ($i == "RetransSegs") c = i; n = 1 } else print $c }' /proc/net/snmp
}

# zn_now: the time in seconds, with nanoseconds; zn_secs_since T0: seconds
# elapsed since zn_now printed T0, 1 decimal.
zn_now() { date +%s.%N; }
zn_secs_since() { awk -v a="$1" -v b="$(zn_now)" 'BEGIN { printf "%.1f", b - a }'; }

# zn_idle_module: waits until nothing holds the module, so that rmmod can
# unload it. Each socket attached to a flow holds a module reference until
# TCP frees it, and an earlier test's closed connections may still be
# finishing (FIN_WAIT, a peer probing a zero window): rmmod would then say
# "in use". Waits up to 60 s for them to go, and says what held the module
# if not.
zn_idle_module() {
	local i n
	for i in $(seq 120); do
		n=$(cat /sys/module/zeronic/refcnt 2>/dev/null || echo 0)
		[ "$n" = 0 ] && return 0
		zn_nap 0.5
	done
	echo "module still referenced ($n) after 60 s; sockets in the port namespaces:"
	zn_in a ss -tan | tail -n +2
	zn_in b ss -tan | tail -n +2
	return 1
}

# zn_bind BDF: binds the zeronic driver to PCI function BDF and checks that
# it is bound and logged the NIC's identity line, then sets the ports up
# again (zn_net_setup, in this shell: it exports the ZN_* variables).
zn_bind() {
	local bdf=$1 drv=/sys/bus/pci/drivers/zeronic m
	m=$(zn_log_mark)
	zn_sysfs_write 60 "$bdf" "$drv/bind" || return 1
	[ -e "$drv/$bdf" ] || { echo "$bdf not bound after bind"; return 1; }
	zn_log_since "$m" | grep -q "zeronic $bdf: ZeroNIC 2\.[0-9]*: 2 port(s)" ||
		{ echo "no identity line after bind:"; zn_log_since "$m" | tail -n 20; return 1; }
	# shellcheck source=qemu/guest/net-setup
	. "$ZN_ROOT/qemu/guest/net-setup"
	zn_net_setup
	zn_net_ready || { echo "zn_net_setup: ZN_IF_A='$ZN_IF_A' ZN_IF_B='$ZN_IF_B'"; return 1; }
}

#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# How offloaded connections end when their processes, the module or the NIC
# go away in the middle of a transfer (topology two-port; selftests/zc_xfer
# moves a checked byte stream between the ports' namespaces, the client
# sending, the server receiving; docs/uapi.md "Detaching, and how a flow
# ends" and "Lifetime"):
#  - kill -9 of the receiving end, then of the sending end, mid-transfer:
#    the other end fails within 30 s, no connection is left, and the NIC's
#    query shows no region, pinned page or Flow Table entry left over;
#  - rmmod while flows are attached and moving data is refused (the files
#    hold the module); the transfer completes intact; rmmod succeeds once
#    the processes exited;
#  - unbind of the NIC mid-transfer: it completes, both ends fail within
#    30 s (the flows fail with ENODEV), and after bind the NIC counts from
#    clean; the kernel's own long-term pin count is back where it started.
# Unloads and rebinds: runs after the tests that need the module as
# qemu/run loaded it.
set -u
. "$(dirname "$0")/lib.sh"

zn_need_topology two-port

. "$(dirname "$0")/net_lib.sh"

XFER=$ZN_ROOT/selftests/zc_xfer
HOLDER=$ZN_ROOT/selftests/mr_holder
DRV=/sys/bus/pci/drivers/zeronic
BIG=$((64 << 30))	# longer than any case lets it run
PORT=5301

zn_loaded || zn_load
zn_net_start 10
bdf=$(basename "$ZN_PCI")
mark=$(zn_log_mark)
tmp=$(mktemp -d)
SPID='' CPID=''
cleanup() {
	kill -KILL $SPID $CPID 2>/dev/null
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# pins_outstanding, pins_at_rest: the kernel's long-term pins.
. "$(dirname "$0")/pins_lib.sh"

# The NIC-wide counters that must return to their baseline.
nic_counters() {
	"$HOLDER" query | grep -o 'mr_in_use=[0-9]* pinned_pages=[0-9]*\|held_pages=[0-9]* flows_in_use=[0-9]*' | tr '\n' ' '
}
# back_to_baseline: the counters are the baseline's within 10 s.
back_to_baseline() {
	local i now
	for i in $(seq 50); do
		now=$(nic_counters)
		[ "$now" = "$base" ] && return 0
		zn_nap 0.2
	done
	echo "query: '$now', want '$base'"
	return 1
}

# No TCP connection on the test port is left in either namespace.
no_connections() {
	local side left
	for side in a b; do
		left=$(zn_in "$side" ss -Htn state all "( sport = :$PORT or dport = :$PORT )" | grep -v -E '^(TIME-WAIT|LISTEN)' || true)
		[ -z "$left" ] || { echo "side $side still has: $left"; return 1; }
	done
}

# start SRVMODE CLIMODE BYTES: the receiver on side b, the sender on side a;
# SPID and CPID are their pids (ip netns exec execs the program).
start() {
	local ZN_PFX
	PORT=$((PORT + 1))
	moved0=$(zc_moved)
	zn_pfx b
	"${ZN_PFX[@]}" "$XFER" server "$PORT" "$1" "$3" >"$tmp/srv" 2>&1 &
	SPID=$!
	zn_wait_listen b "$PORT" "$SPID" || return 1
	zn_pfx a
	"${ZN_PFX[@]}" "$XFER" client "${ZN_ADDR_B%/*}" "$PORT" "$2" "$3" >"$tmp/cli" 2>&1 &
	CPID=$!
}

# zc_moved: bytes the NIC placed on side b plus bytes it merged on side a.
zc_moved() {
	local rx tx
	rx=$(zn_in b ethtool -S "$ZN_IF_B" | awk '$1 == "zc_rx_placed_bytes:" { print $2 }')
	tx=$(zn_in a ethtool -S "$ZN_IF_A" | awk '$1 == "zc_tx_merged_bytes:" { print $2 }')
	echo $((${rx:-0} + ${tx:-0}))
}

# moving: the NIC moved 4 MiB more of zero-copy payload since start() within
# 60 s, both ends still running (the transfer is under way).
moving() {
	local i v
	for i in $(seq 300); do
		v=$(zc_moved)
		[ "$v" -gt $((moved0 + (4 << 20))) ] && return 0
		kill -0 "$SPID" 2>/dev/null && kill -0 "$CPID" 2>/dev/null ||
			{ echo "an end exited early: srv '$(cat "$tmp/srv")' cli '$(cat "$tmp/cli")'"; return 1; }
		zn_nap 0.2
	done
	echo "less than 4 MiB moved by the NIC after 60 s ($((v - moved0)) bytes)"
	return 1
}

# exits_within PID SECS: the process exits within SECS; its status in $rc.
exits_within() {
	local i
	for i in $(seq $(($2 * 10))); do
		if ! kill -0 "$1" 2>/dev/null; then
			wait "$1"
			rc=$?
			return 0
		fi
		zn_nap 0.1
	done
	echo "pid $1 still runs after $2 s"
	return 1
}

base=$(nic_counters)
base_pins=$(pins_at_rest)
ktap_print_msg "baseline: $base pins=$base_pins"

# kill_end WHICH SRVMODE CLIMODE: kill -9 of the receiver (srv) or the
# sender (cli) once data moves; the other end must fail.
kill_end() {
	local victim other rc
	start "$2" "$3" "$BIG" || return 1
	moving || return 1
	if [ "$1" = srv ]; then victim=$SPID other=$CPID; else victim=$CPID other=$SPID; fi
	kill -KILL "$victim"
	wait "$victim" 2>/dev/null
	exits_within "$other" 30 || return 1
	[ "$rc" != 0 ] || { echo "the surviving end exited 0 after its peer was killed"; return 1; }
	zn_diag "survivor: $(tail -n 1 "$tmp/srv" "$tmp/cli" | tr '\n' ' ')"
	SPID='' CPID=''
	back_to_baseline && no_connections
}
zn_case_here "kill -9 of the receiver (message mode) mid-transfer: the sender fails, nothing left" kill_end srv message message
zn_case_here "kill -9 of the sender mid-transfer (stream-mode receiver): the receiver fails, nothing left" kill_end cli stream message
zn_case_here "kill -9 of the receiver (stream mode) facing a plain sender: nothing left" kill_end srv stream plain
zn_case_here "kill -9 of an offloaded sender facing a plain receiver: nothing left" kill_end cli plain message

# rmmod while flows move data: refused; the transfer is not disturbed.
rmmod_refused() {
	local out n=$((96 << 20))
	start message stream "$n" || return 1
	moving || return 1
	if out=$(rmmod zeronic 2>&1); then
		echo "rmmod succeeded with flows attached"
		return 1
	fi
	zn_diag "rmmod: $out"
	grep -q "in use" <<<"$out" || { echo "rmmod said: $out"; return 1; }
	exits_within "$CPID" 240 || return 1
	[ "$rc" = 0 ] || { echo "sender: $(cat "$tmp/cli")"; return 1; }
	exits_within "$SPID" 60 || return 1
	[ "$rc" = 0 ] || { echo "receiver: $(cat "$tmp/srv")"; return 1; }
	SPID='' CPID=''
	zn_diag "receiver: $(cat "$tmp/srv")"
	grep -q "^ok bytes=$n " "$tmp/srv" || { echo "receiver: $(cat "$tmp/srv")"; return 1; }
	back_to_baseline
}
zn_case_here "rmmod with flows attached and moving data is refused; the transfer completes intact" rmmod_refused
unload_after() {
	local i
	# Sockets closed, the files gone: nothing holds the module.
	for i in $(seq 50); do
		rmmod zeronic 2>/dev/null && break
		zn_nap 0.2
	done
	! zn_loaded || { echo "rmmod still refused 10 s after the processes exited: $(rmmod zeronic 2>&1)"; return 1; }
	zn_load || return 1
	# shellcheck source=qemu/guest/net-setup
	. "$ZN_ROOT/qemu/guest/net-setup"
	zn_net_setup >/dev/null 2>&1
	zn_net_ready || { echo "the ports are not set up again after the reload"; return 1; }
	base=$(nic_counters)
}
zn_case_here "once the processes exited, rmmod succeeds (and the module loads again)" unload_after

# Unbind while flows move data: both ends fail, the unbind completes.
unbind_mid() {
	local t0
	start message message "$BIG" || return 1
	moving || return 1
	t0=$(date +%s)
	zn_sysfs_write 60 "$bdf" "$DRV/unbind" || return 1
	zn_diag "unbind took $(($(date +%s) - t0)) s"
	[ ! -e "$DRV/$bdf" ] || { echo "still bound"; return 1; }
	exits_within "$CPID" 30 || return 1
	[ "$rc" != 0 ] || { echo "the sender exited 0"; return 1; }
	exits_within "$SPID" 30 || return 1
	[ "$rc" != 0 ] || { echo "the receiver exited 0"; return 1; }
	zn_diag "sender: $(tail -n 1 "$tmp/cli"); receiver: $(tail -n 1 "$tmp/srv")"
	SPID='' CPID=''
}
zn_case_here "unbind mid-transfer completes; both ends fail within 30 s" unbind_mid
rebound() {
	local p
	zn_bind "$bdf" || return 1
	back_to_baseline || return 1
	p=$(pins_at_rest)
	[ "$p" = "$base_pins" ] || { echo "long-term pins: $p, want $base_pins"; return 1; }
}
zn_case_here "after bind: counters clean, the kernel's long-term pins back to baseline" rebound
after() {
	start stream message $((8 << 20)) || return 1
	exits_within "$CPID" 120 && [ "$rc" = 0 ] || { echo "sender: $(cat "$tmp/cli")"; return 1; }
	exits_within "$SPID" 60 && [ "$rc" = 0 ] || { echo "receiver: $(cat "$tmp/srv")"; return 1; }
	SPID='' CPID=''
	back_to_baseline
}
zn_case_here "a transfer after all that completes intact" after
zn_case_here "no kernel reports since the test started" zn_no_reports "$mark"
ktap_finished

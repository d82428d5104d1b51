#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# An attached flow's notify queue pair follows its application's CPU
# (docs/driver.md, "Notify queues follow the application"; hardware spec
# §14), topology two-port with two or more vCPUs. Side b's port serves two
# queue pairs whose interrupts are pinned to two different CPUs; a socket
# attached by setsockopt(TCP_ULP) (served by TCP, zc_follow.py) is read by
# a process pinned to the first CPU, then to the second, then to the first
# again, 16 MiB per phase in 1 MiB chunks (each read before the next is
# sent, so the ring never fills and the NIC places every frame; the reader
# moves with a chunk in flight). Each phase's payload must arrive through the
# queue pair whose interrupt is on the reader's CPU (80% or more of the
# phase's packets on the port: the few before the move land on the old
# one), TCP must never have queued a packet out of order (a move that let
# the new queue pair's entries overtake the old one's would), and every
# byte must be the one sent.
set -u
. "$(dirname "$0")/lib.sh"

zn_need_topology two-port

. "$(dirname "$0")/net_lib.sh"

PY=$(dirname "$0")/zc_follow.py
PERF=$ZN_ROOT/target/release/zn-perf
PHASE_BYTES=$((16 << 20))
PORT=7201

zn_load
zn_net_start 7

TMPD=$(mktemp -d)
combined=$(zn_in b ethtool -l "$ZN_IF_B" | awk '/^Combined:/ {n = $2} END {print n}')
trap 'zn_in b ethtool -L "$ZN_IF_B" combined "$combined" 2>/dev/null; rm -rf "$TMPD"' EXIT
ADDR_B=${ZN_ADDR_B%/*}
BEFORE=$(zn_nic_use "$PERF")
NCPU=$(nproc)
if [ "$NCPU" -ge 3 ]; then
	CPU0=1 CPU1=2
else
	CPU0=0 CPU1=1
fi

# irqs: "QUEUE IRQ" of each RX queue of side b's port (netdev netlink:
# the queue's NAPI and the NAPI's interrupt).
irqs() {
	local ifindex
	ifindex=$(zn_in b cat "/sys/class/net/$ZN_IF_B/ifindex")
	printf '%s\n' "netdev dump queue-get {\"ifindex\": $ifindex}" \
		"netdev dump napi-get {\"ifindex\": $ifindex}" |
		zn_in b python3 "$(dirname "$0")/zn_ynl.py" | python3 -c '
import json, sys
queues, napis = (json.loads(l) for l in sys.stdin)
irq = {n["id"]: n.get("irq") for n in napis}
for q in queues:
    if q["type"] == "rx":
        print(q["id"], irq.get(q.get("napi-id")))'
}

pin_irqs() {
	local out irq0 irq1 eff0 eff1
	[ "$NCPU" -ge 2 ] || { echo "$NCPU CPU: nothing to follow"; return 1; }
	zn_in b ethtool -L "$ZN_IF_B" combined 2 || { echo "side b's port cannot serve 2 queue pairs"; return 1; }
	out=$(irqs) || return 1
	echo "$out"
	irq0=$(awk '$1 == 0 {print $2}' <<<"$out") irq1=$(awk '$1 == 1 {print $2}' <<<"$out")
	[ -n "$irq0" ] && [ -n "$irq1" ] && [ "$irq0" != None ] && [ "$irq1" != None ] ||
		{ echo "no IRQ for queue pair 0 or 1"; return 1; }
	echo "$CPU0" >"/proc/irq/$irq0/smp_affinity_list" || return 1
	echo "$CPU1" >"/proc/irq/$irq1/smp_affinity_list" || return 1
	echo "$irq0 $irq1" >"$TMPD/irqs"
}
zn_case "side b's port serves 2 queue pairs, their interrupts set to CPUs $CPU0 and $CPU1" pin_irqs

# rx_packets QUEUE: side b's rxQUEUE_packets.
rx_packets() {
	zn_in b ethtool -S "$ZN_IF_B" | awk -v k="rx$1_packets:" '$1 == k {print $2}'
}

# Short connections to many ports: RSS spreads them over both queue pairs,
# whose NAPIs then run on the CPUs of their interrupts.
warm_up() {
	local a0 a1 i irq0 irq1 eff0 eff1
	a0=$(rx_packets 0) a1=$(rx_packets 1)
	for i in $(seq 1 24); do
		zn_in a timeout 10 bash -c "exec 3<>/dev/tcp/$ADDR_B/$((6100 + i))" 2>/dev/null || true
	done
	echo "frames on queue pair 0: $(( $(rx_packets 0) - a0 )), on queue pair 1: $(( $(rx_packets 1) - a1 ))"
	[ $(( $(rx_packets 0) - a0 )) -gt 0 ] && [ $(( $(rx_packets 1) - a1 )) -gt 0 ] ||
		{ echo "one queue pair received nothing"; return 1; }
	# An MSI's affinity moves when it next fires: now.
	read -r irq0 irq1 <"$TMPD/irqs" || return 1
	eff0=$(cat "/proc/irq/$irq0/effective_affinity_list") eff1=$(cat "/proc/irq/$irq1/effective_affinity_list")
	zn_diag "queue pair 0: IRQ $irq0 on CPU $eff0; queue pair 1: IRQ $irq1 on CPU $eff1"
	[ "$eff0" = "$CPU0" ] && [ "$eff1" = "$CPU1" ] || { echo "effective affinities $eff0 and $eff1"; return 1; }
}
zn_case "traffic reaches both queue pairs, on the CPUs of their interrupts" warm_up

run_phases() {
	local spid ZN_PFX
	zn_pfx b
	"${ZN_PFX[@]}" timeout -k 5 300 python3 "$PY" server "$ADDR_B" "$PORT" "$ZN_IF_B" \
		"$PHASE_BYTES" "$CPU0" "$CPU1" "$CPU0" >"$TMPD/srv" 2>&1 &
	spid=$!
	zn_wait_listen b "$PORT" "$spid" || { kill "$spid"; echo "the server did not listen"; return 1; }
	zn_in a timeout -k 5 300 python3 "$PY" client "$ADDR_B" "$PORT" "$PHASE_BYTES" 3 >"$TMPD/cli" 2>&1
	wait "$spid"
	cat "$TMPD/srv" "$TMPD/cli"
	grep -q '^attached zeronic$' "$TMPD/srv" || { echo "the socket was not attached"; return 1; }
	[ "$(grep -c ' phase ' "$TMPD/srv")" = 3 ] || { echo "the phases did not all run"; return 1; }
}

# phase N QUEUE: phase N's packets on side b's port came through QUEUE.
phase() {
	local line got total
	line=$(grep " phase $1 " "$TMPD/srv") || { echo "no phase $1"; return 1; }
	zn_diag "$line"
	line=${line#* phase }
	line="phase $line"
	got=$(awk -v q="$2" '{print $(6 + q)}' <<<"$line")
	total=$(awk '{for (i = 6; i < NF - 1; i++) n += $i; print n}' <<<"$line")
	[ "$total" -gt 0 ] && [ $((got * 100)) -ge $((total * 80)) ] ||
		{ echo "$got of $total packets on queue pair $2"; return 1; }
}

follow() {
	run_phases || return 1
	phase 0 0
}
zn_case "a socket attached and read on CPU $CPU0: its flow's packets arrive on queue pair 0" follow
zn_case "its reader moved to CPU $CPU1: the flow's packets follow to queue pair 1" phase 1 1
zn_case "its reader back on CPU $CPU0: the flow's packets back on queue pair 0" phase 2 0

in_order() {
	# 1 MiB chunks never fill the 4 MiB ring: every frame is placed, so
	# nothing but a move could put a packet out of order.
	grep ' phase ' "$TMPD/srv" | grep -qv ' hw_rx_fallback=0 ' &&
		{ echo "frames took the normal path for lack of room in the ring (hw_rx_fallback)"; return 1; }
	grep ' phase ' "$TMPD/srv" | awk '$NF != 0 {bad = 1} END {exit bad}' ||
		{ echo "TCP queued packets out of order"; return 1; }
	grep -q '^ok$' "$TMPD/srv" || { echo "the bytes received differ from those sent"; return 1; }
}
zn_case "no packet reached TCP out of order across the moves; every byte as sent" in_order

zn_case "no region, pin or flow left afterwards" zn_nic_use_back "$PERF" "$BEFORE" 11

ktap_finished

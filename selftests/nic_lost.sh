#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A NIC that never confirms it stopped (topology two-port): the model is
# frozen (qemu/guest/zn-wire fault freeze) while a process holds regions and
# the ports are up, then the NIC is unbound. The unbind's reset cannot
# complete, so the driver cannot know DMA stopped; docs/driver.md
# ("Bring-up and teardown") promises that it then logs one line and leaks,
# never frees, what the NIC may still access (command rings, the ports'
# rings, held regions), that the unbind completes, and that the leak is
# annotated for kmemleak (the scan that ends every guest run must be clean).
# After fault thaw + bind the NIC works again from clean counters.
# A flow detached while the unbind waits for that reset must not report
# the NIC's confirmation (DETACHED status 0, its segment given back): the
# reset never confirms, so the detach reports EIO and keeps the segment
# (docs/uapi.md), as the NIC may still write it.
#
# DMA-API debugging reports coherent memory still allocated when a driver
# lets go of a device: for this deliberate leak, exactly one such report is
# expected. This test hides it from the log with dma-debug's driver filter
# and checks instead that dma-debug's error count grew by exactly one. The
# leaked entries stay in dma-debug's table and would be reported again at
# any later unbind of the device, so this test must be the last one of its
# guest (selftests/suite.conf).
set -u
. "$(dirname "$0")/lib.sh"

zn_need_topology two-port

. "$(dirname "$0")/net_lib.sh"

HOLDER=$ZN_ROOT/selftests/mr_holder
REPLY_TIMEOUT=60
. "$(dirname "$0")/mr_holder_lib.sh"
ZN_WIRE=$ZN_ROOT/qemu/guest/zn-wire
DRV=/sys/bus/pci/drivers/zeronic
DMA_API=/sys/kernel/debug/dma-api

zn_load
zn_wait_path present /dev/zeronic || { ktap_print_header; ktap_exit_fail_msg "no /dev/zeronic"; }
zn_net_start 8
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
bdf=$(basename "$ZN_PCI")
mark=$(zn_log_mark)
FLOW_HOLDER=$ZN_ROOT/selftests/zc_flow_holder
FPID=
fdir=$(mktemp -d)
trap 'holder_kill; [ -z "$FPID" ] || kill -KILL "$FPID" 2>/dev/null; rm -rf "$fdir"; timeout 20 "$ZN_WIRE" fault thaw >/dev/null 2>&1' EXIT

bound() { [ -e "$DRV/$bdf" ]; }
dma_errors() { cat "$DMA_API/error_count"; }

setup() {
	[ -r "$DMA_API/error_count" ] || { echo "no $DMA_API (CONFIG_DMA_API_DEBUG)"; return 1; }
	holder_start hold 1 2 || return 1
	[ "$(counter mr_in_use)" = 2 ] || { echo "mr_in_use=$(counter mr_in_use), want 2"; return 1; }
	ip -n "$ZN_NS_A" link show "$ZN_IF_A" | grep -q 'state UP' || { echo "$ZN_IF_A is not up"; return 1; }
}
zn_case_here "a process holds 2 regions, the ports are up" setup

# zc_flow_holder: a flow attached over the ports, talked to through fifos
# (fd 7 its input, fd 8 its output).
flow_setup() {
	local line
	mkfifo "$fdir/in" "$fdir/out" || return 1
	env ZN_NS_A="$ZN_NS_A" ZN_NS_B="$ZN_NS_B" ZN_ADDR_B="${ZN_ADDR_B%/*}" \
		"$FLOW_HOLDER" <"$fdir/in" >"$fdir/out" 2>&1 &
	FPID=$!
	exec 7>"$fdir/in" 8<"$fdir/out"
	read -t 30 -r line <&8 || { echo "zc_flow_holder: no answer"; return 1; }
	[ "$line" = ready ] || { echo "zc_flow_holder: '$line'"; return 1; }
	# It detaches once the unbind below has withdrawn the NIC.
	echo detach-at-unbind >&7
}
zn_case_here "a process holds an attached flow with a posted segment" flow_setup

freeze() {
	local out
	out=$(timeout 20 "$ZN_WIRE" fault freeze 2>&1) || { echo "$out"; return 1; }
	grep -q 'frozen=1' <<<"$out" || { echo "model: $out"; return 1; }
	# One deregistration times out (commands are disabled after it), so the
	# NIC has held memory when it is unbound.
	holder_cmd dereg || return 1
	[ "$reply" = "dereg EIO EIO" ] || { echo "mr_holder: '$reply', want 'dereg EIO EIO'"; return 1; }
	[ "$(counter held_pages)" = 256 ] || { echo "held_pages=$(counter held_pages), want 256"; return 1; }
}
zn_case_here "fault freeze: deregistrations fail with EIO, their 256 pages held" freeze

lost_unbind() {
	local m t0 e0 e1
	m=$(zn_log_mark)
	e0=$(dma_errors)
	echo zeronic-lost-test >"$DMA_API/driver_filter" || return 1
	t0=$(zn_now)
	zn_sysfs_write 120 "$bdf" "$DRV/unbind" || return 1
	zn_diag "unbind of the frozen NIC took $(zn_secs_since "$t0") s"
	e1=$(dma_errors)
	echo >"$DMA_API/driver_filter"
	! bound || { echo "$bdf still bound after unbind"; return 1; }
	zn_log_since "$m" | grep -q 'NIC did not reset at unbind' ||
		{ echo "no 'did not reset at unbind' line:"; zn_log_since "$m"; return 1; }
	[ "$(zn_log_since "$m" | grep -c 'NIC did not confirm its reset: leaking')" = 1 ] ||
		{ echo "want one 'leaking' line:"; zn_log_since "$m"; return 1; }
	zn_diag "$(zn_log_since "$m" | grep 'leaking')"
	[ $((e1 - e0)) = 1 ] ||
		{ echo "dma-debug counted $((e1 - e0)) errors at the unbind, want 1 (the deliberate leak)"; return 1; }
	# The file outlives the NIC; closing it gives back nothing the NIC may
	# still write (its regions were released, and are leaked, already).
	holder_stop
}
zn_case_here "unbind of the frozen NIC completes, logs that it did not reset and leaks, once" lost_unbind

# EIO = 5: the NIC never confirmed, so nothing was given back.
detach_during_unbind() {
	local line
	read -t 30 -r line <&8 || { echo "zc_flow_holder: no answer"; return 1; }
	wait "$FPID"
	FPID=
	exec 7>&- 8<&-
	zn_diag "zc_flow_holder: $line"
	[ "$line" = "detached status=5 recvs=0" ] ||
		{ echo "zc_flow_holder: '$line', want 'detached status=5 recvs=0'"; return 1; }
}
zn_case_here "a detach during the unbind reports EIO, its segment kept, as the reset failed" detach_during_unbind

rebound() {
	local out
	out=$(timeout 20 "$ZN_WIRE" fault thaw 2>&1) || { echo "$out"; return 1; }
	grep -q 'frozen=0' <<<"$out" || { echo "model: $out"; return 1; }
	zn_bind "$bdf"
}
zn_case_here "fault thaw + bind: the identity line again, zn_net_setup" rebound

works() {
	local out
	# The new binding counts from zero: the leaked pages stay pinned for
	# good, but are no longer this NIC's.
	out=$("$HOLDER" query)
	zn_diag "query: $out"
	for kv in mr_in_use=0 pinned_pages=0 held_pages=0 flows_in_use=0; do
		grep -q "\\<$kv\\>" <<<"$out" || { echo "query: $out, want $kv"; return 1; }
	done
	out=$("$HOLDER" reg 1 2>&1)
	[ "$out" = "reg 0" ] || { echo "mr_holder reg 1: '$out'"; return 1; }
	ip netns exec "$ZN_NS_A" ping -c 3 -i 0.2 -W 5 "${ZN_ADDR_B%/*}" >/dev/null ||
		{ echo "no ping from side a to side b"; return 1; }
}
zn_case_here "after the lost NIC: counters clean, a registration and pings work" works
# The two lines dma-debug prints when its filter is set and cleared are
# this test's own doing; any other DMA-API line is a report.
no_other_reports() {
	! zn_log_since "$mark" |
		grep -vE 'DMA-API: (enable driver filter for driver \[zeronic-lost-test\]|switching off dma-debug driver filter)' |
		grep -E "$ZN_REPORT_RE"
}
zn_case_here "no kernel reports since the test started (but dma-debug's filter lines)" no_other_reports
ktap_finished

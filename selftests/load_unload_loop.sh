#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Repeated load/unload, with the device opened by several processes in each
# cycle, leaves no leaked kernel memory (kmemleak) and no kernel reports.
. "$(dirname "$0")/lib.sh"

CYCLES=${ZN_LOAD_CYCLES:-20}
KMEMLEAK=/sys/kernel/debug/kmemleak

ktap_print_header
ktap_set_plan 4

mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
zn_unload || ktap_exit_fail_msg "cannot unload a previously loaded zeronic"
[ -w "$KMEMLEAK" ] || ktap_exit_fail_msg "$KMEMLEAK missing: kernel built without CONFIG_DEBUG_KMEMLEAK?"
# Forget what boot left behind, so only what the cycles leak is reported.
echo scan >"$KMEMLEAK"
echo clear >"$KMEMLEAK"
mark=$(zn_log_mark)
# The module's KUnit suites run at the last cycle's load only (zn_kunit_skip).
zn_kunit_skip
trap zn_kunit_restore EXIT

cycles() {
	local i p pids
	for i in $(seq "$CYCLES"); do
		[ "$i" != "$CYCLES" ] || zn_kunit_restore
		insmod "$ZN_KO" || { echo "insmod failed in cycle $i"; return 1; }
		zn_wait_path present /dev/zeronic || { echo "no /dev/zeronic in cycle $i"; return 1; }
		pids=()
		for p in 1 2 3; do
			( exec 3<>/dev/zeronic && cat /proc/self/fdinfo/3 >/dev/null ) & pids+=($!)
		done
		for p in "${pids[@]}"; do wait "$p" || { echo "open failed in cycle $i"; return 1; }; done
		rmmod zeronic || { echo "rmmod failed in cycle $i"; return 1; }
	done
}
zn_case "$CYCLES load/open/unload cycles succeed" cycles

zn_case "module is gone afterwards" bash -c '! grep -q "^zeronic " /proc/modules && [ ! -e /dev/zeronic ]'

zn_case "kmemleak finds no leaks after the cycles" zn_kmemleak_check

zn_case "no kernel reports during the cycles" zn_no_reports "$mark"

ktap_finished

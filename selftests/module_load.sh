#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The module loads, says who it is, registers /dev/zeronic, refuses to unload
# while a file is open, and unloads cleanly.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 6

zn_unload || ktap_exit_fail_msg "cannot unload a previously loaded zeronic"
mark=$(zn_log_mark)

load_logs_version() {
	insmod "$ZN_KO" || return 1
	local want
	want=$(modinfo -F version "$ZN_KO")
	[ -n "$want" ] || { echo "modinfo shows no version"; return 1; }
	[ "$(cat /sys/module/zeronic/version)" = "$want" ] ||
		{ echo "sysfs version '$(cat /sys/module/zeronic/version)' != modinfo '$want'"; return 1; }
	zn_log_since "$mark" | grep -q "zeronic: version $want loaded, /dev/zeronic ready" ||
		{ echo "no load line for version $want in the kernel log"; return 1; }
}
zn_case "insmod logs the module version (modinfo = sysfs = log)" load_logs_version

zn_case "/dev/zeronic appears" zn_wait_path present /dev/zeronic

module_is_out_of_tree_rust() {
	grep -q '^zeronic ' /proc/modules || return 1
	# Out-of-tree taint (O) is expected; anything else (e.g. W after a WARN) is not.
	local t
	t=$(cat /sys/module/zeronic/taint)
	[ "$t" = "O" ] || { echo "module taint '$t', want 'O'"; return 1; }
}
zn_case "module is listed with only the out-of-tree taint" module_is_out_of_tree_rust

busy_while_open() {
	exec 3<>/dev/zeronic || return 1
	if rmmod zeronic 2>/dev/null; then
		exec 3>&-
		echo "rmmod succeeded while /dev/zeronic was open"
		return 1
	fi
	exec 3>&-
	zn_loaded
}
zn_case "rmmod fails while /dev/zeronic is open" busy_while_open

unload_logs() {
	rmmod zeronic || return 1
	zn_wait_path absent /dev/zeronic || { echo "/dev/zeronic still present"; return 1; }
	zn_log_since "$mark" | grep -q "zeronic: unloaded" || { echo "no unload line"; return 1; }
}
zn_case "rmmod removes /dev/zeronic and logs it" unload_logs

zn_case "no kernel reports during load/unload" zn_no_reports "$mark"

ktap_finished

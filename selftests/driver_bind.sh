#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The PCI driver binds to the emulated ZeroNIC after checking its BAR2
# identity (topology two-port or two-guest), refuses plain ivshmem devices
# with the same PCI id (topology plain-ivshmem), and survives unbind/bind and
# unload/reload cycles.
. "$(dirname "$0")/lib.sh"

DRV=/sys/bus/pci/drivers/zeronic
plain_ids() { lspci -D -n -d 1af4:1110 | awk '{print $1}'; }

ktap_print_header
case "${ZN_TOPOLOGY:-}" in
plain-ivshmem)
	ktap_set_plan 3
	zn_load
	zn_case "two plain ivshmem devices are present" bash -c "[ \$(lspci -n -d 1af4:1110 | wc -l) = 2 ]"
	refused() {
		local d
		for d in $(plain_ids); do
			[ ! -e "$DRV/$d" ] || { echo "bound to $d"; return 1; }
			dmesg | grep -q "zeronic $d: .*plain ivshmem device, not binding" ||
				{ echo "no refusal logged for $d"; return 1; }
		done
	}
	zn_case "the driver refuses both, saying why" refused
	zn_case "the module stays loaded with /dev/zeronic" bash -c "[ -e /dev/zeronic ] && grep -q '^zeronic ' /proc/modules"
	;;
two-port|two-guest)
	ktap_set_plan 4
	zn_load
	bdf=$(basename "$ZN_PCI")
	bound() { [ -e "$DRV/$bdf" ]; }
	identity_logged() {
		bound || { echo "$bdf not bound"; return 1; }
		local ports
		ports=$("$ZN_ROOT/target/release/zn-probe" | sed -n 's/.* ports=\([0-9]*\) .*/\1/p')
		dmesg | grep -q "zeronic $bdf: ZeroNIC 2\.[0-9]*: $ports port(s)" ||
			{ echo "no identity line for $ports port(s)"; return 1; }
	}
	zn_case "the driver binds and logs the NIC's identity" identity_logged
	rebind() {
		local i
		for i in 1 2 3; do
			echo "$bdf" >"$DRV/unbind" || return 1
			! bound || { echo "still bound after unbind"; return 1; }
			echo "$bdf" >"$DRV/bind" || return 1
			bound || { echo "not bound after bind"; return 1; }
		done
	}
	zn_case "unbind/bind through sysfs, 3 times" rebind
	# The module's KUnit suites run at the last reload only (zn_kunit_skip).
	zn_kunit_skip
	trap zn_kunit_restore EXIT
	reload() {
		local i
		for i in 1 2 3; do
			[ "$i" != 3 ] || zn_kunit_restore
			rmmod zeronic || return 1
			insmod "$ZN_KO" || return 1
			bound || { echo "not bound after reload $i"; return 1; }
		done
		zn_kunit_ran
	}
	zn_case "unload with the NIC bound, reload rebinds, 3 times" reload
	zn_case "no kernel reports" bash -c "! dmesg | grep -E 'WARNING:|BUG:|Oops|Call Trace:'"
	;;
*)
	ktap_skip_all "needs a NIC or plain-ivshmem topology"
	exit "$KSFT_SKIP"
	;;
esac
ktap_finished

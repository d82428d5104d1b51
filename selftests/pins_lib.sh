# SPDX-License-Identifier: GPL-2.0
# Sourced by selftests that check the kernel's own count of long-term page
# pins (FOLL_PIN), besides the driver's counters.

# Long-term pins the whole kernel holds: acquired - released. Per-CPU deltas
# are folded with vm.stat_refresh if the kernel has sysctls, else by vmstat's
# own periodic update (about a second), hence the waiting below. Every case
# that ends with nothing registered checks this, not only the NIC's own
# pinned_pages.
pins_outstanding() {
	[ ! -w /proc/sys/vm/stat_refresh ] || echo 1 >/proc/sys/vm/stat_refresh 2>/dev/null
	awk '$1 == "nr_foll_pin_acquired" { a = $2 } $1 == "nr_foll_pin_released" { r = $2 }
		END { print a - r }' /proc/vmstat
}

# The outstanding pins once two readings 1.2 s apart agree (per-CPU deltas
# folded), or the last reading after 10 tries.
pins_at_rest() {
	local i a b
	b=$(pins_outstanding)
	for i in $(seq 10); do
		a=$b
		sleep 1.2
		b=$(pins_outstanding)
		[ "$a" != "$b" ] || break
	done
	echo "$b"
}

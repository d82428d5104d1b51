#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Memory registrations die with their holder, whatever ends it (topology
# two-port or two-guest; see docs/uapi.md, "Lifetime"):
#  - SIGKILL of a process holding regions, also in the middle of registering:
#    NIC 0's pinned_pages goes back to its baseline, and so does the kernel's
#    own count of outstanding long-term pins (/proc/vmstat nr_foll_pin_*);
#  - unbinding the NIC under a holder: the unbind completes, the holder's
#    calls that need the NIC fail with ENODEV, its MR_DEREG still releases
#    the region (returns 0), closing leaves nothing pinned, and the NIC binds
#    again;
#  - unloading the module: rmmod fails while a holder has /dev/zeronic open,
#    succeeds once it is killed, and a reload binds the NIC again;
# and nothing of it logs a kernel report. Unloads the module: run it last.
. "$(dirname "$0")/lib.sh"

HOLDER=$ZN_ROOT/selftests/mr_holder
DRV=/sys/bus/pci/drivers/zeronic
# How long a holder may take to answer (TCG: pinning 64 MiB is slow).
REPLY_TIMEOUT=${ZN_MR_REPLY_TIMEOUT:-180}

case "${ZN_TOPOLOGY:-}" in
two-port|two-guest) ;;
*) ktap_print_header; ktap_skip_all "needs a NIC topology (ZN_TOPOLOGY=${ZN_TOPOLOGY:-})"; exit "$KSFT_SKIP" ;;
esac

ktap_print_header
ktap_set_plan 13
zn_load
zn_wait_path present /dev/zeronic || ktap_exit_fail_msg "no /dev/zeronic"
bdf=$(basename "$ZN_PCI")
mark=$(zn_log_mark)
tmp=$(mktemp -d)

bound() { [ -e "$DRV/$bdf" ]; }

# NIC 0's counters through a fresh file.
pinned_pages() { "$HOLDER" query | sed -n 's/.*pinned_pages=\([0-9]*\).*/\1/p'; }
mr_in_use() { "$HOLDER" query | sed -n 's/.*mr_in_use=\([0-9]*\).*/\1/p'; }

# pins_outstanding, pins_at_rest: the kernel's long-term pins.
. "$(dirname "$0")/pins_lib.sh"

# pins_settle OP VALUE: waits up to 10 s for pins_outstanding OP VALUE (-eq, -ge).
pins_settle() {
	local i n
	for i in $(seq 50); do
		n=$(pins_outstanding)
		[ "$n" "$1" "$2" ] && return 0
		zn_nap 0.2
	done
	echo "outstanding FOLL_PIN pins: $n, want $1 $2"
	return 1
}

# pinned_is N: NIC 0's pinned_pages is N (waiting for an exit to finish).
pinned_is() {
	local i n
	for i in $(seq 25); do
		n=$(pinned_pages)
		[ "$n" = "$1" ] && return 0
		zn_nap 0.2
	done
	echo "pinned_pages=$n, want $1"
	return 1
}

# The holder coprocess: holder_start, holder_cmd, holder_kill, holder_stop.
. "$(dirname "$0")/mr_holder_lib.sh"

trap 'holder_kill; rm -rf "$tmp"' EXIT

# --- baselines ----------------------------------------------------------------
base_pages=$(pinned_pages)
base_mrs=$(mr_in_use)
base_pins=$(pins_at_rest)
baseline() {
	[ -n "$base_pages" ] && [ -n "$base_mrs" ] ||
		{ echo "ZERONIC_IOC_QUERY on NIC 0 failed: $("$HOLDER" query)"; return 1; }
	[ "$base_pages" = 0 ] && [ "$base_mrs" = 0 ] ||
		{ echo "NIC 0 starts with $base_mrs regions, $base_pages pages pinned"; return 1; }
}
zn_case_here "NIC 0 starts with no registrations" baseline

# --- SIGKILL ------------------------------------------------------------------
kill_holder_releases() {
	holder_start hold 64 8 || return 1
	local pages
	pages=$(ready_pages)
	[ "$(pinned_pages)" = "$((base_pages + pages))" ] ||
		{ echo "holding: pinned_pages=$(pinned_pages), want $base_pages + $pages"; return 1; }
	pins_settle -ge $((base_pins + pages)) || return 1
	holder_kill
	pinned_is "$base_pages" || return 1
	[ "$(mr_in_use)" = "$base_mrs" ] || { echo "mr_in_use=$(mr_in_use) after the kill"; return 1; }
	pins_settle -eq "$base_pins"
}
zn_case_here "kill -9 of a holder of 64 MiB in 8 regions releases every pin" kill_holder_releases

kill_churn_releases() {
	local round
	for round in 1 2 3; do
		holder_start churn 32 || return 1
		sleep "0.$((round * 3))"
		holder_kill
		pinned_is "$base_pages" || return 1
		pins_settle -eq "$base_pins" || return 1
	done
}
zn_case_here "kill -9 in the middle of registering releases every pin (3 rounds)" kill_churn_releases

# --- unbind under a holder ---------------------------------------------------
unbind_completes() {
	holder_start hold 16 4 || return 1
	zn_sysfs_write 60 "$bdf" "$DRV/unbind" || return 1
	! bound || { echo "$bdf still bound"; return 1; }
	# The held file outlives the binding.
	kill -0 "$HPID" 2>/dev/null || { echo "the holder died"; return 1; }
}
zn_case_here "unbind completes while a holder has registrations" unbind_completes

needs_nic_after_unbind() {
	holder_cmd query || return 1
	[ "$reply" = "query ENODEV" ] || { echo "QUERY after unbind: '$reply', want ENODEV"; return 1; }
	holder_cmd reg || return 1
	[ "$reply" = "reg ENODEV" ] || { echo "MR_REG after unbind: '$reply', want ENODEV"; return 1; }
	"$HOLDER" query >"$tmp/q" 2>&1 && { echo "QUERY on a new file: $(cat "$tmp/q")"; return 1; }
	[ "$(cat "$tmp/q")" = ENODEV ] || { echo "QUERY on a new file: '$(cat "$tmp/q")', want ENODEV"; return 1; }
}
zn_case_here "after unbind, QUERY and MR_REG fail with ENODEV" needs_nic_after_unbind

# docs/uapi.md: MR_DEREG does not need the NIC; after unbind it still
# releases the file's region (unpins, uncharges) and returns 0.
dereg_after_unbind() {
	holder_cmd dereg || return 1
	[ "$reply" = "dereg 0 0 0 0" ] || { echo "MR_DEREG after unbind: '$reply', want 4 x 0"; return 1; }
	pins_settle -eq "$base_pins" || return 1
	holder_cmd dereg || return 1
	[ "$reply" = "dereg ENOENT ENOENT ENOENT ENOENT" ] ||
		{ echo "second MR_DEREG: '$reply', want 4 x ENOENT"; return 1; }
}
zn_case_here "after unbind, MR_DEREG releases the region (0), then ENOENT" dereg_after_unbind

close_after_unbind() {
	holder_cmd close || return 1
	[ "$reply" = closed ] || { echo "close: '$reply'"; return 1; }
	holder_stop
	pins_settle -eq "$base_pins"
}
zn_case_here "closing the holder after unbind leaves nothing pinned" close_after_unbind

# Regions still registered at unbind are released when the file closes.
close_releases_after_unbind() {
	bound || zn_sysfs_write 60 "$bdf" "$DRV/bind" || return 1
	bound || { echo "$bdf not bound after bind"; return 1; }
	holder_start hold 16 4 || return 1
	pins_settle -ge $((base_pins + $(ready_pages))) || return 1
	zn_sysfs_write 60 "$bdf" "$DRV/unbind" || return 1
	holder_kill
	pins_settle -eq "$base_pins"
}
zn_case_here "a holder killed after unbind, without MR_DEREG, leaves nothing pinned" close_releases_after_unbind

rebind() {
	bound || zn_sysfs_write 60 "$bdf" "$DRV/bind" || return 1
	bound || { echo "$bdf not bound after bind"; return 1; }
	[ "$(pinned_pages)" = "$base_pages" ] && [ "$(mr_in_use)" = "$base_mrs" ] ||
		{ echo "after rebind: $("$HOLDER" query)"; return 1; }
	# And registration works on the new binding, and releases every pin.
	holder_start hold 4 2 || return 1
	holder_stop
	pinned_is "$base_pages" || return 1
	pins_settle -eq "$base_pins"
}
zn_case_here "the NIC binds again, with no registrations, and registers" rebind

# --- module unload under a holder ----------------------------------------------
rmmod_busy() {
	holder_start hold 16 4 || return 1
	local out
	if out=$(rmmod zeronic 2>&1); then
		echo "rmmod succeeded while a holder had /dev/zeronic open"
		return 1
	fi
	# The kernel refuses (delete_module: EWOULDBLOCK); kmod's rmmod checks
	# the reference count first and says the module is in use.
	grep -q "in use" <<<"$out" || { echo "rmmod said: $out"; return 1; }
	zn_loaded || { echo "the module is gone"; return 1; }
	[ "$(pinned_pages)" -gt "$base_pages" ] || { echo "the holder's regions are gone"; return 1; }
}
zn_case_here "rmmod fails while a holder has regions registered" rmmod_busy

rmmod_after_kill() {
	holder_kill
	rmmod zeronic || return 1
	zn_wait_path absent /dev/zeronic || { echo "/dev/zeronic still present"; return 1; }
	pins_settle -eq "$base_pins"
}
zn_case_here "after killing the holder, rmmod succeeds and nothing stays pinned" rmmod_after_kill

reload() {
	local m
	m=$(zn_log_mark)
	zn_load || return 1
	zn_wait_path present /dev/zeronic || { echo "no /dev/zeronic"; return 1; }
	bound || { echo "$bdf not bound after reload"; return 1; }
	zn_log_since "$m" | grep -q "zeronic $bdf: ZeroNIC 2\.[0-9]*:" ||
		{ echo "no identity line after reload"; return 1; }
	pinned_is "$base_pages" || return 1
	holder_start hold 4 2 || return 1
	holder_stop
	pinned_is "$base_pages" || return 1
	pins_settle -eq "$base_pins"
}
zn_case_here "reload: the NIC binds again, logs its identity and registers" reload

zn_case_here "no kernel reports since the test started" zn_no_reports "$mark"

ktap_finished

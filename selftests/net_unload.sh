#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Unloading the module while TCP traffic crosses the ports completes, the
# programs using the ports can be killed (nothing is stuck on the vanished
# device), and a reload gives working ports again. Repeated a few times; the kernel log stays clean. Two-port
# topology (the ports in netns zn-a/zn-b, see qemu/guest/net-setup).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/net_lib.sh"

ROUNDS=${ZN_UNLOAD_ROUNDS:-3}

zn_net_start 6
mark=$(zn_log_mark)

# One round: iperf3 across the ports, unload in the middle, check the
# client gives up, reload, set the ports up again, ping.
round() {
	local srv cli i
	zn_pfx b
	"${ZN_PFX[@]}" iperf3 -s -1 >/dev/null 2>&1 &
	srv=$!
	zn_wait_listen b 5201 "$srv" || { kill "$srv"; wait "$srv"; return 1; }
	zn_pfx a
	"${ZN_PFX[@]}" iperf3 -c "$ZN_ADDR_B" -t 60 >/dev/null 2>&1 &
	cli=$!
	# Traffic is flowing once the sender's counter moves: by 4 MiB, so TCP
	# is past its first round trips and has data in flight (polled, up to
	# 10 s, instead of a fixed 3 s wait).
	local before after
	before=$(zn_in a cat "/sys/class/net/$ZN_IF_A/statistics/tx_bytes")
	for i in $(seq 50); do
		after=$(zn_in a cat "/sys/class/net/$ZN_IF_A/statistics/tx_bytes")
		[ "$after" -gt $((before + 4194304)) ] && break
		zn_nap 0.2
	done
	[ "$after" -gt $((before + 4194304)) ] || { echo "no traffic before unload ($before -> $after bytes in 10 s)"; return 1; }
	timeout 60 rmmod zeronic || { echo "rmmod under traffic failed or hung"; return 1; }
	# TCP does not give up on a connection whose interface vanished (it
	# retransmits until its own timeout), so end the programs: they must
	# die promptly, not sit in the kernel waiting for the gone device.
	kill -9 "$cli" "$srv" 2>/dev/null
	for i in $(seq 20); do
		kill -0 "$cli" 2>/dev/null || kill -0 "$srv" 2>/dev/null || break
		zn_nap 0.5
	done
	if kill -0 "$cli" 2>/dev/null || kill -0 "$srv" 2>/dev/null; then
		echo "iperf3 still alive 10 s after SIGKILL (stuck in the kernel?)"
		return 1
	fi
	wait "$srv" "$cli" 2>/dev/null
	[ ! -e /dev/zeronic ] || { echo "/dev/zeronic still there"; return 1; }
	! zn_in a ip link show dev "$ZN_IF_A" >/dev/null 2>&1 || { echo "$ZN_IF_A still exists"; return 1; }
	insmod "$ZN_KO" || { echo "reload failed"; return 1; }
	zn_net_setup >/dev/null 2>&1 || { echo "ports not set up again after reload"; return 1; }
	zn_in a ping -c 2 -i 0.2 -W 5 "$ZN_ADDR_B" >/dev/null || { echo "no ping a -> b after reload"; return 1; }
	zn_in b ping -c 2 -i 0.2 -W 5 "$ZN_ADDR_A" >/dev/null || { echo "no ping b -> a after reload"; return 1; }
}

zn_case "ping works before the first unload" zn_in a ping -c 2 -i 0.2 -W 5 "$ZN_ADDR_B"

# The module's KUnit suites run at the last round's reload only
# (zn_kunit_skip).
zn_kunit_skip
trap zn_kunit_restore EXIT

rounds() {
	local r
	zn_idle_module || return 1
	for r in $(seq "$ROUNDS"); do
		[ "$r" != "$ROUNDS" ] || zn_kunit_restore
		round || { echo "round $r failed"; return 1; }
	done
	zn_kunit_ran
}
zn_case "$ROUNDS unloads under TCP traffic complete and reloads work" rounds

zn_case "module loaded and /dev/zeronic present at the end" \
	bash -c 'grep -q "^zeronic " /proc/modules && [ -c /dev/zeronic ]'

zn_case "each reload bound the NIC again" \
	bash -c "[ \"\$(dmesg | tail -n +$((mark + 1)) | grep -c 'ZeroNIC 2\.[0-9]*:')\" -eq $ROUNDS ]"

zn_case "each unload unbound it" \
	bash -c "[ \"\$(dmesg | tail -n +$((mark + 1)) | grep -c 'unbound')\" -eq $ROUNDS ]"

zn_case "no kernel reports during the unloads" zn_no_reports "$mark"

ktap_finished

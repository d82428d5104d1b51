#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The driver survives the two NIC failures it must (topology two-port; see
# docs/driver.md, "Bring-up and teardown"), injected through the model's
# control socket (qemu/guest/zn-wire fault ...):
#  - fatal (fault fatal: the NIC's command queue breaks): the driver logs its
#    fatal line once, both ports lose carrier, ping fails, a registration
#    fails with EIO at once; unbind + bind resets the NIC and everything
#    works again;
#  - dead NIC (fault freeze: the model stops serving the device; the module
#    reloaded with a 2 s command timeout for it, after checking that loads
#    with a timeout out of range are refused): a
#    registration fails with EIO after the driver's command timeout and its
#    pages stay pinned and counted as held (the NIC may still write them), a
#    deregistration fails with EIO and holds its pages likewise, ping fails,
#    nothing hangs; fault thaw, unbind + bind: the reset completes, what was
#    held is given back, everything works again (nic_lost.sh unbinds a NIC
#    that stays frozen); the module is loaded again with its default
#    timeout, as the next test expects it;
# and nothing logs a kernel report.
set -u
. "$(dirname "$0")/lib.sh"

zn_need_topology two-port

. "$(dirname "$0")/net_lib.sh"

HOLDER=$ZN_ROOT/selftests/mr_holder
REPLY_TIMEOUT=60
. "$(dirname "$0")/mr_holder_lib.sh"
ZN_WIRE=$ZN_ROOT/qemu/guest/zn-wire
DRV=/sys/bus/pci/drivers/zeronic
FATAL_RE='NIC fatal error .*data path stopped; rebind the device to reset it'
# The driver's command timeout is the module parameter cmd_timeout_ms
# (10 s by default, docs/driver.md). The dead-NIC part runs with the module
# loaded with 2 s, so that its registration does not wait out 10 s; the
# code path is the same. With the default such a registration took 11 s
# (mr_holder starting and pinning, the command, the timeout) and the window
# was 5..30 s; with 2 s it is 1..6 s.
CMD_TIMEOUT_MS=2000 CMD_TIMEOUT_MIN=1 CMD_TIMEOUT_MAX=6
# The bounds the driver refuses to load outside of (zeronic/control.rs).
CMD_TIMEOUT_MS_MIN=100 CMD_TIMEOUT_MS_MAX=600000
# A registration on a working NIC.
REG_MAX=30

zn_load
zn_wait_path present /dev/zeronic || { ktap_print_header; ktap_exit_fail_msg "no /dev/zeronic"; }
zn_net_start 23
bdf=$(basename "$ZN_PCI")
mark=$(zn_log_mark)
trap 'holder_kill; timeout 20 "$ZN_WIRE" fault thaw >/dev/null 2>&1; zn_kunit_restore' EXIT

bound() { [ -e "$DRV/$bdf" ]; }

# wire CMD...: the model's reply, failing on an error or no reply.
wire() {
	local out
	out=$(timeout 30 "$ZN_WIRE" "$@" 2>&1) || { echo "zn-wire $*: $out"; return 1; }
	echo "$out"
}

# carrier_is V: both sides' carrier reads V within 10 s.
carrier_is() {
	local want=$1 s v i ok
	for i in $(seq 100); do
		ok=1
		for s in a b; do
			v=$(zn_in "$s" timeout 10 cat "/sys/class/net/$(zn_side_if "$s")/carrier" 2>&1)
			[ "$v" = "$want" ] || ok=
		done
		[ -z "$ok" ] || return 0
		zn_nap 0.1
	done
	for s in a b; do
		echo "side $s ($(zn_side_if "$s")): carrier=$(zn_in "$s" timeout 10 cat "/sys/class/net/$(zn_side_if "$s")/carrier" 2>&1), want $want"
		zn_in "$s" timeout 10 ip link show dev "$(zn_side_if "$s")"
	done
	return 1
}

# ping_ok FROM: 3 pings from side FROM to the other side, all answered.
ping_ok() {
	local to
	to=$(zn_side_addr "$(zn_other "$1")")
	zn_in "$1" timeout 30 ping -n -q -c 3 -i 0.2 -w 15 "$to" ||
		{ echo "side $1: ping to $to failed"; return 1; }
}
pings_ok() { ping_ok a && ping_ok b; }

# pings_fail: no ping gets an answer either way.
pings_fail() {
	local s to
	for s in a b; do
		to=$(zn_side_addr "$(zn_other "$s")")
		if zn_in "$s" timeout 20 ping -n -q -c 3 -i 0.2 -w 4 "$to"; then
			echo "side $s: ping to $to was answered"
			return 1
		fi
	done
}

# reg_expect WANT MIN MAX: one registration of 1 MiB answers "reg WANT"
# within MIN..MAX seconds.
reg_expect() {
	local want=$1 min=$2 max=$3 t0 out took
	t0=$(zn_now)
	out=$(timeout $((max + 30)) "$HOLDER" reg 1 2>&1)
	took=$(zn_secs_since "$t0")
	zn_diag "mr_holder reg 1: '$out' after ${took} s (want 'reg $want' in $min..$max s)"
	[ "$out" = "reg $want" ] || { echo "mr_holder reg 1: '$out', want 'reg $want'"; return 1; }
	awk -v t="$took" -v a="$min" -v b="$max" 'BEGIN { exit !(t >= a && t <= b) }' ||
		{ echo "took $took s, want $min..$max s"; return 1; }
}


# counters_are NAME=V...: each named counter has its value.
counters_are() {
	local kv got bad=0
	for kv in "$@"; do
		got=$(counter "${kv%%=*}")
		[ "$got" = "${kv#*=}" ] || { echo "${kv%%=*}=$got, want ${kv#*=}"; bad=1; }
	done
	zn_diag "query: $("$HOLDER" query)"
	return $bad
}

# fatal_lines M: the driver's fatal lines since log mark M.
fatal_lines() { zn_log_since "$1" | grep -cE "$FATAL_RE"; }

# rebind: unbind and bind the PCI function; the identity line appears again
# and the new net_devices are set up as before (zn_net_setup, this shell).
rebind() {
	zn_sysfs_write 60 "$bdf" "$DRV/unbind" || return 1
	! bound || { echo "$bdf still bound after unbind"; return 1; }
	zn_bind "$bdf"
}

# recovered: carrier, pings both ways and a registration after a rebind.
recovered() {
	carrier_is 1 && pings_ok && reg_expect 0 0 "$REG_MAX"
}

# unload: rmmod, once nothing holds the module.
unload() {
	zn_idle_module || return 1
	timeout 60 rmmod zeronic || { echo "rmmod zeronic failed"; return 1; }
}

# load [PARAM...]: insmod with PARAMs; the NIC is bound again and its ports
# set up as before (zn_net_setup, this shell).
load() {
	insmod "$ZN_KO" "$@" || { echo "insmod $ZN_KO $* failed"; return 1; }
	bound || { echo "$bdf not bound after insmod $*"; return 1; }
	zn_wait_path present /dev/zeronic || { echo "no /dev/zeronic after insmod $*"; return 1; }
	# shellcheck source=qemu/guest/net-setup
	. "$ZN_ROOT/qemu/guest/net-setup"
	zn_net_setup
	zn_net_ready || { echo "zn_net_setup: ZN_IF_A='$ZN_IF_A' ZN_IF_B='$ZN_IF_B'"; return 1; }
}

# refused_loads: with the module unloaded, a load with cmd_timeout_ms 0 or
# just outside its bounds, or with ring_kib not a power of two or outside
# its bounds, fails with EINVAL and a log line naming the value (0 must not
# silently mean "give up at once" or "never"). The module's
# KUnit suites are skipped at the loads from here to the one that restores
# the default timeout (zn_kunit_skip), which runs them.
# refused_load PARAM=VALUE LOG: insmod with PARAM=VALUE fails with EINVAL,
# the kernel log gains the line "zeronic: PARAM=VALUE: LOG", and the module
# stays unloaded.
refused_load() {
	local m out
	m=$(zn_log_mark)
	if out=$(insmod "$ZN_KO" "$1" 2>&1); then
		echo "insmod $1 succeeded"
		return 1
	fi
	# kmod's insmod words EINVAL "Invalid parameters" (older: strerror).
	grep -qE 'Invalid (parameters|argument)' <<<"$out" ||
		{ echo "insmod $1: '$out', want EINVAL"; return 1; }
	zn_log_since "$m" | grep -q "zeronic: $1: $2" ||
		{ echo "no log line for $1:"; zn_log_since "$m"; return 1; }
	! zn_loaded || { echo "module loaded after insmod $1"; return 1; }
}

refused_loads() {
	local v
	zn_kunit_skip || { echo "cannot set kunit's filter_glob"; return 1; }
	unload || return 1
	for v in 0 $((CMD_TIMEOUT_MS_MIN - 1)) $((CMD_TIMEOUT_MS_MAX + 1)); do
		refused_load "cmd_timeout_ms=$v" "must be $CMD_TIMEOUT_MS_MIN to $CMD_TIMEOUT_MS_MAX (ms)" || return 1
	done
	# ring_kib: a power of two from 64 to 65536 (KiB of an attached
	# socket's receive ring).
	for v in 0 32 100 131072; do
		refused_load "ring_kib=$v" "must be a power of two from 64 to 65536" || return 1
	done
}

# default_load: the module loaded again with its default command timeout,
# the NIC bound, and its KUnit suites run at this load (kunit's glob
# restored). The ports are left to the next test's zn_net_start, which sets
# them up again after any reload (net_unload.sh's, driver_bind.sh's).
default_load() {
	zn_kunit_restore
	unload || return 1
	insmod "$ZN_KO" || { echo "insmod $ZN_KO failed"; return 1; }
	bound || { echo "$bdf not bound after insmod"; return 1; }
	zn_wait_path present /dev/zeronic || { echo "no /dev/zeronic after insmod"; return 1; }
	zn_kunit_ran
}

# --- before -------------------------------------------------------------------
zn_case_here "before: carrier up, pings both ways, a registration works" recovered

# --- fatal --------------------------------------------------------------------
fatal_logged() {
	local out i n
	fmark=$(zn_log_mark)
	out=$(wire fault fatal) || { echo "$out"; return 1; }
	zn_diag "model: $(grep 'guest ' <<<"$out")"
	grep -q 'fatal=1 fatal_code=2 fatal_info=0x8 ' <<<"$out" || { echo "model: $out"; return 1; }
	for i in $(seq 100); do
		[ "$(fatal_lines "$fmark")" -ge 1 ] && break
		zn_nap 0.1
	done
	sleep 1
	n=$(fatal_lines "$fmark")
	zn_diag "$(zn_log_since "$fmark" | grep -E "$FATAL_RE")"
	[ "$n" = 1 ] || { echo "$n fatal lines, want 1:"; zn_log_since "$fmark"; return 1; }
	# The model's code and queue: ST_BAD_DESC (2), qid(0, QK_CMDQ) (0x8).
	zn_log_since "$fmark" | grep -q 'NIC fatal error 2 (queue 0x8)' ||
		{ echo "the fatal line does not name code 2, queue 0x8"; return 1; }
}
zn_case_here "fault fatal: the driver logs its fatal line, once, within 10 s" fatal_logged
zn_case_here "fatal: both ports' carrier goes down" carrier_is 0
zn_case_here "fatal: pings fail both ways" pings_fail
fatal_reg() {
	reg_expect EIO 0 5 || return 1
	# And again, now that the driver has disabled commands.
	reg_expect EIO 0 5 || return 1
	local n
	n=$(fatal_lines "$fmark")
	[ "$n" = 1 ] || { echo "$n fatal lines after the registrations, want 1"; return 1; }
}
zn_case_here "fatal: a registration fails with EIO within 5 s (twice), still one fatal line" fatal_reg
zn_case_here "fatal: unbind + bind, the identity line again, zn_net_setup" rebind
zn_case_here "after fatal: carrier up, pings both ways, a registration works" recovered

# --- dead NIC -----------------------------------------------------------------
zn_case_here "unload; loads with cmd_timeout_ms 0, $((CMD_TIMEOUT_MS_MIN - 1)) and $((CMD_TIMEOUT_MS_MAX + 1)), ring_kib 0, 32, 100 and 131072 fail with EINVAL, logged" refused_loads
zn_case_here "load with cmd_timeout_ms=$CMD_TIMEOUT_MS: the NIC binds, the ports are set up" \
	load cmd_timeout_ms="$CMD_TIMEOUT_MS"
# A process holds two regions (1 MiB, 256 pages) on the NIC before it dies.
held_before() {
	base_mrs=$(counter mr_in_use) base_pages=$(counter pinned_pages)
	holder_start hold 1 2 || return 1
	counters_are mr_in_use=$((base_mrs + 2)) pinned_pages=$((base_pages + 256)) held_pages=0
}
zn_case_here "before freeze: a process holds 2 regions (256 pages), none held back" held_before
frozen() {
	local out
	out=$(wire fault freeze) || { echo "$out"; return 1; }
	zn_diag "model: $(grep 'guest ' <<<"$out")"
	grep -q 'frozen=1' <<<"$out" || { echo "model: $out"; return 1; }
}
zn_case_here "fault freeze: the model stops serving the NIC" frozen
dead_reg() {
	local m
	m=$(zn_log_mark)
	reg_expect EIO "$CMD_TIMEOUT_MIN" "$CMD_TIMEOUT_MAX" || return 1
	zn_log_since "$m" | grep -q 'NIC did not complete command .*commands disabled' ||
		{ echo "no 'did not complete command' line:"; zn_log_since "$m"; return 1; }
}
zn_case_here "frozen: a registration fails with EIO after the command timeout ($CMD_TIMEOUT_MIN..$CMD_TIMEOUT_MAX s)" dead_reg
# docs/uapi.md, "A broken NIC": the NIC may still register and write the
# pages of a registration it never completed, so they stay pinned, charged
# and counted (mr_in_use, pinned_pages) and show as held, after the process
# that asked exited.
zn_case_here "frozen: the timed-out registration's 256 pages stay pinned and held, its entry counted" \
	counters_are mr_in_use=$((base_mrs + 3)) pinned_pages=$((base_pages + 512)) held_pages=256
zn_case_here "frozen: the next registration fails with EIO at once" reg_expect EIO 0 5
zn_case_here "frozen: a refused registration holds nothing more" \
	counters_are mr_in_use=$((base_mrs + 3)) pinned_pages=$((base_pages + 512)) held_pages=256
dead_dereg() {
	holder_cmd dereg || return 1
	[ "$reply" = "dereg EIO EIO" ] || { echo "mr_holder: '$reply', want 'dereg EIO EIO'"; return 1; }
	# The keys are gone from the file; the pages are not given back.
	counters_are mr_in_use=$((base_mrs + 3)) pinned_pages=$((base_pages + 512)) held_pages=512
}
zn_case_here "frozen: deregistering both regions fails with EIO; their pages stay pinned and held" dead_dereg
zn_case_here "frozen: pings fail both ways" pings_fail
thawed() {
	local out
	out=$(wire fault thaw) || { echo "$out"; return 1; }
	grep -q 'frozen=0' <<<"$out" || { echo "model: $out"; return 1; }
	rebind
}
zn_case_here "fault thaw: unbind + bind (the reset completes), the identity line again, zn_net_setup" thawed
zn_case_here "after the dead NIC: carrier up, pings both ways, a registration works" recovered
# The reset at unbind completed, so everything held was given back (the
# holder's file outlived the binding; its regions were released already).
held_freed() {
	holder_stop
	counters_are mr_in_use=0 pinned_pages=0 held_pages=0 flows_in_use=0
}
zn_case_here "after the dead NIC: the held pages were given back at the reset, counters clean" held_freed

# --- the state the next test finds, and the log ----------------------------------
zn_case_here "reload with the default command timeout: the NIC binds, KUnit ran" default_load
clean_state() {
	local out
	out=$(wire fault status) || { echo "$out"; return 1; }
	grep -q 'frozen=0 fatal=0 ' <<<"$out" || { echo "model: $out"; return 1; }
	[ "$(fatal_lines "$mark")" = 1 ] || { echo "$(fatal_lines "$mark") fatal lines in the whole test, want 1"; return 1; }
}
zn_case_here "the NIC is neither frozen nor fatal; one fatal line in the whole test" clean_state
zn_case_here "no kernel reports since the test started" zn_no_reports "$mark"

ktap_finished

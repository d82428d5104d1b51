#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The socket/TCP abstractions of the patch series (kernel::net::sock, tcp,
# tcp::ulp, ubuf) over loopback TCP, through the test module
# sock_test/zn_sock_test.ko: its KUnit cases, socket state as the locked
# getters see it, attach refusals, consuming from sk_data_ready (softirq and
# owner context) and from process context without losing or reordering a
# byte, plain reads/splice/send failing without taking data, zero-copy sends
# from pinned pages completing after the peer's ACK, and release on close,
# RST and process exit, with a clean kernel log and an unloadable module.
. "$(dirname "$0")/lib.sh"

dir=$(cd "$(dirname "$0")" && pwd)
KO=$dir/sock_test/zn_sock_test.ko
PY=$dir/sock_test.py
CASES="info attach_errors callback_consume no_steal zc_send release"
KUNIT=/sys/kernel/debug/kunit/zn_sock_test/results

ktap_print_header
[ -r "$KO" ] || ktap_exit_fail_msg "$KO not built (make selftests-build)"
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
mark=$(zn_log_mark)
# Only what this test leaks counts: earlier objects are not reported.
[ ! -w /sys/kernel/debug/kmemleak ] || echo clear >/sys/kernel/debug/kmemleak
! grep -q '^zn_sock_test ' /proc/modules || rmmod zn_sock_test
insmod "$KO" || ktap_exit_fail_msg "cannot load zn_sock_test"

ktap_set_plan $(( $(wc -w <<<"$CASES") + 3 ))

kunit_passed() {
	[ -r "$KUNIT" ] || { echo "no $KUNIT"; return 1; }
	cat "$KUNIT" | sed 's/^/  /'
	! grep -q 'not ok' "$KUNIT" && grep -q '^ok' "$KUNIT"
}
zn_case "KUnit zn_sock_test (seq compare, ubuf lookup and completion)" kunit_passed

# One Python process runs the cases (its start-up is slow under TCG); each
# reports "PASS name" or "FAIL name" after its "# " notes.
ran=0
while read -r line; do
	case "$line" in
	"PASS "*) ktap_test_pass "${line#PASS }"; ran=$((ran + 1)) ;;
	"FAIL "*) ktap_test_fail "${line#FAIL }"; ran=$((ran + 1)) ;;
	"# "*) printf '%s\n' "$line" ;;
	*) printf '# %s\n' "$line" ;;
	esac
done < <(python3 "$PY" $CASES 2>&1)
for _ in $(seq $((ran + 1)) "$(wc -w <<<"$CASES")"); do
	ktap_test_fail "a case did not report (sock_test.py died)"
done

zn_case "the module unloads (no socket or send holds it)" rmmod zn_sock_test
clean_log() {
	zn_no_reports "$mark" || return 1
	[ ! -w /sys/kernel/debug/kmemleak ] || zn_kmemleak_check
}
t0=$SECONDS
zn_case "kernel log clean (lockdep, KFENCE, kmemleak)" clean_log
echo "# log and kmemleak check: $((SECONDS - t0)) s"
ktap_finished

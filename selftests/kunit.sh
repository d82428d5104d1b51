#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The module's KUnit suites (pure logic: ring geometry, ethtool mappings, registration argument
# checks) ran when qemu/run loaded it, and the patch series' (sk_buff writers
# refusing cloned and shared buffers) at boot; relay each case's result from
# debugfs.
. "$(dirname "$0")/lib.sh"

SUITES="zeronic_ring_geometry zeronic_ethtool zeronic_mr_args rust_kernel_skbuff"
KUNIT=/sys/kernel/debug/kunit

ktap_print_header
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
zn_loaded || ktap_exit_fail_msg "zeronic is not loaded"

# Each suite's results file is KTAP: "ok N name" / "not ok N name" per case,
# then one line for the suite itself (not indented); count the indented ones.
cases=()
for s in $SUITES; do
	f=$KUNIT/$s/results
	[ -r "$f" ] || { cases+=("missing|$s"); continue; }
	while read -r line; do
		case "$line" in
		"ok "*) cases+=("ok|$s.${line#ok * }") ;;
		"not ok "*) cases+=("fail|$s.${line#not ok * }") ;;
		esac
	done < <(grep -E '^ +(not )?ok ' "$f" | sed 's/^ *//')
done
ktap_set_plan "${#cases[@]}"
for c in "${cases[@]}"; do
	case "${c%%|*}" in
	ok) ktap_test_pass "kunit ${c#*|}" ;;
	fail) ktap_test_fail "kunit ${c#*|}" ;;
	missing) ktap_test_fail "kunit suite ${c#*|} ran (no $KUNIT/${c#*|}/results)" ;;
	esac
done
ktap_finished

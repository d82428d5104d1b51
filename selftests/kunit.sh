#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The module's KUnit suites (pure logic: ring geometry, ethtool mappings,
# registration argument checks, which header-queue headers (IPv4 or IPv6) are a flow's
# connection) ran when qemu/run loaded it, and the patch series' (sk_buff
# writers refusing cloned and shared buffers) at boot; relay each case's result from
# debugfs:
# a pass as a pass, a failure as a failure, a KUnit skip ("# SKIP") as a
# KTAP skip (never a pass). A suite with no results, one that lists fewer
# cases than its plan, or one that ran no case at all fails; a suite KUnit
# skipped as a whole is one skip.
. "$(dirname "$0")/lib.sh"

SUITES="zeronic_ring_geometry zeronic_ethtool zeronic_rss zeronic_ntuple zeronic_mr_args zeronic_hdrq zeronic_tuple zeronic_qp_track rust_kernel_skbuff"
# ZN_KUNIT_DIR: another directory of <suite>/results files (to check this
# script against made-up results).
KUNIT=${ZN_KUNIT_DIR:-/sys/kernel/debug/kunit}

ktap_print_header
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
zn_loaded || ktap_exit_fail_msg "zeronic is not loaded"

# Each suite's results file (lib/kunit/debugfs.c) is KTAP: the suite's plan
# ("    1..N") and one line per case indented by exactly four spaces
# ("    ok 3 name", "    not ok 3 name", "    ok 3 name # SKIP why";
# parameterized cases nest their parameters deeper), then the suite's own
# line, unindented ("ok 1 suite", or "ok 1 suite # SKIP why" if KUnit skipped
# it whole, with no case lines).
cases=()
for s in $SUITES; do
	f=$KUNIT/$s/results
	if [ ! -r "$f" ]; then
		cases+=("fail|kunit suite $s ran (no $f)")
		continue
	fi
	n=0
	while IFS= read -r line; do
		n=$((n + 1))
		res=${line%% *}
		rest=${line#* }
		[ "$res" = not ] && rest=${rest#ok }
		name=${rest#* }
		case "$res|$name" in
		ok\|*" # SKIP"*) cases+=("skip|kunit $s.${name%% # SKIP*} (KUnit skipped it:${name#* # SKIP})") ;;
		ok\|*) cases+=("pass|kunit $s.$name") ;;
		*) cases+=("fail|kunit $s.$name") ;;
		esac
	done < <(sed -n 's/^    \(\(not \)\{0,1\}ok [0-9][0-9]* .*\)$/\1/p' "$f")
	plan=$(sed -n 's/^    1\.\.\([0-9][0-9]*\)$/\1/p' "$f" | head -n1)
	suite=$(grep -E '^(not )?ok [0-9]+ ' "$f" | tail -n1)
	if [ "$n" = 0 ]; then
		case "$suite" in
		"ok "*" # SKIP"*) cases+=("skip|kunit suite $s (KUnit skipped it:${suite#* # SKIP})") ;;
		*) cases+=("fail|kunit suite $s reported no case (suite line: '${suite:-none}')") ;;
		esac
	elif [ "$n" != "${plan:-?}" ]; then
		cases+=("fail|kunit suite $s lists $n cases, its plan says ${plan:-nothing}")
	fi
done
ktap_set_plan "${#cases[@]}"
for c in "${cases[@]}"; do
	case "${c%%|*}" in
	pass) ktap_test_pass "${c#*|}" ;;
	skip) ktap_test_skip "${c#*|}" ;;
	*) ktap_test_fail "${c#*|}" ;;
	esac
done
ktap_finished

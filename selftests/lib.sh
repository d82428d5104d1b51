# Helpers shared by the shell selftests. Sourced; the tests run inside a guest
# booted by qemu/run, where the checkout has the same path as on the host.
# KTAP output comes from the kernel tree's own ktap_helpers.sh (qemu/run
# exports ZN_KDIR, the tree the guest booted from).

ZN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ZN_KO=$ZN_ROOT/zeronic/zeronic.ko

# shellcheck source=/dev/null
. "${ZN_KDIR:?run this through qemu/run}/tools/testing/selftests/kselftest/ktap_helpers.sh"

# zn_need_topology NAME: the test runs only in qemu/run's topology NAME;
# anywhere else it skips as a whole (KTAP "1..0 # SKIP") and exits.
zn_need_topology() {
	[ "${ZN_TOPOLOGY:-}" = "$1" ] && return
	ktap_print_header
	ktap_skip_all "needs topology $1 (ZN_TOPOLOGY=${ZN_TOPOLOGY:-})"
	exit "$KSFT_SKIP"
}

zn_loaded() { [ -d /sys/module/zeronic ]; }

zn_load() {
	zn_loaded || insmod "$ZN_KO"
}

zn_unload() {
	! zn_loaded || rmmod zeronic
}

# zn_nap SECS: sleeps SECS (decimals allowed) without starting a program:
# read's timeout on a pipe nobody writes. Polling loops use it, since under
# TCG every exec of sleep costs tens of milliseconds of the guest's CPU.
zn_nap() {
	local _
	read -rt "$1" _ <> <(:) || :
}

# zn_kmemleak_check: fails, printing kmemleak's report, if it finds an
# object leaked before the call. kmemleak wants an object unchanged across
# two scans and reports only objects 5 s old when a scan starts: the first
# scan (about 6 s of TCG) fills that wait, and the second starts 5.1 s
# after the call (a margin over jiffies' rounding) at the earliest.
zn_kmemleak_check() {
	local k=/sys/kernel/debug/kmemleak ended left report
	ended=$(date +%s%3N)
	echo scan >"$k" || return 1
	left=$((ended + 5100 - $(date +%s%3N)))
	[ "$left" -le 0 ] || zn_nap "$((left / 1000)).$(printf '%03d' $((left % 1000)))"
	echo scan >"$k" || return 1
	report=$(<"$k")
	[ -z "$report" ] || { printf '%s\n' "$report" | head -n 40; return 1; }
}

# zn_nic_use PERF: NIC 0's "mr_in_use pinned_pages flows_in_use", through
# the zn-perf binary PERF (`zn-perf query`, its name=value words).
zn_nic_use() {
	"$1" query | awk '{
		for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
		if (!("mr_in_use" in v && "pinned_pages" in v && "flows_in_use" in v)) exit 1
		print v["mr_in_use"], v["pinned_pages"], v["flows_in_use"]
	}'
}

# zn_nic_use_back PERF BEFORE SECS: zn_nic_use back to BEFORE (its words)
# within SECS seconds; says what it is instead if not.
zn_nic_use_back() {
	local perf=$1 before=$2 now i
	for ((i = 0; i < $3 * 10; i++)); do
		now=$(zn_nic_use "$perf") || return 1
		[ "$now" = "$before" ] && return 0
		zn_nap 0.1
	done
	echo "NIC's mr_in_use pinned_pages flows_in_use: $before before, $now after"
	return 1
}

# KUnit runs the module's suites at every load (CONFIG_KUNIT_AUTORUN_ENABLED;
# about 1 s under TCG), with kunit's filter_glob as it is then (read at each
# load: lib/kunit/test.c, kunit_module_init). A test that reloads the module
# many times runs them at its last load only, so that kunit.sh, if it comes
# later in the same boot, finds the loaded module's results in debugfs:
# zn_kunit_skip (in the test's own shell, before its reloads) keeps the
# glob in $ZN_KUNIT_SAVED and sets one that matches no suite;
# zn_kunit_restore puts it back (before the last load, and from an EXIT
# trap). The kernel's default is no glob, which reads "(null)" and cannot be
# written back; "*.*" means the same. An empty glob would match nothing,
# and one written with a trailing newline would keep it: hence printf.
ZN_KUNIT_GLOB=/sys/module/kunit/parameters/filter_glob
zn_kunit_skip() {
	[ -w "$ZN_KUNIT_GLOB" ] || return 0
	if [ -z "${ZN_KUNIT_SAVED+set}" ]; then
		ZN_KUNIT_SAVED=$(cat "$ZN_KUNIT_GLOB") || return 1
		[ "$ZN_KUNIT_SAVED" != "(null)" ] || ZN_KUNIT_SAVED='*.*'
	fi
	printf '%s' zeronic-no-suite >"$ZN_KUNIT_GLOB"
}
zn_kunit_restore() {
	# An empty glob (matching nothing, like ours) cannot be written back
	# either: a write of nothing never reaches the kernel.
	[ -z "${ZN_KUNIT_SAVED:-}" ] || printf '%s' "$ZN_KUNIT_SAVED" >"$ZN_KUNIT_GLOB"
}
# zn_kunit_ran: the loaded module's suites left results (after the last
# load, with the glob restored); kunit.sh checks what they say.
zn_kunit_ran() {
	[ -n "${ZN_KUNIT_SAVED:-}" ] || return 0
	[ -r /sys/kernel/debug/kunit/zeronic_ring_geometry/results ] ||
		{ echo "no KUnit results of the module's last load (filter_glob '$(cat "$ZN_KUNIT_GLOB")')"; return 1; }
}

# Waits up to 5 s for a path to appear or disappear (devtmpfs is asynchronous
# with respect to module init only in the uevent sense; this is cheap).
zn_wait_path() {
	local want=$1 path=$2 i
	for i in $(seq 50); do
		if [ "$want" = present ] && [ -e "$path" ]; then return 0; fi
		if [ "$want" = absent ] && [ ! -e "$path" ]; then return 0; fi
		zn_nap 0.1
	done
	return 1
}

# Prints the number of kernel log lines so a test can look only at what it
# caused: zn_log_mark, then zn_log_since MARK.
zn_log_mark() { dmesg | wc -l; }
zn_log_since() { dmesg | tail -n +"$(( $1 + 1 ))"; }

# Kernel reports no test may cause: what qemu/run scans every guest log for,
# plus the debug facilities' own prefixes. Only meaningful on lines after a
# mark: boot prints harmless "DMA-API:" and "kmemleak:" lines.
ZN_REPORT_RE='WARNING:|BUG:|kernel BUG|Oops|Kernel panic|general protection fault|Call Trace:|lockdep|INFO: (possible|inconsistent|trying to register|suspicious)|inconsistent lock|KFENCE|UBSAN|kmemleak|unreferenced object|DMA-API|panicked at'

# zn_no_reports MARK: succeeds if the kernel logged no report since
# zn_log_mark returned MARK; prints the reports otherwise.
zn_no_reports() { ! zn_log_since "$1" | grep -E "$ZN_REPORT_RE"; }

# zn_sysfs_write SECS VALUE FILE: writes VALUE to FILE in the background and
# fails unless the write finishes, successfully, within SECS seconds (so a
# hung unbind cannot hang the test).
zn_sysfs_write() {
	local secs=$1 value=$2 file=$3 pid _
	( echo "$value" >"$file" ) &
	pid=$!
	for _ in $(seq $((secs * 10))); do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" || { echo "writing $value to $file failed"; return 1; }
			return 0
		fi
		zn_nap 0.1
	done
	echo "writing $value to $file did not finish within $secs s"
	return 1
}

# Runs one check as a KTAP test case: zn_case "description" command args...
zn_case() {
	local desc=$1; shift
	local out t0=$SECONDS
	if out=$("$@" 2>&1); then
		ktap_test_pass "$desc"
	else
		[ -z "$out" ] || printf '%s\n' "$out" | sed 's/^/# /'
		ktap_test_fail "$desc"
	fi
	zn_case_took "$t0"
}

# zn_case_took T0: says how long a case that started at $SECONDS T0 took,
# if it was long enough to matter for the suite's run time.
zn_case_took() {
	local d=$((SECONDS - $1))
	[ "$d" -lt 3 ] || ktap_print_msg "(took $d s)"
}

# zn_case_here "description" command args...: as zn_case, but the command
# runs in this shell, not in a subshell, so what it sets or exports (e.g.
# zn_net_setup's ZN_* variables, a holder's pid) stays for later cases.
zn_case_here() {
	local desc=$1 out
	shift
	local t0=$SECONDS
	out=$(mktemp) || return 1
	if "$@" >"$out" 2>&1; then
		ktap_test_pass "$desc"
	else
		sed 's/^/# /' "$out"
		ktap_test_fail "$desc"
	fi
	rm -f "$out"
	zn_case_took "$t0"
}

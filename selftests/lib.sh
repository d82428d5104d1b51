# Helpers shared by the shell selftests. Sourced; the tests run inside a guest
# booted by qemu/run, where the checkout has the same path as on the host.
# KTAP output comes from the kernel tree's own ktap_helpers.sh (qemu/run
# exports ZN_KDIR, the tree the guest booted from).

ZN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ZN_KO=$ZN_ROOT/zeronic/zeronic.ko

# shellcheck source=/dev/null
. "${ZN_KDIR:?run this through qemu/run}/tools/testing/selftests/kselftest/ktap_helpers.sh"

zn_loaded() { [ -d /sys/module/zeronic ]; }

zn_load() {
	zn_loaded || insmod "$ZN_KO"
}

zn_unload() {
	! zn_loaded || rmmod zeronic
}

# Waits up to 5 s for a path to appear or disappear (devtmpfs is asynchronous
# with respect to module init only in the uevent sense; this is cheap).
zn_wait_path() {
	local want=$1 path=$2 i
	for i in $(seq 50); do
		if [ "$want" = present ] && [ -e "$path" ]; then return 0; fi
		if [ "$want" = absent ] && [ ! -e "$path" ]; then return 0; fi
		sleep 0.1
	done
	return 1
}

# Prints the number of kernel log lines so a test can look only at what it
# caused: zn_log_mark, then zn_log_since MARK.
zn_log_mark() { dmesg | wc -l; }
zn_log_since() { dmesg | tail -n +"$(( $1 + 1 ))"; }

# Runs one check as a KTAP test case: zn_case "description" command args...
zn_case() {
	local desc=$1; shift
	local out
	if out=$("$@" 2>&1); then
		ktap_test_pass "$desc"
	else
		[ -z "$out" ] || printf '%s\n' "$out" | sed 's/^/# /'
		ktap_test_fail "$desc"
	fi
}

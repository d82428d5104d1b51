#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The kernel's own driver tests (tools/testing/selftests/drivers/net of the
# 7.3 tree the guest booted) in hardware mode on a ZeroNIC port: the local
# side is zn0 in netns zn-a, the remote side zn1's netns zn-b
# (REMOTE_TYPE=netns), over IPv4 and IPv6. Two-port topology.
#
# Run as drv_net_<name>.sh (symlinks to this file) for <name>.py; a double
# underscore in <name> is a directory separator (drv_net_hw__irq.sh runs
# hw/irq.py). The test's own KTAP is this program's output, so each of its
# cases counts as a pass, a failure or a skip; why the expected skips happen is in
# docs/testing.md ("The kernel's driver tests").
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/net_lib.sh"

name=$(basename "$0" .sh)
# drv_net_hw__irq.sh runs hw/irq.py.
test=${name#drv_net_}
test=${test//__//}.py
dir=$ZN_KDIR/tools/testing/selftests/drivers/net

fail_all() {
	ktap_print_header
	ktap_set_plan 1
	ktap_test_fail "$1"
	ktap_finished
}

[ -f "$dir/$test" ] || { fail_all "$test exists in $dir"; exit 1; }
if ! zn_net_ready; then
	zn_net_setup >/dev/null 2>&1 || true
fi
[ "${ZN_TOPOLOGY:-}" = two-port ] && zn_net_ready ||
	{ fail_all "both ZeroNIC ports are set up (two-port topology)"; exit 1; }
# What make setup builds into the tree for the XDP and AF_XDP cases: their
# absence would fail those cases, so say why up front.
for f in xdp_dummy.bpf.o xdp_helper; do
	[ -e "$dir/../../net/lib/$f" ] ||
		echo "# missing $dir/../../net/lib/$f (make selftests-build builds it)"
done
# The fixes to the tree's tests that make selftests-build applies
# (patches/selftests/): one missing means the test runs unfixed.
for p in "$ZN_ROOT"/patches/selftests/*.patch; do
	[ -e "$p" ] || continue
	patch -d "$ZN_KDIR" -p1 -R -s -f --dry-run <"$p" >/dev/null 2>&1 ||
		echo "# not applied to $ZN_KDIR: patches/selftests/$(basename "$p") (make selftests-build applies it)"
done
# The ethtool the tests run (first in PATH): hds.py's ioctl cases need
# --disable-netlink, which make setup's /usr/local/sbin/ethtool has and
# Debian 12's /usr/sbin/ethtool 6.1 lacks.
eth=$(command -v ethtool) || eth=
echo "# ethtool: ${eth:-none in PATH} ($(${eth:-false} --version 2>/dev/null))"
[ -n "$eth" ] && "$eth" --disable-netlink --version >/dev/null 2>&1 ||
	echo "# this ethtool has no --disable-netlink (make setup installs one that has)"

# The IPv6 addresses again (idempotent): a test before may have taken the
# link down, which flushes them.
zn_in a ip -6 addr replace "$ZN_ADDR6_A/64" dev "$ZN_IF_A" nodad
zn_in b ip -6 addr replace "$ZN_ADDR6_B/64" dev "$ZN_IF_B" nodad

# Every queue pair the NIC serves (the multi-queue cases need two or more;
# the default is one per CPU).
zn_in a ethtool -L "$ZN_IF_A" combined "$(zn_in a ethtool -l "$ZN_IF_A" |
	awk '/^Combined:/ {print $2; exit}')" 2>/dev/null || true

export NETIF=$ZN_IF_A LOCAL_V4=$ZN_ADDR_A REMOTE_V4=$ZN_ADDR_B \
	LOCAL_V6=$ZN_ADDR6_A REMOTE_V6=$ZN_ADDR6_B REMOTE_TYPE=netns REMOTE_ARGS=$ZN_NS_B \
	PYTHONDONTWRITEBYTECODE=1
# Debian's interpreter: its python3-yaml is what the ynl library imports.
exec ip netns exec "$ZN_NS_A" /usr/bin/python3 "$dir/$test"

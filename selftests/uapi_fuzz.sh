#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Fuzzes the /dev/zeronic ABI for about a minute (topology two-port):
# target/release/zn-fuzz makes every ioctl of uapi/linux/zeronic.h, and
# other command words of its type, with random and hostile arguments from
# several processes and threads (shared files, files passed over SCM_RIGHTS,
# forked callers, some killed mid-registration; as root, as root without
# CAP_IPC_LOCK, as nobody; flows attached to TCP connections across the
# link), while it unbinds and binds the NIC (setting the new ports up again)
# and changes the ports' MTUs. A quarter of the time goes first to its flow
# phase: four processes attach, post to, return ring space of, detach and
# kill flows of connections between the ports' namespaces, through own,
# inherited and SCM_RIGHTS-passed files, while the other ends send, shut
# down and reset; one more, as uid 65534 in a user and network namespace of
# its own, attaches connections through a veth with the ports' indexes
# (every one ENODEV). Its oracles become the cases below; this script adds the
# kernel log and a working link afterwards. ZN_FUZZ_SECS and ZN_FUZZ_SEED
# override the duration and the seed (the seed is printed either way).
set -u
. "$(dirname "$0")/lib.sh"

zn_need_topology two-port

. "$(dirname "$0")/net_lib.sh"

# ZN_FUZZ_BIN: another build of zn-fuzz.
FUZZ=${ZN_FUZZ_BIN:-$ZN_ROOT/target/release/zn-fuzz}
SECS=${ZN_FUZZ_SECS:-60}

# zn-fuzz's oracles, in the order it prints them: "name|what the case says".
CHECKS=(
	"flows-errnos|flow phase: every call of the flow workers returned 0 or an errno the header documents for it"
	"flows-consistent|flow phase: no loopback attach, flow queries add up, ring returns within what was reported succeed, posted counts, own CQs"
	"flows-cqe-status|flow phase: every completion has a known opcode and a status docs/uapi.md gives it"
	"flows-processes|flow phase: every worker exited 0, forked callers exited or were killed"
	"flows-netns|flow phase: uid 65534 in its own namespaces: every attach (veth with the ports' indexes, loopback) was ENODEV"
	"flows-coverage|flow phase: flows attached, posted to, detached; data completed; callers killed; files passed over SCM_RIGHTS"
	"flows-counters|flow phase: flows_in_use, mr_in_use, pinned_pages, held_pages and the users' shares back to their start"
	"flows-kernel-log|flow phase: no kernel report (WARNING, BUG, lockdep, KASAN-like, hung task) during it"
	"documented-errnos|every call returned 0 or an errno the header documents for it"
	"consistent-results|results agree with their arguments (exact errnos, failures, QUERY fields, fresh nonzero keys)"
	"processes|every worker, forked caller and the racer ended as planned"
	"coverage|every call failed, and QUERY, MR_REG, MR_DEREG and CQ_CREATE succeeded, at least once; files passed over SCM_RIGHTS; callers killed mid-registration"
	"coverage-attach|a random FLOW_ATTACH succeeded at least once (a miss is a skip: known to miss, zc_test and zc_lifecycle cover attaches)"
	"races|the NIC was unbound and bound, MTUs changed, during the calls"
	"vmpin|each worker's VmPin back to its start once every file was closed"
	"nic-counters|NIC 0's mr_in_use, pinned_pages, held_pages, flows_in_use back to their start"
	"kernel-pins|outstanding FOLL_PIN pins (/proc/vmstat) back to their start"
	"user-locked|root's and nobody's locked pages and MR entries back to their start"
)

zn_load
zn_wait_path present /dev/zeronic || { ktap_print_header; ktap_exit_fail_msg "no /dev/zeronic"; }
zn_net_start $(( ${#CHECKS[@]} + 2 ))
mark=$(zn_log_mark)
mtu_a=$(zn_mtu a) mtu_b=$(zn_mtu b)

seed=()
[ -z "${ZN_FUZZ_SEED:-}" ] || seed=(--seed "$ZN_FUZZ_SEED")
out=$(mktemp)
# A hung driver must not hang the test: zn-fuzz gives its processes 3
# minutes beyond SECS to end, this gives it 2 more.
timeout -k 10 $((SECS + 300)) "$FUZZ" --secs "$SECS" "${seed[@]}" --pci "$ZN_PCI" \
	--netns "$ZN_NS_A" --netns "$ZN_NS_B" --iface "$ZN_IF_A" --iface "$ZN_IF_B" \
	--after-bind ". '$ZN_ROOT/qemu/guest/net-setup' && zn_net_setup" \
	--tcp "$ZN_NS_A,$ZN_NS_B,$ZN_ADDR_B" >"$out" 2>&1
rc=$?
sed 's/^/# /' "$out"
[ "$rc" -lt 124 ] || ktap_print_msg "zn-fuzz did not finish (exit $rc)"

for c in "${CHECKS[@]}"; do
	name=${c%%|*}
	if grep -q "^check: ok $name:" "$out"; then
		ktap_test_pass "zn-fuzz: ${c#*|}"
	elif [ "$name" = coverage-attach ] && grep -q "^check: FAIL $name:" "$out"; then
		# Known (issue 8 note): the fuzzer's attaches almost never meet
		# every condition at once; never counted as a pass.
		ktap_test_skip "zn-fuzz: ${c#*|}"
	else
		grep -q "^check: FAIL $name:" "$out" || ktap_print_msg "zn-fuzz printed no verdict for $name"
		ktap_test_fail "zn-fuzz: ${c#*|}"
	fi
done
rm -f "$out"

# The racer leaves the NIC bound, but the ports may be new net_devices (a
# rebind) with other MTUs: place and address them again, restore the MTUs.
link_works() {
	zn_net_setup >/dev/null 2>&1
	zn_net_ready || { echo "the ports are not set up again (ZN_IF_A=$ZN_IF_A ZN_IF_B=$ZN_IF_B)"; return 1; }
	zn_in a ip link set dev "$ZN_IF_A" mtu "$mtu_a" && zn_in b ip link set dev "$ZN_IF_B" mtu "$mtu_b" &&
		zn_in a ip link set dev "$ZN_IF_A" up && zn_in b ip link set dev "$ZN_IF_B" up || return 1
	zn_net_carrier "$ZN_NS_A" "$ZN_IF_A"
	zn_net_carrier "$ZN_NS_B" "$ZN_IF_B"
	zn_in a ping -n -q -c 3 -i 0.2 -w 15 -M do -s $((mtu_a - 28)) "$ZN_ADDR_B" >/dev/null ||
		{ echo "no DF ping a->b at MTU $mtu_a"; return 1; }
	zn_in b ping -n -q -c 3 -i 0.2 -w 15 "$ZN_ADDR_A" >/dev/null || { echo "no ping b->a"; return 1; }
}
zn_case_here "afterwards the NIC is bound and the link works at MTU $mtu_a (pings both ways)" link_works

zn_case "no kernel report during the fuzzing" zn_no_reports "$mark"

ktap_finished

#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# In a guest of a NIC topology (two-port, two-guest): the emulated ZeroNIC is
# a PCI function, its BAR2 identity header carries the magic, version and
# port count docs/hardware.md defines, and the wire's impairments can be
# changed from inside the guest while it runs, through a control channel
# that reaches no other guest's device.
. "$(dirname "$0")/lib.sh"

# docs/hardware.md, "Identity": magic "ZNIC", major version 2.
MAGIC=0x43494e5a
MAJOR=2
case "${ZN_TOPOLOGY:-}" in
two-port) PORTS=2 ;;
two-guest) PORTS=1 ;;
*) ktap_print_header; ktap_skip_all "not in a NIC topology (ZN_TOPOLOGY=${ZN_TOPOLOGY:-})"; exit "$KSFT_SKIP" ;;
esac
probe=$ZN_ROOT/target/release/zn-probe

ktap_print_header
ktap_set_plan 6

zn_case "lspci lists the NIC as 1af4:1110" \
	bash -c "lspci -nn | grep -q 'Inter-VM shared memory \[1af4:1110\]'"

identity() {
	local out
	out=$("$probe") || { echo "$out"; return 1; }
	echo "$out" | grep -q "magic=$MAGIC" || { echo "$out"; return 1; }
	echo "$out" | grep -q "version=$MAJOR\." || { echo "$out"; return 1; }
	echo "$out" | grep -q " ports=$PORTS " || { echo "want ports=$PORTS: $out"; return 1; }
}
zn_case "BAR2 identity: magic $MAGIC, version $MAJOR.x, $PORTS port(s)" identity

bar2_is_nic_memory() {
	# BAR2 is the model's shared memory: at least one page, and mapping it
	# (sysfs resource2, MAP_SHARED) shows the register file's magic at 0.
	# Independent of zn-probe: Python's mmap, not memmap2.
	local size out
	size=$(stat -c %s "$ZN_PCI/resource2")
	[ "$size" -ge 4096 ] || { echo "resource2 is $size bytes"; return 1; }
	out=$(python3 -c '
import mmap, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ)
print("%#010x" % struct.unpack_from("<I", m, 0)[0])
' "$ZN_PCI/resource2" 2>&1) || { echo "mmap of $ZN_PCI/resource2: $out"; return 1; }
	[ "$out" = "$MAGIC" ] || { echo "the first word of the mapped BAR2 is $out, want $MAGIC"; return 1; }
}
zn_case "BAR2 maps (sysfs resource2) and reads the NIC's magic $MAGIC" bar2_is_nic_memory

# The wire's settings now ("loss=.. reorder=.. dup=.. delay=..us rate=.."),
# from the first wire line of the model's stats.
wire_settings() {
	"$ZN_ROOT/qemu/guest/zn-wire" stats |
		sed -n '/^wire /{s/.* \(loss=[^ ]* reorder=[^ ]* dup=[^ ]* delay=[^ ]* rate=[^ ]*\).*/\1/p;q}'
}

set_impairments() {
	local out before
	before=$(wire_settings)
	[ -n "$before" ] || { echo "no wire line in the model's stats"; return 1; }
	out=$("$ZN_ROOT/qemu/guest/zn-wire" loss=3 reorder=2 dup=1 delay=50us) || { echo "$out"; return 1; }
	out=$("$ZN_ROOT/qemu/guest/zn-wire" stats)
	echo "$out" | grep -q 'loss=3 reorder=2 dup=1 delay=50us' || { echo "$out"; return 1; }
	# Back to what the run was started with (qemu/run --wire): the tests
	# after this one run on that wire.
	# shellcheck disable=SC2086
	"$ZN_ROOT/qemu/guest/zn-wire" $before >/dev/null || return 1
	[ "$(wire_settings)" = "$before" ] || { echo "wire not restored to '$before': $(wire_settings)"; return 1; }
}
zn_case "wire impairments change at run time from the guest, and are restored" set_impairments

zn_case "a bad impairment is refused with an error" \
	bash -c "! '$ZN_ROOT/qemu/guest/zn-wire' loss=500 >/dev/null"

other_guest_refused() {
	local other out
	[ "${ZN_GUEST:-a}" = a ] && other=b || other=a
	if out=$("$ZN_ROOT/qemu/guest/zn-wire" fault status "guest=$other"); then
		echo "fault status guest=$other answered: $out"
		return 1
	fi
	case $ZN_TOPOLOGY in
	two-guest) want="outside this control channel's scope" ;;
	*) want="no guest" ;;
	esac
	grep -q "$want" <<<"$out" || { echo "want '$want': $out"; return 1; }
}
zn_case "the guest's control channel reaches no other guest" other_guest_refused

ktap_finished

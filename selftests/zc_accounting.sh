#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs zc_accounting (what the zero-copy path charges and counts: CQs against
# RLIMIT_MEMLOCK, region uses, released regions still referenced) with the
# two-port network it needs (zc_env.sh). Its last case makes the NIC fatal
# (ZN_WIRE); the NIC is rebound and the network set up again afterwards,
# for the tests that follow in the same guest.
. "$(dirname "$0")/zc_env.sh"
"$(dirname "$0")/zc_accounting"
rc=$?
bdf=$(basename "$ZN_PCI")
if ! { zn_sysfs_write 60 "$bdf" /sys/bus/pci/drivers/zeronic/unbind &&
	zn_bind "$bdf" && zn_net_setup >/dev/null 2>&1 && zn_net_ready; }; then
	echo "# zc_accounting.sh: the NIC could not be rebound after the fatal case"
	rc=1
fi
exit $rc

#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Not a test: the peer side of net_two_guest.sh. suite.conf runs it in guest
# b of the two-guest topology (--peer-cmd selftests/net_peer.sh), where it
# serves on b's port until qemu/run stops it: iperf3 on port 5201 and
# net_xfer.py's checker on port 5301 (it answers each transfer with its
# verdict, so guest a's test sees it). Exits non-zero if a server dies.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${ZN_ADDR_B:?no port of the NIC configured in this guest (qemu/guest/net-setup)}"

echo "net_peer: serving on $ZN_IF_B $ZN_ADDR_B"
iperf3 -s -B "$ZN_ADDR_B" -p 5201 &
python3 "$here/net_xfer.py" serve --bind "$ZN_ADDR_B" --port 5301 &
wait -n
rc=$?
echo "net_peer: a server exited with status $rc" >&2
exit 1

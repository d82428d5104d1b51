#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ethtool on the ports: -i names the driver and the PCI function, -S shows
# the NIC's own per-port counters (hw_*), and they count what crossed the
# wire. Two-port topology.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/net_lib.sh"

PINGS=20

zn_net_start 4

# hw_stat SIDE NAME: one counter of `ethtool -S` on that side's port.
hw_stat() {
	zn_in "$1" ethtool -S "$(zn_side_if "$1")" | awk -v n="$2:" '$1 == n {print $2}'
}

drvinfo() {
	local info
	info=$(zn_in a ethtool -i "$ZN_IF_A") || return 1
	printf '%s\n' "$info" | grep -qx 'driver: zeronic' || { echo "$info"; return 1; }
	printf '%s\n' "$info" | grep -qx "bus-info: $(basename "$ZN_PCI")" || { echo "$info"; return 1; }
}
zn_case "ethtool -i: driver zeronic on $(basename "${ZN_PCI:-?}")" drvinfo

names() {
	local s n
	s=$(zn_in a ethtool -S "$ZN_IF_A") || return 1
	n=$(printf '%s\n' "$s" | grep -c '^ *hw_[a-z_]*: [0-9]*$')
	[ "$n" = 28 ] || { echo "$n hw_ counters, want 28"; return 1; }
	printf '%s\n' "$s" | grep -q '^ *hw_rx_unacceptable: [0-9]*$' || { echo "no hw_rx_unacceptable"; return 1; }
}
zn_case "ethtool -S lists the NIC's 28 per-port counters" names

moves() {
	local tx0 rx0 tx1 rx1
	tx0=$(hw_stat a hw_tx_frames) rx0=$(hw_stat b hw_rx_normal)
	zn_in a ping -c "$PINGS" -i 0.2 -W 2 "$ZN_ADDR_B" >/dev/null || { echo "pings failed"; return 1; }
	tx1=$(hw_stat a hw_tx_frames) rx1=$(hw_stat b hw_rx_normal)
	echo "a hw_tx_frames $tx0 -> $tx1, b hw_rx_normal $rx0 -> $rx1"
	[ $((tx1 - tx0)) -ge "$PINGS" ] && [ $((rx1 - rx0)) -ge "$PINGS" ]
}
zn_case "$PINGS pings a->b move a's hw_tx_frames and b's hw_rx_normal" moves

clean() {
	local bad=0 n
	for n in hw_tx_errors hw_tx_bad_desc hw_tx_dma_err hw_rx_malformed hw_rx_csum_err hw_rx_buf_small; do
		[ "$(hw_stat a "$n")" = 0 ] || { echo "a $n = $(hw_stat a "$n")"; bad=1; }
		[ "$(hw_stat b "$n")" = 0 ] || { echo "b $n = $(hw_stat b "$n")"; bad=1; }
	done
	return $bad
}
zn_case "no descriptor, DMA, checksum or size errors on either port" clean

ktap_finished

#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs zc_served (sockets their process attached with
# setsockopt(TCP_ULP, "zeronic"), served by TCP: plain I/O both ways, socket
# semantics, the documented errnos, 1% loss) with the two-port network it
# needs (zc_env.sh), and the ports' names for its ethtool counters.
. "$(dirname "$0")/zc_env.sh"
export ZN_IF_A ZN_IF_B
"$(dirname "$0")/zc_served"
rc=$?
# For the record (since the module loaded, this line's tests together):
# what explains a slow transfer, TCP's drops and timeouts and the NIC's,
# and the flows' moves between queue pairs (docs/driver.md, "Notify
# queues follow the application").
for s in a b; do
	echo "# side $s: $(zn_in $s nstat -az TcpExtTCPBacklogDrop TcpExtTCPRcvQDrop TcpRetransSegs TcpExtTCPTimeouts TcpExtTCPOFOQueue 2>/dev/null |
		awk 'NR > 1 {printf "%s=%s ", $1, $2}')$(zn_in $s ethtool -S "$(zn_side_if $s)" |
		grep -E " (hw_rx_hdrq_full|hw_rx_no_buf|hw_rx_fallback|zc_flow_moves|zc_flow_move_waits|zc_flow_move_timeouts):" | tr -s ' \n' ' ')"
done
exit $rc

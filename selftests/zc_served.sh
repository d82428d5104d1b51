#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs zc_served (sockets their process attached with
# setsockopt(TCP_ULP, "zeronic"), served by TCP: plain I/O both ways, socket
# semantics, the documented errnos, 1% loss) with the two-port network it
# needs (zc_env.sh), and the ports' names for its ethtool counters.
. "$(dirname "$0")/zc_env.sh"
export ZN_IF_A ZN_IF_B
"$(dirname "$0")/zc_served"

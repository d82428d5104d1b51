#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# zc_sends.sh with its connections over IPv6 (connect_pair() in zc_lib.h
# connects to side b's ZN_ADDR6_B, qemu/guest/net-setup).
ZN_ZC_FAMILY=6 exec "$(dirname "$0")/zc_sends.sh"

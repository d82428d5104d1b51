#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# sock_semantics over sockets attached to the NIC: every connection end is
# attached with setsockopt(TCP_ULP, "zeronic") right after connect() or
# accept() (docs/uapi.md, "Attaching a socket by setsockopt"), and the same
# 16 cases as the plain run must pass (issue 34).
exec env ZN_SOCK_MODE=zeronic "$(dirname "$0")/sock_semantics.sh"

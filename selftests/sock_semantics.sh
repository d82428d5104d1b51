#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs sock_semantics (the socket semantics applications rely on: forking
# servers, exit/exec/SIGKILL with unsent bytes, epoll with maxevents 1,
# signal handlers that write, vfork/posix_spawn children, close_range,
# splice, io_uring, SO_RCVTIMEO, MSG_PEEK|MSG_WAITALL, a reset during a
# blocking write) between the two ports of the two-port topology, with the
# network zc_env.sh sets up: listeners on side b, connecting ends on side a.
#
# ZN_SOCK_MODE: the transport, passed as --mode: plain (the default:
# Linux TCP, the reference) or zeronic (every end attached by
# setsockopt(TCP_ULP), sock_semantics_zeronic.sh).
. "$(dirname "$0")/zc_env.sh"
exec "$(dirname "$0")/sock_semantics" --mode "${ZN_SOCK_MODE:-plain}"

#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs zc_docs (errnos docs/uapi.md promises: CQ_CREATE, MR_REG,
# FLOW_ATTACH) with the two-port network it needs (zc_env.sh).
. "$(dirname "$0")/zc_env.sh"
exec "$(dirname "$0")/zc_docs"

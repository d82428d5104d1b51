#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# sock_semantics through the LD_PRELOAD shim: the program in plain mode
# (it attaches nothing itself) with every process under libzn_shim.so,
# which attaches each connection after connect()/accept() and does
# nothing else (docs/shim.md). The same 16 cases as over plain TCP must
# pass, and the shim must have attached the connections, none refused.
. "$(dirname "$0")/zc_env.sh"
SHIM=$ZN_ROOT/target/release/libzn_shim.so
[ -e "$SHIM" ] || { echo "# no $SHIM (cargo build --release --workspace)"; exit 1; }
# The kselftest harness runs each case in a child that ends with _exit():
# no exit report (ZN_SHIM_STATS), so the shim's log lines, written at
# each attach, are what is counted.
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
rc=0
env LD_PRELOAD="$SHIM" ZN_SHIM_LOG="$LOG" "$(dirname "$0")/sock_semantics" --mode plain || rc=$?
attached=$(grep -c ': attached ' "$LOG")
late=$(grep -c '(Late): attached ' "$LOG")
refused=$(grep -c 'not attached' "$LOG")
echo "# shim: $attached connections attached ($late after a non-blocking connect), $refused refused"
grep -m5 'not attached' "$LOG" | sed 's/^/# /'
[ "$rc" = 0 ] || exit "$rc"
[ "$attached" -ge 16 ] && [ "$refused" = 0 ] || { echo "# the shim attached fewer than 16 connections, or some were refused"; exit 1; }

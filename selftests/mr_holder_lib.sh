# SPDX-License-Identifier: GPL-2.0
# Sourced by selftests that drive selftests/mr_holder as a coprocess (see its
# header for the commands). Needs HOLDER (the program's path) and
# REPLY_TIMEOUT (seconds to wait for each answer).
HPID=
# holder_start ARGS...: starts mr_holder ARGS, waits for its "ready" line
# (kept in $ready) and fails with its error line if it prints something else.
holder_start() {
	holder_stop
	coproc HOLDER_CO { exec "$HOLDER" "$@" 2>&1; }
	HPID=$HOLDER_CO_PID
	holder_read ready || return 1
	case "$ready" in
	ready*) return 0 ;;
	*) echo "mr_holder $*: $ready"; holder_stop; return 1 ;;
	esac
}

# Pages the running holder pinned, from its "ready" line.
ready_pages() { sed -n 's/.* pages=\([0-9]*\).*/\1/p' <<<"$ready"; }

# holder_read VAR: reads the holder's next line into VAR.
holder_read() {
	local -n _line=$1
	_line=
	[ -n "$HPID" ] || { echo "no holder running"; return 1; }
	read -r -t "$REPLY_TIMEOUT" -u "${HOLDER_CO[0]}" _line ||
		{ echo "mr_holder did not answer within ${REPLY_TIMEOUT}s"; return 1; }
}

# holder_cmd CMD: sends CMD, puts the answer in $reply.
holder_cmd() {
	[ -n "$HPID" ] || { echo "no holder running"; return 1; }
	echo "$1" >&"${HOLDER_CO[1]}" || { echo "cannot write to mr_holder"; return 1; }
	holder_read reply
}

holder_kill() {
	[ -n "$HPID" ] || return 0
	kill -KILL "$HPID" 2>/dev/null
	wait "$HPID" 2>/dev/null
	HPID=
}

# Ends the holder by closing its input (it exits 0 at EOF), else kills it.
holder_stop() {
	[ -n "$HPID" ] || return 0
	local fd=${HOLDER_CO[1]:-}
	[ -z "$fd" ] || exec {fd}>&-
	local i
	for i in $(seq 50); do
		kill -0 "$HPID" 2>/dev/null || break
		zn_nap 0.1
	done
	holder_kill
}

# counter NAME: NIC 0's counter NAME (mr_in_use, pinned_pages, held_pages,
# flows_in_use) from the query ioctl.
counter() { "$HOLDER" query | sed -n "s/.*\\<$1=\\([0-9]*\\).*/\\1/p"; }

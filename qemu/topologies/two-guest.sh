# Topology "two-guest": two guests, each owning one port of one emulated
# ZeroNIC (guest a's port 0 cabled to guest b's port 0).
#   qemu/run --topology two-guest [--wire SPEC] [--peer-cmd 'CMD'] -- CMD
# CMD runs in guest a. The second guest, b, boots alongside with the same
# kernel and module and runs --peer-cmd (in qemu/run's working directory;
# default: idle) until it ends or a is done: then b's command is stopped
# (SIGTERM to its process group) and b finishes like a (kmemleak scan,
# kernel log). Its output and logs are in LOG_DIR/peer/, and its kernel log
# and scan are checked like a's; b crashing, its QEMU dying or its command
# failing on its own fails the run. In both guests ZN_GUEST is the guest's
# name (a or b).
. "$ZN_ROOT/qemu/topologies/nic-common.sh"

PEER_CMD="sleep infinity"
PEER_PID=

topo_parse_extra() {
	case "$1" in
	--peer-cmd) PEER_CMD=${2:?--peer-cmd needs a command}; shift 2 ;;
	--peer-cmd=*) PEER_CMD=${1#*=}; shift ;;
	*) die "topology two-guest: unknown option $1" ;;
	esac
	[ $# = 0 ] || topo_parse_args "$@"
}

topo_start() {
	nic_start two-guest a b
	read -ra opts <<<"$(nic_qemu_opts a)"
	QEMU_OPTS+=("${opts[@]}")

	local peer=$log_dir/peer opts_b cmd
	mkdir -p "$peer"
	opts_b=$(nic_qemu_opts b)
	# ZN_GUEST and ZN_TOPOLOGY before run-cmd: the guest setup needs them too.
	printf -v cmd '%q ' env ZN_TOPOLOGY="$topology" ZN_GUEST=b ZN_STOP_FILE="$peer/stop" \
		"$ZN_ROOT/qemu/guest/run-cmd" "$peer" "$kdir" "$load_module" "$ko" \
		"$TOPO_GUEST_SETUP" "$PWD" bash -c "$PEER_CMD"
	guest_vng_args "$peer" 1 "$opts_b" "$cmd"
	# Its own session, so topo_stop can end the whole vng/QEMU tree
	# (idle_prefix: qemu/run --background's low priority, for the session).
	setsid "${idle_prefix[@]}" vng "${vng_args[@]}" </dev/null >"$peer/output.log" 2>&1 &
	PEER_PID=$!
	disown "$PEER_PID"
	info "peer guest b booting (pid $PEER_PID, output: $peer/output.log)"
}

# Asks b to finish (run-cmd watches for peer/stop), gives it a minute for
# its kmemleak scan and kernel log, then ends its QEMU.
topo_stop() {
	if [ -n "$PEER_PID" ]; then
		local peer=$log_dir/peer i died
		: >"$peer/stop"
		for i in $(seq 120); do
			[ ! -f "$peer/rc" ] && kill -0 "$PEER_PID" 2>/dev/null || break
			sleep 0.5
		done
		kill -- -"$PEER_PID" 2>/dev/null || true
		PEER_PID=
		if died=$(qemu_died "$peer/output.log"); then
			info "the peer guest's QEMU died: $died (logs: $peer)"
			TOPO_FAILED=1
		elif [ ! -f "$peer/rc" ]; then
			info "the peer guest did not finish its command (crash or hang; logs: $peer)"
			tail -n 20 "$peer/console.log" >&2 2>/dev/null
			TOPO_FAILED=1
		elif [ "$(cat "$peer/rc")" != 0 ]; then
			info "the peer guest's command failed with status $(cat "$peer/rc") (output: $peer/output.log)"
			tail -n 20 "$peer/output.log" >&2
			TOPO_FAILED=1
		fi
	fi
	nic_stop
}
TOPO_GUEST_SETUP=$ZN_ROOT/qemu/guest/nic-setup

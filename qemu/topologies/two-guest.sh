# Topology "two-guest": two guests, each owning one port of one emulated
# ZeroNIC (guest a's port 0 cabled to guest b's port 0).
#   qemu/run --topology two-guest [--wire SPEC] [--peer-cmd 'CMD'] -- CMD
# CMD runs in guest a. The second guest, b, boots alongside with the same
# kernel and module and runs --peer-cmd (default: idle until a is done);
# its output and logs are in LOG_DIR/peer/, and its kernel log is checked
# like a's. In both guests ZN_GUEST is the guest's name (a or b).
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
	printf -v cmd '%q ' env ZN_TOPOLOGY="$topology" ZN_GUEST=b \
		"$ZN_ROOT/qemu/guest/run-cmd" "$peer" "$kdir" "$load_module" "$ko" \
		"$TOPO_GUEST_SETUP" / bash -c "$PEER_CMD"
	guest_vng_args "$peer" 1 "$opts_b" "$cmd"
	# Its own session, so topo_stop can end the whole vng/QEMU tree.
	setsid vng "${vng_args[@]}" </dev/null >"$peer/output.log" 2>&1 &
	PEER_PID=$!
	disown "$PEER_PID"
	info "peer guest b booting (pid $PEER_PID, output: $peer/output.log)"
}

topo_stop() {
	if [ -n "$PEER_PID" ]; then
		kill -- -"$PEER_PID" 2>/dev/null || true
		PEER_PID=
	fi
	nic_stop
}
TOPO_GUEST_SETUP=$ZN_ROOT/qemu/guest/nic-setup

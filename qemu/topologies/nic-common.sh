# Shared by the topologies with an emulated ZeroNIC (two-port, two-guest).
# Sourced by qemu/run after it has set log_dir, memory and ZN_ROOT.
#
# Host side: one zeronic-nic process per run, its sockets in a short private
# directory (unix socket paths are limited to 108 bytes), guest RAM files in
# /dev/shm (the model's DMA window: guest-physical address = file offset).
# Guest side: the NIC is an ivshmem-doorbell PCI function (1af4:1110); the
# guest's own control socket of the model is a virtio-serial port named
# "zeronic.ctl", so a test in the guest changes wire impairments while it
# runs (qemu/guest/zn-wire). That socket only reaches the guest's own device
# and the wire directions leaving its ports; the host-side ctl.sock reaches
# everything.

ZN_NIC_BIN=$ZN_ROOT/target/release/zeronic-nic
# MSI-X vectors of the NIC (QEMU's and the model's, which must agree): 8
# give each of two ports 2 queue pairs (docs/hardware.md: n per port need
# 1 + ports x (n + 1)); ZN_NIC_VECTORS=12 gives them 4.
ZN_NIC_VECTORS=${ZN_NIC_VECTORS:-8}
NIC_WIRE=
NIC_PID=
NIC_DIR=

topo_parse_args() {
	while [ $# -gt 0 ]; do
		case "$1" in
		--wire) NIC_WIRE=${2:?--wire needs a spec}; shift 2 ;;
		--wire=*) NIC_WIRE=${1#*=}; shift ;;
		*) topo_parse_extra "$@"; return ;;
		esac
	done
}

# nic_start TOPOLOGY GUEST...: starts the model serving the named guests.
nic_start() {
	local topology=$1 g args=()
	shift
	[ -x "$ZN_NIC_BIN" ] || die "$ZN_NIC_BIN is not built; run 'make userspace'"
	NIC_DIR=$(mktemp -d /tmp/zn-XXXXXX)
	for g in "$@"; do
		args+=(--guest "$g=/dev/shm/$(basename "$NIC_DIR")-$g.ram,socket=$NIC_DIR/$g.sock,ctl=$NIC_DIR/$g.ctl")
	done
	[ -z "$NIC_WIRE" ] || args+=(--wire "$NIC_WIRE")
	"$ZN_NIC_BIN" run --topology "$topology" "${args[@]}" \
		--sock-dir "$NIC_DIR" --ctl "$NIC_DIR/ctl.sock" --vectors "$ZN_NIC_VECTORS" \
		2>"$log_dir/nic.log" &
	NIC_PID=$!
	# Not a job of qemu/run: its `wait` for output pipes must not wait for it.
	disown "$NIC_PID"
	local i
	for i in $(seq 100); do
		[ -S "$NIC_DIR/ctl.sock" ] && [ -S "$NIC_DIR/${1}.sock" ] && [ -S "$NIC_DIR/${1}.ctl" ] && break
		kill -0 "$NIC_PID" 2>/dev/null || break
		sleep 0.1
	done
	if ! [ -S "$NIC_DIR/ctl.sock" ]; then
		tail -n 20 "$log_dir/nic.log" >&2
		die "the NIC model did not start (log: $log_dir/nic.log)"
	fi
	info "NIC model up (pid $NIC_PID, ${NIC_WIRE:+wire $NIC_WIRE, }control: $ZN_NIC_BIN ctl --socket $NIC_DIR/ctl.sock stats)"
}

# nic_qemu_opts GUEST: QEMU options attaching that guest to the model.
nic_qemu_opts() {
	local g=$1
	printf '%s ' \
		-object "memory-backend-file,id=znmem,size=$memory,mem-path=/dev/shm/$(basename "$NIC_DIR")-$g.ram,share=on" \
		-machine memory-backend=znmem \
		-chardev "socket,path=$NIC_DIR/$g.sock,id=zn" \
		-device "ivshmem-doorbell,chardev=zn,vectors=$ZN_NIC_VECTORS" \
		-chardev "socket,path=$NIC_DIR/$g.ctl,id=znctl,reconnect-ms=1000" \
		-device virtio-serial-pci,id=znser \
		-device "virtserialport,bus=znser.0,chardev=znctl,name=zeronic.ctl"
}

nic_stop() {
	if [ -n "$NIC_PID" ]; then
		if ! kill -0 "$NIC_PID" 2>/dev/null; then
			info "the NIC model died during the run (log: $log_dir/nic.log)"
			NIC_DIED=1
		fi
		kill "$NIC_PID" 2>/dev/null || true
		local i
		for i in $(seq 50); do
			kill -0 "$NIC_PID" 2>/dev/null || break
			sleep 0.1
		done
		NIC_PID=
	fi
	if [ -n "$NIC_DIR" ]; then
		rm -f /dev/shm/"$(basename "$NIC_DIR")"-*.ram
		rm -rf "$NIC_DIR"
		NIC_DIR=
	fi
}

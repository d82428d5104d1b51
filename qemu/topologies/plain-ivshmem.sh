# Topology "plain-ivshmem": one guest with two plain ivshmem devices that
# share the ZeroNIC's PCI id (1af4:1110) but are not NICs: a 1 MiB one whose
# BAR2 holds no ZeroNIC magic, and a 4 KiB one smaller than the register
# file. The driver must refuse both with a log line.
PLAIN_MEM=

topo_parse_args() { die "topology plain-ivshmem takes no options (got: $*)"; }
topo_start() {
	PLAIN_MEM=$(mktemp -u /dev/shm/zn-plain-XXXXXX)
	QEMU_OPTS+=(
		-object "memory-backend-file,id=plainbig,size=1M,mem-path=$PLAIN_MEM-big,share=on"
		-device ivshmem-plain,memdev=plainbig
		-object "memory-backend-file,id=plainsmall,size=4K,mem-path=$PLAIN_MEM-small,share=on"
		-device ivshmem-plain,memdev=plainsmall
	)
}
topo_stop() {
	if [ -n "$PLAIN_MEM" ]; then
		rm -f "$PLAIN_MEM-big" "$PLAIN_MEM-small"
		PLAIN_MEM=
	fi
}

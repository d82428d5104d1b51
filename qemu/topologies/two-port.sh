# Topology "two-port": one guest owning both ports of one emulated ZeroNIC,
# the ports cabled to each other through the model's wire.
#   qemu/run --topology two-port [--wire loss=1,reorder=2,dup=1,delay=100us] -- CMD
# In the guest, CMD sees ZN_PCI (sysfs path of the NIC) and ZN_WIRE_CTL
# (the control port; `qemu/guest/zn-wire loss=5` changes the wire).
. "$ZN_ROOT/qemu/topologies/nic-common.sh"

topo_parse_extra() { die "topology two-port: unknown option $1"; }
topo_start() {
	nic_start two-port a
	read -ra opts <<<"$(nic_qemu_opts a)"
	QEMU_OPTS+=("${opts[@]}")
}
topo_stop() { nic_stop; }
TOPO_GUEST_SETUP=$ZN_ROOT/qemu/guest/nic-setup

# Topology "single" (the default): one guest, no emulated NIC.
#
# A topology file is sourced by qemu/run and may define:
#   topo_parse_args ARGS...  options of qemu/run it does not know itself
#   topo_start               host side, before boot; may append QEMU_OPTS
#   topo_stop                host side, after the guest is gone (always runs)
#   TOPO_GUEST_SETUP         a script sourced in the guest before the command
#                            (network namespaces, addresses, environment)
topo_parse_args() { die "topology single takes no options (got: $*)"; }

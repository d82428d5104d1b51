//! BAR2 register map, device identity and capacities of the ZeroNIC.
//!
//! All registers are little-endian. 32-bit registers are accessed with 32-bit
//! loads/stores, 64-bit registers (`*_BASE`, statistics) with 64-bit ones.
//! Offsets are from the start of BAR2 unless the name says otherwise.

// ---- PCI identity (the ivshmem-doorbell function QEMU exposes) ----
/// PCI vendor id of QEMU's ivshmem (Red Hat / virtio range).
pub const PCI_VENDOR_ID: u16 = 0x1af4;
/// PCI device id of ivshmem; the ZeroNIC is recognised by `REG_MAGIC` in BAR2.
pub const PCI_DEVICE_ID: u16 = 0x1110;

// ---- BAR0: ivshmem's own registers (owned by QEMU, not by the model) ----
/// BAR0: interrupt mask (unused by ZeroNIC, MSI-X is used).
pub const BAR0_INTRMASK: usize = 0x00;
/// BAR0: interrupt status (unused by ZeroNIC, MSI-X is used).
pub const BAR0_INTRSTATUS: usize = 0x04;
/// BAR0: read-only, this guest's ivshmem peer id.
pub const BAR0_IVPOSITION: usize = 0x08;
/// BAR0: write `(peer << 16) | vector` to ring peer `peer`'s eventfd `vector`.
pub const BAR0_DOORBELL: usize = 0x0c;
/// The model is always ivshmem peer 0.
pub const NIC_PEER_ID: u16 = 0;

/// Doorbell vector: command queue producer index advanced.
pub const DB_CMD: u16 = 0;
/// Doorbell vector: a TX queue producer index advanced.
pub const DB_TX: u16 = 1;
/// Doorbell vector: an RX buffer queue producer index advanced.
pub const DB_RX: u16 = 2;
/// Doorbell vector: a completion consumer index advanced or a vector unmasked.
pub const DB_REARM: u16 = 3;
/// Number of doorbell vectors the model listens on.
pub const NUM_DOORBELLS: u32 = 4;

/// The value of a doorbell write for doorbell class `db`.
pub const fn doorbell_value(db: u16) -> u32 {
    ((NIC_PEER_ID as u32) << 16) | db as u32
}

// ---- identity ----
/// `REG_MAGIC` value: the bytes "ZNIC" in memory order.
pub const ZN_MAGIC: u32 = 0x4349_4e5a;
/// Major version; a driver refuses a different major.
pub const ZN_VERSION_MAJOR: u32 = 2;
/// Minor version; additions only.
pub const ZN_VERSION_MINOR: u32 = 5;
/// `REG_VERSION` value: `major << 16 | minor`.
pub const ZN_VERSION: u32 = (ZN_VERSION_MAJOR << 16) | ZN_VERSION_MINOR;
/// Size of BAR2 (the ivshmem shared-memory object), bytes.
pub const BAR2_SIZE: usize = 0x1_0000;

// ---- capability bits in REG_CAPS ----
/// RX Split Unit: header/payload split and placement for installed flows.
pub const CAP_RX_SPLIT: u32 = 1 << 0;
/// TX Merge Unit: header from the host + payload DMA-read from an MR.
pub const CAP_TX_MERGE: u32 = 1 << 1;
/// TCP segmentation of merge sends (`TXF_TSO`).
pub const CAP_TSO: u32 = 1 << 2;
/// CHECKSUM_PARTIAL-style checksum insertion on plain TX (`TXF_CSUM_PARTIAL`).
pub const CAP_TX_CSUM: u32 = 1 << 3;
/// RX TCP checksum verification (`RXF_CSUM_OK`).
pub const CAP_RX_CSUM: u32 = 1 << 4;
/// Coalescing of contiguous placements into one header-queue entry.
pub const CAP_RX_COALESCE: u32 = 1 << 5;
/// Ring-buffer RX placement target (`FLOW_RX_RING`).
pub const CAP_RX_RING: u32 = 1 << 6;
/// TCP segmentation of plain frames (`TX_OP_PLAIN` with `TXF_TSO`, version 2.1).
pub const CAP_PLAIN_TSO: u32 = 1 << 7;
/// Several queue pairs per port, RSS, n-tuple rules and per-flow notify
/// queues (version 2.2).
pub const CAP_MULTI_QUEUE: u32 = 1 << 8;
/// IPv6: flows, placement, TX merge, TSO, checksum offload and RSS for
/// TCP/IPv6 as for TCP/IPv4 (version 2.3).
pub const CAP_IPV6: u32 = 1 << 9;
/// Steering version 2: n-tuple rules for IPv6, RSS hash fields per flow
/// type (`PORT_RSS_FIELDS`) and RSS contexts (version 2.4).
pub const CAP_STEER_V2: u32 = 1 << 10;
/// A flow's first receive window edge given with its install
/// (`FLOWI_EDGE`, version 2.5).
pub const CAP_INSTALL_EDGE: u32 = 1 << 11;
/// All capabilities of this version.
pub const ZN_CAPS: u32 = CAP_RX_SPLIT
    | CAP_TX_MERGE
    | CAP_TSO
    | CAP_TX_CSUM
    | CAP_RX_CSUM
    | CAP_RX_COALESCE
    | CAP_RX_RING
    | CAP_PLAIN_TSO
    | CAP_MULTI_QUEUE
    | CAP_IPV6
    | CAP_STEER_V2
    | CAP_INSTALL_EDGE;

// ---- capacities (also readable from BAR2) ----
/// Ports per guest in the largest topology.
pub const MAX_PORTS: u32 = 2;
/// Largest MTU (IP packet bytes) a port accepts; frames add 14 bytes (18 tagged).
pub const MAX_MTU: u32 = 65_280;
/// Ethernet II header length.
pub const ETH_HLEN: u32 = 14;
/// Length of one 802.1Q tag (TPID 0x8100 + TCI) after the source MAC.
pub const VLAN_HLEN: u32 = 4;
/// EtherType (TPID) of an 802.1Q-tagged frame; such a frame may carry
/// `VLAN_HLEN` bytes beyond MTU + ETH_HLEN.
pub const ETH_P_8021Q: u16 = 0x8100;
/// Largest frame on the wire: a tagged frame at `MAX_MTU` (no FCS on the emulated wire).
pub const MAX_FRAME: u32 = MAX_MTU + ETH_HLEN + VLAN_HLEN;
/// Largest frame of a plain TSO send (`TX_OP_PLAIN` with `TXF_TSO`): one
/// IPv4/TCP packet of up to 64 KiB including its Ethernet header.
pub const MAX_TSO_FRAME: u32 = 65_536;
/// Default MTU after reset.
pub const DEFAULT_MTU: u32 = 9_000;
/// MR Table entries.
pub const MR_CAPACITY: u32 = 4_096;
/// Pages one region may span (4 GiB of 4 KiB pages).
pub const MR_MAX_PAGES: u32 = 1 << 20;
/// Physically contiguous page runs (extents) the MR Table holds over all
/// regions together; a registration that would exceed it fails with
/// `ST_NO_SPACE`. A region of scattered (or repeated) pages needs one per page.
pub const MR_MAX_EXTENTS: u32 = 1 << 20;
/// Page size of MR page lists.
pub const MR_PAGE_SIZE: u64 = 4_096;
/// Flow Table entries.
pub const FLOW_CAPACITY: u32 = 1_024;
/// Receive memory segments postable per flow at once.
pub const MS_PER_FLOW: u32 = 256;
/// Disjoint out-of-order ranges a flow tracks above its cursor; a packet
/// that would need one more goes to the normal path (`PSTAT_RX_OOO_FULL`).
pub const FLOW_MAX_OOO: u32 = 32;
/// Largest ring (entries, a power of two).
pub const MAX_RING: u32 = 4_096;
/// MSI-X vectors the NIC raises for queue pair 0 of every port: 1 async + 2 per port.
pub const NUM_VECTORS: u32 = 1 + 2 * MAX_PORTS;
/// Vector slots in the vector-control table (16 before version 2.2).
pub const MAX_VECTORS: u32 = 32;
/// Queue pairs per port (version 2.2); queue pair 0 is the port's own
/// queues, 1.. have blocks at `qp_block`.
pub const MAX_QP: u32 = 8;
/// MSI-X vectors that give every queue pair of two ports its vector:
/// `1 + MAX_PORTS * (MAX_QP + 1)`.
pub const MQ_VECTORS: u32 = 1 + MAX_PORTS * (MAX_QP + 1);
/// Entries of a port's RSS indirection table.
pub const RSS_TABLE_SIZE: u32 = 128;
/// N-tuple steering rules per port.
pub const NTUPLE_RULES: u32 = 16;
/// RSS contexts (indirection tables) per port (version 2.4): context 0 is
/// `PORT_RSS_TABLE`, the others are written by `CMD_RSS_CTX_SET`.
pub const RSS_CONTEXTS: u32 = 8;
/// Default RX coalescing limit (payload bytes per header-queue entry):
/// 65535 - 20 (IPv4 header) - 60 (largest TCP header), so a coalesced entry's
/// rebuilt IPv4 total length fits 16 bits.
pub const DEFAULT_COALESCE_BYTES: u32 = 65_535 - 20 - 60;
/// Largest IPv4 total length: an entry's payload + its IPv4 and TCP header
/// lengths never exceed it, whatever `PORT_COALESCE_BYTES` says.
pub const IPV4_MAX_TOT_LEN: u32 = 65_535;

// ---- global registers ----
/// ro u32: `ZN_MAGIC`.
pub const REG_MAGIC: usize = 0x000;
/// ro u32: `ZN_VERSION`.
pub const REG_VERSION: usize = 0x004;
/// ro u32: capability bits `CAP_*`.
pub const REG_CAPS: usize = 0x008;
/// ro u32: ports of this guest (1 or 2).
pub const REG_NUM_PORTS: usize = 0x00c;
/// ro u32: `MAX_MTU`.
pub const REG_MAX_MTU: usize = 0x010;
/// ro u32: MSI-X vectors used (`NUM_VECTORS` for 2 ports; 1 + 2 * ports).
pub const REG_NUM_VECTORS: usize = 0x014;
/// ro u32: `MR_CAPACITY`.
pub const REG_MR_CAPACITY: usize = 0x018;
/// ro u32: `MR_MAX_PAGES`.
pub const REG_MR_MAX_PAGES: usize = 0x01c;
/// ro u32: `FLOW_CAPACITY`.
pub const REG_FLOW_CAPACITY: usize = 0x020;
/// ro u32: `MS_PER_FLOW`.
pub const REG_MS_PER_FLOW: usize = 0x024;
/// ro u32: `MAX_RING`.
pub const REG_MAX_RING: usize = 0x028;
/// ro u32: `BAR2_SIZE`.
pub const REG_BAR2_SIZE: usize = 0x02c;
/// ro u32: size of the guest RAM the model maps (MiB), 0 if not mapped yet.
pub const REG_DMA_WINDOW_MB: usize = 0x030;
/// ro u32: `MR_MAX_EXTENTS`.
pub const REG_MR_MAX_EXTENTS: usize = 0x034;
/// ro u32: queue pairs per port the device serves (1..=MAX_QP): as many as
/// the MSI-X vectors of the ivshmem device give a vector each.
pub const REG_MAX_QP: usize = 0x038;
/// ro u32: `NTUPLE_RULES`.
pub const REG_NTUPLE_RULES: usize = 0x03c;
/// rw u32: device control, `DEV_CTRL_*`.
pub const REG_DEV_CTRL: usize = 0x040;
/// ro u32: device status, `DEV_STATUS_*`.
pub const REG_DEV_STATUS: usize = 0x044;
/// ro u32: first fatal error code (`status::*`), 0 if none.
pub const REG_FATAL_CODE: usize = 0x048;
/// ro u32: fatal error detail (the queue id for queue errors).
pub const REG_FATAL_INFO: usize = 0x04c;
/// ro u32: incremented by the model on every scan (liveness).
pub const REG_HEARTBEAT: usize = 0x050;
/// rw u32: scratch, untouched by the model except at reset.
pub const REG_SCRATCH: usize = 0x054;
/// ro u32: `RSS_CONTEXTS` (version 2.4).
pub const REG_RSS_CONTEXTS: usize = 0x058;
/// ro u64 array: global statistics, index `GSTAT_*`.
pub const REG_GSTATS: usize = 0x080;
/// Global statistics slots.
pub const GSTAT_SLOTS: usize = 16;

/// REG_DEV_CTRL: write 1 to reset; the model clears it when reset is done.
pub const DEV_CTRL_RESET: u32 = 1 << 0;
/// REG_DEV_CTRL: data path enabled (queues are only served while set).
pub const DEV_CTRL_ENABLE: u32 = 1 << 1;
/// REG_DEV_STATUS: reset complete, registers valid.
pub const DEV_STATUS_READY: u32 = 1 << 0;
/// REG_DEV_STATUS: a fatal error happened; only a reset clears it.
pub const DEV_STATUS_FATAL: u32 = 1 << 1;
/// REG_DEV_STATUS: the guest RAM (DMA window) is mapped.
pub const DEV_STATUS_DMA_OK: u32 = 1 << 2;
/// REG_DEV_STATUS: the data path is running (mirrors DEV_CTRL_ENABLE).
pub const DEV_STATUS_ENABLED: u32 = 1 << 3;

/// Global stat: commands completed with `ST_OK`.
pub const GSTAT_CMD_OK: usize = 0;
/// Global stat: commands completed with an error status.
pub const GSTAT_CMD_ERR: usize = 1;
/// Global stat: DMA accesses refused (outside guest RAM).
pub const GSTAT_DMA_ERR: usize = 2;
/// Global stat: doorbells received.
pub const GSTAT_DOORBELLS: usize = 3;
/// Global stat: MSI-X interrupts raised.
pub const GSTAT_IRQS: usize = 4;
/// Global stat: queue configuration errors.
pub const GSTAT_QUEUE_ERR: usize = 5;
/// Global stat: events dropped because the event queue was full or off.
pub const GSTAT_EVQ_DROP: usize = 6;
/// Global stat: resets performed.
pub const GSTAT_RESETS: usize = 7;

// ---- queue register blocks ----
/// Global queue block: command queue (driver -> NIC).
pub const REG_CMDQ: usize = 0x100;
/// Global queue block: command completion queue (NIC -> driver).
pub const REG_CMDCQ: usize = 0x120;
/// Global queue block: event queue (NIC -> driver).
pub const REG_EVQ: usize = 0x140;
/// Size of one queue register block.
pub const QUEUE_BLOCK_SIZE: usize = 0x20;
/// Queue block: rw u64 guest-physical ring base (aligned to 64 bytes).
pub const Q_BASE: usize = 0x00;
/// Queue block: rw u32 entries, a power of two in 1..=MAX_RING.
pub const Q_SIZE: usize = 0x08;
/// Queue block: rw u32 control, `Q_CTRL_ENABLE`.
pub const Q_CTRL: usize = 0x0c;
/// Queue block: u32 producer index (free-running, written by the producer).
pub const Q_PROD: usize = 0x10;
/// Queue block: u32 consumer index (free-running, written by the consumer).
pub const Q_CONS: usize = 0x14;
/// Queue block: ro u32 status, `Q_STATUS_*`.
pub const Q_STATUS: usize = 0x18;
/// Queue block: ro u32 last error code of this queue (`status::*`).
pub const Q_ERROR: usize = 0x1c;
/// Q_CTRL: enable; base and size are latched on the 0 -> 1 edge.
pub const Q_CTRL_ENABLE: u32 = 1 << 0;
/// Q_STATUS: the model accepted the configuration and serves the queue.
pub const Q_STATUS_ENABLED: u32 = 1 << 0;
/// Q_STATUS: configuration refused or ring unreachable; see Q_ERROR.
pub const Q_STATUS_ERROR: u32 = 1 << 1;

// ---- interrupt vector control ----
/// Vector table: one block per MSI-X vector.
pub const REG_VECTORS: usize = 0x200;
/// Size of one vector block.
pub const VEC_BLOCK_SIZE: usize = 0x10;
/// Vector block: rw u32, nonzero = masked (the NIC holds the interrupt).
pub const VEC_MASK: usize = 0x0;
/// Vector block: rw u32 moderation delay in microseconds (0 = none).
pub const VEC_ITR_USECS: usize = 0x4;
/// Vector block: rw u32 moderation entry threshold (0 or 1 = every entry).
pub const VEC_ITR_ENTRIES: usize = 0x8;
/// Vector block: ro u32 interrupts raised on this vector.
pub const VEC_RAISED: usize = 0xc;
/// Vector: command completions and events.
pub const VEC_ASYNC: u32 = 0;

/// Vector of RX completions and header-queue entries of port `port`.
pub const fn vec_rx(port: u32) -> u32 {
    1 + 2 * port
}

/// Vector of TX completions of port `port`.
pub const fn vec_tx(port: u32) -> u32 {
    2 + 2 * port
}

/// Vector of RX completions and header-queue entries of queue pair `qp` of
/// port `port` on a device of `nports` ports: `vec_rx(port)` for queue
/// pair 0, else `1 + 2 * nports + (qp - 1) * nports + port` (one vector per
/// queue pair, shared with its TX completions).
pub const fn vec_qp_rx(nports: u32, port: u32, qp: u32) -> u32 {
    if qp == 0 {
        vec_rx(port)
    } else {
        (1 + 2 * nports + port).saturating_add((qp - 1).saturating_mul(nports))
    }
}

/// Vector of TX completions of queue pair `qp` of port `port`: `vec_tx(port)`
/// for queue pair 0, else the queue pair's one vector (`vec_qp_rx`).
pub const fn vec_qp_tx(nports: u32, port: u32, qp: u32) -> u32 {
    if qp == 0 {
        vec_tx(port)
    } else {
        vec_qp_rx(nports, port, qp)
    }
}

/// Offset of the block of vector `v`.
pub const fn vec_block(v: u32) -> usize {
    REG_VECTORS + v as usize * VEC_BLOCK_SIZE
}

// ---- ports ----
/// First port block.
pub const REG_PORTS: usize = 0x1000;
/// Size of one port block.
pub const PORT_STRIDE: usize = 0x800;
/// Port block: rw u32, `PORT_CTRL_ENABLE`.
pub const PORT_CTRL: usize = 0x000;
/// Port block: rw u32 MTU (IP bytes), 68..=MAX_MTU; latched on enable.
pub const PORT_MTU: usize = 0x004;
/// Port block: rw u32 MAC bytes 0..4 (byte 0 in bits 0..8).
pub const PORT_MAC_LO: usize = 0x008;
/// Port block: rw u32 MAC bytes 4..6 in bits 0..16.
pub const PORT_MAC_HI: usize = 0x00c;
/// Port block: rw u32 max payload bytes per coalesced header entry (0 = off;
/// never more than IPV4_MAX_TOT_LEN minus the packets' IPv4 and TCP headers).
pub const PORT_COALESCE_BYTES: usize = 0x010;
/// Port block: ro u32 link status, 1 = up (a peer port is wired).
pub const PORT_LINK: usize = 0x014;
/// Port block: rw u32 active queue pairs, 1..=REG_MAX_QP (0 reads back as 1,
/// more is clamped; the model writes the value it uses back).
pub const PORT_NUM_QP: usize = 0x018;
/// Port block: rw u32 RSS control, `RSS_CTRL_*`.
pub const PORT_RSS_CTRL: usize = 0x01c;
/// Port block: rw u32 RSS hash fields per flow type (version 2.4): four
/// bits `RSS_FIELD_*` per flow type at `RSS_FIELDS_*_SHIFT`; reset value
/// `RSS_FIELDS_DEFAULT`.
pub const PORT_RSS_FIELDS: usize = 0x020;
/// Port block: queue pair 0's five queue blocks (`PORT_TXQ` = `PORT_QUEUES + QP_TXQ`, ...).
pub const PORT_QUEUES: usize = 0x100;
/// Port block: TX queue (driver -> NIC).
pub const PORT_TXQ: usize = 0x100;
/// Port block: TX completion queue (NIC -> driver).
pub const PORT_TXCQ: usize = 0x120;
/// Port block: RX buffer queue (driver -> NIC).
pub const PORT_RXQ: usize = 0x140;
/// Port block: RX completion queue (NIC -> driver).
pub const PORT_RXCQ: usize = 0x160;
/// Port block: header queue of offloaded flows (NIC -> driver).
pub const PORT_HDRQ: usize = 0x180;
/// Port block: rw RSS key, `RSS_KEY_LEN` bytes, key byte i at byte offset i
/// (accessed as 32-bit words).
pub const PORT_RSS_KEY: usize = 0x200;
/// Port block: rw RSS indirection table, `RSS_TABLE_SIZE` one-byte entries
/// (queue pair numbers), entry i at byte offset i (accessed as 32-bit words).
pub const PORT_RSS_TABLE: usize = 0x240;
/// Port block: ro u64 array of statistics, index `PSTAT_*`.
pub const PORT_STATS: usize = 0x400;
/// Port statistics slots.
pub const PSTAT_SLOTS: usize = 64;
/// PORT_CTRL: port enabled (MTU and MAC latched).
pub const PORT_CTRL_ENABLE: u32 = 1 << 0;
/// PORT_RSS_CTRL: steer normal-path frames by hash and indirection table.
pub const RSS_CTRL_ENABLE: u32 = 1 << 0;
/// PORT_RSS_CTRL: report the hash in RX completions (`rss_hash`, `rss_type`).
pub const RSS_CTRL_HASH: u32 = 1 << 1;
/// PORT_RSS_FIELDS: shift of the fields of unfragmented IPv4/TCP.
pub const RSS_FIELDS_TCP4_SHIFT: u32 = 0;
/// PORT_RSS_FIELDS: shift of the fields of unfragmented IPv4/UDP.
pub const RSS_FIELDS_UDP4_SHIFT: u32 = 4;
/// PORT_RSS_FIELDS: shift of the fields of IPv6/TCP (next header TCP).
pub const RSS_FIELDS_TCP6_SHIFT: u32 = 8;
/// PORT_RSS_FIELDS: shift of the fields of IPv6/UDP (next header UDP).
pub const RSS_FIELDS_UDP6_SHIFT: u32 = 12;
/// PORT_RSS_FIELDS after reset: 2.3's hash, TCP over the 4-tuple (0xf),
/// UDP over the addresses (0x3).
pub const RSS_FIELDS_DEFAULT: u32 = 0x3f3f;

/// Offset of port `port`'s block.
pub const fn port_block(port: u32) -> usize {
    REG_PORTS + port as usize * PORT_STRIDE
}

// ---- queue pairs (version 2.2) ----
/// First queue-pair block: queue pair `qp` of port `port` at `qp_block(port, qp)`.
pub const REG_QPAIRS: usize = 0x2000;
/// Distance between two ports' queue-pair blocks.
pub const QP_PORT_STRIDE: usize = 0x1000;
/// Size of one queue-pair block.
pub const QP_STRIDE: usize = 0x200;
/// Queue-pair block (qp >= 1): TX queue (driver -> NIC).
pub const QP_TXQ: usize = 0x000;
/// Queue-pair block (qp >= 1): TX completion queue (NIC -> driver).
pub const QP_TXCQ: usize = 0x020;
/// Queue-pair block (qp >= 1): RX buffer queue (driver -> NIC).
pub const QP_RXQ: usize = 0x040;
/// Queue-pair block (qp >= 1): RX completion queue (NIC -> driver).
pub const QP_RXCQ: usize = 0x060;
/// Queue-pair block (qp >= 1): header queue of offloaded flows (NIC -> driver).
pub const QP_HDRQ: usize = 0x080;
/// Queue-pair block (every qp, 0 included): ro u64 array of statistics, index `QSTAT_*`.
pub const QP_STATS: usize = 0x100;
/// Queue-pair statistics slots.
pub const QSTAT_SLOTS: usize = 16;

/// Offset of the block of queue pair `qp` of port `port`.
pub const fn qp_block(port: u32, qp: u32) -> usize {
    REG_QPAIRS + port as usize * QP_PORT_STRIDE + qp as usize * QP_STRIDE
}

/// Where queue pair `qp` of port `port` has its five queue blocks: the
/// TX queue's at the returned offset + `QP_TXQ`, and so on to `QP_HDRQ`.
/// Queue pair 0's are the port block's (`PORT_QUEUES`), the others' their
/// queue-pair block's.
pub const fn qp_queues(port: u32, qp: u32) -> usize {
    if qp == 0 {
        port_block(port) + PORT_QUEUES
    } else {
        qp_block(port, qp)
    }
}

const _: () = assert!(PORT_TXQ == PORT_QUEUES + QP_TXQ);
const _: () = assert!(PORT_TXCQ == PORT_QUEUES + QP_TXCQ);
const _: () = assert!(PORT_RXQ == PORT_QUEUES + QP_RXQ);
const _: () = assert!(PORT_RXCQ == PORT_QUEUES + QP_RXCQ);
const _: () = assert!(PORT_HDRQ == PORT_QUEUES + QP_HDRQ);
const _: () = assert!(port_block(MAX_PORTS) <= REG_QPAIRS);
const _: () = assert!(qp_block(MAX_PORTS, 0) <= BAR2_SIZE);
const _: () = assert!(vec_block(MAX_VECTORS) <= REG_PORTS);
const _: () = assert!(MQ_VECTORS <= MAX_VECTORS);
const _: () = assert!(PORT_RSS_TABLE + RSS_TABLE_SIZE as usize <= PORT_STATS);

// ---- per-queue-pair statistics (u64 slots at qp_block + QP_STATS + 8 * index) ----
/// Frames written into this queue pair's RX buffers (completions with ST_OK).
pub const QSTAT_RX_PACKETS: usize = 0;
/// Bytes of those frames.
pub const QSTAT_RX_BYTES: usize = 1;
/// Packets of offloaded flows reported in this queue pair's header queue.
pub const QSTAT_RX_HDR_PACKETS: usize = 2;
/// Frames steered to this queue pair and dropped: no RX buffer, RX
/// completion queue full, or header queue full.
pub const QSTAT_RX_DROPS: usize = 3;
/// Frames put on the wire from this queue pair's TX descriptors.
pub const QSTAT_TX_PACKETS: usize = 4;
/// Bytes of those frames.
pub const QSTAT_TX_BYTES: usize = 5;
/// TSO sends (`TXF_TSO` descriptors) of this queue pair whose frames were built.
pub const QSTAT_TX_LSO_PACKETS: usize = 6;
/// Bytes of the frames those TSO sends put on the wire.
pub const QSTAT_TX_LSO_BYTES: usize = 7;

// ---- per-port statistics (u64 slots at PORT_STATS + 8 * index) ----
/// Frames put on the wire.
pub const PSTAT_TX_FRAMES: usize = 0;
/// Bytes put on the wire (frames).
pub const PSTAT_TX_BYTES: usize = 1;
/// TX descriptors completed with an error status.
pub const PSTAT_TX_ERRORS: usize = 2;
/// Payload bytes DMA-read by the TX Merge Unit.
pub const PSTAT_TX_MERGE_BYTES: usize = 3;
/// Frames received from the wire.
pub const PSTAT_RX_FRAMES: usize = 4;
/// Bytes received from the wire.
pub const PSTAT_RX_BYTES: usize = 5;
/// Frames delivered whole to the normal RX queue.
pub const PSTAT_RX_NORMAL: usize = 6;
/// Frames of an offloaded flow split and placed.
pub const PSTAT_RX_SPLIT: usize = 7;
/// Payload bytes written by placement.
pub const PSTAT_RX_PLACED_BYTES: usize = 8;
/// Payload bytes of frames over placed bytes, not written (duplicates).
pub const PSTAT_RX_DUP_BYTES: usize = 9;
/// Offloaded-flow frames sent to the normal queue for lack of posted space.
pub const PSTAT_RX_FALLBACK: usize = 10;
/// Frames dropped: TCP checksum of an offloaded flow wrong.
pub const PSTAT_RX_CSUM_ERR: usize = 11;
/// Frames dropped: no RX buffer posted (or RX completion queue full).
pub const PSTAT_RX_NO_BUF: usize = 12;
/// Frames dropped: header queue full (placement not done).
pub const PSTAT_RX_HDRQ_FULL: usize = 13;
/// Frames dropped: malformed (runt, bad lengths) or too big for the MTU.
pub const PSTAT_RX_MALFORMED: usize = 14;
/// RX buffers too small for the frame (completed with ST_TOO_BIG).
pub const PSTAT_RX_BUF_SMALL: usize = 15;
/// Header-queue entries written.
pub const PSTAT_HDRQ_ENTRIES: usize = 16;
/// Packets merged into an existing header-queue entry (coalescing).
pub const PSTAT_RX_COALESCED: usize = 17;
/// Placements refused: MR key invalid/revoked or DMA outside guest RAM.
pub const PSTAT_RX_PLACE_ERR: usize = 18;
/// TX descriptors refused: bad opcode/flags/lengths.
pub const PSTAT_TX_BAD_DESC: usize = 19;
/// TX descriptors refused: DMA address outside guest RAM.
pub const PSTAT_TX_DMA_ERR: usize = 20;
/// TX descriptors refused: MR key invalid/revoked, rights or bounds.
pub const PSTAT_TX_KEY_ERR: usize = 21;
/// TX frames dropped: port disabled or no link.
pub const PSTAT_TX_NO_LINK: usize = 22;
/// Frames generated by TSO (beyond the first of each send).
pub const PSTAT_TX_TSO_FRAMES: usize = 23;
/// Frames over placed bytes, sent whole to the normal queue (duplicates).
pub const PSTAT_RX_DUP_FRAMES: usize = 24;
/// Frames placed above the cursor (out of order).
pub const PSTAT_RX_OOO_FRAMES: usize = 25;
/// Offloaded-flow frames not placed: they would have needed more than
/// FLOW_MAX_OOO out-of-order ranges (delivered by the normal path).
pub const PSTAT_RX_OOO_FULL: usize = 26;
/// Offloaded-flow frames not placed: TCP would refuse their payload (past
/// the receive window the host advertised, or without ACK, or with SYN or
/// RST) (delivered by the normal path).
pub const PSTAT_RX_UNACCEPTABLE: usize = 27;
/// Frames dropped by an n-tuple rule (`RULE_ACT_DROP`).
pub const PSTAT_RX_RULE_DROP: usize = 28;
/// Frames that a rule, the indirection table or a flow's notify queue sent
/// to a queue pair at or past `PORT_NUM_QP`, delivered to queue pair 0.
pub const PSTAT_RX_BAD_QUEUE: usize = 29;
/// IPv6 frames with an extension header (or a next header the NIC does not
/// parse past) before TCP: delivered on the normal path (version 2.3).
pub const PSTAT_RX_V6_EXTHDR: usize = 30;

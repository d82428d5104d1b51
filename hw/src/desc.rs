//! Ring entry formats: TX, TX completion, RX buffer, RX completion, header
//! queue and event entries. All fields little-endian, no implicit padding;
//! `encode`/`decode` give the exact byte image.

/// TX opcode: send the frame at `buf_addr` as is.
pub const TX_OP_PLAIN: u16 = 1;
/// TX opcode: header at `buf_addr` + payload from MR (`mr_key`, `mr_offset`, `pay_len`).
pub const TX_OP_MERGE: u16 = 2;

/// TX flag (plain): insert the 16-bit ones'-complement sum of
/// `frame[csum_start..]` at `csum_start + csum_offset` (CHECKSUM_PARTIAL:
/// the driver pre-seeds the field with the pseudo-header sum).
pub const TXF_CSUM_PARTIAL: u16 = 1 << 0;
/// TX flag (merge, and plain with `CAP_PLAIN_TSO`): segment the payload into `mss`-byte TCP segments.
pub const TXF_TSO: u16 = 1 << 1;
/// All TX flags defined.
pub const TXF_ALL: u16 = TXF_CSUM_PARTIAL | TXF_TSO;

le_struct! {
    /// TX queue entry (driver -> NIC), 64 bytes.
    pub struct TxDesc(64) {
        /// `TX_OP_*`.
        pub opcode: u16,
        /// `TXF_*`.
        pub flags: u16,
        /// Plain: frame length. Merge: header length (Ethernet+IPv4+TCP).
        pub buf_len: u32,
        /// Guest-physical address of the frame (plain) or header (merge).
        pub buf_addr: u64,
        /// Plain + TXF_CSUM_PARTIAL: checksum start offset in the frame.
        pub csum_start: u16,
        /// Plain + TXF_CSUM_PARTIAL: checksum field offset from csum_start.
        pub csum_offset: u16,
        /// TXF_TSO: TCP payload bytes per segment (0 = from MTU).
        pub mss: u16,
        /// Reserved, 0.
        pub rsvd0: u16,
        /// Merge: MR key of the payload (needs MR_ACCESS_LOCAL_READ).
        pub mr_key: u64,
        /// Merge: payload offset inside the MR.
        pub mr_offset: u64,
        /// Opaque, echoed in the completion.
        pub cookie: u64,
        /// Merge: payload length in bytes (0 allowed: header only).
        pub pay_len: u32,
        /// Reserved, 0.
        pub rsvd1: u32,
        /// Reserved, 0.
        pub rsvd2: u64,
    }
}

le_struct! {
    /// TX completion entry (NIC -> driver), 16 bytes. One per TX descriptor,
    /// in descriptor order.
    pub struct TxCompletion(16) {
        /// `cookie` of the descriptor.
        pub cookie: u64,
        /// Free-running TX queue index of the descriptor.
        pub index: u32,
        /// `status::ST_*`.
        pub status: u16,
        /// Frames put on the wire (TSO: segments), 0 on error.
        pub frames: u16,
    }
}

le_struct! {
    /// RX buffer queue entry (driver -> NIC), 16 bytes.
    pub struct RxBufDesc(16) {
        /// Guest-physical buffer address.
        pub addr: u64,
        /// Buffer length; a frame longer than this completes with ST_TOO_BIG.
        pub len: u32,
        /// Reserved, 0.
        pub rsvd0: u32,
    }
}

/// RX flag: the frame is IPv4/TCP or (version 2.3) IPv6/TCP without
/// extension headers.
pub const RXF_TCP: u16 = 1 << 0;
/// RX flag: the TCP checksum was verified good (CHECKSUM_UNNECESSARY).
pub const RXF_CSUM_OK: u16 = 1 << 1;
/// RX flag: the frame belongs to an installed flow (fallback delivery).
pub const RXF_FLOW: u16 = 1 << 2;
/// RX flag: the TCP checksum was verified bad (non-flow frames only).
pub const RXF_CSUM_BAD: u16 = 1 << 3;

le_struct! {
    /// RX completion entry (NIC -> driver), 32 bytes. RX buffers are consumed
    /// in queue order; each completion names the buffer it used.
    pub struct RxCompletion(32) {
        /// Free-running RX buffer queue index of the buffer used.
        pub index: u32,
        /// Frame length written into the buffer.
        pub len: u32,
        /// `ST_OK` or `ST_TOO_BIG` (buffer too small; nothing written) or
        /// `ST_DMA` (buffer outside guest RAM; nothing written).
        pub status: u16,
        /// `RXF_*`.
        pub flags: u16,
        /// With RXF_FLOW: the flow index.
        pub flow: u32,
        /// With `RSS_CTRL_HASH`: the frame's RSS hash (0 for `RSS_TYPE_NONE`).
        pub rss_hash: u32,
        /// With `RSS_CTRL_HASH`: what `rss_hash` covers, `RSS_TYPE_*`.
        pub rss_type: u16,
        /// Reserved, 0.
        pub rsvd0: u16,
        /// Reserved, 0.
        pub rsvd1: u64,
    }
}

/// RSS hash type: no hash (neither IPv4 nor IPv6, 802.1Q-tagged, hash
/// reporting off, or (version 2.4) no field selected in `PORT_RSS_FIELDS`).
pub const RSS_TYPE_NONE: u16 = 0;
/// RSS hash type: IPv4/TCP 4-tuple (source and destination address, source
/// and destination port; since 2.4 the `PORT_RSS_FIELDS` selection, with a
/// port).
pub const RSS_TYPE_TCP4: u16 = 1;
/// RSS hash type: IPv4 addresses only (source, destination): IPv4 that is
/// not TCP, and every IPv4 fragment (since 2.4 also TCP/UDP whose
/// `PORT_RSS_FIELDS` selection has no port: those addresses).
pub const RSS_TYPE_IPV4: u16 = 2;
/// RSS hash type: IPv6/TCP 4-tuple (source and destination address, source
/// and destination port; version 2.3): IPv6 whose next header is TCP (since
/// 2.4 the `PORT_RSS_FIELDS` selection, with a port).
pub const RSS_TYPE_TCP6: u16 = 3;
/// RSS hash type: IPv6 addresses only (source, destination; version 2.3):
/// IPv6 that is not TCP, and every IPv6 packet with an extension header
/// (since 2.4 also TCP/UDP whose selection has no port: those addresses).
pub const RSS_TYPE_IPV6: u16 = 4;
/// RSS hash type (version 2.4): IPv4/UDP with a port among the hashed
/// fields (`PORT_RSS_FIELDS`).
pub const RSS_TYPE_UDP4: u16 = 5;
/// RSS hash type (version 2.4): IPv6/UDP with a port among the hashed
/// fields (`PORT_RSS_FIELDS`).
pub const RSS_TYPE_UDP6: u16 = 6;

/// Header queue slot size; the packet header bytes follow the metadata.
pub const HDRQ_ENTRY_SIZE: usize = 256;
/// Offset of the header bytes inside a header queue slot.
pub const HDRQ_HDR_OFFSET: usize = 64;
/// Largest header carried (Ethernet + IPv4 + TCP with options fit).
pub const HDRQ_HDR_MAX: usize = HDRQ_ENTRY_SIZE - HDRQ_HDR_OFFSET;

/// Header flag: the entry covers several packets (coalesced).
pub const HDRF_COALESCED: u16 = 1 << 0;
/// Header flag: placed above the cursor (out of order).
pub const HDRF_OOO: u16 = 1 << 1;
/// Header flag, never set: a frame over bytes already placed takes the
/// normal path instead (the driver refuses an entry carrying it).
pub const HDRF_DUP: u16 = 1 << 2;
/// Header flag: the packet carried no payload (pure ACK/FIN/RST...).
pub const HDRF_NO_PAYLOAD: u16 = 1 << 3;

le_struct! {
    /// Header queue metadata (first 64 bytes of a 256-byte slot). The header
    /// bytes (Ethernet + IPv4 + TCP of the last packet covered, IP total
    /// length as received) follow at `HDRQ_HDR_OFFSET`.
    pub struct HdrEntry(64) {
        /// `ST_OK`.
        pub status: u16,
        /// `HDRF_*`.
        pub flags: u16,
        /// Flow index.
        pub flow: u32,
        /// TCP sequence number of the first payload byte covered.
        pub seq: u32,
        /// Payload bytes covered, starting at `seq`.
        pub len: u32,
        /// Stream offset of `seq` (bytes since the flow's rx_isn).
        pub stream_off: u64,
        /// Stream offset up to which the payload is placed contiguously.
        pub cursor: u64,
        /// Payload bytes newly written by this entry.
        pub placed: u32,
        /// Packets covered (1 unless coalesced).
        pub nsegs: u16,
        /// Header bytes following the metadata.
        pub hdr_len: u16,
        /// Port the packets arrived on.
        pub port: u16,
        /// TCP flags of the last packet.
        pub tcp_flags: u16,
        /// Reserved, 0.
        pub rsvd0: u32,
        /// Reserved, 0.
        pub rsvd1: u64,
        /// Reserved, 0.
        pub rsvd2: u64,
    }
}

le_struct! {
    /// Event queue entry (NIC -> driver), 16 bytes.
    pub struct Event(16) {
        /// `status::EV_*`.
        pub code: u16,
        /// Port concerned (0 for global events).
        pub port: u16,
        /// Event-specific (queue id, fatal code, link state).
        pub info: u32,
        /// Event-specific detail (status code of a queue error).
        pub detail: u64,
    }
}

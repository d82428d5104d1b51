//! Command queue entries (64 bytes, driver -> NIC) and command completions
//! (16 bytes, NIC -> driver) for the MR Table, Flow Table and MS Lists.
//! Every command starts with `opcode: u16, flags: u16, cookie: u32`.
//!
//! MR keys are 64-bit: bits 0..16 are the MR Table slot, bits 16..64 a
//! 48-bit generation the NIC draws from a keyed permutation of its
//! registration counter, never 0, never repeated between two resets.

/// Command: no operation (completes with ST_OK).
pub const CMD_NOP: u16 = 1;
/// Command: register a memory region ([`CmdMrReg`]); result = MR key (u64).
pub const CMD_MR_REG: u16 = 2;
/// Command: invalidate a memory region ([`CmdMrInval`]).
pub const CMD_MR_INVAL: u16 = 3;
/// Command: install a flow ([`CmdFlow`]); result = flow index.
pub const CMD_FLOW_INSTALL: u16 = 4;
/// Command: update a flow ([`CmdFlow`], fields chosen by `flags`); result = cursor after it.
pub const CMD_FLOW_UPDATE: u16 = 5;
/// Command: remove a flow ([`CmdFlow`], only `flow` used).
pub const CMD_FLOW_REMOVE: u16 = 6;
/// Command: post a memory segment to a flow's MS List ([`CmdMsPost`]); result = its start stream offset.
pub const CMD_MS_POST: u16 = 7;
/// Command: write an n-tuple rule of a port ([`CmdRule`]); result = the rule's index.
pub const CMD_RULE_SET: u16 = 8;
/// Command: clear n-tuple rule `index` of a port ([`CmdRule`], `port` and `index` used).
pub const CMD_RULE_CLEAR: u16 = 9;
/// Command (version 2.4): write the indirection table of RSS context `ctx`
/// of a port from guest memory ([`CmdRssCtx`]).
pub const CMD_RSS_CTX_SET: u16 = 10;

/// MR right: the NIC may DMA-read the region (TX merge payload).
pub const MR_ACCESS_LOCAL_READ: u32 = 1 << 0;
/// MR right: the NIC may DMA-write the region (RX placement).
pub const MR_ACCESS_LOCAL_WRITE: u32 = 1 << 1;
/// All MR rights defined.
pub const MR_ACCESS_ALL: u32 = MR_ACCESS_LOCAL_READ | MR_ACCESS_LOCAL_WRITE;

/// Low bits of an MR key holding the MR Table slot; the 48 bits above are
/// the registration's generation.
pub const MR_KEY_SLOT_BITS: u32 = 16;

/// Stream offsets (cursor, ring window, end of a posted segment) stay below
/// 2^63: a command that would reach it fails with `ST_BAD_DESC`.
pub const STREAM_OFF_LIMIT: u64 = 1 << 63;

le_struct! {
    /// Generic view of a command: the common header.
    pub struct CmdHeader(8) {
        /// `CMD_*`.
        pub opcode: u16,
        /// Command-specific flags.
        pub flags: u16,
        /// Opaque, echoed in the completion.
        pub cookie: u32,
    }
}

le_struct! {
    /// CMD_MR_REG: register `length` bytes starting `first_off` bytes into
    /// the first page of a list of `npages` 4 KiB-aligned guest-physical page
    /// addresses (u64 LE each) stored contiguously at `page_list`. The list
    /// is copied by the NIC; it may be freed after the completion.
    pub struct CmdMrReg(64) {
        /// CMD_MR_REG.
        pub opcode: u16,
        /// 0.
        pub flags: u16,
        /// Echoed.
        pub cookie: u32,
        /// `MR_ACCESS_*` (nonzero).
        pub access: u32,
        /// Pages in the list, 1..=MR_MAX_PAGES, covering first_off + length.
        pub npages: u32,
        /// Offset of the region start in the first page (< 4096).
        pub first_off: u32,
        /// Reserved, 0.
        pub rsvd0: u32,
        /// Region length in bytes (nonzero).
        pub length: u64,
        /// Guest-physical address of the page list (8-byte aligned).
        pub page_list: u64,
        /// Reserved, 0.
        pub rsvd1: u64,
        /// Reserved, 0.
        pub rsvd2: u64,
        /// Reserved, 0.
        pub rsvd3: u64,
    }
}

le_struct! {
    /// CMD_MR_INVAL: revoke `key`. Completes only once no DMA to the region
    /// can happen any more; receive segments posted on it are dropped.
    pub struct CmdMrInval(64) {
        /// CMD_MR_INVAL.
        pub opcode: u16,
        /// 0.
        pub flags: u16,
        /// Echoed.
        pub cookie: u32,
        /// Key returned by CMD_MR_REG.
        pub key: u64,
        /// Reserved, 0.
        pub rsvd1: u64,
        /// Reserved, 0.
        pub rsvd2: u64,
        /// Reserved, 0.
        pub rsvd3: u64,
        /// Reserved, 0.
        pub rsvd4: u64,
        /// Reserved, 0.
        pub rsvd5: u64,
        /// Reserved, 0.
        pub rsvd6: u64,
    }
}

/// Flow RX target: the flow's receive MS List (segments posted in order).
pub const FLOW_RX_SEGMENTS: u16 = 1;
/// Flow RX target: a ring (`ring_key`, `ring_offset`, `ring_size`); stream
/// offset `o` lands at ring offset `o % ring_size`, window starts at `ring_head`.
pub const FLOW_RX_RING: u16 = 2;

/// CMD_FLOW_UPDATE flag: move the ring window head forward to `stream_off`
/// (at most the cursor): bytes before it were consumed and may be overwritten.
pub const FLOWU_RING_HEAD: u16 = 1 << 0;
/// CMD_FLOW_UPDATE flag: move the RX cursor forward to `stream_off` (bytes
/// the driver got by fallback and TCP accepted; they count as placed). Placed
/// out-of-order ranges contiguous with the new cursor are absorbed; the
/// completion's result is the cursor after the update.
pub const FLOWU_CURSOR: u16 = 1 << 1;
/// CMD_FLOW_UPDATE flag, alone: raise the receive window edge to
/// `stream_off` (a lower value leaves it): the NIC places no byte at or past
/// it. The driver gives the edge TCP advertised before the flow was
/// installed; later edges the NIC reads from the ACKs the host sends.
pub const FLOWU_EDGE: u16 = 1 << 2;
/// CMD_FLOW_UPDATE flag, alone: make `stream_off` (< `MAX_QP`) the flow's
/// notify queue pair. Entries before the change are published on the old
/// queue pair when the command completes.
pub const FLOWU_QUEUE: u16 = 1 << 3;
/// CMD_FLOW_INSTALL flag: the flow's notify queue pair is in the flags'
/// bits from `FLOW_QUEUE_SHIFT` on (< `MAX_QP`); without it, queue pair 0.
pub const FLOWI_QUEUE: u16 = 1 << 0;
/// Shift of the notify queue pair in a CMD_FLOW_INSTALL's flags.
pub const FLOW_QUEUE_SHIFT: u32 = 8;
/// CMD_FLOW_INSTALL flag (version 2.3): an IPv6 flow; `local_ip` and
/// `remote_ip` together hold `addr6`, the guest-physical address of its
/// [`FlowAddr6`] block (see [`CmdFlow::addr6`]).
pub const FLOWI_IPV6: u16 = 1 << 1;
/// CMD_FLOW_INSTALL flag (version 2.5, `CAP_INSTALL_EDGE`): `flow` is the
/// flow's receive window edge, a stream offset below 2^31: the install
/// does what a `FLOWU_EDGE` update right after it would.
pub const FLOWI_EDGE: u16 = 1 << 2;
/// Largest `rx_wscale` (RFC 7323).
pub const FLOW_MAX_WSCALE: u16 = 14;

/// IP protocol number of TCP, the only offloadable protocol.
pub const IPPROTO_TCP: u16 = 6;

le_struct! {
    /// CMD_FLOW_INSTALL / CMD_FLOW_UPDATE / CMD_FLOW_REMOVE. Addresses are
    /// IPv4 numeric values (10.0.0.1 = 0x0a000001), ports numeric; "local"
    /// is this port's side (the RX packet's destination).
    pub struct CmdFlow(64) {
        /// CMD_FLOW_*.
        pub opcode: u16,
        /// INSTALL: `FLOWI_QUEUE` with the notify queue pair at
        /// `FLOW_QUEUE_SHIFT` (other bits ignored). UPDATE: `FLOWU_*`.
        /// Otherwise 0.
        pub flags: u16,
        /// Echoed.
        pub cookie: u32,
        /// UPDATE/REMOVE: flow index. INSTALL: the receive window edge with
        /// `FLOWI_EDGE`, else ignored (the NIC allocates the index).
        pub flow: u32,
        /// INSTALL: port the flow lives on.
        pub port: u16,
        /// INSTALL: IPPROTO_TCP.
        pub proto: u16,
        /// INSTALL: local IPv4 address. With `FLOWI_IPV6`: bits 0..32 of
        /// `addr6`.
        pub local_ip: u32,
        /// INSTALL: remote IPv4 address. With `FLOWI_IPV6`: bits 32..64 of
        /// `addr6`.
        pub remote_ip: u32,
        /// INSTALL: local TCP port.
        pub local_port: u16,
        /// INSTALL: remote TCP port.
        pub remote_port: u16,
        /// INSTALL: sequence number of receive stream offset 0 (the peer's ISN + 1).
        pub rx_isn: u32,
        /// INSTALL with FLOW_RX_RING: MR key of the ring (LOCAL_WRITE).
        pub ring_key: u64,
        /// INSTALL with FLOW_RX_RING: ring start inside the MR.
        pub ring_offset: u64,
        /// INSTALL with FLOW_RX_RING: window head (= initial cursor).
        /// UPDATE: new ring head (FLOWU_RING_HEAD), cursor (FLOWU_CURSOR),
        /// receive window edge (FLOWU_EDGE) or notify queue pair (FLOWU_QUEUE).
        pub stream_off: u64,
        /// INSTALL with FLOW_RX_RING: ring bytes (nonzero).
        pub ring_size: u32,
        /// INSTALL: `FLOW_RX_*`.
        pub mode: u16,
        /// INSTALL: the shift of the receive window in the ACKs the host
        /// sends (0 to `FLOW_MAX_WSCALE`).
        pub rx_wscale: u16,
    }
}

/// The address block of an IPv6 flow (CMD_FLOW_INSTALL with `FLOWI_IPV6`,
/// version 2.3), in guest memory at `addr6`: the NIC reads it while it
/// executes the command; the driver may reuse it after the completion.
/// Addresses are in network byte order (as on the wire), not
/// little-endian.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowAddr6 {
    /// Local IPv6 address (the destination of received packets).
    pub local_addr: [u8; 16],
    /// Remote IPv6 address (the source of received packets).
    pub remote_addr: [u8; 16],
}

impl FlowAddr6 {
    /// Size of the byte image.
    pub const SIZE: usize = 32;

    /// Reads the byte image.
    pub fn decode(b: &[u8; 32]) -> Self {
        let [local_addr, remote_addr] = addrs_of(b);
        Self {
            local_addr,
            remote_addr,
        }
    }

    /// Writes the byte image.
    pub fn encode(&self) -> [u8; 32] {
        image_of(&[self.local_addr, self.remote_addr])
    }
}

const _: () = assert!(core::mem::size_of::<FlowAddr6>() == FlowAddr6::SIZE);

/// The `N` 16-byte addresses of an address block's byte image `b`, in order.
fn addrs_of<const N: usize>(b: &[u8]) -> [[u8; 16]; N] {
    let mut chunks = b.chunks_exact(16);
    core::array::from_fn(|_| {
        chunks
            .next()
            .and_then(|c| c.try_into().ok())
            .unwrap_or_default()
    })
}

/// The byte image of an address block holding `addrs` in order.
fn image_of<const M: usize>(addrs: &[[u8; 16]]) -> [u8; M] {
    let mut b = [0u8; M];
    for (d, a) in b.chunks_exact_mut(16).zip(addrs) {
        d.copy_from_slice(a);
    }
    b
}

/// The guest-physical address of an IPv6 address block as a command
/// carries it: bits 0..32 in `lo`, bits 32..64 in `hi` (two adjacent u32
/// fields that hold IPv4 addresses in the IPv4 form of the command).
fn addr6_of(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

/// `a` split as [`addr6_of`] reads it: (bits 0..32, bits 32..64).
fn addr6_split(a: u64) -> (u32, u32) {
    // CAST: the low and high 32 bits, each exact.
    (a as u32, (a >> 32) as u32)
}

impl CmdFlow {
    /// INSTALL with `FLOWI_IPV6`: the guest-physical address of the flow's
    /// [`FlowAddr6`] block (8-byte aligned), carried in bytes 16..24 where
    /// an IPv4 flow has its two addresses.
    pub fn addr6(&self) -> u64 {
        addr6_of(self.local_ip, self.remote_ip)
    }

    /// Stores `a` as [`Self::addr6`].
    pub fn set_addr6(&mut self, a: u64) {
        (self.local_ip, self.remote_ip) = addr6_split(a);
    }
}

/// N-tuple rule action: deliver matching frames to queue pair `queue`.
pub const RULE_ACT_QUEUE: u16 = 1;
/// N-tuple rule action: drop matching frames (`PSTAT_RX_RULE_DROP`).
pub const RULE_ACT_DROP: u16 = 2;
/// N-tuple rule action (version 2.4): deliver matching frames to entry
/// `hash & (RSS_TABLE_SIZE - 1)` of RSS context `rss_ctx`'s indirection
/// table plus `queue`.
pub const RULE_ACT_RSS: u16 = 3;
/// CMD_RULE_SET flag (version 2.4): an IPv6 rule; `src_ip` and
/// `src_ip_mask` together hold `addr6`, the guest-physical address of its
/// [`RuleAddr6`] block (see [`CmdRule::addr6`]); `dst_ip` and
/// `dst_ip_mask` are reserved (0).
pub const RULEF_IPV6: u16 = 1 << 0;
/// CMD_RULE_SET index: the NIC takes the lowest free rule (`ST_NO_SPACE` if none).
pub const RULE_INDEX_ANY: u16 = 0xffff;

le_struct! {
    /// CMD_RULE_SET / CMD_RULE_CLEAR: an n-tuple steering rule of a port.
    /// A frame matches if every field equals the frame's under its mask
    /// (addresses and ports numeric, as in [`CmdFlow`]).
    pub struct CmdRule(64) {
        /// CMD_RULE_*.
        pub opcode: u16,
        /// SET: `RULEF_IPV6` or 0. CLEAR: 0.
        pub flags: u16,
        /// Echoed.
        pub cookie: u32,
        /// Port the rule filters.
        pub port: u16,
        /// Rule index (< NTUPLE_RULES; SET: or RULE_INDEX_ANY); lower indices match first.
        pub index: u16,
        /// SET: `RULE_ACT_*`.
        pub action: u16,
        /// SET with RULE_ACT_QUEUE: queue pair (< MAX_QP). With
        /// RULE_ACT_RSS: added to the table entry (< MAX_QP).
        pub queue: u16,
        /// SET: IPv4 source address. With `RULEF_IPV6`: bits 0..32 of `addr6`.
        pub src_ip: u32,
        /// SET: mask of `src_ip` (0: any). With `RULEF_IPV6`: bits 32..64 of `addr6`.
        pub src_ip_mask: u32,
        /// SET: IPv4 destination address (`RULEF_IPV6`: 0).
        pub dst_ip: u32,
        /// SET: mask of `dst_ip` (0: any; `RULEF_IPV6`: 0).
        pub dst_ip_mask: u32,
        /// SET: TCP/UDP source port.
        pub src_port: u16,
        /// SET: mask of `src_port` (0: any; nonzero: only unfragmented TCP/UDP match).
        pub src_port_mask: u16,
        /// SET: TCP/UDP destination port.
        pub dst_port: u16,
        /// SET: mask of `dst_port` (0: any; nonzero: only unfragmented TCP/UDP match).
        pub dst_port_mask: u16,
        /// SET: IP protocol (IPv6: next header) to match (0: any).
        pub proto: u16,
        /// SET with RULE_ACT_RSS: RSS context (< RSS_CONTEXTS); otherwise 0.
        pub rss_ctx: u16,
        /// Reserved, 0.
        pub rsvd1: u32,
        /// Reserved, 0.
        pub rsvd2: u64,
        /// Reserved, 0.
        pub rsvd3: u64,
    }
}

impl CmdRule {
    /// SET with `RULEF_IPV6`: the guest-physical address of the rule's
    /// [`RuleAddr6`] block (8-byte aligned), carried in bytes 16..24 as
    /// [`CmdFlow::addr6`] is.
    pub fn addr6(&self) -> u64 {
        addr6_of(self.src_ip, self.src_ip_mask)
    }

    /// Stores `a` as [`Self::addr6`].
    pub fn set_addr6(&mut self, a: u64) {
        (self.src_ip, self.src_ip_mask) = addr6_split(a);
    }
}

/// The addresses and masks of an IPv6 n-tuple rule (CMD_RULE_SET with
/// `RULEF_IPV6`, version 2.4), in guest memory at `addr6`: the NIC reads it
/// while it executes the command; the driver may reuse it after the
/// completion. Network byte order, as on the wire; a zero mask matches any
/// address.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleAddr6 {
    /// Source address to match.
    pub src_addr: [u8; 16],
    /// Mask of `src_addr`.
    pub src_mask: [u8; 16],
    /// Destination address to match.
    pub dst_addr: [u8; 16],
    /// Mask of `dst_addr`.
    pub dst_mask: [u8; 16],
}

impl RuleAddr6 {
    /// Size of the byte image.
    pub const SIZE: usize = 64;

    /// Reads the byte image.
    pub fn decode(b: &[u8; 64]) -> Self {
        let [src_addr, src_mask, dst_addr, dst_mask] = addrs_of(b);
        Self {
            src_addr,
            src_mask,
            dst_addr,
            dst_mask,
        }
    }

    /// Writes the byte image.
    pub fn encode(&self) -> [u8; 64] {
        image_of(&[self.src_addr, self.src_mask, self.dst_addr, self.dst_mask])
    }
}

const _: () = assert!(core::mem::size_of::<RuleAddr6>() == RuleAddr6::SIZE);

le_struct! {
    /// CMD_RSS_CTX_SET (version 2.4): the NIC reads `RSS_TABLE_SIZE`
    /// one-byte entries (queue pair numbers) at `table` while it executes
    /// the command and makes them RSS context `ctx`'s indirection table,
    /// whole between two frames.
    pub struct CmdRssCtx(64) {
        /// CMD_RSS_CTX_SET.
        pub opcode: u16,
        /// 0.
        pub flags: u16,
        /// Echoed.
        pub cookie: u32,
        /// Port.
        pub port: u16,
        /// RSS context, 1..RSS_CONTEXTS (context 0 is `PORT_RSS_TABLE`).
        pub ctx: u16,
        /// Reserved, 0.
        pub rsvd0: u32,
        /// Guest-physical address of the table (8-byte aligned).
        pub table: u64,
        /// Reserved, 0.
        pub rsvd1: u64,
        /// Reserved, 0.
        pub rsvd2: u64,
        /// Reserved, 0.
        pub rsvd3: u64,
        /// Reserved, 0.
        pub rsvd4: u64,
        /// Reserved, 0.
        pub rsvd5: u64,
    }
}

/// MS direction: receive segment (placement target).
pub const MS_DIR_RECV: u16 = 0;
/// MS direction: send segment (reserved: ST_UNSUPPORTED).
pub const MS_DIR_SEND: u16 = 1;

le_struct! {
    /// CMD_MS_POST: append a segment to a flow's receive MS List. Segments
    /// cover consecutive stream offsets in posting order, starting where the
    /// previous one ended (the first one at the flow's cursor).
    pub struct CmdMsPost(64) {
        /// CMD_MS_POST.
        pub opcode: u16,
        /// 0.
        pub flags: u16,
        /// Echoed.
        pub cookie: u32,
        /// Flow index.
        pub flow: u32,
        /// `MS_DIR_*`.
        pub dir: u16,
        /// Reserved, 0.
        pub rsvd0: u16,
        /// MR key (LOCAL_WRITE for receive).
        pub mr_key: u64,
        /// Segment start inside the MR.
        pub mr_offset: u64,
        /// Opaque to the NIC (driver bookkeeping).
        pub seg_cookie: u64,
        /// Segment bytes (nonzero).
        pub len: u32,
        /// Reserved, 0.
        pub rsvd1: u32,
        /// Reserved, 0.
        pub rsvd2: u64,
        /// Reserved, 0.
        pub rsvd3: u64,
    }
}

le_struct! {
    /// Command completion entry (NIC -> driver), 16 bytes, in command order.
    pub struct CmdCompletion(16) {
        /// `cookie` of the command.
        pub cookie: u32,
        /// `opcode` of the command.
        pub opcode: u16,
        /// `status::ST_*`.
        pub status: u16,
        /// MR_REG: key. FLOW_INSTALL: flow index. FLOW_UPDATE: cursor after
        /// it. MS_POST: the segment's start stream offset. Otherwise 0.
        pub result: u64,
    }
}

/// A command queue entry as the driver posts it: built only from a typed
/// [`Command`], so its opcode is the one its layout belongs to; the queue
/// sets its cookie ([`CmdEntry::with_cookie`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdEntry([u8; 64]);

impl CmdEntry {
    /// The entry's `CMD_*`.
    pub fn opcode(&self) -> u16 {
        u16::from_le_bytes([self.0[0], self.0[1]])
    }

    /// The entry with `cookie`, which its completion echoes.
    pub fn with_cookie(mut self, cookie: u32) -> Self {
        self.0[4..8].copy_from_slice(&cookie.to_le_bytes());
        self
    }

    /// The 64 bytes written into the command queue.
    pub fn bytes(&self) -> [u8; 64] {
        self.0
    }
}

impl CmdCompletion {
    /// Whether this completes a command of type `C` (its opcode is
    /// `C::OPCODE`): how a callback that several kinds of command share
    /// tells them apart.
    pub fn is<C: Command>(&self) -> bool {
        self.opcode == C::OPCODE
    }
}

/// A command the NIC executes: its opcode, its queue entry and what the
/// `result` of its successful completion (`status::ST_OK`) means.
pub trait Command {
    /// `CMD_*`.
    const OPCODE: u16;
    /// What a successful completion returns.
    type Output;

    /// The command's queue entry, with [`Command::OPCODE`] (cookie 0).
    fn entry(&self) -> CmdEntry;

    /// The output of a successful completion `c` of this command.
    fn output(c: &CmdCompletion) -> Self::Output;
}

/// CMD_NOP: completes once every command before it completed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Nop;

impl Command for Nop {
    const OPCODE: u16 = CMD_NOP;
    type Output = ();

    fn entry(&self) -> CmdEntry {
        let mut b = [0u8; 64];
        b[..8].copy_from_slice(
            &CmdHeader {
                opcode: Self::OPCODE,
                ..Default::default()
            }
            .encode(),
        );
        CmdEntry(b)
    }

    fn output(_: &CmdCompletion) {}
}

/// What a command's successful completion returns, from its `result`.
trait FromResult {
    fn from_result(result: u64) -> Self;
}

impl FromResult for u64 {
    fn from_result(result: u64) -> u64 {
        result
    }
}

impl FromResult for () {
    fn from_result(_: u64) {}
}

/// [`Command`] for a layout that is itself the command: its entry is the
/// layout with the opcode set; its output is the completion's `result`
/// (`u64`, with what it means) or nothing (`()`).
macro_rules! layout_command {
    ($layout:ident, $opcode:expr, $output:ty $(, $doc:literal)?) => {
        impl Command for $layout {
            const OPCODE: u16 = $opcode;
            $(#[doc = $doc])?
            type Output = $output;

            fn entry(&self) -> CmdEntry {
                CmdEntry(
                    $layout {
                        opcode: Self::OPCODE,
                        ..*self
                    }
                    .encode(),
                )
            }

            fn output(c: &CmdCompletion) -> $output {
                <$output as FromResult>::from_result(c.result)
            }
        }
    };
}

layout_command!(CmdMrReg, CMD_MR_REG, u64, "The region's MR key.");
layout_command!(CmdMrInval, CMD_MR_INVAL, ());
layout_command!(CmdRule, CMD_RULE_SET, u64, "The rule's index.");
layout_command!(CmdRssCtx, CMD_RSS_CTX_SET, ());

/// CMD_RULE_CLEAR of rule `index` of port `port`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RuleClear {
    /// Port.
    pub port: u16,
    /// Rule index.
    pub index: u16,
}

impl Command for RuleClear {
    const OPCODE: u16 = CMD_RULE_CLEAR;
    type Output = ();

    fn entry(&self) -> CmdEntry {
        CmdEntry(
            CmdRule {
                opcode: Self::OPCODE,
                port: self.port,
                index: self.index,
                ..Default::default()
            }
            .encode(),
        )
    }

    fn output(_: &CmdCompletion) {}
}
layout_command!(
    CmdMsPost,
    CMD_MS_POST,
    u64,
    "The segment's start stream offset."
);

/// CMD_FLOW_INSTALL of the flow [`CmdFlow`] describes.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowInstall(pub CmdFlow);

impl Command for FlowInstall {
    const OPCODE: u16 = CMD_FLOW_INSTALL;
    /// The flow's index as the NIC gave it (the driver checks it against
    /// its Flow Table).
    type Output = u64;

    fn entry(&self) -> CmdEntry {
        CmdEntry(
            CmdFlow {
                opcode: Self::OPCODE,
                ..self.0
            }
            .encode(),
        )
    }

    fn output(c: &CmdCompletion) -> u64 {
        c.result
    }
}

/// CMD_FLOW_UPDATE of flow `flow`: `flags` (`FLOWU_*`) with `stream_off`.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowUpdate {
    /// Flow index.
    pub flow: u32,
    /// `FLOWU_*`.
    pub flags: u16,
    /// The new ring head, cursor or window edge.
    pub stream_off: u64,
}

impl Command for FlowUpdate {
    const OPCODE: u16 = CMD_FLOW_UPDATE;
    /// The flow's cursor after the update.
    type Output = u64;

    fn entry(&self) -> CmdEntry {
        CmdEntry(
            CmdFlow {
                opcode: Self::OPCODE,
                flags: self.flags,
                flow: self.flow,
                stream_off: self.stream_off,
                ..Default::default()
            }
            .encode(),
        )
    }

    fn output(c: &CmdCompletion) -> u64 {
        c.result
    }
}

/// CMD_FLOW_REMOVE of flow `flow`.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowRemove {
    /// Flow index.
    pub flow: u32,
}

impl Command for FlowRemove {
    const OPCODE: u16 = CMD_FLOW_REMOVE;
    type Output = ();

    fn entry(&self) -> CmdEntry {
        CmdEntry(
            CmdFlow {
                opcode: Self::OPCODE,
                flow: self.flow,
                ..Default::default()
            }
            .encode(),
        )
    }

    fn output(_: &CmdCompletion) {}
}

//! Fuzzing the RX Split Unit like a hostile peer would: frames crafted
//! against an installed flow's exact tuple (sequence numbers relative to its
//! cursor and posted space: in order, ahead, overlapping bytes already placed
//! with other data, far out of the window on both sides, below stream offset
//! 0, across 2^32; URG with urgent pointers, RST, FIN, SYN, pure ACKs, bad
//! checksums, empty and maximal payloads, IP and TCP options, Ethernet
//! padding, IP fragments), and near-miss tuples, interleaved with what a
//! driver does meanwhile (posts, cursor and ring head updates, flow remove
//! and re-install on the same tuple, region invalidation, resets, a header
//! queue it stops reaping).
//!
//! The oracle is a reference of §9 of docs/hardware.md kept by the test
//! (cursor, MS List or ring window, out-of-order ranges of each flow). After
//! every frame: the model did not panic; the counters moved exactly as the
//! frame's documented outcome says; the data regions hold exactly what the
//! reference placed (so nothing outside the posted segments or ring window
//! of the frame's own flow changed, no byte below the cursor was rewritten,
//! and every byte reported placed is there); the model's cursor,
//! out-of-order ranges and MS List agree with the reference. Every header
//! entry and every normal-path completion is the one the reference expects,
//! and each header entry is also checked on its own (stream_off agrees with
//! seq, an entry wrote all the payload it reports (a frame over bytes
//! already placed takes the normal path), an OOO entry starts above
//! the cursor as it was, ...). Frames of a removed flow's tuple take the
//! normal path and change nothing.
//!
//! Each flow is installed as IPv4 or as IPv6 (§15), and the peer sends in
//! the flow's family, sometimes in the other one (IPv6 frames to an IPv4
//! flow's tuple with IPv4-mapped addresses among them: they match no
//! flow). IPv6 frames also come with extension headers or another next
//! header (normal path), payload lengths past the frame's end or below
//! the TCP header (malformed) or short of it (the rest is padding, never
//! placed), and cut off anywhere.

mod common;

use std::collections::VecDeque;

use common::ip6::{insert_ext6, A6, B6};
use common::tcp6::{ack6_frame, flow6, l4_csum};
use common::*;
use proptest::prelude::*;
use zeronic_hw::cmd::*;
use zeronic_hw::desc::*;
use zeronic_hw::net::{
    ipv4_mapped, is_ipv6_ext_header, TCP_ACK as ACK, TCP_FIN as FIN, TCP_PSH as PSH,
    TCP_RST as RST, TCP_SYN as SYN, TCP_URG as URG,
};
use zeronic_hw::regs::*;
use zeronic_hw::status::*;
use zeronic_nic::frame::Frame;
use zeronic_nic::model::{lock, Topology};
use zeronic_nic::wire::Impair;

const RAM_SIZE: usize = 10 << 20;
/// Bytes of each data region (contiguous pages).
const REGION: u64 = 128 << 10;
const NREGIONS: usize = 2;
/// Installable flows (tuples 0 and 1).
const NFLOWS: usize = 2;
const MTU: usize = 9000;
/// Flows live on this port; frames to the other one never match them.
const FPORT: u8 = 1;
/// Port counters the oracle follows (every PSTAT defined).
const NPSTAT: usize = PSTAT_RX_V6_EXTHDR + 1;

/// (port, src ip, src port, dst ip, dst port) of a frame; as IPv6, the
/// addresses are their `ip6_of`.
type Tuple = (u8, [u8; 4], u16, [u8; 4], u16);

/// What the peer puts on the wire. Tuples 0 and 1 are the installable
/// flows; the rest are near misses that no flow ever matches.
const TUPLES: [Tuple; 5] = [
    (FPORT, A_IP, 4000, B_IP, 5001),
    (FPORT, A_IP, 4001, B_IP, 5001),
    (0, A_IP, 4000, B_IP, 5001),
    (FPORT, A_IP, 4000, B_IP, 5002),
    (FPORT, B_IP, 5001, A_IP, 4000),
];

/// The IPv6 address of a tuple's IPv4 host address.
fn ip6_of(ip: [u8; 4]) -> [u8; 16] {
    if ip == A_IP {
        A6
    } else {
        B6
    }
}

/// An IPv6 frame's payload length field.
#[derive(Clone, Copy, Debug)]
enum PlenSel {
    Exact,
    /// Short by this many payload bytes, which stay in the frame as
    /// padding.
    Short(u16),
    /// Past the frame's end (padding included) by this many bytes.
    Long(u16),
    /// This value modulo the TCP header length: below a TCP header.
    BelowTcp(u8),
}

/// What an IPv6 frame carries besides the fields IPv4 frames have too
/// (ignored when the frame is IPv4).
#[derive(Clone, Copy, Debug)]
struct Ip6Sel {
    /// The tuple's IPv4 addresses, IPv4-mapped: no flow ever matches.
    mapped: bool,
    /// A next header other than TCP: an extension header goes in front
    /// of the TCP header, any other value just replaces 6.
    nh: Option<u8>,
    plen: PlenSel,
    /// Bytes cut off the end of the frame, padding included.
    cut: u16,
    label: u32,
}

impl Ip6Sel {
    /// The well-formed IPv6/TCP frame of the same addresses and label.
    fn clean(self) -> Self {
        Self {
            nh: None,
            plen: PlenSel::Exact,
            cut: 0,
            ..self
        }
    }
}

/// A sequence number, relative to the target flow's reference state.
#[derive(Clone, Copy, Debug)]
enum SeqSel {
    Cursor(i16),
    /// cursor - x: over bytes already placed.
    Back(u16),
    /// Somewhere in [cursor, end of posted space), as a fraction of 2^16.
    InPosted(u16),
    PostEnd(i16),
    /// At the start (even) or end (odd) of an out-of-order range, shifted.
    Ooo(u8, i16),
    /// cursor + 2^31 - x: the far edge of the comparison window.
    Ahead(u32),
    /// cursor - 2^31 + x.
    Behind(u32),
    /// rx_isn - x: below stream offset 0 while the cursor is small.
    BelowZero(u16),
    Raw(u32),
}

#[derive(Clone, Copy, Debug)]
enum LenSel {
    Zero,
    One,
    Small(u16),
    /// The largest payload the MTU carries with these headers.
    Max,
    /// One more than that: the frame is too long.
    OverMax,
    /// Up to the end of posted space, plus this.
    ToPostEnd(i8),
}

#[derive(Clone, Debug)]
struct PeerFrame {
    tuple: u8,
    seq: SeqSel,
    len: LenSel,
    flags: u8,
    urg: u16,
    ack: u8,
    /// 0: good; 1: a payload (or header) byte flipped; 2: checksum flipped.
    bad_csum: u8,
    /// 32-bit words of IPv4 and TCP options.
    ip_opts: u8,
    tcp_opts: u8,
    /// 0/3: unfragmented (3 with DF); 1: MF; 2: a fragment offset.
    frag: u8,
    tos: u8,
    ttl: u8,
    /// Ethernet padding after the IP packet.
    pad: u8,
    salt: u32,
    /// Sent in the family the target flow does not have.
    other_family: bool,
    v6: Ip6Sel,
}

/// A cursor (or ring head) target for CMD_FLOW_UPDATE.
#[derive(Clone, Copy, Debug)]
enum CurSel {
    Plus(u16),
    PostEnd,
    PostEndPlus(u16),
    /// The next multiple of 2^32 minus x.
    Near4G(u16),
    Back(u16),
    Limit,
    Raw(u64),
}

#[derive(Clone, Copy, Debug)]
enum IsnSel {
    Zero,
    NearWrap(u16),
    Raw(u32),
}

#[derive(Clone, Copy, Debug)]
enum RingOff {
    Zero,
    Near4G(u16),
    Small(u32),
    Limit,
}

#[derive(Clone, Debug)]
enum Op {
    Peer(PeerFrame),
    /// Several frames in one delivery batch.
    Batch(Vec<PeerFrame>),
    /// A stream in one batch: `base`, then frames of its shape at the
    /// cursor with these lengths and flags (coalescing), and another frame
    /// slipped in after the given one.
    Stream(PeerFrame, Vec<(LenSel, u8)>, Option<(u8, PeerFrame)>),
    /// A retransmission of the last frame sent (same header), other payload.
    Replay(u32, u8),
    Post {
        flow: u8,
        region: u8,
        off: u32,
        len: u32,
    },
    Update {
        flow: u8,
        flags: u16,
        to: CurSel,
    },
    Remove(u8),
    Install {
        flow: u8,
        isn: IsnSel,
        /// `rx_wscale` (above FLOW_MAX_WSCALE is refused).
        wscale: u8,
        /// (region, offset, size, initial stream offset).
        ring: Option<(u8, u32, u32, RingOff)>,
        /// An IPv6 flow (its tuple's `ip6_of` addresses).
        v6: bool,
    },
    /// The host sends an ACK on the flow's tuple (port FPORT's TX): its
    /// acknowledgment number (relative to the cursor), window field and
    /// TCP flags. The NIC learns the window's right edge from it.
    HostAck {
        flow: u8,
        ack: CurSel,
        win: u16,
        flags: u8,
    },
    /// Invalidates a region and registers its pages again.
    Inval(u8),
    Reset,
    /// Consumes the header queues (they are not reaped otherwise when the
    /// case runs with a small header queue).
    ReapHdr,
    Step,
}

fn peer_frame() -> impl Strategy<Value = PeerFrame> {
    let seq = prop_oneof![
        8 => Just(SeqSel::Cursor(0)),
        4 => (-64i16..64).prop_map(SeqSel::Cursor),
        3 => (1u16..20_000).prop_map(SeqSel::Back),
        5 => any::<u16>().prop_map(SeqSel::InPosted),
        2 => (-64i16..64).prop_map(SeqSel::PostEnd),
        3 => (any::<u8>(), -64i16..64).prop_map(|(i, d)| SeqSel::Ooo(i, d)),
        1 => (0u32..70_000).prop_map(SeqSel::Ahead),
        1 => (0u32..70_000).prop_map(SeqSel::Behind),
        1 => (1u16..20_000).prop_map(SeqSel::BelowZero),
        1 => any::<u32>().prop_map(SeqSel::Raw),
    ];
    let len = prop_oneof![
        2 => Just(LenSel::Zero),
        1 => Just(LenSel::One),
        8 => (1u16..3000).prop_map(LenSel::Small),
        2 => Just(LenSel::Max),
        1 => Just(LenSel::OverMax),
        1 => any::<i8>().prop_map(LenSel::ToPostEnd),
    ];
    let flags = prop_oneof![
        10 => Just(ACK),
        6 => Just(ACK | PSH),
        2 => Just(ACK | URG),
        1 => Just(ACK | PSH | URG),
        1 => Just(ACK | FIN),
        1 => Just(RST),
        1 => Just(ACK | RST),
        1 => Just(SYN),
        1 => Just(SYN | ACK),
        1 => Just(0u8),
        1 => any::<u8>(),
    ];
    (
        (
            prop_oneof![14 => Just(0u8), 4 => Just(1u8), 1 => 2u8..5],
            seq,
            len,
            flags,
            any::<u16>(),
            prop_oneof![6 => Just(0u8), 1 => 1u8..3],
            prop_oneof![12 => Just(0u8), 1 => 1u8..3],
        ),
        (
            prop_oneof![6 => Just(0u8), 1 => 1u8..11],
            prop_oneof![5 => Just(0u8), 1 => Just(3u8), 1 => 1u8..11],
            prop_oneof![20 => Just(0u8), 2 => Just(3u8), 1 => 1u8..3],
            prop_oneof![8 => Just(0u8), 1 => Just(3u8), 1 => any::<u8>()],
            prop_oneof![8 => Just(64u8), 1 => any::<u8>()],
            prop_oneof![8 => Just(0u8), 1 => 1u8..64],
            any::<u32>(),
        ),
        (proptest::bool::weighted(0.1), ip6_sel()),
    )
        .prop_map(
            |(
                (tuple, seq, len, flags, urg, ack, bad_csum),
                (ip_opts, tcp_opts, frag, tos, ttl, pad, salt),
                (other_family, v6),
            )| PeerFrame {
                tuple,
                seq,
                len,
                flags,
                urg,
                ack,
                bad_csum,
                ip_opts,
                tcp_opts,
                frag,
                tos,
                ttl,
                pad,
                salt,
                other_family,
                v6,
            },
        )
}

fn ip6_sel() -> impl Strategy<Value = Ip6Sel> {
    let nh = prop_oneof![
        24 => Just(None),
        2 => Just(Some(60u8)),
        1 => prop::sample::select(vec![0u8, 43, 44, 50, 51, 135, 139, 140, 253, 254]).prop_map(Some),
        1 => prop::sample::select(vec![17u8, 58, 59]).prop_map(Some),
        1 => any::<u8>().prop_map(Some),
    ];
    let plen = prop_oneof![
        24 => Just(PlenSel::Exact),
        2 => (1u16..2000).prop_map(PlenSel::Short),
        1 => (1u16..100).prop_map(PlenSel::Long),
        1 => any::<u8>().prop_map(PlenSel::BelowTcp),
    ];
    (
        proptest::bool::weighted(0.08),
        nh,
        plen,
        prop_oneof![24 => Just(0u16), 2 => 1u16..100, 1 => any::<u16>()],
        prop_oneof![4 => Just(0x12345u32), 1 => 0u32..0x10_0000],
    )
        .prop_map(|(mapped, nh, plen, cut, label)| Ip6Sel {
            mapped,
            nh,
            plen,
            cut,
            label,
        })
}

fn op() -> impl Strategy<Value = Op> {
    let flow = prop_oneof![3 => Just(0u8), 1 => Just(1u8)];
    let cur = prop_oneof![
        4 => (0u16..20_000).prop_map(CurSel::Plus),
        2 => Just(CurSel::PostEnd),
        1 => (0u16..20_000).prop_map(CurSel::PostEndPlus),
        2 => (0u16..20_000).prop_map(CurSel::Near4G),
        1 => (1u16..100).prop_map(CurSel::Back),
        1 => Just(CurSel::Limit),
        1 => any::<u64>().prop_map(CurSel::Raw),
    ];
    let isn = prop_oneof![
        2 => Just(IsnSel::Zero),
        2 => (0u16..20_000).prop_map(IsnSel::NearWrap),
        2 => any::<u32>().prop_map(IsnSel::Raw),
    ];
    let ring = proptest::option::weighted(
        0.3,
        (
            0u8..2,
            prop_oneof![3 => 0u32..(REGION as u32), 1 => any::<u32>()],
            prop_oneof![
                3 => 1u32..16_384,
                2 => 16_384u32..(REGION as u32 + 1),
                1 => any::<u32>()
            ],
            prop_oneof![
                2 => Just(RingOff::Zero),
                2 => (0u16..20_000).prop_map(RingOff::Near4G),
                1 => any::<u32>().prop_map(RingOff::Small),
                1 => Just(RingOff::Limit),
            ],
        ),
    );
    prop_oneof![
        30 => peer_frame().prop_map(Op::Peer),
        4 => proptest::collection::vec(peer_frame(), 2..8).prop_map(Op::Batch),
        6 => (
            peer_frame(),
            proptest::collection::vec(
                (
                    prop_oneof![
                        6 => (1u16..3000).prop_map(LenSel::Small),
                        1 => Just(LenSel::Max),
                        1 => Just(LenSel::Zero)
                    ],
                    prop_oneof![4 => Just(ACK), 4 => Just(ACK | PSH), 1 => Just(ACK | URG), 1 => Just(ACK | FIN)],
                ),
                1..12
            ),
            proptest::option::weighted(0.3, (any::<u8>(), peer_frame())),
        )
            .prop_map(|(b, l, o)| Op::Stream(b, l, o)),
        5 => (any::<u32>(), 0u8..3).prop_map(|(s, l)| Op::Replay(s, l)),
        10 => (
            flow.clone(),
            0u8..2,
            prop_oneof![4 => 0u32..(REGION as u32), 1 => any::<u32>()],
            prop_oneof![6 => 1u32..20_000, 1 => Just(0u32), 1 => any::<u32>()],
        )
            .prop_map(|(flow, region, off, len)| Op::Post { flow, region, off, len }),
        5 => (
            flow.clone(),
            prop_oneof![
                6 => Just(FLOWU_CURSOR),
                2 => Just(FLOWU_RING_HEAD),
                2 => Just(FLOWU_CURSOR | FLOWU_RING_HEAD),
                3 => Just(FLOWU_EDGE),
                1 => Just(FLOWU_EDGE | FLOWU_CURSOR),
                1 => any::<u16>()
            ],
            cur.clone()
        )
            .prop_map(|(flow, flags, to)| Op::Update { flow, flags, to }),
        2 => flow.clone().prop_map(Op::Remove),
        5 => (
            flow.clone(),
            cur,
            prop_oneof![4 => 0u16..2048, 2 => Just(u16::MAX), 1 => any::<u16>()],
            prop_oneof![6 => Just(ACK), 1 => Just(ACK | FIN), 1 => Just(ACK | RST), 1 => Just(0u8), 1 => Just(SYN | ACK)],
        )
            .prop_map(|(flow, ack, win, flags)| Op::HostAck { flow, ack, win, flags }),
        3 => (flow, isn, ring, prop_oneof![8 => 0u8..15, 1 => 15u8..=255], any::<bool>())
            .prop_map(|(flow, isn, ring, wscale, v6)| Op::Install { flow, isn, ring, wscale, v6 }),
        1 => (0u8..2).prop_map(Op::Inval),
        1 => Just(Op::Reset),
        2 => Just(Op::ReapHdr),
        1 => Just(Op::Step),
    ]
}

#[derive(Clone, Copy, Debug)]
struct RSeg {
    start: u64,
    len: u64,
    region: usize,
    off: u64,
}

#[derive(Clone, Copy, Debug)]
struct RRing {
    region: usize,
    off: u64,
    size: u64,
    head: u64,
}

/// The reference of one installed flow (§9).
#[derive(Clone, Debug)]
struct RefFlow {
    idx: u32,
    rx_isn: u32,
    cursor: u64,
    post_end: u64,
    segs: Vec<RSeg>,
    ring: Option<RRing>,
    ring_dead: bool,
    ooo: Vec<(u64, u64)>,
    /// Stream offset past the largest window edge given or learned.
    edge: u64,
    wscale: u8,
    v6: bool,
}

/// Where a frame's payload goes, by the reference.
#[derive(Debug)]
enum Plan {
    /// Starts below stream offset 0.
    Below,
    Dup,
    Place {
        start: u64,
        end: u64,
        /// (guest address, payload index, bytes), in order.
        writes: Vec<(u64, usize, usize)>,
    },
    NoSpace,
    OooFull,
    /// TCP would refuse the payload: past the window edge, or flags.
    Unacceptable,
}

impl RefFlow {
    fn new(idx: u32, rx_isn: u32, cursor: u64, ring: Option<RRing>, wscale: u8, v6: bool) -> Self {
        Self {
            edge: cursor,
            wscale,
            v6,
            idx,
            rx_isn,
            cursor,
            post_end: cursor,
            segs: Vec::new(),
            ring,
            ring_dead: false,
            ooo: Vec::new(),
        }
    }

    /// Stream offset of `seq`, within +-2^31 of the cursor; None below 0.
    fn off(&self, seq: u32) -> Option<u64> {
        let cur_seq = self.rx_isn.wrapping_add(self.cursor as u32);
        let d = seq.wrapping_sub(cur_seq) as i32 as i128;
        let o = self.cursor as i128 + d;
        (o >= 0).then_some(o as u64)
    }

    fn posted_end(&self) -> u64 {
        match self.ring {
            Some(r) => r.head + r.size,
            None => self.post_end,
        }
    }

    fn plan(&self, o: u64, len: u64, bases: &[u64; NREGIONS]) -> Plan {
        let end = o + len;
        // Written once: a frame over any placed byte writes nothing.
        if o < self.cursor || self.ooo.iter().any(|r| r.0 < end && r.1 > o) {
            return Plan::Dup;
        }
        if end > self.edge {
            return Plan::Unacceptable;
        }
        let start = o;
        if self.ring_dead {
            return Plan::NoSpace;
        }
        let mut writes = Vec::new();
        if let Some(r) = self.ring {
            if end > r.head + r.size {
                return Plan::NoSpace;
            }
            let mut s = start;
            while s < end {
                let ro = s % r.size;
                let n = (end - s).min(r.size - ro);
                writes.push((bases[r.region] + r.off + ro, (s - o) as usize, n as usize));
                s += n;
            }
        } else {
            let mut s = start;
            while s < end {
                let Some(g) = self
                    .segs
                    .iter()
                    .find(|g| g.start <= s && s < g.start + g.len)
                else {
                    return Plan::NoSpace;
                };
                let n = (end - s).min(g.start + g.len - s);
                let addr = bases[g.region] + g.off + (s - g.start);
                writes.push((addr, (s - o) as usize, n as usize));
                s += n;
            }
        }
        if start > self.cursor {
            let touching = self
                .ooo
                .iter()
                .filter(|r| r.0 <= end && r.1 >= start)
                .count();
            if self.ooo.len() + 1 - touching > FLOW_MAX_OOO as usize {
                return Plan::OooFull;
            }
        }
        Plan::Place { start, end, writes }
    }

    fn mark(&mut self, start: u64, end: u64) {
        if start <= self.cursor {
            self.advance(end);
            return;
        }
        let (mut s, mut e) = (start, end);
        self.ooo.retain(|&(a, b)| {
            let touch = a <= end && b >= start;
            if touch {
                s = s.min(a);
                e = e.max(b);
            }
            !touch
        });
        let at = self.ooo.partition_point(|r| r.0 < s);
        self.ooo.insert(at, (s, e));
    }

    fn advance(&mut self, to: u64) {
        self.cursor = self.cursor.max(to);
        while let Some(&(a, b)) = self.ooo.first() {
            if a > self.cursor {
                break;
            }
            self.cursor = self.cursor.max(b);
            self.ooo.remove(0);
        }
        let c = self.cursor;
        self.segs.retain(|g| g.start + g.len > c);
        self.post_end = self.post_end.max(c);
    }
}

/// A header entry the reference expects, and what it was checked against.
#[derive(Clone, Debug)]
struct ExpEntry {
    e: HdrEntry,
    hdr: Vec<u8>,
    rx_isn: u32,
    /// The cursor before the first packet of the entry.
    cursor_before: u64,
    /// (ACK number, TOS, TTL, IP and TCP header lengths, flow label).
    shape: (u32, u8, u8, usize, usize, u32),
}

struct Peer {
    tb: Tb,
    bases: [u64; NREGIONS],
    keys: [Option<u64>; NREGIONS],
    lists: [u64; NREGIONS],
    flows: [Option<RefFlow>; NFLOWS],
    /// rx_isn of each tuple's latest flow (frames to removed flows).
    last_isn: [u32; NFLOWS],
    /// The family of each tuple's latest flow: IPv6.
    last_v6: [bool; NFLOWS],
    /// The family each flow is installed in by `setup`: IPv6.
    setup_v6: [bool; NFLOWS],
    /// What the data regions hold (they are contiguous from bases[0]).
    shadow: Vec<u8>,
    exp_hdr: [VecDeque<ExpEntry>; 2],
    /// The last expected entry of the port is still open (coalescing).
    open: [bool; 2],
    exp_rx: [VecDeque<(u16, u32, Vec<u8>)>; 2],
    coalesce: u32,
    hdrq_small: bool,
    /// The last frame sent (for replays).
    last: Option<(PeerFrame, u32, usize)>,
    frames: u64,
    /// The case's initial rx_isn for both flows.
    isn0: u32,
}

fn payload(salt: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| {
            let x = salt.wrapping_add(i).wrapping_mul(0x9e37_79b1);
            ((x >> 24) ^ (x >> 11)) as u8
        })
        .collect()
}

/// The largest payload the MTU carries with the headers of `pf`.
fn max_payload(pf: &PeerFrame, v6: bool) -> usize {
    let ip = if v6 { 40 } else { 20 + 4 * pf.ip_opts as usize };
    MTU - ip - 20 - 4 * pf.tcp_opts as usize
}

/// The TCP header (with NOP options, checksum 0) and payload of `pf`.
fn tcp_segment(pf: &PeerFrame, seq: u32, sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let thl = 20 + 4 * pf.tcp_opts as usize;
    let mut t = vec![1u8; thl];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&(1 + pf.ack as u32 * 1000).to_be_bytes());
    t[12] = ((thl / 4) as u8) << 4;
    t[13] = pf.flags;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    t[16..18].copy_from_slice(&[0, 0]);
    t[18..20].copy_from_slice(&pf.urg.to_be_bytes());
    t.extend(payload(pf.salt, len));
    t
}

/// Breaks the checksum of the TCP segment of `seg_len` bytes that ends
/// `f`, as `pf.bad_csum` asks.
fn corrupt(pf: &PeerFrame, f: &mut [u8], seg_len: usize) {
    match pf.bad_csum {
        1 => {
            let i = f.len() - 1 - pf.salt as usize % (seg_len - 16);
            f[i] ^= 0x40;
        }
        2 => f[f.len() - seg_len + 16] ^= 0x01,
        _ => {}
    }
}

fn delta_str(d: &[u64; NPSTAT]) -> String {
    d.iter()
        .enumerate()
        .filter(|(_, v)| **v != 0)
        .map(|(i, v)| format!("{i}:{v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

impl Peer {
    fn new(coalesce: u32, hdrq_small: bool, isn0: u32, setup_v6: [bool; NFLOWS]) -> Self {
        let mut tb = Tb::with_ram(Topology::TwoPort, Impair::default(), RAM_SIZE);
        let d = &mut tb.drv[0];
        let base = d.alloc(REGION * NREGIONS as u64);
        let bases = [base, base + REGION];
        let lists = [d.alloc(4096), d.alloc(4096)];
        let mut shadow = vec![0u8; (REGION * NREGIONS as u64) as usize];
        for (i, b) in shadow.iter_mut().enumerate() {
            *b = (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0];
        }
        d.mem.write(base, &shadow).unwrap();
        let mut p = Self {
            tb,
            bases,
            keys: [None; NREGIONS],
            lists,
            flows: [None, None],
            last_isn: [isn0; NFLOWS],
            last_v6: setup_v6,
            setup_v6,
            shadow,
            exp_hdr: [VecDeque::new(), VecDeque::new()],
            open: [false; 2],
            exp_rx: [VecDeque::new(), VecDeque::new()],
            coalesce,
            hdrq_small,
            last: None,
            frames: 0,
            isn0,
        };
        p.configure_ports();
        p.setup();
        p
    }

    fn configure_ports(&mut self) {
        let small = self.hdrq_small;
        if small {
            // The NIC sees a queue disabled at its next scan only.
            for p in 0..2usize {
                let d = &self.tb.drv[0];
                d.bar.w32(d.ports[p].hdrq.reg + Q_CTRL, 0);
            }
            self.tb.step();
        }
        let d = &mut self.tb.drv[0];
        for p in 0..2usize {
            let b = port_block(p as u32);
            d.bar.w32(b + PORT_COALESCE_BYTES, self.coalesce);
            if small {
                let q = &mut d.ports[p].hdrq;
                d.bar.w32(q.reg + Q_SIZE, 4);
                d.bar.w32(q.reg + Q_PROD, 0);
                d.bar.w32(q.reg + Q_CONS, 0);
                d.bar.w32(q.reg + Q_CTRL, Q_CTRL_ENABLE);
                (q.size, q.idx) = (4, 0);
            }
            d.post_rx(p, 64);
        }
        self.tb.step();
    }

    /// Registers both regions and installs both flows with 64 KiB posted.
    fn setup(&mut self) {
        for r in 0..NREGIONS {
            self.register(r);
        }
        for f in 0..NFLOWS as u8 {
            self.run(&Op::Install {
                flow: f,
                isn: IsnSel::Raw(self.isn0.wrapping_add(f as u32 * 7919)),
                ring: None,
                wscale: 7,
                v6: self.setup_v6[f as usize],
            });
            // The window the host offers: 8 MiB from the cursor.
            self.run(&Op::HostAck {
                flow: f,
                ack: CurSel::Plus(0),
                win: 0xffff,
                flags: ACK,
            });
            for s in 0..4u32 {
                self.run(&Op::Post {
                    flow: f,
                    region: f,
                    off: s * 16_384,
                    len: 16_384,
                });
            }
        }
        assert!(self.flows.iter().all(|f| f.is_some()), "setup flows");
    }

    fn register(&mut self, r: usize) {
        let pages: Vec<u8> = (0..REGION / 4096)
            .flat_map(|i| (self.bases[r] + i * 4096).to_le_bytes())
            .collect();
        self.tb.drv[0].mem.write(self.lists[r], &pages).unwrap();
        let c = CmdMrReg {
            opcode: CMD_MR_REG,
            access: MR_ACCESS_ALL,
            npages: (REGION / 4096) as u32,
            first_off: 0,
            length: REGION,
            page_list: self.lists[r],
            ..Default::default()
        };
        let c = self.tb.cmd(0, c.encode());
        assert_eq!(c.status, ST_OK, "region registration");
        self.keys[r] = Some(c.result);
    }

    fn pstats(&self, p: u8) -> [u64; NPSTAT] {
        let mut s = [0u64; NPSTAT];
        for (i, v) in s.iter_mut().enumerate() {
            *v = self.tb.drv[0].pstat(p as u32, i);
        }
        s
    }

    /// Sequence number and payload length of a frame against tuple `t`.
    fn seq_len(&self, pf: &PeerFrame, t: usize, v6: bool) -> (u32, usize) {
        let (cursor, post_end, isn, ooo) = match self.flows.get(t.min(1)).and_then(|f| f.as_ref()) {
            Some(f) => (f.cursor, f.posted_end(), f.rx_isn, f.ooo.clone()),
            None => (0, 0, self.last_isn[t.min(1)], Vec::new()),
        };
        let s = |o: u64| isn.wrapping_add(o as u32);
        let seq = match pf.seq {
            SeqSel::Cursor(d) => s(cursor).wrapping_add(d as i32 as u32),
            SeqSel::Back(x) => s(cursor).wrapping_sub(x as u32),
            SeqSel::InPosted(fr) => {
                let room = post_end.saturating_sub(cursor);
                s(cursor + (room as u128 * fr as u128 / 65_536) as u64)
            }
            SeqSel::PostEnd(d) => s(post_end).wrapping_add(d as i32 as u32),
            SeqSel::Ooo(i, d) => match ooo.get(i as usize % ooo.len().max(1)) {
                Some(&(a, b)) => s(if i % 2 == 0 { a } else { b }).wrapping_add(d as i32 as u32),
                None => s(cursor).wrapping_add(d as i32 as u32),
            },
            SeqSel::Ahead(x) => s(cursor).wrapping_add((1u32 << 31).wrapping_sub(x)),
            SeqSel::Behind(x) => s(cursor).wrapping_sub(1 << 31).wrapping_add(x),
            SeqSel::BelowZero(x) => isn.wrapping_sub(x as u32),
            SeqSel::Raw(v) => v,
        };
        let max = max_payload(pf, v6);
        let len = match pf.len {
            LenSel::Zero => 0,
            LenSel::One => 1,
            LenSel::Small(n) => n as usize,
            LenSel::Max => max,
            LenSel::OverMax => max + 1,
            LenSel::ToPostEnd(d) => {
                let o = seq.wrapping_sub(s(cursor)) as i32 as i128 + cursor as i128;
                let n = post_end as i128 - o + d as i128;
                n.clamp(0, max as i128) as usize
            }
        };
        (seq, len)
    }

    /// The IPv4 frame of `pf`.
    fn build4(&self, pf: &PeerFrame, seq: u32, len: usize) -> Vec<u8> {
        let (_, src, sport, dst, dport) = TUPLES[pf.tuple as usize % TUPLES.len()];
        let ihl = 20 + 4 * pf.ip_opts as usize;
        let thl = 20 + 4 * pf.tcp_opts as usize;
        let tot = ihl + thl + len;
        let mut f = vec![0u8; 14 + ihl];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..14 + ihl];
        ip[0] = 0x40 | (ihl / 4) as u8;
        ip[1] = pf.tos;
        ip[2..4].copy_from_slice(&(tot as u16).to_be_bytes());
        let frag: u16 = match pf.frag {
            1 => 0x2000,
            2 => 0x0010,
            3 => 0x4000,
            _ => 0,
        };
        ip[6..8].copy_from_slice(&frag.to_be_bytes());
        ip[8] = pf.ttl;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        for b in &mut ip[20..] {
            *b = 1; // NOP options
        }
        zeronic_nic::frame::set_ipv4_csum(ip);
        let t0 = 14 + ihl;
        f.extend(tcp_segment(pf, seq, sport, dport, len));
        let mut c = zeronic_nic::csum::pseudo_v4(src, dst, (thl + len) as u16);
        c.add(&f[t0..]);
        f[t0 + 16..t0 + 18].copy_from_slice(&c.finish().to_le_bytes());
        corrupt(pf, &mut f, thl + len);
        f.extend((0..pf.pad).map(|i| i ^ 0x5a));
        f
    }

    /// The IPv6 frame of `pf`, and how many of the `len` payload bytes
    /// its payload length leaves out (they follow as padding).
    fn build6(&self, pf: &PeerFrame, seq: u32, len: usize) -> (Vec<u8>, usize) {
        let (_, src4, sport, dst4, dport) = TUPLES[pf.tuple as usize % TUPLES.len()];
        let (src, dst) = if pf.v6.mapped {
            (ipv4_mapped(src4), ipv4_mapped(dst4))
        } else {
            (ip6_of(src4), ip6_of(dst4))
        };
        let thl = 20 + 4 * pf.tcp_opts as usize;
        let short = match pf.v6.plen {
            PlenSel::Short(k) => len.min(k as usize),
            _ => 0,
        };
        let mut f = vec![0u8; 14 + 40];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        let first = 6 << 28 | u32::from(pf.tos) << 20 | pf.v6.label & 0xf_ffff;
        f[14..18].copy_from_slice(&first.to_be_bytes());
        f[18..20].copy_from_slice(&((thl + len - short) as u16).to_be_bytes());
        f[20] = 6;
        f[21] = pf.ttl;
        f[22..38].copy_from_slice(&src);
        f[38..54].copy_from_slice(&dst);
        let seg = tcp_segment(pf, seq, sport, dport, len);
        f.extend_from_slice(&seg[..thl + len - short]);
        l4_csum(&mut f, 54 + 16, 6);
        corrupt(pf, &mut f, thl + len - short);
        f.extend_from_slice(&seg[thl + len - short..]);
        match pf.v6.nh {
            Some(nh) if is_ipv6_ext_header(nh) => insert_ext6(&mut f, nh),
            Some(nh) => f[20] = nh,
            None => {}
        }
        f.extend((0..pf.pad).map(|i| i ^ 0x5a));
        let plen = match pf.v6.plen {
            PlenSel::Long(k) => Some(f.len() - 54 + k as usize),
            PlenSel::BelowTcp(v) => Some(v as usize % thl),
            _ => None,
        };
        if let Some(v) = plen {
            f[18..20].copy_from_slice(&(v as u16).to_be_bytes());
        }
        f.truncate(f.len().saturating_sub(pf.v6.cut as usize));
        (f, short)
    }

    /// The frame of `pf` goes out as IPv6 (else IPv4).
    fn frame_v6(&self, pf: &PeerFrame) -> bool {
        let t = pf.tuple as usize % TUPLES.len();
        self.last_v6[t.min(1)] != pf.other_family
    }

    /// Sends one frame and checks everything it may have done.
    fn send(&mut self, pf: &PeerFrame, salt: u32, len_override: Option<usize>) {
        let t = pf.tuple as usize % TUPLES.len();
        let v6 = self.frame_v6(pf);
        let (seq, mut len) = self.seq_len(pf, t, v6);
        if let Some(l) = len_override {
            len = l;
        }
        let pf = PeerFrame { salt, ..pf.clone() };
        self.last = Some((pf.clone(), seq, len));
        let bytes = if v6 {
            let (bytes, short) = self.build6(&pf, seq, len);
            // The bytes past the payload length are padding.
            len -= short;
            bytes
        } else {
            self.build4(&pf, seq, len)
        };
        let port = TUPLES[t].0;
        let p = port as usize;
        let ihl = if v6 { 40 } else { 20 + 4 * pf.ip_opts as usize };
        let thl = 20 + 4 * pf.tcp_opts as usize;
        let csum_ok = pf.bad_csum == 0;
        let frag = !v6 && (pf.frag == 1 || pf.frag == 2);
        // An IPv6 frame as the NIC parses it: a payload length past the
        // frame's end (or a cut fixed header) is malformed; a next header
        // other than TCP takes the normal path (whatever follows), TCP
        // needs its whole header within the payload length.
        let plen = bytes
            .get(18..20)
            .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize);
        let v6_nh = bytes.get(20).copied().filter(|_| v6);
        let v6_malformed = v6
            && match plen {
                Some(plen) if 54 + plen <= bytes.len() => v6_nh == Some(6) && plen < thl,
                _ => true,
            };
        let v6_not_tcp = v6 && !v6_malformed && v6_nh != Some(6);
        // IPv6 frames match IPv6 flows only, IPv4 frames IPv4 flows.
        let flow = (t < NFLOWS)
            .then(|| self.flows[t].clone())
            .flatten()
            .filter(|f| f.v6 == v6 && !(v6 && pf.v6.mapped));
        let ce = pf.tos & 3 == 3;
        let label = if v6 { pf.v6.label & 0xf_ffff } else { 0 };
        let shape = (1 + pf.ack as u32 * 1000, pf.tos, pf.ttl, ihl, thl, label);

        let mut want = [0u64; NPSTAT];
        want[PSTAT_RX_FRAMES] = 1;
        want[PSTAT_RX_BYTES] = bytes.len() as u64;
        let mut writes: Vec<(u64, usize, usize)> = Vec::new();
        let mut placed_range = None;
        let what;
        if bytes.len() > MTU + 14 || v6_malformed {
            what = "malformed";
            want[PSTAT_RX_MALFORMED] = 1;
        } else if v6_not_tcp {
            what = "not IPv6/TCP";
            want[PSTAT_RX_NORMAL] = 1;
            let ext = v6_nh.is_some_and(is_ipv6_ext_header);
            want[PSTAT_RX_V6_EXTHDR] = ext as u64;
            self.exp_rx[p].push_back((0, 0, bytes.clone()));
        } else if frag || flow.is_none() {
            what = "normal";
            want[PSTAT_RX_NORMAL] = 1;
            let fl = if frag {
                0
            } else if csum_ok {
                RXF_TCP | RXF_CSUM_OK
            } else {
                RXF_TCP | RXF_CSUM_BAD
            };
            self.exp_rx[p].push_back((fl, 0, bytes.clone()));
        } else if !csum_ok {
            what = "csum";
            want[PSTAT_RX_CSUM_ERR] = 1;
        } else {
            let rf = flow.clone().unwrap();
            let o = rf.off(seq);
            let plan = match o {
                None => Plan::Below,
                Some(_) if len == 0 => Plan::Dup,
                Some(_) if pf.flags & ACK == 0 || pf.flags & (SYN | RST) != 0 => Plan::Unacceptable,
                Some(o) => rf.plan(o, len as u64, &self.bases),
            };
            let dup = matches!(plan, Plan::Dup) && len > 0;
            if dup
                || matches!(
                    plan,
                    Plan::Below | Plan::NoSpace | Plan::OooFull | Plan::Unacceptable
                )
            {
                if dup {
                    what = "dup";
                    want[PSTAT_RX_DUP_FRAMES] = 1;
                    want[PSTAT_RX_DUP_BYTES] = len as u64;
                } else if matches!(plan, Plan::Unacceptable) {
                    what = "unacceptable";
                    want[PSTAT_RX_UNACCEPTABLE] = 1;
                } else {
                    what = "fallback";
                    want[PSTAT_RX_FALLBACK] = 1;
                    want[PSTAT_RX_OOO_FULL] = matches!(plan, Plan::OooFull) as u64;
                }
                want[PSTAT_RX_NORMAL] = 1;
                want[PSTAT_HDRQ_ENTRIES] = self.open[p] as u64;
                self.open[p] = false;
                let fl = RXF_TCP | RXF_CSUM_OK | RXF_FLOW;
                self.exp_rx[p].push_back((fl, rf.idx, bytes.clone()));
            } else {
                let o = o.unwrap();
                let at_cursor = matches!(plan, Plan::Place { start, .. } if start == rf.cursor);
                // The rebuilt IP length must fit 16 bits: an IPv6 payload
                // length does not count the fixed header.
                let ip_hdr = if v6 { 0 } else { ihl };
                let limit =
                    (self.coalesce as u64).min((IPV4_MAX_TOT_LEN as usize - ip_hdr - thl) as u64);
                let merge = at_cursor
                    && self.open[p]
                    && self.exp_hdr[p].back().is_some_and(|x| {
                        x.e.flow == rf.idx
                            && x.e.flags & (HDRF_OOO | HDRF_DUP | HDRF_NO_PAYLOAD) == 0
                            && pf.flags & !(ACK | PSH) == 0
                            && x.e.tcp_flags as u8 & !(ACK | PSH) == 0
                            && x.e.seq.wrapping_add(x.e.len) == seq
                            && x.shape == shape
                            && !ce
                            && x.e.len as u64 + len as u64 <= limit
                            && x.e.nsegs < u16::MAX
                    });
                let need = if merge { 0 } else { 1 + self.open[p] as u32 };
                let q = self.tb.drv[0].ports[p].hdrq;
                let prod = self.tb.drv[0].bar.r32(q.reg + Q_PROD);
                let free = q.size - prod.wrapping_sub(q.idx);
                if free < need {
                    what = "hdrq full";
                    want[PSTAT_RX_HDRQ_FULL] = 1;
                } else {
                    want[PSTAT_RX_SPLIT] = 1;
                    let mut rf = rf;
                    let cursor_before = rf.cursor;
                    let (mut hflags, mut placed) = (0u16, 0u64);
                    match plan {
                        Plan::Place {
                            start,
                            end,
                            writes: w,
                        } => {
                            what = "place";
                            writes = w;
                            placed = end - start;
                            placed_range = Some((start, end));
                            rf.mark(start, end);
                            if start > cursor_before {
                                hflags |= HDRF_OOO;
                                want[PSTAT_RX_OOO_FRAMES] = 1;
                            }
                            assert_eq!(start, o, "a placement writes its whole payload");
                            want[PSTAT_RX_PLACED_BYTES] = placed;
                        }
                        _ => {
                            what = "no payload";
                            hflags |= HDRF_NO_PAYLOAD;
                        }
                    }
                    let hdr_len = (14 + ihl + thl).min(HDRQ_HDR_MAX);
                    let hdr = bytes[..hdr_len].to_vec();
                    if merge {
                        want[PSTAT_RX_COALESCED] = 1;
                        let x = self.exp_hdr[p].back_mut().unwrap();
                        x.e.len += len as u32;
                        x.e.placed += placed as u32;
                        x.e.cursor = rf.cursor;
                        x.e.nsegs += 1;
                        x.e.hdr_len = hdr_len as u16;
                        x.e.tcp_flags = pf.flags as u16;
                        x.e.flags |= HDRF_COALESCED;
                        x.hdr = hdr;
                    } else {
                        let flush_now = self.coalesce == 0 || hflags != 0 || ce;
                        want[PSTAT_HDRQ_ENTRIES] = self.open[p] as u64 + flush_now as u64;
                        self.open[p] = !flush_now;
                        self.exp_hdr[p].push_back(ExpEntry {
                            e: HdrEntry {
                                status: ST_OK,
                                flags: hflags,
                                flow: rf.idx,
                                seq,
                                len: len as u32,
                                stream_off: o,
                                cursor: rf.cursor,
                                placed: placed as u32,
                                nsegs: 1,
                                hdr_len: hdr_len as u16,
                                port: port as u16,
                                tcp_flags: pf.flags as u16,
                                ..Default::default()
                            },
                            hdr,
                            rx_isn: rf.rx_isn,
                            cursor_before,
                            shape,
                        });
                    }
                    self.flows[t] = Some(rf);
                }
            }
        }

        let before = self.pstats(port);
        {
            let now = self.tb.now;
            let mut d = lock(&self.tb.model.guests[0].dev);
            d.rx_frame(port as u32, &mut Frame::owned(bytes.clone()), now);
        }
        self.frames += 1;
        let after = self.pstats(port);
        let mut got = [0u64; NPSTAT];
        for i in 0..NPSTAT {
            got[i] = after[i] - before[i];
        }
        let ctx = || {
            format!(
                "frame {what}: tuple {t} v6 {v6} seq {seq:#x} len {len} flags {:#x} ihl {ihl} \
                 thl {thl} pad {} frag {} csum {} {:?} (flow {:?}, placed {placed_range:?})",
                pf.flags,
                pf.pad,
                pf.frag,
                pf.bad_csum,
                pf.v6,
                flow.as_ref()
                    .map(|f| (f.idx, f.rx_isn, f.cursor, f.posted_end(), &f.ooo)),
            )
        };
        assert_eq!(
            delta_str(&got),
            delta_str(&want),
            "counters (index:delta) after {}",
            ctx()
        );
        // Memory: exactly the reference's writes, nothing else.
        let mut expect = self.shadow.clone();
        let pay = payload(salt, len);
        for &(addr, pi, n) in &writes {
            let a = (addr - self.bases[0]) as usize;
            expect[a..a + n].copy_from_slice(&pay[pi..pi + n]);
        }
        let mut ram = vec![0u8; expect.len()];
        self.tb.drv[0].mem.read(self.bases[0], &mut ram).unwrap();
        if ram != expect {
            let i = (0..ram.len()).find(|&i| ram[i] != expect[i]).unwrap();
            panic!(
                "region byte {:#x} (region {}, offset {:#x}) is {:#x}, want {:#x} after {}",
                self.bases[0] + i as u64,
                i as u64 / REGION,
                i as u64 % REGION,
                ram[i],
                expect[i],
                ctx()
            );
        }
        self.shadow = expect;
        self.check_state();
    }

    /// The model's flows agree with the reference.
    fn check_state(&self) {
        let mut d = lock(&self.tb.model.guests[0].dev);
        for (t, rf) in self.flows.iter().enumerate() {
            let (port, src, sport, dst, dport) = TUPLES[t];
            let key4 = (
                port as u16,
                ipv4_mapped(dst),
                dport,
                ipv4_mapped(src),
                sport,
            );
            let key6 = (port as u16, ip6_of(dst), dport, ip6_of(src), sport);
            // The tuple of the flow's family only.
            let v6 = rf.as_ref().is_some_and(|f| f.v6);
            let (key, other) = if v6 { (key6, key4) } else { (key4, key6) };
            assert_eq!(d.flows.lookup(&other), None, "flow {t} in the other family");
            let idx = d.flows.lookup(&key);
            match rf {
                None => assert_eq!(idx, None, "flow {t} removed but still installed"),
                Some(rf) => {
                    assert_eq!(idx, Some(rf.idx), "flow {t} index");
                    let f = d.flows.get_mut(rf.idx).unwrap();
                    assert_eq!(f.cursor, rf.cursor, "flow {t} cursor");
                    assert_eq!(
                        f.ooo_ranges(),
                        rf.ooo.len(),
                        "flow {t} ooo ranges {:?}",
                        rf.ooo
                    );
                    if rf.ring.is_none() {
                        assert_eq!(f.posted(), rf.segs.len(), "flow {t} MS List {:?}", rf.segs);
                    }
                    assert!(f.ooo_ranges() <= FLOW_MAX_OOO as usize);
                    assert!(f.posted() <= MS_PER_FLOW as usize);
                }
            }
        }
        assert!(d.flows.used() <= NFLOWS);
    }

    /// End of a delivery batch: the open entries are published.
    fn flush(&mut self) {
        let before = [0, 1].map(|p| self.tb.drv[0].pstat(p, PSTAT_HDRQ_ENTRIES));
        {
            let now = self.tb.now;
            let mut d = lock(&self.tb.model.guests[0].dev);
            d.rx_flush(now);
        }
        for (p, before) in before.into_iter().enumerate() {
            let after = self.tb.drv[0].pstat(p as u32, PSTAT_HDRQ_ENTRIES);
            assert_eq!(
                after - before,
                self.open[p] as u64,
                "open entry published at the end of the batch"
            );
            self.open[p] = false;
        }
    }

    fn reap(&mut self, hdr: bool) {
        for p in 0..2usize {
            let rx = self.tb.drv[0].reap_rx(p);
            let n = rx.len() as u32;
            for (c, data) in rx {
                let Some((fl, flow, bytes)) = self.exp_rx[p].pop_front() else {
                    panic!("unexpected RX completion {c:?}");
                };
                assert_eq!(
                    (c.status, c.flags, c.flow),
                    (ST_OK, fl, flow),
                    "RX completion"
                );
                assert_eq!(data, bytes, "RX completion bytes");
            }
            self.tb.drv[0].post_rx(p, n);
            if !hdr {
                continue;
            }
            assert!(!self.open[p]);
            for (e, h) in self.tb.drv[0].reap_hdr(p) {
                let Some(x) = self.exp_hdr[p].pop_front() else {
                    panic!("unexpected header entry {e:?}");
                };
                check_entry(&e, &h, &x);
            }
        }
        if hdr || !self.hdrq_small {
            for p in 0..2 {
                assert!(
                    self.exp_hdr[p].is_empty(),
                    "header entries missing: {:?}",
                    self.exp_hdr[p]
                );
            }
        }
        for p in 0..2 {
            assert!(self.exp_rx[p].is_empty(), "RX completions missing");
        }
    }

    fn flow_ref(&self, f: u8) -> Option<&RefFlow> {
        self.flows[f as usize % NFLOWS].as_ref()
    }

    fn run(&mut self, op: &Op) {
        match *op {
            Op::Peer(ref pf) => {
                self.send(pf, pf.salt, None);
                self.flush();
            }
            Op::Batch(ref pfs) => {
                // Sequence numbers follow the reference as it moves: a
                // frame at the cursor continues the previous one.
                for pf in pfs {
                    self.send(pf, pf.salt, None);
                }
                self.flush();
            }
            Op::Stream(ref base, ref lens, ref odd) => {
                self.send(base, base.salt, None);
                for (i, &(len, flags)) in lens.iter().enumerate() {
                    let pf = PeerFrame {
                        seq: SeqSel::Cursor(0),
                        len,
                        flags,
                        bad_csum: 0,
                        frag: 0,
                        pad: 0,
                        v6: base.v6.clean(),
                        ..base.clone()
                    };
                    self.send(&pf, base.salt.wrapping_add(i as u32 + 1), None);
                    if let Some((at, ref o)) = *odd {
                        if at as usize % lens.len() == i {
                            self.send(o, o.salt, None);
                        }
                    }
                }
                self.flush();
            }
            Op::Replay(salt, lsel) => {
                if let Some((pf, seq, len)) = self.last.clone() {
                    let pf = PeerFrame {
                        seq: SeqSel::Raw(seq),
                        ..pf
                    };
                    let len = match lsel {
                        0 => len,
                        1 => len / 2,
                        _ => len + 100,
                    };
                    let v6 = self.frame_v6(&pf);
                    self.send(&pf, salt, Some(len.min(max_payload(&pf, v6) + 1)));
                    self.flush();
                }
            }
            Op::Post {
                flow,
                region,
                off,
                len,
            } => {
                let Some(rf) = self.flow_ref(flow).cloned() else {
                    return;
                };
                let r = region as usize % NREGIONS;
                let start = rf.post_end.max(rf.cursor);
                let ok = rf.ring.is_none()
                    && len != 0
                    && self.keys[r].is_some()
                    && off as u64 + len as u64 <= REGION
                    && rf.segs.len() < MS_PER_FLOW as usize
                    && start + len as u64 <= STREAM_OFF_LIMIT;
                let c = CmdMsPost {
                    opcode: CMD_MS_POST,
                    flow: rf.idx,
                    dir: MS_DIR_RECV,
                    mr_key: self.keys[r].unwrap_or(1),
                    mr_offset: off as u64,
                    len,
                    ..Default::default()
                };
                let c = self.tb.cmd(0, c.encode());
                assert_eq!(c.status == ST_OK, ok, "MS_POST {op:?}: {c:?}");
                if ok {
                    assert_eq!(c.result, start, "MS_POST start");
                    let rf = self.flows[flow as usize % NFLOWS].as_mut().unwrap();
                    rf.segs.push(RSeg {
                        start,
                        len: len as u64,
                        region: r,
                        off: off as u64,
                    });
                    rf.post_end = start + len as u64;
                }
            }
            Op::Update { flow, flags, to } => {
                let Some(rf) = self.flow_ref(flow).cloned() else {
                    return;
                };
                let to = match to {
                    CurSel::Plus(d) => rf.cursor + d as u64,
                    CurSel::PostEnd => rf.posted_end(),
                    CurSel::PostEndPlus(d) => rf.posted_end() + d as u64,
                    CurSel::Near4G(d) => (((rf.cursor >> 32) + 1) << 32) - d as u64,
                    CurSel::Back(d) => rf.cursor.wrapping_sub(d as u64),
                    CurSel::Limit => STREAM_OFF_LIMIT,
                    CurSel::Raw(v) => v,
                };
                let c = CmdFlow {
                    opcode: CMD_FLOW_UPDATE,
                    flags,
                    flow: rf.idx,
                    stream_off: to,
                    ..Default::default()
                };
                if flags == FLOWU_EDGE {
                    let c = self.tb.cmd(0, c.encode());
                    let ok = to < STREAM_OFF_LIMIT;
                    assert_eq!(c.status == ST_OK, ok, "FLOWU_EDGE {op:?} to {to:#x}: {c:?}");
                    if ok {
                        let rf = self.flows[flow as usize % NFLOWS].as_mut().unwrap();
                        rf.edge = rf.edge.max(to);
                        assert_eq!(c.result, rf.cursor, "FLOWU_EDGE result");
                    }
                    return;
                }
                let cur = flags & FLOWU_CURSOR != 0;
                let head = flags & FLOWU_RING_HEAD != 0;
                let mut ok = flags & !(FLOWU_CURSOR | FLOWU_RING_HEAD) == 0 && flags != 0;
                if cur && (to < rf.cursor || to >= STREAM_OFF_LIMIT) {
                    ok = false;
                }
                if head {
                    let after = if cur { to } else { rf.cursor };
                    match rf.ring {
                        Some(r) if to >= r.head && to <= after => {}
                        _ => ok = false,
                    }
                }
                let c = self.tb.cmd(0, c.encode());
                assert_eq!(
                    c.status == ST_OK,
                    ok,
                    "FLOW_UPDATE {op:?} to {to:#x}: {c:?}"
                );
                if ok {
                    let rf = self.flows[flow as usize % NFLOWS].as_mut().unwrap();
                    if cur {
                        rf.advance(to);
                    }
                    if head {
                        rf.ring.as_mut().unwrap().head = to;
                    }
                    assert_eq!(c.result, rf.cursor, "FLOW_UPDATE result");
                }
            }
            Op::Remove(flow) => {
                let Some(rf) = self.flow_ref(flow).cloned() else {
                    return;
                };
                let c = CmdFlow {
                    opcode: CMD_FLOW_REMOVE,
                    flow: rf.idx,
                    ..Default::default()
                };
                let c = self.tb.cmd(0, c.encode());
                assert_eq!(c.status, ST_OK, "FLOW_REMOVE");
                self.flows[flow as usize % NFLOWS] = None;
            }
            Op::HostAck {
                flow,
                ack,
                win,
                flags,
            } => {
                let t = flow as usize % NFLOWS;
                // The tuple is the flow's even after a remove: the ACK then
                // changes nothing.
                let (rx_isn, cursor) = self.flows[t]
                    .as_ref()
                    .map_or((self.last_isn[t], 0), |rf| (rf.rx_isn, rf.cursor));
                let rel = match ack {
                    CurSel::Plus(d) => d as u64,
                    CurSel::Back(d) => (d as u64).wrapping_neg(),
                    CurSel::Raw(v) => v,
                    _ => 0,
                };
                let ack_seq = rx_isn.wrapping_add(cursor.wrapping_add(rel) as u32);
                let (_, a_ip, a_port, b_ip, b_port) = TUPLES[t];
                let f = if self.last_v6[t] {
                    ack6_frame(b_port, a_port, ack_seq, win, flags)
                } else {
                    ack_frame(b_ip, a_ip, b_port, a_port, ack_seq, win, flags)
                };
                if let Some(rf) = self.flows[t].as_mut() {
                    if flags & ACK != 0 && flags & (SYN | RST) == 0 {
                        let edge_seq = ack_seq.wrapping_add(u32::from(win) << rf.wscale);
                        if let Some(e) = rf.off(edge_seq) {
                            rf.edge = rf.edge.max(e.min(STREAM_OFF_LIMIT));
                        }
                    }
                }
                // The wire takes it to the other port, where no flow is.
                let other = 1 - FPORT as usize;
                self.exp_rx[other].push_back((RXF_TCP | RXF_CSUM_OK, 0, f.clone()));
                self.tb.drv[0].tx_plain(FPORT as usize, &f, 0);
                self.tb.step();
                let done = self.tb.drv[0].reap_tx(FPORT as usize);
                assert_eq!(done.len(), 1, "host ACK sent");
                assert_eq!(done[0].status, ST_OK, "host ACK sent");
                self.reap(false);
                self.check_state();
            }
            Op::Install {
                flow,
                isn,
                ring,
                wscale,
                v6,
            } => {
                let t = flow as usize % NFLOWS;
                let rx_isn = match isn {
                    IsnSel::Zero => 0,
                    IsnSel::NearWrap(d) => u32::MAX - d as u32,
                    IsnSel::Raw(v) => v,
                };
                // A tuple holds one flow: the family of the installed one
                // (ST_EXISTS), else the one asked for.
                let v6 = self.flows[t].as_ref().map_or(v6, |f| f.v6);
                let mut c = if v6 {
                    flow6(&mut self.tb, 0, rx_isn)
                } else {
                    flow_b(FPORT as u16, rx_isn)
                };
                c.port = FPORT as u16;
                c.opcode = CMD_FLOW_INSTALL;
                c.proto = IPPROTO_TCP;
                c.remote_port = TUPLES[t].2;
                c.rx_wscale = wscale as u16;
                let mut ok = self.flows[t].is_none() && wscale as u16 <= FLOW_MAX_WSCALE;
                let mut rring = None;
                let mut cursor = 0;
                if let Some((region, off, size, so)) = ring {
                    let r = region as usize % NREGIONS;
                    let so = match so {
                        RingOff::Zero => 0,
                        RingOff::Near4G(d) => (1u64 << 32) - d as u64,
                        RingOff::Small(v) => v as u64,
                        RingOff::Limit => STREAM_OFF_LIMIT - size as u64,
                    };
                    c.mode = FLOW_RX_RING;
                    c.ring_key = self.keys[r].unwrap_or(1);
                    c.ring_offset = off as u64;
                    c.ring_size = size;
                    c.stream_off = so;
                    ok &= size != 0
                        && so + size as u64 <= STREAM_OFF_LIMIT
                        && self.keys[r].is_some()
                        && off as u64 + size as u64 <= REGION;
                    rring = Some(RRing {
                        region: r,
                        off: off as u64,
                        size: size as u64,
                        head: so,
                    });
                    cursor = so;
                }
                let c = self.tb.cmd(0, c.encode());
                assert_eq!(c.status == ST_OK, ok, "FLOW_INSTALL {op:?}: {c:?}");
                if ok {
                    let rf = RefFlow::new(c.result as u32, rx_isn, cursor, rring, wscale, v6);
                    self.flows[t] = Some(rf);
                    self.last_isn[t] = rx_isn;
                    self.last_v6[t] = v6;
                }
            }
            Op::Inval(region) => {
                let r = region as usize % NREGIONS;
                let Some(key) = self.keys[r] else { return };
                assert_eq!(self.tb.inval_mr(0, key), ST_OK);
                self.keys[r] = None;
                for rf in self.flows.iter_mut().flatten() {
                    rf.segs.retain(|g| g.region != r);
                    if rf.ring.is_some_and(|g| g.region == r) {
                        rf.ring_dead = true;
                    }
                }
                self.register(r);
            }
            Op::Reset => {
                self.reset();
                self.setup();
            }
            Op::ReapHdr => self.reap(true),
            Op::Step => self.tb.step(),
        }
    }

    fn reset(&mut self) {
        let d = &mut self.tb.drv[0];
        d.bar.w32(REG_DEV_CTRL, DEV_CTRL_RESET);
        self.tb.step();
        let d = &mut self.tb.drv[0];
        let bar = d.bar.clone();
        let conf = |q: &mut Q| {
            bar.w32(q.reg + Q_CTRL, 0);
            bar.w64(q.reg + Q_BASE, q.base);
            bar.w32(q.reg + Q_SIZE, q.size);
            bar.w32(q.reg + Q_PROD, 0);
            bar.w32(q.reg + Q_CONS, 0);
            bar.w32(q.reg + Q_CTRL, Q_CTRL_ENABLE);
            q.idx = 0;
        };
        conf(&mut d.cmdq);
        conf(&mut d.cmdcq);
        conf(&mut d.evq);
        for p in 0..2 {
            let pq = &mut d.ports[p];
            for q in [
                &mut pq.txq,
                &mut pq.txcq,
                &mut pq.rxq,
                &mut pq.rxcq,
                &mut pq.hdrq,
            ] {
                conf(q);
            }
            bar.w32(port_block(p as u32) + PORT_MTU, MTU as u32);
            bar.w32(port_block(p as u32) + PORT_CTRL, PORT_CTRL_ENABLE);
        }
        bar.w32(REG_DEV_CTRL, DEV_CTRL_ENABLE);
        self.tb.step();
        self.flows = [None, None];
        self.keys = [None; NREGIONS];
        self.exp_hdr = [VecDeque::new(), VecDeque::new()];
        self.exp_rx = [VecDeque::new(), VecDeque::new()];
        self.open = [false; 2];
        // The small header queue keeps its size (conf reused it).
        let small = self.hdrq_small;
        self.hdrq_small = false;
        self.configure_ports();
        self.hdrq_small = small;
    }
}

/// One header entry against the reference's, and on its own.
fn check_entry(e: &HdrEntry, h: &[u8], x: &ExpEntry) {
    // On its own: what any entry must satisfy.
    assert_eq!(
        e.seq.wrapping_sub(x.rx_isn),
        e.stream_off as u32,
        "stream_off disagrees with seq: {e:?}"
    );
    assert!(e.placed <= e.len, "placed > len: {e:?}");
    let kind = e.flags & (HDRF_DUP | HDRF_OOO | HDRF_NO_PAYLOAD);
    assert!(kind.count_ones() <= 1, "incoherent flags: {e:?}");
    // A frame over placed bytes takes the normal path: an entry's payload
    // is always bytes its own packets wrote, all of them.
    assert_eq!(e.flags & HDRF_DUP, 0, "a DUP entry: {e:?}");
    assert_eq!(
        e.placed, e.len,
        "an entry over bytes it did not write: {e:?}"
    );
    if e.flags & HDRF_NO_PAYLOAD != 0 {
        assert_eq!((e.len, e.placed), (0, 0), "NO_PAYLOAD with payload: {e:?}");
    }
    if e.flags & HDRF_OOO != 0 {
        assert!(
            e.stream_off > x.cursor_before,
            "OOO at or below the cursor: {e:?}"
        );
        assert!(e.placed > 0);
    }
    if kind == 0 && e.len > 0 {
        assert!(
            e.stream_off <= x.cursor_before,
            "in-order entry above the cursor: {e:?}"
        );
        assert!(
            e.cursor >= e.stream_off + e.len as u64,
            "cursor short of an in-order entry: {e:?}"
        );
    }
    assert_eq!(
        e.flags & HDRF_COALESCED != 0,
        e.nsegs > 1,
        "COALESCED vs nsegs: {e:?}"
    );
    assert!(e.cursor >= x.cursor_before, "cursor went back: {e:?}");
    // Against the reference.
    assert_eq!(*e, x.e, "header entry");
    assert_eq!(h, &x.hdr[..], "header bytes");
}

/// Found by the fuzzer below. A packet starting below stream offset 0 (a
/// keepalive or zero-window probe at rx_isn - 1 while nothing arrived since
/// the install, a retransmission from before the install that ends past it)
/// has no stream offset: it takes the normal path whole, nothing is placed
/// and no header entry names it. The model used to report it as a
/// duplicate with `stream_off` 0, which disagrees with its `seq` (the driver
/// drops such an entry, so the probe went unanswered), and to leave the new
/// bytes of the straddling one unplaced and unreported.
#[test]
fn below_stream_offset_zero_takes_the_normal_path() {
    let mut tb = Tb::new(Topology::TwoPort, Impair::default());
    let buf = tb.drv[0].alloc(65_536);
    let key = tb.reg_mr(0, buf, 65_536, MR_ACCESS_ALL).unwrap();
    let isn = 1000u32;
    let flow = tb.install(0, flow_b(FPORT as u16, isn)).unwrap();
    assert_eq!(tb.post(0, flow, key, 0, 65_536).status, ST_OK);
    tb.drv[0].post_rx(FPORT as usize, 4);
    let probe = tcp_frame(A_IP, B_IP, 4000, 5001, isn - 1, &[]);
    let retx = tcp_frame(A_IP, B_IP, 4000, 5001, isn - 22, &payload(7, 1037));
    let next = tcp_frame(A_IP, B_IP, 4000, 5001, isn, &payload(9, 100));
    {
        let now = tb.now;
        let mut d = lock(&tb.model.guests[0].dev);
        for f in [&probe, &retx, &next] {
            d.rx_frame(FPORT as u32, &mut Frame::owned(f.clone()), now);
        }
        d.rx_flush(now);
    }
    let d = &mut tb.drv[0];
    let rx = d.reap_rx(FPORT as usize);
    assert_eq!(rx.len(), 2, "both below offset 0 take the normal path");
    for ((c, data), f) in rx.iter().zip([&probe, &retx]) {
        assert_eq!(
            (c.status, c.flags, c.flow),
            (ST_OK, RXF_TCP | RXF_CSUM_OK | RXF_FLOW, flow)
        );
        assert_eq!(data, f);
    }
    assert_eq!(d.pstat(FPORT as u32, PSTAT_RX_FALLBACK), 2);
    // Only the in-order packet at offset 0 is placed and reported.
    let hdr = d.reap_hdr(FPORT as usize);
    assert_eq!(hdr.len(), 1, "{hdr:?}");
    let e = hdr[0].0;
    assert_eq!(
        (e.seq, e.stream_off, e.len, e.placed, e.flags),
        (isn, 0, 100, 100, 0)
    );
    let mut got = vec![0u8; 200];
    d.mem.read(buf, &mut got).unwrap();
    let mut want = payload(9, 100);
    want.resize(200, 0);
    assert_eq!(got, want);
}

proptest! {
    // 256 cases keep `cargo test` fast; PROPTEST_CASES=N fuzzes longer
    // (as tests/fuzz.rs).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        .. ProptestConfig::default()
    })]

    #[test]
    fn hostile_peer_against_installed_flows(
        coalesce in prop_oneof![Just(DEFAULT_COALESCE_BYTES), Just(0u32), 1u32..20_000],
        hdrq_small in proptest::bool::weighted(0.2),
        isn in prop_oneof![Just(0u32), (0u32..20_000).prop_map(|d| u32::MAX - d), any::<u32>()],
        setup_v6 in any::<[bool; NFLOWS]>(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let mut p = Peer::new(coalesce, hdrq_small, isn, setup_v6);
        for op in &ops {
            p.run(op);
            p.reap(!p.hdrq_small);
        }
        p.reap(true);
        let d = lock(&p.tb.model.guests[0].dev);
        assert!(d.flows.used() <= NFLOWS);
    }
}

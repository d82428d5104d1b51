//! Fuzzing the whole device like a hostile driver would: arbitrary streams
//! of commands (CMD_MR_REG with aliased, scattered, unaligned or missing
//! pages and wrapping lengths included), flows, MS posts, plain and merge
//! TX with TSO, RX frames from the wire, RX buffer posts, resets, queues
//! re-enabled with odd bases and sizes, producer indices far ahead.
//!
//! Oracles, after every case: the model did not panic; every byte of guest
//! RAM it was not allowed to write is what the driver left there (allowed:
//! the NIC-produced rings of every configuration tried, posted RX buffers,
//! and the pages of registered regions under posted segments or ring
//! targets); it never touched memory outside guest RAM (the window has
//! inaccessible guard pages, so such an access faults the test); and its
//! state stays within the documented bounds.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::ip6::*;
use common::*;
use proptest::prelude::*;
use zeronic_hw::cmd::*;
use zeronic_hw::desc::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;
use zeronic_nic::frame::Frame;
use zeronic_nic::model::{lock, Topology};
use zeronic_nic::wire::{Impair, QUEUE_FRAMES, QUEUE_LIMIT};

const RAM_SIZE: usize = 10 << 20;
/// Data pages the fuzzer registers, posts and sends from.
const POOL_PAGES: u64 = 256;

/// A page of a registration's list.
#[derive(Clone, Copy, Debug)]
enum PageSel {
    Pool(u8),
    /// The previous page again (aliasing).
    Again,
    Outside,
    Unaligned(u8),
}

/// The length of a registration.
#[derive(Clone, Copy, Debug)]
enum Length {
    /// What the list covers.
    Fit,
    /// Such that `first_off + length` wraps around to a sum that one
    /// page covers (only possible with one page: first_off < 4096).
    Wrap(u16),
    Raw(u64),
}

/// A key: one the NIC returned (by index), one with a flipped bit, or any.
#[derive(Clone, Copy, Debug)]
enum KeySel {
    Known(u8),
    Flipped(u8, u8),
    Raw(u64),
}

/// A flow: one the NIC returned (by index), or any index.
#[derive(Clone, Copy, Debug)]
enum FlowSel {
    Known(u8),
    Raw(u32),
}

/// An address: in the data pool, near the end of RAM, or anything.
#[derive(Clone, Copy, Debug)]
enum AddrSel {
    Pool(u32),
    NearEnd(u16),
    Raw(u64),
}

#[derive(Clone, Copy, Debug)]
enum BaseSel {
    Orig,
    OrigPlus(u8),
    Pool(u32),
    Raw(u64),
}

#[derive(Clone, Debug)]
enum Op {
    MrReg {
        access: u32,
        first_off: u32,
        length: Length,
        /// None: the list's length; Some: this count.
        npages: Option<u32>,
        pages: Vec<PageSel>,
        list_unaligned: bool,
        /// Then post a receive segment of the region, if it got a key:
        /// (flow, offset, length).
        then_post: Option<(FlowSel, u16, u16)>,
    },
    MrInval(KeySel),
    FlowInstall {
        port: u16,
        ring: Option<(KeySel, u64, u32)>,
        stream_off: u64,
        rx_isn: u32,
    },
    FlowUpdate {
        flow: FlowSel,
        flags: u16,
        stream_off: u64,
    },
    FlowRemove(FlowSel),
    MsPost {
        flow: FlowSel,
        key: KeySel,
        off: u64,
        len: u32,
        dir: u16,
    },
    RawCmd([u8; 64]),
    TxPlain {
        port: u8,
        len: u16,
        addr: AddrSel,
        csum: Option<(u16, u16)>,
        tagged: bool,
    },
    TxMerge {
        port: u8,
        key: KeySel,
        off: u64,
        pay_len: u32,
        mss: Option<u16>,
        seq: u32,
        /// A header byte to spoil (offset, value).
        spoil: Option<(u8, u8)>,
    },
    TxRaw([u8; 64], AddrSel),
    RxInject {
        port: u8,
        seq: u32,
        len: u16,
        corrupt: bool,
        tos: u8,
        tagged: bool,
    },
    /// A packet into a segment the NIC accepted (by index), at an offset.
    RxAtPosted {
        seg: u8,
        off: u16,
        len: u16,
        corrupt: bool,
    },
    RxRandom(u8, Vec<u8>),
    /// An IPv6 frame (version 2.3/2.4): next header, ports, an extension
    /// header or not, a payload length overridden (malformed when past the
    /// frame's end), bytes cut off the end.
    RxInject6 {
        port: u8,
        nh: u8,
        ports: (u16, u16),
        ext: bool,
        plen: Option<u16>,
        cut: u8,
    },
    /// An n-tuple rule (version 2.4: `RULEF_IPV6` with its block at
    /// `block`, `RULE_ACT_RSS` through `ctx`), rarely valid as a `RawCmd`.
    Rule {
        v6: bool,
        block: AddrSel,
        /// Zero masks (the rule matches its whole family) or these bytes.
        addrs: Option<Vec<u8>>,
        action: u16,
        queue: u16,
        ctx: u16,
        proto: u16,
        port_masks: (u16, u16),
    },
    /// CMD_RSS_CTX_SET of context `ctx` from entries `fill + i` at `table`.
    RssCtx(u16, AddrSel, u8),
    /// PORT_RSS_FIELDS and PORT_RSS_CTRL of a port.
    RssRegs(u8, u32, u32),
    PostRx(u8, AddrSel, u32),
    Coalesce(u8, u32),
    /// Wire impairments (percent loss, reorder, dup; delay in µs).
    Impair(u8, u8, u8, u16),
    /// Reconfigures a queue: (queue, base, size, whether the driver waits
    /// for the NIC to acknowledge the disable first, as the spec asks).
    QueueToggle(u8, BaseSel, u32, bool),
    ProdAhead(u8, u32),
    Reset,
    Step(u8),
}

fn key_sel() -> impl Strategy<Value = KeySel> {
    prop_oneof![
        6 => any::<u8>().prop_map(KeySel::Known),
        1 => (any::<u8>(), 0u8..64).prop_map(|(k, b)| KeySel::Flipped(k, b)),
        1 => any::<u64>().prop_map(KeySel::Raw),
    ]
}

fn addr_sel() -> impl Strategy<Value = AddrSel> {
    prop_oneof![
        6 => (0u32..(POOL_PAGES as u32 * 4096)).prop_map(AddrSel::Pool),
        1 => any::<u16>().prop_map(AddrSel::NearEnd),
        1 => any::<u64>().prop_map(AddrSel::Raw),
    ]
}

/// Lengths around the interesting boundaries.
fn len32() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => 0u32..20_000,
        1 => Just(0),
        1 => 65_000u32..70_000,
        1 => any::<u32>(),
    ]
}

fn off64() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0u64..32_768,
        2 => 0u64..(POOL_PAGES * 4096),
        1 => any::<u64>(),
        1 => Just(u64::MAX),
        1 => (0u64..4096).prop_map(|d| STREAM_OFF_LIMIT - d),
    ]
}

/// Segment and payload lengths, mostly small enough to fit a region.
fn seg_len() -> impl Strategy<Value = u32> {
    prop_oneof![6 => 1u32..16_384, 1 => len32()]
}

/// A page list: mostly valid (a contiguous run or scattered pool pages),
/// sometimes hostile.
fn page_list() -> impl Strategy<Value = Vec<PageSel>> {
    let any_page = prop_oneof![
        6 => any::<u8>().prop_map(PageSel::Pool),
        2 => Just(PageSel::Again),
        1 => Just(PageSel::Outside),
        1 => any::<u8>().prop_map(PageSel::Unaligned),
    ];
    prop_oneof![
        4 => (any::<u8>(), 1u8..24)
            .prop_map(|(s, n)| (0..n).map(|i| PageSel::Pool(s.wrapping_add(i))).collect()),
        3 => proptest::collection::vec(any::<u8>().prop_map(PageSel::Pool), 1..24),
        2 => proptest::collection::vec(any_page, 1..40),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let mr_reg = (
        prop_oneof![8 => 1u32..4, 1 => any::<u32>()],
        prop_oneof![8 => 0u32..4096, 1 => any::<u32>()],
        prop_oneof![
            6 => Just(Length::Fit),
            2 => any::<u16>().prop_map(Length::Wrap),
            1 => any::<u64>().prop_map(Length::Raw),
        ],
        proptest::option::weighted(0.1, any::<u32>()),
        page_list(),
        proptest::bool::weighted(0.05),
        proptest::option::weighted(
            0.6,
            (
                any::<u8>().prop_map(FlowSel::Known),
                any::<u16>(),
                1u16..16_384,
            ),
        ),
    )
        .prop_map(
            |(access, first_off, length, npages, pages, list_unaligned, then_post)| Op::MrReg {
                access,
                first_off,
                length,
                npages,
                pages,
                list_unaligned,
                then_post,
            },
        );
    let install = (
        prop_oneof![8 => 0u16..2, 1 => any::<u16>()],
        proptest::option::weighted(0.3, (key_sel(), off64(), seg_len())),
        prop_oneof![4 => Just(0u64), 1 => off64()],
        prop_oneof![4 => Just(0u32), 1 => any::<u32>()],
    )
        .prop_map(|(port, ring, stream_off, rx_isn)| Op::FlowInstall {
            port,
            ring,
            stream_off,
            rx_isn,
        });
    let flow = prop_oneof![
        8 => any::<u8>().prop_map(FlowSel::Known),
        1 => any::<u32>().prop_map(FlowSel::Raw),
    ];
    let update =
        (flow.clone(), 0u16..5, off64()).prop_map(|(flow, flags, stream_off)| Op::FlowUpdate {
            flow,
            flags,
            stream_off,
        });
    let post = (
        flow.clone(),
        key_sel(),
        off64(),
        seg_len(),
        prop_oneof![8 => Just(0u16), 1 => any::<u16>()],
    )
        .prop_map(|(flow, key, off, len, dir)| Op::MsPost {
            flow,
            key,
            off,
            len,
            dir,
        });
    let raw_cmd = any::<[u8; 64]>().prop_map(|mut b| {
        let op = 1 + b[0] % 11; // CMD_* opcodes and one unknown
        b[0..2].copy_from_slice(&(op as u16).to_le_bytes());
        if op as u16 == CMD_MR_REG {
            b[0] = 0; // registrations only through MrReg: their pages are known
        }
        Op::RawCmd(b)
    });
    let tx_plain = (
        0u8..2,
        prop_oneof![4 => 0u16..9100, 1 => any::<u16>()],
        addr_sel(),
        proptest::option::weighted(0.3, (any::<u16>(), any::<u16>())),
        proptest::bool::weighted(0.2),
    )
        .prop_map(|(port, len, addr, csum, tagged)| Op::TxPlain {
            port,
            len,
            addr,
            csum,
            tagged,
        });
    // Tiny segment sizes with short payloads: a maximal segment count is
    // tests/bounds.rs's job, here it would only cost time.
    let size = prop_oneof![
        2 => (Just(Some(1u16)), 0u32..1500),
        2 => ((1u16..200).prop_map(Some), 0u32..20_000),
        4 => ((200u16..9000).prop_map(Some), 0u32..40_000),
        1 => (proptest::option::of(any::<u16>()), 0u32..300),
        3 => (Just(None), prop_oneof![0u32..9000, 0u32..300]),
        1 => (Just(Some(0u16)), any::<u32>()),
    ];
    let tx_merge = (
        0u8..2,
        key_sel(),
        off64(),
        size,
        0u32..100_000,
        proptest::option::weighted(0.2, (0u8..54, any::<u8>())),
    )
        .prop_map(|(port, key, off, (mss, pay_len), seq, spoil)| Op::TxMerge {
            port,
            key,
            off,
            pay_len,
            mss,
            seq,
            spoil,
        });
    let inject = (
        0u8..2,
        prop_oneof![4 => 0u32..100_000, 1 => any::<u32>()],
        0u16..9000,
        proptest::bool::weighted(0.2),
        prop_oneof![4 => Just(2u8), 1 => Just(3u8), 1 => any::<u8>()],
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(port, seq, len, corrupt, tos, tagged)| Op::RxInject {
            port,
            seq,
            len,
            corrupt,
            tos,
            tagged,
        });
    prop_oneof![
        4 => mr_reg,
        2 => key_sel().prop_map(Op::MrInval),
        3 => install,
        2 => update,
        1 => flow.prop_map(Op::FlowRemove),
        4 => post,
        2 => raw_cmd,
        3 => tx_plain,
        5 => tx_merge,
        1 => (any::<[u8; 64]>(), addr_sel()).prop_map(|(b, a)| Op::TxRaw(b, a)),
        5 => inject,
        4 => (prop_oneof![3 => 0u8..3, 1 => any::<u8>()], 0u16..20_000, 1u16..9000, proptest::bool::weighted(0.1))
            .prop_map(|(seg, off, len, corrupt)| Op::RxAtPosted { seg, off, len, corrupt }),
        1 => (0u8..2, proptest::collection::vec(any::<u8>(), 0..200))
            .prop_map(|(p, b)| Op::RxRandom(p, b)),
        3 => rx6(),
        2 => rule(),
        1 => (0u16..10, addr_sel(), any::<u8>()).prop_map(|(c, a, f)| Op::RssCtx(c, a, f)),
        1 => (0u8..2, prop_oneof![3 => 0u32..0x1_0000, 1 => any::<u32>()], 0u32..4)
            .prop_map(|(p, f, c)| Op::RssRegs(p, f, c)),
        3 => (0u8..2, addr_sel(), prop_oneof![3 => Just(9100u32), 1 => len32()])
            .prop_map(|(p, a, l)| Op::PostRx(p, a, l)),
        1 => (0u8..2, any::<u32>()).prop_map(|(p, c)| Op::Coalesce(p, c)),
        1 => (0u8..30, 0u8..30, 0u8..30, 0u16..500)
            .prop_map(|(l, r, d, us)| Op::Impair(l, r, d, us)),
        1 => (0u8..13, prop_oneof![
                3 => Just(BaseSel::Orig),
                1 => any::<u8>().prop_map(BaseSel::OrigPlus),
                1 => (0u32..(POOL_PAGES as u32 * 4096)).prop_map(BaseSel::Pool),
                1 => any::<u64>().prop_map(BaseSel::Raw)],
            prop_oneof![3 => Just(64u32), 1 => 0u32..300, 1 => any::<u32>()],
            prop_oneof![3 => Just(true), 1 => Just(false)])
            .prop_map(|(q, b, s, h)| Op::QueueToggle(q, b, s, h)),
        1 => (0u8..13, prop_oneof![3 => 0u32..64, 1 => any::<u32>()])
            .prop_map(|(q, a)| Op::ProdAhead(q, a)),
        1 => Just(Op::Reset),
        6 => (0u8..4).prop_map(Op::Step),
    ]
}

fn rx6() -> impl Strategy<Value = Op> {
    (
        0u8..2,
        prop_oneof![3 => Just(6u8), 2 => Just(17u8), 1 => any::<u8>()],
        (any::<u16>(), prop_oneof![Just(5001u16), any::<u16>()]),
        proptest::bool::weighted(0.3),
        proptest::option::weighted(0.2, any::<u16>()),
        prop_oneof![4 => Just(0u8), 1 => any::<u8>()],
    )
        .prop_map(|(port, nh, ports, ext, plen, cut)| Op::RxInject6 {
            port,
            nh,
            ports,
            ext,
            plen,
            cut,
        })
}

fn rule() -> impl Strategy<Value = Op> {
    (
        any::<bool>(),
        addr_sel(),
        proptest::option::weighted(0.5, proptest::collection::vec(any::<u8>(), 64)),
        (
            prop_oneof![5 => 1u16..4, 1 => any::<u16>()],
            0u16..9,
            0u16..9,
        ),
        prop_oneof![2 => Just(0u16), 1 => Just(6u16), 1 => Just(17u16)],
        (
            prop_oneof![Just(0u16), any::<u16>()],
            prop_oneof![Just(0u16), any::<u16>()],
        ),
    )
        .prop_map(
            |(v6, block, addrs, (action, queue, ctx), proto, port_masks)| Op::Rule {
                v6,
                block,
                addrs,
                action,
                queue,
                ctx,
                proto,
                port_masks,
            },
        )
}

/// The driver's view of one queue.
#[derive(Clone, Copy, Debug)]
struct Queue {
    reg: usize,
    entry: usize,
    /// NIC-produced (completion, event, header) queue.
    nic: bool,
    /// The configuration bring-up gave it (restored at reset).
    orig: (u64, u32),
    base: u64,
    size: u32,
    idx: u32,
}

impl Queue {
    fn slot(&self, i: u32) -> u64 {
        let size = self.size.max(1);
        let n = if size.is_power_of_two() {
            i & (size - 1)
        } else {
            i % size
        };
        self.base.wrapping_add(n as u64 * self.entry as u64)
    }
}

const CMDQ: usize = 0;
const CMDCQ: usize = 1;
/// Per port: TXQ, TXCQ, RXQ, RXCQ, HDRQ at 3 + 5 * port + k.
fn port_q(port: u8, k: usize) -> usize {
    3 + 5 * port as usize + k
}

/// What a registration's pages are, so posted segments can be mapped.
#[derive(Clone, Debug)]
struct Reg {
    pages: Vec<u64>,
    first_off: u64,
}

struct Fuzz {
    tb: Tb,
    /// What guest RAM must hold outside `allowed` (the driver's writes).
    shadow: Vec<u8>,
    /// Ranges the NIC may write, [start, end).
    allowed: Vec<(u64, u64)>,
    queues: Vec<Queue>,
    pool: u64,
    lists: u64,
    list_next: u64,
    scratch: u64,
    cookie: u32,
    pending_regs: HashMap<u32, Reg>,
    keys: Vec<(u64, Reg)>,
    /// Flow indices the NIC returned.
    flows: Vec<u32>,
    /// Installs waiting for their completion: (port, rx_isn) by cookie.
    pending_flows: HashMap<u32, (u8, u32)>,
    /// (port, rx_isn) of each installed flow.
    flow_info: HashMap<u32, (u8, u32)>,
    /// Posts waiting for their completion: flow by cookie.
    pending_posts: HashMap<u32, u32>,
    /// Segments the NIC accepted: (flow, start stream offset).
    posted: Vec<(u32, u64)>,
    steps: u32,
    /// A driver-produced ring was reconfigured without waiting for the NIC
    /// to acknowledge the disable (docs/hardware.md §3): the NIC may go on
    /// reading the old ring, now holding whatever the driver wrote there,
    /// and write where those bytes point. Guest RAM is no longer checked
    /// against the allowed ranges from then on (the rest still is).
    unchecked: bool,
}

impl Fuzz {
    fn new() -> Self {
        let mut tb = Tb::with_ram(Topology::TwoPort, Impair::default(), RAM_SIZE);
        let d = &mut tb.drv[0];
        let mut queues = Vec::new();
        let mut add = |q: Q, nic: bool| {
            queues.push(Queue {
                reg: q.reg,
                entry: q.entry,
                nic,
                orig: (q.base, q.size),
                base: q.base,
                size: q.size,
                idx: q.idx,
            })
        };
        add(d.cmdq, false);
        add(d.cmdcq, true);
        add(d.evq, true);
        for p in &d.ports {
            add(p.txq, false);
            add(p.txcq, true);
            add(p.rxq, false);
            add(p.rxcq, true);
            add(p.hdrq, true);
        }
        let pool = d.alloc(POOL_PAGES * 4096);
        let lists = d.alloc(1 << 20);
        let scratch = d.alloc(1 << 20);
        let mut shadow = vec![0u8; RAM_SIZE];
        d.mem.read(0, &mut shadow).unwrap();
        let mut f = Self {
            tb,
            shadow,
            allowed: Vec::new(),
            queues,
            pool,
            lists,
            list_next: 0,
            scratch,
            cookie: 0,
            pending_regs: HashMap::new(),
            keys: Vec::new(),
            flows: Vec::new(),
            pending_flows: HashMap::new(),
            flow_info: HashMap::new(),
            pending_posts: HashMap::new(),
            posted: Vec::new(),
            steps: 0,
            unchecked: false,
        };
        for q in f.queues.clone() {
            f.allow_ring(&q);
        }
        f
    }

    /// What a driver does after bring-up: two registered regions (one
    /// contiguous, one scattered), a flow on each port with 64 KiB of
    /// receive segments, RX buffers on both ports. The hostile stream
    /// starts from a device that moves data.
    fn prologue(&mut self) {
        let contiguous: Vec<PageSel> = (0..32).map(PageSel::Pool).collect();
        let scattered: Vec<PageSel> = (32..64).rev().map(PageSel::Pool).collect();
        for pages in [contiguous, scattered] {
            self.run(&Op::MrReg {
                access: MR_ACCESS_ALL,
                first_off: 0,
                length: Length::Fit,
                npages: None,
                pages,
                list_unaligned: false,
                then_post: None,
            });
        }
        assert_eq!(self.keys.len(), 2, "prologue registrations");
        for port in [1u16, 0] {
            self.run(&Op::FlowInstall {
                port,
                ring: None,
                stream_off: 0,
                rx_isn: 0,
            });
        }
        assert_eq!(self.flows.len(), 2, "prologue flows");
        for (i, key) in [(0u8, 0u8), (1, 1)] {
            for s in 0..4u64 {
                self.run(&Op::MsPost {
                    flow: FlowSel::Known(i),
                    key: KeySel::Known(key),
                    off: s * 16_384,
                    len: 16_384,
                    dir: MS_DIR_RECV,
                });
            }
        }
        for port in 0..2u8 {
            for b in 0..16u32 {
                let at = (64 + port as u32 * 64 + b * 3) * 4096;
                self.run(&Op::PostRx(port, AddrSel::Pool(at), 9100));
            }
        }
        self.step();
    }

    fn allow(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len).min(RAM_SIZE as u64);
        if start < end {
            self.allowed.push((start, end));
        }
    }

    fn allow_ring(&mut self, q: &Queue) {
        if q.nic {
            self.allow(q.base, q.size as u64 * q.entry as u64);
        }
    }

    /// A driver write to guest RAM (ignored outside it, like a bad DMA).
    fn write(&mut self, addr: u64, bytes: &[u8]) {
        if self.tb.drv[0].mem.write(addr, bytes).is_ok() {
            let a = addr as usize;
            self.shadow[a..a + bytes.len()].copy_from_slice(bytes);
        }
    }

    fn addr(&self, a: AddrSel) -> u64 {
        match a {
            AddrSel::Pool(o) => self.pool + o as u64,
            AddrSel::NearEnd(d) => (RAM_SIZE as u64).wrapping_sub(d as u64),
            AddrSel::Raw(a) => a,
        }
    }

    fn flow(&self, f: FlowSel) -> u32 {
        match f {
            FlowSel::Known(i) if !self.flows.is_empty() => {
                self.flows[i as usize % self.flows.len()]
            }
            FlowSel::Known(i) => i as u32,
            FlowSel::Raw(f) => f,
        }
    }

    fn key(&self, k: KeySel) -> u64 {
        let known = |i: u8| {
            self.keys
                .get(i as usize % self.keys.len().max(1))
                .map_or(0, |k| k.0)
        };
        match k {
            KeySel::Known(i) => known(i),
            KeySel::Flipped(i, b) => known(i) ^ (1 << b),
            KeySel::Raw(k) => k,
        }
    }

    /// Allows the pages of region `key` under `[off, off + len)`.
    fn allow_region(&mut self, key: u64, off: u64, len: u64) {
        let Some(reg) = self.keys.iter().find(|k| k.0 == key).map(|k| k.1.clone()) else {
            return;
        };
        let start = reg.first_off.saturating_add(off) / 4096;
        let end = reg
            .first_off
            .saturating_add(off)
            .saturating_add(len)
            .div_ceil(4096);
        for i in start..end.min(reg.pages.len() as u64) {
            self.allow(reg.pages[i as usize], 4096);
        }
    }

    fn produce(&mut self, qi: usize, bytes: &[u8]) {
        let q = self.queues[qi];
        self.write(q.slot(q.idx), bytes);
        self.queues[qi].idx = q.idx.wrapping_add(1);
        self.tb.drv[0].bar.w32(q.reg + Q_PROD, self.queues[qi].idx);
    }

    fn command(&mut self, mut b: [u8; 64]) -> u32 {
        self.cookie += 1;
        b[4..8].copy_from_slice(&self.cookie.to_le_bytes());
        self.produce(CMDQ, &b);
        self.cookie
    }

    fn step(&mut self) {
        self.tb.tick(Duration::from_micros(50));
        self.steps += 1;
        self.reap();
        self.check_bounds();
    }

    /// Consumes every NIC-produced queue; learns keys from completions.
    fn reap(&mut self) {
        for qi in 0..self.queues.len() {
            let q = self.queues[qi];
            if !q.nic {
                continue;
            }
            let bar = self.tb.drv[0].bar.clone();
            let prod = bar.r32(q.reg + Q_PROD);
            let mut idx = q.idx;
            for _ in 0..q.size.min(MAX_RING) {
                if idx == prod {
                    break;
                }
                if qi == CMDCQ {
                    if let Ok(b) = self.tb.drv[0].mem.read_array::<16>(q.slot(idx)) {
                        let c = CmdCompletion::decode(&b);
                        match (c.opcode, c.status) {
                            (CMD_MR_REG, ST_OK) => {
                                if let Some(reg) = self.pending_regs.get(&c.cookie) {
                                    self.keys.push((c.result, reg.clone()));
                                }
                            }
                            (CMD_FLOW_INSTALL, ST_OK) => {
                                let flow = c.result as u32;
                                self.flows.push(flow);
                                if let Some(&info) = self.pending_flows.get(&c.cookie) {
                                    self.flow_info.insert(flow, info);
                                }
                            }
                            (CMD_MS_POST, ST_OK) => {
                                if let Some(&flow) = self.pending_posts.get(&c.cookie) {
                                    self.posted.push((flow, c.result));
                                }
                            }
                            _ => {}
                        }
                    }
                }
                idx = idx.wrapping_add(1);
            }
            self.queues[qi].idx = idx;
            bar.w32(q.reg + Q_CONS, idx);
        }
    }

    fn check_bounds(&self) {
        let d = lock(&self.tb.model.guests[0].dev);
        assert!(d.mrs.extents() <= MR_MAX_EXTENTS as usize);
        assert!(d.mrs.used() <= MR_CAPACITY as usize);
        assert!(d.flows.used() <= FLOW_CAPACITY as usize);
        for f in d.flows.iter() {
            assert!(f.ooo_ranges() <= FLOW_MAX_OOO as usize);
            assert!(f.posted() <= MS_PER_FLOW as usize);
        }
        drop(d);
        for (bytes, frames) in lock(&self.tb.model.wire).queued() {
            assert!(bytes <= QUEUE_LIMIT && frames <= QUEUE_FRAMES);
        }
    }

    fn reset(&mut self) {
        self.keys.clear();
        self.flows.clear();
        self.flow_info.clear();
        self.posted.clear();
        let bar = self.tb.drv[0].bar.clone();
        bar.w32(REG_DEV_CTRL, DEV_CTRL_RESET);
        self.tb.step();
        for qi in 0..self.queues.len() {
            let (base, size) = self.queues[qi].orig;
            self.configure(qi, base, size, true);
        }
        for p in 0..2 {
            bar.w32(port_block(p) + PORT_MTU, 9000);
            bar.w32(port_block(p) + PORT_CTRL, PORT_CTRL_ENABLE);
        }
        bar.w32(REG_DEV_CTRL, DEV_CTRL_ENABLE);
        self.step();
    }

    /// Configures queue `qi`; with `handshake`, as the spec asks: disable,
    /// wait for `Q_STATUS` 0, then write the configuration and enable.
    fn configure(&mut self, qi: usize, base: u64, size: u32, handshake: bool) {
        let bar = self.tb.drv[0].bar.clone();
        let reg = self.queues[qi].reg;
        bar.w32(reg + Q_CTRL, 0);
        if handshake {
            let mut polls = 0;
            while bar.r32(reg + Q_STATUS) != 0 {
                assert!(
                    polls < 8,
                    "queue {qi}: the NIC never acknowledged its disable"
                );
                self.step();
                polls += 1;
            }
        } else if !self.queues[qi].nic {
            self.unchecked = true;
        }
        let q = &mut self.queues[qi];
        bar.w64(q.reg + Q_BASE, base);
        bar.w32(q.reg + Q_SIZE, size);
        bar.w32(q.reg + Q_PROD, 0);
        bar.w32(q.reg + Q_CONS, 0);
        bar.w32(q.reg + Q_CTRL, Q_CTRL_ENABLE);
        (q.base, q.size, q.idx) = (base, size, 0);
        let q = *q;
        self.allow_ring(&q);
    }

    fn run(&mut self, op: &Op) {
        match *op {
            Op::MrReg {
                access,
                first_off,
                length,
                npages,
                ref pages,
                list_unaligned,
                then_post,
            } => {
                let mut list = Vec::new();
                let mut last = self.pool;
                let pages = match length {
                    Length::Wrap(_) => &pages[..1],
                    _ => &pages[..],
                };
                for p in pages {
                    let a = match *p {
                        PageSel::Pool(i) => self.pool + (i as u64 % POOL_PAGES) * 4096,
                        PageSel::Again => last,
                        PageSel::Outside => RAM_SIZE as u64 + 4096,
                        PageSel::Unaligned(o) => self.pool + 1 + o as u64,
                    };
                    last = a;
                    list.push(a);
                }
                let bytes: Vec<u8> = list.iter().flat_map(|a| a.to_le_bytes()).collect();
                let at = self.lists + self.list_next + list_unaligned as u64 * 4;
                self.list_next = (self.list_next + bytes.len() as u64 + 64) % (1 << 19);
                self.write(at, &bytes);
                let n = list.len() as u64;
                let fo = first_off as u64 % 4096;
                let length = match length {
                    Length::Fit => (n * 4096 - fo).max(1),
                    Length::Wrap(w) => {
                        let wrapped = 1 + w as u64 % fo.max(1);
                        wrapped.wrapping_sub(fo)
                    }
                    Length::Raw(l) => l,
                };
                let c = CmdMrReg {
                    opcode: CMD_MR_REG,
                    access,
                    npages: npages.unwrap_or(n as u32),
                    first_off,
                    length,
                    page_list: at,
                    ..Default::default()
                };
                let cookie = self.command(c.encode());
                let list_copy = list.clone();
                self.pending_regs.insert(
                    cookie,
                    Reg {
                        pages: list,
                        first_off: first_off as u64,
                    },
                );
                self.step(); // a driver waits for the key before using it
                let got = self.keys.last().is_some_and(|k| k.1.pages == list_copy);
                if let (true, Some((flow, off, len))) = (got, then_post) {
                    self.run(&Op::MsPost {
                        flow,
                        key: KeySel::Known((self.keys.len() - 1) as u8),
                        off: off as u64,
                        len: len as u32,
                        dir: MS_DIR_RECV,
                    });
                    self.step();
                }
            }
            Op::MrInval(k) => {
                let key = self.key(k);
                let c = CmdMrInval {
                    opcode: CMD_MR_INVAL,
                    key,
                    ..Default::default()
                };
                self.command(c.encode());
                // Forgotten by the driver, but the ranges it allowed stay
                // allowed: a replayed command may still use the key.
                self.keys.retain(|k| k.0 != key);
            }
            Op::FlowInstall {
                port,
                ring,
                stream_off,
                rx_isn,
            } => {
                // Port 1 receives what port 0 sends (A -> B) and back.
                let mut c = flow_b(port, rx_isn);
                if port == 0 {
                    (c.local_ip, c.remote_ip) = (c.remote_ip, c.local_ip);
                    (c.local_port, c.remote_port) = (c.remote_port, c.local_port);
                }
                c.opcode = CMD_FLOW_INSTALL;
                c.proto = IPPROTO_TCP;
                c.stream_off = stream_off;
                if let Some((k, off, size)) = ring {
                    let key = self.key(k);
                    c.mode = FLOW_RX_RING;
                    c.ring_key = key;
                    c.ring_offset = off;
                    c.ring_size = size;
                    self.allow_region(key, off, size as u64);
                }
                let cookie = self.command(c.encode());
                self.pending_flows.insert(cookie, (port as u8, rx_isn));
                self.step(); // a driver waits for the flow index
            }
            Op::FlowUpdate {
                flow,
                flags,
                stream_off,
            } => {
                let c = CmdFlow {
                    opcode: CMD_FLOW_UPDATE,
                    flags,
                    flow: self.flow(flow),
                    stream_off,
                    ..Default::default()
                };
                self.command(c.encode());
            }
            Op::FlowRemove(flow) => {
                let flow = self.flow(flow);
                let c = CmdFlow {
                    opcode: CMD_FLOW_REMOVE,
                    flow,
                    ..Default::default()
                };
                self.command(c.encode());
                self.flows.retain(|&f| f != flow);
            }
            Op::MsPost {
                flow,
                key,
                off,
                len,
                dir,
            } => {
                let key = self.key(key);
                self.allow_region(key, off, len as u64);
                let flow = self.flow(flow);
                let c = CmdMsPost {
                    opcode: CMD_MS_POST,
                    flow,
                    dir,
                    mr_key: key,
                    mr_offset: off,
                    len,
                    ..Default::default()
                };
                let cookie = self.command(c.encode());
                self.pending_posts.insert(cookie, flow);
            }
            Op::RawCmd(b) => {
                self.command(b);
            }
            Op::TxPlain {
                port,
                len,
                addr,
                csum,
                tagged,
            } => {
                let mut f = tcp_frame(A_IP, B_IP, 4000, 5001, 7, &vec![0x5a; len as usize]);
                if tagged {
                    f.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
                }
                f.truncate(len as usize);
                let at = match addr {
                    AddrSel::Pool(o) => self.scratch + o as u64 % (1 << 19),
                    a => self.addr(a),
                };
                self.write(at, &f);
                let (csum_start, csum_offset) = csum.unwrap_or((0, 0));
                // One in four is a plain TSO send (spec §8), its segment
                // size from the checksum offsets (0: from the MTU).
                let tso = len % 4 == 1;
                let d = TxDesc {
                    opcode: TX_OP_PLAIN,
                    flags: if csum.is_some() { TXF_CSUM_PARTIAL } else { 0 }
                        | if tso { TXF_TSO } else { 0 },
                    buf_len: len as u32,
                    buf_addr: at,
                    csum_start,
                    csum_offset,
                    mss: if tso { csum_start ^ csum_offset } else { 0 },
                    ..Default::default()
                };
                self.produce(port_q(port, 0), &d.encode());
            }
            Op::TxMerge {
                port,
                key,
                off,
                pay_len,
                mss,
                seq,
                spoil,
            } => {
                let (src, dst) = if port == 0 {
                    (A_IP, B_IP)
                } else {
                    (B_IP, A_IP)
                };
                let (sp, dp) = if port == 0 {
                    (4000, 5001)
                } else {
                    (5001, 4000)
                };
                let mut h = tcp_hdr(src, dst, sp, dp, seq, 1, 0x18);
                if let Some((i, v)) = spoil {
                    h[i as usize] = v;
                }
                let at = self.scratch + (1 << 19) + (self.steps as u64 % 64) * 256;
                self.write(at, &h);
                let d = TxDesc {
                    opcode: TX_OP_MERGE,
                    flags: if mss.is_some() { TXF_TSO } else { 0 },
                    buf_len: h.len() as u32,
                    buf_addr: at,
                    mss: mss.unwrap_or(0),
                    mr_key: self.key(key),
                    mr_offset: off,
                    pay_len,
                    ..Default::default()
                };
                self.produce(port_q(port, 0), &d.encode());
            }
            Op::TxRaw(b, a) => {
                let mut d = TxDesc::decode(&b);
                d.buf_addr = self.addr(a);
                self.produce(port_q(b[0] % 2, 0), &d.encode());
            }
            Op::RxInject {
                port,
                seq,
                len,
                corrupt,
                tos,
                tagged,
            } => {
                let (src, dst) = if port == 1 {
                    (A_IP, B_IP)
                } else {
                    (B_IP, A_IP)
                };
                let (sp, dp) = if port == 1 {
                    (4000, 5001)
                } else {
                    (5001, 4000)
                };
                let mut f = tcp_frame(src, dst, sp, dp, seq, &vec![0xc3; len as usize]);
                f[15] = tos; // checksum of the IP header spoiled: not checked
                if corrupt {
                    let i = f.len() - 1;
                    f[i] ^= 0x80;
                }
                if tagged {
                    f.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
                }
                self.inject(port, f);
            }
            Op::RxAtPosted {
                seg,
                off,
                len,
                corrupt,
            } => {
                // Mostly the latest segments (the prologue's come first).
                let n = self.posted.len();
                let Some(&(flow, start)) =
                    self.posted.get(n.wrapping_sub(1 + seg as usize % n.max(1)))
                else {
                    return;
                };
                let Some(&(port, rx_isn)) = self.flow_info.get(&flow) else {
                    return;
                };
                let seq = rx_isn.wrapping_add(start as u32).wrapping_add(off as u32);
                self.run(&Op::RxInject {
                    port: port % 2,
                    seq,
                    len,
                    corrupt,
                    tos: 0,
                    tagged: false,
                });
            }
            Op::RxRandom(port, ref b) => self.inject(port, b.clone()),
            Op::RxInject6 {
                port,
                nh,
                ports,
                ext,
                plen,
                cut,
            } => {
                let mut f = ip6(a6(1, 1), nh, ports.0, ports.1, ext);
                if let Some(l) = plen {
                    f[18..20].copy_from_slice(&l.to_be_bytes());
                }
                f.truncate(f.len().saturating_sub(usize::from(cut)));
                self.inject(port, f);
            }
            Op::Rule {
                v6,
                block,
                ref addrs,
                action,
                queue,
                ctx,
                proto,
                port_masks,
            } => {
                let mut r = CmdRule {
                    opcode: CMD_RULE_SET,
                    index: RULE_INDEX_ANY,
                    action,
                    queue,
                    rss_ctx: ctx,
                    proto,
                    src_port: 0x1234,
                    src_port_mask: port_masks.0,
                    dst_port: 5001,
                    dst_port_mask: port_masks.1,
                    ..Default::default()
                };
                if v6 {
                    let at = self.addr(block);
                    let bytes = addrs.clone().unwrap_or_else(|| vec![0; 64]);
                    self.write(at, &bytes);
                    r.flags = RULEF_IPV6;
                    r.set_addr6(at);
                }
                self.command(r.encode());
            }
            Op::RssCtx(ctx, table, fill) => {
                let at = self.addr(table);
                let t: Vec<u8> = (0..128u8).map(|i| fill.wrapping_add(i) % 9).collect();
                self.write(at, &t);
                let c = CmdRssCtx {
                    ctx,
                    table: at,
                    ..Default::default()
                };
                self.command(c.entry().bytes());
            }
            Op::RssRegs(port, fields, ctrl) => {
                let b = port_block(u32::from(port));
                self.tb.drv[0].bar.w32(b + PORT_RSS_FIELDS, fields);
                self.tb.drv[0].bar.w32(b + PORT_RSS_CTRL, ctrl);
            }
            Op::PostRx(port, a, len) => {
                let addr = self.addr(a);
                self.allow(addr, len as u64);
                let d = RxBufDesc {
                    addr,
                    len,
                    rsvd0: 0,
                };
                self.produce(port_q(port, 2), &d.encode());
            }
            Op::Coalesce(port, v) => {
                let bar = &self.tb.drv[0].bar;
                bar.w32(port_block(port as u32) + PORT_COALESCE_BYTES, v);
            }
            Op::Impair(loss, reorder, dup, us) => {
                let spec = format!("loss={loss} reorder={reorder} dup={dup} delay={us}us");
                lock(&self.tb.model.wire)
                    .set(|_| true, |c| c.apply(&spec))
                    .unwrap();
            }
            Op::QueueToggle(qi, base, size, handshake) => {
                let qi = qi as usize % self.queues.len();
                let orig = self.queues[qi].orig.0;
                let base = match base {
                    BaseSel::Orig => orig,
                    BaseSel::OrigPlus(d) => orig + d as u64,
                    BaseSel::Pool(o) => self.pool + o as u64,
                    BaseSel::Raw(b) => b,
                };
                self.configure(qi, base, size, handshake);
                self.step();
            }
            Op::ProdAhead(qi, ahead) => {
                let q = self.queues[qi as usize % self.queues.len()];
                if !q.nic {
                    let bar = &self.tb.drv[0].bar;
                    bar.w32(q.reg + Q_PROD, q.idx.wrapping_add(ahead));
                }
            }
            Op::Reset => self.reset(),
            Op::Step(n) => {
                for _ in 0..=n {
                    self.step();
                }
            }
        }
    }

    fn inject(&mut self, port: u8, bytes: Vec<u8>) {
        let now = self.tb.now;
        let mut d = lock(&self.tb.model.guests[0].dev);
        d.rx_frame(port as u32, &mut Frame::owned(bytes), now);
    }

    /// Every byte outside the allowed ranges is what the driver wrote.
    fn check_memory(&self) {
        if self.unchecked {
            return;
        }
        let mut allowed = self.allowed.clone();
        allowed.sort_unstable();
        let mut pos = 0u64;
        let mut ram = vec![0u8; 1 << 16];
        let mut check = |from: u64, to: u64| {
            let mut a = from;
            while a < to {
                let n = (to - a).min(ram.len() as u64) as usize;
                self.tb.drv[0].mem.read(a, &mut ram[..n]).unwrap();
                let want = &self.shadow[a as usize..a as usize + n];
                if ram[..n] == *want {
                    a += n as u64;
                    continue;
                }
                if let Some(i) = (0..n).find(|&i| ram[i] != want[i]) {
                    let at = a + i as u64;
                    panic!("NIC wrote {at:#x}, outside every ring, RX buffer and posted range");
                }
                a += n as u64;
            }
        };
        for (s, e) in allowed {
            if s > pos {
                check(pos, s);
            }
            pos = pos.max(e);
        }
        check(pos.min(RAM_SIZE as u64), RAM_SIZE as u64);
    }
}

/// The stream proptest found (2026-12-07): a driver moves its RX ring 8
/// bytes up without waiting for the NIC to acknowledge the disable, posts a
/// buffer into the new ring, and a frame arrives. The NIC never saw the
/// queue off, so it still served the old ring, whose slot 1 now held the
/// new descriptor's length as an address: it wrote the frame at 0x238c.
/// With the spec's handshake the NIC refuses the unaligned base and writes
/// nothing anywhere; without it, the test may no longer check memory.
fn ring_moved_under_the_nic(handshake: bool) -> Fuzz {
    let mut f = Fuzz::new();
    f.prologue();
    for op in [
        Op::MrReg {
            access: 1,
            first_off: 0,
            length: Length::Fit,
            npages: None,
            pages: vec![PageSel::Pool(0)],
            list_unaligned: false,
            then_post: None,
        },
        Op::QueueToggle(5, BaseSel::OrigPlus(8), 64, handshake),
        Op::PostRx(0, AddrSel::Pool(0), 9100),
        Op::TxMerge {
            port: 1,
            key: KeySel::Known(0),
            off: 0,
            pay_len: 1,
            mss: Some(1),
            seq: 0,
            spoil: None,
        },
        Op::RxAtPosted {
            seg: 0,
            off: 0,
            len: 1,
            corrupt: false,
        },
        Op::PostRx(0, AddrSel::Pool(0), 9100),
    ] {
        f.run(&op);
    }
    for _ in 0..3 {
        f.step();
    }
    f
}

#[test]
fn a_ring_moved_after_the_handshake_is_never_served_from_its_old_place() {
    let f = ring_moved_under_the_nic(true);
    assert!(!f.unchecked);
    f.check_memory();
}

#[test]
fn a_ring_moved_without_the_handshake_leaves_memory_unchecked() {
    assert!(ring_moved_under_the_nic(false).unchecked);
}

proptest! {
    // 256 cases keep `cargo test` fast; PROPTEST_CASES=N fuzzes longer.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        .. ProptestConfig::default()
    })]

    #[test]
    fn hostile_driver_streams(ops in proptest::collection::vec(op(), 1..80)) {
        let mut f = Fuzz::new();
        f.prologue();
        for op in &ops {
            f.run(op);
        }
        for _ in 0..3 {
            f.step();
        }
        f.check_memory();
    }
}

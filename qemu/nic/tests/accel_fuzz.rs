//! Fuzzing ZACC like a hostile driver: streams of well-formed, nearly
//! well-formed and random commands (ranges at and past the end of device
//! memory, wrapping offsets, scattered/aliased/outside/unaligned page
//! lists), register pokes (aperture, reset, queue indices far ahead,
//! interrupt mask) and peer DMA at any bus address.
//!
//! Oracles, after every case: nothing panicked; every byte of device memory
//! outside the destination ranges of commands and peer writes that were
//! entitled to write it is what it was, and so is every byte of guest RAM
//! outside the completion ring and the pages D2H commands named; and device
//! memory is bounded by guard pages in the model's mapping, so a stray
//! access outside it faults the test.

mod za;

use proptest::prelude::*;
use za::*;
use zeronic_hw::accel::*;
use zeronic_hw::regs::Q_PROD;
use zeronic_nic::accel::aperture::PeerMap;
use zeronic_nic::accel::dma_space::{DmaSpace, GuestDma, Target};
use zeronic_nic::accel::stream::Stream;

/// A device offset: near 0, near the end, or anything.
#[derive(Clone, Copy, Debug)]
enum Off {
    Low(u16),
    End(u16),
    Raw(u64),
}

impl Off {
    fn get(self) -> u64 {
        match self {
            Off::Low(o) => o as u64,
            Off::End(o) => HBM.wrapping_sub(o as u64),
            Off::Raw(o) => o,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Page {
    Pool(u8),
    Outside(u8),
    Unaligned(u16),
    Raw(u64),
}

#[derive(Clone, Debug)]
enum Op {
    Stream {
        verify: bool,
        pattern: bool,
        off: Off,
        len: u32,
        stream_off: u64,
    },
    Hash(Off, u32),
    D2d(Off, Off, u32),
    Host {
        h2d: bool,
        off: Off,
        first_off: u16,
        pages: Vec<Page>,
        extra_len: i16,
        npages_delta: i8,
    },
    Raw([u8; 64]),
    Aperture(u64, bool),
    Reset,
    ProdAhead(u32),
    Mask(bool),
    Peer(u64, u16, bool),
}

fn off() -> impl Strategy<Value = Off> {
    prop_oneof![
        any::<u16>().prop_map(Off::Low),
        any::<u16>().prop_map(Off::End),
        any::<u64>().prop_map(Off::Raw),
    ]
}

fn page() -> impl Strategy<Value = Page> {
    prop_oneof![
        6 => any::<u8>().prop_map(Page::Pool),
        1 => any::<u8>().prop_map(Page::Outside),
        1 => any::<u16>().prop_map(Page::Unaligned),
        1 => any::<u64>().prop_map(Page::Raw),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let raw = proptest::collection::vec(any::<u8>(), 64).prop_map(|v| {
        let mut b = [0u8; 64];
        b.copy_from_slice(&v);
        b[0] %= 7; // mostly known opcodes
        b[1] = 0;
        Op::Raw(b)
    });
    prop_oneof![
        4 => (any::<bool>(), any::<bool>(), off(), 0u32..70_000, prop_oneof![Just(0u64), any::<u64>()])
            .prop_map(|(verify, pattern, off, len, stream_off)| Op::Stream { verify, pattern, off, len, stream_off }),
        2 => (off(), 0u32..70_000).prop_map(|(o, l)| Op::Hash(o, l)),
        2 => (off(), off(), 0u32..70_000).prop_map(|(s, d, l)| Op::D2d(s, d, l)),
        4 => (any::<bool>(), off(), 0u16..4200, proptest::collection::vec(page(), 0..6), -20i16..20, prop_oneof![8 => Just(0i8), 1 => any::<i8>()])
            .prop_map(|(h2d, off, first_off, pages, extra_len, npages_delta)| Op::Host { h2d, off, first_off, pages, extra_len, npages_delta }),
        2 => raw,
        1 => (prop_oneof![Just(0x1_0000_0000u64), Just(0x1_0000_1000u64), Just(0u64), any::<u64>()], any::<bool>())
            .prop_map(|(b, e)| Op::Aperture(b, e)),
        1 => Just(Op::Reset),
        1 => (NCMD + 1..u32::MAX).prop_map(Op::ProdAhead),
        1 => any::<bool>().prop_map(Op::Mask),
        2 => (prop_oneof![Just(0x1_0000_0000u64), Just(0x1_0000_0000u64 + HBM - 100), any::<u64>(), (0u64..RAM as u64)], 0u16..5000, any::<bool>())
            .prop_map(|(a, l, w)| Op::Peer(a, l, w)),
    ]
}

/// Byte ranges the device was entitled to write.
#[derive(Default)]
struct Allowed(Vec<(u64, u64)>);

impl Allowed {
    fn add(&mut self, start: u64, len: u64, limit: u64) {
        if let Some(end) = start.checked_add(len) {
            if end <= limit && len > 0 {
                self.0.push((start, end));
            }
        }
    }

    /// The first byte outside every range where `now` differs from `init`.
    fn first_stray(&self, now: &[u8], init: &[u8]) -> Option<usize> {
        let mut r = self.0.clone();
        r.sort_unstable();
        let mut at = 0usize;
        for (s, e) in r.into_iter().chain([(now.len() as u64, now.len() as u64)]) {
            let (s, e) = (s as usize, e as usize);
            if s > at && now[at..s] != init[at..s] {
                return (at..s).find(|&i| now[i] != init[i]);
            }
            at = at.max(e);
        }
        None
    }
}

fn page_addr(p: Page) -> u64 {
    match p {
        Page::Pool(i) => POOL + (i as u64 % 64) * 4096,
        Page::Outside(i) => RAM as u64 + i as u64 * 4096,
        Page::Unaligned(o) => POOL + 1 + o as u64,
        Page::Raw(a) => a,
    }
}

/// The destination a well-formed reading of `c` names (what it may write).
fn entitled(z: &Za, c: &[u8; 64], hbm: &mut Allowed, ram: &mut Allowed) {
    match u16::from_le_bytes([c[0], c[1]]) {
        ZA_CMD_FILL => {
            let s = ZaCmdStream::decode(c);
            hbm.add(s.dev_off, s.len, HBM);
        }
        ZA_CMD_COPY => {
            let s = ZaCmdCopy::decode(c);
            match s.dir {
                ZA_COPY_H2D | ZA_COPY_D2D => hbm.add(s.dev_off, s.len, HBM),
                ZA_COPY_D2H if s.npages <= ZA_COPY_MAX_PAGES => {
                    let mut list = vec![0u8; s.npages as usize * 8];
                    if z.mem.read(s.page_list, &mut list).is_ok() {
                        for w in list.chunks_exact(8) {
                            let p = u64::from_le_bytes(w.try_into().unwrap());
                            ram.add(p, 4096, RAM as u64);
                        }
                    }
                }
                _ => {}
            }
        }
        _ => {}
    }
}

fn run(ops: Vec<Op>) {
    let (mut z, other) = (Za::new(), Za::new());
    let peers = std::sync::Arc::new(PeerMap::new(vec![
        z.dev.aperture.clone(),
        other.dev.aperture.clone(),
    ]));
    z.dev.set_peers(peers.clone());
    z.bring_up();
    // Published from the start (ops withdraw, move and re-enable it).
    z.dev.bar.w64(ZA_REG_APERTURE_BASE, 0x1_0000_0000);
    z.w32(ZA_REG_APERTURE_CTRL, ZA_APERTURE_ENABLE);
    z.step();
    assert_eq!(z.r32(ZA_REG_APERTURE_STATUS), ZA_APERTURE_ACTIVE);
    let dma = GuestDma {
        ram: z.mem.clone(),
        peers,
    };
    // Recognisable contents everywhere.
    let mut init_hbm = vec![0u8; HBM as usize];
    Stream::Prng(0x0dd).generate(0, &mut init_hbm);
    z.dev.hbm.write(0, &init_hbm).unwrap();
    let mut init_ram = vec![0u8; RAM];
    Stream::Prng(0xe7e4).generate(0, &mut init_ram);
    z.mem.write(0, &init_ram).unwrap();
    let (mut hbm_ok, mut ram_ok) = (Allowed::default(), Allowed::default());
    ram_ok.add(CMDCQ_BASE, NCMD as u64 * 16, RAM as u64);
    ram_ok.add(CMDQ_BASE, NCMD as u64 * 64, RAM as u64); // the fuzzer writes it
    ram_ok.add(LISTS, 4096, RAM as u64); // ... and the lists
    for op in ops {
        let cmd = match op {
            Op::Stream {
                verify,
                pattern,
                off,
                len,
                stream_off,
            } => Some(
                ZaCmdStream {
                    opcode: if verify { ZA_CMD_VERIFY } else { ZA_CMD_FILL },
                    flags: if pattern { ZA_STREAM_PATTERN } else { 0 },
                    dev_off: off.get(),
                    len: len as u64,
                    seed: if pattern { 0 } else { stream_off ^ 1 },
                    stream_off,
                    pattern: if pattern { stream_off } else { 0 },
                    ..Default::default()
                }
                .encode(),
            ),
            Op::Hash(o, l) => Some(hash(o.get(), l as u64, ZA_FNV_OFFSET_BASIS)),
            Op::D2d(s, d, l) => Some(d2d(s.get(), d.get(), l as u64)),
            Op::Host {
                h2d,
                off,
                first_off,
                pages,
                extra_len,
                npages_delta,
            } => {
                let addrs: Vec<u64> = pages.iter().map(|&p| page_addr(p)).collect();
                let list = z.list(&addrs);
                let n = addrs.len() as i64;
                let span = (n * 4096 - first_off as i64 + extra_len as i64).max(0) as u64;
                let npages = (n + npages_delta as i64).clamp(0, u32::MAX as i64) as u32;
                let dir = if h2d { ZA_COPY_H2D } else { ZA_COPY_D2H };
                Some(copy_host(
                    dir,
                    off.get(),
                    span,
                    list,
                    npages,
                    first_off as u32,
                ))
            }
            Op::Raw(b) => Some(b),
            Op::Aperture(base, en) => {
                z.dev.bar.w64(ZA_REG_APERTURE_BASE, base);
                z.w32(ZA_REG_APERTURE_CTRL, en as u32);
                None
            }
            Op::Reset => {
                z.bring_up();
                None
            }
            Op::ProdAhead(p) => {
                z.w32(ZA_REG_CMDQ + Q_PROD, z.prod.wrapping_add(p));
                z.step();
                z.bring_up();
                None
            }
            Op::Mask(m) => {
                z.w32(ZA_REG_IRQ_MASK, m as u32);
                None
            }
            Op::Peer(addr, len, write) => {
                let mut buf = vec![0x5au8; len as usize];
                let base = z.dev.aperture.base();
                let r = if write {
                    dma.write(addr, &buf)
                } else {
                    dma.read(addr, &mut buf)
                };
                match r {
                    Ok(Target::Peer(0)) => {
                        let b = base.expect("a hit on a published aperture");
                        assert!(addr >= b && addr + len as u64 <= b + HBM);
                        if write {
                            hbm_ok.add(addr - b, len as u64, HBM);
                        }
                    }
                    Ok(Target::Ram) => {
                        assert!(addr + len as u64 <= RAM as u64);
                        if write {
                            ram_ok.add(addr, len as u64, RAM as u64);
                        }
                    }
                    Ok(Target::Peer(i)) => panic!("hit peer {i}, which never enabled"),
                    Err(_) => {}
                }
                None
            }
        };
        if let Some(c) = cmd {
            entitled(&z, &c, &mut hbm_ok, &mut ram_ok);
            let cookie = z.push(c);
            z.step();
            let d = z.reap().expect("one completion per command");
            assert_eq!(d.cookie, cookie);
            if d.status != ZA_ST_OK && d.status != ZA_ST_MISMATCH {
                assert_eq!(d.result, 0);
            }
        } else {
            z.step();
        }
        // Capacities stay what they are.
        assert_eq!(z.dev.bar.r64(ZA_REG_HBM_SIZE), HBM);
    }
    let stray = hbm_ok.first_stray(&z.hbm(0, HBM as usize), &init_hbm);
    assert_eq!(
        stray, None,
        "device memory written outside any entitled range"
    );
    let stray = ram_ok.first_stray(&z.ram(0, RAM), &init_ram);
    assert_eq!(stray, None, "guest RAM written outside any entitled range");
    assert!(z.dev.counters.get(ZA_STAT_PEER_READ_BYTES) <= 5000 * 1000);
}

proptest! {
    // 48 cases keep `cargo test` fast; PROPTEST_CASES=N fuzzes longer.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    #[test]
    fn hostile_streams_never_panic_nor_write_outside(ops in proptest::collection::vec(op(), 1..40)) {
        run(ops);
    }
}

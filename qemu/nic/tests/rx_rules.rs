//! RX Split Unit rules the zero-copy data path relies on (docs/hardware.md
//! §9): what coalescing may merge (ECN, TOS, TTL, TCP options, the IPv4
//! length limit), checksums verified before any byte is written (duplicates
//! included), and how FLOWU_CURSOR treats out-of-order ranges; nothing
//! TCP would refuse is placed (past the window the host offered, flags).

mod common;

use common::*;
use zeronic_hw::cmd::*;
use zeronic_hw::desc::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;
use zeronic_nic::csum::{pseudo_v4, Csum};
use zeronic_nic::model::Topology;
use zeronic_nic::wire::Impair;

/// An IPv4/TCP packet A -> B (4000 -> 5001) with valid checksums.
#[derive(Clone)]
struct Pkt {
    seq: u32,
    payload: Vec<u8>,
    tos: u8,
    ttl: u8,
    /// TCP option bytes (a multiple of 4).
    opts: usize,
    /// TCP flags.
    flags: u8,
}

impl Pkt {
    fn new(seq: u32, payload: Vec<u8>) -> Self {
        Self {
            seq,
            payload,
            tos: 0,
            ttl: 64,
            opts: 0,
            flags: 0x10,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut f = tcp_hdr(A_IP, B_IP, 4000, 5001, self.seq, 1, self.flags);
        f[15] = self.tos;
        f[22] = self.ttl;
        f[46] = (((20 + self.opts) / 4) << 4) as u8;
        f.extend(std::iter::repeat_n(1u8, self.opts)); // NOPs
        f.extend_from_slice(&self.payload);
        let tot = (f.len() - 14) as u16;
        f[16..18].copy_from_slice(&tot.to_be_bytes());
        let mut c = Csum::default();
        c.add(&f[14..34]);
        f[24..26].copy_from_slice(&c.finish().to_le_bytes());
        let mut c = pseudo_v4(A_IP, B_IP, (f.len() - 34) as u16);
        c.add(&f[34..]);
        f[50..52].copy_from_slice(&c.finish().to_le_bytes());
        f
    }
}

/// Guest 1 with RX buffers posted and `len` bytes at `r` registered for
/// placement (key `rk`), no flow yet: `(tb, r, rk)`.
fn region_receiver(len: u64) -> (Tb, u64, u64) {
    let mut tb = Tb::with_opts(Topology::TwoGuest, Impair::default(), 64 << 20, 9000);
    tb.drv[1].post_rx(0, 64);
    let r = tb.drv[1].alloc(len);
    let rk = tb.reg_mr(1, r, len, MR_ACCESS_LOCAL_WRITE).unwrap();
    (tb, r, rk)
}

/// Guest 1 with a flow (rx_isn 0) and `cap` bytes posted at `r`.
fn receiver(cap: u64) -> (Tb, u32, u64) {
    let (mut tb, r, rk) = region_receiver(cap);
    let flow = tb.install(1, flow_b(0, 0)).unwrap();
    let mut off = 0;
    while off < cap {
        let n = (cap - off).min(1 << 20);
        assert_eq!(tb.post(1, flow, rk, off, n as u32).status, ST_OK);
        off += n;
    }
    (tb, flow, r)
}

fn entries(tb: &mut Tb) -> Vec<(u32, u16, u16)> {
    tb.drv[1]
        .reap_hdr(0)
        .iter()
        .map(|(e, _)| (e.len, e.nsegs, e.flags))
        .collect()
}

#[test]
fn coalescing_keeps_apart_what_the_header_cannot_carry() {
    let (mut tb, _, _) = receiver(1 << 20);
    let base = |i: u32| Pkt::new(i * 1000, vec![i as u8; 1000]);
    // ECT(0) then a different DSCP/ECN, TTL and TCP option length: each
    // change starts a new entry.
    let mut p = vec![base(0), base(1)];
    let mut q = base(2);
    q.tos = 0x02; // ECT(0)
    p.push(q);
    let mut q = base(3);
    q.tos = 0x02;
    p.push(q);
    let mut q = base(4);
    q.ttl = 63;
    p.push(q);
    let mut q = base(5);
    q.opts = 12;
    p.push(q);
    deliver(&mut tb, &p.iter().map(Pkt::bytes).collect::<Vec<_>>());
    let c = HDRF_COALESCED;
    assert_eq!(
        entries(&mut tb),
        vec![(2000, 2, c), (2000, 2, c), (1000, 1, 0), (1000, 1, 0)]
    );
}

#[test]
fn an_ecn_ce_packet_is_reported_alone() {
    let (mut tb, _, _) = receiver(1 << 20);
    let mut p: Vec<Pkt> = (0..6).map(|i| Pkt::new(i * 1000, vec![7; 1000])).collect();
    for q in &mut p {
        q.tos = 0x02; // ECT(0)
    }
    p[2].tos = 0x03; // CE
    p[3].tos = 0x03; // CE again: still not merged with the previous one
    deliver(&mut tb, &p.iter().map(Pkt::bytes).collect::<Vec<_>>());
    let got = tb.drv[1].reap_hdr(0);
    let shape: Vec<(u32, u16)> = got.iter().map(|(e, _)| (e.len, e.nsegs)).collect();
    assert_eq!(shape, vec![(2000, 2), (1000, 1), (1000, 1), (2000, 2)]);
    // The CE mark reaches the driver in the entry's header.
    assert_eq!(got[1].1[15] & 3, 3);
    assert_eq!(got[2].1[15] & 3, 3);
    assert_eq!(got[3].1[15] & 3, 2);
}

#[test]
fn a_coalesced_entry_fits_an_ipv4_total_length() {
    let (mut tb, _, _) = receiver(1 << 20);
    // Whatever the driver asks for, an entry's payload + headers <= 65535.
    tb.drv[1]
        .bar
        .w32(port_block(0) + PORT_COALESCE_BYTES, u32::MAX);
    let p: Vec<Vec<u8>> = (0..20)
        .map(|i| {
            let mut q = Pkt::new(i * 8900, vec![i as u8; 8900]);
            q.opts = 40;
            q.bytes()
        })
        .collect();
    deliver(&mut tb, &p);
    let e = tb.drv[1].reap_hdr(0);
    let mut total = 0;
    for (m, h) in &e {
        let hl = 20 + 60;
        assert_eq!(h.len(), 14 + hl);
        assert!(m.len as usize + hl <= 65_535, "entry of {} bytes", m.len);
        total += m.len;
    }
    assert_eq!(total, 20 * 8900);
    assert_eq!(e[0].0.nsegs, 7, "7 x 8900 + 80 <= 65535 < 8 x 8900 + 80");
    // The default limit is that of the largest TCP header.
    assert_eq!(DEFAULT_COALESCE_BYTES + 20 + 60, IPV4_MAX_TOT_LEN);
}

#[test]
fn a_corrupt_retransmission_never_overwrites_placed_bytes() {
    let (mut tb, _, r) = receiver(65_536);
    // [1000, 2000) arrives first and is placed out of order.
    let good = Pkt::new(1000, vec![0x11; 1000]);
    deliver(&mut tb, &[good.bytes()]);
    // A retransmission of [0, 2000) corrupted on the way (checksum wrong).
    let mut bad = Pkt::new(0, vec![0x22; 2000]).bytes();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    deliver(&mut tb, &[bad]);
    let mut got = vec![0u8; 2000];
    tb.drv[1].mem.read(r, &mut got).unwrap();
    assert!(got[..1000].iter().all(|&b| b == 0), "nothing written below");
    assert!(got[1000..].iter().all(|&b| b == 0x11), "placed bytes kept");
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_CSUM_ERR), 1);
    let e = tb.drv[1].reap_hdr(0);
    assert_eq!(e.len(), 1, "the corrupt packet is not reported");
    assert_eq!(e[0].0.flags, HDRF_OOO);
}

/// Linux keeps the first copy of bytes it holds; so does the NIC, or bytes
/// TCP queued out of order would change under it: a frame over any placed
/// byte writes nothing, even the bytes it alone brings.
#[test]
fn an_overlapping_frame_with_other_bytes_never_overwrites_placed_ones() {
    let (mut tb, _, r) = receiver(65_536);
    tb.drv[1].post_rx(0, 4);
    deliver(&mut tb, &[Pkt::new(1000, vec![0x11; 1000]).bytes()]);
    let over = Pkt::new(500, vec![0x22; 1000]);
    deliver(&mut tb, &[over.bytes()]);
    let mut got = vec![0u8; 2000];
    tb.drv[1].mem.read(r, &mut got).unwrap();
    assert!(got[..1000].iter().all(|&b| b == 0), "nothing written below");
    assert!(got[1000..].iter().all(|&b| b == 0x11), "placed bytes kept");
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(rx.len(), 1);
    assert_eq!(
        (rx[0].0.flags & RXF_FLOW, &rx[0].1),
        (RXF_FLOW, &over.bytes())
    );
    // The hole alone is placed, and joins the range.
    deliver(&mut tb, &[Pkt::new(0, vec![0x33; 1000]).bytes()]);
    tb.drv[1].mem.read(r, &mut got).unwrap();
    assert!(got[..1000].iter().all(|&b| b == 0x33));
    let e = tb.drv[1].reap_hdr(0);
    let seen: Vec<_> = e
        .iter()
        .map(|(m, _)| (m.flags, m.placed, m.cursor))
        .collect();
    assert_eq!(seen, vec![(HDRF_OOO, 1000, 0), (0, 1000, 2000)]);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_DUP_FRAMES), 1);
}

#[test]
fn duplicates_are_checksum_verified() {
    let (mut tb, _, _) = receiver(65_536);
    tb.drv[1].post_rx(0, 4);
    let p = Pkt::new(0, vec![5; 1000]);
    deliver(&mut tb, &[p.bytes()]);
    let mut bad = p.bytes();
    bad[60] ^= 1;
    deliver(&mut tb, &[bad, p.bytes()]);
    let e = tb.drv[1].reap_hdr(0);
    let flags: Vec<u16> = e.iter().map(|(m, _)| m.flags).collect();
    assert_eq!(flags, vec![0], "the original only");
    // The good duplicate goes whole to the normal path; the bad one nowhere.
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(rx.len(), 1, "only the good duplicate");
    assert_eq!(rx[0].1, p.bytes());
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_CSUM_ERR), 1);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_DUP_FRAMES), 1);
}

#[test]
fn moving_the_cursor_absorbs_placed_ranges_it_reaches() {
    let (mut tb, flow, _) = receiver(65_536);
    // Placed above the cursor: [3000, 4000) and [5000, 6000).
    deliver(
        &mut tb,
        &[
            Pkt::new(3000, vec![1; 1000]).bytes(),
            Pkt::new(5000, vec![2; 1000]).bytes(),
        ],
    );
    let upd = |to: u64| {
        CmdFlow {
            opcode: CMD_FLOW_UPDATE,
            flags: FLOWU_CURSOR,
            flow,
            stream_off: to,
            ..Default::default()
        }
        .encode()
    };
    // [0, 2000) came by fallback: the cursor stops at 2000.
    let c = tb.cmd(1, upd(2000));
    assert_eq!((c.status, c.result), (ST_OK, 2000));
    // Up to 3000: contiguous with [3000, 4000), which is absorbed.
    let c = tb.cmd(1, upd(3000));
    assert_eq!((c.status, c.result), (ST_OK, 4000));
    // Into the middle of [5000, 6000): the cursor ends at its end.
    let c = tb.cmd(1, upd(5500));
    assert_eq!((c.status, c.result), (ST_OK, 6000));
    assert_eq!(tb.cmd(1, upd(5999)).status, ST_BAD_DESC, "backwards");
    // The next packet at 6000 is in order.
    deliver(&mut tb, &[Pkt::new(6000, vec![3; 100]).bytes()]);
    let e = tb.drv[1].reap_hdr(0);
    let last = e.last().unwrap().0;
    assert_eq!((last.flags, last.stream_off, last.cursor), (0, 6000, 6100));
}

/// An ACK the host B sends on the flow (5001 -> 4000): acknowledgment
/// number `ack`, window field `win`.
fn host_ack(ack: u32, win: u16) -> Vec<u8> {
    ack_frame(B_IP, A_IP, 5001, 4000, ack, win, 0x10)
}

fn region(tb: &Tb, r: u64, len: usize) -> Vec<u8> {
    let mut got = vec![0u8; len];
    tb.drv[1].mem.read(r, &mut got).unwrap();
    got
}

#[test]
fn nothing_is_placed_past_the_window_the_host_offered() {
    let (mut tb, r, rk) = region_receiver(65_536);
    let bad = CmdFlow {
        rx_wscale: FLOW_MAX_WSCALE + 1,
        ..flow_b(0, 0)
    };
    assert_eq!(tb.install_closed(1, bad), Err(ST_BAD_DESC));
    let flow = tb
        .install_closed(
            1,
            CmdFlow {
                rx_wscale: 2,
                ..flow_b(0, 0)
            },
        )
        .unwrap();
    assert_eq!(tb.post(1, flow, rk, 0, 65_536).status, ST_OK);
    // No window known yet: nothing is placed.
    deliver(&mut tb, &[Pkt::new(0, vec![0x11; 1000]).bytes()]);
    assert!(region(&tb, r, 1000).iter().all(|&b| b == 0));
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_UNACCEPTABLE), 1);
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!((rx.len(), rx[0].0.flags & RXF_FLOW), (1, RXF_FLOW));
    // The edge the driver gives.
    assert_eq!(tb.raise_edge(1, flow, 1500).status, ST_OK);
    deliver(&mut tb, &[Pkt::new(0, vec![0x22; 1000]).bytes()]);
    assert!(region(&tb, r, 1000).iter().all(|&b| b == 0x22));
    // [1000, 2000) reaches past 1500: not a byte of it is written.
    deliver(&mut tb, &[Pkt::new(1000, vec![0x33; 1000]).bytes()]);
    assert!(region(&tb, r, 2000)[1000..].iter().all(|&b| b == 0));
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_UNACCEPTABLE), 2);
    // The host's ACK offers 1024 << 2 bytes from 1000: learned as it leaves.
    tb.drv[1].tx_plain(0, &host_ack(1000, 1024), 7);
    tb.step();
    assert_eq!(tb.drv[1].reap_tx(0)[0].status, ST_OK);
    deliver(&mut tb, &[Pkt::new(1000, vec![0x44; 1000]).bytes()]);
    assert!(region(&tb, r, 2000)[1000..].iter().all(|&b| b == 0x44));
    // A lower edge changes nothing; up to 1000 + 4096 is placed, not past.
    assert_eq!(tb.raise_edge(1, flow, 10).status, ST_OK);
    deliver(&mut tb, &[Pkt::new(2000, vec![0x55; 3096]).bytes()]);
    assert!(region(&tb, r, 5096)[2000..].iter().all(|&b| b == 0x55));
    deliver(&mut tb, &[Pkt::new(5096, vec![0x66; 1]).bytes()]);
    assert_eq!(region(&tb, r, 5097)[5096], 0);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_UNACCEPTABLE), 3);
    // FLOWU_EDGE comes alone, and below the stream offset limit.
    for (flags, to) in [
        (FLOWU_EDGE | FLOWU_CURSOR, 6000),
        (FLOWU_EDGE, STREAM_OFF_LIMIT),
    ] {
        let c = CmdFlow {
            opcode: CMD_FLOW_UPDATE,
            flags,
            flow,
            stream_off: to,
            ..Default::default()
        };
        assert_eq!(tb.cmd(1, c.encode()).status, ST_BAD_DESC);
    }
}

#[test]
fn an_edge_given_with_the_install_opens_the_window_as_far() {
    let (mut tb, r, rk) = region_receiver(65_536);
    // Version 2.5 announces it.
    assert_eq!(tb.drv[1].bar.r32(REG_VERSION), 0x2_0005);
    assert_eq!(
        tb.drv[1].bar.r32(REG_CAPS) & CAP_INSTALL_EDGE,
        CAP_INSTALL_EDGE
    );
    // An edge of 2^31 or more names no stream offset: refused, nothing installed.
    let far = CmdFlow {
        flags: FLOWI_EDGE,
        flow: 1 << 31,
        ..flow_b(0, 0)
    };
    assert_eq!(tb.install_closed(1, far), Err(ST_BAD_DESC));
    let flow = tb
        .install_closed(
            1,
            CmdFlow {
                flags: FLOWI_EDGE,
                flow: 1500,
                ..flow_b(0, 0)
            },
        )
        .unwrap();
    assert_eq!(tb.post(1, flow, rk, 0, 65_536).status, ST_OK);
    // Placed up to the edge, as after FLOWU_EDGE to 1500; not past it.
    deliver(&mut tb, &[Pkt::new(0, vec![0x22; 1000]).bytes()]);
    assert!(region(&tb, r, 1000).iter().all(|&b| b == 0x22));
    deliver(&mut tb, &[Pkt::new(1000, vec![0x33; 1000]).bytes()]);
    assert!(region(&tb, r, 2000)[1000..].iter().all(|&b| b == 0));
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_UNACCEPTABLE), 1);
    // Later edges are raised as before.
    assert_eq!(tb.raise_edge(1, flow, 2000).status, ST_OK);
    deliver(&mut tb, &[Pkt::new(1000, vec![0x44; 1000]).bytes()]);
    assert!(region(&tb, r, 2000)[1000..].iter().all(|&b| b == 0x44));
}

#[test]
fn payload_tcp_discards_for_its_flags_is_not_placed() {
    let (mut tb, _, r) = receiver(65_536);
    // Without ACK, with SYN, with RST: TCP drops the payload.
    for flags in [0x08, 0x12, 0x14] {
        let p = Pkt {
            flags,
            ..Pkt::new(0, vec![0x77; 500])
        };
        deliver(&mut tb, &[p.bytes()]);
    }
    assert!(region(&tb, r, 500).iter().all(|&b| b == 0));
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_UNACCEPTABLE), 3);
    assert_eq!(tb.drv[1].reap_rx(0).len(), 3);
    // An ACK with FIN is accepted.
    let p = Pkt {
        flags: 0x11,
        ..Pkt::new(0, vec![0x78; 500])
    };
    deliver(&mut tb, &[p.bytes()]);
    assert!(region(&tb, r, 500).iter().all(|&b| b == 0x78));
}

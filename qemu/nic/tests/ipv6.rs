//! IPv6 (docs/hardware.md §15): flows installed with a `FlowAddr6` block
//! and placed in both receive modes, merge sends and plain TSO building
//! IPv6 headers, checksum offload, extension headers and malformed IPv6 on
//! the receive path, and the RSS hash of IPv6 frames. Checksums are
//! checked with the RFC 1071 sum below, not the model's.

mod common;

use common::*;
use zeronic_hw::cmd::*;
use zeronic_hw::desc::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;
use zeronic_nic::model::{lock, Topology};
use zeronic_nic::wire::Impair;

/// 2001:db8::1 (sender A) and 2001:db8::2 (receiver B).
const A6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const B6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
/// Ethernet + IPv6 + TCP without options.
const HL: usize = 14 + 40 + 20;

/// Textbook RFC 1071 ones' complement sum of big-endian 16-bit words.
fn sum16(data: &[u8]) -> u32 {
    let mut s: u32 = 0;
    for w in data.chunks(2) {
        s += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
        s = (s & 0xffff) + (s >> 16);
    }
    s
}

fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The IPv6 pseudo-header sum (RFC 8200 8.1) of an upper-layer packet.
fn pseudo6(src: &[u8], dst: &[u8], len: usize, nh: u8) -> u32 {
    let mut p = Vec::new();
    p.extend_from_slice(src);
    p.extend_from_slice(dst);
    p.extend_from_slice(&(len as u32).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, nh]);
    sum16(&p)
}

/// True if the untagged IPv6 frame `f`'s upper-layer checksum (next header
/// `nh`, no extension header) verifies.
fn l4_csum_ok(f: &[u8], nh: u8) -> bool {
    let l4 = &f[54..];
    fold(pseudo6(&f[22..38], &f[38..54], l4.len(), nh) + sum16(l4)) == 0xffff
}

/// The checksum to store at `field` of the untagged IPv6 frame `f`.
fn l4_csum(f: &mut [u8], field: usize, nh: u8) {
    f[field..field + 2].copy_from_slice(&[0, 0]);
    let l4 = &f[54..];
    let c = !fold(pseudo6(&f[22..38], &f[38..54], l4.len(), nh) + sum16(l4));
    f[field..field + 2].copy_from_slice(&c.to_be_bytes());
}

/// Ethernet + IPv6 + TCP header (payload length 20, checksum 0).
fn tcp6_hdr(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, seq: u32, flags: u8) -> Vec<u8> {
    let mut h = vec![0u8; HL];
    h[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    h[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    h[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    // Version 6, traffic class 0, flow label 0x12345.
    h[14..18].copy_from_slice(&0x6001_2345u32.to_be_bytes());
    h[18..20].copy_from_slice(&20u16.to_be_bytes());
    h[20] = 6;
    h[21] = 64;
    h[22..38].copy_from_slice(&src);
    h[38..54].copy_from_slice(&dst);
    let t = &mut h[54..74];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&1u32.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    h
}

/// A whole IPv6/TCP frame with a correct checksum.
fn tcp6_frame(
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    seq: u32,
    pay: &[u8],
) -> Vec<u8> {
    let mut f = tcp6_hdr(src, dst, sport, dport, seq, 0x18);
    f.extend_from_slice(pay);
    let pl = (f.len() - 54) as u16;
    f[18..20].copy_from_slice(&pl.to_be_bytes());
    l4_csum(&mut f, 70, 6);
    f
}

/// The IPv6 flow of receiver B (local B6:5001, remote A6:4000), its
/// `FlowAddr6` block written into guest g's RAM.
fn flow6(tb: &mut Tb, g: usize, rx_isn: u32) -> CmdFlow {
    let a = tb.drv[g].alloc(FlowAddr6::SIZE as u64);
    let block = FlowAddr6 {
        local_addr: B6,
        remote_addr: A6,
    };
    tb.drv[g].mem.write(a, &block.encode()).unwrap();
    let mut c = CmdFlow {
        flags: FLOWI_IPV6,
        local_port: 5001,
        remote_port: 4000,
        rx_isn,
        mode: FLOW_RX_SEGMENTS,
        ..Default::default()
    };
    c.set_addr6(a);
    c
}

/// Sender g0 with a READ MR over `data`, receiver g1 with a WRITE MR of
/// `cap` bytes: (send key, recv key, recv base).
fn regions(tb: &mut Tb, data: &[u8], cap: u64) -> (u64, u64, u64) {
    let sbase = tb.drv[0].alloc(data.len() as u64);
    tb.drv[0].mem.write(sbase, data).unwrap();
    let skey = tb
        .reg_mr(0, sbase, data.len() as u64, MR_ACCESS_LOCAL_READ)
        .unwrap();
    let rbase = tb.drv[1].alloc(cap);
    let rkey = tb.reg_mr(1, rbase, cap, MR_ACCESS_LOCAL_WRITE).unwrap();
    (skey, rkey, rbase)
}

fn read(tb: &Tb, g: usize, a: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    tb.drv[g].mem.read(a, &mut v).unwrap();
    v
}

#[test]
fn an_ipv6_flow_is_placed_from_merge_sends_and_reported() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    let data = pattern(100_000, 1);
    let (skey, rkey, rbase) = regions(&mut tb, &data, 131_072);
    let c = flow6(&mut tb, 1, 1000);
    let flow = tb.install(1, c).unwrap();
    assert_eq!(tb.post(1, flow, rkey, 0, 131_072).status, ST_OK);
    // The same tuple is refused twice; an IPv4 flow on the same ports is
    // another tuple.
    let again = flow6(&mut tb, 1, 1000);
    assert_eq!(tb.install(1, again), Err(ST_EXISTS));
    assert!(tb.install(1, flow_b(0, 1000)).is_ok());
    let ha = tb.drv[0].alloc(256);
    let hdr = tcp6_hdr(A6, B6, 4000, 5001, 1000, 0x18);
    tb.drv[0].tx_merge(0, &hdr, ha, skey, 0, data.len() as u32, 8000);
    tb.step();
    let tx = tb.drv[0].reap_tx(0);
    assert_eq!((tx[0].status, tx[0].frames), (ST_OK, 13));
    assert!(read(&tb, 1, rbase, data.len()) == data);
    assert_eq!(tb.drv[1].reap_rx(0).len(), 0);
    let h = tb.drv[1].reap_hdr(0);
    let lens: Vec<u32> = h.iter().map(|e| e.0.len).collect();
    assert_eq!(lens, vec![64_000, 36_000]);
    assert!(h
        .iter()
        .all(|e| e.0.flow == flow && e.0.hdr_len as usize == HL));
    assert_eq!(h[1].0.cursor, 100_000);
    // The last packet's header as received: IPv6, its own payload length
    // and sequence number, the flow label kept.
    let last = &h[1].1;
    assert_eq!(last[12..14], [0x86, 0xdd]);
    assert_eq!(last[14..18], 0x6001_2345u32.to_be_bytes());
    assert_eq!(u16::from_be_bytes([last[18], last[19]]), 20 + 4000);
    assert_eq!(last[22..38], A6);
    assert_eq!(
        u32::from_be_bytes(last[58..62].try_into().unwrap()),
        1000 + 96_000
    );
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_PLACED_BYTES), 100_000);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_CSUM_ERR), 0);
}

#[test]
fn an_ipv6_ring_flow_places_at_ring_offsets() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 4);
    let data = pattern(24_576, 2);
    let (skey, rkey, rbase) = regions(&mut tb, &data, 16_384);
    let mut c = flow6(&mut tb, 1, 50);
    c.mode = FLOW_RX_RING;
    c.ring_key = rkey;
    c.ring_size = 16_384;
    let flow = tb.install(1, c).unwrap();
    let ha = tb.drv[0].alloc(256);
    let hdr = |seq| tcp6_hdr(A6, B6, 4000, 5001, seq, 0x10);
    tb.drv[0].tx_merge(0, &hdr(50), ha, skey, 0, 12_288, 8192);
    tb.step();
    let upd = CmdFlow {
        opcode: CMD_FLOW_UPDATE,
        flags: FLOWU_RING_HEAD,
        flow,
        stream_off: 8192,
        ..Default::default()
    };
    assert_eq!(tb.cmd(1, upd.encode()).status, ST_OK);
    tb.drv[0].tx_merge(0, &hdr(50 + 12_288), ha, skey, 12_288, 8192, 0);
    tb.step();
    assert!(tb.drv[0].reap_tx(0).iter().all(|c| c.status == ST_OK));
    let got = read(&tb, 1, rbase, 16_384);
    assert!(got[12_288..] == data[12_288..16_384]);
    assert!(got[..4096] == data[16_384..20_480]);
    assert!(got[4096..12_288] == data[4096..12_288]);
    assert_eq!(tb.drv[1].reap_rx(0).len(), 0);
}

#[test]
fn ipv6_flow_install_checks_its_address_block() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    let mut c = flow6(&mut tb, 1, 0);
    c.set_addr6(c.addr6() + 4);
    assert_eq!(tb.install(1, c), Err(ST_BAD_DESC), "unaligned");
    c.set_addr6(RAM as u64 - 16);
    assert_eq!(tb.install(1, c), Err(ST_DMA), "past guest RAM");
    c.set_addr6(!7);
    assert_eq!(tb.install(1, c), Err(ST_DMA), "far past guest RAM");
    // An IPv4-mapped address is an IPv4 flow's: refused.
    let a = tb.drv[1].alloc(32);
    let mut mapped = [0u8; 16];
    mapped[10..12].copy_from_slice(&[0xff, 0xff]);
    mapped[12..].copy_from_slice(&B_IP);
    let block = FlowAddr6 {
        local_addr: mapped,
        remote_addr: A6,
    };
    tb.drv[1].mem.write(a, &block.encode()).unwrap();
    c.set_addr6(a);
    assert_eq!(tb.install(1, c), Err(ST_BAD_DESC), "mapped");
}

#[test]
fn ipv6_merge_sends_build_headers_and_checksums() {
    // No flow on the receiver: every segment arrives whole.
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 64);
    let data = pattern(10_000, 3);
    let (skey, _, _) = regions(&mut tb, &data, 4096);
    let ha = tb.drv[0].alloc(256);
    let mut hdr = tcp6_hdr(A6, B6, 4000, 5001, 0xffff_fff0, 0x19);
    hdr[18..20].copy_from_slice(&[0xde, 0xad]); // ignored
    tb.drv[0].tx_merge(0, &hdr, ha, skey, 0, 10_000, 3000);
    tb.step();
    assert_eq!(tb.drv[0].reap_tx(0)[0].frames, 4);
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(rx.len(), 4);
    let mut got = Vec::new();
    for (i, (c, f)) in rx.iter().enumerate() {
        let n = 3000.min(10_000 - i * 3000);
        assert_eq!(c.flags, RXF_TCP | RXF_CSUM_OK, "segment {i}");
        assert_eq!(f.len(), HL + n);
        assert_eq!(f[14..18], hdr[14..18]);
        assert_eq!(u16::from_be_bytes([f[18], f[19]]) as usize, 20 + n);
        assert_eq!(f[20..54], hdr[20..54]);
        let seq = u32::from_be_bytes(f[58..62].try_into().unwrap());
        assert_eq!(seq, 0xffff_fff0u32.wrapping_add((i * 3000) as u32));
        // FIN and PSH only on the last segment.
        let want = if i == 3 { 0x19 } else { 0x10 };
        assert_eq!(f[67], want, "segment {i}");
        assert!(l4_csum_ok(f, 6), "segment {i}");
        got.extend_from_slice(&f[HL..]);
    }
    assert_eq!(got, data);
}

/// Posts the frame of `len` bytes at `a` as a plain TSO send, MSS 1440.
fn tso_1440(tb: &mut Tb, a: u64, len: usize) {
    tb.drv[0].tx(
        0,
        TxDesc {
            opcode: TX_OP_PLAIN,
            flags: TXF_TSO,
            buf_len: len as u32,
            buf_addr: a,
            mss: 1440,
            ..Default::default()
        },
    );
}

#[test]
fn plain_tso_segments_tcp_over_ipv6() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 64);
    let payload = pattern(20_000, 4);
    let mut f = tcp6_frame(A6, B6, 10, 20, 7, &payload);
    // What a GSO skb carries: the pseudo-header sum, its own length.
    f[70..72].copy_from_slice(&[0x12, 0x34]);
    f[18..20].copy_from_slice(&0u16.to_be_bytes());
    let a = tb.drv[0].alloc(f.len() as u64);
    tb.drv[0].mem.write(a, &f).unwrap();
    tso_1440(&mut tb, a, f.len());
    tb.step();
    let nseg = 20_000usize.div_ceil(1440);
    assert_eq!(tb.drv[0].reap_tx(0)[0].frames as usize, nseg);
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(rx.len(), nseg);
    let mut got = Vec::new();
    for (i, (c, fr)) in rx.iter().enumerate() {
        let n = 1440.min(20_000 - i * 1440);
        assert_eq!(c.flags, RXF_TCP | RXF_CSUM_OK);
        assert_eq!(fr.len(), HL + n);
        assert_eq!(u16::from_be_bytes([fr[18], fr[19]]) as usize, 20 + n);
        assert!(l4_csum_ok(fr, 6), "segment {i}");
        got.extend_from_slice(&fr[HL..]);
    }
    assert_eq!(got, payload);
    // An extension header is not such a packet.
    let mut bad = f.clone();
    bad[20] = 0; // hop-by-hop
    tb.drv[0].mem.write(a, &bad).unwrap();
    tso_1440(&mut tb, a, f.len());
    tb.step();
    assert_eq!(tb.drv[0].reap_tx(0)[0].status, ST_MALFORMED);
}

#[test]
fn checksum_offload_covers_tcp_and_udp_over_ipv6() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 8);
    // TCP: the driver seeds the field with the pseudo-header sum.
    let mut t = tcp6_frame(A6, B6, 1, 2, 3, &pattern(999, 5));
    let seed = fold(pseudo6(&A6, &B6, t.len() - 54, 6));
    t[70..72].copy_from_slice(&seed.to_be_bytes());
    // UDP: 8-byte header, next header 17.
    let mut u = tcp6_hdr(A6, B6, 0, 0, 0, 0);
    u.truncate(54);
    u[20] = 17;
    let body = pattern(501, 6);
    let ulen = (8 + body.len()) as u16;
    u.extend_from_slice(&5353u16.to_be_bytes());
    u.extend_from_slice(&53u16.to_be_bytes());
    u.extend_from_slice(&ulen.to_be_bytes());
    let useed = fold(pseudo6(&A6, &B6, ulen as usize, 17));
    u.extend_from_slice(&useed.to_be_bytes());
    u.extend_from_slice(&body);
    u[18..20].copy_from_slice(&ulen.to_be_bytes());
    for (f, field) in [(&t, 16u16), (&u, 6)] {
        let a = tb.drv[0].alloc(f.len() as u64);
        tb.drv[0].mem.write(a, f).unwrap();
        tb.drv[0].tx(
            0,
            TxDesc {
                opcode: TX_OP_PLAIN,
                flags: TXF_CSUM_PARTIAL,
                buf_len: f.len() as u32,
                buf_addr: a,
                csum_start: 54,
                csum_offset: field,
                ..Default::default()
            },
        );
    }
    tb.step();
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(rx.len(), 2);
    assert_eq!(rx[0].0.flags, RXF_TCP | RXF_CSUM_OK);
    assert!(l4_csum_ok(&rx[0].1, 6));
    assert_eq!(rx[1].0.flags, 0);
    assert!(l4_csum_ok(&rx[1].1, 17));
    assert_ne!(rx[1].1[60..62], [0, 0]);
}

#[test]
fn extension_headers_take_the_normal_path_and_are_counted() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 8);
    let c = flow6(&mut tb, 1, 0);
    tb.install(1, c).unwrap();
    // A flow's tuple behind a destination-options header: never matched.
    let mut f = tcp6_frame(A6, B6, 4000, 5001, 0, b"behind an extension header");
    f[20] = 60;
    f.splice(54..54, [6, 0, 1, 4, 0, 0, 0, 0]);
    let pl = (f.len() - 54) as u16;
    f[18..20].copy_from_slice(&pl.to_be_bytes());
    // A UDP datagram: not TCP, not an extension header.
    let mut u = f.clone();
    u[20] = 17;
    deliver(&mut tb, &[f.clone(), u]);
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(rx.len(), 2);
    assert_eq!((rx[0].0.flags, rx[0].0.flow), (0, 0));
    assert_eq!(rx[0].1, f);
    assert_eq!(rx[1].0.flags, 0);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_V6_EXTHDR), 1);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_SPLIT), 0);
    assert!(tb.drv[1].reap_hdr(0).is_empty());
}

#[test]
fn malformed_ipv6_is_dropped_and_counted() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 16);
    let c = flow6(&mut tb, 1, 0);
    tb.install(1, c).unwrap();
    let good = tcp6_frame(A6, B6, 4000, 5001, 0, &pattern(100, 7));
    let mut bad = Vec::new();
    // Payload length past the frame's end.
    let mut f = good.clone();
    f.truncate(f.len() - 1);
    bad.push(f);
    let mut f = good.clone();
    f[18..20].copy_from_slice(&u16::MAX.to_be_bytes());
    bad.push(f);
    // Payload length shorter than a TCP header.
    let mut f = good.clone();
    f[18..20].copy_from_slice(&19u16.to_be_bytes());
    bad.push(f);
    // Version 4 in an IPv6 EtherType; a cut fixed header; a data offset
    // past the payload.
    let mut f = good.clone();
    f[14] = 0x40;
    bad.push(f);
    bad.push(good[..40].to_vec());
    let mut f = good.clone();
    f[66] = 0xf0;
    f[18..20].copy_from_slice(&40u16.to_be_bytes());
    bad.push(f);
    let n = bad.len() as u64;
    deliver(&mut tb, &bad);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_MALFORMED), n);
    assert!(tb.drv[1].reap_rx(0).is_empty());
    assert!(tb.drv[1].reap_hdr(0).is_empty());
    // Padding past the payload length is not malformed.
    let mut f = tcp6_frame(A6, B6, 1, 2, 0, &pattern(10, 8));
    f.extend_from_slice(&[0; 6]);
    deliver(&mut tb, &[f]);
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(rx[0].0.flags, RXF_TCP | RXF_CSUM_OK);
}

#[test]
fn ipv6_frames_carry_microsoft_s_rss_hashes() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 4);
    tb.drv[1]
        .bar
        .w32(port_block(0) + PORT_RSS_CTRL, RSS_CTRL_HASH);
    tb.step();
    // The first case of Microsoft's IPv6 table, under the default key.
    let g = |w: [u16; 8]| {
        let mut a = [0u8; 16];
        for (i, x) in w.iter().enumerate() {
            a[2 * i..2 * i + 2].copy_from_slice(&x.to_be_bytes());
        }
        a
    };
    let s = g([0x3ffe, 0x2501, 0x200, 0x1fff, 0, 0, 0, 7]);
    let d = g([0x3ffe, 0x2501, 0x200, 3, 0, 0, 0, 1]);
    let t = tcp6_frame(s, d, 2794, 1766, 0, b"x");
    let mut u = t.clone();
    u[20] = 17;
    deliver(&mut tb, &[t, u]);
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(
        (rx[0].0.rss_type, rx[0].0.rss_hash),
        (RSS_TYPE_TCP6, 0x4020_7d3d)
    );
    assert_eq!(
        (rx[1].0.rss_type, rx[1].0.rss_hash),
        (RSS_TYPE_IPV6, 0x2cc1_8cd5)
    );
}

#[test]
fn the_window_edge_is_learned_from_ipv6_acks() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    let c = flow6(&mut tb, 1, 100);
    let flow = tb.install_closed(1, c).unwrap();
    // Guest 1 acknowledges on the flow's tuple: ack 100, window 1000.
    let mut ack = tcp6_hdr(B6, A6, 5001, 4000, 1, 0x10);
    ack[62..66].copy_from_slice(&100u32.to_be_bytes());
    ack[68..70].copy_from_slice(&1000u16.to_be_bytes());
    l4_csum(&mut ack, 70, 6);
    tb.drv[1].tx_plain(0, &ack, 1);
    tb.step();
    let mut d = lock(&tb.model.guests[1].dev);
    assert_eq!(d.flows.get_mut(flow).unwrap().edge(), 1000);
}

//! IPv6 (docs/hardware.md §15): flows installed with a `FlowAddr6` block
//! and placed in both receive modes, merge sends and plain TSO building
//! IPv6 headers, checksum offload, extension headers and malformed IPv6 on
//! the receive path, and the RSS hash of IPv6 frames. Checksums are
//! checked with the RFC 1071 sum of common/tcp6.rs, not the model's.

mod common;

use common::ip6::{insert_ext6, A6, B6};
use common::tcp6::*;
use common::*;
use zeronic_hw::cmd::*;
use zeronic_hw::desc::*;
use zeronic_hw::net::ipv4_mapped;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;
use zeronic_nic::model::{lock, Topology};
use zeronic_nic::wire::Impair;

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
    insert_ext6(&mut f, 60);
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
    let ack = ack6_frame(5001, 4000, 100, 1000, 0x10);
    tb.drv[1].tx_plain(0, &ack, 1);
    tb.step();
    let mut d = lock(&tb.model.guests[1].dev);
    assert_eq!(d.flows.get_mut(flow).unwrap().edge(), 1000);
}

/// Found by tests/peer_fuzz.rs. IPv4 flows are keyed by IPv4-mapped
/// addresses, and the lookup did not look at the family: an IPv6 frame
/// from `::ffff:A` to `::ffff:B` was placed into the IPv4 flow A -> B.
#[test]
fn ipv6_frames_with_ipv4_mapped_addresses_match_no_ipv4_flow() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 4);
    let flow = tb.install(1, flow_b(0, 0)).unwrap();
    let buf = tb.drv[1].alloc(4096);
    let key = tb.reg_mr(1, buf, 4096, MR_ACCESS_LOCAL_WRITE).unwrap();
    assert_eq!(tb.post(1, flow, key, 0, 4096).status, ST_OK);
    let (a, b) = (ipv4_mapped(A_IP), ipv4_mapped(B_IP));
    let f = tcp6_frame(a, b, 4000, 5001, 0, &pattern(100, 9));
    deliver(&mut tb, std::slice::from_ref(&f));
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(rx.len(), 1);
    assert_eq!((rx[0].0.flags, rx[0].0.flow), (RXF_TCP | RXF_CSUM_OK, 0));
    assert_eq!(rx[0].1, f);
    assert!(tb.drv[1].reap_hdr(0).is_empty());
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_PLACED_BYTES), 0);
}

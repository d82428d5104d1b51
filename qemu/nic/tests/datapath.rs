//! Data path: plain frames, checksum offload, TX merge + TSO, RX split and
//! placement, coalescing, fallback, duplicates, reordering, and a
//! multi-megabyte stream over an impaired wire.

mod common;

use std::time::Duration;

use common::*;
use zeronic_hw::cmd::*;
use zeronic_hw::desc::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;
use zeronic_nic::model::Topology;
use zeronic_nic::wire::Impair;

#[test]
fn plain_frames_pass_whole_with_flags() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 8);
    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.extend((0..46).map(|i| i as u8));
    let good = tcp_frame(A_IP, B_IP, 1, 2, 77, b"hello world");
    let mut bad = good.clone();
    bad[60] ^= 0x40;
    tb.drv[0].tx_plain(0, &arp, 1);
    tb.drv[0].tx_plain(0, &good, 2);
    tb.drv[0].tx_plain(0, &bad, 3);
    tb.step();
    let tx = tb.drv[0].reap_tx(0);
    assert_eq!(tx.len(), 3);
    for (i, c) in tx.iter().enumerate() {
        assert_eq!(
            (c.status, c.frames, c.cookie, c.index),
            (ST_OK, 1, i as u64 + 1, i as u32)
        );
    }
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(rx.len(), 3);
    assert_eq!(rx[0].1, arp);
    assert_eq!(rx[0].0.flags, 0);
    assert_eq!(rx[1].1, good);
    assert_eq!(rx[1].0.flags, RXF_TCP | RXF_CSUM_OK);
    assert_eq!(rx[2].1, bad);
    assert_eq!(rx[2].0.flags, RXF_TCP | RXF_CSUM_BAD);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_NORMAL), 3);
    assert_eq!(tb.drv[0].pstat(0, PSTAT_TX_FRAMES), 3);
    assert!(tb.drv[1].irq.count(vec_rx(0)) >= 1);
    assert!(tb.drv[0].irq.count(vec_tx(0)) >= 1);
}

#[test]
fn two_port_topology_loops_between_ports() {
    let mut tb = Tb::new(Topology::TwoPort, Impair::default());
    assert_eq!(tb.drv.len(), 1);
    tb.drv[0].post_rx(1, 2);
    let f = tcp_frame(A_IP, B_IP, 1, 2, 5, &[7u8; 1000]);
    tb.drv[0].tx_plain(0, &f, 9);
    tb.step();
    assert_eq!(tb.drv[0].reap_tx(0)[0].status, ST_OK);
    let rx = tb.drv[0].reap_rx(1);
    assert_eq!(rx.len(), 1);
    assert_eq!(rx[0].1, f);
    assert!(tb.drv[0].reap_rx(0).is_empty());
}

#[test]
fn checksum_partial_is_inserted() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 1);
    let want = tcp_frame(A_IP, B_IP, 10, 20, 1234, &pattern(3001, 1));
    let mut f = want.clone();
    // CHECKSUM_PARTIAL: the field holds the folded pseudo-header sum.
    let ps = zeronic_nic::csum::pseudo_v4(A_IP, B_IP, (f.len() - 34) as u16);
    f[50..52].copy_from_slice(&ps.folded().to_le_bytes());
    let a = tb.drv[0].alloc(f.len() as u64);
    tb.drv[0].mem.write(a, &f).unwrap();
    tb.drv[0].tx(
        0,
        TxDesc {
            opcode: TX_OP_PLAIN,
            flags: TXF_CSUM_PARTIAL,
            buf_len: f.len() as u32,
            buf_addr: a,
            csum_start: 34,
            csum_offset: 16,
            ..Default::default()
        },
    );
    tb.step();
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(rx[0].0.flags, RXF_TCP | RXF_CSUM_OK);
    assert_eq!(rx[0].1, want);
}

/// A plain TSO send (`TX_OP_PLAIN` + `TXF_TSO`, spec §8) leaves as
/// MSS-sized frames with per-segment IPv4 length, id and checksum, TCP
/// sequence number and checksum, PSH on the last only; the receiver's
/// normal path verifies every checksum.
#[test]
fn plain_tso_is_segmented_with_checksums() {
    for (topo, tagged) in [
        (Topology::TwoGuest, false),
        (Topology::TwoPort, false),
        (Topology::TwoPort, true),
    ] {
        let mut tb = Tb::new(topo, Impair::default());
        let (rg, rp) = if topo == Topology::TwoPort {
            (0, 1)
        } else {
            (1, 0)
        };
        tb.drv[rg].post_rx(rp, 64);
        let payload = pattern(60_000, 9);
        let mut f = tcp_frame(A_IP, B_IP, 10, 20, 0xffff_f000, &payload);
        // What a GSO skb carries: the pseudo-header sum, a stale IP checksum.
        f[50..52].copy_from_slice(&[0x12, 0x34]);
        f[24..26].copy_from_slice(&[0, 0]);
        f[18..20].copy_from_slice(&100u16.to_be_bytes()); // IP id
        let tag = [0x81, 0x00, 0x00, 0x07];
        if tagged {
            f.splice(12..12, tag);
        }
        let a = tb.drv[0].alloc(f.len() as u64);
        tb.drv[0].mem.write(a, &f).unwrap();
        tb.drv[0].tx(
            0,
            TxDesc {
                opcode: TX_OP_PLAIN,
                flags: TXF_TSO | TXF_CSUM_PARTIAL,
                buf_len: f.len() as u32,
                buf_addr: a,
                csum_start: 34 + if tagged { 4 } else { 0 },
                csum_offset: 16,
                mss: 1448,
                cookie: 7,
                ..Default::default()
            },
        );
        for _ in 0..4 {
            tb.step();
        }
        let c = tb.drv[0].reap_tx(0);
        let nseg = 60_000usize.div_ceil(1448);
        assert_eq!(
            (c[0].status, c[0].frames, c[0].cookie),
            (ST_OK, nseg as u16, 7)
        );
        let rx = tb.drv[rg].reap_rx(rp);
        assert_eq!(rx.len(), nseg);
        let mut got = Vec::new();
        for (i, (c, fr)) in rx.iter().enumerate() {
            // Tagged frames get no flags (spec §9); the checksums below are
            // checked byte for byte either way.
            let flags = if tagged { 0 } else { RXF_TCP | RXF_CSUM_OK };
            assert_eq!(c.flags, flags, "segment {i}");
            let n = 1448.min(60_000 - i * 1448);
            let fr = &mut fr.clone();
            if tagged {
                assert_eq!(fr[12..16], tag, "segment {i}");
                fr.drain(12..16);
            }
            assert_eq!(fr.len(), 54 + n);
            let mut want = tcp_frame(
                A_IP,
                B_IP,
                10,
                20,
                0xffff_f000u32.wrapping_add((i * 1448) as u32),
                &payload[i * 1448..i * 1448 + n],
            );
            if i + 1 < nseg {
                want[47] &= !0x08; // PSH on the last segment only
            }
            want[18..20].copy_from_slice(&(100 + i as u16).to_be_bytes());
            zeronic_nic::frame::set_ipv4_csum(&mut want[14..34]);
            let mut c = zeronic_nic::csum::pseudo_v4(A_IP, B_IP, (want.len() - 34) as u16);
            want[50..52].copy_from_slice(&[0, 0]);
            c.add(&want[34..]);
            want[50..52].copy_from_slice(&c.finish().to_le_bytes());
            assert_eq!(*fr, want, "segment {i}");
            got.extend_from_slice(&fr[54..]);
        }
        assert_eq!(got, payload);
        assert_eq!(tb.drv[0].pstat(0, PSTAT_TX_TSO_FRAMES), nseg as u64 - 1);
    }
}

/// Sender g0 with a READ MR over `data`; receiver g1 with a WRITE MR of
/// `cap` bytes (plus guard pages) and a flow. Returns (send key, send base,
/// recv key, recv base, flow).
fn setup_flow(tb: &mut Tb, data: &[u8], cap: u64, rx_isn: u32) -> (u64, u64, u64, u64, u32) {
    let sbase = tb.drv[0].alloc(data.len() as u64);
    tb.drv[0].mem.write(sbase, data).unwrap();
    let skey = tb
        .reg_mr(0, sbase, data.len() as u64, MR_ACCESS_LOCAL_READ)
        .unwrap();
    let guard = tb.drv[1].alloc(4096);
    let rbase = tb.drv[1].alloc(cap);
    let guard2 = tb.drv[1].alloc(4096);
    assert_eq!(rbase, guard + 4096);
    assert!(guard2 >= rbase + cap);
    tb.drv[1].mem.write(guard, &[0xaa; 4096]).unwrap();
    tb.drv[1].mem.write(guard2, &[0xaa; 4096]).unwrap();
    let rkey = tb.reg_mr(1, rbase, cap, MR_ACCESS_LOCAL_WRITE).unwrap();
    let flow = tb.install(1, flow_b(0, rx_isn)).unwrap();
    (skey, sbase, rkey, rbase, flow)
}

fn guards_intact(tb: &Tb, rbase: u64, cap: u64) {
    let mut g = vec![0u8; 4096];
    tb.drv[1].mem.read(rbase - 4096, &mut g).unwrap();
    assert!(g.iter().all(|&b| b == 0xaa), "guard before region written");
    let end = (rbase + cap + 4095) & !4095;
    tb.drv[1].mem.read(end, &mut g).unwrap();
    assert!(g.iter().all(|&b| b == 0xaa), "guard after region written");
}

fn recv_bytes(tb: &Tb, rbase: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    tb.drv[1].mem.read(rbase, &mut v).unwrap();
    v
}

#[test]
fn merge_tso_places_by_sequence_and_coalesces() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    let data = pattern(204_800, 2);
    let (skey, _, rkey, rbase, flow) = setup_flow(&mut tb, &data, 262_144, 1000);
    for i in 0..4u64 {
        let c = tb.post(1, flow, rkey, i * 65_536, 65_536);
        assert_eq!((c.status, c.result), (ST_OK, i * 65_536));
    }
    let hdr = tcp_hdr(A_IP, B_IP, 4000, 5001, 1000, 555, 0x18);
    let ha = tb.drv[0].alloc(256);
    tb.drv[0].tx_merge(0, &hdr, ha, skey, 0, data.len() as u32, 8000);
    tb.step();
    let tx = tb.drv[0].reap_tx(0);
    assert_eq!((tx[0].status, tx[0].frames), (ST_OK, 26));
    assert!(recv_bytes(&tb, rbase, data.len()) == data);
    assert!(recv_bytes(&tb, rbase + data.len() as u64, 4096) == vec![0u8; 4096]);
    guards_intact(&tb, rbase, 262_144);
    let h = tb.drv[1].reap_hdr(0);
    // 64 KiB coalescing limit: 8 x 8000-byte packets per entry.
    let lens: Vec<u32> = h.iter().map(|e| e.0.len).collect();
    assert_eq!(lens, vec![64_000, 64_000, 64_000, 12_800]);
    assert_eq!(h[0].0.seq, 1000);
    assert_eq!(h[0].0.nsegs, 8);
    assert_eq!(h[0].0.flags, HDRF_COALESCED);
    assert_eq!(h[0].0.cursor, 64_000);
    assert_eq!(h[3].0.cursor, 204_800);
    assert_eq!(h[3].0.stream_off, 192_000);
    assert_eq!(h[3].0.placed, 12_800);
    assert_eq!(h[3].0.flow, flow);
    // Header of the last packet: seq of the last segment, real IP length.
    let last = &h[3].1;
    assert_eq!(last.len(), 54);
    assert_eq!(
        u32::from_be_bytes(last[38..42].try_into().unwrap()),
        1000 + 200_000
    );
    assert_eq!(u16::from_be_bytes([last[16], last[17]]), 40 + 4800);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_PLACED_BYTES), 204_800);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_COALESCED), 22);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_NORMAL), 0);
}

#[test]
fn coalescing_off_gives_one_entry_per_packet() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].bar.w32(port_block(0) + PORT_COALESCE_BYTES, 0);
    let data = pattern(40_000, 3);
    let (skey, _, rkey, _, flow) = setup_flow(&mut tb, &data, 65_536, 7);
    tb.post(1, flow, rkey, 0, 65_536);
    let ha = tb.drv[0].alloc(256);
    tb.drv[0].tx_merge(
        0,
        &tcp_hdr(A_IP, B_IP, 4000, 5001, 7, 1, 0x10),
        ha,
        skey,
        0,
        40_000,
        8000,
    );
    tb.step();
    let h = tb.drv[1].reap_hdr(0);
    assert_eq!(h.len(), 5);
    assert!(h.iter().all(|e| e.0.nsegs == 1 && e.0.len == 8000));
}

#[test]
fn out_of_order_lands_at_its_offset() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    let data = pattern(16_000, 4);
    let (skey, _, rkey, rbase, flow) = setup_flow(&mut tb, &data, 16_384, 0xffff_f000);
    tb.post(1, flow, rkey, 0, 16_384);
    let ha = tb.drv[0].alloc(512);
    // Second half first (sequence wraps past 2^32 inside the stream).
    let seq2 = 0xffff_f000u32.wrapping_add(8000);
    tb.drv[0].tx_merge(
        0,
        &tcp_hdr(A_IP, B_IP, 4000, 5001, seq2, 1, 0x10),
        ha,
        skey,
        8000,
        8000,
        0,
    );
    tb.step();
    tb.drv[0].tx_merge(
        0,
        &tcp_hdr(A_IP, B_IP, 4000, 5001, 0xffff_f000, 1, 0x10),
        ha + 256,
        skey,
        0,
        8000,
        0,
    );
    tb.step();
    assert!(tb.drv[0].reap_tx(0).iter().all(|c| c.status == ST_OK));
    assert!(recv_bytes(&tb, rbase, 16_000) == data);
    let h = tb.drv[1].reap_hdr(0);
    assert_eq!(h.len(), 2);
    assert_eq!(
        (h[0].0.flags, h[0].0.stream_off, h[0].0.cursor),
        (HDRF_OOO, 8000, 0)
    );
    assert_eq!(
        (h[1].0.flags, h[1].0.stream_off, h[1].0.cursor),
        (0, 0, 16_000)
    );
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_OOO_FRAMES), 1);
}

#[test]
fn frames_over_placed_bytes_take_the_normal_path() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 4);
    let data = pattern(8000, 5);
    let (skey, _, rkey, rbase, flow) = setup_flow(&mut tb, &data, 65_536, 100);
    tb.post(1, flow, rkey, 0, 65_536);
    let ha = tb.drv[0].alloc(256);
    let hdr = tcp_hdr(A_IP, B_IP, 4000, 5001, 100, 1, 0x10);
    tb.drv[0].tx_merge(0, &hdr, ha, skey, 0, 8000, 0);
    tb.step();
    // Each byte is written once: neither a retransmission of placed bytes
    // nor one that also brings new bytes writes anything (TCP may hold the
    // first copy, or have dropped the packet that wrote it and accept this
    // one: it judges the frame on the normal path, the driver copies).
    tb.drv[1].mem.write(rbase, &[0xee; 8000]).unwrap();
    tb.drv[0].tx_merge(0, &hdr, ha, skey, 0, 8000, 0);
    tb.step();
    let mut more = pattern(8000, 6);
    more[..4000].copy_from_slice(&data[4000..]);
    let m = tb.drv[0].alloc(8000);
    tb.drv[0].mem.write(m, &more).unwrap();
    let k2 = tb.reg_mr(0, m, 8000, MR_ACCESS_LOCAL_READ).unwrap();
    tb.drv[0].tx_merge(
        0,
        &tcp_hdr(A_IP, B_IP, 4000, 5001, 100 + 4000, 1, 0x10),
        ha,
        k2,
        0,
        8000,
        0,
    );
    tb.step();
    assert!(tb.drv[0].reap_tx(0).iter().all(|c| c.status == ST_OK));
    assert!(
        recv_bytes(&tb, rbase, 16_000)
            == vec![0xee; 8000]
                .into_iter()
                .chain(vec![0; 8000])
                .collect::<Vec<_>>()
    );
    let h = tb.drv[1].reap_hdr(0);
    assert_eq!(h.len(), 1, "only the first packet was placed");
    assert!(h
        .iter()
        .all(|(e, _)| e.flags & HDRF_DUP == 0 && e.placed == e.len));
    let rx = tb.drv[1].reap_rx(0);
    let frames: Vec<_> = rx.iter().map(|(c, d)| (c.flags, c.flow, d.len())).collect();
    let fl = RXF_TCP | RXF_CSUM_OK | RXF_FLOW;
    assert_eq!(
        frames,
        vec![(fl, flow, 54 + 8000); 2],
        "both retransmissions, whole"
    );
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_DUP_FRAMES), 2);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_DUP_BYTES), 8000 + 8000);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_FALLBACK), 0);
    // The bytes TCP accepted from them are the driver's to copy; it then
    // moves the cursor past them, and what follows is placed again.
    tb.drv[1].mem.write(rbase + 8000, &more[4000..]).unwrap();
    let upd = CmdFlow {
        opcode: CMD_FLOW_UPDATE,
        flags: FLOWU_CURSOR,
        flow,
        stream_off: 12_000,
        ..Default::default()
    };
    assert_eq!(tb.cmd(1, upd.encode()).status, ST_OK);
    let m3 = tb.drv[0].alloc(4000);
    tb.drv[0].mem.write(m3, &[0x33; 4000]).unwrap();
    let k3 = tb.reg_mr(0, m3, 4000, MR_ACCESS_LOCAL_READ).unwrap();
    tb.drv[0].tx_merge(
        0,
        &tcp_hdr(A_IP, B_IP, 4000, 5001, 100 + 12_000, 1, 0x10),
        ha,
        k3,
        0,
        4000,
        0,
    );
    tb.step();
    assert!(recv_bytes(&tb, rbase + 12_000, 4000) == vec![0x33; 4000]);
    let h = tb.drv[1].reap_hdr(0);
    assert_eq!(
        (h[0].0.placed, h[0].0.stream_off, h[0].0.cursor),
        (4000, 12_000, 16_000)
    );
}

/// `fault hold`: the command queue stops before a cursor move until
/// thawed, while frames are still placed (what a driver's copy must not
/// race with).
#[test]
fn a_held_cursor_move_waits_while_frames_are_placed() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    let data = pattern(8000, 8);
    let (skey, _, rkey, rbase, flow) = setup_flow(&mut tb, &data, 65_536, 100);
    tb.post(1, flow, rkey, 0, 65_536);
    tb.model.set_hold_updates(1, true);
    let upd = CmdFlow {
        opcode: CMD_FLOW_UPDATE,
        flags: FLOWU_CURSOR,
        flow,
        stream_off: 16_000,
        ..Default::default()
    };
    tb.drv[1].push_cmd(upd.encode());
    tb.step();
    assert!(tb.drv[1].reap_cmd().is_none(), "the cursor move was held");
    let ha = tb.drv[0].alloc(256);
    tb.drv[0].tx_merge(
        0,
        &tcp_hdr(A_IP, B_IP, 4000, 5001, 100, 1, 0x10),
        ha,
        skey,
        0,
        8000,
        0,
    );
    tb.step();
    assert!(recv_bytes(&tb, rbase, 8000) == data, "placed while held");
    tb.model.set_hold_updates(1, false);
    tb.step();
    let c = tb.drv[1]
        .reap_cmd()
        .expect("the cursor move ran once let go");
    assert_eq!((c.status, c.result), (ST_OK, 16_000));
}

#[test]
fn no_posted_space_falls_back_to_normal_queue() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 4);
    let data = pattern(12_000, 7);
    let (skey, _, rkey, rbase, flow) = setup_flow(&mut tb, &data, 8192, 0);
    let ha = tb.drv[0].alloc(256);
    tb.drv[0].tx_merge(
        0,
        &tcp_hdr(A_IP, B_IP, 4000, 5001, 0, 1, 0x10),
        ha,
        skey,
        0,
        4000,
        0,
    );
    tb.step();
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(rx.len(), 1);
    assert_eq!(rx[0].0.flags, RXF_TCP | RXF_CSUM_OK | RXF_FLOW);
    assert_eq!(rx[0].0.flow, flow);
    assert_eq!(&rx[0].1[54..], &data[..4000]);
    assert!(tb.drv[1].reap_hdr(0).is_empty());
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_FALLBACK), 1);
    // The driver tells the NIC TCP took those bytes, then posts space.
    let upd = CmdFlow {
        opcode: CMD_FLOW_UPDATE,
        flags: FLOWU_CURSOR,
        flow,
        stream_off: 4000,
        ..Default::default()
    };
    assert_eq!(tb.cmd(1, upd.encode()).status, ST_OK);
    let c = tb.post(1, flow, rkey, 0, 8192);
    assert_eq!(c.result, 4000);
    // 8000 bytes: fits the posted 8192 -> placed.
    tb.drv[0].tx_merge(
        0,
        &tcp_hdr(A_IP, B_IP, 4000, 5001, 4000, 1, 0x10),
        ha,
        skey,
        4000,
        8000,
        0,
    );
    tb.step();
    assert!(recv_bytes(&tb, rbase, 8000) == data[4000..12_000]);
    let h = tb.drv[1].reap_hdr(0);
    assert_eq!((h[0].0.stream_off, h[0].0.cursor), (4000, 12_000));
    // Beyond the posted space: whole packet to the normal queue again.
    tb.drv[0].tx_merge(
        0,
        &tcp_hdr(A_IP, B_IP, 4000, 5001, 12_000, 1, 0x10),
        ha,
        skey,
        0,
        1000,
        0,
    );
    tb.step();
    assert_eq!(tb.drv[1].reap_rx(0).len(), 1);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_FALLBACK), 2);
}

#[test]
fn ring_target_wraps_and_respects_window() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 4);
    let data = pattern(24_576, 8);
    let (skey, _, rkey, rbase, _) = setup_flow(&mut tb, &data, 16_384, 0);
    let mut c = flow_b(0, 50);
    c.local_port = 6000;
    c.mode = FLOW_RX_RING;
    c.ring_key = rkey;
    c.ring_offset = 0;
    c.ring_size = 16_384;
    let flow = tb.install(1, c).unwrap();
    let ha = tb.drv[0].alloc(256);
    let hdr = |seq| tcp_hdr(A_IP, B_IP, 4000, 6000, seq, 1, 0x10);
    tb.drv[0].tx_merge(0, &hdr(50), ha, skey, 0, 12_288, 8192);
    tb.step();
    // Window full at 16 KiB: 8 KiB more does not fit -> fallback.
    tb.drv[0].tx_merge(0, &hdr(50 + 12_288), ha, skey, 12_288, 8192, 0);
    tb.step();
    assert!(tb.drv[0].reap_tx(0).iter().all(|c| c.status == ST_OK));
    assert_eq!(tb.drv[1].reap_rx(0).len(), 1);
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
    let got = recv_bytes(&tb, rbase, 16_384);
    assert!(got[12_288..] == data[12_288..16_384]);
    assert!(got[..4096] == data[16_384..20_480]);
    assert!(got[4096..12_288] == data[4096..12_288]);
}

/// A go-back-N sender over a lossy, reordering, duplicating wire.
#[test]
fn multi_megabyte_stream_is_byte_exact_over_impaired_wire() {
    let mut imp = Impair::default();
    imp.apply("loss=5,reorder=5,dup=5,delay=20us").unwrap();
    let mut tb = Tb::with_ram(Topology::TwoGuest, imp, 32 << 20);
    const TOTAL: usize = 6 << 20;
    const SEG: u64 = 65_536;
    let data = pattern(TOTAL, 9);
    let (skey, _, rkey, rbase, flow) = setup_flow(&mut tb, &data, TOTAL as u64, 0x7000_0000);
    for i in 0..(TOTAL as u64 / SEG) {
        assert_eq!(tb.post(1, flow, rkey, i * SEG, SEG as u32).status, ST_OK);
    }
    // Frames over placed bytes come on the normal path; like the driver,
    // this copies in-order bytes from them and moves the cursor past.
    tb.drv[1].post_rx(0, 256);
    let mut copied = 0u64;
    let ha = tb.drv[0].alloc(4096);
    let (mut cursor, mut next, mut last_cursor, mut stalls) = (0u64, 0u64, 0u64, 0);
    for _round in 0..20_000 {
        if cursor == TOTAL as u64 {
            break;
        }
        let window_end = (cursor + 512 * 1024).min(TOTAL as u64);
        let mut k = 0;
        while next < window_end && k < 16 {
            let len = (window_end - next).min(32_768);
            let seq = 0x7000_0000u32.wrapping_add(next as u32);
            let slot = ha + (k as u64 % 16) * 256;
            tb.drv[0].tx_merge(
                0,
                &tcp_hdr(A_IP, B_IP, 4000, 5001, seq, 1, 0x18),
                slot,
                skey,
                next,
                len as u32,
                4000,
            );
            next += len;
            k += 1;
        }
        tb.tick(Duration::from_micros(300));
        for c in tb.drv[0].reap_tx(0) {
            assert_eq!(c.status, ST_OK);
        }
        for (e, _) in tb.drv[1].reap_hdr(0) {
            assert_eq!(e.status, ST_OK);
            cursor = cursor.max(e.cursor);
        }
        let rx = tb.drv[1].reap_rx(0);
        tb.drv[1].post_rx(0, rx.len() as u32);
        for (c, frame) in rx {
            assert_eq!(
                c.flags & RXF_FLOW,
                RXF_FLOW,
                "posted space covers the stream"
            );
            // Ethernet, IPv4 and TCP headers without options (tcp_hdr).
            let seq = u32::from_be_bytes(frame[38..42].try_into().unwrap());
            let o = seq.wrapping_sub(0x7000_0000) as u64;
            let end = o + (frame.len() - 54) as u64;
            if o > cursor || end <= cursor {
                continue; // TCP would queue or drop it; go-back-N resends
            }
            let from = 54 + (cursor - o) as usize;
            tb.drv[1].mem.write(rbase + cursor, &frame[from..]).unwrap();
            copied += end - cursor;
            let upd = CmdFlow {
                opcode: CMD_FLOW_UPDATE,
                flags: FLOWU_CURSOR,
                flow,
                stream_off: end,
                ..Default::default()
            };
            let done = tb.cmd(1, upd.encode());
            assert_eq!(done.status, ST_OK);
            cursor = done.result;
        }
        if cursor == last_cursor {
            stalls += 1;
            if stalls >= 2 {
                next = cursor; // timeout: go back to the first hole
                stalls = 0;
            }
        } else {
            stalls = 0;
        }
        last_cursor = cursor;
    }
    assert_eq!(cursor, TOTAL as u64, "stream completed");
    assert!(recv_bytes(&tb, rbase, TOTAL) == data, "byte-exact");
    guards_intact(&tb, rbase, TOTAL as u64);
    let wc = zeronic_nic::model::lock(&tb.model.wire).counters();
    let (_, _, _, c) = wc[0];
    assert!(c.lost > 0 && c.duplicated > 0 && c.reordered > 0, "{c:?}");
    assert!(tb.drv[1].pstat(0, PSTAT_RX_DUP_BYTES) > 0);
    assert!(copied > 0, "no frame over placed bytes brought new ones");
    assert!(tb.drv[1].pstat(0, PSTAT_RX_OOO_FRAMES) > 0);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_CSUM_ERR), 0);
}

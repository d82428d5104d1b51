//! What a hostile or buggy driver cannot make the model do: wrap its
//! arithmetic, grow its host memory without bound (MR extents, TX frames in
//! flight, the wire's queues, out-of-order ranges) or leave a queue in an
//! undocumented state.

mod common;

use std::time::{Duration, Instant};

use common::*;
use zeronic_hw::cmd::*;
use zeronic_hw::desc::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;
use zeronic_nic::frame::Frame;
use zeronic_nic::model::{lock, Topology};
use zeronic_nic::tx::TX_BATCH;
use zeronic_nic::wire::{Endpoint, Impair, Wire, MAX_DELAY, QUEUE_FRAMES};

fn tb() -> Tb {
    Tb::new(Topology::TwoGuest, Impair::default())
}

fn inject(tb: &mut Tb, g: usize, bytes: Vec<u8>) {
    let now = tb.now;
    let mut f = Frame::owned(bytes);
    let mut d = lock(&tb.model.guests[g].dev);
    d.rx_frame(0, &mut f, now);
    d.rx_flush(now);
}

#[test]
fn wrapping_region_length_is_refused() {
    let mut tb = tb();
    let a = tb.drv[0].alloc(4096);
    // first_off + length wraps to 10 bytes: "one page" if unchecked, and a
    // region of 2^64 - 6 bytes whose offsets translate beyond the page.
    assert_eq!(
        tb.reg_mr_pages(0, &[a], 16, u64::MAX - 5, MR_ACCESS_ALL),
        Err(ST_BAD_DESC)
    );
    assert_eq!(lock(&tb.model.guests[0].dev).mrs.used(), 0);
}

#[test]
fn mr_extents_are_bounded_per_device() {
    let mut tb = Tb::with_ram(Topology::TwoGuest, Impair::default(), 16 << 20);
    // One page listed 65536 times: 65536 extents (aliasing defeats merging).
    let page = tb.drv[0].alloc(4096);
    let n = 65_536u64;
    let list = tb.drv[0].alloc(n * 8);
    let bytes: Vec<u8> = (0..n).flat_map(|_| page.to_le_bytes()).collect();
    tb.drv[0].mem.write(list, &bytes).unwrap();
    let reg = CmdMrReg {
        opcode: CMD_MR_REG,
        access: MR_ACCESS_LOCAL_READ,
        npages: n as u32,
        length: n * 4096,
        page_list: list,
        ..Default::default()
    };
    let per = (MR_MAX_EXTENTS as u64 / n) as usize;
    let mut keys = Vec::new();
    for _ in 0..per {
        let c = tb.cmd(0, reg.encode());
        assert_eq!(c.status, ST_OK);
        keys.push(c.result);
    }
    assert_eq!(
        lock(&tb.model.guests[0].dev).mrs.extents(),
        MR_MAX_EXTENTS as usize
    );
    assert_eq!(tb.cmd(0, reg.encode()).status, ST_NO_SPACE, "bound reached");
    // A contiguous region needs one extent: refused too at the bound.
    assert_eq!(tb.reg_mr(0, page, 4096, 1), Err(ST_NO_SPACE));
    assert_eq!(tb.inval_mr(0, keys[0]), ST_OK);
    assert_eq!(tb.cmd(0, reg.encode()).status, ST_OK, "room again");
    assert_eq!(tb.drv[0].bar.r32(REG_MR_MAX_EXTENTS), MR_MAX_EXTENTS);
}

#[test]
fn a_tso_send_with_a_tiny_mss_is_built_in_bounded_batches() {
    let mut tb = tb();
    let data: Vec<u8> = (0..65_535u32).map(|i| (i * 7) as u8).collect();
    let s = tb.drv[0].alloc(65_536);
    tb.drv[0].mem.write(s, &data).unwrap();
    let sk = tb.reg_mr(0, s, 65_535, MR_ACCESS_LOCAL_READ).unwrap();
    let r = tb.drv[1].alloc(65_536);
    let rk = tb.reg_mr(1, r, 65_536, MR_ACCESS_LOCAL_WRITE).unwrap();
    let flow = tb.install(1, flow_b(0, 0)).unwrap();
    tb.post(1, flow, rk, 0, 65_536);
    let ha = tb.drv[0].alloc(256);
    let hdr = tcp_hdr(A_IP, B_IP, 4000, 5001, 0, 1, 0x10);
    // mss 1: 65535 one-byte segments from one descriptor.
    tb.drv[0].tx_merge(0, &hdr, ha, sk, 0, 65_535, 1);
    let mut jobs = Vec::new();
    let mut d = lock(&tb.model.guests[0].dev);
    d.scan_tx(&mut jobs);
    assert_eq!(jobs.len(), 1);
    let (mut batches, mut frames, mut batch) = (0, 0, Vec::new());
    while !jobs[0].done() {
        d.tx_build(&mut jobs[0], &mut batch);
        assert!(batch.len() <= TX_BATCH, "{} frames at once", batch.len());
        frames += batch.len();
        batches += 1;
        batch.clear();
    }
    assert_eq!(frames, 65_535);
    assert_eq!(batches, 65_535usize.div_ceil(TX_BATCH));
    assert_eq!((jobs[0].comp.status, jobs[0].comp.frames), (ST_OK, 65_535));
    drop(d);
    // The same send end to end: every byte placed, one completion.
    tb.drv[0].tx_merge(0, &hdr, ha, sk, 0, 65_535, 1);
    tb.step();
    let c = tb.drv[0].reap_tx(0);
    assert_eq!(
        c.iter().map(|c| (c.status, c.frames)).collect::<Vec<_>>(),
        vec![(ST_OK, 65_535)]
    );
    let mut got = vec![0u8; 65_535];
    tb.drv[1].mem.read(r, &mut got).unwrap();
    assert!(got == data);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_PLACED_BYTES), 65_535);
}

#[test]
fn the_wire_holds_a_bounded_number_of_frames() {
    let a = Endpoint { guest: 0, port: 0 };
    let b = Endpoint { guest: 1, port: 0 };
    let mut imp = Impair::default();
    imp.apply("delay=1s").unwrap();
    let mut w = Wire::new(&[(a, b)], imp, 1);
    let now = Instant::now();
    let mut out = Vec::new();
    let n = QUEUE_FRAMES + 1000;
    for _ in 0..n {
        // Tiny frames: far below the byte limit, so only a frame limit helps.
        w.send(a, Frame::owned(vec![0u8; 60]), now, &mut out);
    }
    assert!(out.is_empty());
    assert_eq!(w.held(), QUEUE_FRAMES);
    assert_eq!(w.queued()[0], (QUEUE_FRAMES * 60, QUEUE_FRAMES));
    let c = w.counters()[0].3;
    assert_eq!((c.delayed, c.queue_drops), (QUEUE_FRAMES as u64, 1000));
    w.pump(now + Duration::from_secs(2), &mut out);
    assert_eq!(out.len(), QUEUE_FRAMES);
    assert_eq!(w.queued()[0], (0, 0));
    let big = format!("delay={}s", MAX_DELAY.as_secs() + 1);
    assert!(Impair::default().apply(&big).is_err(), "delay is capped");
}

/// Receiver g1 with an 8 KiB segment posted on a flow at rx_isn 0.
fn flow_with_space(tb: &mut Tb) -> (u32, u64, u64) {
    tb.drv[1].post_rx(0, 64);
    let r = tb.drv[1].alloc(65_536);
    let rk = tb.reg_mr(1, r, 65_536, MR_ACCESS_LOCAL_WRITE).unwrap();
    let flow = tb.install(1, flow_b(0, 0)).unwrap();
    assert_eq!(tb.post(1, flow, rk, 0, 65_536).status, ST_OK);
    (flow, rk, r)
}

#[test]
fn out_of_order_ranges_per_flow_are_bounded() {
    let mut tb = tb();
    let (flow, _, r) = flow_with_space(&mut tb);
    // Disjoint one-byte segments at 10, 20, ...: each needs its own range.
    let max = FLOW_MAX_OOO;
    for i in 1..=max + 1 {
        let f = tcp_frame(A_IP, B_IP, 4000, 5001, 10 * i, &[i as u8]);
        inject(&mut tb, 1, f);
    }
    let d = &tb.drv[1];
    assert_eq!(d.pstat(0, PSTAT_RX_OOO_FRAMES), max as u64);
    assert_eq!(d.pstat(0, PSTAT_RX_OOO_FULL), 1);
    assert_eq!(d.pstat(0, PSTAT_RX_FALLBACK), 1);
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(
        rx.len(),
        1,
        "the packet beyond the bound takes the normal path"
    );
    assert_eq!(rx[0].0.flags, RXF_TCP | RXF_CSUM_OK | RXF_FLOW);
    assert_eq!(rx[0].0.flow, flow);
    let mut b = [0u8; 1];
    tb.drv[1]
        .mem
        .read(r + 10 * (max as u64 + 1), &mut b)
        .unwrap();
    assert_eq!(b[0], 0, "not placed");
    // Growing an existing range needs no new one: still placed.
    inject(
        &mut tb,
        1,
        tcp_frame(A_IP, B_IP, 4000, 5001, 11, &[0xaa; 4]),
    );
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_OOO_FULL), 1);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_OOO_FRAMES), max as u64 + 1);
    // Filling from the cursor absorbs the ranges it reaches.
    inject(&mut tb, 1, tcp_frame(A_IP, B_IP, 4000, 5001, 0, &[1u8; 10]));
    let dev = lock(&tb.model.guests[1].dev);
    let fl = dev.flows.iter().next().unwrap();
    assert_eq!(fl.cursor, 15);
    assert_eq!(fl.ooo_ranges(), max as usize - 1);
}

#[test]
fn stream_offsets_stay_below_the_limit() {
    let mut tb = tb();
    let (flow, rk, _) = flow_with_space(&mut tb);
    let upd = |to: u64| CmdFlow {
        opcode: CMD_FLOW_UPDATE,
        flags: FLOWU_CURSOR,
        flow,
        stream_off: to,
        ..Default::default()
    };
    assert_eq!(tb.cmd(1, upd(u64::MAX - 10).encode()).status, ST_BAD_DESC);
    assert_eq!(
        tb.cmd(1, upd(STREAM_OFF_LIMIT).encode()).status,
        ST_BAD_DESC
    );
    let c = tb.cmd(1, upd(STREAM_OFF_LIMIT - 2).encode());
    assert_eq!((c.status, c.result), (ST_OK, STREAM_OFF_LIMIT - 2));
    // A segment would end beyond the limit; a shorter one fits.
    assert_eq!(tb.post(1, flow, rk, 0, 8).status, ST_BAD_DESC);
    let c = tb.post(1, flow, rk, 0, 2);
    assert_eq!((c.status, c.result), (ST_OK, STREAM_OFF_LIMIT - 2));
    // Packets at any sequence number near the limit do not upset the
    // arithmetic (the model runs with overflow checks).
    for seq in [0u32, 1, u32::MAX, 0x8000_0000, 0x7fff_ffff] {
        inject(
            &mut tb,
            1,
            tcp_frame(A_IP, B_IP, 4000, 5001, seq, &[3u8; 100]),
        );
    }
    let cursor = lock(&tb.model.guests[1].dev)
        .flows
        .iter()
        .next()
        .unwrap()
        .cursor;
    assert!(cursor <= STREAM_OFF_LIMIT);
    // A ring window may not reach the limit either.
    let mut c = flow_b(0, 0);
    c.local_port = 6000;
    c.mode = FLOW_RX_RING;
    c.ring_key = rk;
    c.ring_size = 4096;
    c.stream_off = STREAM_OFF_LIMIT - 100;
    assert_eq!(tb.install(1, c), Err(ST_BAD_DESC));
    c.stream_off = u64::MAX - 100;
    assert_eq!(tb.install(1, c), Err(ST_BAD_DESC));
}

#[test]
fn an_impossible_rx_producer_index_breaks_only_that_queue() {
    let mut tb = tb();
    tb.drv[1].post_rx(0, 4);
    let rxq = port_block(0) + PORT_RXQ;
    tb.drv[1].bar.w32(rxq + Q_PROD, 100_000);
    tb.drv[0].tx_plain(0, &tcp_frame(A_IP, B_IP, 1, 2, 3, b"x"), 1);
    tb.step();
    let d = &mut tb.drv[1];
    assert_eq!(d.bar.r32(rxq + Q_STATUS), Q_STATUS_ERROR);
    assert_eq!(d.bar.r32(rxq + Q_ERROR), ST_BAD_DESC as u32);
    let ev = d.events();
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].code, ev[0].info, ev[0].detail),
        (EV_QUEUE_ERROR, qid(0, QK_RXQ), ST_BAD_DESC as u64)
    );
    assert_eq!(d.pstat(0, PSTAT_RX_NO_BUF), 1);
    assert_eq!(d.bar.r32(REG_DEV_STATUS) & DEV_STATUS_FATAL, 0);
    // The rest of the device still works.
    let a = tb.drv[1].alloc(4096);
    assert!(tb.reg_mr(1, a, 4096, 1).is_ok());
}

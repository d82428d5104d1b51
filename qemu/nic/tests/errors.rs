//! Every error path: bad descriptors, DMA outside guest RAM, invalid and
//! revoked MR keys, rights and bounds, full tables, malformed frames, bad
//! queue configuration, bad producer indices. Each reports a status and a
//! counter and leaves guest memory outside its queues untouched.

mod common;

use common::*;
use zeronic_hw::cmd::*;
use zeronic_hw::desc::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;
use zeronic_nic::frame::Frame;
use zeronic_nic::model::{lock, Topology};
use zeronic_nic::wire::Impair;

fn tb() -> Tb {
    Tb::new(Topology::TwoGuest, Impair::default())
}

fn tx_status(tb: &mut Tb, d: TxDesc) -> u16 {
    tb.drv[0].tx(0, d);
    tb.step();
    let c = tb.drv[0].reap_tx(0);
    assert_eq!(c.len(), 1);
    c[0].status
}

#[test]
fn tx_descriptor_errors_complete_with_status() {
    let mut tb = tb();
    tb.drv[1].post_rx(0, 8);
    let frame = tcp_frame(A_IP, B_IP, 1, 2, 3, b"x");
    let a = tb.drv[0].alloc(4096);
    tb.drv[0].mem.write(a, &frame).unwrap();
    let plain = TxDesc {
        opcode: TX_OP_PLAIN,
        buf_len: frame.len() as u32,
        buf_addr: a,
        ..Default::default()
    };
    assert_eq!(
        tx_status(&mut tb, TxDesc { opcode: 9, ..plain }),
        ST_BAD_OPCODE
    );
    assert_eq!(
        tx_status(
            &mut tb,
            TxDesc {
                flags: 0x80,
                ..plain
            }
        ),
        ST_BAD_DESC
    );
    assert_eq!(
        tx_status(&mut tb, TxDesc { rsvd1: 1, ..plain }),
        ST_BAD_DESC
    );
    assert_eq!(
        tx_status(
            &mut tb,
            TxDesc {
                buf_len: 10,
                ..plain
            }
        ),
        ST_BAD_DESC
    );
    assert_eq!(
        tx_status(
            &mut tb,
            TxDesc {
                buf_len: 9015,
                ..plain
            }
        ),
        ST_TOO_BIG
    );
    assert_eq!(
        tx_status(
            &mut tb,
            TxDesc {
                buf_addr: RAM as u64 - 10,
                ..plain
            }
        ),
        ST_DMA
    );
    assert_eq!(
        tx_status(
            &mut tb,
            TxDesc {
                buf_addr: u64::MAX - 5,
                ..plain
            }
        ),
        ST_DMA
    );
    assert_eq!(
        tx_status(
            &mut tb,
            TxDesc {
                flags: TXF_TSO,
                mr_key: 1,
                ..plain
            }
        ),
        ST_BAD_DESC
    );
    let bad_csum = TxDesc {
        flags: TXF_CSUM_PARTIAL,
        csum_start: 60,
        csum_offset: 16,
        ..plain
    };
    assert_eq!(tx_status(&mut tb, bad_csum), ST_BAD_DESC);
    assert_eq!(tx_status(&mut tb, plain), ST_OK);
    let d = &tb.drv[0];
    assert_eq!(d.pstat(0, PSTAT_TX_ERRORS), 9);
    assert_eq!(d.pstat(0, PSTAT_TX_DMA_ERR), 2);
    assert_eq!(d.pstat(0, PSTAT_TX_BAD_DESC), 7);
    assert_eq!(d.pstat(0, PSTAT_TX_FRAMES), 1);
    assert_eq!(tb.drv[1].reap_rx(0).len(), 1, "only the good frame left");
}

/// Plain TSO sends (hardware spec §8): every refusal is a status, a
/// counter and no frame on the wire.
#[test]
fn plain_tso_errors_complete_with_status() {
    let mut tb = tb();
    tb.drv[1].post_rx(0, 64);
    let frame = tcp_frame(A_IP, B_IP, 1, 2, 3, &[5u8; 3000]);
    let a = tb.drv[0].alloc(MAX_TSO_FRAME as u64 + 4096);
    tb.drv[0].mem.write(a, &frame).unwrap();
    let tso = TxDesc {
        opcode: TX_OP_PLAIN,
        flags: TXF_TSO,
        buf_len: frame.len() as u32,
        buf_addr: a,
        mss: 1000,
        ..Default::default()
    };
    let mut errors = 0;
    let mut check = |tb: &mut Tb, d: TxDesc, want: u16| {
        assert_eq!(tx_status(tb, d), want, "{d:?}");
        errors += 1;
    };
    // Descriptor fields that belong to merge sends.
    check(&mut tb, TxDesc { pay_len: 1, ..tso }, ST_BAD_DESC);
    check(
        &mut tb,
        TxDesc {
            mr_offset: 1,
            ..tso
        },
        ST_BAD_DESC,
    );
    // Shorter than Ethernet + IPv4 + TCP headers.
    check(&mut tb, TxDesc { buf_len: 53, ..tso }, ST_BAD_DESC);
    // Longer than MAX_TSO_FRAME.
    check(
        &mut tb,
        TxDesc {
            buf_len: MAX_TSO_FRAME + 1,
            ..tso
        },
        ST_TOO_BIG,
    );
    // Segments that do not fit the MTU (9000).
    check(&mut tb, TxDesc { mss: 8961, ..tso }, ST_BAD_DESC);
    // Frame running past the end of guest RAM, header inside it.
    let end = RAM as u64 - 100;
    tb.drv[0].mem.write(end, &frame[..100]).unwrap();
    check(
        &mut tb,
        TxDesc {
            buf_addr: end,
            ..tso
        },
        ST_DMA,
    );
    check(
        &mut tb,
        TxDesc {
            buf_addr: u64::MAX - 10,
            ..tso
        },
        ST_DMA,
    );
    // Not one IPv4/TCP packet: two 802.1Q tags, an IPv4 fragment, UDP.
    let mut tagged = frame.clone();
    tagged.splice(12..12, [0x81, 0x00, 0x00, 0x05, 0x81, 0x00, 0x00, 0x06]);
    let mut frag = frame.clone();
    frag[20] = 0x20; // more fragments
    let mut udp = frame.clone();
    udp[23] = 17;
    for f in [tagged, frag, udp] {
        tb.drv[0].mem.write(a, &f).unwrap();
        check(
            &mut tb,
            TxDesc {
                buf_len: f.len() as u32,
                ..tso
            },
            ST_MALFORMED,
        );
    }
    let d = &tb.drv[0];
    assert_eq!(d.pstat(0, PSTAT_TX_ERRORS), errors);
    assert_eq!(d.pstat(0, PSTAT_TX_FRAMES), 0);
    assert!(tb.drv[1].reap_rx(0).is_empty(), "no refused send left");
    // The good one still goes, in 3 segments.
    tb.drv[0].mem.write(a, &frame).unwrap();
    tb.drv[0].tx(0, tso);
    tb.step();
    let c = tb.drv[0].reap_tx(0);
    assert_eq!((c[0].status, c[0].frames), (ST_OK, 3));
    assert_eq!(tb.drv[1].reap_rx(0).len(), 3);
}

#[test]
fn merge_key_rights_bounds_and_header_errors() {
    let mut tb = tb();
    let buf = tb.drv[0].alloc(65_536);
    let rkey = tb.reg_mr(0, buf, 65_536, MR_ACCESS_LOCAL_READ).unwrap();
    let wkey = tb.reg_mr(0, buf, 65_536, MR_ACCESS_LOCAL_WRITE).unwrap();
    let ha = tb.drv[0].alloc(256);
    let hdr = tcp_hdr(A_IP, B_IP, 4000, 5001, 1, 1, 0x10);
    tb.drv[0].mem.write(ha, &hdr).unwrap();
    let m = TxDesc {
        opcode: TX_OP_MERGE,
        flags: TXF_TSO,
        buf_len: 54,
        buf_addr: ha,
        mr_key: rkey,
        mr_offset: 0,
        pay_len: 20_000,
        ..Default::default()
    };
    assert_eq!(tx_status(&mut tb, m), ST_OK);
    assert_eq!(
        tx_status(
            &mut tb,
            TxDesc {
                mr_key: rkey ^ 0x1_0000,
                ..m
            }
        ),
        ST_BAD_KEY
    );
    assert_eq!(
        tx_status(
            &mut tb,
            TxDesc {
                mr_key: 0xffff,
                ..m
            }
        ),
        ST_BAD_KEY
    );
    assert_eq!(tx_status(&mut tb, TxDesc { mr_key: wkey, ..m }), ST_ACCESS);
    assert_eq!(
        tx_status(
            &mut tb,
            TxDesc {
                mr_offset: 60_000,
                ..m
            }
        ),
        ST_BOUNDS
    );
    assert_eq!(
        tx_status(
            &mut tb,
            TxDesc {
                mr_offset: u64::MAX,
                ..m
            }
        ),
        ST_BOUNDS
    );
    assert_eq!(tx_status(&mut tb, TxDesc { flags: 0, ..m }), ST_TOO_BIG);
    assert_eq!(tx_status(&mut tb, TxDesc { mss: 9000, ..m }), ST_BAD_DESC);
    assert_eq!(tx_status(&mut tb, TxDesc { buf_len: 40, ..m }), ST_BAD_DESC);
    assert_eq!(
        tx_status(&mut tb, TxDesc { buf_len: 58, ..m }),
        ST_MALFORMED
    );
    let mut not_ip = hdr.clone();
    not_ip[12] = 0x86;
    tb.drv[0].mem.write(ha, &not_ip).unwrap();
    assert_eq!(tx_status(&mut tb, m), ST_MALFORMED);
    tb.drv[0].mem.write(ha, &hdr).unwrap();
    // Revoked key: invalidation completes, then the key fails.
    assert_eq!(tb.inval_mr(0, rkey), ST_OK);
    assert_eq!(tx_status(&mut tb, m), ST_BAD_KEY);
    assert_eq!(tb.inval_mr(0, rkey), ST_BAD_KEY, "double invalidate");
    // A new registration in the same slot gets a different key.
    let k2 = tb.reg_mr(0, buf, 65_536, MR_ACCESS_LOCAL_READ).unwrap();
    assert_ne!(k2, rkey);
    assert_eq!(tx_status(&mut tb, m), ST_BAD_KEY, "stale key stays dead");
    assert_eq!(tx_status(&mut tb, TxDesc { mr_key: k2, ..m }), ST_OK);
    assert_eq!(tb.drv[0].pstat(0, PSTAT_TX_KEY_ERR), 7);
}

#[test]
fn mr_registration_errors() {
    let mut tb = tb();
    let a = tb.drv[0].alloc(8192);
    assert_eq!(tb.reg_mr(0, a, 8192, 0), Err(ST_BAD_DESC), "no rights");
    assert_eq!(tb.reg_mr(0, a, 8192, 4), Err(ST_BAD_DESC), "unknown right");
    assert_eq!(tb.reg_mr(0, a, 0, 1), Err(ST_BAD_DESC), "empty");
    assert_eq!(
        tb.reg_mr_pages(0, &[a + 1], 0, 100, 1),
        Err(ST_BAD_DESC),
        "unaligned page"
    );
    assert_eq!(
        tb.reg_mr_pages(0, &[RAM as u64], 0, 100, 1),
        Err(ST_DMA),
        "page outside RAM"
    );
    assert_eq!(
        tb.reg_mr_pages(0, &[a], 0, 5000, 1),
        Err(ST_BAD_DESC),
        "length beyond pages"
    );
    assert_eq!(
        tb.reg_mr_pages(0, &[a, a + 4096], 0, 100, 1),
        Err(ST_BAD_DESC),
        "surplus page"
    );
    assert_eq!(
        tb.reg_mr_pages(0, &[a], 4096, 1, 1),
        Err(ST_BAD_DESC),
        "first_off >= 4096"
    );
    // Page list itself outside guest RAM.
    let c = CmdMrReg {
        opcode: CMD_MR_REG,
        access: 1,
        npages: 2,
        length: 5000,
        page_list: RAM as u64 - 8,
        ..Default::default()
    };
    assert_eq!(tb.cmd(0, c.encode()).status, ST_DMA);
    let c = CmdMrReg {
        npages: MR_MAX_PAGES + 1,
        length: 10,
        ..c
    };
    assert_eq!(tb.cmd(0, c.encode()).status, ST_BAD_DESC);
    assert_eq!(tb.cmd(0, [0u8; 64]).status, ST_BAD_OPCODE);
    // Scattered pages are honoured in order.
    let b = tb.drv[0].alloc(3 * 4096);
    let k = tb.reg_mr_pages(0, &[b + 8192, b], 100, 5000, 3).unwrap();
    let d = &tb.drv[0];
    d.mem.write(b + 8192 + 100, &[1u8; 3996]).unwrap();
    d.mem.write(b, &[2u8; 1004]).unwrap();
    let mut ext = Vec::new();
    lock(&tb.model.guests[0].dev)
        .mrs
        .translate(k, 1, 3990, 20, &mut ext)
        .unwrap();
    assert_eq!(ext, vec![(b + 8192 + 4090, 6), (b, 14)]);
    assert!(tb.drv[0].gstat(GSTAT_CMD_ERR) >= 11);
}

#[test]
fn tables_full_report_no_space() {
    let mut tb = tb();
    let a = tb.drv[1].alloc(4096);
    let mut keys = Vec::new();
    for _ in 0..MR_CAPACITY {
        keys.push(tb.reg_mr(1, a, 4096, MR_ACCESS_LOCAL_WRITE).unwrap());
    }
    assert_eq!(tb.reg_mr(1, a, 4096, 2), Err(ST_NO_SPACE));
    assert_eq!(tb.inval_mr(1, keys[7]), ST_OK);
    assert!(tb.reg_mr(1, a, 4096, 2).is_ok(), "slot reusable");
    let mut f = flow_b(0, 0);
    for i in 0..FLOW_CAPACITY {
        f.remote_port = i as u16;
        assert_eq!(tb.install(1, f), Ok(i));
    }
    f.remote_port = 60_000;
    assert_eq!(tb.install(1, f), Err(ST_NO_SPACE));
    f.remote_port = 5;
    let rm = CmdFlow {
        opcode: CMD_FLOW_REMOVE,
        flow: 5,
        ..Default::default()
    };
    assert_eq!(tb.cmd(1, rm.encode()).status, ST_OK);
    assert_eq!(tb.cmd(1, rm.encode()).status, ST_NOT_FOUND);
    f.remote_port = 6;
    assert_eq!(tb.install(1, f), Err(ST_EXISTS), "same 5-tuple");
    f.remote_port = 5;
    assert_eq!(tb.install(1, f), Ok(5));
    assert_eq!(tb.install(1, CmdFlow { port: 1, ..f }), Err(ST_PORT));
    assert_eq!(tb.install(1, CmdFlow { mode: 9, ..f }), Err(ST_BAD_DESC));
    let k = keys[0];
    for i in 0..MS_PER_FLOW {
        assert_eq!(tb.post(1, 0, k, 0, 16).status, ST_OK, "segment {i}");
    }
    assert_eq!(tb.post(1, 0, k, 0, 16).status, ST_NO_SPACE);
    assert_eq!(tb.post(1, 1, k, 0, 4097).status, ST_BOUNDS);
    assert_eq!(tb.post(1, 1, k ^ 0x10000, 0, 1).status, ST_BAD_KEY);
    assert_eq!(tb.post(1, 1, k, 0, 0).status, ST_BAD_DESC);
    assert_eq!(tb.post(1, 4000, k, 0, 1).status, ST_NOT_FOUND);
    let rd = tb.reg_mr(1, a, 4096, MR_ACCESS_LOCAL_READ).unwrap_err();
    assert_eq!(rd, ST_NO_SPACE);
    let send = CmdMsPost {
        opcode: CMD_MS_POST,
        flow: 1,
        dir: MS_DIR_SEND,
        mr_key: k,
        len: 1,
        ..Default::default()
    };
    assert_eq!(tb.cmd(1, send.encode()).status, ST_UNSUPPORTED);
}

#[test]
fn placement_needs_write_right_and_revoked_segments_fall_back() {
    let mut tb = tb();
    tb.drv[1].post_rx(0, 4);
    let data = vec![9u8; 4000];
    let s = tb.drv[0].alloc(4096);
    tb.drv[0].mem.write(s, &data).unwrap();
    let sk = tb.reg_mr(0, s, 4096, MR_ACCESS_LOCAL_READ).unwrap();
    let r = tb.drv[1].alloc(8192);
    let ronly = tb.reg_mr(1, r, 8192, MR_ACCESS_LOCAL_READ).unwrap();
    let rk = tb.reg_mr(1, r, 8192, MR_ACCESS_LOCAL_WRITE).unwrap();
    let flow = tb.install(1, flow_b(0, 0)).unwrap();
    assert_eq!(tb.post(1, flow, ronly, 0, 8192).status, ST_ACCESS);
    assert_eq!(tb.post(1, flow, rk, 0, 8192).status, ST_OK);
    assert_eq!(tb.inval_mr(1, rk), ST_OK, "segment dropped with its key");
    let ha = tb.drv[0].alloc(256);
    tb.drv[0].tx_merge(
        0,
        &tcp_hdr(A_IP, B_IP, 4000, 5001, 0, 1, 0x10),
        ha,
        sk,
        0,
        4000,
        0,
    );
    tb.step();
    let mut got = vec![0u8; 8192];
    tb.drv[1].mem.read(r, &mut got).unwrap();
    assert!(
        got.iter().all(|&b| b == 0),
        "no DMA after invalidate completed"
    );
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(rx.len(), 1);
    assert_eq!(rx[0].0.flags & RXF_FLOW, RXF_FLOW);
}

#[test]
fn malformed_and_bad_checksum_frames_are_counted() {
    let mut tb = tb();
    tb.drv[1].post_rx(0, 16);
    let r = tb.drv[1].alloc(65_536);
    let rk = tb.reg_mr(1, r, 65_536, MR_ACCESS_LOCAL_WRITE).unwrap();
    let flow = tb.install(1, flow_b(0, 0)).unwrap();
    tb.post(1, flow, rk, 0, 65_536);
    let good = tcp_frame(A_IP, B_IP, 4000, 5001, 0, &[5u8; 1000]);
    let inject = |tb: &mut Tb, bytes: Vec<u8>| {
        let now = tb.now;
        let mut f = Frame::owned(bytes);
        lock(&tb.model.guests[1].dev).rx_frame(0, &mut f, now);
        lock(&tb.model.guests[1].dev).rx_flush(now);
    };
    inject(&mut tb, vec![1, 2, 3]);
    let mut bad_len = good.clone();
    bad_len[16] = 0xff; // IP total length beyond the frame
    inject(&mut tb, bad_len);
    let mut bad_ihl = good.clone();
    bad_ihl[14] = 0x44;
    inject(&mut tb, bad_ihl);
    let mut bad_doff = good.clone();
    bad_doff[46] = 0xf0; // TCP header longer than the packet allows
    bad_doff.truncate(80);
    bad_doff[16..18].copy_from_slice(&66u16.to_be_bytes());
    inject(&mut tb, bad_doff);
    inject(&mut tb, vec![0u8; 9100]); // beyond MTU
    let d = &tb.drv[1];
    assert_eq!(d.pstat(0, PSTAT_RX_MALFORMED), 5);
    let mut bad_sum = good.clone();
    bad_sum[100] ^= 1;
    inject(&mut tb, bad_sum);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_CSUM_ERR), 1);
    assert!(
        tb.drv[1].reap_hdr(0).is_empty(),
        "bad checksum never reported"
    );
    assert!(tb.drv[1].reap_rx(0).is_empty());
    inject(&mut tb, good.clone());
    let h = tb.drv[1].reap_hdr(0);
    assert_eq!((h.len(), h[0].0.cursor), (1, 1000));
    let mut got = vec![0u8; 1000];
    tb.drv[1].mem.read(r, &mut got).unwrap();
    assert_eq!(got, vec![5u8; 1000]);
}

#[test]
fn rx_buffer_errors_and_exhaustion() {
    let mut tb = tb();
    let big = tcp_frame(A_IP, B_IP, 1, 2, 3, &[1u8; 5000]);
    // No buffers: dropped and counted.
    tb.drv[0].tx_plain(0, &big, 1);
    tb.step();
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_NO_BUF), 1);
    // A buffer too small and one outside guest RAM.
    let mut q = tb.drv[1].ports[0].rxq;
    let small = RxBufDesc {
        addr: tb.drv[1].ports[0].rxbuf_base,
        len: 100,
        rsvd0: 0,
    };
    tb.drv[1].produce(&mut q, &small.encode());
    let outside = RxBufDesc {
        addr: RAM as u64 - 100,
        len: 9000,
        rsvd0: 0,
    };
    tb.drv[1].produce(&mut q, &outside.encode());
    tb.drv[1].ports[0].rxq = q;
    tb.drv[0].tx_plain(0, &big, 2);
    tb.drv[0].tx_plain(0, &big, 3);
    tb.step();
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(
        rx.iter().map(|r| r.0.status).collect::<Vec<_>>(),
        vec![ST_TOO_BIG, ST_DMA]
    );
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_BUF_SMALL), 1);
}

#[test]
fn bad_queue_config_and_producer_index() {
    let mut tb = tb();
    let d = &tb.drv[0];
    let txq = port_block(0) + PORT_TXQ;
    d.bar.w32(txq + Q_CTRL, 0);
    tb.step();
    let d = &tb.drv[0];
    assert_eq!(d.bar.r32(txq + Q_STATUS), 0);
    d.bar.w32(txq + Q_SIZE, 100); // not a power of two
    d.bar.w32(txq + Q_CTRL, Q_CTRL_ENABLE);
    tb.step();
    let d = &mut tb.drv[0];
    assert_eq!(d.bar.r32(txq + Q_STATUS), Q_STATUS_ERROR);
    assert_eq!(d.bar.r32(txq + Q_ERROR), ST_QUEUE_CONFIG as u32);
    let ev = d.events();
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].code, ev[0].info), (EV_QUEUE_ERROR, qid(0, QK_TXQ)));
    // Base outside guest RAM.
    d.bar.w32(txq + Q_CTRL, 0);
    tb.step();
    let d = &tb.drv[0];
    d.bar.w32(txq + Q_SIZE, 256);
    d.bar.w64(txq + Q_BASE, RAM as u64 - 64);
    d.bar.w32(txq + Q_CTRL, Q_CTRL_ENABLE);
    tb.step();
    assert_eq!(tb.drv[0].bar.r32(txq + Q_STATUS), Q_STATUS_ERROR);
    // Good config again, then an impossible producer index.
    let d = &tb.drv[0];
    d.bar.w32(txq + Q_CTRL, 0);
    tb.step();
    let base = tb.drv[0].ports[0].txq.base;
    let d = &tb.drv[0];
    d.bar.w64(txq + Q_BASE, base);
    d.bar.w32(txq + Q_PROD, 0);
    d.bar.w32(txq + Q_CTRL, Q_CTRL_ENABLE);
    tb.step();
    assert_eq!(tb.drv[0].bar.r32(txq + Q_STATUS), Q_STATUS_ENABLED);
    tb.drv[0].bar.w32(txq + Q_PROD, 1000);
    tb.step();
    assert_eq!(tb.drv[0].bar.r32(txq + Q_STATUS), Q_STATUS_ERROR);
    assert_eq!(tb.drv[0].gstat(GSTAT_QUEUE_ERR), 2);
    // A broken command queue is fatal until reset.
    tb.drv[0].bar.w32(REG_CMDQ + Q_PROD, 5000);
    tb.step();
    assert_ne!(tb.drv[0].bar.r32(REG_DEV_STATUS) & DEV_STATUS_FATAL, 0);
    assert_eq!(tb.drv[0].bar.r32(REG_FATAL_CODE), ST_BAD_DESC as u32);
    assert_eq!(tb.drv[0].bar.r32(REG_FATAL_INFO), qid(0, QK_CMDQ));
    assert_eq!(tb.drv[0].bar.r32(REG_CMDQ + Q_STATUS), Q_STATUS_ERROR);
    tb.bring_up(0);
    assert_eq!(tb.drv[0].bar.r32(REG_DEV_STATUS) & DEV_STATUS_FATAL, 0);
}

#[test]
fn reset_and_detach_clear_tables() {
    let mut tb = tb();
    let a = tb.drv[0].alloc(4096);
    let k = tb.reg_mr(0, a, 4096, 1).unwrap();
    let f = tb.install(0, flow_b(0, 0)).unwrap();
    tb.bring_up(0); // driver reset
    {
        let d = lock(&tb.model.guests[0].dev);
        assert!(!d.mrs.valid(k));
        assert_eq!((d.mrs.used(), d.flows.used()), (0, 0));
    }
    let _ = f;
    let k = tb.reg_mr(0, a, 4096, 1).unwrap();
    let mem = tb.drv[0].mem.clone();
    let irq = tb.drv[0].irq.clone();
    lock(&tb.model.guests[0].dev).detach(); // QEMU went away
    lock(&tb.model.guests[0].dev).attach(Some(mem), irq);
    assert!(!lock(&tb.model.guests[0].dev).mrs.valid(k));
    assert_eq!(tb.drv[0].bar.r32(REG_MAGIC), ZN_MAGIC);
    assert_eq!(tb.drv[0].bar.r32(REG_CMDQ + Q_STATUS), 0);
    tb.bring_up(0);
}

#[test]
fn interrupt_moderation_and_masking() {
    let mut tb = tb();
    tb.drv[1].post_rx(0, 64);
    let v = vec_rx(0);
    let blk = vec_block(v);
    let f = tcp_frame(A_IP, B_IP, 1, 2, 3, b"abc");
    let base = tb.drv[1].irq.count(v);
    // Threshold 4 entries with a long delay: 3 frames raise nothing.
    tb.drv[1].bar.w32(blk + VEC_ITR_ENTRIES, 4);
    tb.drv[1].bar.w32(blk + VEC_ITR_USECS, 1_000_000);
    for _ in 0..3 {
        tb.drv[0].tx_plain(0, &f, 0);
    }
    tb.step();
    assert_eq!(tb.drv[1].irq.count(v), base);
    tb.drv[0].tx_plain(0, &f, 0);
    tb.step();
    assert_eq!(tb.drv[1].irq.count(v), base + 1);
    // The delay expires for a single entry.
    tb.drv[0].tx_plain(0, &f, 0);
    tb.step();
    assert_eq!(tb.drv[1].irq.count(v), base + 1);
    tb.tick(std::time::Duration::from_secs(2));
    assert_eq!(tb.drv[1].irq.count(v), base + 2);
    // Masked: held until unmasked.
    tb.drv[1].bar.w32(blk + VEC_ITR_ENTRIES, 0);
    tb.drv[1].bar.w32(blk + VEC_ITR_USECS, 0);
    tb.drv[1].bar.w32(blk + VEC_MASK, 1);
    tb.drv[0].tx_plain(0, &f, 0);
    tb.step();
    assert_eq!(tb.drv[1].irq.count(v), base + 2);
    tb.drv[1].bar.w32(blk + VEC_MASK, 0);
    tb.step();
    assert_eq!(tb.drv[1].irq.count(v), base + 3);
    assert_eq!(tb.drv[1].bar.r32(blk + VEC_RAISED) as u64, base + 3);
}

#[test]
fn registers_a_256_mib_region_of_scattered_pages() {
    let mut tb = Tb::with_ram(Topology::TwoGuest, Impair::default(), 300 << 20);
    let base = tb.drv[0].alloc(256 << 20);
    // 65536 pages, pairwise swapped so no two neighbours are contiguous.
    let pages: Vec<u64> = (0..65_536u64).map(|i| base + (i ^ 1) * 4096).collect();
    let key = tb
        .reg_mr_pages(0, &pages, 0, 256 << 20, MR_ACCESS_LOCAL_READ)
        .expect("256 MiB region");
    let mut ext = Vec::new();
    let d = lock(&tb.model.guests[0].dev);
    d.mrs
        .translate(
            key,
            MR_ACCESS_LOCAL_READ,
            (256 << 20) - 6000,
            6000,
            &mut ext,
        )
        .unwrap();
    let last = base + 65_534 * 4096; // page 65535 maps to 65534
    assert_eq!(
        ext,
        vec![(base + 65_535 * 4096 + 4096 - 1904, 1904), (last, 4096)]
    );
    assert_eq!(
        d.mrs
            .translate(key, MR_ACCESS_LOCAL_READ, (256 << 20) - 1, 2, &mut ext),
        Err(ST_BOUNDS)
    );
}

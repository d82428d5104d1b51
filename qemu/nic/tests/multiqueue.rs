//! Queue pairs, RSS, n-tuple rules and flow notify queues
//! (docs/hardware.md §14), driven through BAR2 and guest memory as a
//! driver would: frames land on the queue pair that the Toeplitz hash
//! (`hw::rss`) and the indirection table, or a rule, name; bad numbers
//! are clamped or refused as the spec says, never a panic; a flow's header
//! entries follow its notify queue in order; per-queue counters count; and
//! with the new registers untouched everything stays on queue pair 0.

mod common;

use common::qpairs::*;
use common::*;
use proptest::prelude::*;
use zeronic_hw::cmd::*;
use zeronic_hw::desc::*;
use zeronic_hw::regs::*;
use zeronic_hw::rss::{hash_tcp4, toeplitz, RSS_KEY_DEFAULT};
use zeronic_hw::status::*;
use zeronic_nic::frame::Frame;
use zeronic_nic::model::{lock, Topology};
use zeronic_nic::wire::Impair;

/// A 4-tuple of a test frame: source address, source port, destination
/// port (destination address B_IP).
type Tuple = ([u8; 4], u16, u16);

fn tuple(i: u32) -> Tuple {
    let x = i.wrapping_mul(2_654_435_761);
    (
        [10, 1, (x >> 8) as u8, x as u8],
        1024 + (x >> 16) as u16 % 60_000,
        [80, 443, 5201, 8080][(i % 4) as usize],
    )
}

fn tcp(t: Tuple, seq: u32) -> Vec<u8> {
    tcp_frame(t.0, B_IP, t.1, t.2, seq, &seq.to_be_bytes())
}

fn addr_hash(key: &[u8], src: [u8; 4]) -> u32 {
    let mut input = [0u8; 8];
    input[..4].copy_from_slice(&src);
    input[4..].copy_from_slice(&B_IP);
    toeplitz(key, &input)
}

#[test]
fn untouched_registers_keep_everything_on_queue_pair_0() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    let d = &tb.drv[1];
    assert_eq!(d.bar.r32(REG_CAPS) & CAP_MULTI_QUEUE, CAP_MULTI_QUEUE);
    assert_eq!(d.bar.r32(REG_NUM_VECTORS), 3, "queue pair 0's vectors only");
    assert_eq!(d.bar.r32(REG_MAX_QP), MAX_QP);
    assert_eq!(d.bar.r32(REG_NTUPLE_RULES), NTUPLE_RULES);
    let b = port_block(0);
    assert_eq!(d.bar.r32(b + PORT_NUM_QP), 1);
    assert_eq!(d.bar.r32(b + PORT_RSS_CTRL), 0);
    let key: Vec<u8> = (0..10)
        .flat_map(|i| d.bar.r32(b + PORT_RSS_KEY + 4 * i).to_le_bytes())
        .collect();
    assert_eq!(key, RSS_KEY_DEFAULT, "the reset key is Microsoft's");
    tb.drv[1].post_rx(0, 200);
    let mut frames: Vec<Vec<u8>> = (0..64).map(|i| tcp(tuple(i), i)).collect();
    frames.push(udp([10, 9, 9, 9], 53, 53, false));
    deliver(&mut tb, &frames);
    let mut q = qp0(&tb, 1, 0);
    let got = reap_rx(&tb.drv[1], &mut q);
    assert_eq!(got.len(), frames.len());
    for ((c, data, raw), f) in got.iter().zip(&frames) {
        assert_eq!(c.status, ST_OK);
        assert_eq!(&data[..], &f[..]);
        assert_eq!(raw[16..32], [0u8; 16], "no hash: 2.1's completion bytes");
    }
    let d = &tb.drv[1];
    assert_eq!(qstat(d, 0, 0, QSTAT_RX_PACKETS), frames.len() as u64);
    let bytes: usize = frames.iter().map(Vec::len).sum();
    assert_eq!(qstat(d, 0, 0, QSTAT_RX_BYTES), bytes as u64);
    for k in 1..MAX_QP {
        assert_eq!(d.bar.r32(qp_queues(0, k) + QP_RXCQ + Q_PROD), 0);
        assert_eq!(qstat(d, 0, k, QSTAT_RX_PACKETS), 0);
    }
    assert_eq!(d.pstat(0, PSTAT_RX_BAD_QUEUE), 0);
    assert!(d.irq.count(vec_rx(0)) > 0);
    for v in NUM_VECTORS..MAX_VECTORS {
        assert_eq!(d.irq.count(v), 0, "vector {v}");
    }
}

#[test]
fn rss_puts_each_tuple_where_hash_and_table_say() {
    let (mut tb, mut qps) = receiver(4);
    let mut key = RSS_KEY_DEFAULT;
    key[7] ^= 0x5a; // not the default: the port's key is the one used
    let table: [u8; 128] = core::array::from_fn(|i| (i % 4) as u8);
    set_rss(&mut tb, RSS_CTRL_ENABLE | RSS_CTRL_HASH, &table, &key);
    let tuples: Vec<Tuple> = (0..256).map(tuple).collect();
    let frames: Vec<Vec<u8>> = tuples.iter().map(|&t| tcp(t, 7)).collect();
    deliver(&mut tb, &frames);
    let mut want: Vec<Vec<(u32, Vec<u8>)>> = vec![Vec::new(); 4];
    for (t, f) in tuples.iter().zip(&frames) {
        let h = hash_tcp4(&key, t.0, B_IP, t.1, t.2);
        want[table[(h & 127) as usize] as usize].push((h, f.clone()));
    }
    for (k, q) in qps.iter_mut().enumerate() {
        let got = reap_rx(&tb.drv[1], q);
        assert!(got.len() > 30, "queue pair {k} gets its share");
        assert_eq!(got.len(), want[k].len(), "queue pair {k}");
        for ((c, data, _), (h, f)) in got.iter().zip(&want[k]) {
            assert_eq!((c.rss_hash, c.rss_type), (*h, RSS_TYPE_TCP4));
            assert_eq!(data, f, "in arrival order, whole");
        }
        let d = &tb.drv[1];
        assert_eq!(
            qstat(d, 0, k as u32, QSTAT_RX_PACKETS),
            want[k].len() as u64
        );
        let v = vec_qp_rx(1, 0, k as u32);
        assert!(d.irq.count(v) > 0, "vector {v} of queue pair {k}");
    }
    // UDP and fragments hash over the addresses; a tagged frame has none.
    let src = [10, 7, 7, 7];
    let mut tagged = tcp(tuple(1), 1);
    tagged.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
    deliver(
        &mut tb,
        &[udp(src, 53, 53, false), udp(src, 99, 99, true), tagged],
    );
    let h = addr_hash(&key, src);
    let k = table[(h & 127) as usize] as usize;
    let got = reap_rx(&tb.drv[1], &mut qps[k]);
    assert_eq!(got.len(), if k == 0 { 3 } else { 2 });
    for (c, _, _) in &got[..2] {
        assert_eq!((c.rss_hash, c.rss_type), (h, RSS_TYPE_IPV4));
    }
    let mut all0 = reap_rx(&tb.drv[1], &mut qps[0]);
    if k == 0 {
        all0 = got[2..].to_vec();
    }
    assert_eq!(all0.len(), 1, "the tagged frame on queue pair 0");
    assert_eq!((all0[0].0.rss_hash, all0[0].0.rss_type), (0, RSS_TYPE_NONE));
}

#[test]
fn an_indirection_table_change_moves_later_frames() {
    let (mut tb, mut qps) = receiver(4);
    let table: [u8; 128] = core::array::from_fn(|i| (i % 4) as u8);
    set_rss(&mut tb, RSS_CTRL_ENABLE, &table, &RSS_KEY_DEFAULT);
    let frames: Vec<Vec<u8>> = (0..64).map(|i| tcp(tuple(i), 1)).collect();
    deliver(&mut tb, &frames);
    let before: Vec<usize> = qps
        .iter_mut()
        .map(|q| reap_rx(&tb.drv[1], q).len())
        .collect();
    assert!(before.iter().all(|&n| n > 0), "{before:?}");
    set_rss(&mut tb, RSS_CTRL_ENABLE, &[2; 128], &RSS_KEY_DEFAULT);
    deliver(&mut tb, &frames);
    let after: Vec<usize> = qps
        .iter_mut()
        .map(|q| reap_rx(&tb.drv[1], q).len())
        .collect();
    assert_eq!(after, [0, 0, 64, 0]);
    // Steering off again: all on queue pair 0, no hash reported.
    set_rss(&mut tb, 0, &[2; 128], &RSS_KEY_DEFAULT);
    deliver(&mut tb, &frames);
    let got = reap_rx(&tb.drv[1], &mut qps[0]);
    assert_eq!(got.len(), 64);
    assert!(got.iter().all(|(c, _, _)| c.rss_type == RSS_TYPE_NONE));
}

#[test]
fn an_ntuple_rule_overrides_rss_and_can_drop() {
    let (mut tb, mut qps) = receiver(4);
    set_rss(&mut tb, RSS_CTRL_ENABLE, &[1; 128], &RSS_KEY_DEFAULT);
    let to_3 = CmdRule {
        dst_ip: u32::from_be_bytes(B_IP),
        dst_ip_mask: !0,
        dst_port: 5201,
        dst_port_mask: 0xffff,
        proto: 6,
        ..rule(0, 4, RULE_ACT_QUEUE, 3)
    };
    let c = tb.cmd(1, to_3.encode());
    assert_eq!((c.status, c.result), (ST_OK, 4));
    let drop = CmdRule {
        src_ip: u32::from_be_bytes([10, 66, 0, 0]),
        src_ip_mask: 0xffff_0000,
        ..rule(0, RULE_INDEX_ANY, RULE_ACT_DROP, 0)
    };
    let c = tb.cmd(1, drop.encode());
    assert_eq!((c.status, c.result), (ST_OK, 0), "the lowest free index");
    let frames = [
        tcp(([10, 1, 1, 1], 1000, 5201), 1),   // rule 4: queue pair 3
        tcp(([10, 1, 1, 1], 1000, 80), 2),     // RSS: queue pair 1
        tcp(([10, 66, 3, 4], 1000, 5201), 3),  // rule 0 comes first: dropped
        udp([10, 1, 1, 1], 1000, 5201, false), // proto 17: not rule 4
    ];
    deliver(&mut tb, &frames);
    let n: Vec<usize> = qps
        .iter_mut()
        .map(|q| reap_rx(&tb.drv[1], q).len())
        .collect();
    assert_eq!(n, [0, 2, 0, 1]);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_RULE_DROP), 1);
    let clear = CmdRule {
        opcode: CMD_RULE_CLEAR,
        port: 0,
        index: 4,
        ..Default::default()
    };
    assert_eq!(tb.cmd(1, clear.encode()).status, ST_OK);
    assert_eq!(tb.cmd(1, clear.encode()).status, ST_NOT_FOUND);
    deliver(&mut tb, &frames[..1]);
    assert_eq!(reap_rx(&tb.drv[1], &mut qps[1]).len(), 1, "back to RSS");
    // Fill the table: 15 more fit, the next does not.
    for i in 0..NTUPLE_RULES - 1 {
        let c = tb.cmd(1, rule(0, RULE_INDEX_ANY, RULE_ACT_QUEUE, 2).encode());
        assert_eq!(c.status, ST_OK, "rule {i}");
    }
    let c = tb.cmd(1, rule(0, RULE_INDEX_ANY, RULE_ACT_QUEUE, 2).encode());
    assert_eq!((c.status, c.result), (ST_NO_SPACE, 0));
}

#[test]
fn bad_rule_commands_are_refused_and_change_nothing() {
    let (mut tb, mut qps) = receiver(2);
    let bad = [
        (rule(1, 0, RULE_ACT_QUEUE, 1), ST_PORT),
        (rule(0, 0, RULE_ACT_QUEUE, MAX_QP as u16), ST_BAD_DESC),
        (rule(0, NTUPLE_RULES as u16, RULE_ACT_QUEUE, 1), ST_BAD_DESC),
        (rule(0, 0, 0, 1), ST_BAD_DESC),
        (rule(0, 0, 4, 1), ST_BAD_DESC),
        (
            CmdRule {
                flags: 2,
                ..rule(0, 0, RULE_ACT_DROP, 0)
            },
            ST_BAD_DESC,
        ),
        (
            CmdRule {
                rsvd2: 1,
                ..rule(0, 0, RULE_ACT_DROP, 0)
            },
            ST_BAD_DESC,
        ),
        (
            CmdRule {
                proto: 256,
                ..rule(0, 0, RULE_ACT_DROP, 0)
            },
            ST_BAD_DESC,
        ),
    ];
    for (c, st) in bad {
        assert_eq!(tb.cmd(1, c.encode()).status, st, "{c:?}");
    }
    let clear = |port, index| CmdRule {
        opcode: CMD_RULE_CLEAR,
        port,
        index,
        ..Default::default()
    };
    assert_eq!(tb.cmd(1, clear(0, 16).encode()).status, ST_BAD_DESC);
    assert_eq!(tb.cmd(1, clear(7, 0).encode()).status, ST_PORT);
    assert_eq!(tb.cmd(1, clear(0, 0).encode()).status, ST_NOT_FOUND);
    deliver(&mut tb, &[tcp(tuple(1), 1)]);
    assert_eq!(reap_rx(&tb.drv[1], &mut qps[0]).len(), 1, "no rule written");
}

#[test]
fn inactive_queue_pairs_are_clamped_to_queue_pair_0() {
    let (mut tb, mut qps) = receiver(2);
    let b = port_block(0);
    for (w, r) in [(0, 1), (100, MAX_QP), (u32::MAX, MAX_QP), (2, 2)] {
        tb.drv[1].bar.w32(b + PORT_NUM_QP, w);
        tb.step();
        assert_eq!(tb.drv[1].bar.r32(b + PORT_NUM_QP), r, "wrote {w}");
    }
    // Table entries 2..=255 name queue pairs that are not active.
    let table: [u8; 128] = core::array::from_fn(|i| [1, 7, 200, 2][i % 4]);
    set_rss(&mut tb, RSS_CTRL_ENABLE, &table, &RSS_KEY_DEFAULT);
    let frames: Vec<Vec<u8>> = (0..64).map(|i| tcp(tuple(i), 1)).collect();
    deliver(&mut tb, &frames);
    let on1 = reap_rx(&tb.drv[1], &mut qps[1]).len() as u64;
    let on0 = reap_rx(&tb.drv[1], &mut qps[0]).len() as u64;
    assert!(on1 > 0 && on0 > 0);
    assert_eq!(on0 + on1, 64);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_BAD_QUEUE), on0);
    // A rule to a queue pair below MAX_QP but inactive is taken, and its
    // frames go to queue pair 0 too.
    let c = tb.cmd(1, rule(0, 0, RULE_ACT_QUEUE, 5).encode());
    assert_eq!(c.status, ST_OK);
    deliver(&mut tb, &frames[..4]);
    assert_eq!(reap_rx(&tb.drv[1], &mut qps[0]).len(), 4);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_BAD_QUEUE), on0 + 4);
    // Fewer MSI-X vectors, fewer queue pairs.
    lock(&tb.model.guests[1].dev).set_vectors(8);
    tb.step();
    assert_eq!(tb.drv[1].bar.r32(REG_MAX_QP), 6);
    tb.drv[1].bar.w32(b + PORT_NUM_QP, 8);
    tb.step();
    assert_eq!(tb.drv[1].bar.r32(b + PORT_NUM_QP), 6);
}

/// A queue pair's queues are refused like any queue, with their queue id.
#[test]
fn a_bad_queue_pair_ring_is_refused_with_its_queue_id() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].events();
    let reg = qp_queues(0, 3) + QP_RXCQ;
    let bar = tb.drv[1].bar.clone();
    bar.w64(reg + Q_BASE, 12); // not aligned
    bar.w32(reg + Q_SIZE, 64);
    bar.w32(reg + Q_CTRL, Q_CTRL_ENABLE);
    tb.step();
    assert_eq!(bar.r32(reg + Q_STATUS), Q_STATUS_ERROR);
    assert_eq!(bar.r32(reg + Q_ERROR), ST_QUEUE_CONFIG as u32);
    let ev = tb.drv[1].events();
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].code, ev[0].info),
        (EV_QUEUE_ERROR, qp_qid(0, 3, QK_RXCQ))
    );
}

/// Header entries of a flow with payload `n` bytes from sequence `seq`.
fn flow_pkts(seq: u32, n: usize, len: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let s = seq + (i * len) as u32;
            tcp_frame(A_IP, B_IP, 4000, 5001, s, &vec![i as u8; len])
        })
        .collect()
}

#[test]
fn a_flow_s_entries_follow_its_notify_queue_in_order() {
    let (mut tb, mut qps) = receiver(4);
    // Hash everything elsewhere: flows are not steered by RSS.
    set_rss(&mut tb, RSS_CTRL_ENABLE, &[1; 128], &RSS_KEY_DEFAULT);
    let bad = CmdFlow {
        flags: FLOWI_QUEUE | ((MAX_QP as u16) << FLOW_QUEUE_SHIFT),
        ..flow_b(0, 0)
    };
    assert_eq!(tb.install(1, bad), Err(ST_BAD_DESC));
    let c = CmdFlow {
        flags: FLOWI_QUEUE | (2 << FLOW_QUEUE_SHIFT),
        ..flow_b(0, 0)
    };
    let flow = tb.install(1, c).unwrap();
    let r = tb.drv[1].alloc(1 << 16);
    let key = tb.reg_mr(1, r, 1 << 16, MR_ACCESS_LOCAL_WRITE).unwrap();
    assert_eq!(tb.post(1, flow, key, 0, 8000).status, ST_OK);
    // Three packets in one batch: one coalesced entry on queue pair 2.
    deliver(&mut tb, &flow_pkts(0, 3, 1000));
    let e = reap_hdr(&tb.drv[1], &mut qps[2]);
    assert_eq!(e.len(), 1);
    assert_eq!((e[0].seq, e[0].len, e[0].nsegs), (0, 3000, 3));
    assert_eq!(qstat(&tb.drv[1], 0, 2, QSTAT_RX_HDR_PACKETS), 3);
    for k in [0, 1, 3] {
        assert!(reap_hdr(&tb.drv[1], &mut qps[k]).is_empty(), "qp {k}");
    }
    assert!(tb.drv[1].irq.count(vec_qp_rx(1, 0, 2)) > 0);
    // Two packets open an entry; moving the flow to queue pair 3 publishes
    // it on queue pair 2 before the command completes.
    {
        let now = tb.now;
        let mut d = lock(&tb.model.guests[1].dev);
        for f in flow_pkts(3000, 2, 1000) {
            d.rx_frame(0, &mut Frame::owned(f), now);
        }
    }
    let hdrq2 = qps[2].hdrq.reg;
    let prod = tb.drv[1].bar.r32(hdrq2 + Q_PROD);
    let upd = CmdFlow {
        opcode: CMD_FLOW_UPDATE,
        flags: FLOWU_QUEUE,
        flow,
        stream_off: 3,
        ..Default::default()
    };
    tb.drv[1].push_cmd(upd.encode());
    let now = tb.now;
    lock(&tb.model.guests[1].dev).scan_control(now);
    let c = tb.drv[1].reap_cmd().expect("completion");
    assert_eq!((c.status, c.result), (ST_OK, 5000), "result: the cursor");
    assert_eq!(
        tb.drv[1].bar.r32(hdrq2 + Q_PROD),
        prod + 1,
        "published first"
    );
    deliver(&mut tb, &flow_pkts(5000, 2, 1000));
    let old = reap_hdr(&tb.drv[1], &mut qps[2]);
    let new = reap_hdr(&tb.drv[1], &mut qps[3]);
    assert_eq!(old.len(), 1);
    assert_eq!((old[0].seq, old[0].len), (3000, 2000));
    assert_eq!(new.len(), 1);
    assert_eq!((new[0].seq, new[0].len, new[0].cursor), (5000, 2000, 7000));
    // Its normal-path frames (beyond posted space) follow it too.
    deliver(&mut tb, &flow_pkts(9000, 1, 100));
    let got = reap_rx(&tb.drv[1], &mut qps[3]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0.flags & RXF_FLOW, RXF_FLOW);
    assert_eq!(got[0].0.flow, flow);
    // Bad notify queues: refused, or (inactive) delivered to queue pair 0.
    let bad = CmdFlow {
        stream_off: MAX_QP as u64,
        ..upd
    };
    assert_eq!(tb.cmd(1, bad.encode()).status, ST_BAD_DESC);
    let both = CmdFlow {
        flags: FLOWU_QUEUE | FLOWU_CURSOR,
        ..upd
    };
    assert_eq!(tb.cmd(1, both.encode()).status, ST_BAD_DESC);
    let inactive = CmdFlow {
        stream_off: 6,
        ..upd
    };
    assert_eq!(tb.cmd(1, inactive.encode()).status, ST_OK);
    deliver(&mut tb, &flow_pkts(7000, 1, 1000));
    assert_eq!(reap_hdr(&tb.drv[1], &mut qps[0]).len(), 1);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_BAD_QUEUE), 1);
}

#[test]
fn tx_queue_pairs_complete_on_their_own_queues_and_count() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 200);
    let mut q1 = setup_qp(&mut tb, 0, 0, 1);
    let mut q2 = setup_qp(&mut tb, 0, 0, 2);
    tb.drv[0].bar.w32(port_block(0) + PORT_NUM_QP, 2);
    tb.step();
    let d = &mut tb.drv[0];
    let plain = tcp(tuple(3), 1);
    let a = d.alloc(plain.len() as u64);
    d.mem.write(a, &plain).unwrap();
    let desc = |cookie| TxDesc {
        opcode: TX_OP_PLAIN,
        buf_len: plain.len() as u32,
        buf_addr: a,
        cookie,
        ..Default::default()
    };
    // A plain TSO send of 3000 payload bytes in 1000-byte segments.
    let big = tcp_frame(A_IP, B_IP, 4000, 80, 1, &[7u8; 3000]);
    let ba = d.alloc(big.len() as u64);
    d.mem.write(ba, &big).unwrap();
    let tso = TxDesc {
        opcode: TX_OP_PLAIN,
        flags: TXF_TSO,
        buf_len: big.len() as u32,
        buf_addr: ba,
        mss: 1000,
        cookie: 9,
        ..Default::default()
    };
    d.produce(&mut q1.txq, &desc(1).encode());
    d.produce(&mut q1.txq, &tso.encode());
    d.produce(&mut q2.txq, &desc(2).encode()); // queue pair 2 is not active
    tb.step();
    let d = &tb.drv[0];
    let mut comps = Vec::new();
    while let Some(b) = d.consume(&mut q1.txcq) {
        comps.push(TxCompletion::decode(b[..16].try_into().unwrap()));
    }
    let got: Vec<(u64, u16, u16)> = comps
        .iter()
        .map(|c| (c.cookie, c.status, c.frames))
        .collect();
    assert_eq!(got, [(1, ST_OK, 1), (9, ST_OK, 3)]);
    assert!(
        d.consume(&mut q2.txcq).is_none(),
        "an inactive queue pair waits"
    );
    let seg_bytes = 3 * 54 + 3000;
    assert_eq!(qstat(d, 0, 1, QSTAT_TX_PACKETS), 4);
    assert_eq!(
        qstat(d, 0, 1, QSTAT_TX_BYTES),
        (plain.len() + seg_bytes) as u64
    );
    assert_eq!(qstat(d, 0, 1, QSTAT_TX_LSO_PACKETS), 1);
    assert_eq!(qstat(d, 0, 1, QSTAT_TX_LSO_BYTES), seg_bytes as u64);
    assert_eq!(qstat(d, 0, 0, QSTAT_TX_PACKETS), 0);
    assert_eq!(d.pstat(0, PSTAT_TX_FRAMES), 4, "the port counts all");
    assert!(d.irq.count(vec_qp_tx(1, 0, 1)) > 0);
    assert_eq!(d.irq.count(vec_tx(0)), 0);
    assert!(tb.drv[0].reap_tx(0).is_empty(), "nothing on queue pair 0");
    assert_eq!(tb.drv[1].reap_rx(0).len(), 4);
    // Activating queue pair 2 serves its waiting descriptor.
    tb.drv[0].bar.w32(port_block(0) + PORT_NUM_QP, 3);
    tb.step();
    let b = tb.drv[0].consume(&mut q2.txcq).expect("served once active");
    assert_eq!(TxCompletion::decode(b[..16].try_into().unwrap()).cookie, 2);
    assert_eq!(qstat(&tb.drv[0], 0, 2, QSTAT_TX_PACKETS), 1);
}

#[test]
fn reset_returns_to_one_queue_pair_without_rules() {
    let (mut tb, _) = receiver(4);
    set_rss(
        &mut tb,
        RSS_CTRL_ENABLE | RSS_CTRL_HASH,
        &[3; 128],
        &[9; 40],
    );
    let c = tb.cmd(1, rule(0, 0, RULE_ACT_DROP, 0).encode());
    assert_eq!(c.status, ST_OK);
    tb.bring_up(1); // resets the device
    let b = port_block(0);
    let bar = tb.drv[1].bar.clone();
    assert_eq!(bar.r32(b + PORT_NUM_QP), 1);
    assert_eq!(bar.r32(b + PORT_RSS_CTRL), 0);
    assert_eq!(
        bar.r32(b + PORT_RSS_KEY),
        u32::from_le_bytes([0x6d, 0x5a, 0x56, 0xda])
    );
    assert_eq!(bar.r32(b + PORT_RSS_TABLE), 0);
    assert_eq!(bar.r32(qp_queues(0, 1) + QP_RXQ + Q_STATUS), 0);
    assert_eq!(bar.r64(qp_block(0, 1) + QP_STATS + 8 * QSTAT_RX_PACKETS), 0);
    tb.drv[1].post_rx(0, 8);
    deliver(&mut tb, &[tcp(tuple(5), 1)]);
    let got = tb.drv[1].reap_rx(0);
    assert_eq!(got.len(), 1, "the drop rule is gone");
    assert_eq!((got[0].0.rss_hash, got[0].0.rss_type), (0, RSS_TYPE_NONE));
    let c = CmdRule {
        opcode: CMD_RULE_CLEAR,
        ..rule(0, 0, 0, 0)
    };
    assert_eq!(tb.cmd(1, c.encode()).status, ST_NOT_FOUND);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// Whatever the driver writes to the steering registers, every frame
    /// lands on the queue pair §14 names (queue pair 0 for an inactive
    /// one), whole and in order, and nothing panics.
    #[test]
    fn steering_follows_the_registers(
        nqp in prop_oneof![Just(0u32), 1u32..=8, any::<u32>()],
        ctrl in any::<u32>(),
        table in proptest::collection::vec(prop_oneof![4 => 0u8..8, 1 => any::<u8>()], 128),
        key in proptest::array::uniform32(any::<u8>()),
        rule_q in proptest::option::of(0u16..8),
        ids in proptest::collection::vec(any::<u32>(), 1..60),
    ) {
        let (mut tb, mut qps) = receiver(MAX_QP);
        let mut k40 = RSS_KEY_DEFAULT;
        k40[..32].copy_from_slice(&key);
        let table: [u8; 128] = table.try_into().unwrap();
        tb.drv[1].bar.w32(port_block(0) + PORT_NUM_QP, nqp);
        set_rss(&mut tb, ctrl, &table, &k40);
        let active = nqp.clamp(1, MAX_QP);
        prop_assert_eq!(tb.drv[1].bar.r32(port_block(0) + PORT_NUM_QP), active);
        if let Some(q) = rule_q {
            let r = CmdRule { dst_port: 443, dst_port_mask: 0xffff, ..rule(0, 3, RULE_ACT_QUEUE, q) };
            prop_assert_eq!(tb.cmd(1, r.encode()).status, ST_OK);
        }
        let tuples: Vec<Tuple> = ids.iter().map(|&i| tuple(i)).collect();
        let frames: Vec<Vec<u8>> = tuples.iter().map(|&t| tcp(t, 1)).collect();
        deliver(&mut tb, &frames);
        let mut want: Vec<Vec<&Vec<u8>>> = vec![Vec::new(); MAX_QP as usize];
        for (t, f) in tuples.iter().zip(&frames) {
            let h = hash_tcp4(&k40, t.0, B_IP, t.1, t.2);
            let q = match rule_q {
                Some(q) if t.2 == 443 => u32::from(q),
                _ if ctrl & RSS_CTRL_ENABLE != 0 => u32::from(table[(h & 127) as usize]),
                _ => 0,
            };
            want[if q < active { q as usize } else { 0 }].push(f);
        }
        for (k, q) in qps.iter_mut().enumerate() {
            let got = reap_rx(&tb.drv[1], q);
            let data: Vec<&Vec<u8>> = got.iter().map(|(_, d, _)| d).collect();
            prop_assert_eq!(data, want[k].clone(), "queue pair {}", k);
        }
    }

    /// Raw rule commands and register values of any kind: statuses only,
    /// and every frame is delivered or counted as dropped.
    #[test]
    fn hostile_steering_input_never_panics(
        cmds in proptest::collection::vec((8u16..=9, proptest::array::uniform32(any::<u8>())), 0..20),
        regs in proptest::collection::vec((0usize..0x60, any::<u32>()), 0..40),
        ids in proptest::collection::vec(any::<u32>(), 1..40),
    ) {
        let (mut tb, mut qps) = receiver(3);
        for (op, b) in cmds {
            let mut c = [0u8; 64];
            c[8..40].copy_from_slice(&b);
            c[0..2].copy_from_slice(&op.to_le_bytes());
            c[8] %= 2; // port 0 or 1 (1 does not exist here)
            tb.cmd(1, c);
        }
        for (w, v) in regs {
            // PORT_NUM_QP, PORT_RSS_CTRL, the key and the table.
            let off = match w {
                0 => PORT_NUM_QP,
                1 => PORT_RSS_CTRL,
                w => PORT_RSS_KEY + 4 * (w % 0x30),
            };
            tb.drv[1].bar.w32(port_block(0) + off, v);
        }
        tb.step();
        let frames: Vec<Vec<u8>> = ids.iter().map(|&i| tcp(tuple(i), 1)).collect();
        deliver(&mut tb, &frames);
        let d = &tb.drv[1];
        let nqp = d.bar.r32(port_block(0) + PORT_NUM_QP);
        prop_assert!((1..=MAX_QP).contains(&nqp));
        let mut delivered = 0;
        for q in qps.iter_mut() {
            delivered += reap_rx(d, q).len() as u64;
        }
        let dropped = d.pstat(0, PSTAT_RX_RULE_DROP) + d.pstat(0, PSTAT_RX_NO_BUF);
        prop_assert_eq!(delivered + dropped, frames.len() as u64);
        prop_assert!(!lock(&tb.model.guests[1].dev).fatal());
    }
}

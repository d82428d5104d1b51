//! Steering version 2 (docs/hardware.md §16), driven through BAR2, the
//! command queue and guest memory as a driver would: IPv6 n-tuple rules
//! (address block read by DMA, next header and port matching, extension
//! headers, families kept apart), the RSS hash fields of each flow type
//! and the types they report, RSS contexts and `RULE_ACT_RSS`, the errors
//! of bad commands, and reset.

mod common;

use common::ip6::*;
use common::qpairs::*;
use common::*;
use zeronic_hw::cmd::*;
use zeronic_hw::desc::*;
use zeronic_hw::regs::*;
use zeronic_hw::rss::*;
use zeronic_hw::status::*;

/// An IPv4/TCP frame from `src` to `B_IP`.
fn tcp4(src: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    tcp_frame(src, B_IP, sport, dport, 1, b"data")
}

/// Writes `a` into guest 1's memory and returns `r` as an IPv6 rule
/// naming it.
fn rule6(tb: &mut Tb, r: CmdRule, a: RuleAddr6) -> CmdRule {
    let at = tb.drv[1].alloc(RuleAddr6::SIZE as u64);
    tb.drv[1].mem.write(at, &a.encode()).unwrap();
    let mut r = CmdRule {
        flags: RULEF_IPV6,
        ..r
    };
    r.set_addr6(at);
    r
}

/// Writes `table` into guest 1's memory and sets RSS context `ctx` of
/// port 0 from it; the completion's status.
fn set_ctx(tb: &mut Tb, ctx: u16, table: &[u8; 128]) -> u16 {
    let at = tb.drv[1].alloc(128);
    tb.drv[1].mem.write(at, table).unwrap();
    let c = CmdRssCtx {
        ctx,
        table: at,
        ..Default::default()
    };
    tb.cmd(1, c.entry().bytes()).status
}

/// The number of frames each of `qps` received (reaping them).
fn counts(tb: &Tb, qps: &mut [Qp]) -> Vec<usize> {
    qps.iter_mut()
        .map(|q| reap_rx(&tb.drv[1], q).len())
        .collect()
}

/// A prefix mask of `bits` bits.
fn prefix(bits: usize) -> [u8; 16] {
    core::array::from_fn(|i| match bits.saturating_sub(8 * i) {
        0 => 0,
        b if b >= 8 => 0xff,
        b => !(0xffu8 >> b),
    })
}

#[test]
fn reset_values_announce_version_2_4() {
    let tb = receiver(1).0;
    let bar = &tb.drv[1].bar;
    // 2.4 or a later minor version (additions only): 2.5 today.
    assert_eq!(bar.r32(REG_VERSION) >> 16, 2);
    assert!(bar.r32(REG_VERSION) & 0xffff >= 4);
    assert_eq!(bar.r32(REG_CAPS) & CAP_STEER_V2, CAP_STEER_V2);
    assert_eq!(bar.r32(REG_RSS_CONTEXTS), RSS_CONTEXTS);
    let fields = bar.r32(port_block(0) + PORT_RSS_FIELDS);
    assert_eq!(fields, RSS_FIELDS_DEFAULT);
    assert_eq!((fields >> RSS_FIELDS_TCP4_SHIFT) & 0xf, RSS_FIELDS_ALL);
    let addrs = RSS_FIELD_SA | RSS_FIELD_DA;
    assert_eq!((fields >> RSS_FIELDS_UDP6_SHIFT) & 0xf, addrs);
}

#[test]
fn ipv6_rules_match_addresses_next_header_and_ports() {
    let (mut tb, mut qps) = receiver(4);
    // Rule 0: any IPv4 frame to queue pair 1 (never an IPv6 one).
    let c = tb.cmd(1, rule(0, 0, RULE_ACT_QUEUE, 1).encode());
    assert_eq!((c.status, c.result), (ST_OK, 0));
    // Rule 1: tcp6 to port 5201 -> 3.
    let tcp = CmdRule {
        proto: 6,
        dst_port: 5201,
        dst_port_mask: 0xffff,
        ..rule(0, 1, RULE_ACT_QUEUE, 3)
    };
    let r = rule6(&mut tb, tcp, RuleAddr6::default());
    assert_eq!(tb.cmd(1, r.encode()).status, ST_OK);
    // Rule 2: anything from 2001:db8:0:7::/64 to B6 -> 2.
    let from7 = RuleAddr6 {
        src_addr: a6(7, 0),
        src_mask: prefix(64),
        dst_addr: B6,
        dst_mask: prefix(128),
    };
    let r = rule6(&mut tb, rule(0, 2, RULE_ACT_QUEUE, 2), from7);
    assert_eq!(tb.cmd(1, r.encode()).status, ST_OK);
    let frames = [
        ip6(a6(1, 1), 6, 999, 5201, false),  // rule 1: 3
        ip6(a6(7, 9), 6, 999, 5201, false),  // rule 1 first: 3
        ip6(a6(7, 9), 17, 999, 5201, false), // proto 17, rule 2: 2
        ip6(a6(1, 1), 6, 999, 5201, true),   // extension header: no port match, 0
        ip6(a6(7, 1), 6, 999, 5201, true),   // rule 2 needs no ports: 2
        ip6(a6(8, 1), 17, 999, 80, false),   // nothing: 0
        tcp4([10, 0, 0, 1], 999, 5201),      // IPv4: rule 0, 1
    ];
    deliver(&mut tb, &frames);
    assert_eq!(counts(&tb, &mut qps), [2, 1, 2, 2]);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_V6_EXTHDR), 2);
    // Masked ports: udp6 source ports 0x1200..0x12ff are dropped.
    let drop = CmdRule {
        proto: 17,
        src_port: 0x1234,
        src_port_mask: 0xff00,
        ..rule(0, RULE_INDEX_ANY, RULE_ACT_DROP, 0)
    };
    let r = rule6(&mut tb, drop, RuleAddr6::default());
    let c = tb.cmd(1, r.encode());
    assert_eq!((c.status, c.result), (ST_OK, 3), "the lowest free index");
    deliver(
        &mut tb,
        &[
            ip6(a6(1, 1), 17, 0x12ab, 53, false),
            ip6(a6(1, 1), 17, 0x13ab, 53, false),
        ],
    );
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_RULE_DROP), 1);
    assert_eq!(counts(&tb, &mut qps), [1, 0, 0, 0]);
    // Clearing rule 1 sends tcp6 to port 5201 on by the later rules.
    let clear = RuleClear { port: 0, index: 1 };
    assert_eq!(tb.cmd(1, clear.entry().bytes()).status, ST_OK);
    deliver(&mut tb, &frames[..2]);
    assert_eq!(counts(&tb, &mut qps), [1, 0, 1, 0]);
}

#[test]
fn an_ipv6_rule_keeps_the_block_it_read() {
    let (mut tb, mut qps) = receiver(2);
    let block = RuleAddr6 {
        src_addr: a6(1, 1),
        src_mask: prefix(128),
        ..Default::default()
    };
    let r = rule6(&mut tb, rule(0, 5, RULE_ACT_QUEUE, 1), block);
    assert_eq!(tb.cmd(1, r.encode()).status, ST_OK);
    // The driver reuses the block after the completion.
    let other = RuleAddr6 {
        src_addr: a6(2, 2),
        ..block
    };
    tb.drv[1].mem.write(r.addr6(), &other.encode()).unwrap();
    deliver(
        &mut tb,
        &[ip6(a6(1, 1), 6, 1, 2, false), ip6(a6(2, 2), 6, 1, 2, false)],
    );
    assert_eq!(counts(&tb, &mut qps), [1, 1]);
}

#[test]
fn bad_ipv6_rules_are_refused_and_change_nothing() {
    let (mut tb, mut qps) = receiver(2);
    let good = rule6(&mut tb, rule(0, 0, RULE_ACT_QUEUE, 1), RuleAddr6::default());
    let mut unaligned = good;
    unaligned.set_addr6(good.addr6() + 4);
    let mut outside = good;
    outside.set_addr6(RAM as u64 - 32);
    let mut far = good;
    far.set_addr6(u64::MAX - 7);
    let bad = [
        (unaligned, ST_BAD_DESC),
        (outside, ST_DMA),
        (far, ST_DMA),
        (CmdRule { dst_ip: 1, ..good }, ST_BAD_DESC),
        (
            CmdRule {
                dst_ip_mask: 1,
                ..good
            },
            ST_BAD_DESC,
        ),
        (CmdRule { flags: 3, ..good }, ST_BAD_DESC),
        (CmdRule { rss_ctx: 1, ..good }, ST_BAD_DESC),
        (CmdRule { port: 1, ..good }, ST_PORT),
    ];
    for (c, st) in bad {
        assert_eq!(tb.cmd(1, c.encode()).status, st, "{c:?}");
    }
    let clear = RuleClear { port: 0, index: 0 };
    assert_eq!(tb.cmd(1, clear.entry().bytes()).status, ST_NOT_FOUND);
    deliver(&mut tb, &[ip6(a6(1, 1), 6, 1, 2, false)]);
    assert_eq!(counts(&tb, &mut qps), [1, 0], "no rule written");
}

/// Sets `PORT_RSS_FIELDS` and reports hashes (no steering).
fn set_fields(tb: &mut Tb, tcp4: u32, udp4: u32, tcp6: u32, udp6: u32) {
    let v = tcp4 << RSS_FIELDS_TCP4_SHIFT
        | udp4 << RSS_FIELDS_UDP4_SHIFT
        | tcp6 << RSS_FIELDS_TCP6_SHIFT
        | udp6 << RSS_FIELDS_UDP6_SHIFT;
    let bar = &tb.drv[1].bar;
    bar.w32(port_block(0) + PORT_RSS_FIELDS, v);
    bar.w32(port_block(0) + PORT_RSS_CTRL, RSS_CTRL_HASH);
    tb.step();
}

/// The (hash, type) of each frame received on queue pair 0.
fn hashes(tb: &mut Tb, q: &mut Qp, frames: &[Vec<u8>]) -> Vec<(u32, u16)> {
    deliver(tb, frames);
    let got = reap_rx(&tb.drv[1], q);
    assert_eq!(got.len(), frames.len());
    got.iter()
        .map(|(c, _, _)| (c.rss_hash, c.rss_type))
        .collect()
}

#[test]
fn hash_fields_select_the_input_and_the_type() {
    let (mut tb, mut qps) = receiver(1);
    let k = &RSS_KEY_DEFAULT;
    let s4 = [66, 9, 149, 187];
    let (s6, sd) = (a6(3, 3), RSS_FIELD_SA | RSS_FIELD_DA);
    let (sp, dp) = (2794, 1766);
    let frames = [
        tcp4(s4, sp, dp),
        udp(s4, sp, dp, false),
        udp(s4, sp, dp, true), // a first fragment
        ip6(s6, 6, sp, dp, false),
        ip6(s6, 17, sp, dp, false),
        ip6(s6, 6, sp, dp, true),
    ];
    // The defaults: 2.3's hashes.
    let v4 = |f: u32| hash_fields(k, f, &s4, &B_IP, sp, dp);
    let v6 = |f: u32| hash_fields(k, f, &s6, &B6, sp, dp);
    let want = [
        (hash_tcp4(k, s4, B_IP, sp, dp), RSS_TYPE_TCP4),
        (v4(sd), RSS_TYPE_IPV4),
        (v4(sd), RSS_TYPE_IPV4),
        (hash_tcp6(k, s6, B6, sp, dp), RSS_TYPE_TCP6),
        (hash_ipv6(k, s6, B6), RSS_TYPE_IPV6),
        (hash_ipv6(k, s6, B6), RSS_TYPE_IPV6),
    ];
    set_fields(&mut tb, 0xf, 0x3, 0xf, 0x3);
    assert_eq!(hashes(&mut tb, &mut qps[0], &frames), want);
    // Subsets: TCP4 SA+DP, UDP4 all four, TCP6 none, UDP6 DA only.
    let sa_dp = RSS_FIELD_SA | RSS_FIELD_DP;
    set_fields(&mut tb, sa_dp, RSS_FIELDS_ALL, 0, RSS_FIELD_DA);
    let want = [
        (v4(sa_dp), RSS_TYPE_TCP4),
        (v4(RSS_FIELDS_ALL), RSS_TYPE_UDP4),
        (v4(sd), RSS_TYPE_IPV4), // fragments: addresses only
        (0, RSS_TYPE_NONE),
        (v6(RSS_FIELD_DA), RSS_TYPE_IPV6),
        (v6(sd), RSS_TYPE_IPV6), // an extension header: addresses
    ];
    assert_eq!(hashes(&mut tb, &mut qps[0], &frames), want);
    // Ports without addresses, and UDP6 with ports: the L4 types.
    set_fields(&mut tb, sd, RSS_FIELD_SP, sd, RSS_FIELDS_ALL);
    let got = hashes(&mut tb, &mut qps[0], &frames[..5]);
    assert_eq!(got[0], (v4(sd), RSS_TYPE_IPV4));
    assert_eq!(got[1], (v4(RSS_FIELD_SP), RSS_TYPE_UDP4));
    assert_eq!(got[3], (v6(sd), RSS_TYPE_IPV6));
    assert_eq!(got[4], (v6(RSS_FIELDS_ALL), RSS_TYPE_UDP6));
}

#[test]
fn frames_without_a_selected_field_go_to_queue_pair_0() {
    let (mut tb, mut qps) = receiver(4);
    set_rss(&mut tb, RSS_CTRL_ENABLE, &[3; 128], &RSS_KEY_DEFAULT);
    let bar = &tb.drv[1].bar;
    bar.w32(port_block(0) + PORT_RSS_FIELDS, RSS_FIELDS_DEFAULT & !0xf);
    tb.step();
    let frames = [tcp4([10, 0, 0, 1], 1, 2), udp([10, 0, 0, 1], 1, 2, false)];
    deliver(&mut tb, &frames);
    assert_eq!(counts(&tb, &mut qps), [1, 0, 0, 1]);
}

#[test]
fn rss_contexts_steer_rule_matches_through_their_table() {
    let (mut tb, mut qps) = receiver(6);
    let ctx3: [u8; 128] = core::array::from_fn(|i| (i % 2) as u8);
    assert_eq!(set_ctx(&mut tb, 3, &ctx3), ST_OK);
    let r = CmdRule {
        proto: 6,
        dst_port: 5201,
        dst_port_mask: 0xffff,
        rss_ctx: 3,
        ..rule(0, 0, RULE_ACT_RSS, 2)
    };
    assert_eq!(tb.cmd(1, r.encode()).status, ST_OK);
    let srcs: Vec<[u8; 4]> = (0..64).map(|i| [10, 1, i, 3 * i]).collect();
    let frames: Vec<Vec<u8>> = srcs.iter().map(|&s| tcp4(s, 4000, 5201)).collect();
    let mut want = [0usize; 6];
    for &s in &srcs {
        let h = hash_tcp4(&RSS_KEY_DEFAULT, s, B_IP, 4000, 5201);
        want[usize::from(ctx3[(h & 127) as usize]) + 2] += 1;
    }
    assert!(want[2] > 0 && want[3] > 0, "{want:?}");
    deliver(&mut tb, &frames);
    assert_eq!(counts(&tb, &mut qps), want, "entry + queue, RSS off");
    // A new table takes effect whole for later frames.
    assert_eq!(set_ctx(&mut tb, 3, &[3; 128]), ST_OK);
    deliver(&mut tb, &frames);
    assert_eq!(counts(&tb, &mut qps), [0, 0, 0, 0, 0, 64]);
    // A sum past PORT_NUM_QP goes to queue pair 0 and is counted.
    assert_eq!(set_ctx(&mut tb, 3, &[5; 128]), ST_OK);
    deliver(&mut tb, &frames[..3]);
    assert_eq!(counts(&tb, &mut qps), [3, 0, 0, 0, 0, 0]);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_BAD_QUEUE), 3);
    // Context 0 is PORT_RSS_TABLE; other frames still follow RSS (off).
    set_rss(&mut tb, 0, &[1; 128], &RSS_KEY_DEFAULT);
    let r0 = CmdRule { rss_ctx: 0, ..r };
    assert_eq!(tb.cmd(1, r0.encode()).status, ST_OK);
    deliver(&mut tb, &[frames[0].clone(), tcp4(srcs[0], 4000, 80)]);
    assert_eq!(counts(&tb, &mut qps), [1, 0, 0, 1, 0, 0]);
}

#[test]
fn an_ipv6_rule_steers_through_a_context_by_its_fields() {
    let (mut tb, mut qps) = receiver(4);
    let table: [u8; 128] = core::array::from_fn(|i| (i % 4) as u8);
    assert_eq!(set_ctx(&mut tb, 7, &table), ST_OK);
    let r = CmdRule {
        rss_ctx: 7,
        ..rule(0, 0, RULE_ACT_RSS, 0)
    };
    let r = rule6(&mut tb, r, RuleAddr6::default());
    assert_eq!(tb.cmd(1, r.encode()).status, ST_OK);
    // UDP6 hashed over the destination port only: each port's queue pair.
    let bar = &tb.drv[1].bar;
    let fields = RSS_FIELDS_DEFAULT & !(0xf << RSS_FIELDS_UDP6_SHIFT);
    bar.w32(
        port_block(0) + PORT_RSS_FIELDS,
        fields | RSS_FIELD_DP << RSS_FIELDS_UDP6_SHIFT,
    );
    tb.step();
    let mut want = [0usize; 4];
    let mut frames = Vec::new();
    for p in 0..32u16 {
        let h = hash_fields(&RSS_KEY_DEFAULT, RSS_FIELD_DP, &[], &[], 0, 1000 + p);
        want[usize::from(table[(h & 127) as usize])] += 3;
        for s in 0..3 {
            frames.push(ip6(a6(s, s), 17, 7 + u16::from(s), 1000 + p, false));
        }
    }
    deliver(&mut tb, &frames);
    assert_eq!(counts(&tb, &mut qps), want);
}

#[test]
fn bad_context_commands_are_refused_and_change_nothing() {
    let (mut tb, mut qps) = receiver(4);
    assert_eq!(set_ctx(&mut tb, 2, &[1; 128]), ST_OK);
    let r = CmdRule {
        rss_ctx: 2,
        ..rule(0, 0, RULE_ACT_RSS, 0)
    };
    assert_eq!(tb.cmd(1, r.encode()).status, ST_OK);
    let at = tb.drv[1].alloc(128);
    tb.drv[1].mem.write(at, &[3; 128]).unwrap();
    let good = CmdRssCtx {
        ctx: 2,
        table: at,
        ..Default::default()
    };
    let bad = [
        (CmdRssCtx { ctx: 0, ..good }, ST_BAD_DESC),
        (
            CmdRssCtx {
                ctx: RSS_CONTEXTS as u16,
                ..good
            },
            ST_BAD_DESC,
        ),
        (CmdRssCtx { port: 1, ..good }, ST_PORT),
        (CmdRssCtx { flags: 1, ..good }, ST_BAD_DESC),
        (CmdRssCtx { rsvd0: 1, ..good }, ST_BAD_DESC),
        (CmdRssCtx { rsvd5: 1, ..good }, ST_BAD_DESC),
        (
            CmdRssCtx {
                table: at + 1,
                ..good
            },
            ST_BAD_DESC,
        ),
        (
            CmdRssCtx {
                table: RAM as u64 - 64,
                ..good
            },
            ST_DMA,
        ),
        (
            CmdRssCtx {
                table: u64::MAX - 7,
                ..good
            },
            ST_DMA,
        ),
    ];
    for (c, st) in bad {
        assert_eq!(tb.cmd(1, c.entry().bytes()).status, st, "{c:?}");
    }
    let bad_rules = [
        CmdRule {
            rss_ctx: RSS_CONTEXTS as u16,
            ..r
        },
        CmdRule {
            queue: MAX_QP as u16,
            ..r
        },
        CmdRule {
            rss_ctx: 1,
            ..rule(0, 0, RULE_ACT_DROP, 0)
        },
    ];
    for c in bad_rules {
        assert_eq!(tb.cmd(1, c.encode()).status, ST_BAD_DESC, "{c:?}");
    }
    deliver(&mut tb, &[tcp4([10, 0, 0, 1], 1, 2)]);
    assert_eq!(counts(&tb, &mut qps), [0, 1, 0, 0], "context 2 unchanged");
}

#[test]
fn reset_clears_contexts_rules_and_fields() {
    let (mut tb, _) = receiver(4);
    assert_eq!(set_ctx(&mut tb, 1, &[3; 128]), ST_OK);
    let r = CmdRule {
        rss_ctx: 1,
        ..rule(0, 0, RULE_ACT_RSS, 1)
    };
    assert_eq!(tb.cmd(1, r.encode()).status, ST_OK);
    let r6 = rule6(&mut tb, rule(0, 1, RULE_ACT_DROP, 0), RuleAddr6::default());
    assert_eq!(tb.cmd(1, r6.encode()).status, ST_OK);
    tb.drv[1].bar.w32(port_block(0) + PORT_RSS_FIELDS, 0);
    tb.step();
    tb.bring_up(1);
    let bar = &tb.drv[1].bar;
    assert_eq!(bar.r32(port_block(0) + PORT_RSS_FIELDS), RSS_FIELDS_DEFAULT);
    let mut qps = serve_qps(&mut tb, 4);
    // No rule: both frames on queue pair 0.
    deliver(
        &mut tb,
        &[tcp4([10, 0, 0, 1], 1, 2), ip6(a6(1, 1), 6, 1, 2, false)],
    );
    assert_eq!(counts(&tb, &mut qps), [2, 0, 0, 0]);
    // Context 1 is all 0 again: entry 0 + 1.
    assert_eq!(tb.cmd(1, r.encode()).status, ST_OK);
    deliver(&mut tb, &[tcp4([10, 0, 0, 1], 1, 2)]);
    assert_eq!(counts(&tb, &mut qps), [0, 1, 0, 0]);
}

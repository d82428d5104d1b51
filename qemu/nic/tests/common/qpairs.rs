//! Queue pairs as a multi-queue driver sets them up (docs/hardware.md
//! §14): their five queues, RX buffers, completions and counters, and the
//! RSS registers of a port; shared by the steering tests.

use zeronic_hw::cmd::{CmdRule, CMD_RULE_SET};
use zeronic_hw::desc::*;
use zeronic_hw::regs::*;
use zeronic_hw::rss::RSS_KEY_LEN;
use zeronic_nic::csum::Csum;
use zeronic_nic::model::Topology;
use zeronic_nic::wire::Impair;

use super::*;

/// RX buffer size of the queue pairs set up here.
pub const BUF: u64 = 2048;

/// The driver's view of one queue pair.
#[derive(Clone, Copy, Debug)]
pub struct Qp {
    pub txq: Q,
    pub txcq: Q,
    pub rxq: Q,
    pub rxcq: Q,
    pub hdrq: Q,
    pub bufs: u64,
    pub stride: u64,
}

/// Configures queue pair `k` >= 1 of guest `g` port `p` (not yet served:
/// the next scan latches it).
pub fn setup_qp(tb: &mut Tb, g: usize, p: u32, k: u32) -> Qp {
    let b = qp_queues(p, k);
    let d = &mut tb.drv[g];
    Qp {
        txq: d.setup_q(b + QP_TXQ, 64, TxDesc::SIZE),
        txcq: d.setup_q(b + QP_TXCQ, 64, TxCompletion::SIZE),
        rxq: d.setup_q(b + QP_RXQ, 256, RxBufDesc::SIZE),
        rxcq: d.setup_q(b + QP_RXCQ, 256, RxCompletion::SIZE),
        hdrq: d.setup_q(b + QP_HDRQ, 256, HDRQ_ENTRY_SIZE),
        bufs: d.alloc(256 * BUF),
        stride: BUF,
    }
}

/// Queue pair 0 of guest `g` port `p` as `common` set it up.
pub fn qp0(tb: &Tb, g: usize, p: usize) -> Qp {
    let q = tb.drv[g].ports[p];
    Qp {
        txq: q.txq,
        txcq: q.txcq,
        rxq: q.rxq,
        rxcq: q.rxcq,
        hdrq: q.hdrq,
        bufs: q.rxbuf_base,
        stride: 9216,
    }
}

/// Guest 1 (receiver, port 0) with `n` queue pairs set up, each with RX
/// buffers posted, and `PORT_NUM_QP` = `n`.
pub fn receiver(n: u32) -> (Tb, Vec<Qp>) {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    let qps = serve_qps(&mut tb, n);
    (tb, qps)
}

/// Sets up `n` queue pairs of guest 1 port 0 (after `Tb::bring_up`), each
/// with RX buffers posted, and `PORT_NUM_QP` = `n`.
pub fn serve_qps(tb: &mut Tb, n: u32) -> Vec<Qp> {
    let mut qps = vec![qp0(tb, 1, 0)];
    for k in 1..n {
        qps.push(setup_qp(tb, 1, 0, k));
    }
    tb.drv[1].bar.w32(port_block(0) + PORT_NUM_QP, n);
    tb.step();
    for q in &mut qps {
        post_rx(&tb.drv[1], q, 200);
    }
    for k in 0..MAX_QP {
        let st = tb.drv[1].bar.r32(qp_queues(0, k) + QP_RXCQ + Q_STATUS);
        assert_eq!(st, if k < n { Q_STATUS_ENABLED } else { 0 }, "qp {k}");
    }
    qps
}

pub fn post_rx(d: &Drv, q: &mut Qp, n: u32) {
    for _ in 0..n {
        let slot = q.rxq.idx & (q.rxq.size - 1);
        let desc = RxBufDesc {
            addr: q.bufs + slot as u64 * q.stride,
            len: q.stride as u32,
            rsvd0: 0,
        };
        d.produce(&mut q.rxq, &desc.encode());
    }
}

/// RX completions of a queue pair with the frame bytes and the raw entry.
pub fn reap_rx(d: &Drv, q: &mut Qp) -> Vec<(RxCompletion, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(b) = d.consume(&mut q.rxcq) {
        let c = RxCompletion::decode(b[..32].try_into().unwrap());
        let mut data = vec![0u8; c.len as usize];
        let slot = c.index & (q.rxq.size - 1);
        d.mem
            .read(q.bufs + slot as u64 * q.stride, &mut data)
            .unwrap();
        out.push((c, data, b));
    }
    out
}

pub fn reap_hdr(d: &Drv, q: &mut Qp) -> Vec<HdrEntry> {
    let mut out = Vec::new();
    while let Some(b) = d.consume(&mut q.hdrq) {
        out.push(HdrEntry::decode(b[..64].try_into().unwrap()));
    }
    out
}

pub fn qstat(d: &Drv, p: u32, k: u32, i: usize) -> u64 {
    d.bar.r64(qp_block(p, k) + QP_STATS + 8 * i)
}

/// Writes port 0's RSS registers on guest 1 and lets a scan latch them.
pub fn set_rss(tb: &mut Tb, ctrl: u32, table: &[u8; 128], key: &[u8; RSS_KEY_LEN]) {
    let b = port_block(0);
    let bar = &tb.drv[1].bar;
    for (i, w) in key.chunks(4).enumerate() {
        bar.w32(
            b + PORT_RSS_KEY + 4 * i,
            u32::from_le_bytes(w.try_into().unwrap()),
        );
    }
    for (i, w) in table.chunks(4).enumerate() {
        bar.w32(
            b + PORT_RSS_TABLE + 4 * i,
            u32::from_le_bytes(w.try_into().unwrap()),
        );
    }
    bar.w32(b + PORT_RSS_CTRL, ctrl);
    tb.step();
}

/// An IPv4/UDP frame (or, with `frag`, a first fragment of one).
pub fn udp(src: [u8; 4], sport: u16, dport: u16, frag: bool) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 8 + 4];
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let tot = (f.len() - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&tot.to_be_bytes());
    if frag {
        ip[6] = 0x20; // MF
    }
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&B_IP);
    let mut c = Csum::default();
    c.add(&f[14..34]);
    f[24..26].copy_from_slice(&c.finish().to_le_bytes());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f[38..40].copy_from_slice(&12u16.to_be_bytes());
    f
}

/// CMD_RULE_SET of rule `index` of `port` with `action` and `queue`,
/// matching every frame of its family until fields are added.
pub fn rule(port: u16, index: u16, action: u16, queue: u16) -> CmdRule {
    CmdRule {
        opcode: CMD_RULE_SET,
        port,
        index,
        action,
        queue,
        ..Default::default()
    }
}

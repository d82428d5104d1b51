//! One guest's NIC: register file, queues, tables, interrupt moderation.
//! The RX, TX and command units are `impl Device` blocks in their own files.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zeronic_hw::desc::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;

use crate::flow::FlowTable;
use crate::irq::{Irq, NoIrq};
use crate::mem::{Bar2, GuestMem};
use crate::mr::MrTable;
use crate::prof::Profile;
use crate::ring::{Ring, Sync};
use crate::steer::Steering;

/// Header-queue entry being coalesced (not yet written to the ring).
pub struct OpenHdr {
    /// Metadata.
    pub meta: HdrEntry,
    /// Header bytes of the last packet.
    pub hdr: Vec<u8>,
    /// What every packet merged into the entry has in common (a packet
    /// joins only if its own [`Shape`] is equal).
    pub shape: Shape,
    /// Queue pair whose header queue the entry goes to.
    pub qp: u32,
}

/// The header fields a packet must share with an open entry to join it:
/// the driver rebuilds one header from the last packet, so any of these
/// differing would be lost (an ECN mark, a TTL change, TCP options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// TCP acknowledgment number.
    pub ack: u32,
    /// IPv4 TOS byte or IPv6 traffic class (DSCP and ECN).
    pub tos: u8,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// IPv6 flow label (0 for IPv4).
    pub flow_label: u32,
    /// IPv4 header length (options).
    pub ihl: u8,
    /// TCP header length (data offset: options).
    pub thl: u8,
}

/// The five queues of one queue pair (§14; queue pair 0 is the port's own).
pub struct QueuePair {
    /// TX queue.
    pub txq: Ring,
    /// TX completion queue.
    pub txcq: Ring,
    /// RX buffer queue.
    pub rxq: Ring,
    /// RX completion queue.
    pub rxcq: Ring,
    /// Header queue.
    pub hdrq: Ring,
}

impl QueuePair {
    fn new(p: u32, k: u32) -> Self {
        let b = qp_queues(p, k);
        Self {
            txq: Ring::new(b + QP_TXQ, TxDesc::SIZE, qp_qid(p, k, QK_TXQ)),
            txcq: Ring::new(b + QP_TXCQ, TxCompletion::SIZE, qp_qid(p, k, QK_TXCQ)),
            rxq: Ring::new(b + QP_RXQ, RxBufDesc::SIZE, qp_qid(p, k, QK_RXQ)),
            rxcq: Ring::new(b + QP_RXCQ, RxCompletion::SIZE, qp_qid(p, k, QK_RXCQ)),
            hdrq: Ring::new(b + QP_HDRQ, HDRQ_ENTRY_SIZE, qp_qid(p, k, QK_HDRQ)),
        }
    }
}

/// Per-port state.
pub struct Port {
    /// Port enabled (MTU latched).
    pub enabled: bool,
    /// Latched MTU.
    pub mtu: u32,
    /// Queue pairs, `MAX_QP` of them (those below `steer.nqp` are served).
    pub qps: Vec<QueuePair>,
    /// Header entry being coalesced.
    pub open: Option<OpenHdr>,
    /// A peer port is wired.
    pub link: bool,
    /// Receive steering: active queue pairs, RSS, n-tuple rules.
    pub steer: Steering,
}

impl Port {
    fn new(p: u32) -> Self {
        Self {
            enabled: false,
            mtu: DEFAULT_MTU,
            qps: (0..MAX_QP).map(|k| QueuePair::new(p, k)).collect(),
            open: None,
            link: false,
            steer: Steering::default(),
        }
    }

    /// Queue pair `k` if it is active, else queue pair 0 (and false).
    pub fn active_qp(&self, k: u32) -> (u32, bool) {
        if k < self.steer.nqp && (k as usize) < self.qps.len() {
            (k, true)
        } else {
            (0, false)
        }
    }
}

#[derive(Clone, Copy, Default)]
struct VecState {
    pending: u32,
    since: Option<Instant>,
}

/// The device of one guest.
pub struct Device {
    /// Register file.
    pub bar: Arc<Bar2>,
    /// DMA window (None while no guest RAM is mapped).
    pub mem: Option<Arc<GuestMem>>,
    irq: Arc<dyn Irq>,
    /// Ports of this guest.
    pub nports: u32,
    pub(crate) cmdq: Ring,
    pub(crate) cmdcq: Ring,
    pub(crate) evq: Ring,
    /// Ports.
    pub ports: Vec<Port>,
    /// MR Table.
    pub mrs: MrTable,
    /// Flow Table.
    pub flows: FlowTable,
    vecs: [VecState; MAX_VECTORS as usize],
    fatal: bool,
    /// A guest (QEMU) is connected.
    pub attached: bool,
    /// Stopped by `fault freeze` (a dead NIC): no scans, DMA, interrupts or
    /// counters until `fault thaw`. Survives resets and reconnections.
    pub frozen: bool,
    /// Held by `fault hold` (a NIC slow to move a flow's cursor): commands
    /// stop before the next `CMD_FLOW_UPDATE` (those behind it wait, in
    /// order) until `fault thaw`; everything else goes on.
    pub hold_updates: bool,
    /// Set by `fault refuse-posts` until `fault thaw`: every `CMD_MS_POST`
    /// fails with `ST_NO_SPACE` (a NIC that refuses a segment).
    pub refuse_posts: bool,
    /// MSI-X vectors of the guest's ivshmem device (`--vectors`): bounds
    /// `REG_MAX_QP`.
    pub vectors: u32,
    /// Scratch list of guest extents for one placement (kept to save an
    /// allocation per frame).
    pub(crate) place_ext: Vec<(u64, u64)>,
    /// Where the model's time goes (`prof.rs`); kept across resets, cleared
    /// by the control sockets' `prof reset`.
    pub prof: Profile,
}

impl Device {
    /// A device in the reset state.
    pub fn new(bar: Arc<Bar2>, nports: u32) -> Self {
        let mut d = Self {
            bar,
            mem: None,
            irq: Arc::new(NoIrq),
            nports: nports.clamp(1, MAX_PORTS),
            cmdq: Ring::new(REG_CMDQ, 64, qid(0, QK_CMDQ)),
            cmdcq: Ring::new(REG_CMDCQ, 16, qid(0, QK_CMDCQ)),
            evq: Ring::new(REG_EVQ, Event::SIZE, qid(0, QK_EVQ)),
            ports: Vec::new(),
            mrs: MrTable::new(),
            flows: FlowTable::new(),
            vecs: Default::default(),
            place_ext: Vec::new(),
            vectors: 1 + MAX_PORTS * (MAX_QP + 1),
            prof: Profile::default(),
            fatal: false,
            attached: false,
            frozen: false,
            hold_updates: false,
            refuse_posts: false,
        };
        d.reset();
        d
    }

    /// Attaches a guest (connect): DMA window and interrupt sink.
    pub fn attach(&mut self, mem: Option<Arc<GuestMem>>, irq: Arc<dyn Irq>) {
        self.mem = mem;
        self.irq = irq;
        self.attached = true;
        self.reset();
    }

    /// Detaches the guest (disconnect, VM reboot): back to reset state.
    pub fn detach(&mut self) {
        self.mem = None;
        self.irq = Arc::new(NoIrq);
        self.attached = false;
        self.reset();
    }

    /// Sets the number of MSI-X vectors the guest's ivshmem device has.
    pub fn set_vectors(&mut self, n: u32) {
        self.vectors = n;
        self.write_identity();
    }

    /// Queue pairs per port the device serves (`REG_MAX_QP`): as many as
    /// have a vector each, at least 1.
    pub fn max_qp(&self) -> u32 {
        (self.vectors.saturating_sub(1) / self.nports)
            .saturating_sub(1)
            .clamp(1, MAX_QP)
    }

    /// Sets the DMA window late (RAM file appeared after connect).
    pub fn set_mem(&mut self, mem: Arc<GuestMem>) {
        self.mem = Some(mem);
        self.write_identity();
    }

    /// Marks which ports have a peer.
    pub fn set_link(&mut self, port: u32, up: bool) {
        if let Some(p) = self.ports.get_mut(port as usize) {
            p.link = up;
            self.bar.w32(port_block(port) + PORT_LINK, up as u32);
        }
    }

    /// Full reset: tables cleared, queues off, registers to reset values.
    pub fn reset(&mut self) {
        let links: Vec<bool> = self.ports.iter().map(|p| p.link).collect();
        let resets = self.bar.r64(REG_GSTATS + 8 * GSTAT_RESETS);
        // Identity, DEV_CTRL and DEV_STATUS stay readable throughout; DEV_CTRL
        // is cleared last, which is the driver's "reset done" signal.
        self.bar.clear_except((REG_MAGIC, REG_DEV_STATUS + 4));
        self.cmdq = Ring::new(REG_CMDQ, 64, qid(0, QK_CMDQ));
        self.cmdcq = Ring::new(REG_CMDCQ, 16, qid(0, QK_CMDCQ));
        self.evq = Ring::new(REG_EVQ, Event::SIZE, qid(0, QK_EVQ));
        self.ports = (0..self.nports).map(Port::new).collect();
        self.mrs = MrTable::new();
        self.flows = FlowTable::new();
        self.vecs = Default::default();
        self.fatal = false;
        for (p, up) in links.into_iter().enumerate() {
            self.set_link(p as u32, up);
        }
        for p in 0..self.nports {
            let b = port_block(p);
            self.bar.w32(b + PORT_MTU, DEFAULT_MTU);
            self.bar
                .w32(b + PORT_COALESCE_BYTES, DEFAULT_COALESCE_BYTES);
            self.bar.w32(b + PORT_NUM_QP, 1);
            self.bar.w32(b + PORT_RSS_FIELDS, RSS_FIELDS_DEFAULT);
            for (i, w) in zeronic_hw::rss::RSS_KEY_DEFAULT.chunks(4).enumerate() {
                let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                self.bar.w32(b + PORT_RSS_KEY + 4 * i, w);
            }
        }
        self.bar.w64(REG_GSTATS + 8 * GSTAT_RESETS, resets + 1);
        self.bar.w32(REG_FATAL_CODE, 0);
        self.bar.w32(REG_FATAL_INFO, 0);
        self.write_identity();
        self.bar.w32(REG_DEV_CTRL, 0);
        self.write_identity(); // ENABLED now reflects the cleared DEV_CTRL
    }

    fn write_identity(&self) {
        let b = &self.bar;
        b.w32(REG_MAGIC, ZN_MAGIC);
        b.w32(REG_VERSION, ZN_VERSION);
        b.w32(REG_CAPS, ZN_CAPS);
        b.w32(REG_NUM_PORTS, self.nports);
        b.w32(REG_MAX_MTU, MAX_MTU);
        b.w32(REG_NUM_VECTORS, 1 + 2 * self.nports);
        b.w32(REG_MR_CAPACITY, MR_CAPACITY);
        b.w32(REG_MR_MAX_PAGES, MR_MAX_PAGES);
        b.w32(REG_MR_MAX_EXTENTS, MR_MAX_EXTENTS);
        b.w32(REG_MAX_QP, self.max_qp());
        b.w32(REG_NTUPLE_RULES, NTUPLE_RULES);
        b.w32(REG_RSS_CONTEXTS, RSS_CONTEXTS);
        b.w32(REG_FLOW_CAPACITY, FLOW_CAPACITY);
        b.w32(REG_MS_PER_FLOW, MS_PER_FLOW);
        b.w32(REG_MAX_RING, MAX_RING);
        b.w32(REG_BAR2_SIZE, BAR2_SIZE as u32);
        let mb = self.mem.as_ref().map_or(0, |m| (m.len() >> 20) as u32);
        b.w32(REG_DMA_WINDOW_MB, mb);
        let mut st = DEV_STATUS_READY;
        if self.mem.is_some() {
            st |= DEV_STATUS_DMA_OK;
        }
        if self.fatal {
            st |= DEV_STATUS_FATAL;
        }
        if b.r32(REG_DEV_CTRL) & DEV_CTRL_ENABLE != 0 {
            st |= DEV_STATUS_ENABLED;
        }
        b.w32(REG_DEV_STATUS, st);
    }

    /// True once the device is in the fatal state (until a reset).
    pub fn fatal(&self) -> bool {
        self.fatal
    }

    /// True while the data path is enabled.
    pub fn enabled(&self) -> bool {
        !self.fatal && self.bar.r32(REG_DEV_CTRL) & DEV_CTRL_ENABLE != 0
    }

    /// Adds to a global statistic.
    pub fn gstat(&self, i: usize, v: u64) {
        self.bar.add64(REG_GSTATS + 8 * i, v);
    }

    /// Adds to a port statistic.
    pub fn pstat(&self, port: u32, i: usize, v: u64) {
        self.bar.add64(port_block(port) + PORT_STATS + 8 * i, v);
    }

    /// Adds to a statistic of queue pair `k` of port `port`.
    pub fn qstat(&self, port: u32, k: u32, i: usize, v: u64) {
        self.bar.add64(qp_block(port, k) + QP_STATS + 8 * i, v);
    }

    /// Reads a port statistic.
    pub fn pstat_get(&self, port: u32, i: usize) -> u64 {
        self.bar.r64(port_block(port) + PORT_STATS + 8 * i)
    }

    /// Posts an event (dropped and counted if the event queue cannot take it).
    pub fn event(&mut self, code: u16, port: u16, info: u32, detail: u64) {
        let e = Event {
            code,
            port,
            info,
            detail,
        };
        let ok = match self.mem.clone() {
            Some(m) => self.evq.produce(&self.bar, &m, &e.encode()),
            None => false,
        };
        if ok {
            self.note_entry(VEC_ASYNC, Instant::now());
        } else {
            self.gstat(GSTAT_EVQ_DROP, 1);
        }
    }

    /// Enters the fatal state: data path stops until a reset.
    pub fn set_fatal(&mut self, code: u16, info: u32) {
        if !self.fatal {
            self.fatal = true;
            self.bar.w32(REG_FATAL_CODE, code as u32);
            self.bar.w32(REG_FATAL_INFO, info);
            self.write_identity();
            log::warn!("device fatal: code {code} info {info:#x}");
            self.event(EV_FATAL, 0, code as u32, info as u64);
        }
    }

    /// Breaks the command queue as an impossible producer index does (§4,
    /// §11): the queue enters the error state (`ST_BAD_DESC`,
    /// `EV_QUEUE_ERROR`) if it was served, and the device the fatal state
    /// (`REG_FATAL_INFO` = its queue id, `EV_FATAL`). Only a reset recovers.
    pub fn fail_cmdq(&mut self) {
        let q = self.cmdq.qid;
        if self.cmdq.on {
            self.cmdq.fail(&self.bar, ST_BAD_DESC);
            self.queue_refused(q, ST_BAD_DESC);
        }
        self.set_fatal(ST_BAD_DESC, q);
    }

    /// Puts port `p`'s driver-produced queue of kind `kind` into the error
    /// state after an impossible producer index (§4): `ST_BAD_DESC` and an
    /// `EV_QUEUE_ERROR`; the rest of the device keeps working.
    pub fn fail_port_queue(&mut self, p: u32, kind: u32) {
        self.fail_qp_queue(p, 0, kind);
    }

    /// `fail_port_queue` for queue pair `k` of port `p`.
    pub fn fail_qp_queue(&mut self, p: u32, k: u32, kind: u32) {
        let Some(qp) = self
            .ports
            .get_mut(p as usize)
            .and_then(|port| port.qps.get_mut(k as usize))
        else {
            return;
        };
        let r = match kind {
            QK_TXQ => &mut qp.txq,
            QK_RXQ => &mut qp.rxq,
            _ => return,
        };
        r.fail(&self.bar, ST_BAD_DESC);
        let q = r.qid;
        log::info!("queue {q:#x}: impossible producer index");
        self.event(EV_QUEUE_ERROR, p as u16, q, ST_BAD_DESC as u64);
    }

    fn queue_refused(&mut self, q: u32, code: u16) {
        self.gstat(GSTAT_QUEUE_ERR, 1);
        log::info!("queue {q:#x} refused: status {code}");
        self.event(EV_QUEUE_ERROR, (q >> 8) as u16, q, code as u64);
    }

    /// Records a new entry on a vector's queues for moderation.
    pub fn note_entry(&mut self, v: u32, now: Instant) {
        if let Some(s) = self.vecs.get_mut(v as usize) {
            s.pending += 1;
            s.since.get_or_insert(now);
        }
    }

    /// Raises vectors whose moderation condition is met; returns the next
    /// instant a held vector becomes due.
    pub fn service_irqs(&mut self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for v in 0..MAX_VECTORS {
            let s = self.vecs[v as usize];
            let Some(since) = s.since else { continue };
            let blk = vec_block(v);
            if self.bar.r32(blk + VEC_MASK) != 0 {
                continue; // held until unmasked (then DB_REARM)
            }
            let usecs = self.bar.r32(blk + VEC_ITR_USECS) as u64;
            let thresh = self.bar.r32(blk + VEC_ITR_ENTRIES).max(1);
            let due = since + Duration::from_micros(usecs);
            if s.pending >= thresh || now >= due {
                self.vecs[v as usize] = VecState::default();
                let raised = self.bar.r32(blk + VEC_RAISED).wrapping_add(1);
                self.bar.w32(blk + VEC_RAISED, raised);
                self.gstat(GSTAT_IRQS, 1);
                self.irq.raise(v);
                self.prof
                    .raised(v, s.pending, now.saturating_duration_since(since));
            } else {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        next
    }

    /// Control-path scan: reset request, queue and port enables, commands.
    pub fn scan_control(&mut self, now: Instant) {
        let hb = self.bar.r32(REG_HEARTBEAT).wrapping_add(1);
        self.bar.w32(REG_HEARTBEAT, hb);
        if self.bar.r32(REG_DEV_CTRL) & DEV_CTRL_RESET != 0 {
            self.reset(); // clears DEV_CTRL, RESET bit included
            return;
        }
        self.write_identity();
        let mem = self.mem.clone();
        let m = mem.as_deref();
        for (q, fatal) in [(0usize, true), (1, true), (2, false)] {
            let r = match q {
                0 => &mut self.cmdq,
                1 => &mut self.cmdcq,
                _ => &mut self.evq,
            };
            let id = r.qid;
            if let Sync::Refused(code) = r.sync(&self.bar, m) {
                self.queue_refused(id, code);
                if fatal {
                    self.set_fatal(code, id);
                }
            }
        }
        for p in 0..self.nports as usize {
            let b = port_block(p as u32);
            let en = self.bar.r32(b + PORT_CTRL) & PORT_CTRL_ENABLE != 0;
            if en && !self.ports[p].enabled {
                self.ports[p].mtu = self.bar.r32(b + PORT_MTU).clamp(68, MAX_MTU);
                self.bar.w32(b + PORT_MTU, self.ports[p].mtu);
            }
            self.ports[p].enabled = en;
            self.latch_steering(p as u32);
            let mut refused = Vec::new();
            let port = &mut self.ports[p];
            for (k, qp) in port.qps.iter_mut().enumerate() {
                for r in [
                    &mut qp.txq,
                    &mut qp.txcq,
                    &mut qp.rxq,
                    &mut qp.rxcq,
                    &mut qp.hdrq,
                ] {
                    match r.sync(&self.bar, m) {
                        Sync::Refused(code) => refused.push((r.qid, code)),
                        Sync::Disabled
                            if r.qid & 0xf == QK_HDRQ
                                && port.open.as_ref().is_some_and(|o| o.qp as usize == k) =>
                        {
                            port.open = None
                        }
                        _ => {}
                    }
                }
            }
            for (id, code) in refused {
                self.queue_refused(id, code);
            }
        }
        self.process_commands(now);
    }

    /// Reads port `p`'s steering registers (§14): the active queue pair
    /// count (clamped to 1..=`REG_MAX_QP` and written back), RSS control,
    /// hash fields, key and indirection table (context 0).
    fn latch_steering(&mut self, p: u32) {
        let b = port_block(p);
        let want = self.bar.r32(b + PORT_NUM_QP);
        let nqp = want.clamp(1, self.max_qp());
        if nqp != want {
            self.bar.w32(b + PORT_NUM_QP, nqp);
        }
        let Some(port) = self.ports.get_mut(p as usize) else {
            return;
        };
        let s = &mut port.steer;
        s.nqp = nqp;
        s.ctrl = self.bar.r32(b + PORT_RSS_CTRL);
        s.fields = self.bar.r32(b + PORT_RSS_FIELDS);
        for (i, w) in s.key.chunks_mut(4).enumerate() {
            w.copy_from_slice(&self.bar.r32(b + PORT_RSS_KEY + 4 * i).to_le_bytes());
        }
        // Context 0 is the register table; the others change by command.
        for (i, w) in s.tables[0].chunks_mut(4).enumerate() {
            w.copy_from_slice(&self.bar.r32(b + PORT_RSS_TABLE + 4 * i).to_le_bytes());
        }
    }
}

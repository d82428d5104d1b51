//! A test driver: brings the device up and drives it through BAR2 and rings
//! in in-memory "guest RAM", exactly as the kernel driver will.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use zeronic_hw::cmd::*;
use zeronic_hw::desc::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;
use zeronic_nic::irq::CountIrq;
use zeronic_nic::mem::{Bar2, GuestMem};
use zeronic_nic::model::{lock, Model, Topology};
use zeronic_nic::wire::Impair;

pub mod ip6;
pub mod qpairs;
pub mod tcp6;

pub const RAM: usize = 64 << 20;

/// `len` bytes of a xorshift stream seeded by `seed`: payload whose every
/// position differs from its neighbours', so a misplaced byte shows.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// A driver-side view of one ring.
#[derive(Clone, Copy, Default, Debug)]
pub struct Q {
    pub reg: usize,
    pub base: u64,
    pub size: u32,
    pub entry: usize,
    /// Driver index: producer (driver-produced) or consumer (NIC-produced).
    pub idx: u32,
}

impl Q {
    pub fn slot(&self, i: u32) -> u64 {
        self.base + (i & (self.size - 1)) as u64 * self.entry as u64
    }
}

#[derive(Clone, Copy, Default, Debug)]
pub struct PortQ {
    pub txq: Q,
    pub txcq: Q,
    pub rxq: Q,
    pub rxcq: Q,
    pub hdrq: Q,
    /// RX buffer address of each posted RXQ index (by slot).
    pub rxbuf_base: u64,
    pub rxbuf_size: u32,
}

pub struct Drv {
    pub bar: Arc<Bar2>,
    pub mem: Arc<GuestMem>,
    pub irq: Arc<CountIrq>,
    pub next: u64,
    pub cmdq: Q,
    pub cmdcq: Q,
    pub evq: Q,
    pub ports: Vec<PortQ>,
    cookie: u32,
}

pub struct Tb {
    pub model: Model,
    pub drv: Vec<Drv>,
    pub now: Instant,
    pub mtu: u32,
}

impl Tb {
    pub fn new(topo: Topology, impair: Impair) -> Tb {
        Self::with_ram(topo, impair, RAM)
    }

    pub fn with_ram(topo: Topology, impair: Impair, ram: usize) -> Tb {
        Self::with_opts(topo, impair, ram, 9000)
    }

    pub fn with_opts(topo: Topology, impair: Impair, ram: usize, mtu: u32) -> Tb {
        let mut bars = Vec::new();
        let model = Model::new(
            topo,
            &[],
            |g| {
                let b = Arc::new(Bar2::memfd(&format!("tb{g}")).expect("memfd"));
                bars.push(b.clone());
                Ok(b)
            },
            impair,
            42,
        )
        .expect("model");
        let mut drv = Vec::new();
        for (g, bar) in bars.into_iter().enumerate() {
            let mem = Arc::new(GuestMem::anon(ram).expect("anon"));
            let irq = Arc::new(CountIrq::default());
            lock(&model.guests[g].dev).attach(Some(mem.clone()), irq.clone());
            drv.push(Drv {
                bar,
                mem,
                irq,
                next: 1 << 20,
                cmdq: Q::default(),
                cmdcq: Q::default(),
                evq: Q::default(),
                ports: Vec::new(),
                cookie: 0,
            });
        }
        let mut tb = Tb {
            model,
            drv,
            now: Instant::now(),
            mtu,
        };
        for g in 0..tb.drv.len() {
            tb.bring_up(g);
        }
        tb
    }

    /// Runs every guest's scan and the wire once at the current virtual time.
    pub fn step(&mut self) {
        for g in 0..self.drv.len() {
            self.model.poll(g, self.now);
        }
        self.model.pump(self.now);
    }

    /// Advances virtual time and steps.
    pub fn tick(&mut self, d: Duration) {
        self.now += d;
        self.step();
    }

    pub fn bring_up(&mut self, g: usize) {
        let mtu = self.mtu;
        let d = &mut self.drv[g];
        assert_eq!(d.bar.r32(REG_MAGIC), ZN_MAGIC);
        assert_eq!(d.bar.r32(REG_VERSION) >> 16, ZN_VERSION_MAJOR);
        d.bar.w32(REG_DEV_CTRL, DEV_CTRL_RESET);
        let _ = d;
        self.step();
        let d = &mut self.drv[g];
        assert_eq!(d.bar.r32(REG_DEV_CTRL), 0, "reset completes");
        assert!(d.bar.r32(REG_DEV_STATUS) & DEV_STATUS_READY != 0);
        let nports = d.bar.r32(REG_NUM_PORTS);
        d.cmdq = d.setup_q(REG_CMDQ, 64, 64);
        d.cmdcq = d.setup_q(REG_CMDCQ, 64, CmdCompletion::SIZE);
        d.evq = d.setup_q(REG_EVQ, 64, Event::SIZE);
        d.ports.clear();
        for p in 0..nports {
            let b = port_block(p);
            let mut pq = PortQ {
                txq: d.setup_q(b + PORT_TXQ, 256, TxDesc::SIZE),
                txcq: d.setup_q(b + PORT_TXCQ, 256, TxCompletion::SIZE),
                rxq: d.setup_q(b + PORT_RXQ, 256, RxBufDesc::SIZE),
                rxcq: d.setup_q(b + PORT_RXCQ, 256, RxCompletion::SIZE),
                hdrq: d.setup_q(b + PORT_HDRQ, 1024, HDRQ_ENTRY_SIZE),
                ..Default::default()
            };
            pq.rxbuf_size = 9100;
            pq.rxbuf_base = d.alloc(256 * 9216);
            d.ports.push(pq);
            d.bar.w32(b + PORT_MTU, mtu);
            d.bar.w32(b + PORT_CTRL, PORT_CTRL_ENABLE);
        }
        d.bar.w32(REG_DEV_CTRL, DEV_CTRL_ENABLE);
        self.step();
        let d = &self.drv[g];
        for p in 0..nports {
            for q in [PORT_TXQ, PORT_TXCQ, PORT_RXQ, PORT_RXCQ, PORT_HDRQ] {
                assert_eq!(d.bar.r32(port_block(p) + q + Q_STATUS), Q_STATUS_ENABLED);
            }
        }
        assert!(d.bar.r32(REG_DEV_STATUS) & DEV_STATUS_ENABLED != 0);
    }

    /// Runs one command on guest `g` and returns its completion.
    pub fn cmd(&mut self, g: usize, bytes: [u8; 64]) -> CmdCompletion {
        self.drv[g].push_cmd(bytes);
        self.step();
        self.drv[g].reap_cmd().expect("command completion")
    }

    /// Runs several commands in one scan; their completions in order.
    pub fn cmds(&mut self, g: usize, cmds: &[[u8; 64]]) -> Vec<CmdCompletion> {
        let first = self.drv[g].cookie + 1;
        for c in cmds {
            self.drv[g].push_cmd(*c);
        }
        self.step();
        let mut q = self.drv[g].cmdcq;
        let mut out = Vec::new();
        while let Some(b) = self.drv[g].consume(&mut q) {
            let c = CmdCompletion::decode(b[..16].try_into().unwrap());
            assert_eq!(
                c.cookie,
                first + out.len() as u32,
                "completions in command order"
            );
            out.push(c);
        }
        self.drv[g].cmdcq = q;
        assert_eq!(out.len(), cmds.len(), "one completion per command");
        out
    }

    pub fn reg_mr(&mut self, g: usize, addr: u64, len: u64, access: u32) -> Result<u64, u16> {
        let first_off = addr % 4096;
        let npages = (first_off + len).div_ceil(4096);
        let pages: Vec<u64> = (0..npages).map(|i| addr - first_off + i * 4096).collect();
        self.reg_mr_pages(g, &pages, first_off as u32, len, access)
    }

    pub fn reg_mr_pages(
        &mut self,
        g: usize,
        pages: &[u64],
        first_off: u32,
        len: u64,
        access: u32,
    ) -> Result<u64, u16> {
        let d = &mut self.drv[g];
        let list = d.alloc(pages.len() as u64 * 8);
        let bytes: Vec<u8> = pages.iter().flat_map(|p| p.to_le_bytes()).collect();
        d.mem.write(list, &bytes).unwrap();
        let c = CmdMrReg {
            opcode: CMD_MR_REG,
            access,
            npages: pages.len() as u32,
            first_off,
            length: len,
            page_list: list,
            ..Default::default()
        };
        let r = self.cmd(g, c.encode());
        if r.status == ST_OK {
            Ok(r.result)
        } else {
            Err(r.status)
        }
    }

    pub fn inval_mr(&mut self, g: usize, key: u64) -> u16 {
        let c = CmdMrInval {
            opcode: CMD_MR_INVAL,
            key,
            ..Default::default()
        };
        self.cmd(g, c.encode()).status
    }

    /// Installs a flow on guest g port p receiving from `remote`.
    /// Installs a flow whose receive window is open as far as stream
    /// offsets go (for tests of everything but the window).
    pub fn install(&mut self, g: usize, c: CmdFlow) -> Result<u32, u16> {
        let idx = self.install_closed(g, c)?;
        assert_eq!(self.raise_edge(g, idx, STREAM_OFF_LIMIT - 1).status, ST_OK);
        Ok(idx)
    }

    /// Installs a flow as the hardware does: its window edge at its cursor,
    /// so nothing is placed before an edge is given or learned.
    pub fn install_closed(&mut self, g: usize, c: CmdFlow) -> Result<u32, u16> {
        let c = CmdFlow {
            opcode: CMD_FLOW_INSTALL,
            proto: IPPROTO_TCP,
            ..c
        };
        let r = self.cmd(g, c.encode());
        if r.status == ST_OK {
            Ok(r.result as u32)
        } else {
            Err(r.status)
        }
    }

    /// CMD_FLOW_UPDATE + FLOWU_EDGE.
    pub fn raise_edge(&mut self, g: usize, flow: u32, to: u64) -> CmdCompletion {
        let c = CmdFlow {
            opcode: CMD_FLOW_UPDATE,
            flags: FLOWU_EDGE,
            flow,
            stream_off: to,
            ..Default::default()
        };
        self.cmd(g, c.encode())
    }

    pub fn post(&mut self, g: usize, flow: u32, key: u64, off: u64, len: u32) -> CmdCompletion {
        let c = CmdMsPost {
            opcode: CMD_MS_POST,
            flow,
            dir: MS_DIR_RECV,
            mr_key: key,
            mr_offset: off,
            len,
            ..Default::default()
        };
        self.cmd(g, c.encode())
    }
}

impl Drv {
    pub fn alloc(&mut self, len: u64) -> u64 {
        let a = self.next;
        self.next = (self.next + len + 4095) & !4095;
        assert!(self.next <= self.mem.len(), "test guest RAM exhausted");
        a
    }

    /// Programs and enables the queue at register block `reg` over a new
    /// ring of `size` entries of `entry` bytes.
    pub fn setup_q(&mut self, reg: usize, size: u32, entry: usize) -> Q {
        let base = self.alloc(size as u64 * entry as u64);
        self.bar.w32(reg + Q_CTRL, 0);
        self.bar.w64(reg + Q_BASE, base);
        self.bar.w32(reg + Q_SIZE, size);
        self.bar.w32(reg + Q_PROD, 0);
        self.bar.w32(reg + Q_CONS, 0);
        self.bar.w32(reg + Q_CTRL, Q_CTRL_ENABLE);
        Q {
            reg,
            base,
            size,
            entry,
            idx: 0,
        }
    }

    /// Driver-produced ring: writes one entry and advances PROD.
    pub fn produce(&self, q: &mut Q, bytes: &[u8]) {
        self.mem.write(q.slot(q.idx), bytes).unwrap();
        q.idx = q.idx.wrapping_add(1);
        self.bar.w32(q.reg + Q_PROD, q.idx);
    }

    /// NIC-produced ring: takes the next entry if any, advancing CONS.
    pub fn consume(&self, q: &mut Q) -> Option<Vec<u8>> {
        if self.bar.r32(q.reg + Q_PROD) == q.idx {
            return None;
        }
        let mut b = vec![0u8; q.entry];
        self.mem.read(q.slot(q.idx), &mut b).unwrap();
        q.idx = q.idx.wrapping_add(1);
        self.bar.w32(q.reg + Q_CONS, q.idx);
        Some(b)
    }

    pub fn push_cmd(&mut self, mut bytes: [u8; 64]) {
        self.cookie += 1;
        bytes[4..8].copy_from_slice(&self.cookie.to_le_bytes());
        let mut q = self.cmdq;
        self.produce(&mut q, &bytes);
        self.cmdq = q;
    }

    pub fn reap_cmd(&mut self) -> Option<CmdCompletion> {
        let mut q = self.cmdcq;
        let r = self.consume(&mut q);
        self.cmdcq = q;
        let b = r?;
        let c = CmdCompletion::decode(b[..16].try_into().unwrap());
        assert_eq!(c.cookie, self.cookie, "completions in command order");
        Some(c)
    }

    pub fn events(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        let mut q = self.evq;
        while let Some(b) = self.consume(&mut q) {
            out.push(Event::decode(b[..16].try_into().unwrap()));
        }
        self.evq = q;
        out
    }

    pub fn tx(&mut self, p: usize, d: TxDesc) {
        let mut q = self.ports[p].txq;
        self.produce(&mut q, &d.encode());
        self.ports[p].txq = q;
    }

    /// Queues a plain frame (copied into guest RAM).
    pub fn tx_plain(&mut self, p: usize, frame: &[u8], cookie: u64) {
        let a = self.alloc(frame.len() as u64);
        self.mem.write(a, frame).unwrap();
        self.tx(
            p,
            TxDesc {
                opcode: TX_OP_PLAIN,
                buf_len: frame.len() as u32,
                buf_addr: a,
                cookie,
                ..Default::default()
            },
        );
    }

    /// Queues a merge send: header bytes + (key, off, len), TSO at `mss`.
    #[allow(clippy::too_many_arguments)] // mirrors the descriptor fields
    pub fn tx_merge(
        &mut self,
        p: usize,
        hdr: &[u8],
        hdr_addr: u64,
        key: u64,
        off: u64,
        len: u32,
        mss: u16,
    ) {
        self.mem.write(hdr_addr, hdr).unwrap();
        self.tx(
            p,
            TxDesc {
                opcode: TX_OP_MERGE,
                flags: if mss > 0 { TXF_TSO } else { 0 },
                buf_len: hdr.len() as u32,
                buf_addr: hdr_addr,
                mss,
                mr_key: key,
                mr_offset: off,
                pay_len: len,
                cookie: off,
                ..Default::default()
            },
        );
    }

    pub fn reap_tx(&mut self, p: usize) -> Vec<TxCompletion> {
        let mut q = self.ports[p].txcq;
        let mut out = Vec::new();
        while let Some(b) = self.consume(&mut q) {
            out.push(TxCompletion::decode(b[..16].try_into().unwrap()));
        }
        self.ports[p].txcq = q;
        out
    }

    /// Posts `n` RX buffers.
    pub fn post_rx(&mut self, p: usize, n: u32) {
        let mut q = self.ports[p].rxq;
        for _ in 0..n {
            let slot = q.idx & (q.size - 1);
            let d = RxBufDesc {
                addr: self.ports[p].rxbuf_base + slot as u64 * 9216,
                len: self.ports[p].rxbuf_size,
                rsvd0: 0,
            };
            self.produce(&mut q, &d.encode());
        }
        self.ports[p].rxq = q;
    }

    /// Received normal frames with their bytes.
    pub fn reap_rx(&mut self, p: usize) -> Vec<(RxCompletion, Vec<u8>)> {
        let mut q = self.ports[p].rxcq;
        let mut out = Vec::new();
        while let Some(b) = self.consume(&mut q) {
            let c = RxCompletion::decode(b[..32].try_into().unwrap());
            let mut data = Vec::new();
            if c.status == ST_OK {
                let slot = c.index & (self.ports[p].rxq.size - 1);
                data = vec![0u8; c.len as usize];
                self.mem
                    .read(self.ports[p].rxbuf_base + slot as u64 * 9216, &mut data)
                    .unwrap();
            }
            out.push((c, data));
        }
        self.ports[p].rxcq = q;
        out
    }

    /// Header-queue entries with their header bytes.
    pub fn reap_hdr(&mut self, p: usize) -> Vec<(HdrEntry, Vec<u8>)> {
        let mut q = self.ports[p].hdrq;
        let mut out = Vec::new();
        while let Some(b) = self.consume(&mut q) {
            let m = HdrEntry::decode(b[..64].try_into().unwrap());
            let h = b[HDRQ_HDR_OFFSET..HDRQ_HDR_OFFSET + m.hdr_len as usize].to_vec();
            out.push((m, h));
        }
        self.ports[p].hdrq = q;
        out
    }

    pub fn pstat(&self, p: u32, i: usize) -> u64 {
        self.bar.r64(port_block(p) + PORT_STATS + 8 * i)
    }

    pub fn gstat(&self, i: usize) -> u64 {
        self.bar.r64(REG_GSTATS + 8 * i)
    }
}

/// Builds Ethernet + IPv4 + TCP headers (checksums left for the NIC).
pub fn tcp_hdr(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
) -> Vec<u8> {
    let mut h = vec![0u8; 54];
    h[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    h[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    h[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut h[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&40u16.to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let t = &mut h[34..54];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    h
}

/// A complete TCP frame with correct checksums (for plain TX / raw RX).
pub fn tcp_frame(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    seq: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = tcp_hdr(src, dst, sport, dport, seq, 1, 0x18);
    f.extend_from_slice(payload);
    let tot = (f.len() - 14) as u16;
    f[16..18].copy_from_slice(&tot.to_be_bytes());
    set_csums(&mut f, src, dst);
    f
}

/// A TCP segment without payload with correct checksums, as a host sends
/// it: acknowledgment number `ack`, window field `win`, TCP flags `flags`.
pub fn ack_frame(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    ack: u32,
    win: u16,
    flags: u8,
) -> Vec<u8> {
    let mut f = tcp_hdr(src, dst, sport, dport, 1, ack, flags);
    f[48..50].copy_from_slice(&win.to_be_bytes());
    set_csums(&mut f, src, dst);
    f
}

/// Writes the IPv4 header and TCP checksums of `f` (a `tcp_hdr` frame,
/// its IPv4 total length set).
fn set_csums(f: &mut [u8], src: [u8; 4], dst: [u8; 4]) {
    let mut c = zeronic_nic::csum::Csum::default();
    c.add(&f[14..34]);
    f[24..26].copy_from_slice(&c.finish().to_le_bytes());
    let mut c = zeronic_nic::csum::pseudo_v4(src, dst, (f.len() - 34) as u16);
    c.add(&f[34..]);
    f[50..52].copy_from_slice(&c.finish().to_le_bytes());
}

pub const A_IP: [u8; 4] = [10, 0, 0, 1];
pub const B_IP: [u8; 4] = [10, 0, 0, 2];

/// Flow install parameters for receiver B (local B_IP:5001, remote A_IP:4000).
pub fn flow_b(port: u16, rx_isn: u32) -> CmdFlow {
    CmdFlow {
        port,
        local_ip: u32::from_be_bytes(B_IP),
        remote_ip: u32::from_be_bytes(A_IP),
        local_port: 5001,
        remote_port: 4000,
        rx_isn,
        mode: FLOW_RX_SEGMENTS,
        ..Default::default()
    }
}

/// Receives `frames` on guest 1 port 0 as one batch of the RX unit
/// (coalescing spans a batch; the batch ends with `rx_flush`).
pub fn deliver(tb: &mut Tb, frames: &[Vec<u8>]) {
    let now = tb.now;
    let mut d = lock(&tb.model.guests[1].dev);
    for f in frames {
        d.rx_frame(0, &mut zeronic_nic::frame::Frame::owned(f.clone()), now);
    }
    d.rx_flush(now);
}

//! One ZACC: its register file, command queue, aperture and counters, and
//! the scan that serves them (`docs/accel.md` §3, §4, §5). The command
//! engine is `engine.rs`.
//!
//! Not yet wired into `server.rs`/`model.rs` (no QEMU topology serves a
//! ZACC); tests drive it directly, as the NIC's tests drive `Device`.

use std::sync::Arc;
use std::time::Instant;

use zeronic_hw::accel::*;

use super::aperture::{Aperture, PeerMap};
use super::counters::{Counters, Snapshot};
use super::engine::Engine;
use super::hbm::{AccelMem, Hbm};
use crate::irq::{Irq, NoIrq};
use crate::mem::{Bar2, GuestMem};
use crate::ring::Ring;

// The NIC's `Ring` serves ZACC's queues: the limits it checks must be ours.
const _: () = assert!(ZA_MAX_RING == zeronic_hw::regs::MAX_RING);
const _: () = assert!(ZA_ST_QUEUE_CONFIG == zeronic_hw::status::ST_QUEUE_CONFIG);
const _: () = assert!(ZA_REGS_SIZE as u64 <= ZA_HBM_OFFSET);

/// Commands executed per scan.
const CMD_BUDGET: u32 = 64;
/// Bytes of work (command lengths) per scan; the command that crosses it
/// is the scan's last (a command is never split).
const BYTE_BUDGET: u64 = 256 << 20;

/// One accelerator.
pub struct Accel {
    /// Registers (BAR2 `[0, ZA_REGS_SIZE)`).
    pub bar: Arc<Bar2>,
    /// Device memory.
    pub hbm: Arc<Hbm>,
    /// The BAR2 object (kept for the ivshmem protocol and the host oracle).
    pub shm: AccelMem,
    /// Guest RAM (None while not mapped).
    pub mem: Option<Arc<GuestMem>>,
    irq: Arc<dyn Irq>,
    /// Authoritative counters (host side).
    pub counters: Arc<Counters>,
    /// Where peers reach device memory.
    pub aperture: Arc<Aperture>,
    peers: Arc<PeerMap>,
    cmdq: Ring,
    cmdcq: Ring,
    fatal: bool,
    /// Completions written since the last interrupt.
    irq_pending: bool,
    /// The aperture enable bit as last acted on.
    ap_latched: bool,
    /// Counters at the last reset (BAR2 shows the difference).
    base: Snapshot,
    /// A guest (QEMU) is connected.
    pub attached: bool,
}

impl Accel {
    /// A device over a fresh BAR2 object of `bar2_size` bytes, in the reset
    /// state, alone in its own [`PeerMap`].
    pub fn new(name: &str, bar2_size: u64) -> anyhow::Result<Self> {
        let shm = AccelMem::memfd(name, bar2_size)?;
        let counters = Arc::new(Counters::default());
        let aperture = Arc::new(Aperture::new(shm.hbm.clone(), counters.clone()));
        let peers = Arc::new(PeerMap::new(vec![aperture.clone()]));
        let mut d = Self {
            bar: shm.regs.clone(),
            hbm: shm.hbm.clone(),
            shm,
            mem: None,
            irq: Arc::new(NoIrq),
            counters,
            aperture,
            peers,
            cmdq: Ring::new(ZA_REG_CMDQ, 64, ZA_QID_CMDQ),
            cmdcq: Ring::new(ZA_REG_CMDCQ, ZaCompletion::SIZE, ZA_QID_CMDCQ),
            fatal: false,
            irq_pending: false,
            ap_latched: false,
            base: [0; ZA_STAT_SLOTS],
            attached: false,
        };
        d.reset(); // the power-on reset (counted)
        Ok(d)
    }

    /// Puts the device in the guest's map of apertures (which must hold
    /// `self.aperture`) so enables are checked against its neighbours.
    pub fn set_peers(&mut self, peers: Arc<PeerMap>) {
        self.peers.disable(&self.aperture);
        self.peers = peers;
        self.ap_latched = false;
        self.reset();
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

    /// True once the device is in the fatal state (until a reset).
    pub fn fatal(&self) -> bool {
        self.fatal
    }

    /// Counts `n` doorbells (the server calls it when they ring).
    pub fn doorbells(&self, n: u64) {
        self.counters.add(ZA_STAT_DOORBELLS, n);
    }

    /// Full reset: aperture withdrawn (no peer access in flight when it
    /// returns), queues off, registers to reset values, BAR2 statistics 0
    /// except `ZA_STAT_RESETS`. Device memory is kept.
    pub fn reset(&mut self) {
        self.peers.disable(&self.aperture);
        self.ap_latched = false;
        self.bar.clear_except((ZA_REG_MAGIC, ZA_REG_DEV_STATUS + 4));
        self.cmdq = Ring::new(ZA_REG_CMDQ, 64, ZA_QID_CMDQ);
        self.cmdcq = Ring::new(ZA_REG_CMDCQ, ZaCompletion::SIZE, ZA_QID_CMDCQ);
        self.fatal = false;
        self.irq_pending = false;
        self.counters.add(ZA_STAT_RESETS, 1);
        self.base = self.counters.snapshot();
        self.publish_stats();
        self.write_identity();
        self.bar.w32(ZA_REG_DEV_CTRL, 0);
    }

    fn write_identity(&self) {
        let b = &self.bar;
        b.w32(ZA_REG_MAGIC, ZA_MAGIC);
        b.w32(ZA_REG_VERSION, ZA_VERSION);
        b.w32(ZA_REG_CAPS, ZA_CAPS);
        b.w32(ZA_REG_NUM_VECTORS, ZA_NUM_VECTORS);
        b.w64(ZA_REG_HBM_OFFSET, ZA_HBM_OFFSET);
        b.w64(ZA_REG_HBM_SIZE, self.hbm.len());
        b.w64(ZA_REG_BAR2_SIZE, ZA_HBM_OFFSET + self.hbm.len());
        b.w32(ZA_REG_MAX_RING, ZA_MAX_RING);
        b.w32(ZA_REG_COPY_MAX_PAGES, ZA_COPY_MAX_PAGES);
        let mb = self.mem.as_ref().map_or(0, |m| (m.len() >> 20) as u32);
        b.w32(ZA_REG_DMA_WINDOW_MB, mb);
        let mut st = ZA_STATUS_READY;
        if self.mem.is_some() {
            st |= ZA_STATUS_DMA_OK;
        }
        if self.fatal {
            st |= ZA_STATUS_FATAL;
        }
        b.w32(ZA_REG_DEV_STATUS, st);
    }

    fn publish_stats(&self) {
        for (i, v) in self.counters.since(&self.base).iter().enumerate() {
            self.bar.w64(ZA_REG_STATS + 8 * i, *v);
        }
    }

    /// Follows the aperture enable bit (`docs/accel.md` §5).
    fn sync_aperture(&mut self) {
        let en = self.bar.r32(ZA_REG_APERTURE_CTRL) & ZA_APERTURE_ENABLE != 0;
        if !en {
            if self.ap_latched {
                self.peers.disable(&self.aperture);
                self.ap_latched = false;
                self.bar.w32(ZA_REG_APERTURE_ERROR, 0);
                self.bar.w32(ZA_REG_APERTURE_STATUS, 0);
            }
            return;
        }
        if self.ap_latched {
            return;
        }
        let Some(mem) = self.mem.as_ref() else {
            return; // guest RAM not mapped yet: pending
        };
        self.ap_latched = true;
        let base = self.bar.r64(ZA_REG_APERTURE_BASE);
        match self.peers.enable(&self.aperture, base, mem.len()) {
            Ok(()) => {
                self.bar.w32(ZA_REG_APERTURE_ERROR, 0);
                self.bar.w32(ZA_REG_APERTURE_STATUS, ZA_APERTURE_ACTIVE);
            }
            Err(code) => {
                self.counters.add(ZA_STAT_APERTURE_REFUSED, 1);
                self.bar.w32(ZA_REG_APERTURE_ERROR, u32::from(code));
                self.bar.w32(ZA_REG_APERTURE_STATUS, ZA_APERTURE_REFUSED);
            }
        }
    }

    /// One scan: reset request, identity, aperture, queues, commands,
    /// statistics, interrupt.
    pub fn scan(&mut self, _now: Instant) {
        let hb = self.bar.r32(ZA_REG_HEARTBEAT).wrapping_add(1);
        self.bar.w32(ZA_REG_HEARTBEAT, hb);
        if self.bar.r32(ZA_REG_DEV_CTRL) & ZA_CTRL_RESET != 0 {
            self.reset();
            return;
        }
        self.write_identity();
        self.sync_aperture();
        let mem = self.mem.clone();
        let _ = self.cmdq.sync(&self.bar, mem.as_deref());
        let _ = self.cmdcq.sync(&self.bar, mem.as_deref());
        if let Some(mem) = mem {
            self.process_commands(&mem);
        }
        if self.irq_pending && self.bar.r32(ZA_REG_IRQ_MASK) == 0 {
            self.irq_pending = false;
            self.counters.add(ZA_STAT_IRQS, 1);
            self.irq.raise(ZA_VEC_CMD);
        }
        self.publish_stats();
    }

    fn process_commands(&mut self, mem: &GuestMem) {
        if self.fatal || !self.cmdq.on || !self.cmdcq.on {
            return;
        }
        let Some(n) = self.cmdq.pending(&self.bar) else {
            // An impossible producer index: the command queue breaks.
            self.cmdq.fail(&self.bar, ZA_ST_BAD_DESC);
            self.fatal = true;
            self.bar.w32(ZA_REG_FATAL_CODE, u32::from(ZA_ST_BAD_DESC));
            self.bar.w32(ZA_REG_FATAL_INFO, ZA_QID_CMDQ);
            self.write_identity();
            return;
        };
        let engine = Engine {
            hbm: &self.hbm,
            ram: mem,
            counters: &self.counters,
        };
        let mut bytes = 0u64;
        for _ in 0..n.min(CMD_BUDGET) {
            if self.cmdcq.space(&self.bar) == 0 || bytes >= BYTE_BUDGET {
                break; // back-pressure / work bound: the command stays queued
            }
            let (cookie, op, out) = match mem.read_array::<64>(self.cmdq.slot(self.cmdq.idx)) {
                Ok(b) => {
                    // Work estimate: the command's length field (all
                    // layouts keep it at bytes 16..24).
                    let len = u64::from_le_bytes(b[16..24].try_into().unwrap_or([0; 8]));
                    bytes = bytes.saturating_add(len);
                    let cookie = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
                    let op = u16::from_le_bytes([b[0], b[1]]);
                    (cookie, op, engine.execute(&b))
                }
                Err(_) => {
                    self.counters.add(ZA_STAT_DMA_ERR, 1);
                    (0, 0, ZA_ST_DMA.into())
                }
            };
            self.cmdq.consume(&self.bar);
            let stat = if out.status == ZA_ST_OK {
                ZA_STAT_CMD_OK
            } else {
                ZA_STAT_CMD_ERR
            };
            self.counters.add(stat, 1);
            let c = ZaCompletion {
                cookie,
                opcode: op,
                status: out.status,
                result: out.result,
            };
            if self.cmdcq.produce(&self.bar, mem, &c.encode()) {
                self.irq_pending = true;
            }
        }
    }
}

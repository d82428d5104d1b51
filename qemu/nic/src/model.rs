//! The whole model: guests' devices plus the wire, and the scheduling that
//! moves work between them. Each step takes the sender's device lock only
//! to build a batch of frames (at most `tx::TX_BATCH`), delivers them with
//! no sender lock held (the receiver's lock is taken per frame), and so on
//! until the descriptors taken are done; then it posts the TX completions.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use anyhow::Result;

use crate::device::Device;
use crate::frame::Frame;
use crate::mem::Bar2;
use crate::tx::TxJob;
use crate::wire::{Endpoint, Impair, Wire};

/// Wiring of ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Topology {
    /// One guest with ports 0 and 1 wired to each other.
    TwoPort,
    /// Guest A port 0 wired to guest B port 0.
    TwoGuest,
}

impl Topology {
    /// Guests and ports per guest.
    pub fn shape(self) -> (usize, u32) {
        match self {
            Topology::TwoPort => (1, 2),
            Topology::TwoGuest => (2, 1),
        }
    }

    /// Links of the topology.
    pub fn links(self) -> Vec<(Endpoint, Endpoint)> {
        let ep = |guest, port| Endpoint { guest, port };
        match self {
            Topology::TwoPort => vec![(ep(0, 0), ep(0, 1))],
            Topology::TwoGuest => vec![(ep(0, 0), ep(1, 0))],
        }
    }
}

/// One guest's device slot.
pub struct Guest {
    /// Name (from `--guest NAME=...`).
    pub name: String,
    /// The device (reset state while no guest is attached).
    pub dev: Mutex<Device>,
    /// Held for a whole scan ([`Model::poll`]), so that freezing waits for
    /// a scan in progress. Taken before `dev`.
    scan: Mutex<()>,
}

/// The model.
pub struct Model {
    /// Guests in topology order.
    pub guests: Vec<Arc<Guest>>,
    /// The wire.
    pub wire: Mutex<Wire>,
}

/// Locks a mutex, recovering from poisoning (a panicked thread must not
/// take the whole NIC down; device state stays consistent per operation).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Model {
    /// Builds a model; `bars` supplies each guest's BAR2.
    pub fn new(
        topo: Topology,
        names: &[String],
        mut bars: impl FnMut(usize) -> Result<Arc<Bar2>>,
        impair: Impair,
        seed: u64,
    ) -> Result<Self> {
        let (n, ports) = topo.shape();
        let mut guests = Vec::new();
        for g in 0..n {
            let name = names.get(g).cloned().unwrap_or_else(|| format!("g{g}"));
            let mut dev = Device::new(bars(g)?, ports);
            for p in 0..ports {
                dev.set_link(p, true);
            }
            guests.push(Arc::new(Guest {
                name,
                dev: Mutex::new(dev),
                scan: Mutex::new(()),
            }));
        }
        let wire = Wire::new(&topo.links(), impair, seed);
        Ok(Self {
            guests,
            wire: Mutex::new(wire),
        })
    }

    /// One scan of guest `g`: control path, TX, delivery, wire, interrupts.
    /// Returns the next instant something is due (moderation, wire).
    pub fn poll(&self, g: usize, now: Instant) -> Option<Instant> {
        let guest = self.guests.get(g)?;
        let _scan = lock(&guest.scan);
        let mut jobs: Vec<TxJob> = Vec::new();
        {
            let mut d = lock(&guest.dev);
            if d.frozen {
                return None; // a dead NIC: not even the heartbeat moves
            }
            d.scan_control(now);
            d.scan_tx(&mut jobs);
        }
        let mut touched = vec![false; self.guests.len()];
        touched[g] = true;
        let mut out = Vec::new();
        let mut batch = Vec::new();
        for j in &mut jobs {
            let from = Endpoint {
                guest: g,
                port: j.port,
            };
            while !j.done() {
                lock(&guest.dev).tx_build(j, &mut batch);
                for f in batch.drain(..) {
                    lock(&self.wire).send(from, f, now, &mut out);
                    self.deliver(&mut out, &mut touched, now);
                }
            }
        }
        lock(&guest.dev).complete_tx(&jobs, now);
        self.pump_into(now, &mut touched);
        self.flush(&touched, now)
    }

    fn deliver(&self, out: &mut Vec<(Endpoint, Frame)>, touched: &mut [bool], now: Instant) {
        for (ep, mut f) in out.drain(..) {
            if let Some(guest) = self.guests.get(ep.guest) {
                lock(&guest.dev).rx_frame(ep.port, &mut f, now);
                touched[ep.guest] = true;
            }
        }
    }

    fn pump_into(&self, now: Instant, touched: &mut [bool]) {
        let mut out = Vec::new();
        lock(&self.wire).pump(now, &mut out);
        self.deliver(&mut out, touched, now);
    }

    fn flush(&self, touched: &[bool], now: Instant) -> Option<Instant> {
        let mut next = lock(&self.wire).next_due();
        for (g, &t) in touched.iter().enumerate() {
            if t {
                if let Some(due) = lock(&self.guests[g].dev).rx_flush(now) {
                    next = Some(next.map_or(due, |n: Instant| n.min(due)));
                }
            }
        }
        next
    }

    /// Delivers wire frames that are due and services all interrupts.
    pub fn pump(&self, now: Instant) -> Option<Instant> {
        let mut touched = vec![true; self.guests.len()];
        self.pump_into(now, &mut touched);
        touched.iter_mut().for_each(|t| *t = true);
        self.flush(&touched, now)
    }

    /// Index of the guest called `name`.
    pub fn guest_index(&self, name: &str) -> Option<usize> {
        self.guests.iter().position(|g| g.name == name)
    }

    /// Sets one of guest `g`'s fault flags (`flag` picks it) to `on`,
    /// logging a change as `what` then `words[on]`. A scan in progress
    /// completes first.
    fn set_fault(
        &self,
        g: usize,
        on: bool,
        flag: fn(&mut Device) -> &mut bool,
        what: &str,
        words: [&str; 2],
    ) {
        let Some(guest) = self.guests.get(g) else {
            return;
        };
        let _scan = lock(&guest.scan);
        let mut d = lock(&guest.dev);
        let f = flag(&mut d);
        if *f != on {
            log::warn!(
                "guest {}: {what} {} (fault injection)",
                guest.name,
                words[on as usize]
            );
        }
        *f = on;
    }

    /// Stops (`fault freeze`) or resumes (`fault thaw`) serving guest `g`'s
    /// device. A scan in progress completes first, so once this returns a
    /// frozen device does no DMA and raises no interrupt. On thaw the next
    /// scan acts on whatever the registers say (a pending reset included).
    pub fn set_frozen(&self, g: usize, frozen: bool) {
        self.set_fault(g, frozen, |d| &mut d.frozen, "device", ["thawed", "frozen"]);
    }

    /// Holds (`fault hold`) or lets go (`fault thaw`) guest `g`'s
    /// command execution before its next `CMD_FLOW_UPDATE`.
    pub fn set_hold_updates(&self, g: usize, hold: bool) {
        let words = ["let go", "held"];
        self.set_fault(g, hold, |d| &mut d.hold_updates, "cursor moves", words);
    }

    /// Makes guest `g`'s NIC refuse (`fault refuse-posts`) or take again
    /// (`fault thaw`) segment posts.
    pub fn set_refuse_posts(&self, g: usize, refuse: bool) {
        let words = ["taken again", "refused"];
        self.set_fault(g, refuse, |d| &mut d.refuse_posts, "segment posts", words);
    }

    /// One line on guest `g`'s fault state: `guest NAME: frozen=0|1
    /// fatal=0|1 fatal_code=N fatal_info=0xN heartbeat=N hold=0|1
    /// refuse_posts=0|1`.
    pub fn fault_status(&self, g: usize) -> String {
        use zeronic_hw::regs::*;
        let guest = &self.guests[g];
        let d = lock(&guest.dev);
        format!(
            "guest {}: frozen={} fatal={} fatal_code={} fatal_info={:#x} heartbeat={} hold={} refuse_posts={}",
            guest.name,
            d.frozen as u8,
            d.fatal() as u8,
            d.bar.r32(REG_FATAL_CODE),
            d.bar.r32(REG_FATAL_INFO),
            d.bar.r32(REG_HEARTBEAT),
            d.hold_updates as u8,
            d.refuse_posts as u8
        )
    }

    /// Human-readable per-port statistics (device and wire).
    /// One `prof NAME ...` line per guest in `scope` (`prof.rs`); with
    /// `reset`, clears those guests' profiles after reading them.
    pub fn prof(&self, allows: impl Fn(usize) -> bool, reset: bool) -> String {
        let mut s = String::new();
        for (i, g) in self.guests.iter().enumerate() {
            if !allows(i) {
                continue;
            }
            let mut d = lock(&g.dev);
            s.push_str(&d.prof.line(&g.name));
            s.push('\n');
            if reset {
                d.prof = Default::default();
            }
        }
        s
    }

    pub fn stats(&self) -> String {
        use std::fmt::Write;
        use zeronic_hw::regs::*;
        let names = [
            ("tx_frames", PSTAT_TX_FRAMES),
            ("tx_bytes", PSTAT_TX_BYTES),
            ("tx_errors", PSTAT_TX_ERRORS),
            ("tx_merge_bytes", PSTAT_TX_MERGE_BYTES),
            ("rx_frames", PSTAT_RX_FRAMES),
            ("rx_bytes", PSTAT_RX_BYTES),
            ("rx_normal", PSTAT_RX_NORMAL),
            ("rx_split", PSTAT_RX_SPLIT),
            ("rx_placed_bytes", PSTAT_RX_PLACED_BYTES),
            ("rx_dup_bytes", PSTAT_RX_DUP_BYTES),
            ("rx_fallback", PSTAT_RX_FALLBACK),
            ("rx_csum_err", PSTAT_RX_CSUM_ERR),
            ("rx_no_buf", PSTAT_RX_NO_BUF),
            ("rx_hdrq_full", PSTAT_RX_HDRQ_FULL),
            ("rx_malformed", PSTAT_RX_MALFORMED),
            ("hdrq_entries", PSTAT_HDRQ_ENTRIES),
            ("rx_coalesced", PSTAT_RX_COALESCED),
        ];
        let mut s = String::new();
        for g in &self.guests {
            let d = lock(&g.dev);
            for p in 0..d.nports {
                let _ = write!(s, "port {}:{}", g.name, p);
                for (n, i) in names {
                    let _ = write!(s, " {n}={}", d.pstat_get(p, i));
                }
                s.push('\n');
            }
        }
        for (from, to, cfg, c) in lock(&self.wire).counters() {
            let name = |e: Endpoint| {
                self.guests
                    .get(e.guest)
                    .map_or("?", |g| g.name.as_str())
                    .to_string()
            };
            let _ = writeln!(
                s,
                "wire {}:{}->{}:{} loss={} reorder={} dup={} delay={}us rate={} sent={} bytes={} delivered={} lost={} duplicated={} reordered={} delayed={} queue_drops={}",
                name(from), from.port, name(to), to.port,
                cfg.loss, cfg.reorder, cfg.dup, cfg.delay.as_micros(), cfg.rate,
                c.sent, c.bytes, c.delivered, c.lost, c.duplicated, c.reordered, c.delayed, c.queue_drops
            );
        }
        s
    }
}

//! The emulated wire between ports: per-direction impairments (loss,
//! reordering, duplication, delay, rate limit) and counters. Frames that
//! pass unimpaired are handed back for synchronous delivery (payload still
//! in the sender's RAM); frames held back are copied first. What a
//! direction holds back is bounded in bytes and in frames
//! ([`QUEUE_LIMIT`], [`QUEUE_FRAMES`]); beyond that frames are dropped
//! (`queue_drops`), as a switch with a full buffer does.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::frame::Frame;

/// A port of a guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// Guest index.
    pub guest: usize,
    /// Port of that guest.
    pub port: u32,
}

/// Impairment settings of a direction.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Impair {
    /// Loss probability, percent.
    pub loss: f64,
    /// Reorder probability, percent (the frame is held back `reorder_gap`).
    pub reorder: f64,
    /// Duplication probability, percent.
    pub dup: f64,
    /// One-way delay.
    pub delay: Duration,
    /// Rate limit in bit/s (0 = unlimited).
    pub rate: u64,
}

fn parse_duration(v: &str) -> Result<Duration> {
    let (num, unit) = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or((v, "us"), |i| v.split_at(i));
    let n: f64 = num.parse().with_context(|| format!("bad duration {v:?}"))?;
    let us = match unit {
        "ns" => n / 1000.0,
        "us" => n,
        "ms" => n * 1000.0,
        "s" => n * 1e6,
        _ => bail!("bad duration unit in {v:?} (ns, us, ms, s)"),
    };
    let d = Duration::from_nanos((us * 1000.0) as u64);
    if d > MAX_DELAY {
        bail!("delay {v:?} above {}s", MAX_DELAY.as_secs());
    }
    Ok(d)
}

fn parse_rate(v: &str) -> Result<u64> {
    let lower = v.to_ascii_lowercase();
    let (num, unit) = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or((lower.as_str(), "bit"), |i| lower.split_at(i));
    let n: f64 = num.parse().with_context(|| format!("bad rate {v:?}"))?;
    let mul = match unit {
        "bit" | "bps" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        _ => bail!("bad rate unit in {v:?} (bit, kbit, mbit, gbit)"),
    };
    Ok((n * mul) as u64)
}

impl Impair {
    /// Applies `key=value` settings separated by commas or spaces:
    /// `loss=1 reorder=2 dup=1 delay=100us rate=10gbit` (`rate=0`: unlimited).
    pub fn apply(&mut self, spec: &str) -> Result<()> {
        for kv in spec.split([',', ' ']).filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("expected key=value, got {kv:?}"))?;
            let pct = |v: &str| -> Result<f64> {
                let p: f64 = v
                    .trim_end_matches('%')
                    .parse()
                    .with_context(|| format!("bad percentage {v:?}"))?;
                if !(0.0..=100.0).contains(&p) {
                    bail!("percentage out of range: {v}");
                }
                Ok(p)
            };
            match k {
                "loss" => self.loss = pct(v)?,
                "reorder" => self.reorder = pct(v)?,
                "dup" => self.dup = pct(v)?,
                "delay" => self.delay = parse_duration(v)?,
                "rate" => self.rate = parse_rate(v)?,
                _ => bail!("unknown impairment {k:?} (loss, reorder, dup, delay, rate)"),
            }
        }
        Ok(())
    }

    fn passthrough(&self) -> bool {
        *self == Impair::default()
    }
}

/// Per-direction counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireCounters {
    /// Frames offered by the sending port.
    pub sent: u64,
    /// Bytes offered.
    pub bytes: u64,
    /// Frames handed to the receiving port (duplicates included).
    pub delivered: u64,
    /// Frames dropped by `loss`.
    pub lost: u64,
    /// Extra copies made by `dup`.
    pub duplicated: u64,
    /// Frames held back by `reorder`.
    pub reordered: u64,
    /// Frames queued for delay / rate.
    pub delayed: u64,
    /// Frames dropped because the direction's queue was full.
    pub queue_drops: u64,
}

struct Dir {
    from: Endpoint,
    to: Endpoint,
    cfg: Impair,
    rng: fastrand::Rng,
    next_free: Option<Instant>,
    queued: usize,
    queued_frames: usize,
    cnt: WireCounters,
}

struct Held {
    at: Instant,
    seq: u64,
    dir: usize,
    frame: Frame,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> Ordering {
        // Min-heap on (time, sequence).
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// Bytes a direction may hold back before dropping (a switch buffer).
pub const QUEUE_LIMIT: usize = 32 << 20;
/// Frames a direction may hold back (bounds the per-frame overhead of
/// many tiny frames).
pub const QUEUE_FRAMES: usize = 65_536;
/// Largest one-way delay (`delay=`).
pub const MAX_DELAY: Duration = Duration::from_secs(10);
/// Extra hold time of a reordered frame beyond the delay.
const REORDER_GAP: Duration = Duration::from_micros(200);

/// All links of a model.
pub struct Wire {
    dirs: Vec<Dir>,
    held: BinaryHeap<Held>,
    seq: u64,
}

impl Wire {
    /// A wire with the given links (each link is two directions).
    pub fn new(links: &[(Endpoint, Endpoint)], cfg: Impair, seed: u64) -> Self {
        let mut dirs = Vec::new();
        for (i, &(a, b)) in links.iter().enumerate() {
            for (j, (from, to)) in [(a, b), (b, a)].into_iter().enumerate() {
                dirs.push(Dir {
                    from,
                    to,
                    cfg,
                    rng: fastrand::Rng::with_seed(seed ^ (((i * 2 + j) as u64 + 1) * 0x9e37_79b9)),
                    next_free: None,
                    queued: 0,
                    queued_frames: 0,
                    cnt: WireCounters::default(),
                });
            }
        }
        Self {
            dirs,
            held: BinaryHeap::new(),
            seq: 0,
        }
    }

    /// The peer of an endpoint.
    pub fn peer(&self, ep: Endpoint) -> Option<Endpoint> {
        self.dirs.iter().find(|d| d.from == ep).map(|d| d.to)
    }

    /// Changes impairments of the directions whose sending endpoint
    /// `pick` selects; returns how many it changed.
    pub fn set(
        &mut self,
        pick: impl Fn(Endpoint) -> bool,
        f: impl Fn(&mut Impair) -> Result<()>,
    ) -> Result<usize> {
        let mut n = 0;
        for d in &mut self.dirs {
            if pick(d.from) {
                f(&mut d.cfg)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Bytes and frames held back per direction (each within
    /// [`QUEUE_LIMIT`] and [`QUEUE_FRAMES`]).
    pub fn queued(&self) -> Vec<(usize, usize)> {
        self.dirs
            .iter()
            .map(|d| (d.queued, d.queued_frames))
            .collect()
    }

    /// Counters and settings per direction.
    pub fn counters(&self) -> Vec<(Endpoint, Endpoint, Impair, WireCounters)> {
        self.dirs
            .iter()
            .map(|d| (d.from, d.to, d.cfg, d.cnt))
            .collect()
    }

    /// Offers a frame leaving `from`; frames to deliver now go to `out`.
    pub fn send(
        &mut self,
        from: Endpoint,
        frame: Frame,
        now: Instant,
        out: &mut Vec<(Endpoint, Frame)>,
    ) {
        let Some(di) = self.dirs.iter().position(|d| d.from == from) else {
            return; // no cable
        };
        let d = &mut self.dirs[di];
        let len = frame.len();
        d.cnt.sent += 1;
        d.cnt.bytes += len as u64;
        if d.cfg.passthrough() {
            d.cnt.delivered += 1;
            out.push((d.to, frame));
            return;
        }
        if d.rng.f64() * 100.0 < d.cfg.loss {
            d.cnt.lost += 1;
            return;
        }
        let copies = if d.rng.f64() * 100.0 < d.cfg.dup {
            d.cnt.duplicated += 1;
            2
        } else {
            1
        };
        let mut frame = Some(frame);
        for c in 0..copies {
            let d = &mut self.dirs[di];
            let f = if c + 1 == copies {
                frame.take()
            } else {
                frame.as_ref().map(Frame::share)
            };
            let Some(mut f) = f else { return };
            let mut at = now;
            let mut link_free = None;
            let bits = (len as u64 * 8).saturating_mul(1_000_000_000);
            if let Some(ns) = bits.checked_div(d.cfg.rate) {
                let start = d.next_free.map_or(now, |t| t.max(now));
                at = start.checked_add(Duration::from_nanos(ns)).unwrap_or(start);
                link_free = Some(at);
            }
            let mut hold = d.cfg.delay;
            if d.rng.f64() * 100.0 < d.cfg.reorder {
                d.cnt.reordered += 1;
                hold += REORDER_GAP.max(d.cfg.delay);
            }
            at = at.checked_add(hold).unwrap_or(at);
            if at <= now {
                d.next_free = link_free.or(d.next_free);
                d.cnt.delivered += 1;
                out.push((d.to, f));
                continue;
            }
            // A full buffer drops the frame before it takes link time.
            let full = d.queued + len > QUEUE_LIMIT || d.queued_frames >= QUEUE_FRAMES;
            if full || f.make_owned().is_err() {
                d.cnt.queue_drops += 1;
                continue;
            }
            d.next_free = link_free.or(d.next_free);
            d.queued += len;
            d.queued_frames += 1;
            d.cnt.delayed += 1;
            self.seq += 1;
            self.held.push(Held {
                at,
                seq: self.seq,
                dir: di,
                frame: f,
            });
        }
    }

    /// Frames whose time has come.
    pub fn pump(&mut self, now: Instant, out: &mut Vec<(Endpoint, Frame)>) {
        while self.held.peek().is_some_and(|h| h.at <= now) {
            let Some(h) = self.held.pop() else { break };
            let d = &mut self.dirs[h.dir];
            d.queued = d.queued.saturating_sub(h.frame.len());
            d.queued_frames = d.queued_frames.saturating_sub(1);
            d.cnt.delivered += 1;
            out.push((d.to, h.frame));
        }
    }

    /// When the next held frame is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.held.peek().map(|h| h.at)
    }

    /// Frames held back.
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

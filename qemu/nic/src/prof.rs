//! Where the model's time goes: a per-guest profile of the NIC path as the
//! model sees it (doorbell wake-ups, the work of one scan, the delay from a
//! doorbell wake-up to the interrupt it leads to, entries per interrupt).
//!
//! It is part of the emulation, not of the hardware interface: nothing of it
//! is in BAR2. The control sockets print it (`prof`) and clear it
//! (`prof reset`); `docs/performance.md` ("Where the time goes") says how
//! its figures line up with the driver's (`ethtool -S`, `prof_*` lines).
//! Recording costs one clock read per wake-up and per interrupt, next to the
//! poll and eventfd system calls each of them already makes.

use std::fmt::Write;
use std::time::{Duration, Instant};

/// Buckets of a [`Hist`]: bucket `i` counts durations below `2^i` us (the
/// last one everything longer).
pub const BUCKETS: usize = 24;

/// A log2 histogram of durations in microseconds, with their sum.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Hist {
    /// Counts per bucket (see [`BUCKETS`]).
    pub buckets: [u64; BUCKETS],
    /// Number of durations recorded.
    pub count: u64,
    /// Their sum in nanoseconds (saturating).
    pub sum_ns: u64,
}

impl Hist {
    /// Records one duration.
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let us = ns / 1000;
        // Bucket i holds [2^(i-1), 2^i) us; bucket 0 below 1 us.
        let i = (u64::BITS - us.leading_zeros()) as usize;
        self.buckets[i.min(BUCKETS - 1)] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    /// Mean in microseconds (0 when empty).
    pub fn mean_us(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count as f64 / 1000.0
        }
    }

    /// Upper bound in microseconds of the bucket holding quantile `q` (0..=1):
    /// the q-th duration is below it. 0 when empty.
    pub fn quantile_us(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return 1u64 << i;
            }
        }
        1u64 << (BUCKETS - 1)
    }

    /// `name_n=.. name_mean_us=.. name_p50_us=.. name_p99_us=..`.
    fn write(&self, s: &mut String, name: &str) {
        let _ = write!(
            s,
            " {name}_n={} {name}_mean_us={:.1} {name}_p50_us={} {name}_p99_us={}",
            self.count,
            self.mean_us(),
            self.quantile_us(0.5),
            self.quantile_us(0.99)
        );
    }
}

/// The profile of one guest's device.
#[derive(Clone, Default, Debug)]
pub struct Profile {
    /// Wake-ups of the guest's worker by a doorbell.
    pub wake_doorbell: u64,
    /// Wake-ups by the periodic scan (no doorbell within 1 ms).
    pub wake_timer: u64,
    /// Doorbell eventfds found rung per doorbell wake-up (the guest's
    /// doorbell writes coalesce in the eventfd counters while the model
    /// works: a ratio above 1 is batching the model gets for free).
    pub doorbells_per_wake: u64,
    /// Duration of the scan a doorbell woke (TX descriptors taken, frames
    /// built, sent and delivered, completions and interrupts written).
    pub scan: Hist,
    /// From a doorbell wake-up to the first interrupt raised after it.
    pub wake_to_irq: Hist,
    /// From a wake-up by a TX doorbell (`DB_TX`) to the first TX interrupt
    /// after it: what the driver's TX doorbell -> TX interrupt delay
    /// contains of the model (its work, and the time the vector was held).
    pub tx_wake_to_irq: Hist,
    /// From the first entry an interrupt announces to the interrupt: the
    /// time the vector held it (masked while NAPI polls, or moderation).
    pub entry_to_irq: Hist,
    /// Interrupts raised on RX vectors (RX completions, header entries).
    pub irqs_rx: u64,
    /// Interrupts raised on TX vectors (TX completions).
    pub irqs_tx: u64,
    /// Interrupts raised on `VEC_ASYNC`.
    pub irqs_async: u64,
    /// Entries (completions, header entries, events) those interrupts
    /// announced, summed: entries per interrupt = this / interrupts.
    pub irq_entries: u64,
    /// TX descriptors taken, and the scans that took at least one.
    pub tx_descs: u64,
    /// Scans that took at least one TX descriptor.
    pub tx_scans: u64,
    /// The doorbell wake-up no interrupt followed yet.
    pub(crate) wake_at: Option<Instant>,
    /// The TX doorbell wake-up no TX interrupt followed yet.
    pub(crate) tx_wake_at: Option<Instant>,
}

impl Profile {
    /// Notes a doorbell wake-up at `at`, `rung` eventfds found set, among
    /// them `DB_TX`'s if `tx`.
    pub fn woke(&mut self, at: Instant, rung: u64, tx: bool) {
        self.wake_doorbell += 1;
        self.doorbells_per_wake += rung;
        self.wake_at.get_or_insert(at);
        if tx {
            self.tx_wake_at.get_or_insert(at);
        }
    }

    /// Notes an interrupt on vector `v` announcing `entries` entries, the
    /// first of which it held for `held`.
    pub fn raised(&mut self, v: u32, entries: u32, held: Duration) {
        let tx = v != 0 && v % 2 == 0;
        match v {
            0 => self.irqs_async += 1,
            _ if tx => self.irqs_tx += 1,
            _ => self.irqs_rx += 1,
        }
        self.irq_entries += u64::from(entries);
        self.entry_to_irq.record(held);
        if let Some(w) = self.wake_at.take() {
            self.wake_to_irq.record(w.elapsed());
        }
        if tx {
            if let Some(w) = self.tx_wake_at.take() {
                self.tx_wake_to_irq.record(w.elapsed());
            }
        }
    }

    /// One line: `prof NAME key=value...`.
    pub fn line(&self, name: &str) -> String {
        let mut s = format!(
            "prof {name} wake_doorbell={} wake_timer={} doorbells_per_wake={:.2} irqs_rx={} irqs_tx={} irqs_async={} entries_per_irq={:.2} tx_descs_per_scan={:.2}",
            self.wake_doorbell,
            self.wake_timer,
            ratio(self.doorbells_per_wake, self.wake_doorbell),
            self.irqs_rx,
            self.irqs_tx,
            self.irqs_async,
            ratio(self.irq_entries, self.irqs_rx + self.irqs_tx + self.irqs_async),
            ratio(self.tx_descs, self.tx_scans),
        );
        self.scan.write(&mut s, "scan");
        self.wake_to_irq.write(&mut s, "wake_to_irq");
        self.tx_wake_to_irq.write(&mut s, "tx_wake_to_irq");
        self.entry_to_irq.write(&mut s, "entry_to_irq");
        s
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_log2_microseconds() {
        let mut h = Hist::default();
        h.record(Duration::from_nanos(500)); // < 1 us: bucket 0
        h.record(Duration::from_micros(1)); // [1, 2): bucket 1
        h.record(Duration::from_micros(3)); // [2, 4): bucket 2
        h.record(Duration::from_secs(100_000)); // last bucket
        assert_eq!(h.buckets[0], 1);
        assert_eq!(h.buckets[1], 1);
        assert_eq!(h.buckets[2], 1);
        assert_eq!(h.buckets[BUCKETS - 1], 1);
        assert_eq!(h.count, 4);
        assert_eq!(h.quantile_us(0.25), 1);
        assert_eq!(h.quantile_us(0.5), 2);
        assert_eq!(h.quantile_us(0.75), 4);
        assert_eq!(h.quantile_us(1.0), 1 << (BUCKETS - 1));
        assert_eq!(Hist::default().quantile_us(0.5), 0);
    }

    #[test]
    fn irq_closes_the_wake_up() {
        let mut p = Profile::default();
        let t = Instant::now();
        p.woke(t, 2, false);
        p.woke(t, 1, true); // the first open wake-up is kept
        p.raised(1, 5, Duration::from_micros(3));
        // No open wake-up, but an open TX wake-up: a TX sample.
        p.raised(2, 1, Duration::ZERO);
        assert_eq!(p.wake_to_irq.count, 1);
        assert_eq!(p.tx_wake_to_irq.count, 1);
        assert_eq!(p.entry_to_irq.count, 2);
        assert_eq!(p.entry_to_irq.buckets[2], 1);
        assert_eq!((p.irqs_rx, p.irqs_tx), (1, 1));
        let l = p.line("a");
        assert!(l.starts_with("prof a wake_doorbell=2 "), "{l}");
        assert!(l.contains(" doorbells_per_wake=1.50 "), "{l}");
        assert!(l.contains(" entries_per_irq=3.00 "), "{l}");
        assert!(l.contains(" wake_to_irq_n=1 "), "{l}");
    }
}

//! ZACC's byte and event counters, kept by the model (`docs/accel.md` §8).
//!
//! These are the authoritative ones: cumulative since the model started,
//! never reset by the guest, read by the host side (the "payload never
//! touched host RAM" check of issue 36). The guest sees them in BAR2 at
//! `ZA_REG_STATS` as differences since its last reset, published at every
//! scan; the BAR copy is plain shared memory the guest could overwrite, so
//! nothing on the host trusts it.

use std::sync::atomic::{AtomicU64, Ordering};

use zeronic_hw::accel::{ZA_STAT_RESETS, ZA_STAT_SLOTS};

/// One device's counters, indexed by `ZA_STAT_*`.
#[derive(Default)]
pub struct Counters([AtomicU64; ZA_STAT_SLOTS]);

/// A copy of every counter at one instant.
pub type Snapshot = [u64; ZA_STAT_SLOTS];

impl Counters {
    /// Adds `v` to counter `i` (ignored for an index out of range).
    pub fn add(&self, i: usize, v: u64) {
        if let Some(c) = self.0.get(i) {
            c.fetch_add(v, Ordering::Relaxed);
        }
    }

    /// Counter `i` (0 out of range).
    pub fn get(&self, i: usize) -> u64 {
        self.0.get(i).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Every counter.
    pub fn snapshot(&self) -> Snapshot {
        core::array::from_fn(|i| self.get(i))
    }

    /// What BAR2 shows: the counters since the snapshot `base` taken at the
    /// last reset, except `ZA_STAT_RESETS`, which counts all resets.
    pub fn since(&self, base: &Snapshot) -> Snapshot {
        core::array::from_fn(|i| {
            let v = self.get(i);
            if i == ZA_STAT_RESETS {
                v
            } else {
                v.wrapping_sub(base[i])
            }
        })
    }
}

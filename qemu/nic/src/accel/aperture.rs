//! Apertures: where a ZACC's device memory appears in its guest's bus
//! address space, as its driver announced through `ZA_REG_APERTURE_BASE`
//! (`docs/accel.md` §5), and the per-guest [`PeerMap`] of them that the
//! NIC's DMA resolver (`dma_space.rs`) consults.
//!
//! Locking: `PeerMap::config` serialises enables (the overlap check and the
//! publication are one step); each aperture's `base` is a read-write lock
//! that a peer access holds for reading for as long as it touches device
//! memory. Withdrawal takes it for writing, so once [`PeerMap::disable`]
//! returns no peer access is in flight and none can start: the register
//! status the driver polls is cleared only after that. Order: `config`, then
//! `base`; the data path takes only `base`.

use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard};

use zeronic_hw::accel::*;

use super::counters::Counters;
use super::hbm::Hbm;

/// One ZACC's aperture.
pub struct Aperture {
    hbm: Arc<Hbm>,
    counters: Arc<Counters>,
    /// Bus address of device offset 0 while published.
    base: RwLock<Option<u64>>,
}

/// What an aperture says about a peer access `[addr, addr + len)`.
pub enum Hit<'a> {
    /// Wholly inside: device offset of `addr`, with the aperture held open.
    Inside(u64, RwLockReadGuard<'a, Option<u64>>),
    /// Overlaps the aperture without lying inside it (refused, counted).
    Partial,
    /// Does not touch it.
    Miss,
}

impl Aperture {
    /// An unpublished aperture over `hbm`, counting into `counters`.
    pub fn new(hbm: Arc<Hbm>, counters: Arc<Counters>) -> Self {
        Self {
            hbm,
            counters,
            base: RwLock::new(None),
        }
    }

    /// The published base, if any.
    pub fn base(&self) -> Option<u64> {
        *self.read()
    }

    /// The device memory behind it.
    pub fn hbm(&self) -> &Hbm {
        &self.hbm
    }

    /// Its device's counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    fn read(&self) -> RwLockReadGuard<'_, Option<u64>> {
        // The lock guards a plain Option: a panic elsewhere cannot leave it
        // half-written, so a poisoned lock is still consistent.
        self.base.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, v: Option<u64>) {
        *self.base.write().unwrap_or_else(PoisonError::into_inner) = v;
    }

    /// Classifies a peer access; `Partial` is counted as `ZA_STAT_PEER_ERR`.
    pub fn hit(&self, addr: u64, len: u64) -> Hit<'_> {
        let g = self.read();
        let Some(base) = *g else { return Hit::Miss };
        let top = base + self.hbm.len(); // checked when published
        let end = addr.saturating_add(len);
        if addr >= base && addr.checked_add(len).is_some_and(|e| e <= top) {
            return Hit::Inside(addr - base, g);
        }
        if addr < top && end > base {
            self.counters.add(ZA_STAT_PEER_ERR, 1);
            return Hit::Partial;
        }
        Hit::Miss
    }
}

/// The apertures of one guest's accelerators.
pub struct PeerMap {
    apertures: Vec<Arc<Aperture>>,
    config: Mutex<()>,
}

impl PeerMap {
    /// A map of `apertures` (fixed for the life of the guest).
    pub fn new(apertures: Vec<Arc<Aperture>>) -> Self {
        Self {
            apertures,
            config: Mutex::new(()),
        }
    }

    /// The apertures, in order (a peer's index in `Target::Peer`).
    pub fn apertures(&self) -> &[Arc<Aperture>] {
        &self.apertures
    }

    /// Publishes `ap` at `base` for a guest with `ram_len` bytes of RAM at
    /// bus addresses `[0, ram_len)`. Refusals (`ZA_ST_*`): `ZA_ST_BAD_DESC`
    /// for a base not `ZA_APERTURE_ALIGN`-aligned or an end above
    /// `ZA_APERTURE_LIMIT`, `ZA_ST_CONFLICT` for an overlap with guest RAM
    /// or another published aperture of this map. Nothing changes on error.
    pub fn enable(&self, ap: &Aperture, base: u64, ram_len: u64) -> Result<(), u16> {
        let _cfg = self.config.lock().unwrap_or_else(PoisonError::into_inner);
        if base % ZA_APERTURE_ALIGN != 0 {
            return Err(ZA_ST_BAD_DESC);
        }
        let end = base
            .checked_add(ap.hbm.len())
            .filter(|&e| e <= ZA_APERTURE_LIMIT)
            .ok_or(ZA_ST_BAD_DESC)?;
        if base < ram_len {
            return Err(ZA_ST_CONFLICT);
        }
        for other in &self.apertures {
            if std::ptr::eq(other.as_ref(), ap) {
                continue;
            }
            if let Some(b) = other.base() {
                let e = b + other.hbm.len();
                if base < e && b < end {
                    return Err(ZA_ST_CONFLICT);
                }
            }
        }
        ap.set(Some(base));
        Ok(())
    }

    /// Withdraws `ap`; on return no peer access to it is in flight and none
    /// will start until it is enabled again.
    pub fn disable(&self, ap: &Aperture) {
        let _cfg = self.config.lock().unwrap_or_else(PoisonError::into_inner);
        ap.set(None);
    }
}

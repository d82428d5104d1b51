//! Interrupt delivery: the model raises guest MSI-X vector `v` by writing
//! the guest's eventfd `v` (QEMU turns it into the MSI-X message).

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};

/// Something that can raise a guest's MSI-X vectors.
pub trait Irq: Send + Sync {
    /// Raises vector `v` (out-of-range vectors are ignored).
    fn raise(&self, v: u32);
}

/// No guest attached: interrupts go nowhere.
pub struct NoIrq;

impl Irq for NoIrq {
    fn raise(&self, _v: u32) {}
}

/// Counts interrupts per vector (tests, bench).
#[derive(Default)]
pub struct CountIrq(pub [AtomicU64; zeronic_hw::regs::MAX_VECTORS as usize]);

impl CountIrq {
    /// Interrupts raised on `v` so far.
    pub fn count(&self, v: u32) -> u64 {
        self.0
            .get(v as usize)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

impl Irq for CountIrq {
    fn raise(&self, v: u32) {
        if let Some(c) = self.0.get(v as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The guest's interrupt eventfds, one per vector.
pub struct EventFdIrq(pub Vec<OwnedFd>);

impl Irq for EventFdIrq {
    fn raise(&self, v: u32) {
        if let Some(fd) = self.0.get(v as usize) {
            // An eventfd counter only fails to add at u64::MAX - 1; losing an
            // interrupt then is harmless (the guest has not read any yet).
            if let Err(e) = nix::unistd::write(fd, &1u64.to_ne_bytes()) {
                log::debug!("eventfd write for vector {v}: {e}");
            }
        }
    }
}

//! A queue as the model sees it: configuration latched from its BAR2 block
//! on the enable edge, plus the model's own index (the consumer index of a
//! driver-produced ring, the producer index of a NIC-produced one).

use zeronic_hw::regs::*;
use zeronic_hw::status::ST_QUEUE_CONFIG;

use crate::mem::{Bar2, GuestMem};

/// Queue state.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ring {
    /// BAR2 offset of the queue block.
    pub reg: usize,
    /// Entry size in bytes.
    pub entry: usize,
    /// Queue id (for error reports).
    pub qid: u32,
    /// Latched guest-physical base.
    pub base: u64,
    /// Latched entries (power of two).
    pub size: u32,
    /// Served.
    pub on: bool,
    /// Refused; waits for the enable bit to drop.
    pub failed: bool,
    /// The model's index (free-running).
    pub idx: u32,
}

/// Result of syncing a ring with its enable bit.
pub enum Sync {
    /// Nothing changed.
    Same,
    /// Enabled now.
    Enabled,
    /// Disabled now.
    Disabled,
    /// Configuration refused (status code).
    Refused(u16),
}

impl Ring {
    /// A disabled ring for the block at `reg`.
    pub fn new(reg: usize, entry: usize, qid: u32) -> Self {
        Self {
            reg,
            entry,
            qid,
            ..Default::default()
        }
    }

    /// Follows the guest's enable bit; validates on the 0 -> 1 edge.
    pub fn sync(&mut self, bar: &Bar2, mem: Option<&GuestMem>) -> Sync {
        let en = bar.r32(self.reg + Q_CTRL) & Q_CTRL_ENABLE != 0;
        if !en {
            let was = self.on || self.failed;
            self.on = false;
            self.failed = false;
            if was {
                bar.w32(self.reg + Q_STATUS, 0);
                return Sync::Disabled;
            }
            return Sync::Same;
        }
        if self.on || self.failed {
            return Sync::Same;
        }
        let Some(mem) = mem else {
            return Sync::Same; // DMA window not mapped yet: keep pending
        };
        let base = bar.r64(self.reg + Q_BASE);
        let size = bar.r32(self.reg + Q_SIZE);
        let ok = size.is_power_of_two()
            && size <= MAX_RING
            && base % 64 == 0
            && mem.check(base, size as u64 * self.entry as u64).is_ok();
        if !ok {
            self.failed = true;
            bar.w32(self.reg + Q_ERROR, ST_QUEUE_CONFIG as u32);
            bar.w32(self.reg + Q_STATUS, Q_STATUS_ERROR);
            return Sync::Refused(ST_QUEUE_CONFIG);
        }
        self.base = base;
        self.size = size;
        self.idx = 0;
        self.on = true;
        bar.w32(self.reg + Q_ERROR, 0);
        bar.w32(self.reg + Q_STATUS, Q_STATUS_ENABLED);
        Sync::Enabled
    }

    /// Puts a served queue into the error state (a protocol violation): it
    /// stops until the driver clears its enable bit.
    pub fn fail(&mut self, bar: &Bar2, code: u16) {
        self.on = false;
        self.failed = true;
        bar.w32(self.reg + Q_ERROR, code as u32);
        bar.w32(self.reg + Q_STATUS, Q_STATUS_ERROR);
    }

    /// Guest-physical address of slot `i`.
    pub fn slot(&self, i: u32) -> u64 {
        self.base + (i & (self.size - 1)) as u64 * self.entry as u64
    }

    /// Driver-produced ring: entries waiting, or None if the producer index
    /// is impossible (more than `size` ahead).
    pub fn pending(&self, bar: &Bar2) -> Option<u32> {
        if !self.on {
            return Some(0);
        }
        let n = bar.r32(self.reg + Q_PROD).wrapping_sub(self.idx);
        (n <= self.size).then_some(n)
    }

    /// Driver-produced ring: consumes one entry.
    pub fn consume(&mut self, bar: &Bar2) {
        self.idx = self.idx.wrapping_add(1);
        bar.w32(self.reg + Q_CONS, self.idx);
    }

    /// NIC-produced ring: free slots (0 if the consumer index is impossible).
    pub fn space(&self, bar: &Bar2) -> u32 {
        if !self.on {
            return 0;
        }
        let used = self.idx.wrapping_sub(bar.r32(self.reg + Q_CONS));
        self.size.saturating_sub(used)
    }

    /// NIC-produced ring: writes one entry at the producer index and
    /// publishes it (entry before index, Release ordering in `w32`).
    pub fn produce(&mut self, bar: &Bar2, mem: &GuestMem, bytes: &[u8]) -> bool {
        if self.space(bar) == 0 || mem.write(self.slot(self.idx), bytes).is_err() {
            return false;
        }
        self.idx = self.idx.wrapping_add(1);
        bar.w32(self.reg + Q_PROD, self.idx);
        true
    }
}

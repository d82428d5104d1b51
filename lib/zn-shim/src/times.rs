//! How long each step of an attach took (`ZN_SHIM_LOG`): the connection
//! times its steps, the pool its allocations and registrations.

/// Microseconds each step of an attach took (`ZN_SHIM_LOG`).
#[derive(Debug, Default, Clone, Copy)]
pub struct AttachTimes {
    /// Receive ring: mmap, populate, MADV_DONTFORK.
    pub ring_alloc: u64,
    /// MR_REG of the ring.
    pub ring_reg: u64,
    /// Staging memory: as the ring.
    pub stage_alloc: u64,
    /// MR_REG of the staging memory.
    pub stage_reg: u64,
    /// eventfd, CQ_CREATE and the CQ's mmap.
    pub cq: u64,
    /// FLOW_ATTACH (the NIC's flow install).
    pub flow_attach: u64,
    /// The first reap and arm of the CQ.
    pub refresh: u64,
    /// Ring and staging memory came from the pool (no alloc, no MR_REG).
    pub pooled: bool,
}

impl std::fmt::Display for AttachTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pool {} ring_alloc {} ring_reg {} stage_alloc {} stage_reg {} cq {} flow_attach {} refresh {}",
            if self.pooled { "hit" } else { "miss" },
            self.ring_alloc,
            self.ring_reg,
            self.stage_alloc,
            self.stage_reg,
            self.cq,
            self.flow_attach,
            self.refresh
        )
    }
}

/// Times successive steps.
pub struct Lap(std::time::Instant);

impl Lap {
    pub fn new() -> Self {
        Self(std::time::Instant::now())
    }
    /// Microseconds since the last call (or since `new`).
    pub fn next(&mut self) -> u64 {
        let now = std::time::Instant::now();
        let us = now.duration_since(self.0).as_micros() as u64;
        self.0 = now;
        us
    }
}

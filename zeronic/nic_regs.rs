// SPDX-License-Identifier: GPL-2.0

//! Register access that outlives probe: BAR0 (doorbells) and BAR2 (the
//! register file) as device-managed mappings.
//!
//! Everything that touches registers after probe (transmit, NAPI, interrupt
//! handlers, the command queue used by `/dev/zeronic`) may run while the device
//! is being unbound, so the mappings are `Devres` and each access is a short
//! RCU-protected section that fails with `ENODEV` once the device is gone. None
//! of these sections sleeps.

use kernel::{
    io::Io,
    pci,
    prelude::*,
    sync::barrier::{
        mb,
        Write, //
    }, //
};

use crate::hw::{
    regs,
    rss, //
};

/// Size of ivshmem's BAR0 register block.
pub(crate) const BAR0_SIZE: usize = 256;

/// BAR0 and BAR2, mapped until the device unbinds.
pub(crate) struct NicRegs {
    bar0: pci::DevresBar<BAR0_SIZE>,
    bar2: pci::DevresBar<{ regs::BAR2_SIZE }>,
}

/// Both BARs, accessible for as long as this value lives (an RCU read-side
/// section: do not sleep while holding it).
pub(crate) struct Regs<'a> {
    bar0: kernel::devres::DevresGuard<'a, pci::Bar<'static, BAR0_SIZE>>,
    bar2: kernel::devres::DevresGuard<'a, pci::Bar<'static, { regs::BAR2_SIZE }>>,
}

impl NicRegs {
    /// Maps BAR0 and BAR2 of `pdev`, device-managed.
    ///
    /// # Errors
    ///
    /// - `EBUSY` if a BAR's region is claimed already.
    /// - `ENOMEM` if a BAR is empty or cannot be mapped, or its release cannot be registered.
    /// - `EINVAL` if a BAR is smaller than the size the driver maps.
    pub(crate) fn new(pdev: &pci::Device<kernel::device::Bound>) -> Result<Self> {
        let bar0 = pdev.iomap_region_sized::<BAR0_SIZE>(0, c"zeronic/bar0")?;
        let bar2 = pdev.iomap_region_sized::<{ regs::BAR2_SIZE }>(2, c"zeronic/bar2")?;
        Ok(Self {
            bar0: bar0.into_devres()?,
            bar2: bar2.into_devres()?,
        })
    }

    /// Returns the registers.
    ///
    /// # Errors
    ///
    /// - `ENODEV` once the device is unbound.
    #[inline]
    pub(crate) fn get(&self) -> Result<Regs<'_>> {
        Ok(Regs {
            bar0: self.bar0.try_access().ok_or(ENODEV)?,
            bar2: self.bar2.try_access().ok_or(ENODEV)?,
        })
    }
}

/// The register block of one queue (`regs::Q_*`): a command, event or port
/// queue. Only the constructors below make one, and each checks that the
/// whole block lies inside BAR2, so a queue register cannot be addressed
/// through a vector's or a port's offset, or outside the BAR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QueueRegs(usize);

impl QueueRegs {
    /// The command queue's block.
    pub(crate) const CMDQ: Self = Self::fixed(regs::REG_CMDQ);
    /// The command completion queue's block.
    pub(crate) const CMDCQ: Self = Self::fixed(regs::REG_CMDCQ);
    /// The event queue's block.
    pub(crate) const EVQ: Self = Self::fixed(regs::REG_EVQ);

    /// A block at a fixed offset; used only in constants, where a block
    /// outside BAR2 fails the build.
    const fn fixed(block: usize) -> Self {
        assert!(block % regs::QUEUE_BLOCK_SIZE == 0);
        assert!(block + regs::QUEUE_BLOCK_SIZE <= regs::BAR2_SIZE);
        Self(block)
    }

    /// BAR2 offset of the block (for messages).
    #[inline]
    pub(crate) fn offset(self) -> usize {
        self.0
    }
}

/// The queues of a port's block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PortQueue {
    /// TX descriptors (driver -> NIC).
    Tx,
    /// TX completions (NIC -> driver).
    TxCompletion,
    /// RX buffers (driver -> NIC).
    Rx,
    /// RX completions (NIC -> driver).
    RxCompletion,
    /// Header-queue entries of attached flows (NIC -> driver).
    Header,
}

/// The register block of one port (`regs::PORT_*`) and its statistics
/// (its queue pairs' blocks are [`QueuePairRegs`]); made by
/// [`PortRegs::new`], which checks the port exists in the register map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PortRegs(usize);

// Every port block the map allows lies inside BAR2.
const _: () = assert!(regs::port_block(regs::MAX_PORTS) <= regs::BAR2_SIZE);
// Each port queue's block and the statistics lie inside the port's block.
const _: () = assert!(regs::PORT_HDRQ + regs::QUEUE_BLOCK_SIZE <= regs::PORT_STATS);
const _: () = assert!(regs::PORT_STATS + 8 * regs::PSTAT_SLOTS <= regs::PORT_STRIDE);

impl PortRegs {
    /// Port `port`'s block.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if `port` is not below `regs::MAX_PORTS`.
    pub(crate) fn new(port: u32) -> Result<Self> {
        if port >= regs::MAX_PORTS {
            return Err(EINVAL);
        }
        Ok(Self(regs::port_block(port)))
    }
}

/// Offset of queue `q` from the first queue block of a queue pair (the
/// same for every queue pair, hardware spec §14).
const fn qp_offset(q: PortQueue) -> usize {
    match q {
        PortQueue::Tx => regs::QP_TXQ,
        PortQueue::TxCompletion => regs::QP_TXCQ,
        PortQueue::Rx => regs::QP_RXQ,
        PortQueue::RxCompletion => regs::QP_RXCQ,
        PortQueue::Header => regs::QP_HDRQ,
    }
}

/// The queue blocks and statistics of one queue pair of a port (hardware
/// spec §14; queue pair 0's queues are the port's own); made by
/// [`QueuePairRegs::new`], which checks both numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QueuePairRegs {
    /// BAR2 offset of the queue pair's first queue block.
    queues: usize,
    /// BAR2 offset of its statistics.
    stats: usize,
}

// The last queue pair's queue blocks and statistics lie inside BAR2.
const _: () = assert!(
    regs::qp_queues(regs::MAX_PORTS - 1, regs::MAX_QP - 1) + regs::QP_HDRQ + regs::QUEUE_BLOCK_SIZE
        <= regs::BAR2_SIZE
);
const _: () = assert!(
    regs::qp_block(regs::MAX_PORTS - 1, regs::MAX_QP - 1) + regs::QP_STATS + 8 * regs::QSTAT_SLOTS
        <= regs::BAR2_SIZE
);

impl QueuePairRegs {
    /// Queue pair `qp` of port `port`.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if `port` is not below `regs::MAX_PORTS` or `qp` not below
    ///   `regs::MAX_QP`.
    pub(crate) fn new(port: u32, qp: u32) -> Result<Self> {
        if port >= regs::MAX_PORTS || qp >= regs::MAX_QP {
            return Err(EINVAL);
        }
        Ok(Self {
            queues: regs::qp_queues(port, qp),
            stats: regs::qp_block(port, qp) + regs::QP_STATS,
        })
    }

    /// The block of the queue pair's queue `q`.
    pub(crate) fn queue(self, q: PortQueue) -> QueueRegs {
        QueueRegs(self.queues + qp_offset(q))
    }
}

/// The control block of one MSI-X vector (`regs::VEC_*`); made by
/// [`VectorRegs::new`], which checks the vector has a slot in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VectorRegs(usize);

// Every vector slot lies inside BAR2, below the first port block.
const _: () = assert!(regs::vec_block(regs::MAX_VECTORS) <= regs::REG_PORTS);

impl VectorRegs {
    /// Vector `v`'s block.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if `v` is not below `regs::MAX_VECTORS`.
    pub(crate) fn new(v: u32) -> Result<Self> {
        if v >= regs::MAX_VECTORS {
            return Err(EINVAL);
        }
        Ok(Self(regs::vec_block(v)))
    }
}

/// A port's own registers (`PORT_CTRL` .. `PORT_LINK`) lie below its first
/// queue block.
const PORT_CTRL_REGS: usize = regs::PORT_TXQ;

/// Checks at build time that a 32-bit register at `OFF` fits in a block of
/// `BLOCK` bytes, and is aligned.
const fn in_block<const OFF: usize, const BLOCK: usize>() -> usize {
    assert!(OFF % 4 == 0 && OFF + 4 <= BLOCK);
    OFF
}

impl Regs<'_> {
    /// Reads the device register at the fixed offset `OFF` (`regs::REG_*`);
    /// an offset outside BAR2 does not build.
    #[inline]
    pub(crate) fn reg32<const OFF: usize>(&self) -> u32 {
        (&*self.bar2).read32(OFF)
    }

    /// Writes `val` to the device register at the fixed offset `OFF`
    /// (`regs::REG_*`); an offset outside BAR2 does not build.
    #[inline]
    pub(crate) fn set_reg32<const OFF: usize>(&self, val: u32) {
        (&*self.bar2).write32(val, OFF)
    }

    /// Reads register `REG` (`regs::Q_*`, checked at build time to lie in a
    /// queue block) of queue `q`.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the register lies outside BAR2 (never: [`QueueRegs`]
    ///   are checked when made; the bus accessor checks again at run time).
    #[inline]
    pub(crate) fn queue32<const REG: usize>(&self, q: QueueRegs) -> Result<u32> {
        let off = const { in_block::<REG, { regs::QUEUE_BLOCK_SIZE }>() };
        (&*self.bar2).try_read32(q.0 + off)
    }

    /// Writes register `REG` (`regs::Q_*`) of queue `q`.
    ///
    /// # Errors
    ///
    /// - `EINVAL` as [`Regs::queue32`] (never).
    #[inline]
    pub(crate) fn set_queue32<const REG: usize>(&self, q: QueueRegs, val: u32) -> Result {
        let off = const { in_block::<REG, { regs::QUEUE_BLOCK_SIZE }>() };
        (&*self.bar2).try_write32(val, q.0 + off)
    }

    /// Writes queue `q`'s ring base (`regs::Q_BASE`, 64 bits).
    ///
    /// # Errors
    ///
    /// - `EINVAL` as [`Regs::queue32`] (never).
    #[inline]
    pub(crate) fn set_queue_base(&self, q: QueueRegs, base: u64) -> Result {
        const _: () = assert!(regs::Q_BASE % 8 == 0 && regs::Q_BASE + 8 <= regs::QUEUE_BLOCK_SIZE);
        (&*self.bar2).try_write64(base, q.0 + regs::Q_BASE)
    }

    /// Reads register `REG` (`regs::PORT_*`, checked at build time to lie in
    /// a port block) of port `p`.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the register lies outside BAR2 (never: [`PortRegs`] are
    ///   checked when made).
    #[inline]
    pub(crate) fn port32<const REG: usize>(&self, p: PortRegs) -> Result<u32> {
        let off = const { in_block::<REG, PORT_CTRL_REGS>() };
        (&*self.bar2).try_read32(p.0 + off)
    }

    /// Writes register `REG` (`regs::PORT_*`) of port `p`.
    ///
    /// # Errors
    ///
    /// - `EINVAL` as [`Regs::port32`] (never).
    #[inline]
    pub(crate) fn set_port32<const REG: usize>(&self, p: PortRegs, val: u32) -> Result {
        let off = const { in_block::<REG, PORT_CTRL_REGS>() };
        (&*self.bar2).try_write32(val, p.0 + off)
    }

    /// Reads statistics slot `slot` (`regs::PSTAT_*`) of port `p`.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if `slot` is not below `regs::PSTAT_SLOTS`.
    #[inline]
    pub(crate) fn port_stat(&self, p: PortRegs, slot: usize) -> Result<u64> {
        if slot >= regs::PSTAT_SLOTS {
            return Err(EINVAL);
        }
        (&*self.bar2).try_read64(p.0 + regs::PORT_STATS + 8 * slot)
    }

    /// Reads statistics slot `slot` (`regs::QSTAT_*`) of queue pair `qp`.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if `slot` is not below `regs::QSTAT_SLOTS`.
    #[inline]
    pub(crate) fn qp_stat(&self, qp: QueuePairRegs, slot: usize) -> Result<u64> {
        if slot >= regs::QSTAT_SLOTS {
            return Err(EINVAL);
        }
        (&*self.bar2).try_read64(qp.stats + 8 * slot)
    }

    /// Writes the 32-bit word at byte `off` of port `p`'s RSS key
    /// (`PORT_RSS_KEY`) and indirection table (`PORT_RSS_TABLE`), which
    /// follow each other.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the word is not inside the key or the table, or not
    ///   aligned.
    #[inline]
    pub(crate) fn set_port_rss32(&self, p: PortRegs, off: usize, val: u32) -> Result {
        const START: usize = regs::PORT_RSS_KEY;
        const END: usize = regs::PORT_RSS_TABLE + regs::RSS_TABLE_SIZE as usize;
        const _: () = assert!(regs::PORT_RSS_KEY + rss::RSS_KEY_LEN <= regs::PORT_RSS_TABLE);
        let at = START.checked_add(off).ok_or(EINVAL)?;
        if at % 4 != 0 || at + 4 > END {
            return Err(EINVAL);
        }
        (&*self.bar2).try_write32(val, p.0 + at)
    }

    /// Writes register `REG` (`regs::VEC_*`, checked at build time to lie
    /// in a vector block) of vector `v`.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the register lies outside BAR2 (never: [`VectorRegs`]
    ///   are checked when made).
    #[inline]
    pub(crate) fn set_vector32<const REG: usize>(&self, v: VectorRegs, val: u32) -> Result {
        let off = const { in_block::<REG, { regs::VEC_BLOCK_SIZE }>() };
        (&*self.bar2).try_write32(val, v.0 + off)
    }

    /// Rings doorbell class `db` (`DB_*`) of the NIC.
    ///
    /// Orders every earlier store (ring entries in guest RAM, BAR2 indices)
    /// before the doorbell, as the hardware spec's §5 asks.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the doorbell register lies outside BAR0 (never: it is fixed).
    #[inline]
    pub(crate) fn doorbell(&self, db: u16) -> Result {
        mb(Write);
        (&*self.bar0).try_write32(regs::doorbell_value(db), regs::BAR0_DOORBELL)
    }
}

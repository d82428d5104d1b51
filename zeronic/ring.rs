// SPDX-License-Identifier: GPL-2.0

//! Descriptor rings in DMA-coherent memory and their queue register blocks.
//!
//! Every queue of the NIC (command, completion, event, TX, RX) is a ring of
//! fixed-size entries in guest RAM that the driver allocates, plus a block of
//! registers in BAR2 (`Q_BASE`, `Q_SIZE`, `Q_CTRL`, `Q_PROD`, `Q_CONS`,
//! `Q_STATUS`, `Q_ERROR`; hardware spec §3-§5). Entries are copied in and out
//! as byte images (`encode`/`decode` of the `zeronic-hw` layouts), so the CPU
//! never holds a reference into memory the NIC writes.

use kernel::{
    device::{
        Bound,
        Device, //
    },
    dma::Coherent,
    io::{
        io_project,
        Io, //
    },
    prelude::*,
    time::{
        delay::fsleep,
        Delta,
        Instant,
        Monotonic, //
    },
};

use crate::{
    hw::regs,
    nic_regs::{
        NicRegs,
        QueueRegs,
        Regs, //
    },
};

/// How long the NIC may take to accept or release a queue configuration. The
/// model scans at least every millisecond; TCG guests on a busy host are slow.
const QUEUE_TIMEOUT_MS: i64 = 2000;

/// A ring of `E`-byte entries and the BAR2 register block that describes it.
pub(crate) struct Ring<const E: usize> {
    mem: Coherent<[[u8; E]]>,
    /// The queue's register block.
    block: QueueRegs,
    /// Entries, a power of two.
    entries: u32,
}

impl<const E: usize> Ring<E> {
    /// Allocates a zeroed ring of `entries` entries (a power of two, at most
    /// `MAX_RING`) for the queue whose register block is `block`.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if `entries` is not a power of two or exceeds `MAX_RING`.
    /// - `ENOMEM` if the DMA memory cannot be allocated.
    pub(crate) fn new(dev: &Device<Bound>, entries: u32, block: QueueRegs) -> Result<Self> {
        if !entries.is_power_of_two() || entries > regs::MAX_RING {
            return Err(EINVAL);
        }
        // CAST: u32 -> usize is lossless on every architecture Linux supports.
        let mem = Coherent::<[u8; E]>::zeroed_slice(dev, entries as usize, GFP_KERNEL)?;
        Ok(Self {
            mem,
            block,
            entries,
        })
    }

    /// Number of entries.
    #[inline]
    pub(crate) fn entries(&self) -> u32 {
        self.entries
    }

    /// Slot of free-running index `index`.
    #[inline]
    fn slot(&self, index: u32) -> usize {
        // CAST: u32 -> usize is lossless on every architecture Linux supports.
        (index & (self.entries - 1)) as usize
    }

    /// Writes the entry of free-running index `index`.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the slot lies outside the ring (never: the index is masked).
    #[inline]
    pub(crate) fn write(&self, index: u32, entry: [u8; E]) -> Result {
        io_project!(&self.mem, [try: self.slot(index)]).copy_write(entry);
        Ok(())
    }

    /// Reads the entry of free-running index `index`.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the slot lies outside the ring (never: the index is masked).
    #[inline]
    pub(crate) fn read(&self, index: u32) -> Result<[u8; E]> {
        Ok(io_project!(&self.mem, [try: self.slot(index)]).copy_read())
    }

    /// The producer index register's current value.
    ///
    /// # Errors
    ///
    /// - `EINVAL` as [`Regs::queue32`] (never).
    #[inline]
    pub(crate) fn prod(&self, r: &Regs<'_>) -> Result<u32> {
        r.queue32::<{ regs::Q_PROD }>(self.block)
    }

    /// Publishes `prod` as the producer index (a ring the driver fills).
    ///
    /// # Errors
    ///
    /// - `EINVAL` as [`Regs::set_queue32`] (never).
    #[inline]
    pub(crate) fn set_prod(&self, r: &Regs<'_>, prod: u32) -> Result {
        r.set_queue32::<{ regs::Q_PROD }>(self.block, prod)
    }

    /// Publishes `cons` as the consumer index (a ring the NIC fills).
    ///
    /// # Errors
    ///
    /// - `EINVAL` as [`Regs::set_queue32`] (never).
    #[inline]
    pub(crate) fn set_cons(&self, r: &Regs<'_>, cons: u32) -> Result {
        r.set_queue32::<{ regs::Q_CONS }>(self.block, cons)
    }

    /// Programs the queue and enables it, then waits until the NIC accepts it.
    ///
    /// Process context (sleeps).
    ///
    /// # Errors
    ///
    /// - `EIO` if the NIC refuses the configuration (`Q_STATUS_ERROR`, reason in `Q_ERROR`).
    /// - `ETIMEDOUT` if the NIC does not answer within `QUEUE_TIMEOUT_MS`.
    /// - `ENODEV` once the device is unbound.
    /// - `EINVAL` as [`Regs::set_queue32`] (never).
    pub(crate) fn enable(&self, nic: &NicRegs) -> Result {
        self.start_enable(&nic.get()?)?;
        wait_enabled(nic, self.block)
    }

    /// Programs the queue and sets its enable bit, without waiting for the
    /// NIC to accept it (see [`wait_enabled`]): for a ring that lives under
    /// a spinlock.
    ///
    /// # Errors
    ///
    /// - `EINVAL` as [`Regs::set_queue32`] (never) and [`Regs::doorbell`].
    pub(crate) fn start_enable(&self, r: &Regs<'_>) -> Result<QueueRegs> {
        let q = self.block;
        r.set_queue32::<{ regs::Q_CTRL }>(q, 0)?;
        r.set_queue_base(q, self.mem.dma_address())?;
        r.set_queue32::<{ regs::Q_SIZE }>(q, self.entries)?;
        r.set_queue32::<{ regs::Q_PROD }>(q, 0)?;
        r.set_queue32::<{ regs::Q_CONS }>(q, 0)?;
        r.set_queue32::<{ regs::Q_CTRL }>(q, regs::Q_CTRL_ENABLE)?;
        r.doorbell(regs::DB_CMD)?;
        Ok(self.block)
    }

    /// Disables the queue and waits until the NIC has let go of the ring
    /// (`Q_STATUS` reads 0). Process context (sleeps).
    ///
    /// # Errors
    ///
    /// - `ETIMEDOUT` if the NIC does not let go within `QUEUE_TIMEOUT_MS`.
    /// - `ENODEV` once the device is unbound.
    /// - `EINVAL` as [`Regs::set_queue32`] (never).
    pub(crate) fn disable(&self, nic: &NicRegs) -> Result {
        {
            let r = nic.get()?;
            r.set_queue32::<{ regs::Q_CTRL }>(self.block, 0)?;
            r.doorbell(regs::DB_CMD)?;
        }
        poll_until(nic, QUEUE_TIMEOUT_MS, |r| {
            Ok(r.queue32::<{ regs::Q_STATUS }>(self.block)? == 0)
        })
    }
}

/// Waits until the NIC accepted queue `block`
/// (after [`Ring::start_enable`]). Process context (sleeps).
///
/// # Errors
///
/// - `EIO` if the NIC refuses the configuration (`Q_STATUS_ERROR`).
/// - `ETIMEDOUT` if the NIC does not answer within `QUEUE_TIMEOUT_MS`.
/// - `ENODEV` once the device is unbound.
/// - `EINVAL` as [`Regs::queue32`] (never).
pub(crate) fn wait_enabled(nic: &NicRegs, block: QueueRegs) -> Result {
    poll_until(nic, QUEUE_TIMEOUT_MS, |r| {
        let st = r.queue32::<{ regs::Q_STATUS }>(block)?;
        if st & regs::Q_STATUS_ERROR != 0 {
            let err = r.queue32::<{ regs::Q_ERROR }>(block)?;
            pr_err!(
                "queue at {:#x} refused by the NIC (status {})\n",
                block.offset(),
                err
            );
            return Err(EIO);
        }
        Ok(st & regs::Q_STATUS_ENABLED != 0)
    })
}

/// Sleeps in steps until `done` returns `true`, at most `timeout_ms`.
///
/// Each check is its own short register section, so nothing is held across
/// the sleeps. Process context only.
///
/// # Errors
///
/// - `ETIMEDOUT` if `done` has not returned `true` after `timeout_ms`.
/// - `ENODEV` once the device is unbound.
/// - Any error `done` returns.
pub(crate) fn poll_until(
    nic: &NicRegs,
    timeout_ms: i64,
    mut done: impl FnMut(&Regs<'_>) -> Result<bool>,
) -> Result {
    let start = Instant::<Monotonic>::now();
    let mut step = 10;
    loop {
        if done(&nic.get()?)? {
            return Ok(());
        }
        if start.elapsed().as_millis() > timeout_ms {
            return Err(ETIMEDOUT);
        }
        fsleep(Delta::from_micros(step));
        step = (step * 2).min(1000);
    }
}

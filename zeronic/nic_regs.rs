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

use crate::hw::regs;

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

    /// Reads the 32-bit register at `off` of BAR2, an offset computed at run
    /// time (a queue's, a vector's or a port's block).
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the register at `off` lies outside BAR2.
    #[inline]
    pub(crate) fn r32(&self, off: usize) -> Result<u32> {
        (&*self.bar2).try_read32(off)
    }

    /// Writes a 32-bit register of BAR2.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the register at `off` lies outside BAR2.
    #[inline]
    pub(crate) fn w32(&self, off: usize, val: u32) -> Result {
        (&*self.bar2).try_write32(val, off)
    }

    /// Reads a 64-bit register (statistics) of BAR2.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the register at `off` lies outside BAR2.
    #[inline]
    pub(crate) fn r64(&self, off: usize) -> Result<u64> {
        (&*self.bar2).try_read64(off)
    }

    /// Writes a 64-bit register (ring bases) of BAR2.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the register at `off` lies outside BAR2.
    #[inline]
    pub(crate) fn w64(&self, off: usize, val: u64) -> Result {
        (&*self.bar2).try_write64(val, off)
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

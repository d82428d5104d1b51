// SPDX-License-Identifier: GPL-2.0

//! The PCI driver: binds to the emulated ZeroNIC.
//!
//! The NIC is a QEMU `ivshmem-doorbell` function (1af4:1110) whose BAR2 is the
//! NIC's register file. Plain ivshmem devices share the PCI id, so probe
//! identifies the NIC by the magic and version in BAR2 before anything else
//! and refuses other devices with a log line. See `docs/hardware.md`.

use kernel::{
    device::Core,
    io::Io,
    pci,
    prelude::*, //
};

use crate::hw::regs;

/// BAR2, the register file, with build-time checked offsets below its size.
type Bar2<'bound> = pci::Bar<'bound, { regs::BAR2_SIZE }>;

/// The identity a ZeroNIC shows in BAR2 (registers `REG_MAGIC` .. `REG_MAX_MTU`).
#[derive(Clone, Copy)]
pub(crate) struct Identity {
    /// `major << 16 | minor`.
    pub(crate) version: u32,
    /// `CAP_*` bits.
    pub(crate) caps: u32,
    /// Number of ports this function owns (1 ..= `MAX_PORTS`).
    pub(crate) ports: u32,
    /// Largest MTU the NIC accepts on its wire.
    pub(crate) max_mtu: u32,
}

impl Identity {
    /// Reads and checks the identity header.
    ///
    /// # Errors
    ///
    /// `ENODEV` when the magic is not ZeroNIC's (a plain ivshmem device) or
    /// the major version is not the one this driver implements; `EINVAL`
    /// when the header is inconsistent. Each case is logged.
    fn read(pdev: &pci::Device<Core<'_>>, bar: &Bar2<'_>) -> Result<Self> {
        let magic = bar.read32(regs::REG_MAGIC);
        if magic != regs::ZN_MAGIC {
            dev_info!(
                pdev,
                "BAR2 magic {:#010x} is not a ZeroNIC's ({:#010x}): plain ivshmem device, not binding\n",
                magic,
                regs::ZN_MAGIC
            );
            return Err(ENODEV);
        }
        let id = Identity {
            version: bar.read32(regs::REG_VERSION),
            caps: bar.read32(regs::REG_CAPS),
            ports: bar.read32(regs::REG_NUM_PORTS),
            max_mtu: bar.read32(regs::REG_MAX_MTU),
        };
        if id.version >> 16 != regs::ZN_VERSION_MAJOR {
            dev_err!(
                pdev,
                "ZeroNIC version {}.{} is not supported (driver implements {}.x)\n",
                id.version >> 16,
                id.version & 0xffff,
                regs::ZN_VERSION_MAJOR
            );
            return Err(ENODEV);
        }
        if id.ports == 0 || id.ports > regs::MAX_PORTS {
            dev_err!(pdev, "ZeroNIC reports {} ports (1..={} valid)\n", id.ports, regs::MAX_PORTS);
            return Err(EINVAL);
        }
        Ok(id)
    }
}

/// One bound NIC.
///
/// Lifetime: from probe to unbind; everything here borrows the device for
/// `'bound`. Fields drop in declaration order.
pub(crate) struct ZeroNicDevice<'bound> {
    pdev: &'bound pci::Device,
    /// What the NIC said it is at probe.
    identity: Identity,
    /// Must stay declared last: everything that touches registers borrows it.
    _bar2: Bar2<'bound>,
}

/// The `pci::Driver` of the ZeroNIC.
pub(crate) struct ZeroNicDriver;

kernel::pci_device_table!(
    PCI_TABLE,
    <ZeroNicDriver as pci::Driver>::IdInfo,
    [(
        pci::DeviceId::from_id(pci::Vendor::REDHAT_QUMRANET, regs::PCI_DEVICE_ID as u32),
        ()
    )]
);

impl pci::Driver for ZeroNicDriver {
    type IdInfo = ();
    type Data<'bound> = ZeroNicDevice<'bound>;

    const ID_TABLE: pci::IdTable<Self::IdInfo> = &PCI_TABLE;

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        _info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        let bar2_len = pdev.resource_len(2)?;
        // CAST: usize -> u64 is lossless on every architecture Linux supports.
        if bar2_len < regs::BAR2_SIZE as u64 {
            dev_info!(
                pdev,
                "BAR2 is {} bytes, smaller than a ZeroNIC register file: plain ivshmem device, not binding\n",
                bar2_len
            );
            return Err(ENODEV);
        }
        pdev.enable_device_mem()?;
        let bar2 = pdev.iomap_region_sized::<{ regs::BAR2_SIZE }>(2, c"zeronic/bar2")?;
        let identity = Identity::read(pdev, &bar2)?;
        dev_info!(
            pdev,
            "ZeroNIC {}.{}: {} port(s), max MTU {}, caps {:#x}\n",
            identity.version >> 16,
            identity.version & 0xffff,
            identity.ports,
            identity.max_mtu,
            identity.caps
        );
        Ok(ZeroNicDevice {
            pdev,
            identity,
            _bar2: bar2,
        })
    }
}

impl Drop for ZeroNicDevice<'_> {
    fn drop(&mut self) {
        dev_info!(self.pdev, "ZeroNIC with {} port(s) unbound\n", self.identity.ports);
    }
}

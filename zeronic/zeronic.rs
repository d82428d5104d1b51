// SPDX-License-Identifier: GPL-2.0

//! ZeroNIC: host networking stack for a ZeroNIC-style NIC.
//!
//! The NIC separates the data path (payload moved by DMA between the wire and
//! registered application memory) from the control path (headers, handled by
//! the unmodified Linux TCP stack). This module is the kernel half of it: the
//! PCI driver for the (emulated) NIC, its network devices, and the
//! `/dev/zeronic` control device through which applications register memory
//! and run zero-copy transfers. See `docs/` in the project for the design.
//!
//! This file holds only the module declaration; each concern has its own file.

use kernel::prelude::*;

mod cdev;
mod cmdq;
mod control;
mod driver;
mod ethtool;
mod hw;
mod irq;
mod mr;
mod nic_regs;
mod port;
mod port_stats;
mod queues;
mod ring;
mod uapi;

/// Driver version. `module!` below repeats it (the macro takes literals only);
/// the selftests check that `/sys/module/zeronic/version` and the load-time log
/// line agree.
const VERSION: &str = "0.1.0";

module! {
    type: ZeroNic,
    name: "zeronic",
    authors: ["ZeroNIC developers"],
    description: "ZeroNIC host networking stack (zero-copy NIC driver and control device)",
    license: "GPL",
    version: "0.1.0",
    params: {
        max_mrs_per_user: u32 {
            default: 1024,
            description: "MR Table entries one user may hold on each NIC (0: no per-user bound)",
        },
    },
}

/// Module state: everything that lives from load to unload.
///
/// The PCI driver is registered after `/dev/zeronic` and, fields dropping in
/// declaration order, unregistered first: NICs unbind before the control
/// device goes away.
#[pin_data(PinnedDrop)]
struct ZeroNic {
    /// The PCI driver; unbinds every NIC when dropped.
    #[pin]
    pci: kernel::driver::Registration<kernel::pci::Adapter<driver::ZeroNicDriver>>,
    /// `/dev/zeronic`; deregistered when the module unloads.
    #[pin]
    control: kernel::miscdevice::MiscDeviceRegistration<cdev::ControlFile>,
}

impl kernel::InPlaceModule for ZeroNic {
    fn init(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        control::init_registry();
        try_pin_init!(Self {
            control <- cdev::register(),
            pci <- kernel::driver::Registration::new(c"zeronic", module),
            _: {
                pr_info!(
                    "version {} loaded, /dev/{} ready (uapi {})\n",
                    VERSION,
                    cdev::NAME.to_str().unwrap_or("zeronic"),
                    cdev::UAPI_VERSION
                );
            },
        })
    }
}

#[pinned_drop]
impl PinnedDrop for ZeroNic {
    fn drop(self: Pin<&mut Self>) {
        pr_info!("unloaded\n");
    }
}

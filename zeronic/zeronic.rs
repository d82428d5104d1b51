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

mod attach;
mod cdev;
mod cdev_zc;
mod charge;
mod cmdq;
mod control;
mod cq;
mod defer;
mod driver;
mod ethtool;
mod fifo;
mod flow;
mod hdrq;
mod hw;
mod irq;
mod mr;
mod nic_regs;
mod port;
mod port_ntuple;
mod port_rss;
mod port_stats;
mod qp_track;
mod queues;
mod ring;
mod spare_rings;
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
        profile: u32 {
            default: 0,
            description: "1: time the NIC path's events (ethtool -S prof_*_ns; docs/performance.md)",
        },
        cmd_timeout_ms: u32 {
            default: 10000,
            description: "ms the NIC may complete no command while one is waited for, then it is broken (100..600000; docs/driver.md)",
        },
        ring_kib: u32 {
            default: 4096,
            description: "KiB of the receive ring of a socket attached by setsockopt(TCP_ULP) (a power of two, 64..65536; docs/uapi.md)",
        },
        rx_copybreak: u32 {
            default: 256,
            description: "largest payload of a TCP_ULP socket's packet copied into its skb rather than attached as a ring page (0..4096; 0: never; docs/driver.md)",
        },
        spare_rings: u32 {
            default: 8,
            description: "receive rings of closed TCP_ULP sockets each NIC keeps for the next attach, zeroed for another user (0..64; docs/driver.md)",
        },
        tx_batch: u32 {
            default: 1,
            description: "0: ring the TX doorbell for every descriptor instead of once per xmit_more batch (docs/performance.md)",
        },
    },
}

/// Module state: everything that lives from load to unload.
///
/// The PCI driver is registered after `/dev/zeronic` and the `zeronic` TCP
/// ULP and, fields dropping in declaration order, unregistered first: NICs
/// unbind before the control device goes away. The module cannot unload
/// while a file of `/dev/zeronic` is open, a socket has the ULP, or a
/// zero-copy send is in TCP (each holds a module reference).
#[pin_data(PinnedDrop)]
struct ZeroNic {
    /// The PCI driver; unbinds every NIC when dropped.
    #[pin]
    pci: kernel::driver::Registration<kernel::pci::Adapter<driver::ZeroNicDriver>>,
    /// `/dev/zeronic`; deregistered when the module unloads.
    #[pin]
    control: kernel::miscdevice::MiscDeviceRegistration<cdev::ControlFile>,
    /// The `zeronic` TCP ULP (flows, `attach.rs`).
    ulp: kernel::net::tcp::ulp::Registration<attach::ZnUlp>,
}

impl kernel::InPlaceModule for ZeroNic {
    fn init(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        control::init_registry();
        try_pin_init!(Self {
            _: {
                control::check_params()?;
                attach::check_params()?;
                spare_rings::check_params()?;
                hdrq::check_params()?;
            },
            ulp: kernel::net::tcp::ulp::Registration::register(&attach::ULP_OPS)?,
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
        // No flow is left (each held the module), so no flow work item can be
        // queued any more; one may still be returning into this module.
        kernel::workqueue::system().flush();
        pr_info!("unloaded\n");
    }
}

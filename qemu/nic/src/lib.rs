//! Emulated ZeroNIC: the device model QEMU guests reach through an
//! `ivshmem-doorbell` PCI device. See `docs/hardware.md` for the interface.

pub mod cmdq;
pub mod csum;
pub mod ctl;
pub mod device;
pub mod flow;
pub mod frame;
pub mod irq;
pub mod keygen;
pub mod mem;
pub mod model;
pub mod mr;
pub mod ring;
pub mod rx;
pub mod server;
pub mod tx;
pub mod wire;

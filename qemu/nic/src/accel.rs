//! ZACC, the emulated accelerator (`docs/accel.md`): a second ivshmem
//! function whose BAR2 is registers followed by device memory ("HBM"),
//! with a command queue that fills, verifies, hashes and copies device
//! memory, and an aperture through which peers (the NIC, later) reach that
//! memory by bus address.
//!
//! Model side only: no QEMU topology serves a ZACC yet (`server.rs` and
//! `model.rs` do not know it), and the NIC's data path does not yet resolve
//! addresses through [`dma_space::DmaSpace`].

pub mod aperture;
pub mod counters;
pub mod device;
pub mod dma_space;
pub mod engine;
pub mod hbm;
pub mod stream;

pub use device::Accel;

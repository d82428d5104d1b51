//! ZeroNIC hardware interface: the one source of truth for the layouts shared
//! by the device model (`qemu/nic`) and the kernel driver.
//!
//! Each module file needs only `core` and no `use` of siblings, so the kernel
//! module can include it verbatim with `#[path = ...] mod ...;`; `cmd.rs` and
//! `desc.rs` need `le_struct.rs` included before them with `#[macro_use]`,
//! and `net.rs` names `regs.rs` as `super::regs` (siblings in both crates).
//! The normative prose is `docs/hardware.md`; `tests/spec_tables.rs` pins the
//! tables there to the constants here. `accel.rs` is the emulated
//! accelerator's (ZACC, `docs/accel.md`, pinned by `tests/accel_tables.rs`);
//! the kernel module does not include it.
#![no_std]

#[macro_use]
mod le_struct;

pub mod accel;
pub mod cmd;
pub mod desc;
pub mod net;
pub mod regs;
pub mod rss;
pub mod status;

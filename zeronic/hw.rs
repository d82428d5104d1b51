// SPDX-License-Identifier: GPL-2.0

//! The NIC's hardware interface, shared with the device model.
//!
//! These are the files of the `zeronic-hw` crate (`hw/src/` in the project),
//! included verbatim, so the driver and the emulated NIC cannot disagree on an
//! offset or a layout. `docs/hardware.md` is the specification they implement.

// `pub` items of a userspace crate, private to this one; the driver uses more
// of the register map as bring-up grows.
#[expect(unreachable_pub, dead_code)]
#[path = "../hw/src/regs.rs"]
pub(crate) mod regs;

// SPDX-License-Identifier: GPL-2.0

//! The NIC's hardware interface, shared with the device model.
//!
//! These are the files of the `zeronic-hw` crate (`hw/src/` in the project),
//! included verbatim, so the driver and the emulated NIC cannot disagree on an
//! offset or a layout. `docs/hardware.md` is the specification they implement.
//! The driver uses a subset of each file (flows and header queues come with the
//! zero-copy data path), hence `dead_code` is expected.

#[macro_use]
#[path = "../hw/src/le_struct.rs"]
mod le_struct;

#[expect(unreachable_pub, dead_code)]
#[path = "../hw/src/cmd.rs"]
pub(crate) mod cmd;

#[expect(unreachable_pub, dead_code)]
#[path = "../hw/src/desc.rs"]
pub(crate) mod desc;

#[expect(unreachable_pub, dead_code)]
#[path = "../hw/src/net.rs"]
pub(crate) mod net;

#[expect(unreachable_pub, dead_code)]
#[path = "../hw/src/regs.rs"]
pub(crate) mod regs;

#[expect(unreachable_pub, dead_code)]
#[path = "../hw/src/rss.rs"]
pub(crate) mod rss;

#[expect(unreachable_pub, dead_code)]
#[path = "../hw/src/status.rs"]
pub(crate) mod status;

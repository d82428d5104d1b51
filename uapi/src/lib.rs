//! The userspace ABI of `/dev/zeronic`, bound from
//! [`uapi/linux/zeronic.h`](../../linux/zeronic.h) by bindgen at build time
//! (`build.rs`), so the structs, constants and ioctl numbers are the header's
//! own. `docs/uapi.md` explains each call.
//!
//! - [`raw`]: everything bindgen generated, C names (`zeronic_query`, ...).
//! - The structs under their Rust names ([`Query`], [`MrReg`], [`Cqe`], ...),
//!   the constants without their `ZERONIC_` prefix, and the ioctl command
//!   words ([`IOC_QUERY`], [`IOC_MR_REG`], ..., [`IOC_FLOW_QUERY`]).
//! - Thin wrappers of the registration calls ([`query`], [`mr_reg`],
//!   [`mr_dereg`]) returning the kernel's errno as [`nix::errno::Errno`].

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd};

/// What bindgen generated from the header (C names).
#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    clippy::undocumented_unsafe_blocks,
    missing_docs
)]
pub mod raw {
    include!(concat!(env!("OUT_DIR"), "/zeronic.rs"));
}

pub use raw::{
    zeronic_cq_create as CqCreate, zeronic_cq_destroy as CqDestroy, zeronic_cq_ring as CqRing,
    zeronic_cqe as Cqe, zeronic_flow_attach as FlowAttach, zeronic_flow_detach as FlowDetach,
    zeronic_flow_query as FlowQuery, zeronic_mr_dereg as MrDereg, zeronic_mr_reg as MrReg,
    zeronic_port_info as PortInfo, zeronic_post as Post, zeronic_query as Query,
    zeronic_stream_consume as StreamConsume, zeronic_wr as Wr,
};

/// `ZERONIC_UAPI_VERSION`: the ABI version the header describes.
pub const UAPI_VERSION: u32 = raw::ZERONIC_UAPI_VERSION;

/// `ZERONIC_DEVICE_PATH`: the control device.
pub const DEVICE_PATH: &CStr = match CStr::from_bytes_with_nul(raw::ZERONIC_DEVICE_PATH) {
    Ok(p) => p,
    Err(_) => panic!("ZERONIC_DEVICE_PATH is not a C string"),
};

/// `ZERONIC_IOCTL_TYPE`: the type byte of every ZeroNIC ioctl.
pub const IOCTL_TYPE: u8 = raw::ZERONIC_IOCTL_TYPE as u8;

/// `ZERONIC_MAX_PORTS`: entries of [`Query::ports`].
pub const MAX_PORTS: usize = raw::ZERONIC_MAX_PORTS as usize;

/// `ZERONIC_IOC_QUERY`: `_IOWR(0xDA, 0x00, struct zeronic_query)`.
pub const IOC_QUERY: u32 = raw::ZERONIC_IOC_QUERY_NR;
/// `ZERONIC_IOC_MR_REG`: `_IOWR(0xDA, 0x03, struct zeronic_mr_reg)`.
pub const IOC_MR_REG: u32 = raw::ZERONIC_IOC_MR_REG_NR;
/// `ZERONIC_IOC_MR_DEREG`: `_IOW(0xDA, 0x04, struct zeronic_mr_dereg)`.
pub const IOC_MR_DEREG: u32 = raw::ZERONIC_IOC_MR_DEREG_NR;
/// `ZERONIC_IOC_CQ_CREATE`: `_IOWR(0xDA, 0x10, struct zeronic_cq_create)`.
pub const IOC_CQ_CREATE: u32 = raw::ZERONIC_IOC_CQ_CREATE_NR;
/// `ZERONIC_IOC_CQ_DESTROY`: `_IOW(0xDA, 0x11, struct zeronic_cq_destroy)`.
pub const IOC_CQ_DESTROY: u32 = raw::ZERONIC_IOC_CQ_DESTROY_NR;
/// `ZERONIC_IOC_FLOW_ATTACH`: `_IOWR(0xDA, 0x12, struct zeronic_flow_attach)`.
pub const IOC_FLOW_ATTACH: u32 = raw::ZERONIC_IOC_FLOW_ATTACH_NR;
/// `ZERONIC_IOC_FLOW_DETACH`: `_IOW(0xDA, 0x13, struct zeronic_flow_detach)`.
pub const IOC_FLOW_DETACH: u32 = raw::ZERONIC_IOC_FLOW_DETACH_NR;
/// `ZERONIC_IOC_POST`: `_IOWR(0xDA, 0x14, struct zeronic_post)`.
pub const IOC_POST: u32 = raw::ZERONIC_IOC_POST_NR;
/// `ZERONIC_IOC_STREAM_CONSUME`: `_IOW(0xDA, 0x15, struct zeronic_stream_consume)`.
pub const IOC_STREAM_CONSUME: u32 = raw::ZERONIC_IOC_STREAM_CONSUME_NR;
/// `ZERONIC_IOC_FLOW_QUERY`: `_IOWR(0xDA, 0x16, struct zeronic_flow_query)`.
pub const IOC_FLOW_QUERY: u32 = raw::ZERONIC_IOC_FLOW_QUERY_NR;

/// `ZERONIC_CQ_MIN_ENTRIES`, `ZERONIC_CQ_MAX_ENTRIES`: CQ sizes.
pub const CQ_MIN_ENTRIES: u32 = raw::ZERONIC_CQ_MIN_ENTRIES;
/// See [`CQ_MIN_ENTRIES`].
pub const CQ_MAX_ENTRIES: u32 = raw::ZERONIC_CQ_MAX_ENTRIES;
/// `ZERONIC_CQ_ARMED`: [`CqRing::flags`] bit the application sets.
pub const CQ_ARMED: u32 = raw::ZERONIC_CQ_ARMED;
/// `ZERONIC_RX_MESSAGE`: receive into posted segments.
pub const RX_MESSAGE: u32 = raw::ZERONIC_RX_MESSAGE;
/// `ZERONIC_RX_STREAM`: receive into a ring.
pub const RX_STREAM: u32 = raw::ZERONIC_RX_STREAM;
/// `ZERONIC_WR_SEND`: a send work request.
pub const WR_SEND: u16 = raw::ZERONIC_WR_SEND as u16;
/// `ZERONIC_WR_RECV`: a receive segment.
pub const WR_RECV: u16 = raw::ZERONIC_WR_RECV as u16;

/// `ZERONIC_ACCESS_*`: what the NIC may do with a registered region.
pub const ACCESS_LOCAL_READ: u32 = raw::ZERONIC_ACCESS_LOCAL_READ;
/// See [`ACCESS_LOCAL_READ`].
pub const ACCESS_LOCAL_WRITE: u32 = raw::ZERONIC_ACCESS_LOCAL_WRITE;

/// `ZERONIC_CAP_*`: the NIC's capabilities ([`Query::caps`]).
pub mod caps {
    use super::raw;
    /// Header/payload split and placement.
    pub const RX_SPLIT: u32 = raw::ZERONIC_CAP_RX_SPLIT;
    /// Header from the host, payload from a registered region.
    pub const TX_MERGE: u32 = raw::ZERONIC_CAP_TX_MERGE;
    /// Segmentation of merge sends.
    pub const TSO: u32 = raw::ZERONIC_CAP_TSO;
    /// Checksum insertion on plain TX.
    pub const TX_CSUM: u32 = raw::ZERONIC_CAP_TX_CSUM;
    /// TCP checksum verification on RX.
    pub const RX_CSUM: u32 = raw::ZERONIC_CAP_RX_CSUM;
    /// Coalesced header-queue entries.
    pub const RX_COALESCE: u32 = raw::ZERONIC_CAP_RX_COALESCE;
    /// Ring-buffer placement target.
    pub const RX_RING: u32 = raw::ZERONIC_CAP_RX_RING;
}

mod ioctls {
    use super::{MrDereg, MrReg, Query, IOC_MR_DEREG, IOC_MR_REG, IOC_QUERY};
    // The command words come from the header (see `raw`), hence the `_bad`
    // forms, which take the number as it is.
    nix::ioctl_readwrite_bad!(query, IOC_QUERY, Query);
    nix::ioctl_readwrite_bad!(mr_reg, IOC_MR_REG, MrReg);
    nix::ioctl_write_ptr_bad!(mr_dereg, IOC_MR_DEREG, MrDereg);
}

/// `ZERONIC_IOC_QUERY` of NIC `nic` through the open `/dev/zeronic` file `fd`.
pub fn query(fd: BorrowedFd<'_>, nic: u32) -> nix::Result<Query> {
    let mut q = Query {
        nic,
        ..Default::default()
    };
    // SAFETY: `q` is a valid, writable `struct zeronic_query` for the call.
    unsafe { ioctls::query(fd.as_raw_fd(), &mut q) }?;
    Ok(q)
}

/// `ZERONIC_IOC_MR_REG`: registers `[addr, addr + length)` of the calling
/// process's memory on NIC `nic` with `access` (`ACCESS_*`); returns the
/// region's key. The kernel checks the range; registering does not make the
/// NIC access it (that takes a flow, a later call).
pub fn mr_reg(
    fd: BorrowedFd<'_>,
    nic: u32,
    addr: u64,
    length: u64,
    access: u32,
) -> nix::Result<u64> {
    let mut r = MrReg {
        addr,
        length,
        nic,
        access,
        key: 0,
    };
    // SAFETY: `r` is a valid, writable `struct zeronic_mr_reg` for the call.
    unsafe { ioctls::mr_reg(fd.as_raw_fd(), &mut r) }?;
    Ok(r.key)
}

/// `ZERONIC_IOC_MR_DEREG`: deregisters the region `key` of NIC `nic` that
/// was registered through this file.
pub fn mr_dereg(fd: BorrowedFd<'_>, nic: u32, key: u64) -> nix::Result<()> {
    let d = MrDereg {
        key,
        nic,
        reserved: 0,
    };
    // SAFETY: `d` is a valid `struct zeronic_mr_dereg` for the call.
    unsafe { ioctls::mr_dereg(fd.as_raw_fd(), &d) }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The ABI pinned (docs/uapi.md): what the header says must not change
    //! without a new command number.
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn version_and_path() {
        assert_eq!(UAPI_VERSION, 3);
        assert_eq!(DEVICE_PATH.to_str(), Ok("/dev/zeronic"));
        assert_eq!(IOCTL_TYPE, 0xDA);
        assert_eq!(MAX_PORTS, 2);
    }

    #[test]
    fn struct_sizes() {
        assert_eq!(size_of::<Query>(), 120);
        assert_eq!(size_of::<PortInfo>(), 16);
        assert_eq!(size_of::<MrReg>(), 32);
        assert_eq!(size_of::<MrDereg>(), 16);
        assert_eq!(size_of::<CqCreate>(), 32);
        assert_eq!(size_of::<CqDestroy>(), 8);
        assert_eq!(size_of::<CqRing>(), 64);
        assert_eq!(size_of::<Cqe>(), 32);
        assert_eq!(size_of::<FlowAttach>(), 56);
        assert_eq!(size_of::<FlowDetach>(), 8);
        assert_eq!(size_of::<Wr>(), 32);
        assert_eq!(size_of::<Post>(), 24);
        assert_eq!(size_of::<StreamConsume>(), 16);
        assert_eq!(size_of::<FlowQuery>(), 80);
    }

    #[test]
    fn v3_layout() {
        assert_eq!(offset_of!(CqCreate, eventfd), 4);
        assert_eq!(offset_of!(CqCreate, cq), 8);
        assert_eq!(offset_of!(CqCreate, mmap_offset), 16);
        assert_eq!(offset_of!(CqCreate, mmap_size), 24);
        assert_eq!(offset_of!(CqRing, entries_offset), 16);
        assert_eq!(offset_of!(Cqe, len), 16);
        assert_eq!(offset_of!(Cqe, opcode), 24);
        assert_eq!(offset_of!(Cqe, flags), 28);
        assert_eq!(offset_of!(FlowAttach, ring_key), 16);
        assert_eq!(offset_of!(FlowAttach, flow), 40);
        assert_eq!(offset_of!(FlowAttach, reserved1), 52);
        assert_eq!(offset_of!(Wr, len), 24);
        assert_eq!(offset_of!(Wr, opcode), 28);
        assert_eq!(offset_of!(Post, wrs), 8);
        assert_eq!(offset_of!(Post, posted), 16);
        assert_eq!(offset_of!(StreamConsume, stream_off), 8);
        assert_eq!(offset_of!(FlowQuery, rx_posted), 56);
        assert_eq!(offset_of!(FlowQuery, reserved), 64);
    }

    #[test]
    fn query_layout() {
        assert_eq!(offset_of!(Query, nic), 0);
        assert_eq!(offset_of!(Query, num_nics), 4);
        assert_eq!(offset_of!(Query, mr_capacity), 24);
        assert_eq!(offset_of!(Query, mr_in_use), 28);
        assert_eq!(offset_of!(Query, mr_max_bytes), 32);
        assert_eq!(offset_of!(Query, pinned_pages), 40);
        assert_eq!(offset_of!(Query, flow_capacity), 48);
        assert_eq!(offset_of!(Query, ms_per_flow), 52);
        assert_eq!(offset_of!(Query, ports), 56);
        assert_eq!(offset_of!(Query, mr_user_max), 88);
        assert_eq!(offset_of!(Query, mr_user_in_use), 92);
        assert_eq!(offset_of!(Query, user_locked_pages), 96);
        assert_eq!(offset_of!(Query, held_pages), 104);
        assert_eq!(offset_of!(Query, flows_in_use), 112);
        assert_eq!(offset_of!(Query, reserved), 116);
        assert_eq!(offset_of!(PortInfo, ifindex), 0);
        assert_eq!(offset_of!(PortInfo, mtu), 4);
        assert_eq!(offset_of!(PortInfo, link), 8);
        assert_eq!(offset_of!(PortInfo, reserved), 12);
    }

    #[test]
    fn mr_layout() {
        assert_eq!(offset_of!(MrReg, addr), 0);
        assert_eq!(offset_of!(MrReg, length), 8);
        assert_eq!(offset_of!(MrReg, nic), 16);
        assert_eq!(offset_of!(MrReg, access), 20);
        assert_eq!(offset_of!(MrReg, key), 24);
        assert_eq!(offset_of!(MrDereg, key), 0);
        assert_eq!(offset_of!(MrDereg, nic), 8);
        assert_eq!(offset_of!(MrDereg, reserved), 12);
    }

    #[test]
    fn command_words() {
        assert_eq!(IOC_QUERY, 0xC078_DA00);
        assert_eq!(IOC_MR_REG, 0xC020_DA03);
        assert_eq!(IOC_MR_DEREG, 0x4010_DA04);
        // The same as the kernel's _IOWR/_IOW encoding of type, number, size.
        let t = IOCTL_TYPE;
        assert_eq!(
            IOC_QUERY as nix::sys::ioctl::ioctl_num_type,
            nix::request_code_readwrite!(t, 0x00, size_of::<Query>())
        );
        assert_eq!(
            IOC_MR_REG as nix::sys::ioctl::ioctl_num_type,
            nix::request_code_readwrite!(t, 0x03, size_of::<MrReg>())
        );
        assert_eq!(
            IOC_MR_DEREG as nix::sys::ioctl::ioctl_num_type,
            nix::request_code_write!(t, 0x04, size_of::<MrDereg>())
        );
        assert_eq!(IOC_CQ_CREATE, 0xC020_DA10);
        assert_eq!(IOC_CQ_DESTROY, 0x4008_DA11);
        assert_eq!(IOC_FLOW_ATTACH, 0xC038_DA12);
        assert_eq!(IOC_FLOW_DETACH, 0x4008_DA13);
        assert_eq!(IOC_POST, 0xC018_DA14);
        assert_eq!(IOC_STREAM_CONSUME, 0x4010_DA15);
        assert_eq!(IOC_FLOW_QUERY, 0xC050_DA16);
    }

    #[test]
    fn flags() {
        assert_eq!(ACCESS_LOCAL_READ, 1);
        assert_eq!(ACCESS_LOCAL_WRITE, 2);
        assert_eq!(caps::RX_SPLIT, 1 << 0);
        assert_eq!(caps::RX_RING, 1 << 6);
    }
}

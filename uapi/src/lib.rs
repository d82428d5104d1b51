//! The userspace ABI of `/dev/zeronic`, bound from
//! [`uapi/linux/zeronic.h`](../../linux/zeronic.h) by bindgen at build time
//! (`build.rs`), so the structs, constants and ioctl numbers are the header's
//! own. `docs/uapi.md` explains each call.
//!
//! - [`raw`]: everything bindgen generated, C names (`zeronic_query`, ...).
//! - The structs under their Rust names ([`Query`], [`MrReg`], ...), the
//!   constants without their `ZERONIC_` prefix, and the ioctl command words
//!   ([`IOC_QUERY`], [`IOC_MR_REG`], [`IOC_MR_DEREG`]).
//! - Thin wrappers of the three calls ([`query`], [`mr_reg`], [`mr_dereg`])
//!   returning the kernel's errno as [`nix::errno::Errno`].

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
    zeronic_mr_dereg as MrDereg, zeronic_mr_reg as MrReg, zeronic_port_info as PortInfo,
    zeronic_query as Query,
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
        assert_eq!(UAPI_VERSION, 2);
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
        assert_eq!(offset_of!(Query, reserved), 112);
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
    }

    #[test]
    fn flags() {
        assert_eq!(ACCESS_LOCAL_READ, 1);
        assert_eq!(ACCESS_LOCAL_WRITE, 2);
        assert_eq!(caps::RX_SPLIT, 1 << 0);
        assert_eq!(caps::RX_RING, 1 << 6);
    }
}

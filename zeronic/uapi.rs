// SPDX-License-Identifier: GPL-2.0

//! The ioctl ABI of `/dev/zeronic`: Rust mirrors of `uapi/linux/zeronic.h`.
//!
//! The header is the contract; these layouts repeat it field for field, their
//! sizes are pinned below, and `selftests/mr_test` checks the C side against
//! the same sizes. Every struct is plain integers with explicit padding, so
//! any byte pattern is a valid value and no byte is uninitialised.

use kernel::{
    ioctl::{
        _IOW,
        _IOWR, //
    },
    transmute::{
        AsBytes,
        FromBytes, //
    },
};

/// `ZERONIC_IOCTL_TYPE`.
const IOCTL_TYPE: u32 = 0xDA;

/// `ZERONIC_MAX_PORTS`.
pub(crate) const MAX_PORTS: usize = 2;

/// `ZERONIC_ACCESS_LOCAL_READ`.
pub(crate) const ACCESS_LOCAL_READ: u32 = 1 << 0;
/// `ZERONIC_ACCESS_LOCAL_WRITE`.
pub(crate) const ACCESS_LOCAL_WRITE: u32 = 1 << 1;

/// `struct zeronic_port_info`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct PortInfo {
    pub(crate) ifindex: u32,
    pub(crate) mtu: u32,
    pub(crate) link: u32,
    pub(crate) reserved: u32,
}

/// `struct zeronic_query`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct Query {
    pub(crate) nic: u32,
    pub(crate) num_nics: u32,
    pub(crate) hw_version: u32,
    pub(crate) caps: u32,
    pub(crate) num_ports: u32,
    pub(crate) max_mtu: u32,
    pub(crate) mr_capacity: u32,
    pub(crate) mr_in_use: u32,
    pub(crate) mr_max_bytes: u64,
    pub(crate) pinned_pages: u64,
    pub(crate) flow_capacity: u32,
    pub(crate) ms_per_flow: u32,
    pub(crate) ports: [PortInfo; MAX_PORTS],
    pub(crate) mr_user_max: u32,
    pub(crate) mr_user_in_use: u32,
    pub(crate) user_locked_pages: u64,
    pub(crate) held_pages: u64,
    pub(crate) reserved: [u64; 1],
}

/// `struct zeronic_mr_reg`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct MrReg {
    pub(crate) addr: u64,
    pub(crate) length: u64,
    pub(crate) nic: u32,
    pub(crate) access: u32,
    pub(crate) key: u64,
}

/// `struct zeronic_mr_dereg`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct MrDereg {
    pub(crate) key: u64,
    pub(crate) nic: u32,
    pub(crate) reserved: u32,
}

const _: () = assert!(size_of::<PortInfo>() == 16);
const _: () = assert!(size_of::<Query>() == 120);
const _: () = assert!(size_of::<MrReg>() == 32);
const _: () = assert!(size_of::<MrDereg>() == 16);

// SAFETY: All four are `repr(C)` structs of integers (and arrays of them)
// without padding (sizes pinned above): every byte pattern is a valid value.
unsafe impl FromBytes for PortInfo {}
// SAFETY: As above.
unsafe impl FromBytes for Query {}
// SAFETY: As above.
unsafe impl FromBytes for MrReg {}
// SAFETY: As above.
unsafe impl FromBytes for MrDereg {}
// SAFETY: As above: no padding, so every byte is initialised.
unsafe impl AsBytes for PortInfo {}
// SAFETY: As above.
unsafe impl AsBytes for Query {}
// SAFETY: As above.
unsafe impl AsBytes for MrReg {}

/// `ZERONIC_IOC_QUERY`.
pub(crate) const IOC_QUERY: u32 = _IOWR::<Query>(IOCTL_TYPE, 0x00);
/// `ZERONIC_IOC_MR_REG` (0x01 was its version 1, retired).
pub(crate) const IOC_MR_REG: u32 = _IOWR::<MrReg>(IOCTL_TYPE, 0x03);
/// `ZERONIC_IOC_MR_DEREG` (0x02 was its version 1, retired).
pub(crate) const IOC_MR_DEREG: u32 = _IOW::<MrDereg>(IOCTL_TYPE, 0x04);

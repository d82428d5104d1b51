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

/// `ZERONIC_CQ_MIN_ENTRIES`.
pub(crate) const CQ_MIN_ENTRIES: u32 = 8;
/// `ZERONIC_CQ_MAX_ENTRIES`.
pub(crate) const CQ_MAX_ENTRIES: u32 = 65536;
/// `ZERONIC_CQ_ARMED`.
pub(crate) const CQ_ARMED: u32 = 1 << 0;

/// `ZERONIC_CQE_SEND`.
pub(crate) const CQE_SEND: u16 = 1;
/// `ZERONIC_CQE_RECV`.
pub(crate) const CQE_RECV: u16 = 2;
/// `ZERONIC_CQE_STREAM_DATA`.
pub(crate) const CQE_STREAM_DATA: u16 = 3;
/// `ZERONIC_CQE_FLOW`.
pub(crate) const CQE_FLOW: u16 = 4;
/// `ZERONIC_CQE_F_EOF`.
pub(crate) const CQE_F_EOF: u32 = 1 << 0;
/// `ZERONIC_CQE_F_COPIED`.
pub(crate) const CQE_F_COPIED: u32 = 1 << 1;
/// `ZERONIC_CQE_F_DETACHED`.
pub(crate) const CQE_F_DETACHED: u32 = 1 << 2;

/// `ZERONIC_RX_MESSAGE`.
pub(crate) const RX_MESSAGE: u32 = 1;
/// `ZERONIC_RX_STREAM`.
pub(crate) const RX_STREAM: u32 = 2;
/// `ZERONIC_WR_SEND`.
pub(crate) const WR_SEND: u16 = 1;
/// `ZERONIC_WR_RECV`.
pub(crate) const WR_RECV: u16 = 2;
/// Work requests one `ZERONIC_IOC_POST` takes at most.
pub(crate) const POST_MAX: u32 = 256;

/// `ZERONIC_FLOW_ATTACHED`.
pub(crate) const FLOW_ATTACHED: u32 = 1;
/// `ZERONIC_FLOW_EOF`.
pub(crate) const FLOW_EOF: u32 = 2;
/// `ZERONIC_FLOW_RESET`.
pub(crate) const FLOW_RESET: u32 = 3;
/// `ZERONIC_FLOW_DETACHED`.
pub(crate) const FLOW_DETACHED: u32 = 4;

/// `struct zeronic_cq_create`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct CqCreate {
    pub(crate) entries: u32,
    pub(crate) eventfd: i32,
    pub(crate) cq: u32,
    pub(crate) reserved: u32,
    pub(crate) mmap_offset: u64,
    pub(crate) mmap_size: u64,
}

/// `struct zeronic_cq_destroy`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct CqDestroy {
    pub(crate) cq: u32,
    pub(crate) reserved: u32,
}

/// `struct zeronic_flow_attach`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct FlowAttach {
    pub(crate) sockfd: i32,
    pub(crate) cq: u32,
    pub(crate) rx_mode: u32,
    pub(crate) reserved0: u32,
    pub(crate) ring_key: u64,
    pub(crate) ring_offset: u64,
    pub(crate) ring_size: u64,
    pub(crate) flow: u32,
    pub(crate) nic: u32,
    pub(crate) port: u32,
    pub(crate) reserved1: u32,
}

/// `struct zeronic_flow_detach`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct FlowDetach {
    pub(crate) flow: u32,
    pub(crate) reserved: u32,
}

/// `struct zeronic_wr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct Wr {
    pub(crate) wr_id: u64,
    pub(crate) key: u64,
    pub(crate) offset: u64,
    pub(crate) len: u32,
    pub(crate) opcode: u16,
    pub(crate) flags: u16,
}

/// `struct zeronic_post`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct Post {
    pub(crate) flow: u32,
    pub(crate) count: u32,
    pub(crate) wrs: u64,
    pub(crate) posted: u32,
    pub(crate) reserved: u32,
}

/// `struct zeronic_stream_consume`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct StreamConsume {
    pub(crate) flow: u32,
    pub(crate) reserved: u32,
    pub(crate) stream_off: u64,
}

/// `struct zeronic_flow_query`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct FlowQuery {
    pub(crate) flow: u32,
    pub(crate) state: u32,
    pub(crate) rx_placed_bytes: u64,
    pub(crate) rx_copied_bytes: u64,
    pub(crate) tx_merged_bytes: u64,
    pub(crate) tx_copied_bytes: u64,
    pub(crate) rx_stream_off: u64,
    pub(crate) tx_stream_off: u64,
    pub(crate) rx_posted: u32,
    pub(crate) tx_posted: u32,
    pub(crate) reserved: [u64; 2],
}

const _: () = assert!(size_of::<CqCreate>() == 32);
const _: () = assert!(size_of::<CqDestroy>() == 8);
const _: () = assert!(size_of::<FlowAttach>() == 56);
const _: () = assert!(size_of::<FlowDetach>() == 8);
const _: () = assert!(size_of::<Wr>() == 32);
const _: () = assert!(size_of::<Post>() == 24);
const _: () = assert!(size_of::<StreamConsume>() == 16);
const _: () = assert!(size_of::<FlowQuery>() == 80);

// SAFETY: `repr(C)` structs of integers without padding (sizes pinned above):
// every byte pattern is a valid value, and every byte is initialised.
unsafe impl FromBytes for CqCreate {}
// SAFETY: As above.
unsafe impl AsBytes for CqCreate {}
// SAFETY: As above.
unsafe impl FromBytes for CqDestroy {}
// SAFETY: As above.
unsafe impl FromBytes for FlowAttach {}
// SAFETY: As above.
unsafe impl AsBytes for FlowAttach {}
// SAFETY: As above.
unsafe impl FromBytes for FlowDetach {}
// SAFETY: As above.
unsafe impl FromBytes for Wr {}
// SAFETY: As above.
unsafe impl FromBytes for Post {}
// SAFETY: As above.
unsafe impl AsBytes for Post {}
// SAFETY: As above.
unsafe impl FromBytes for StreamConsume {}
// SAFETY: As above.
unsafe impl FromBytes for FlowQuery {}
// SAFETY: As above.
unsafe impl AsBytes for FlowQuery {}

/// `ZERONIC_IOC_CQ_CREATE`.
pub(crate) const IOC_CQ_CREATE: u32 = _IOWR::<CqCreate>(IOCTL_TYPE, 0x10);
/// `ZERONIC_IOC_CQ_DESTROY`.
pub(crate) const IOC_CQ_DESTROY: u32 = _IOW::<CqDestroy>(IOCTL_TYPE, 0x11);
/// `ZERONIC_IOC_FLOW_ATTACH`.
pub(crate) const IOC_FLOW_ATTACH: u32 = _IOWR::<FlowAttach>(IOCTL_TYPE, 0x12);
/// `ZERONIC_IOC_FLOW_DETACH`.
pub(crate) const IOC_FLOW_DETACH: u32 = _IOW::<FlowDetach>(IOCTL_TYPE, 0x13);
/// `ZERONIC_IOC_POST`.
pub(crate) const IOC_POST: u32 = _IOWR::<Post>(IOCTL_TYPE, 0x14);
/// `ZERONIC_IOC_STREAM_CONSUME`.
pub(crate) const IOC_STREAM_CONSUME: u32 = _IOW::<StreamConsume>(IOCTL_TYPE, 0x15);
/// `ZERONIC_IOC_FLOW_QUERY`.
pub(crate) const IOC_FLOW_QUERY: u32 = _IOWR::<FlowQuery>(IOCTL_TYPE, 0x16);

/// `ZERONIC_IOC_QUERY`.
pub(crate) const IOC_QUERY: u32 = _IOWR::<Query>(IOCTL_TYPE, 0x00);
/// `ZERONIC_IOC_MR_REG` (0x01 was its version 1, retired).
pub(crate) const IOC_MR_REG: u32 = _IOWR::<MrReg>(IOCTL_TYPE, 0x03);
/// `ZERONIC_IOC_MR_DEREG` (0x02 was its version 1, retired).
pub(crate) const IOC_MR_DEREG: u32 = _IOW::<MrDereg>(IOCTL_TYPE, 0x04);

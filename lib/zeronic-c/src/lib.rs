//! C ABI of the ZeroNIC provider library: `libzeronic.so` and
//! `libzeronic.a`, declared by `include/libzeronic.h` (which
//! `tests/header.rs` checks against these definitions). Every call returns
//! 0 or a count on success and `-errno` on failure; objects are opaque
//! pointers freed by their destroy call. Linking the shared library also
//! installs the registration cache's memory hooks (`zn::memhooks!`).

#![allow(clippy::missing_safety_doc)]

use nix::libc::{c_char, c_int, c_uint, c_void, size_t};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;
use zn::cache::{CLease as ZnLease, CacheStats, Lease, RegCache};
use zn::{Cq, Cqe, Device, Flow, FlowQuery, Query, Region, RxMode};

zn::memhooks!();

/// `struct zn_device`.
pub struct ZnDevice(Arc<Device>);
/// `struct zn_mr`.
pub struct ZnMr(Region);
/// `struct zn_cq`.
pub struct ZnCq(Cq);
/// `struct zn_flow`.
pub struct ZnFlow(Flow);
/// `struct zn_cache`.
pub struct ZnCache(RegCache);

fn neg(e: zn::Error) -> c_int {
    -(e.errno as c_int)
}

macro_rules! deref {
    ($p:expr) => {
        // SAFETY: a handle made by this library, or null (the caller's
        // contract in the header).
        match unsafe { $p.as_ref() } {
            Some(r) => r,
            None => return -nix::libc::EINVAL,
        }
    };
}

macro_rules! out {
    ($p:expr, $v:expr) => {{
        if $p.is_null() {
            return -nix::libc::EINVAL;
        }
        // SAFETY: a non-null out pointer from the caller.
        unsafe { $p.write($v) };
    }};
}

/// The library's version string.
#[no_mangle]
pub extern "C" fn zn_version() -> *const c_char {
    c"zeronic 0.1.0 (uapi 3)".as_ptr()
}

/// Opens `/dev/zeronic` for NIC `nic`.
#[no_mangle]
pub unsafe extern "C" fn zn_open(nic: c_uint, out: *mut *mut ZnDevice) -> c_int {
    match Device::open(nic) {
        Ok(d) => {
            out!(out, Box::into_raw(Box::new(ZnDevice(d))));
            0
        }
        Err(e) => neg(e),
    }
}

/// Closes the device handle (objects made from it keep the file open
/// until they are destroyed too).
#[no_mangle]
pub unsafe extern "C" fn zn_close(dev: *mut ZnDevice) {
    if !dev.is_null() {
        // SAFETY: made by `zn_open`, freed once by the caller's contract.
        drop(unsafe { Box::from_raw(dev) });
    }
}

/// The `/dev/zeronic` file descriptor of the handle.
#[no_mangle]
pub unsafe extern "C" fn zn_device_fd(dev: *const ZnDevice) -> c_int {
    deref!(dev).0.fd().as_raw_fd()
}

/// `ZERONIC_IOC_QUERY`.
#[no_mangle]
pub unsafe extern "C" fn zn_query(dev: *const ZnDevice, out: *mut Query) -> c_int {
    match deref!(dev).0.query() {
        Ok(q) => {
            out!(out, q);
            0
        }
        Err(e) => neg(e),
    }
}

/// `ZERONIC_IOC_MR_REG` of `[addr, addr + len)`.
#[no_mangle]
pub unsafe extern "C" fn zn_reg_mr(
    dev: *const ZnDevice,
    addr: *mut c_void,
    len: size_t,
    access: c_uint,
    out: *mut *mut ZnMr,
) -> c_int {
    let d = deref!(dev);
    // SAFETY: C callers own the memory contract of the header.
    match unsafe { d.0.register_raw(addr.cast(), len, access) } {
        Ok(r) => {
            out!(out, Box::into_raw(Box::new(ZnMr(r))));
            0
        }
        Err(e) => neg(e),
    }
}

/// The region's key.
#[no_mangle]
pub unsafe extern "C" fn zn_mr_key(mr: *const ZnMr) -> u64 {
    // SAFETY: a region of `zn_reg_mr`, or null.
    unsafe { mr.as_ref() }.map_or(0, |m| m.0.key())
}

/// `ZERONIC_IOC_MR_DEREG`; frees the handle unless the result is -EBUSY.
#[no_mangle]
pub unsafe extern "C" fn zn_dereg_mr(mr: *mut ZnMr) -> c_int {
    if mr.is_null() {
        return -nix::libc::EINVAL;
    }
    // SAFETY: made by `zn_reg_mr`.
    let b = unsafe { Box::from_raw(mr) };
    match b.0.deregister() {
        Ok(()) => 0,
        Err((Some(r), e)) => {
            // SAFETY: writing the region back into the caller's handle.
            unsafe { mr.write(ZnMr(r)) };
            neg(e)
        }
        Err((None, e)) => neg(e),
    }
}

/// A completion queue of at least `entries` entries.
#[no_mangle]
pub unsafe extern "C" fn zn_cq_create(
    dev: *const ZnDevice,
    entries: c_uint,
    out: *mut *mut ZnCq,
) -> c_int {
    match deref!(dev).0.create_cq(entries) {
        Ok(c) => {
            out!(out, Box::into_raw(Box::new(ZnCq(c))));
            0
        }
        Err(e) => neg(e),
    }
}

/// Destroys a CQ (after the flows reporting to it are detached).
#[no_mangle]
pub unsafe extern "C" fn zn_cq_destroy(cq: *mut ZnCq) {
    if !cq.is_null() {
        // SAFETY: made by `zn_cq_create`, freed once.
        drop(unsafe { Box::from_raw(cq) });
    }
}

/// The CQ's eventfd: readable after `zn_cq_arm` returned 1 and an entry
/// came.
#[no_mangle]
pub unsafe extern "C" fn zn_cq_fd(cq: *const ZnCq) -> c_int {
    deref!(cq).0.eventfd().as_raw_fd()
}

/// Arms the CQ's wake-up: 1 if still empty (sleep on `zn_cq_fd` now), 0 if
/// entries are waiting.
#[no_mangle]
pub unsafe extern "C" fn zn_cq_arm(cq: *const ZnCq) -> c_int {
    c_int::from(deref!(cq).0.arm())
}

/// Pops up to `max` completions into `out`; returns how many.
#[no_mangle]
pub unsafe extern "C" fn zn_cq_poll(cq: *const ZnCq, out: *mut Cqe, max: c_int) -> c_int {
    let c = deref!(cq);
    if out.is_null() || max < 0 {
        return -nix::libc::EINVAL;
    }
    let mut n = 0;
    while n < max {
        let Some(e) = c.0.pop() else { break };
        // SAFETY: `out` has room for `max` entries (the caller's contract).
        unsafe { out.add(n as usize).write(e) };
        n += 1;
    }
    n
}

/// Sleeps until a completion is there (1), `timeout_ms` passed (0, never
/// sooner; negative: no limit) or a signal came (-EINTR).
#[no_mangle]
pub unsafe extern "C" fn zn_cq_wait(cq: *const ZnCq, timeout_ms: c_int) -> c_int {
    let t = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
    match deref!(cq).0.wait(t) {
        Ok(b) => c_int::from(b),
        Err(e) => neg(e),
    }
}

/// `ZERONIC_IOC_FLOW_ATTACH` of `sockfd`. `rx_mode`: `ZERONIC_RX_MESSAGE`,
/// or `ZERONIC_RX_STREAM` with the ring at `ring_offset` of region
/// `ring_key`, `ring_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn zn_flow_attach(
    dev: *const ZnDevice,
    sockfd: c_int,
    cq: *const ZnCq,
    rx_mode: c_uint,
    ring_key: u64,
    ring_offset: u64,
    ring_size: u64,
    out: *mut *mut ZnFlow,
) -> c_int {
    let d = deref!(dev);
    let c = deref!(cq);
    let mode = match rx_mode {
        zn::raw_rx::MESSAGE => RxMode::Message,
        zn::raw_rx::STREAM => RxMode::Stream {
            key: ring_key,
            offset: ring_offset,
            size: ring_size,
        },
        _ => return -nix::libc::EINVAL,
    };
    if sockfd < 0 {
        return -nix::libc::EBADF;
    }
    // SAFETY: only used for the call; the kernel checks the number.
    let sock = unsafe { BorrowedFd::borrow_raw(sockfd) };
    match d.0.attach(sock, &c.0, mode) {
        Ok(f) => {
            out!(out, Box::into_raw(Box::new(ZnFlow(f))));
            0
        }
        Err(e) => neg(e),
    }
}

/// The flow's id (as in its completions).
#[no_mangle]
pub unsafe extern "C" fn zn_flow_id(flow: *const ZnFlow) -> u32 {
    // SAFETY: a flow of `zn_flow_attach`, or null.
    unsafe { flow.as_ref() }.map_or(0, |f| f.0.id())
}

/// `ZERONIC_IOC_FLOW_DETACH`; frees the handle.
#[no_mangle]
pub unsafe extern "C" fn zn_flow_detach(flow: *mut ZnFlow) -> c_int {
    if flow.is_null() {
        return -nix::libc::EINVAL;
    }
    // SAFETY: made by `zn_flow_attach`, freed once.
    let b = unsafe { Box::from_raw(flow) };
    match b.0.detach() {
        Ok(()) => 0,
        Err(e) => neg(e),
    }
}

/// `ZERONIC_IOC_POST` of `count` work requests; returns how many were
/// accepted (fewer on EAGAIN), or -errno if none.
#[no_mangle]
pub unsafe extern "C" fn zn_post(flow: *const ZnFlow, wrs: *const zn::Wr, count: c_uint) -> c_int {
    let f = deref!(flow);
    if wrs.is_null() {
        return -nix::libc::EINVAL;
    }
    // SAFETY: `count` readable work requests (the caller's contract).
    let s = unsafe { std::slice::from_raw_parts(wrs, count as usize) };
    match f.0.post(s) {
        Ok(n) => n as c_int,
        Err(e) => neg(e),
    }
}

/// One send: 1 posted, 0 no CQ entry free now (reap and retry), -errno.
#[no_mangle]
pub unsafe extern "C" fn zn_post_send(
    flow: *const ZnFlow,
    wr_id: u64,
    key: u64,
    offset: u64,
    len: u32,
) -> c_int {
    match deref!(flow).0.post_send(wr_id, key, offset, len) {
        Ok(b) => c_int::from(b),
        Err(e) => neg(e),
    }
}

/// One message-mode receive segment: 1, 0 (EAGAIN), -errno.
#[no_mangle]
pub unsafe extern "C" fn zn_post_recv(
    flow: *const ZnFlow,
    wr_id: u64,
    key: u64,
    offset: u64,
    len: u32,
) -> c_int {
    match deref!(flow).0.post_recv(wr_id, key, offset, len) {
        Ok(b) => c_int::from(b),
        Err(e) => neg(e),
    }
}

/// `ZERONIC_IOC_STREAM_CONSUME`.
#[no_mangle]
pub unsafe extern "C" fn zn_stream_consume(flow: *const ZnFlow, stream_off: u64) -> c_int {
    match deref!(flow).0.consume(stream_off) {
        Ok(()) => 0,
        Err(e) => neg(e),
    }
}

/// `ZERONIC_IOC_FLOW_QUERY`.
#[no_mangle]
pub unsafe extern "C" fn zn_flow_query(flow: *const ZnFlow, out: *mut FlowQuery) -> c_int {
    match deref!(flow).0.query() {
        Ok(q) => {
            out!(out, q);
            0
        }
        Err(e) => neg(e),
    }
}

/// A registration cache of at most `max_entries` regions on `dev`.
#[no_mangle]
pub unsafe extern "C" fn zn_cache_create(
    dev: *const ZnDevice,
    max_entries: c_uint,
    out: *mut *mut ZnCache,
) -> c_int {
    let d = deref!(dev);
    out!(
        out,
        Box::into_raw(Box::new(ZnCache(RegCache::new(
            d.0.clone(),
            max_entries as usize
        ))))
    );
    0
}

/// A cached (or new) region covering `[addr, addr + len)` with `access`:
/// its key and the offset of `addr` in it. Give it back with
/// `zn_cache_put` once the work posted with it completed.
#[no_mangle]
pub unsafe extern "C" fn zn_cache_get(
    cache: *const ZnCache,
    addr: *const c_void,
    len: size_t,
    access: c_uint,
    lease: *mut ZnLease,
) -> c_int {
    let c = deref!(cache);
    // SAFETY: C callers own the memory contract of the header.
    match unsafe { c.0.get(addr.cast(), len, access) } {
        Ok(l) => {
            out!(
                lease,
                ZnLease {
                    key: l.key,
                    offset: l.offset,
                    start: l.start as u64,
                }
            );
            0
        }
        Err(e) => neg(e),
    }
}

/// Gives a lease back.
#[no_mangle]
pub unsafe extern "C" fn zn_cache_put(cache: *const ZnCache, lease: *const ZnLease) {
    // SAFETY: pointers from the caller, or null.
    let (Some(c), Some(l)) = (unsafe { cache.as_ref() }, unsafe { lease.as_ref() }) else {
        return;
    };
    c.0.put(Lease {
        key: l.key,
        offset: l.offset,
        start: l.start as usize,
    });
}

/// The cache's counters (`struct zn_cache_stats`).
#[no_mangle]
pub unsafe extern "C" fn zn_cache_stats(cache: *const ZnCache, out: *mut CacheStats) -> c_int {
    let c = deref!(cache);
    out!(out, c.0.stats());
    0
}

/// Destroys the cache (regions without leases are deregistered).
#[no_mangle]
pub unsafe extern "C" fn zn_cache_destroy(cache: *mut ZnCache) {
    if !cache.is_null() {
        // SAFETY: made by `zn_cache_create`, freed once.
        drop(unsafe { Box::from_raw(cache) });
    }
}

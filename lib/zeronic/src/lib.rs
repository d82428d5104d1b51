//! The ZeroNIC provider library: a safe Rust API over `/dev/zeronic`
//! (uapi version 3, `uapi/linux/zeronic.h`, explained in `docs/uapi.md`).
//!
//! - [`Device`]: an open `/dev/zeronic` file bound to one NIC index;
//!   [`Device::query`], [`Device::register`] ([`Region`]),
//!   [`Device::create_cq`] ([`Cq`]) and [`Device::attach`] ([`Flow`]).
//! - [`Flow`]: post sends and receives ([`Flow::post`], [`Flow::post_send`],
//!   [`Flow::post_recv`]), return stream-ring space ([`Flow::consume`]),
//!   read its state and counters ([`Flow::query`]), [`Flow::detach`].
//! - [`Cq`]: reap completions without system calls ([`Cq::pop`]), or sleep
//!   until one comes through the CQ's eventfd ([`Cq::wait`],
//!   [`Cq::wait_once`], or [`Cq::arm`] plus `poll`/`epoll` on
//!   [`Cq::eventfd`]).
//! - [`Buffer`]: page-aligned anonymous memory to register.
//! - [`CqRingView`]: the ring of a CQ mapped by the caller (what [`Cq`]
//!   reads its own mapping through), for tools that create and map CQs
//!   with raw ioctls; [`open_device_file`] for their `/dev/zeronic` files.
//! - [`cache::RegCache`]: a registration cache keyed by address that is
//!   kept from going stale by [`cache::invalidate_range`], which the memory
//!   hooks of the C library and of the shim call (see `docs/shim.md`).
//!
//! - [`ulp`]: attaching a socket by `setsockopt(TCP_ULP, "zeronic")`
//!   instead: the ULP's name and what a refusal's errno means.
//!
//! Errors carry the call and the kernel's errno ([`Error`]); the errnos are
//! the ones `docs/uapi.md` documents for each call.

pub mod cache;
pub mod hooks;
mod ring;
pub mod ulp;

pub use ring::CqRingView;

#[doc(hidden)]
pub use nix;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::mman::{madvise, mmap, mmap_anonymous, munmap, MapFlags, MmapAdvise, ProtFlags};
use std::ffi::c_void;
use std::fs::{File, OpenOptions};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};
use zeronic_uapi::{self as zu, raw};

pub use zu::{caps, Cqe, FlowQuery, Query, Wr};

/// A failed call: which one, and the errno the kernel gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{op}: {errno}")]
pub struct Error {
    /// The call (`"MR_REG"`, `"POST"`, ...).
    pub op: &'static str,
    /// The kernel's errno.
    pub errno: Errno,
}

/// Result of the library's calls.
pub type Result<T> = std::result::Result<T, Error>;

trait Ctx<T> {
    fn op(self, op: &'static str) -> Result<T>;
}

impl<T> Ctx<T> for nix::Result<T> {
    fn op(self, op: &'static str) -> Result<T> {
        self.map_err(|errno| Error { op, errno })
    }
}

/// `ZERONIC_CQE_*` opcodes.
pub const CQE_SEND: u16 = raw::ZERONIC_CQE_SEND as u16;
/// A message-mode receive segment completed.
pub const CQE_RECV: u16 = raw::ZERONIC_CQE_RECV as u16;
/// Stream mode: new bytes in the ring.
pub const CQE_STREAM_DATA: u16 = raw::ZERONIC_CQE_STREAM_DATA as u16;
/// A flow event (EOF, reset, detached).
pub const CQE_FLOW: u16 = raw::ZERONIC_CQE_FLOW as u16;
/// `ZERONIC_CQE_F_*` flags.
pub const CQE_F_EOF: u32 = raw::ZERONIC_CQE_F_EOF;
/// Some bytes were copied by the CPU.
pub const CQE_F_COPIED: u32 = raw::ZERONIC_CQE_F_COPIED;
/// The flow is detached; its last entry.
pub const CQE_F_DETACHED: u32 = raw::ZERONIC_CQE_F_DETACHED;
/// `ZERONIC_WR_*` opcodes.
pub const WR_SEND: u16 = raw::ZERONIC_WR_SEND as u16;
/// A message-mode receive segment.
pub const WR_RECV: u16 = raw::ZERONIC_WR_RECV as u16;
/// Work requests one `ZERONIC_IOC_POST` takes at most.
pub const POST_MAX: usize = 256;
/// Entries a CQ has at least ([`Device::create_cq`] rounds up to it).
pub const CQ_MIN_ENTRIES: u32 = zu::CQ_MIN_ENTRIES;
/// Entries a CQ has at most ([`Device::create_cq`] rounds down to it).
pub const CQ_MAX_ENTRIES: u32 = zu::CQ_MAX_ENTRIES;
/// The NIC may read the region (sends).
pub const ACCESS_READ: u32 = zu::ACCESS_LOCAL_READ;
/// The NIC may write the region (receives).
pub const ACCESS_WRITE: u32 = zu::ACCESS_LOCAL_WRITE;
/// `ZERONIC_FLOW_*` states of [`FlowQuery::state`].
pub const FLOW_ATTACHED: u32 = raw::ZERONIC_FLOW_ATTACHED;
/// The peer's FIN was received.
pub const FLOW_EOF: u32 = raw::ZERONIC_FLOW_EOF;
/// The connection died.
pub const FLOW_RESET: u32 = raw::ZERONIC_FLOW_RESET;
/// The flow was detached.
pub const FLOW_DETACHED: u32 = raw::ZERONIC_FLOW_DETACHED;

/// `ZERONIC_RX_*` receive modes (for the C ABI).
pub mod raw_rx {
    /// Posted receive segments.
    pub const MESSAGE: u32 = super::raw::ZERONIC_RX_MESSAGE;
    /// A receive ring.
    pub const STREAM: u32 = super::raw::ZERONIC_RX_STREAM;
}

mod ioc {
    use zeronic_uapi::*;
    nix::ioctl_readwrite_bad!(cq_create, IOC_CQ_CREATE, CqCreate);
    nix::ioctl_write_ptr_bad!(cq_destroy, IOC_CQ_DESTROY, CqDestroy);
    nix::ioctl_readwrite_bad!(flow_attach, IOC_FLOW_ATTACH, FlowAttach);
    nix::ioctl_write_ptr_bad!(flow_detach, IOC_FLOW_DETACH, FlowDetach);
    nix::ioctl_readwrite_bad!(post, IOC_POST, Post);
    nix::ioctl_write_ptr_bad!(stream_consume, IOC_STREAM_CONSUME, StreamConsume);
    nix::ioctl_readwrite_bad!(flow_query, IOC_FLOW_QUERY, FlowQuery);
}

/// Name of a `ZERONIC_FLOW_*` state.
pub fn flow_state_name(state: u32) -> &'static str {
    match state {
        FLOW_ATTACHED => "attached",
        FLOW_EOF => "eof",
        FLOW_RESET => "reset",
        FLOW_DETACHED => "detached",
        _ => "unknown",
    }
}

/// Opens `/dev/zeronic` read-write and close-on-exec, bound to no NIC: the
/// file [`Device::open`] wraps, for callers that make the ioctls
/// themselves (a fuzzer's deliberately malformed arguments).
pub fn open_device_file() -> Result<File> {
    let path = zu::DEVICE_PATH.to_str().expect("ASCII path");
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error {
            op: "open /dev/zeronic",
            errno: Errno::from_raw(e.raw_os_error().unwrap_or(nix::libc::EIO)),
        })
}

/// An open `/dev/zeronic` file and the NIC index its objects use.
#[derive(Debug)]
pub struct Device {
    file: File,
    nic: u32,
}

impl Device {
    /// Opens `/dev/zeronic` (close-on-exec) for NIC `nic`, checking that the
    /// NIC exists (ENODEV otherwise).
    pub fn open(nic: u32) -> Result<Arc<Self>> {
        let file = open_device_file()?;
        zu::query(file.as_fd(), nic).op("QUERY")?;
        Ok(Arc::new(Self { file, nic }))
    }

    /// The NIC index.
    pub fn nic(&self) -> u32 {
        self.nic
    }

    /// The `/dev/zeronic` file descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// `ZERONIC_IOC_QUERY` of the NIC.
    pub fn query(&self) -> Result<Query> {
        zu::query(self.fd(), self.nic).op("QUERY")
    }

    /// `ZERONIC_IOC_MR_REG` of all of `buf`.
    pub fn register(self: &Arc<Self>, buf: &Buffer, access: u32) -> Result<Region> {
        // SAFETY: `buf` is memory owned by a `Buffer`, whose accessors are
        // unsafe exactly because the NIC may access it.
        unsafe { self.register_raw(buf.as_ptr(), buf.len(), access) }
    }

    /// `ZERONIC_IOC_MR_REG` of `[addr, addr + len)`.
    ///
    /// # Safety
    /// With [`ACCESS_WRITE`], a flow's receives may make the NIC write the
    /// memory: the caller must not hold Rust references to it while posted
    /// work covers it. The region keeps the pages it pinned even if the
    /// memory is unmapped (see `docs/uapi.md`).
    pub unsafe fn register_raw(
        self: &Arc<Self>,
        addr: *const u8,
        len: usize,
        access: u32,
    ) -> Result<Region> {
        let key = zu::mr_reg(self.fd(), self.nic, addr as u64, len as u64, access).op("MR_REG")?;
        Ok(Region {
            dev: self.clone(),
            key,
            addr: addr as usize,
            len,
            access,
        })
    }

    /// A completion queue of `entries` (rounded up to a power of two within
    /// the kernel's bounds, 8 .. 65536) with an eventfd to sleep on.
    pub fn create_cq(self: &Arc<Self>, entries: u32) -> Result<Cq> {
        let entries = entries
            .clamp(CQ_MIN_ENTRIES, CQ_MAX_ENTRIES)
            .next_power_of_two();
        let efd = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .op("eventfd")?;
        let mut c = zu::CqCreate {
            entries,
            eventfd: efd.as_raw_fd(),
            ..Default::default()
        };
        // SAFETY: `c` is a valid, writable `struct zeronic_cq_create`.
        unsafe { ioc::cq_create(self.file.as_raw_fd(), &mut c) }.op("CQ_CREATE")?;
        let destroy = |id| {
            let d = zu::CqDestroy {
                cq: id,
                reserved: 0,
            };
            // SAFETY: a valid `struct zeronic_cq_destroy`.
            let _ = unsafe { ioc::cq_destroy(self.file.as_raw_fd(), &d) };
        };
        let Some(len) = NonZeroUsize::new(c.mmap_size as usize) else {
            destroy(c.cq);
            return Err(Error {
                op: "CQ_CREATE",
                errno: Errno::EIO,
            });
        };
        // SAFETY: a new shared mapping of the CQ the kernel describes, at an
        // address of the kernel's choice.
        let map = unsafe {
            mmap(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                &self.file,
                c.mmap_offset as i64,
            )
        };
        let map = match map {
            Ok(m) => m.cast::<u8>(),
            Err(e) => {
                destroy(c.cq);
                return Err(Error {
                    op: "mmap of the CQ",
                    errno: e,
                });
            }
        };
        // SAFETY: the mapping just made, of `len` bytes from the CQ's
        // `mmap_offset`; the `Cq` below owns it and unmaps it only when
        // dropped, with the view; it is the ring's one consumer.
        let ring = unsafe { CqRingView::new(map, len.get()) };
        let ring = match ring {
            Ok(r) if r.entries() == u64::from(entries) => r,
            Ok(_) | Err(_) => {
                // SAFETY: the mapping just made, not used after this.
                let _ = unsafe { munmap(map.cast::<c_void>(), len.get()) };
                destroy(c.cq);
                return Err(Error {
                    op: "CQ mapping",
                    errno: Errno::EIO,
                });
            }
        };
        Ok(Cq {
            dev: self.clone(),
            id: c.cq,
            ring,
            map_len: len.get(),
            efd,
        })
    }

    /// `ZERONIC_IOC_FLOW_ATTACH` of the established TCP socket `sock`,
    /// reporting to `cq`. The flow is detached when the [`Flow`] is dropped.
    pub fn attach(self: &Arc<Self>, sock: BorrowedFd<'_>, cq: &Cq, mode: RxMode) -> Result<Flow> {
        let (rx_mode, ring_key, ring_offset, ring_size) = match mode {
            RxMode::Message => (raw::ZERONIC_RX_MESSAGE, 0, 0, 0),
            RxMode::Stream { key, offset, size } => (raw::ZERONIC_RX_STREAM, key, offset, size),
        };
        let mut a = zu::FlowAttach {
            sockfd: sock.as_raw_fd(),
            cq: cq.id,
            rx_mode,
            ring_key,
            ring_offset,
            ring_size,
            ..Default::default()
        };
        // SAFETY: a valid, writable `struct zeronic_flow_attach`.
        unsafe { ioc::flow_attach(self.file.as_raw_fd(), &mut a) }.op("FLOW_ATTACH")?;
        Ok(Flow {
            dev: self.clone(),
            id: a.flow,
            nic: a.nic,
            port: a.port,
            detached: false,
        })
    }
}

/// Receive mode of a flow (`ZERONIC_RX_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxMode {
    /// Posted receive segments ([`Flow::post_recv`]).
    Message,
    /// A receive ring of `size` bytes (a power of two, at least 4096) at
    /// `offset` of the region `key` (registered with [`ACCESS_WRITE`]).
    Stream {
        /// The ring's region.
        key: u64,
        /// Ring start in the region.
        offset: u64,
        /// Ring bytes.
        size: u64,
    },
}

/// An attached TCP connection.
#[derive(Debug)]
pub struct Flow {
    dev: Arc<Device>,
    id: u32,
    nic: u32,
    port: u32,
    detached: bool,
}

impl Flow {
    /// The flow's id within its file.
    pub fn id(&self) -> u32 {
        self.id
    }
    /// The NIC the flow runs on.
    pub fn nic(&self) -> u32 {
        self.nic
    }
    /// The port of that NIC.
    pub fn port(&self) -> u32 {
        self.port
    }

    /// `ZERONIC_IOC_POST` of `wrs` in batches of [`POST_MAX`]. Returns how
    /// many were accepted: all, or fewer when the CQ had no free entry (or
    /// the flow its maximum of receive segments) for the next one (EAGAIN:
    /// post the rest after reaping completions). Other refusals are errors.
    pub fn post(&self, wrs: &[Wr]) -> Result<usize> {
        let mut done = 0;
        for batch in wrs.chunks(POST_MAX) {
            let mut p = zu::Post {
                flow: self.id,
                count: batch.len() as u32,
                wrs: batch.as_ptr() as u64,
                ..Default::default()
            };
            // SAFETY: a valid, writable `struct zeronic_post` whose `wrs`
            // points at `count` readable work requests.
            let r = unsafe { ioc::post(self.dev.file.as_raw_fd(), &mut p) };
            match r {
                Ok(_) => done += batch.len(),
                Err(Errno::EAGAIN) => return Ok(done + p.posted as usize),
                Err(errno) => {
                    if done + p.posted as usize > 0 {
                        return Ok(done + p.posted as usize);
                    }
                    return Err(Error { op: "POST", errno });
                }
            }
        }
        Ok(done)
    }

    fn post_one(&self, wr: Wr) -> Result<bool> {
        Ok(self.post(std::slice::from_ref(&wr))? == 1)
    }

    /// Posts one send of `len` bytes at `offset` of region `key`. `Ok(false)`:
    /// no free CQ entry now (EAGAIN), retry after reaping.
    pub fn post_send(&self, wr_id: u64, key: u64, offset: u64, len: u32) -> Result<bool> {
        self.post_one(Wr {
            wr_id,
            key,
            offset,
            len,
            opcode: WR_SEND,
            flags: 0,
        })
    }

    /// Posts one message-mode receive segment. `Ok(false)`: EAGAIN.
    pub fn post_recv(&self, wr_id: u64, key: u64, offset: u64, len: u32) -> Result<bool> {
        self.post_one(Wr {
            wr_id,
            key,
            offset,
            len,
            opcode: WR_RECV,
            flags: 0,
        })
    }

    /// `ZERONIC_IOC_STREAM_CONSUME`: ring bytes below `stream_off` are free.
    pub fn consume(&self, stream_off: u64) -> Result<()> {
        let c = zu::StreamConsume {
            flow: self.id,
            reserved: 0,
            stream_off,
        };
        // SAFETY: a valid `struct zeronic_stream_consume`.
        unsafe { ioc::stream_consume(self.dev.file.as_raw_fd(), &c) }.op("STREAM_CONSUME")?;
        Ok(())
    }

    /// `ZERONIC_IOC_FLOW_QUERY`: state and counters.
    pub fn query(&self) -> Result<FlowQuery> {
        let mut q = FlowQuery {
            flow: self.id,
            ..Default::default()
        };
        // SAFETY: a valid, writable `struct zeronic_flow_query`.
        unsafe { ioc::flow_query(self.dev.file.as_raw_fd(), &mut q) }.op("FLOW_QUERY")?;
        Ok(q)
    }

    /// `ZERONIC_IOC_FLOW_DETACH`. After it the socket's data path is over
    /// (its plain I/O keeps failing, `docs/uapi.md`).
    pub fn detach(mut self) -> Result<()> {
        self.detached = true;
        self.detach_raw()
    }

    fn detach_raw(&self) -> Result<()> {
        let d = zu::FlowDetach {
            flow: self.id,
            reserved: 0,
        };
        // SAFETY: a valid `struct zeronic_flow_detach`.
        unsafe { ioc::flow_detach(self.dev.file.as_raw_fd(), &d) }.op("FLOW_DETACH")?;
        Ok(())
    }

    /// Forgets the flow without detaching it (a forked child's copy of a
    /// flow its parent still runs).
    pub fn forget(mut self) {
        self.detached = true;
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        if !self.detached {
            // ENOENT: already gone (socket closed); nothing else to do.
            let _ = self.detach_raw();
        }
    }
}

/// Page-aligned, populated anonymous memory, not inherited by `fork()`
/// (`MADV_DONTFORK`: a child must not see pages a NIC may still write).
#[derive(Debug)]
pub struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: plain memory owned by this value; shared access goes through the
// unsafe accessors.
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// `len` bytes (nonzero), zeroed.
    pub fn new(len: usize) -> Result<Self> {
        let n = NonZeroUsize::new(len).ok_or(Error {
            op: "Buffer::new",
            errno: Errno::EINVAL,
        })?;
        // SAFETY: a new private anonymous mapping at the kernel's choice.
        let p = unsafe {
            mmap_anonymous(
                None,
                n,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_POPULATE,
            )
        }
        .op("mmap")?;
        // SAFETY: the mapping just made, of `len` bytes.
        unsafe { madvise(p, len, MmapAdvise::MADV_DONTFORK) }.op("madvise(DONTFORK)")?;
        Ok(Self { ptr: p.cast(), len })
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: buffers are nonzero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The bytes `[off, off + len)`.
    ///
    /// # Safety
    /// No posted work may make the NIC write them while the slice lives.
    pub unsafe fn slice(&self, off: usize, len: usize) -> &[u8] {
        assert!(off.checked_add(len).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds; no concurrent writer by the caller's contract.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }

    /// The bytes `[off, off + len)`, to fill.
    ///
    /// # Safety
    /// No posted work may cover them while the slice lives, and no other
    /// slice of them may exist.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, off: usize, len: usize) -> &mut [u8] {
        assert!(off.checked_add(len).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds; exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, not used after this.
        let _ = unsafe { munmap(self.ptr.cast::<c_void>(), self.len) };
    }
}

/// A registered region; deregistered when dropped (drop it after the work
/// posted from it completed, or MR_DEREG fails with EBUSY and the region
/// stays until the file is closed).
#[derive(Debug)]
pub struct Region {
    dev: Arc<Device>,
    key: u64,
    addr: usize,
    len: usize,
    access: u32,
}

impl Region {
    /// The region's key.
    pub fn key(&self) -> u64 {
        self.key
    }
    /// Its first byte's address.
    pub fn addr(&self) -> usize {
        self.addr
    }
    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Never: regions are nonzero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Its `ACCESS_*`.
    pub fn access(&self) -> u32 {
        self.access
    }

    /// `ZERONIC_IOC_MR_DEREG`, reporting the errno. EBUSY (posted work
    /// still uses it) hands the region back; any other error means it is
    /// gone from the file anyway (ENOENT, EIO).
    pub fn deregister(self) -> std::result::Result<(), (Option<Region>, Error)> {
        let r = zu::mr_dereg(self.dev.fd(), self.dev.nic, self.key);
        match r {
            Ok(()) => {
                self.forget();
                Ok(())
            }
            Err(Errno::EBUSY) => Err((
                Some(self),
                Error {
                    op: "MR_DEREG",
                    errno: Errno::EBUSY,
                },
            )),
            Err(errno) => {
                self.forget();
                Err((
                    None,
                    Error {
                        op: "MR_DEREG",
                        errno,
                    },
                ))
            }
        }
    }

    /// Forgets the region without deregistering it (a forked child's copy
    /// of its parent's registration: the file is shared, the pages are the
    /// parent's).
    pub fn forget(self) {
        // The `Arc<Device>` is released; only the MR_DEREG is skipped.
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; its `dev` is moved
        // out exactly once.
        drop(unsafe { std::ptr::read(&me.dev) });
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = zu::mr_dereg(self.dev.fd(), self.dev.nic, self.key);
    }
}

/// A mapped completion queue.
#[derive(Debug)]
pub struct Cq {
    dev: Arc<Device>,
    id: u32,
    /// The ring in the mapping this value owns (`map_len` bytes at
    /// `ring.base()`).
    ring: CqRingView,
    map_len: usize,
    efd: EventFd,
}

// SAFETY: the mapping is owned by this value; the shared words are accessed
// atomically, and entries only by the (single) consumer holding `&self`
// while no other thread pops (callers serialise `pop`, as a verbs CQ).
unsafe impl Send for Cq {}

impl Cq {
    /// The CQ's id in its file.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Entries the CQ holds (a power of two).
    pub fn entries(&self) -> u32 {
        // CAST: `create_cq` checked it equals the `u32` it asked for.
        self.ring.entries() as u32
    }

    /// The next completion, if any (no system call).
    pub fn pop(&self) -> Option<Cqe> {
        self.ring.pop()
    }

    /// Whether an entry is waiting.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// The ring's `head` and `tail` now (entries consumed and produced,
    /// modulo 2^32), for diagnostics such as a stall report.
    pub fn indices(&self) -> (u32, u32) {
        self.ring.indices()
    }

    /// Arms the CQ for a wake-up through its eventfd. `true` if it is still
    /// empty after arming, so sleeping on [`Cq::eventfd`] now loses nothing;
    /// `false`: entries came, pop them first.
    pub fn arm(&self) -> bool {
        self.ring.arm().1
    }

    /// Arms the CQ as [`Cq::arm`] does, and also says whether it was still
    /// armed: `(was_armed, empty)`. The kernel clears `ARMED` when it adds
    /// entries to an armed CQ and then signals the eventfd, so a CQ armed
    /// before and found not armed now had its eventfd signalled in between
    /// (what lets a caller skip reading or writing the eventfd).
    pub fn arm_checked(&self) -> (bool, bool) {
        self.ring.arm()
    }

    /// The eventfd the kernel signals when it adds entries to an armed CQ
    /// (non-blocking, close-on-exec). Read it with [`Cq::clear_event`].
    pub fn eventfd(&self) -> BorrowedFd<'_> {
        self.efd.as_fd()
    }

    /// Resets the eventfd's counter (nothing if it was not signalled).
    pub fn clear_event(&self) {
        let mut v = 0u64;
        // The system call itself, not libc's `read`: an `LD_PRELOAD` shim
        // interposing `read` may call this with its own locks held.
        // SAFETY: an 8-byte read from the CQ's (non-blocking) eventfd.
        let _ = unsafe {
            nix::libc::syscall(
                nix::libc::SYS_read,
                self.efd.as_raw_fd(),
                &raw mut v,
                8usize,
            )
        };
    }

    /// Sleeps until the CQ holds an entry or `timeout` passes (`None`: no
    /// limit). `Ok(true)` if an entry is there, `Ok(false)` on timeout;
    /// EINTR when a signal interrupted the sleep.
    ///
    /// A wake-up that finds the CQ empty (the eventfd signalled for entries
    /// the caller has already polled) sleeps again for the time left: it is
    /// not a timeout.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if self.wait_once(left)? {
                return Ok(true);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
        }
    }

    /// One sleep of [`Cq::wait`]: arms the CQ and, if it is still empty,
    /// sleeps on its eventfd until that is signalled or `timeout` passes
    /// (`None`: no limit), then resets the eventfd. Returns whether an entry
    /// is waiting; EINTR when a signal interrupted the sleep.
    ///
    /// Unlike [`Cq::wait`] it returns after any wake-up, also one for
    /// entries the caller has already popped: for an event loop that has
    /// other work to look at after each wake-up (zn-perf's flows), which
    /// then runs its loop once more before it sleeps again.
    pub fn wait_once(&self, timeout: Option<Duration>) -> Result<bool> {
        if !self.arm() {
            return Ok(true);
        }
        let to = match timeout {
            None => PollTimeout::NONE,
            // Rounded up: poll() returning 0 then means `timeout` passed (a
            // truncated 0 ms poll would end the wait early).
            Some(t) => {
                let ms = t.as_nanos().div_ceil(1_000_000);
                PollTimeout::try_from(ms.min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = [PollFd::new(self.efd.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, to).op("poll of the CQ's eventfd")?;
        self.clear_event();
        Ok(!self.is_empty())
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `create_cq`, not used after this (the
        // view goes with `self`).
        let _ = unsafe { munmap(self.ring.base().cast::<c_void>(), self.map_len) };
        let d = zu::CqDestroy {
            cq: self.id,
            reserved: 0,
        };
        // SAFETY: a valid `struct zeronic_cq_destroy`. EBUSY (a flow still
        // reports to it): released with the file.
        let _ = unsafe { ioc::cq_destroy(self.dev.file.as_raw_fd(), &d) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_is_zeroed_and_aligned() {
        let b = Buffer::new(10000).unwrap();
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        // SAFETY: no NIC involved.
        let s = unsafe { b.slice(0, b.len()) };
        assert!(s.iter().all(|&x| x == 0));
    }

    #[test]
    fn empty_buffer_is_einval() {
        assert_eq!(Buffer::new(0).unwrap_err().errno, Errno::EINVAL);
    }

    #[test]
    fn open_without_device_reports_open() {
        if std::path::Path::new("/dev/zeronic").exists() {
            return;
        }
        let e = Device::open(0).unwrap_err();
        assert_eq!(e.op, "open /dev/zeronic");
        assert_eq!(e.errno, Errno::ENOENT);
    }

    #[test]
    fn flow_state_names() {
        assert_eq!(flow_state_name(FLOW_EOF), "eof");
        assert_eq!(flow_state_name(99), "unknown");
    }
}

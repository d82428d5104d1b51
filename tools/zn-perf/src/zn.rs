//! `/dev/zeronic` for zn-perf: registered buffers, completion queues and
//! flows (uapi version 3, `uapi/linux/zeronic.h`, `docs/uapi.md`), as thin
//! safe wrappers. Everything unsafe of the tool is here.

use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::mman::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};
use std::fs::{File, OpenOptions};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zeronic_uapi::{self as zu, raw};

pub use zu::{Cqe, FlowQuery, Wr};

/// `ZERONIC_CQE_*` opcodes.
pub const CQE_SEND: u16 = raw::ZERONIC_CQE_SEND as u16;
pub const CQE_RECV: u16 = raw::ZERONIC_CQE_RECV as u16;
pub const CQE_STREAM_DATA: u16 = raw::ZERONIC_CQE_STREAM_DATA as u16;
pub const CQE_FLOW: u16 = raw::ZERONIC_CQE_FLOW as u16;
/// `ZERONIC_CQE_F_*` flags.
pub const CQE_F_EOF: u32 = raw::ZERONIC_CQE_F_EOF;
pub const CQE_F_COPIED: u32 = raw::ZERONIC_CQE_F_COPIED;
pub const CQE_F_DETACHED: u32 = raw::ZERONIC_CQE_F_DETACHED;
/// `ZERONIC_WR_*` opcodes.
pub const WR_SEND: u16 = raw::ZERONIC_WR_SEND as u16;
pub const WR_RECV: u16 = raw::ZERONIC_WR_RECV as u16;
/// Work requests one `ZERONIC_IOC_POST` takes at most.
pub const POST_MAX: usize = 256;
/// CQ sizes the kernel accepts.
pub const CQ_MIN: u32 = raw::ZERONIC_CQ_MIN_ENTRIES;
pub const CQ_MAX: u32 = raw::ZERONIC_CQ_MAX_ENTRIES;

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

/// Receive mode of a flow (`ZERONIC_RX_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxMode {
    /// Posted receive segments.
    Message,
    /// A receive ring (`ring_key`, `ring_size`).
    Stream { ring_key: u64, ring_size: u64 },
}

/// An open `/dev/zeronic` file and the NIC index its objects use.
pub struct Device {
    file: File,
    nic: u32,
}

impl Device {
    /// Opens the device for NIC `nic`, checking that the NIC exists.
    pub fn open(nic: u32) -> Result<Arc<Self>> {
        let path = zu::DEVICE_PATH.to_str().expect("ASCII path");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::libc::O_CLOEXEC)
            .open(path)
            .with_context(|| format!("opening {path} (is the zeronic module loaded?)"))?;
        let q = zu::query(file.as_fd(), nic).with_context(|| format!("QUERY of NIC {nic}"))?;
        let need = zu::caps::RX_SPLIT | zu::caps::TX_MERGE;
        if q.caps & need != need {
            bail!("NIC {nic} lacks RX_SPLIT/TX_MERGE (caps {:#x})", q.caps);
        }
        Ok(Arc::new(Self { file, nic }))
    }

    /// `ZERONIC_IOC_QUERY` of the NIC: capacities and the NIC-wide counters.
    pub fn query(&self) -> Result<zu::Query> {
        zu::query(self.fd(), self.nic).with_context(|| format!("QUERY of NIC {}", self.nic))
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// `ZERONIC_IOC_MR_REG` of all of `buf`.
    pub fn register(self: &Arc<Self>, buf: &Buffer, access: u32) -> Result<Region> {
        let key = zu::mr_reg(
            self.fd(),
            self.nic,
            buf.ptr.as_ptr() as u64,
            buf.len as u64,
            access,
        )
        .with_context(|| format!("MR_REG of {} bytes (access {access:#x})", buf.len))?;
        Ok(Region {
            dev: self.clone(),
            key,
        })
    }

    /// A completion queue of `entries` (rounded up to a power of two within
    /// the kernel's bounds) with an eventfd for sleeping.
    pub fn cq(self: &Arc<Self>, entries: u32) -> Result<Cq> {
        let entries = entries.clamp(CQ_MIN, CQ_MAX).next_power_of_two();
        let efd = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .context("eventfd")?;
        let mut c = zu::CqCreate {
            entries,
            eventfd: efd.as_raw_fd(),
            ..Default::default()
        };
        // SAFETY: `c` is a valid, writable `struct zeronic_cq_create`.
        unsafe { ioc::cq_create(self.file.as_raw_fd(), &mut c) }
            .with_context(|| format!("CQ_CREATE of {entries} entries"))?;
        let len = NonZeroUsize::new(c.mmap_size as usize).context("CQ_CREATE: mmap_size 0")?;
        // SAFETY: a new shared mapping of the CQ the kernel describes; nothing
        // else is mapped at an address we choose.
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
                let d = zu::CqDestroy {
                    cq: c.cq,
                    reserved: 0,
                };
                // SAFETY: a valid `struct zeronic_cq_destroy`.
                let _ = unsafe { ioc::cq_destroy(self.file.as_raw_fd(), &d) };
                return Err(e).context("mmap of the CQ");
            }
        };
        let mut cq = Cq {
            dev: self.clone(),
            id: c.cq,
            map,
            map_len: len.get(),
            mask: 0,
            entries_off: 0,
            efd,
        };
        // SAFETY: the header page is mapped for the CQ's lifetime; the kernel
        // wrote `mask` and `entries_offset` before CQ_CREATE returned.
        let (mask, entries_off) = unsafe {
            let ring = cq.map.as_ptr().cast::<zu::CqRing>();
            (
                std::ptr::read_volatile(&raw const (*ring).mask),
                std::ptr::read_volatile(&raw const (*ring).entries_offset),
            )
        };
        if mask + 1 != entries
            || (entries_off as usize) + (entries as usize) * size_of::<Cqe>() > cq.map_len
        {
            bail!("CQ mapping: mask {mask} entries_offset {entries_off} for {entries} entries");
        }
        cq.mask = mask;
        cq.entries_off = entries_off as usize;
        Ok(cq)
    }

    /// `ZERONIC_IOC_FLOW_ATTACH` of the established TCP socket `sock`.
    pub fn attach(&self, sock: BorrowedFd<'_>, cq: &Cq, mode: RxMode) -> Result<u32> {
        let (rx_mode, ring_key, ring_size) = match mode {
            RxMode::Message => (raw::ZERONIC_RX_MESSAGE, 0, 0),
            RxMode::Stream {
                ring_key,
                ring_size,
            } => (raw::ZERONIC_RX_STREAM, ring_key, ring_size),
        };
        let mut a = zu::FlowAttach {
            sockfd: sock.as_raw_fd(),
            cq: cq.id,
            rx_mode,
            ring_key,
            ring_offset: 0,
            ring_size,
            ..Default::default()
        };
        // SAFETY: a valid, writable `struct zeronic_flow_attach`.
        unsafe { ioc::flow_attach(self.file.as_raw_fd(), &mut a) }
            .with_context(|| format!("FLOW_ATTACH ({mode:?})"))?;
        if a.nic != self.nic {
            bail!(
                "the socket runs on NIC {} but zn-perf registered memory on NIC {} (--nic)",
                a.nic,
                self.nic
            );
        }
        Ok(a.flow)
    }

    /// `ZERONIC_IOC_FLOW_DETACH`.
    pub fn detach(&self, flow: u32) -> Result<()> {
        let d = zu::FlowDetach { flow, reserved: 0 };
        // SAFETY: a valid `struct zeronic_flow_detach`.
        unsafe { ioc::flow_detach(self.file.as_raw_fd(), &d) }
            .with_context(|| format!("FLOW_DETACH of flow {flow}"))?;
        Ok(())
    }

    /// `ZERONIC_IOC_POST` of `wrs` (any number, in batches). Returns how
    /// many were accepted: all, or fewer when the CQ had no free entry for
    /// the next one (EAGAIN: post the rest once completions were reaped).
    /// Any other refusal is an error.
    pub fn post(&self, flow: u32, wrs: &[Wr]) -> Result<usize> {
        let mut done = 0;
        for batch in wrs.chunks(POST_MAX) {
            let mut p = zu::Post {
                flow,
                count: batch.len() as u32,
                wrs: batch.as_ptr() as u64,
                ..Default::default()
            };
            // SAFETY: a valid, writable `struct zeronic_post` whose `wrs`
            // points at `count` readable work requests.
            let r = unsafe { ioc::post(self.file.as_raw_fd(), &mut p) };
            if r == Err(Errno::EAGAIN) {
                return Ok(done + p.posted as usize);
            }
            if let Err(e) = r {
                bail!(
                    "POST on flow {flow}: {} of {} accepted, then {e} (first refused: {:?})",
                    p.posted,
                    batch.len(),
                    batch.get(p.posted as usize)
                );
            }
            done += batch.len();
        }
        Ok(done)
    }

    /// `ZERONIC_IOC_STREAM_CONSUME`: ring bytes below `stream_off` are free.
    pub fn consume(&self, flow: u32, stream_off: u64) -> Result<()> {
        let c = zu::StreamConsume {
            flow,
            reserved: 0,
            stream_off,
        };
        // SAFETY: a valid `struct zeronic_stream_consume`.
        unsafe { ioc::stream_consume(self.file.as_raw_fd(), &c) }
            .with_context(|| format!("STREAM_CONSUME of flow {flow} to {stream_off}"))?;
        Ok(())
    }

    /// `ZERONIC_IOC_FLOW_QUERY`.
    pub fn query_flow(&self, flow: u32) -> Result<FlowQuery> {
        let mut q = FlowQuery {
            flow,
            ..Default::default()
        };
        // SAFETY: a valid, writable `struct zeronic_flow_query`.
        unsafe { ioc::flow_query(self.file.as_raw_fd(), &mut q) }
            .with_context(|| format!("FLOW_QUERY of flow {flow}"))?;
        Ok(q)
    }
}

fn setsockopt_int(
    sock: BorrowedFd<'_>,
    level: i32,
    name: i32,
    v: nix::libc::c_int,
) -> nix::Result<()> {
    // SAFETY: `v` is a readable c_int of the size passed, for the call only.
    let r = unsafe {
        nix::libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&raw const v).cast(),
            size_of::<nix::libc::c_int>() as nix::libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// Bounds the receive window `sock` advertises to `bytes`:
/// `TCP_WINDOW_CLAMP` of `bytes`, and a receive buffer of twice that
/// (`SO_RCVBUF` of `bytes`, which the kernel doubles; `SO_RCVBUFFORCE`
/// where allowed, to pass `net.core.rmem_max`), which also stops
/// receive-buffer autotuning from raising it.
///
/// Why the headroom: TCP charges every queued receipt to the socket (the
/// payload's length plus the skb head holding its headers). A buffer of
/// exactly one window overflows once a full window waits unread, and TCP
/// then prunes the queue: `tcp_collapse()` copies every queued byte into
/// new buffers, which the flow can only copy again into place (counted as
/// copied). TCP's own autotuning keeps that headroom; a fixed clamp must
/// leave it too.
pub fn clamp_window(sock: BorrowedFd<'_>, bytes: u32) -> Result<()> {
    use nix::libc::{IPPROTO_TCP, SOL_SOCKET, SO_RCVBUF, SO_RCVBUFFORCE, TCP_WINDOW_CLAMP};
    let v = nix::libc::c_int::try_from(bytes).unwrap_or(nix::libc::c_int::MAX);
    match setsockopt_int(sock, SOL_SOCKET, SO_RCVBUFFORCE, v) {
        Ok(()) => {}
        Err(Errno::EPERM) => setsockopt_int(sock, SOL_SOCKET, SO_RCVBUF, v)
            .with_context(|| format!("SO_RCVBUF of {v}"))?,
        Err(e) => return Err(e).with_context(|| format!("SO_RCVBUFFORCE of {v}")),
    }
    setsockopt_int(sock, IPPROTO_TCP, TCP_WINDOW_CLAMP, v)
        .with_context(|| format!("TCP_WINDOW_CLAMP of {bytes}"))
}

/// Name of a `ZERONIC_FLOW_*` state.
pub fn flow_state_name(state: u32) -> &'static str {
    match state {
        raw::ZERONIC_FLOW_ATTACHED => "attached",
        raw::ZERONIC_FLOW_EOF => "eof",
        raw::ZERONIC_FLOW_RESET => "reset",
        raw::ZERONIC_FLOW_DETACHED => "detached",
        _ => "unknown",
    }
}

/// Page-aligned anonymous memory, populated (registration pins it).
pub struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain memory owned by this value.
unsafe impl Send for Buffer {}

impl Buffer {
    /// `len` bytes (nonzero), zeroed.
    pub fn new(len: usize) -> Result<Self> {
        let n = NonZeroUsize::new(len).context("empty buffer")?;
        // SAFETY: a new private anonymous mapping at an address of the
        // kernel's choice.
        let p = unsafe {
            mmap_anonymous(
                None,
                n,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_POPULATE,
            )
        }
        .with_context(|| format!("mmap of {len} bytes"))?;
        Ok(Self { ptr: p.cast(), len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The bytes `[off, off + len)`.
    ///
    /// # Safety
    /// The NIC must not write them while the slice lives (they belong to a
    /// completed receive not yet reposted or consumed, or to no posted work).
    pub unsafe fn slice(&self, off: usize, len: usize) -> &[u8] {
        assert!(off.checked_add(len).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds (checked); no concurrent writer by the caller's
        // contract.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }

    /// The bytes `[off, off + len)`, to fill.
    ///
    /// # Safety
    /// The NIC must not access them while the slice lives (no posted work
    /// request covers them).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, off: usize, len: usize) -> &mut [u8] {
        assert!(off.checked_add(len).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds (checked); exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, not used after this.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

/// A registered region (deregistered when dropped; drop it after the flows
/// using it are detached, and before its [`Buffer`]).
pub struct Region {
    dev: Arc<Device>,
    pub key: u64,
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Err(e) = zu::mr_dereg(self.dev.fd(), self.dev.nic, self.key) {
            eprintln!("zn-perf: MR_DEREG of key {:#x}: {e}", self.key);
        }
    }
}

/// A mapped completion queue.
pub struct Cq {
    dev: Arc<Device>,
    pub id: u32,
    map: NonNull<u8>,
    map_len: usize,
    mask: u32,
    entries_off: usize,
    efd: EventFd,
}

// SAFETY: the mapping is owned by this value; the shared words are accessed
// atomically.
unsafe impl Send for Cq {}

impl Cq {
    fn word(&self, off: usize) -> &AtomicU32 {
        // SAFETY: `off` is a 4-aligned offset in the mapped header page,
        // which lives as long as `self`; the kernel accesses it atomically.
        unsafe { AtomicU32::from_ptr(self.map.as_ptr().add(off).cast()) }
    }

    fn head(&self) -> &AtomicU32 {
        self.word(0)
    }
    fn tail(&self) -> &AtomicU32 {
        self.word(4)
    }
    fn flags(&self) -> &AtomicU32 {
        self.word(12)
    }

    /// The next completion, if any.
    pub fn pop(&self) -> Option<Cqe> {
        let head = self.head().load(Ordering::Relaxed);
        let tail = self.tail().load(Ordering::Acquire);
        if head == tail {
            return None;
        }
        let at = self.entries_off + (head & self.mask) as usize * size_of::<Cqe>();
        // SAFETY: within the mapping (checked at creation); the entry was
        // published by the kernel's release store of `tail`, read above with
        // acquire, and it is not rewritten before `head` passes it.
        let e = unsafe { std::ptr::read_volatile(self.map.as_ptr().add(at).cast::<Cqe>()) };
        self.head().store(head.wrapping_add(1), Ordering::Release);
        Some(e)
    }

    /// Sleeps until the CQ may hold an entry or `timeout` passes: arms it,
    /// rechecks `tail`, then waits on the eventfd (the protocol of
    /// `docs/uapi.md`, so no wake-up is lost).
    pub fn wait(&self, timeout: Duration) -> Result<()> {
        self.flags()
            .fetch_or(raw::ZERONIC_CQ_ARMED, Ordering::SeqCst);
        if self.tail().load(Ordering::SeqCst) != self.head().load(Ordering::Relaxed) {
            return Ok(());
        }
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        let mut fds = [PollFd::new(self.efd.as_fd(), PollFlags::POLLIN)];
        match poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e).context("poll of the CQ's eventfd"),
        }
        match self.efd.read() {
            Ok(_) | Err(Errno::EAGAIN) => Ok(()),
            Err(e) => Err(e).context("reading the CQ's eventfd"),
        }
    }

    /// Entries produced and not consumed (diagnostics).
    pub fn pending(&self) -> (u32, u32) {
        (
            self.head().load(Ordering::Relaxed),
            self.tail().load(Ordering::Acquire),
        )
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `Device::cq`, not used after this.
        let _ = unsafe { munmap(self.map.cast(), self.map_len) };
        let d = zu::CqDestroy {
            cq: self.id,
            reserved: 0,
        };
        // SAFETY: a valid `struct zeronic_cq_destroy`.
        if let Err(e) = unsafe { ioc::cq_destroy(self.dev.file.as_raw_fd(), &d) } {
            eprintln!("zn-perf: CQ_DESTROY of CQ {}: {e}", self.id);
        }
    }
}

/// The access flags of [`Device::register`].
pub const ACCESS_READ: u32 = zu::ACCESS_LOCAL_READ;
pub const ACCESS_WRITE: u32 = zu::ACCESS_LOCAL_WRITE;

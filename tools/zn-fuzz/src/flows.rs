//! The flow phase (`--flow-secs`, before the main run): random flow
//! sequences from several processes and network namespaces at once.
//!
//! `--flow-workers` forked root workers each open a file of their own (and
//! dup it, close it and open another), share one file opened before they
//! forked, and one passed to each over `SCM_RIGHTS`. They make TCP
//! connections from the first port's namespace to the second's (and over
//! loopback), attach either end (one port or the other) through any of
//! their files, post sends and receives with random keys, offsets and
//! lengths, return ring space (`STREAM_CONSUME`) at random offsets, create,
//! map, reap, unmap and destroy CQs, register and deregister regions, while
//! the other end of each connection sends, reads, shuts down, sends urgent
//! bytes, closes or resets (`SO_LINGER` 0) at random, and the worker forks
//! callers that go on through the inherited files and are killed at a
//! random moment. Guessed flow ids on the shared files reach the other
//! workers' flows.
//!
//! One more worker becomes uid 65534, unshares a user and a network
//! namespace, gives a veth the ports' interface indexes and attaches
//! connections routed through it and over its loopback, through the shared
//! files and its own: every such attach must be `ENODEV`, and its calls on
//! its own file (where nothing can be attached) must find no flow.
//!
//! Oracles: every call's errno is one the header documents for it; results
//! the state determines hold (flow queries, ring returns within what was
//! reported, no loopback attach); completions carry documented statuses;
//! every process ends as planned; the NIC's counters (`flows_in_use`,
//! `mr_in_use`, `pinned_pages`, `held_pages`, the users' shares) come back
//! once every file is closed; the kernel logs no report meanwhile.

use std::fs::File;
use std::net::Ipv4Addr;
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::errno::Errno;
use nix::sched::{setns, CloneFlags};
use nix::sys::mman::{mmap_anonymous, MapFlags, ProtFlags};
use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use zeronic::CqRingView;
use zeronic_uapi::{
    CqCreate, CqDestroy, Cqe, FlowAttach, FlowDetach, FlowQuery, MrDereg, MrReg, Post,
    StreamConsume, Wr, ACCESS_LOCAL_READ, ACCESS_LOCAL_WRITE, IOC_CQ_CREATE, IOC_CQ_DESTROY,
    IOC_FLOW_ATTACH, IOC_FLOW_DETACH, IOC_FLOW_QUERY, IOC_MR_DEREG, IOC_MR_REG, IOC_POST,
    IOC_STREAM_CONSUME, RX_MESSAGE, RX_STREAM, WR_RECV, WR_SEND,
};

use crate::counters::{self, NicCounters};
use crate::errnos::{allowed, allowed_list, Call, ErrnoName, CALLS};
use crate::ioc::raw_ioctl;
use crate::mem;
use crate::rng::Rng;
use crate::shared::{map_zeroed, ERRNOS};

/// Workers at most (`--flow-workers`), besides the namespace worker.
pub const MAX_WORKERS: usize = 8;

/// What the workers do, counted per worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Connect,
    Attach,
    Detach,
    PostRecv,
    PostSend,
    Consume,
    FlowQuery,
    CqCreate,
    CqDestroy,
    CqMmap,
    CqMunmap,
    CqReap,
    Reg,
    Dereg,
    PeerWrite,
    PeerRead,
    PeerShutdown,
    PeerReset,
    PeerClose,
    PeerUrgent,
    FileReopen,
    ForkKill,
    NsAttach,
}

const OPS: usize = 23;

const OP_NAMES: [&str; OPS] = [
    "connect",
    "attach",
    "detach",
    "post-recv",
    "post-send",
    "consume",
    "flow-query",
    "cq-create",
    "cq-destroy",
    "cq-mmap",
    "cq-munmap",
    "cq-reap",
    "reg",
    "dereg",
    "peer-write",
    "peer-read",
    "peer-shutdown",
    "peer-reset",
    "peer-close",
    "peer-urgent",
    "file-reopen",
    "fork-kill",
    "netns-attach",
];

/// What every process of the phase counts together (a shared anonymous
/// mapping, so forked callers count too). Only atomics.
#[repr(C)]
pub struct FlowShared {
    /// Operations by worker (the last row: the namespace worker) and kind.
    ops: [[AtomicU64; OPS]; MAX_WORKERS + 1],
    /// Results by call and errno (0: success).
    results: [[AtomicU64; ERRNOS]; CALLS],
    /// Results with an errno the header does not document for the call.
    undocumented: AtomicU64,
    /// Results that contradict what the state determines.
    inconsistent: AtomicU64,
    /// Completions reaped, by opcode (0: an unknown one).
    cqes: [AtomicU64; 5],
    /// Completions with an unknown opcode or an undocumented status.
    cqe_bad: AtomicU64,
    /// Successful attaches by port.
    attached_port: [AtomicU64; 2],
    /// The namespace worker's attaches, and how many were ENODEV.
    ns_attaches: AtomicU64,
    /// See `ns_attaches`.
    ns_enodev: AtomicU64,
    /// The namespace worker set its namespaces and veth up.
    ns_ready: AtomicU64,
    /// Forked callers, those killed, and those that ended otherwise.
    children: AtomicU64,
    /// See `children`.
    killed: AtomicU64,
    /// See `children`.
    child_failures: AtomicU64,
    /// Files received over SCM_RIGHTS.
    fds_received: AtomicU64,
    /// Messages printed.
    printed: AtomicU64,
}

impl FlowShared {
    fn new() -> Result<&'static FlowShared> {
        // SAFETY: `FlowShared` is atomics only, valid all zero.
        unsafe { map_zeroed("the flow phase's counters") }
    }

    fn say(&self, msg: &str) {
        if self.printed.fetch_add(1, Relaxed) < 60 {
            println!("zn-fuzz: flows: {msg}");
        }
    }
}

/// The phase's settings (from main's arguments).
pub struct Config {
    pub seed: u64,
    pub secs: u64,
    pub workers: usize,
    pub ns_a: String,
    pub ns_b: String,
    pub addr_b: Ipv4Addr,
}

/// A file descriptor of `/dev/zeronic`; dups share `ident`.
struct ZFile {
    ident: u64,
    fd: OwnedFd,
    /// Other processes hold the file too (the phase's shared files).
    shared: bool,
}

#[derive(Clone, Copy)]
struct Region {
    ident: u64,
    key: u64,
    len: u64,
    access: u32,
}

#[derive(Clone, Copy)]
struct Cq {
    ident: u64,
    id: u32,
    mmap_offset: u64,
    mmap_size: u64,
    /// Address of this process's mapping of it, if mapped.
    map: Option<u64>,
    /// A forked caller may have destroyed it: no exact expectations.
    loose: bool,
}

#[derive(Clone, Copy)]
struct Flow {
    ident: u64,
    id: u32,
    stream: bool,
    ring_size: u64,
    /// End of the stream bytes reported by this process's reaping.
    reported: u64,
    /// What this process returned (STREAM_CONSUME).
    consumed: u64,
    /// Another process (a forked caller) may have changed it, or its
    /// socket was closed: no exact expectations.
    loose: bool,
    conn: u64,
}

struct Conn {
    uid: u64,
    /// [client in namespace A (port A), server in namespace B (port B)].
    ends: [Option<OwnedFd>; 2],
    loopback: bool,
}

const MAX_CONNS: usize = 6;
const MAX_CQS: usize = 6;
const MAX_FLOWS: usize = 10;
const MAX_REGIONS: usize = 10;
const BUF: u64 = 1 << 20;
const CHUNK: u64 = 64 << 10;

/// The ioctl with a plain argument struct: one of the uapi structs, valid
/// and writable for the call; any pointer it holds points at our own
/// memory (work request arrays, the registered buffer) or is deliberately
/// bad, which `raw_ioctl`'s contract allows.
fn ioc<T>(fd: RawFd, cmd: u32, arg: &mut T) -> Result<(), Errno> {
    raw_ioctl(fd, cmd, std::ptr::from_mut(arg) as u64).map(|_| ())
}

fn tcp_socket() -> Option<OwnedFd> {
    // SAFETY: plain syscall; the descriptor is ours.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    // SAFETY: a descriptor just returned to us.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

fn sin(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(ip.octets()),
        },
        sin_zero: [0; 8],
    }
}

const SIN_LEN: libc::socklen_t = size_of::<libc::sockaddr_in>() as libc::socklen_t;

fn wait_fd(fd: RawFd, events: i16, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one pollfd of ours.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

/// A non-blocking connect to `to`, finished within 3 s.
fn connect_to(to: &libc::sockaddr_in) -> Option<OwnedFd> {
    let c = tcp_socket()?;
    // SAFETY: `to` is a sockaddr_in of SIN_LEN bytes.
    let r = unsafe { libc::connect(c.as_raw_fd(), std::ptr::from_ref(to).cast(), SIN_LEN) };
    if r != 0 && Errno::last() != Errno::EINPROGRESS {
        return None;
    }
    if !wait_fd(c.as_raw_fd(), libc::POLLOUT, 3000) {
        return None;
    }
    let mut err: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: an int and its length, written by the kernel.
    let r = unsafe {
        libc::getsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&raw mut err).cast(),
            &mut len,
        )
    };
    (r == 0 && err == 0).then_some(c)
}

/// A listening socket at `ip`, port 0; its address.
fn listener(ip: Ipv4Addr, port: u16) -> Option<(OwnedFd, libc::sockaddr_in)> {
    let l = tcp_socket()?;
    let mut a = sin(ip, port);
    let one: libc::c_int = 1;
    let mut len = SIN_LEN;
    // SAFETY: `a` is a sockaddr_in of SIN_LEN bytes, `one` an int; the
    // descriptor is ours.
    unsafe {
        libc::setsockopt(
            l.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&raw const one).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        );
        if libc::bind(l.as_raw_fd(), (&raw const a).cast(), SIN_LEN) != 0
            || libc::listen(l.as_raw_fd(), 16) != 0
            || libc::getsockname(l.as_raw_fd(), (&raw mut a).cast(), &mut len) != 0
        {
            return None;
        }
    }
    Some((l, a))
}

fn accept_within(l: &OwnedFd, ms: i32) -> Option<OwnedFd> {
    if !wait_fd(l.as_raw_fd(), libc::POLLIN, ms) {
        return None;
    }
    // SAFETY: plain syscall; the descriptor is ours.
    let s = unsafe {
        libc::accept4(
            l.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        )
    };
    // SAFETY: a descriptor just returned to us.
    (s >= 0).then(|| unsafe { OwnedFd::from_raw_fd(s) })
}

/// Closes `fd` with a reset (SO_LINGER 0).
fn reset(fd: OwnedFd) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a linger struct of ours.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const l).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    drop(fd);
}

/// Whether the TCP socket is in state ESTABLISHED (TCP_INFO's first byte).
fn established(fd: &OwnedFd) -> bool {
    let mut info = [0u8; 256];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: a buffer of `len` bytes, written by the kernel.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    r == 0 && info[0] == 1 // TCP_ESTABLISHED
}

fn open_zeronic() -> Option<OwnedFd> {
    zeronic::open_device_file().ok().map(OwnedFd::from)
}

/// Whether a completion's status is one docs/uapi.md gives its opcode.
fn cqe_status_ok(opcode: u16, status: u16) -> bool {
    let s = i32::from(status);
    let e = |x: Errno| x as i32;
    match u32::from(opcode) {
        zeronic_uapi::raw::ZERONIC_CQE_SEND | zeronic_uapi::raw::ZERONIC_CQE_RECV => {
            s == 0 || s == e(Errno::ECONNRESET) || s == e(Errno::ECANCELED)
        }
        zeronic_uapi::raw::ZERONIC_CQE_STREAM_DATA => s == 0,
        // "status ECONNRESET or another errno (the connection died)", EIO
        // for an unconfirmed detach.
        zeronic_uapi::raw::ZERONIC_CQE_FLOW => s < 134,
        _ => false,
    }
}

/// One worker process's state (single-threaded).
struct Worker {
    /// Row of `FlowShared::ops`.
    row: usize,
    name: String,
    sh: &'static FlowShared,
    rng: Rng,
    deadline: Instant,
    files: Vec<ZFile>,
    next_ident: u64,
    next_conn: u64,
    /// The registered buffer (BUF bytes, anonymous, never referenced by Rust).
    buf: u64,
    regions: Vec<Region>,
    cqs: Vec<Cq>,
    flows: Vec<Flow>,
    conns: Vec<Conn>,
    /// Mappings of destroyed CQs or closed files, unmapped later.
    orphans: Vec<(u64, u64)>,
    /// A forked caller (no mappings, no forks).
    child: bool,
    /// Namespaces: (home, A, B) for the root workers.
    ns: Option<(File, File, File)>,
    addr_b: Ipv4Addr,
    pattern: Vec<u8>,
}

impl Worker {
    fn count(&self, op: Op) {
        self.sh.ops[self.row][op as usize].fetch_add(1, Relaxed);
    }

    /// Counts a call's result and checks its errno against the header.
    fn judge(&self, call: Call, r: Result<(), Errno>, what: &dyn Fn() -> String) -> bool {
        let e = r.err().map_or(0, |e| e as i32);
        let ei = usize::try_from(e).unwrap_or(ERRNOS - 1).min(ERRNOS - 1);
        self.sh.results[call as usize][ei].fetch_add(1, Relaxed);
        if let Err(err) = r {
            if !allowed(call, err) {
                self.sh.undocumented.fetch_add(1, Relaxed);
                self.sh.say(&format!(
                    "{}: {} ({}) returned {}, which the header does not document for it (allowed: {})",
                    self.name,
                    call.name(),
                    what(),
                    err.name(),
                    allowed_list(call)
                ));
            }
        }
        r.is_ok()
    }

    fn inconsistent(&self, msg: &str) {
        self.sh.inconsistent.fetch_add(1, Relaxed);
        self.sh.say(&format!("{}: INCONSISTENT: {msg}", self.name));
    }

    fn file_idx(&mut self) -> Option<usize> {
        (!self.files.is_empty()).then(|| self.rng.below(self.files.len() as u64) as usize)
    }

    fn fd_of(&self, ident: u64) -> Option<RawFd> {
        self.files
            .iter()
            .find(|f| f.ident == ident)
            .map(|f| f.fd.as_raw_fd())
    }

    fn is_shared(&self, ident: u64) -> bool {
        self.files.iter().any(|f| f.ident == ident && f.shared)
    }

    fn enter(&self, which: usize) {
        if let Some(ns) = &self.ns {
            let f = match which {
                0 => &ns.0,
                1 => &ns.1,
                _ => &ns.2,
            };
            let _ = setns(f, CloneFlags::CLONE_NEWNET);
        }
    }

    // ---- connections ---------------------------------------------------

    fn connect(&mut self) {
        self.count(Op::Connect);
        if self.conns.len() >= MAX_CONNS {
            let i = self.rng.below(self.conns.len() as u64) as usize;
            self.drop_conn(i);
        }
        let loopback = self.rng.chance(1, 8);
        let pair = if loopback {
            self.enter(1);
            let p = listener(Ipv4Addr::LOCALHOST, 0).and_then(|(l, at)| {
                let c = connect_to(&at)?;
                Some((c, accept_within(&l, 3000)?))
            });
            self.enter(0);
            p
        } else {
            self.enter(2);
            let l = listener(self.addr_b, 0);
            self.enter(1);
            let c = l.as_ref().and_then(|(_, at)| connect_to(at));
            self.enter(0);
            match (l, c) {
                (Some((l, _)), Some(c)) => accept_within(&l, 3000).map(|s| (c, s)),
                _ => None,
            }
        };
        if let Some((c, s)) = pair {
            self.next_conn += 1;
            self.conns.push(Conn {
                uid: self.next_conn,
                ends: [Some(c), Some(s)],
                loopback,
            });
        }
    }

    fn drop_conn(&mut self, i: usize) {
        let c = self.conns.swap_remove(i);
        for f in self.flows.iter_mut().filter(|f| f.conn == c.uid) {
            f.loose = true;
        }
        for fd in c.ends.into_iter().flatten() {
            if self.rng.chance(1, 2) {
                reset(fd);
            }
        }
    }

    /// A connection end: (connection index, end).
    fn some_end(&mut self) -> Option<(usize, usize)> {
        if self.conns.is_empty() {
            return None;
        }
        let i = self.rng.below(self.conns.len() as u64) as usize;
        let e = self.rng.below(2) as usize;
        if self.conns[i].ends[e].is_some() {
            Some((i, e))
        } else if self.conns[i].ends[1 - e].is_some() {
            Some((i, 1 - e))
        } else {
            self.conns.swap_remove(i);
            None
        }
    }

    fn peer(&mut self) {
        let Some((i, e)) = self.some_end() else {
            return;
        };
        let fd = self.conns[i].ends[e].as_ref().expect("an end").as_raw_fd();
        match self.rng.weighted(&[40, 30, 6, 4, 4, 3]) {
            0 => {
                self.count(Op::PeerWrite);
                let len = self.rng.range(1, self.pattern.len() as u64) as usize;
                // SAFETY: `len` bytes of our pattern.
                unsafe {
                    libc::send(
                        fd,
                        self.pattern.as_ptr().cast(),
                        len,
                        libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    )
                };
            }
            1 => {
                self.count(Op::PeerRead);
                let mut b = vec![0u8; 64 << 10];
                for _ in 0..4 {
                    // SAFETY: reads into our buffer.
                    let n = unsafe {
                        libc::recv(fd, b.as_mut_ptr().cast(), b.len(), libc::MSG_DONTWAIT)
                    };
                    if n <= 0 {
                        break;
                    }
                }
            }
            2 => {
                self.count(Op::PeerShutdown);
                let how =
                    *self
                        .rng
                        .pick(&[libc::SHUT_WR, libc::SHUT_WR, libc::SHUT_RD, libc::SHUT_RDWR]);
                // SAFETY: plain syscall.
                unsafe { libc::shutdown(fd, how) };
            }
            3 => {
                self.count(Op::PeerReset);
                self.close_end(i, e, true);
            }
            4 => {
                self.count(Op::PeerClose);
                self.close_end(i, e, false);
            }
            _ => {
                self.count(Op::PeerUrgent);
                // SAFETY: one byte of ours.
                unsafe {
                    libc::send(
                        fd,
                        b"U".as_ptr().cast(),
                        1,
                        libc::MSG_OOB | libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    )
                };
            }
        }
    }

    fn close_end(&mut self, i: usize, e: usize, rst: bool) {
        let uid = self.conns[i].uid;
        for f in self.flows.iter_mut().filter(|f| f.conn == uid) {
            f.loose = true;
        }
        if let Some(fd) = self.conns[i].ends[e].take() {
            if rst {
                reset(fd);
            }
        }
    }

    // ---- regions -------------------------------------------------------

    fn reg(&mut self) {
        self.count(Op::Reg);
        let Some(fi) = self.file_idx() else { return };
        if self.regions.len() >= MAX_REGIONS {
            let i = self.rng.below(self.regions.len() as u64) as usize;
            self.dereg_at(i);
        }
        let chunk = self.rng.below(BUF / CHUNK);
        let len = if self.rng.chance(3, 4) {
            CHUNK
        } else {
            self.rng.range(1, CHUNK)
        };
        let access = *self.rng.pick(&[
            ACCESS_LOCAL_READ | ACCESS_LOCAL_WRITE,
            ACCESS_LOCAL_READ | ACCESS_LOCAL_WRITE,
            ACCESS_LOCAL_READ,
            ACCESS_LOCAL_WRITE,
        ]);
        let mut r = MrReg {
            addr: self.buf + chunk * CHUNK,
            length: len,
            nic: 0,
            access,
            key: 0,
        };
        let fd = self.files[fi].fd.as_raw_fd();
        let res = ioc(fd, IOC_MR_REG, &mut r);
        if self.judge(Call::MrReg, res, &|| {
            format!("{len} bytes, access {access}")
        }) {
            self.regions.push(Region {
                ident: self.files[fi].ident,
                key: r.key,
                len,
                access,
            });
        }
    }

    fn dereg_at(&mut self, i: usize) {
        let reg = self.regions[i];
        let Some(fd) = self.fd_of(reg.ident) else {
            self.regions.swap_remove(i);
            return;
        };
        let mut d = MrDereg {
            key: reg.key,
            nic: 0,
            reserved: 0,
        };
        let res = ioc(fd, IOC_MR_DEREG, &mut d);
        // EBUSY: posted requests use it; forgotten either way (the file's
        // close releases it).
        self.judge(Call::MrDereg, res, &|| format!("own key {:#x}", reg.key));
        self.regions.swap_remove(i);
    }

    fn dereg(&mut self) {
        self.count(Op::Dereg);
        if !self.regions.is_empty() && self.rng.chance(4, 5) {
            let i = self.rng.below(self.regions.len() as u64) as usize;
            self.dereg_at(i);
        } else if let Some(fi) = self.file_idx() {
            let mut d = MrDereg {
                key: self.rng.next_u64(),
                nic: 0,
                reserved: 0,
            };
            let res = ioc(self.files[fi].fd.as_raw_fd(), IOC_MR_DEREG, &mut d);
            self.judge(Call::MrDereg, res, &|| "made-up key".into());
        }
    }

    // ---- completion queues --------------------------------------------

    fn cq_create_on(&mut self, fi: usize, entries: u32) -> Option<Cq> {
        let mut c = CqCreate {
            entries,
            eventfd: -1,
            ..Default::default()
        };
        let res = ioc(self.files[fi].fd.as_raw_fd(), IOC_CQ_CREATE, &mut c);
        if !self.judge(Call::CqCreate, res, &|| format!("entries {entries}")) {
            return None;
        }
        Some(Cq {
            ident: self.files[fi].ident,
            id: c.cq,
            mmap_offset: c.mmap_offset,
            mmap_size: c.mmap_size,
            map: None,
            loose: self.child,
        })
    }

    fn cq_create(&mut self) {
        self.count(Op::CqCreate);
        let Some(fi) = self.file_idx() else { return };
        if self.cqs.len() >= MAX_CQS {
            let i = self.rng.below(self.cqs.len() as u64) as usize;
            self.cq_destroy_at(i);
        }
        let entries = 1u32 << self.rng.range(3, 8);
        if let Some(mut c) = self.cq_create_on(fi, entries) {
            if !self.child && self.rng.chance(3, 4) {
                c.map = self.map_cq(fi, &c);
            }
            self.cqs.push(c);
        }
    }

    fn map_cq(&mut self, fi: usize, c: &Cq) -> Option<u64> {
        self.count(Op::CqMmap);
        mem::map_shared_file(self.files[fi].fd.as_raw_fd(), c.mmap_size, c.mmap_offset).ok()
    }

    fn unmap(&self, addr: u64, size: u64) {
        self.count(Op::CqMunmap);
        // SAFETY: a mapping of a CQ this process made, referenced only
        // through raw pointers, none of which outlives this call.
        unsafe { libc::munmap(addr as *mut libc::c_void, size as usize) };
    }

    fn cq_destroy_at(&mut self, i: usize) {
        let c = self.cqs[i];
        let Some(fd) = self.fd_of(c.ident) else {
            self.forget_cq(i);
            return;
        };
        let mut d = CqDestroy {
            cq: c.id,
            reserved: 0,
        };
        let res = ioc(fd, IOC_CQ_DESTROY, &mut d);
        if self.judge(Call::CqDestroy, res, &|| format!("own CQ {}", c.id)) {
            self.forget_cq(i);
        } else if res == Err(Errno::ENOENT) && !c.loose && !self.is_shared(c.ident) {
            // Only this process (and its callers, which destroy only their
            // own) names CQs of its own files.
            self.inconsistent(&format!(
                "ZERONIC_IOC_CQ_DESTROY of CQ {} of an own file: ENOENT",
                c.id
            ));
            self.forget_cq(i);
        }
    }

    fn forget_cq(&mut self, i: usize) {
        let c = self.cqs.swap_remove(i);
        if let Some(m) = c.map {
            // Pages stay mapped after the destroy: unmapped later.
            self.orphans.push((m, c.mmap_size));
        }
    }

    fn cq_destroy(&mut self) {
        self.count(Op::CqDestroy);
        if !self.cqs.is_empty() && self.rng.chance(5, 6) {
            let i = self.rng.below(self.cqs.len() as u64) as usize;
            self.cq_destroy_at(i);
            return;
        }
        // A made-up CQ, on a file of its own only (guessing on a shared
        // file could take the namespace worker's CQ).
        let own: Vec<usize> = (0..self.files.len())
            .filter(|&i| !self.files[i].shared)
            .collect();
        if own.is_empty() {
            return;
        }
        let fi = *self.rng.pick(&own);
        let mut d = CqDestroy {
            cq: self.rng.range(1, 40) as u32,
            reserved: 0,
        };
        let res = ioc(self.files[fi].fd.as_raw_fd(), IOC_CQ_DESTROY, &mut d);
        if self.judge(Call::CqDestroy, res, &|| format!("guessed CQ {}", d.cq)) {
            let ident = self.files[fi].ident;
            if let Some(i) = self
                .cqs
                .iter()
                .position(|c| c.ident == ident && c.id == d.cq)
            {
                self.forget_cq(i);
            }
        }
    }

    fn cq_munmap_or_map(&mut self) {
        if let Some((a, s)) = self.orphans.pop() {
            self.unmap(a, s);
            return;
        }
        if self.cqs.is_empty() || self.child {
            return;
        }
        let i = self.rng.below(self.cqs.len() as u64) as usize;
        match self.cqs[i].map {
            Some(m) => {
                self.unmap(m, self.cqs[i].mmap_size);
                self.cqs[i].map = None;
            }
            None => {
                let c = self.cqs[i];
                if let Some(fi) = self.files.iter().position(|f| f.ident == c.ident) {
                    self.cqs[i].map = self.map_cq(fi, &c);
                }
            }
        }
    }

    /// Takes every completion of this process's mapped CQs.
    fn reap(&mut self) {
        self.count(Op::CqReap);
        for ci in 0..self.cqs.len() {
            let c = self.cqs[ci];
            let Some(base) = c.map.and_then(|m| NonNull::new(m as *mut u8)) else {
                continue;
            };
            // SAFETY: a live mapping of the CQ of `mmap_size` bytes from its
            // `mmap_offset` (`map_cq`), unmapped only by this process and
            // not before the view is dropped at the end of this iteration;
            // this process is its one consumer (forked callers never reap).
            let ring = match unsafe { CqRingView::new(base, c.mmap_size as usize) } {
                Ok(r) => r,
                Err(e) => {
                    self.inconsistent(&format!(
                        "CQ {}: its ring does not fit its mapping of {} bytes ({e})",
                        c.id, c.mmap_size
                    ));
                    continue;
                }
            };
            // At most one ring's worth: the producer index is the kernel's
            // to move, and this loop must end whatever it says.
            for _ in 0..ring.entries() {
                let Some(e) = ring.pop() else { break };
                self.completion(&c, &e);
            }
        }
    }

    fn completion(&mut self, c: &Cq, e: &Cqe) {
        let op = usize::from(e.opcode);
        self.sh.cqes[if (1..=4).contains(&op) { op } else { 0 }].fetch_add(1, Relaxed);
        if !cqe_status_ok(e.opcode, e.status) {
            self.sh.cqe_bad.fetch_add(1, Relaxed);
            self.sh.say(&format!(
                "{}: CQ {} gave a completion with opcode {} status {} ({}) flags {:#x} for flow {}: not documented for the opcode",
                self.name,
                c.id,
                e.opcode,
                e.status,
                Errno::from_raw(i32::from(e.status)).name(),
                e.flags,
                e.flow
            ));
        }
        let Some(f) = self
            .flows
            .iter_mut()
            .find(|f| f.ident == c.ident && f.id == e.flow)
        else {
            return;
        };
        if u32::from(e.opcode) == zeronic_uapi::raw::ZERONIC_CQE_STREAM_DATA {
            f.reported = f.reported.max(e.stream_off + u64::from(e.len));
        }
        if u32::from(e.opcode) == zeronic_uapi::raw::ZERONIC_CQE_FLOW
            && e.flags & zeronic_uapi::raw::ZERONIC_CQE_F_DETACHED != 0
        {
            let (ident, id) = (f.ident, f.id);
            self.flows.retain(|f| !(f.ident == ident && f.id == id));
        }
    }

    // ---- flows ---------------------------------------------------------

    fn attach(&mut self) {
        self.count(Op::Attach);
        let Some((ci, e)) = self.some_end() else {
            return;
        };
        let Some(fi) = self.file_idx() else { return };
        let ident = self.files[fi].ident;
        if self.flows.len() >= MAX_FLOWS {
            let i = self.rng.below(self.flows.len() as u64) as usize;
            self.detach_at(i);
        }
        let cqs: Vec<usize> = (0..self.cqs.len())
            .filter(|&i| self.cqs[i].ident == ident)
            .collect();
        let cq = if !cqs.is_empty() && self.rng.chance(7, 8) {
            self.cqs[*self.rng.pick(&cqs)].id
        } else if self.rng.chance(1, 2) {
            match self.cq_create_on(fi, 64) {
                Some(mut c) => {
                    if !self.child {
                        c.map = self.map_cq(fi, &c);
                    }
                    self.cqs.push(c);
                    c.id
                }
                None => 0,
            }
        } else {
            self.rng.range(1, 40) as u32
        };
        let stream = self.rng.chance(1, 3);
        let (mut ring_key, mut ring_offset, mut ring_size) = (0, 0, 0);
        if stream {
            let regs: Vec<Region> = self
                .regions
                .iter()
                .filter(|r| r.ident == ident)
                .copied()
                .collect();
            if !regs.is_empty() && self.rng.chance(9, 10) {
                let r = *self.rng.pick(&regs);
                ring_key = r.key;
                ring_size = 1u64 << self.rng.range(12, 16);
                if ring_size > r.len && self.rng.chance(3, 4) {
                    ring_size = 4096;
                }
                ring_offset = if r.len > ring_size && self.rng.chance(1, 2) {
                    self.rng.below(r.len - ring_size + 1)
                } else {
                    0
                };
            } else {
                ring_key = self.rng.next_u64();
                ring_size = 4096;
            }
        }
        let sockfd = self.conns[ci].ends[e].as_ref().expect("an end").as_raw_fd();
        let mut a = FlowAttach {
            sockfd,
            cq,
            rx_mode: if stream { RX_STREAM } else { RX_MESSAGE },
            ring_key,
            ring_offset,
            ring_size,
            ..Default::default()
        };
        let res = ioc(self.files[fi].fd.as_raw_fd(), IOC_FLOW_ATTACH, &mut a);
        let loopback = self.conns[ci].loopback;
        let what = || {
            format!(
                "{} end of a connection {}, CQ {cq}, {}",
                ["client", "server"][e],
                if loopback {
                    "over loopback"
                } else {
                    "across the link"
                },
                if stream { "stream" } else { "message" }
            )
        };
        if !self.judge(Call::FlowAttach, res, &what) {
            return;
        }
        if loopback {
            self.inconsistent(&format!(
                "ZERONIC_IOC_FLOW_ATTACH of a connection over loopback succeeded ({})",
                what()
            ));
        }
        if a.port < 2 {
            self.sh.attached_port[a.port as usize].fetch_add(1, Relaxed);
        }
        self.flows.push(Flow {
            ident,
            id: a.flow,
            stream,
            ring_size,
            reported: 0,
            consumed: 0,
            loose: self.child,
            conn: self.conns[ci].uid,
        });
    }

    fn detach_at(&mut self, i: usize) {
        let f = self.flows[i];
        self.flows.swap_remove(i);
        let Some(fd) = self.fd_of(f.ident) else {
            return;
        };
        let mut d = FlowDetach {
            flow: f.id,
            reserved: 0,
        };
        let res = ioc(fd, IOC_FLOW_DETACH, &mut d);
        self.judge(Call::FlowDetach, res, &|| format!("own flow {}", f.id));
    }

    /// A flow to name: (file descriptor, flow id, index of the record if
    /// it is one of ours).
    fn some_flow(&mut self) -> Option<(RawFd, u32, Option<usize>)> {
        if !self.flows.is_empty() && self.rng.chance(5, 6) {
            let i = self.rng.below(self.flows.len() as u64) as usize;
            let fd = self.fd_of(self.flows[i].ident)?;
            return Some((fd, self.flows[i].id, Some(i)));
        }
        // A guessed id: on a shared file it may be another worker's flow.
        let fi = self.file_idx()?;
        Some((
            self.files[fi].fd.as_raw_fd(),
            self.rng.range(1, 24) as u32,
            None,
        ))
    }

    fn detach(&mut self) {
        self.count(Op::Detach);
        if let Some((fd, id, rec)) = self.some_flow() {
            if let Some(i) = rec {
                self.detach_at(i);
                return;
            }
            let mut d = FlowDetach {
                flow: id,
                reserved: 0,
            };
            let res = ioc(fd, IOC_FLOW_DETACH, &mut d);
            self.judge(Call::FlowDetach, res, &|| format!("guessed flow {id}"));
        }
    }

    fn post(&mut self, send: bool) {
        self.count(if send { Op::PostSend } else { Op::PostRecv });
        let Some((fd, id, rec)) = self.some_flow() else {
            return;
        };
        let ident = rec.map(|i| self.flows[i].ident);
        let regs: Vec<Region> = self
            .regions
            .iter()
            .filter(|r| Some(r.ident) == ident)
            .copied()
            .collect();
        let n = self.rng.range(1, 4) as usize;
        let mut wrs = Vec::with_capacity(n);
        for k in 0..n {
            let (key, len) = if !regs.is_empty() && self.rng.chance(7, 8) {
                let r = *self.rng.pick(&regs);
                (r.key, r.len)
            } else if !self.regions.is_empty() && self.rng.chance(1, 2) {
                let r = *self.rng.pick(&self.regions);
                (r.key, r.len)
            } else {
                (self.rng.next_u64(), CHUNK)
            };
            let (offset, l) = if self.rng.chance(9, 10) {
                let off = self.rng.below(len);
                (off, self.rng.range(1, (len - off).min(16 << 10)) as u32)
            } else {
                (
                    self.rng.below(2 * len),
                    *self.rng.pick(&[0, 1, 4096, CHUNK as u32 + 1, u32::MAX]),
                )
            };
            let opcode = match self.rng.below(20) {
                0 => *self.rng.pick(&[0, 3, u16::MAX]),
                1 => {
                    if send {
                        WR_RECV
                    } else {
                        WR_SEND
                    }
                }
                _ if send => WR_SEND,
                _ => WR_RECV,
            };
            wrs.push(Wr {
                wr_id: k as u64 + 1,
                key,
                offset,
                len: l,
                opcode,
                flags: 0,
            });
        }
        let mut p = Post {
            flow: id,
            count: n as u32,
            wrs: wrs.as_ptr() as u64,
            posted: u32::MAX,
            reserved: 0,
        };
        let res = ioc(fd, IOC_POST, &mut p);
        let ok = self.judge(Call::Post, res, &|| {
            format!(
                "{} flow {id}, {n} requests",
                if rec.is_some() { "own" } else { "guessed" }
            )
        });
        if (ok && p.posted != n as u32) || (!ok && p.posted != u32::MAX && p.posted >= n as u32) {
            self.inconsistent(&format!(
                "ZERONIC_IOC_POST of {n} requests to flow {id}: {} with posted {}",
                res.err().map_or("success", |e| e.name()),
                p.posted
            ));
        }
    }

    fn consume(&mut self) {
        self.count(Op::Consume);
        let Some((fd, id, rec)) = self.some_flow() else {
            return;
        };
        let f = rec.map(|i| self.flows[i]);
        let (off, within) = match f {
            Some(f) if f.stream && self.rng.chance(4, 5) => {
                let mid = f.consumed + f.reported.saturating_sub(f.consumed) / 2;
                match self.rng.below(6) {
                    0 | 1 => (f.reported, true),
                    2 => (mid, true),
                    3 => (f.consumed, true),
                    4 => (f.reported + 1 + self.rng.below(f.ring_size.max(1)), false),
                    _ => (f.consumed.saturating_sub(1 + self.rng.below(4096)), false),
                }
            }
            _ => {
                let r = self.rng.next_u64();
                (*self.rng.pick(&[0, 1, 4096, r]), false)
            }
        };
        let mut s = StreamConsume {
            flow: id,
            reserved: 0,
            stream_off: off,
        };
        let res = ioc(fd, IOC_STREAM_CONSUME, &mut s);
        let ok = self.judge(Call::StreamConsume, res, &|| {
            format!("flow {id} stream_off {off:#x}")
        });
        let Some(i) = rec else { return };
        let f = self.flows[i];
        if ok && f.stream && off > f.consumed {
            self.flows[i].consumed = off;
        }
        // Within [consumed, reported] of a stream flow of a file only this
        // process uses: the ring's head is `consumed` and the kernel
        // reported at least `reported`.
        if within && !ok && f.stream && !f.loose && !self.is_shared(f.ident) {
            self.inconsistent(&format!(
                "ZERONIC_IOC_STREAM_CONSUME of own stream flow {id} at {off} (returned {}, reported {}) failed with {}",
                f.consumed,
                f.reported,
                res.err().map_or("?", |e| e.name())
            ));
        }
    }

    fn flow_query(&mut self) {
        self.count(Op::FlowQuery);
        let Some((fd, id, rec)) = self.some_flow() else {
            return;
        };
        let mut q = FlowQuery {
            flow: id,
            ..Default::default()
        };
        let res = ioc(fd, IOC_FLOW_QUERY, &mut q);
        if !self.judge(Call::FlowQuery, res, &|| format!("flow {id}")) {
            if res == Err(Errno::ENOENT) {
                if let Some(i) = rec {
                    if !self.flows[i].loose && !self.is_shared(self.flows[i].ident) {
                        // Gone without a detach of ours: only its DETACHED
                        // event (not reaped yet) or a reset may explain it.
                        self.flows[i].loose = true;
                    }
                }
            }
            return;
        }
        if q.flow != id
            || !(1..=4).contains(&q.state)
            || q.reserved != [0, 0]
            || q.rx_stream_off != q.rx_placed_bytes + q.rx_copied_bytes
        {
            self.inconsistent(&format!(
                "ZERONIC_IOC_FLOW_QUERY of flow {id}: flow {} state {} rx_stream_off {} placed {} copied {} reserved {:?}",
                q.flow, q.state, q.rx_stream_off, q.rx_placed_bytes, q.rx_copied_bytes, q.reserved
            ));
        }
    }

    // ---- files ---------------------------------------------------------

    fn file_reopen(&mut self) {
        self.count(Op::FileReopen);
        let own: Vec<usize> = (0..self.files.len())
            .filter(|&i| !self.files[i].shared)
            .collect();
        if own.len() < 3 && self.rng.chance(1, 2) {
            if own.is_empty() || self.rng.chance(1, 2) {
                if let Some(fd) = open_zeronic() {
                    self.next_ident += 1;
                    self.files.push(ZFile {
                        ident: self.next_ident,
                        fd,
                        shared: false,
                    });
                }
            } else {
                let i = *self.rng.pick(&own);
                if let Ok(fd) = self.files[i].fd.try_clone() {
                    let ident = self.files[i].ident;
                    self.files.push(ZFile {
                        ident,
                        fd,
                        shared: false,
                    });
                }
            }
            return;
        }
        if own.is_empty() {
            return;
        }
        let i = *self.rng.pick(&own);
        let f = self.files.swap_remove(i);
        let ident = f.ident;
        // The file goes with its last descriptor of ours (a mapping holds
        // it too: unmap first, or later).
        if !self.files.iter().any(|g| g.ident == ident) {
            let keep_map = self.rng.chance(1, 4);
            let mut i = 0;
            while i < self.cqs.len() {
                if self.cqs[i].ident == ident {
                    let c = self.cqs.swap_remove(i);
                    if let Some(m) = c.map {
                        if keep_map {
                            self.orphans.push((m, c.mmap_size));
                        } else {
                            self.unmap(m, c.mmap_size);
                        }
                    }
                } else {
                    i += 1;
                }
            }
            self.flows.retain(|f| f.ident != ident);
            self.regions.retain(|r| r.ident != ident);
        }
        drop(f);
    }

    // ---- forked callers ------------------------------------------------

    fn fork_kill(&mut self) {
        self.count(Op::ForkKill);
        for f in &mut self.flows {
            f.loose = true;
        }
        for c in &mut self.cqs {
            c.loose = true;
        }
        let ops = self.rng.range(1, 30);
        let wait_ms = self.rng.below(40);
        let mut crng = Rng::stream(self.rng.next_u64(), self.row as u64, 77);
        // SAFETY: this process has one thread; the child runs a few calls and
        // leaves with _exit.
        match unsafe { fork() } {
            Err(_) => {}
            Ok(ForkResult::Child) => {
                // CQ mappings are not inherited: forget them, unmap nothing.
                for c in &mut self.cqs {
                    c.map = None;
                }
                self.orphans.clear();
                self.child = true;
                self.rng = crng.clone();
                self.name = format!("{} (forked caller)", self.name);
                for _ in 0..ops {
                    if Instant::now() >= self.deadline {
                        break;
                    }
                    self.step();
                }
                // SAFETY: leaves without the parent's exit handlers.
                unsafe { libc::_exit(0) }
            }
            Ok(ForkResult::Parent { child }) => {
                self.sh.children.fetch_add(1, Relaxed);
                std::thread::sleep(Duration::from_millis(wait_ms + crng.below(2)));
                let _ = kill(child, Signal::SIGKILL);
                match waitpid(child, None) {
                    Ok(WaitStatus::Exited(_, 0)) => {}
                    Ok(WaitStatus::Signaled(_, Signal::SIGKILL, _)) => {
                        self.sh.killed.fetch_add(1, Relaxed);
                    }
                    st => {
                        self.sh.child_failures.fetch_add(1, Relaxed);
                        self.sh
                            .say(&format!("{}: a forked caller ended with {st:?}", self.name));
                    }
                }
            }
        }
    }

    // ---- the loop ------------------------------------------------------

    fn step(&mut self) {
        let w = [
            6,                              // connect
            10,                             // attach
            4,                              // detach
            10,                             // post recv
            10,                             // post send
            6,                              // consume
            4,                              // flow query
            3,                              // cq create
            2,                              // cq destroy
            2,                              // cq map/unmap
            12,                             // reap
            4,                              // reg
            2,                              // dereg
            18,                             // peer
            2,                              // file reopen/dup/close
            if self.child { 0 } else { 1 }, // fork and kill
        ];
        match self.rng.weighted(&w) {
            0 => self.connect(),
            1 => self.attach(),
            2 => self.detach(),
            3 => self.post(false),
            4 => self.post(true),
            5 => self.consume(),
            6 => self.flow_query(),
            7 => self.cq_create(),
            8 => self.cq_destroy(),
            9 => self.cq_munmap_or_map(),
            10 => {
                if !self.child {
                    self.reap()
                }
            }
            11 => self.reg(),
            12 => self.dereg(),
            13 => self.peer(),
            14 => self.file_reopen(),
            _ => self.fork_kill(),
        }
    }

    fn run(&mut self) {
        while Instant::now() < self.deadline {
            self.step();
        }
        // The end, in a random order: connections reset or closed, files
        // closed, mappings unmapped.
        if self.rng.chance(1, 2) {
            while !self.conns.is_empty() {
                self.drop_conn(0);
            }
        }
        self.reap();
        for c in std::mem::take(&mut self.cqs) {
            if let Some(m) = c.map {
                self.unmap(m, c.mmap_size);
            }
        }
        for (m, s) in std::mem::take(&mut self.orphans) {
            self.unmap(m, s);
        }
        self.files.clear();
        self.conns.clear();
    }
}

/// The anonymous buffer regions are registered from.
fn buffer() -> Result<u64> {
    // SAFETY: a fresh anonymous mapping, never referenced by Rust code (its
    // address goes to MR_REG and nowhere else).
    let p = unsafe {
        mmap_anonymous(
            None,
            NonZeroUsize::new(BUF as usize).expect("not empty"),
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_PRIVATE | MapFlags::MAP_POPULATE,
        )
    }
    .context("mmap of the registered buffer")?;
    Ok(p.as_ptr() as u64)
}

/// Receives one file over SCM_RIGHTS (blocking).
fn recv_file(sock: &OwnedFd) -> Option<OwnedFd> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut b = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut b)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .ok()?;
    for c in msg.cmsgs().ok()? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            // SAFETY: the kernel just installed these descriptors for us.
            let mut owned: Vec<OwnedFd> = fds
                .into_iter()
                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
                .collect();
            return owned.pop();
        }
    }
    None
}

fn new_worker(
    row: usize,
    name: String,
    cfg: &Config,
    sh: &'static FlowShared,
    deadline: Instant,
    files: Vec<ZFile>,
) -> Result<Worker> {
    Ok(Worker {
        row,
        name,
        sh,
        rng: Rng::stream(cfg.seed, 1000 + row as u64, 0),
        deadline,
        files,
        next_ident: 10,
        next_conn: 0,
        buf: buffer()?,
        regions: Vec::new(),
        cqs: Vec::new(),
        flows: Vec::new(),
        conns: Vec::new(),
        orphans: Vec::new(),
        child: false,
        ns: None,
        addr_b: cfg.addr_b,
        pattern: (0..32768u32).map(|i| (i * 7 + row as u32) as u8).collect(),
    })
}

/// The files a worker shares with the others: the one opened before the
/// fork (ident 1) and the one passed over `sock` (ident 2, if it came).
fn shared_files(shared: OwnedFd, sock: OwnedFd, sh: &FlowShared) -> Vec<ZFile> {
    let mut files = vec![ZFile {
        ident: 1,
        fd: shared,
        shared: true,
    }];
    if let Some(t) = recv_file(&sock) {
        sh.fds_received.fetch_add(1, Relaxed);
        files.push(ZFile {
            ident: 2,
            fd: t,
            shared: true,
        });
    }
    files
}

/// A root worker: its own file, the shared ones, connections between the
/// ports' namespaces.
fn root_worker(
    id: usize,
    cfg: &Config,
    sh: &'static FlowShared,
    deadline: Instant,
    shared: OwnedFd,
    sock: OwnedFd,
) -> Result<()> {
    let mut files = shared_files(shared, sock, sh);
    files.push(ZFile {
        ident: 3,
        fd: open_zeronic().context("open /dev/zeronic")?,
        shared: false,
    });
    let mut w = new_worker(id, format!("worker {id}"), cfg, sh, deadline, files)?;
    let ns = |n: &str| File::open(format!("/run/netns/{n}")).with_context(|| format!("netns {n}"));
    w.ns = Some((
        File::open("/proc/self/ns/net").context("own netns")?,
        ns(&cfg.ns_a)?,
        ns(&cfg.ns_b)?,
    ));
    w.run();
    Ok(())
}

fn shell(cmd: &str) -> bool {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

const EVIL_PORT: u16 = 6100;

/// The namespace worker's listener: a network namespace nested in its
/// user namespace, holding the veth's other end; accepts and drains until
/// `stop` closes.
fn ns_listener(ready: OwnedFd, stop: OwnedFd) -> ! {
    let code = (|| -> Option<()> {
        nix::sched::unshare(CloneFlags::CLONE_NEWNET).ok()?;
        nix::unistd::write(&ready, b"n").ok()?;
        let mut c = [0u8; 1];
        // The veth's end is here once the parent writes.
        if nix::unistd::read(&stop, &mut c).ok()? != 1 {
            return None;
        }
        if !shell("ip link set lo up && ip addr add 10.99.0.2/24 dev vb && ip link set vb up") {
            return None;
        }
        let (l, _) = listener(Ipv4Addr::new(10, 99, 0, 2), EVIL_PORT)?;
        nix::unistd::write(&ready, b"l").ok()?;
        let mut conns: Vec<OwnedFd> = Vec::new();
        let mut b = vec![0u8; 65536];
        loop {
            if wait_fd(stop.as_raw_fd(), libc::POLLIN, 0) {
                return Some(()); // EOF: the worker is done
            }
            while let Some(s) = accept_within(&l, 0) {
                conns.push(s);
            }
            conns.retain(|s| {
                // SAFETY: reads into our buffer.
                let n = unsafe {
                    libc::recv(
                        s.as_raw_fd(),
                        b.as_mut_ptr().cast(),
                        b.len(),
                        libc::MSG_DONTWAIT,
                    )
                };
                n != 0
            });
            std::thread::sleep(Duration::from_millis(5));
        }
    })();
    // SAFETY: leaves without the parent's exit handlers.
    unsafe { libc::_exit(if code.is_some() { 0 } else { 1 }) }
}

fn write_file(path: &str, s: &str) -> Result<()> {
    std::fs::write(path, s).with_context(|| format!("write {path}"))
}

/// Becomes uid 65534, then root of a new user namespace with a new network
/// namespace (as selftests/zc_security.c's attacker).
fn unprivileged_user_and_net_ns() -> Result<()> {
    use nix::unistd::{Gid, Uid};
    nix::unistd::setgroups(&[]).context("setgroups")?;
    nix::unistd::setgid(Gid::from_raw(crate::NOBODY)).context("setgid")?;
    nix::unistd::setuid(Uid::from_raw(crate::NOBODY)).context("setuid")?;
    // A set-user-ID change made /proc/self root's: make it ours again.
    // SAFETY: plain prctl.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) } != 0 {
        anyhow::bail!("PR_SET_DUMPABLE: {}", Errno::last());
    }
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET)
        .context("unshare(CLONE_NEWUSER | CLONE_NEWNET)")?;
    write_file("/proc/self/setgroups", "deny")?;
    write_file("/proc/self/uid_map", "0 65534 1")?;
    write_file("/proc/self/gid_map", "0 65534 1")
}

/// The namespace worker: uid 65534 in namespaces of its own, attaching
/// connections routed through a veth with the ports' interface indexes and
/// over its loopback. Every attach must be ENODEV; on its own file nothing
/// is ever attached, so every flow id is ENOENT.
fn ns_worker(
    cfg: &Config,
    sh: &'static FlowShared,
    deadline: Instant,
    shared: OwnedFd,
    sock: OwnedFd,
    ifindex: [u32; 2],
) -> Result<()> {
    let row = MAX_WORKERS;
    let mut files = shared_files(shared, sock, sh);
    unprivileged_user_and_net_ns().context("user and network namespaces as uid 65534")?;
    files.push(ZFile {
        ident: 3,
        fd: open_zeronic().context("open /dev/zeronic as uid 65534")?,
        shared: false,
    });
    let (ready_r, ready_w) = nix::unistd::pipe().context("pipe")?;
    let (stop_r, stop_w) = nix::unistd::pipe().context("pipe")?;
    // SAFETY: one thread here; the child runs the listener and _exits.
    let pid = match unsafe { fork() }.context("fork")? {
        ForkResult::Child => {
            drop((ready_r, stop_w));
            ns_listener(ready_w, stop_r)
        }
        ForkResult::Parent { child } => child,
    };
    drop((ready_w, stop_r));
    let mut c = [0u8; 1];
    let read1 = |c: &mut [u8; 1]| nix::unistd::read(&ready_r, c).ok() == Some(1);
    if !read1(&mut c) {
        anyhow::bail!("the listener's namespace");
    }
    let idx = |i: u32| {
        if i > 1 {
            format!(" index {i}")
        } else {
            String::new()
        }
    };
    if !shell(&format!(
        "ip link set lo up && ip link add va{} type veth peer name vb{} && ip link set vb netns {pid} && ip addr add 10.99.0.1/24 dev va && ip link set va up",
        idx(ifindex[0]),
        idx(ifindex[1])
    )) {
        anyhow::bail!("the veth with the ports' indexes ({ifindex:?})");
    }
    if nix::unistd::write(&stop_w, b"m").ok() != Some(1) || !read1(&mut c) {
        anyhow::bail!("the listener");
    }
    sh.ns_ready.fetch_add(1, Relaxed);
    let mut w = new_worker(
        row,
        "netns worker (uid 65534)".into(),
        cfg,
        sh,
        deadline,
        files,
    )?;
    // One CQ per file, for attaches whose only fault is the route.
    let mut cqs = Vec::new();
    for fi in 0..w.files.len() {
        let c = w
            .cq_create_on(fi, 64)
            .context("CQ_CREATE in the netns worker")?;
        cqs.push(c.id);
    }
    let far = sin(Ipv4Addr::new(10, 99, 0, 2), EVIL_PORT);
    let mut socks: Vec<(OwnedFd, &'static str)> = Vec::new();
    while Instant::now() < deadline {
        match w.rng.weighted(&[4, 2, 12, 3, 2, 2, 6]) {
            0 => {
                w.count(Op::Connect);
                if let Some(s) = connect_to(&far) {
                    socks.push((s, "through the veth with the ports' indexes"));
                }
            }
            1 => {
                w.count(Op::Connect);
                let p = listener(Ipv4Addr::LOCALHOST, 0).and_then(|(l, at)| {
                    let c = connect_to(&at)?;
                    Some((c, accept_within(&l, 3000)?))
                });
                if let Some((c, s)) = p {
                    socks.push((c, "over its loopback"));
                    socks.push((s, "over its loopback (accepted)"));
                }
            }
            2 if !socks.is_empty() => {
                let si = w.rng.below(socks.len() as u64) as usize;
                if !established(&socks[si].0) {
                    // Closed by its peer (ENOTCONN may come first): retired.
                    socks.swap_remove(si);
                    continue;
                }
                w.count(Op::NsAttach);
                let fi = w.rng.below(w.files.len() as u64) as usize;
                let stream = w.rng.chance(1, 4);
                let mut a = FlowAttach {
                    sockfd: socks[si].0.as_raw_fd(),
                    cq: cqs[fi],
                    rx_mode: if stream { RX_STREAM } else { RX_MESSAGE },
                    ..Default::default()
                };
                // A stream ring of a region of that file, if it has one.
                if let Some(r) = w.regions.iter().find(|r| r.ident == w.files[fi].ident) {
                    if stream && r.access & ACCESS_LOCAL_WRITE != 0 && r.len >= 4096 {
                        a.ring_key = r.key;
                        a.ring_size = 4096;
                    } else {
                        a.rx_mode = RX_MESSAGE;
                    }
                } else {
                    a.rx_mode = RX_MESSAGE;
                }
                let res = ioc(w.files[fi].fd.as_raw_fd(), IOC_FLOW_ATTACH, &mut a);
                let what = socks[si].1;
                w.judge(Call::FlowAttach, res, &|| format!("a connection {what}"));
                if res == Err(Errno::ENOTCONN) && !established(&socks[si].0) {
                    continue; // its peer closed it meanwhile
                }
                sh.ns_attaches.fetch_add(1, Relaxed);
                if res == Err(Errno::ENODEV) {
                    sh.ns_enodev.fetch_add(1, Relaxed);
                } else {
                    w.inconsistent(&format!(
                        "ZERONIC_IOC_FLOW_ATTACH of a connection {what} (in a namespace of uid 65534's own) through {} file returned {}, not ENODEV",
                        if w.files[fi].shared { "a shared" } else { "its own" },
                        res.err().map_or("success", |e| e.name())
                    ));
                }
            }
            3 if !socks.is_empty() => {
                let si = w.rng.below(socks.len() as u64) as usize;
                let (s, _) = socks.swap_remove(si);
                if w.rng.chance(1, 2) {
                    w.count(Op::PeerReset);
                    reset(s);
                } else {
                    w.count(Op::PeerClose);
                }
            }
            4 if !socks.is_empty() => {
                w.count(Op::PeerWrite);
                let si = w.rng.below(socks.len() as u64) as usize;
                // SAFETY: bytes of our pattern.
                unsafe {
                    libc::send(
                        socks[si].0.as_raw_fd(),
                        w.pattern.as_ptr().cast(),
                        4096,
                        libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    )
                };
            }
            5 => {
                // Regions, on its own file only.
                let own = w.files.len() - 1;
                if w.regions.len() < 4 {
                    w.count(Op::Reg);
                    let mut r = MrReg {
                        addr: w.buf,
                        length: CHUNK,
                        nic: 0,
                        access: ACCESS_LOCAL_READ | ACCESS_LOCAL_WRITE,
                        key: 0,
                    };
                    let res = ioc(w.files[own].fd.as_raw_fd(), IOC_MR_REG, &mut r);
                    if w.judge(Call::MrReg, res, &|| "64 KiB as uid 65534".into()) {
                        w.regions.push(Region {
                            ident: w.files[own].ident,
                            key: r.key,
                            len: CHUNK,
                            access: r.access,
                        });
                    }
                } else {
                    w.count(Op::Dereg);
                    w.dereg_at(0);
                }
            }
            _ => {
                // Flow ids on its own file, where nothing was ever attached.
                let own = w.files.len() - 1;
                let fd = w.files[own].fd.as_raw_fd();
                let id = w.rng.range(0, 24) as u32;
                let key = w.regions.first().map_or(1, |r| r.key);
                let wr = Wr {
                    wr_id: 1,
                    key,
                    offset: 0,
                    len: 64,
                    opcode: WR_RECV,
                    flags: 0,
                };
                let (call, res) = match w.rng.below(4) {
                    0 => {
                        w.count(Op::Detach);
                        let mut d = FlowDetach {
                            flow: id,
                            reserved: 0,
                        };
                        (Call::FlowDetach, ioc(fd, IOC_FLOW_DETACH, &mut d))
                    }
                    1 => {
                        w.count(Op::PostRecv);
                        let mut p = Post {
                            flow: id,
                            count: 1,
                            wrs: std::ptr::from_ref(&wr) as u64,
                            posted: 0,
                            reserved: 0,
                        };
                        (Call::Post, ioc(fd, IOC_POST, &mut p))
                    }
                    2 => {
                        w.count(Op::Consume);
                        let mut s = StreamConsume {
                            flow: id,
                            reserved: 0,
                            stream_off: 0,
                        };
                        (Call::StreamConsume, ioc(fd, IOC_STREAM_CONSUME, &mut s))
                    }
                    _ => {
                        w.count(Op::FlowQuery);
                        let mut q = FlowQuery {
                            flow: id,
                            ..Default::default()
                        };
                        (Call::FlowQuery, ioc(fd, IOC_FLOW_QUERY, &mut q))
                    }
                };
                w.judge(call, res, &|| format!("flow {id} of its own file"));
                if res != Err(Errno::ENOENT) {
                    w.inconsistent(&format!(
                        "{} of flow {id} of a file the netns worker attached nothing through returned {}, not ENOENT",
                        call.name(),
                        res.err().map_or("success", |e| e.name())
                    ));
                }
            }
        }
    }
    drop(socks);
    w.files.clear();
    drop(stop_w);
    let _ = waitpid(pid, None);
    Ok(())
}

/// The kernel log's line count (the mark reports are looked for after).
fn log_lines() -> Vec<String> {
    std::process::Command::new("dmesg")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// selftests/lib.sh's ZN_REPORT_RE, as substrings, and hung tasks.
const REPORTS: &[&str] = &[
    "WARNING:",
    "BUG:",
    "kernel BUG",
    "Oops",
    "Kernel panic",
    "general protection fault",
    "Call Trace:",
    "lockdep",
    "INFO: possible",
    "INFO: inconsistent",
    "INFO: trying to register",
    "INFO: suspicious",
    "inconsistent lock",
    "KFENCE",
    "KASAN",
    "UBSAN",
    "kmemleak",
    "unreferenced object",
    "DMA-API",
    "panicked at",
    "blocked for more than",
];

/// The verdicts of the phase: (name, ok, detail).
pub type Verdicts = Vec<(String, bool, String)>;

/// Runs the phase; its verdicts.
pub fn run(cfg: &Config, ifindex: [u32; 2]) -> Result<Verdicts> {
    let workers = cfg.workers.min(MAX_WORKERS);
    println!(
        "zn-fuzz: flows: {workers} root workers and a netns worker for {} s (between {} and {})",
        cfg.secs, cfg.ns_a, cfg.ns_b
    );
    let mark = log_lines().len();
    let (base, _) = counters::nic_counters().context("flow phase baseline")?;
    let base_nobody = counters::nic_counters_as(crate::NOBODY).context("baseline of nobody")?;
    let sh = FlowShared::new()?;
    let shared = open_zeronic().context("open /dev/zeronic")?;
    let passed = open_zeronic().context("open /dev/zeronic")?;
    let deadline = Instant::now() + Duration::from_secs(cfg.secs);
    let mut pids: Vec<(String, Pid)> = Vec::new();
    let mut tx = Vec::new();
    for id in 0..=workers {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .context("socketpair")?;
        let s = shared.try_clone().context("dup")?;
        // SAFETY: this process has one thread; the child works and exits.
        match unsafe { fork() }.context("fork")? {
            ForkResult::Child => {
                drop((a, tx, passed, shared));
                let r = if id < workers {
                    root_worker(id, cfg, sh, deadline, s, b)
                } else {
                    ns_worker(cfg, sh, deadline, s, b, ifindex)
                };
                let code = match r {
                    Ok(()) => 0,
                    Err(e) => {
                        println!(
                            "zn-fuzz: flows: {}: {e:#}",
                            if id < workers {
                                format!("worker {id}")
                            } else {
                                "netns worker".into()
                            }
                        );
                        2
                    }
                };
                // SAFETY: leaves without running the parent's exit handlers.
                unsafe { libc::_exit(code) }
            }
            ForkResult::Parent { child } => {
                let name = if id < workers {
                    format!("worker {id}")
                } else {
                    "netns worker".into()
                };
                pids.push((name, child));
                tx.push(a);
            }
        }
    }
    // The second shared file goes to each worker over SCM_RIGHTS.
    for s in &tx {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
        let fds = [passed.as_raw_fd()];
        let iov = [std::io::IoSlice::new(b"f")];
        let _ = sendmsg::<()>(
            s.as_raw_fd(),
            &iov,
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        );
    }
    drop((tx, passed, shared));
    let mut processes_ok = true;
    for (name, pid) in &pids {
        let st = crate::reap(*pid, deadline + Duration::from_secs(60));
        if st != WaitStatus::Exited(*pid, 0) {
            println!("zn-fuzz: flows: {name} ended with {st:?}");
            processes_ok = false;
        }
    }

    // ---- report ----------------------------------------------------------
    let mut v: Verdicts = Vec::new();
    let ld = |a: &AtomicU64| a.load(Relaxed);
    let mut rows: Vec<usize> = (0..workers).collect();
    rows.push(MAX_WORKERS);
    let mut total = [0u64; OPS];
    for r in rows {
        let name = if r == MAX_WORKERS {
            "netns worker".to_string()
        } else {
            format!("worker {r}")
        };
        let mut parts = Vec::new();
        for (k, n) in OP_NAMES.iter().enumerate() {
            let c = ld(&sh.ops[r][k]);
            total[k] += c;
            if c > 0 {
                parts.push(format!("{n} {c}"));
            }
        }
        println!("zn-fuzz: flows: {name}: {}", parts.join(", "));
    }
    let parts: Vec<String> = OP_NAMES
        .iter()
        .zip(total)
        .map(|(n, c)| format!("{n} {c}"))
        .collect();
    println!("zn-fuzz: flows: all workers: {}", parts.join(", "));
    let mut calls = 0u64;
    for call in Call::ALL {
        let mut parts = Vec::new();
        for (e, n) in sh.results[call as usize].iter().enumerate() {
            let n = ld(n);
            calls += n;
            if n > 0 {
                let name = if e == 0 {
                    "ok"
                } else {
                    Errno::from_raw(e as i32).name()
                };
                parts.push(format!("{name} {n}"));
            }
        }
        if !parts.is_empty() {
            println!("zn-fuzz: flows: {}: {}", call.name(), parts.join(", "));
        }
    }
    println!(
        "zn-fuzz: flows: completions: SEND {}, RECV {}, STREAM_DATA {}, FLOW {}, unknown {}; attached on port 0: {}, port 1: {}; forked callers {} ({} killed); files received over SCM_RIGHTS {}",
        ld(&sh.cqes[1]),
        ld(&sh.cqes[2]),
        ld(&sh.cqes[3]),
        ld(&sh.cqes[4]),
        ld(&sh.cqes[0]),
        ld(&sh.attached_port[0]),
        ld(&sh.attached_port[1]),
        ld(&sh.children),
        ld(&sh.killed),
        ld(&sh.fds_received)
    );
    let undoc = ld(&sh.undocumented);
    v.push((
        "flows-errnos".into(),
        undoc == 0,
        format!("{undoc} of {calls} calls of the flow workers returned an errno the header does not document for the call"),
    ));
    let incons = ld(&sh.inconsistent);
    v.push((
        "flows-consistent".into(),
        incons == 0,
        format!("{incons} results contradicted the state (loopback attaches, flow queries, ring returns, posted counts, own CQs)"),
    ));
    let bad = ld(&sh.cqe_bad);
    v.push((
        "flows-cqe-status".into(),
        bad == 0,
        format!(
            "{bad} of {} completions had an unknown opcode or a status docs/uapi.md does not give it",
            sh.cqes.iter().map(ld).sum::<u64>()
        ),
    ));
    let cf = ld(&sh.child_failures);
    v.push((
        "flows-processes".into(),
        processes_ok && cf == 0,
        format!(
            "{} workers exited 0: {}; {cf} forked callers ended other than exiting or killed",
            pids.len(),
            if processes_ok { "yes" } else { "no" }
        ),
    ));
    let (na, ne) = (ld(&sh.ns_attaches), ld(&sh.ns_enodev));
    v.push((
        "flows-netns".into(),
        ld(&sh.ns_ready) == 1 && na > 0 && na == ne,
        format!(
            "uid 65534 in namespaces of its own (set up: {}): {ne} of {na} attaches (veth with the ports' indexes {ifindex:?}, loopback) were ENODEV",
            ld(&sh.ns_ready) == 1
        ),
    ));
    let attached = ld(&sh.attached_port[0]) + ld(&sh.attached_port[1]);
    let ok_of = |c: Call| ld(&sh.results[c as usize][0]);
    let covered = attached > 0
        && ok_of(Call::Post) > 0
        && ok_of(Call::FlowDetach) > 0
        && ld(&sh.cqes[1]) + ld(&sh.cqes[2]) + ld(&sh.cqes[3]) > 0
        && ld(&sh.killed) > 0
        && ld(&sh.fds_received) as usize == workers + 1;
    v.push((
        "flows-coverage".into(),
        covered,
        format!(
            "attaches {attached}, posts ok {}, detaches ok {}, data completions {}, callers killed {}, files received {} of {}",
            ok_of(Call::Post),
            ok_of(Call::FlowDetach),
            ld(&sh.cqes[1]) + ld(&sh.cqes[2]) + ld(&sh.cqes[3]),
            ld(&sh.killed),
            ld(&sh.fds_received),
            workers + 1
        ),
    ));
    let now = counters::settle(10, base, || Ok(counters::nic_counters()?.0));
    let nobody = counters::nic_counters_as(crate::NOBODY);
    let ok = matches!(&now, Ok(c) if *c == base)
        && matches!(&nobody, Ok(c) if c.user_locked_pages == base_nobody.user_locked_pages && c.mr_user_in_use == base_nobody.mr_user_in_use);
    let show = |r: &Result<NicCounters>| {
        r.as_ref()
            .map_or_else(|e| format!("{e:#}"), |c| format!("{c:?}"))
    };
    v.push((
        "flows-counters".into(),
        ok,
        format!(
            "NIC 0 after every file closed {}, before {base:?}; nobody {}, before {base_nobody:?}",
            show(&now),
            show(&nobody)
        ),
    ));
    let log = log_lines();
    let reports: Vec<&String> = log
        .iter()
        .skip(mark)
        .filter(|l| REPORTS.iter().any(|p| l.contains(p)))
        .collect();
    for l in reports.iter().take(20) {
        println!("zn-fuzz: flows: kernel: {l}");
    }
    v.push((
        "flows-kernel-log".into(),
        reports.is_empty(),
        format!(
            "{} kernel report lines during the flow phase",
            reports.len()
        ),
    ));
    Ok(v)
}

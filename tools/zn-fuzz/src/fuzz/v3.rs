//! The version 3 calls (completion queues, flows, work requests): what a
//! worker keeps of them and how a fuzzing thread makes them.
//!
//! Sockets to attach come in every kind the header names an errno for:
//! not a descriptor (EBADF), not a socket (ENOTSOCK), not TCP
//! (EPROTONOSUPPORT), not IPv4 (EAFNOSUPPORT), not established (ENOTCONN),
//! established over loopback (ENODEV: not routed out of a ZeroNIC port),
//! and established TCP connections across the ZeroNIC link, made by main
//! before the workers forked and shared by all of them (`--tcp`), which
//! become real flows. Only those can succeed; every other kind must fail.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

use nix::errno::Errno::{EFAULT, EINVAL};
use zeronic_uapi::{
    CqCreate, CqDestroy, CqRing, FlowAttach, FlowDetach, FlowQuery, Post, StreamConsume, Wr,
    CQ_MAX_ENTRIES, CQ_MIN_ENTRIES, IOC_CQ_CREATE, IOC_CQ_DESTROY, IOC_FLOW_ATTACH,
    IOC_FLOW_DETACH, IOC_FLOW_QUERY, IOC_POST, IOC_STREAM_CONSUME, RX_MESSAGE, RX_STREAM, WR_RECV,
    WR_SEND,
};

use crate::errnos::{Call, ErrnoName};
use crate::fuzz::{bytes_of, from_bytes, Expect, FileRef, Fuzzer};
use crate::ioc::raw_ioctl;
use crate::mem::{self, Place};

/// A live CQ of one of the process's files.
#[derive(Clone, Copy, Debug)]
pub struct CqRec {
    file: u64,
    cq: u32,
    entries: u32,
    mmap_offset: u64,
    mmap_size: u64,
}

/// A live flow of one of the process's files.
#[derive(Clone, Copy, Debug)]
pub struct FlowRec {
    file: u64,
    flow: u32,
}

/// A socket to attach, and whether attaching it can ever succeed.
pub struct Sock {
    what: &'static str,
    fd: OwnedFd,
    may_attach: bool,
}

/// What a worker keeps of version 3 objects.
pub struct ProcV3 {
    cqs: Mutex<Vec<CqRec>>,
    flows: Mutex<Vec<FlowRec>>,
    socks: Mutex<Vec<Sock>>,
    eventfd: Mutex<Option<OwnedFd>>,
}

const MAX_CQS: usize = 16;
const MAX_FLOWS: usize = 16;

fn sock(domain: i32, ty: i32) -> Option<OwnedFd> {
    // SAFETY: plain syscall; the descriptor is ours.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, 0) };
    // SAFETY: a descriptor just returned to us.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A connected TCP pair over loopback (the client end), if lo is up.
fn loopback_connection() -> Option<(OwnedFd, OwnedFd, OwnedFd)> {
    let l = sock(libc::AF_INET, libc::SOCK_STREAM)?;
    let mut a: libc::sockaddr_in = libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
        },
        sin_zero: [0; 8],
    };
    let len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `a` is a sockaddr_in of `len` bytes, read and written by the
    // kernel; the descriptors are ours.
    unsafe {
        if libc::bind(l.as_raw_fd(), (&raw const a).cast(), len) != 0
            || libc::listen(l.as_raw_fd(), 4) != 0
        {
            return None;
        }
        let mut alen = len;
        if libc::getsockname(l.as_raw_fd(), (&raw mut a).cast(), &mut alen) != 0 {
            return None;
        }
        let c = sock(libc::AF_INET, libc::SOCK_STREAM)?;
        if libc::connect(c.as_raw_fd(), (&raw const a).cast(), len) != 0 {
            return None;
        }
        let s = libc::accept4(
            l.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        );
        if s < 0 {
            return None;
        }
        Some((c, OwnedFd::from_raw_fd(s), l))
    }
}

impl ProcV3 {
    /// The process's sockets of every kind, plus `link` (connections
    /// across the ZeroNIC link, from main).
    pub fn new(link: Vec<OwnedFd>) -> ProcV3 {
        let mut socks = Vec::new();
        let mut add = |what, fd: Option<OwnedFd>, may_attach| {
            if let Some(fd) = fd {
                socks.push(Sock {
                    what,
                    fd,
                    may_attach,
                });
            }
        };
        add("UDP socket", sock(libc::AF_INET, libc::SOCK_DGRAM), false);
        add(
            "unconnected TCP socket",
            sock(libc::AF_INET, libc::SOCK_STREAM),
            false,
        );
        add(
            "IPv6 TCP socket",
            sock(libc::AF_INET6, libc::SOCK_STREAM),
            false,
        );
        add(
            "AF_UNIX stream socket",
            sock(libc::AF_UNIX, libc::SOCK_STREAM),
            false,
        );
        if let Some((c, s, l)) = loopback_connection() {
            add("TCP connection over loopback", Some(c), false);
            add("accepted TCP connection over loopback", Some(s), false);
            add("listening TCP socket", Some(l), false);
        }
        for fd in link {
            add("TCP connection across the ZeroNIC link", Some(fd), true);
        }
        // SAFETY: plain syscall; the descriptor is ours.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        ProcV3 {
            cqs: Mutex::new(Vec::new()),
            flows: Mutex::new(Vec::new()),
            socks: Mutex::new(socks),
            // SAFETY: a descriptor just returned to us.
            eventfd: Mutex::new((efd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(efd) })),
        }
    }

    /// Forgets everything and closes the sockets (the end of the run; the
    /// files' close releases the CQs and flows).
    pub fn clear(&self) {
        self.cqs.lock().expect("cqs lock").clear();
        self.flows.lock().expect("flows lock").clear();
        self.socks.lock().expect("socks lock").clear();
        self.eventfd.lock().expect("eventfd lock").take();
    }
}

impl Fuzzer<'_> {
    fn reserved(&mut self) -> u32 {
        if self.rng.chance(1, 10) {
            self.rng.next_u32() | 1 << self.rng.below(32)
        } else {
            0
        }
    }

    fn own_cq(&mut self, file: &FileRef) -> Option<CqRec> {
        let cqs = self.proc.v3.cqs.lock().expect("cqs lock");
        let mine: Vec<&CqRec> = cqs.iter().filter(|c| c.file == file.id).collect();
        if mine.is_empty() {
            None
        } else {
            Some(**self.rng.pick(&mine))
        }
    }

    fn own_flow(&mut self, file: &FileRef) -> Option<FlowRec> {
        let flows = self.proc.v3.flows.lock().expect("flows lock");
        let mine: Vec<&FlowRec> = flows.iter().filter(|f| f.file == file.id).collect();
        if mine.is_empty() {
            None
        } else {
            Some(**self.rng.pick(&mine))
        }
    }

    /// A flow id: mostly one of this file's, else a made-up one.
    fn flow_id(&mut self, file: &FileRef) -> (u32, &'static str) {
        match self.own_flow(file) {
            Some(f) if self.rng.chance(4, 5) => (f.flow, "own flow"),
            _ => {
                let r = self.rng.next_u32();
                (*self.rng.pick(&[0, 1, 2, 7, u32::MAX, r]), "made-up flow")
            }
        }
    }

    /// The expectation for an argument at `place` the kernel reads, and
    /// writes back if `writes`, with `reserved` bits.
    fn base_expect(place: Place, writes: bool, reserved: u32) -> Expect {
        if !place.readable() {
            Expect::Exactly(EFAULT)
        } else if reserved != 0 {
            Expect::Exactly(EINVAL)
        } else if writes && !place.writable() {
            Expect::Fail
        } else {
            Expect::Documented
        }
    }

    // ---- ZERONIC_IOC_CQ_CREATE, ZERONIC_IOC_CQ_DESTROY ------------------------

    pub(crate) fn cq_create(&mut self, file: &FileRef) {
        let (entries, valid_entries) = if self.rng.chance(4, 5) {
            (1u32 << self.rng.range(3, 8), true) // 8 .. 256
        } else {
            let e = *self.rng.pick(&[
                0,
                1,
                4,
                7,
                9,
                100,
                CQ_MAX_ENTRIES + 1,
                CQ_MAX_ENTRIES * 2,
                u32::MAX,
            ]);
            let valid = e.is_power_of_two() && (CQ_MIN_ENTRIES..=CQ_MAX_ENTRIES).contains(&e);
            (e, valid)
        };
        let (eventfd, ev_what, ev_bad): (i32, &str, bool) = match self.rng.below(10) {
            0..5 => (-1, "none", false),
            5..8 => {
                let e = self.proc.v3.eventfd.lock().expect("eventfd lock");
                match e.as_ref() {
                    Some(fd) => (fd.as_raw_fd(), "an eventfd", false),
                    None => (-1, "none", false),
                }
            }
            8 => (file.fd.as_raw_fd(), "this /dev/zeronic file", true),
            _ => (
                *self.rng.pick(&[-2, i32::MIN, 1_000_000]),
                "not a descriptor",
                true,
            ),
        };
        let reserved = self.reserved();
        let req = CqCreate {
            entries,
            eventfd,
            cq: self.rng.next_u32(),
            reserved,
            mmap_offset: self.rng.next_u64(),
            mmap_size: self.rng.next_u64(),
        };
        let mut bytes = bytes_of(&req);
        let place = self
            .args
            .choose(&mut self.rng, bytes.len() as u64, 80, &self.mem);
        let ptr = self.args.put(place, &bytes);
        let res = raw_ioctl(file.fd.as_raw_fd(), IOC_CQ_CREATE, ptr);
        let mut expect = Self::base_expect(place, true, reserved);
        if expect == Expect::Documented && (!valid_entries || ev_bad) {
            expect = Expect::Fail;
        }
        let args =
            || format!("entries={entries} eventfd={eventfd} ({ev_what}) reserved={reserved:#x}");
        if !self.verdict(
            Call::CqCreate,
            file,
            IOC_CQ_CREATE,
            place,
            &args,
            res,
            expect,
        ) || !place.writable()
        {
            return;
        }
        self.args.get(place, &mut bytes);
        let out: CqCreate = from_bytes(&bytes);
        let rec = CqRec {
            file: file.id,
            cq: out.cq,
            entries,
            mmap_offset: out.mmap_offset,
            mmap_size: out.mmap_size,
        };
        if out.mmap_size < 4096 + u64::from(entries) * 32 {
            self.inconsistent(&format!(
                "ZERONIC_IOC_CQ_CREATE of {entries} entries gave mmap_size {} (a page and {entries} entries of 32 bytes do not fit)",
                out.mmap_size
            ));
        } else if self.rng.chance(1, 2) {
            self.check_ring(file, rec);
        }
        let evicted = {
            let mut cqs = self.proc.v3.cqs.lock().expect("cqs lock");
            cqs.push(rec);
            (cqs.len() > MAX_CQS).then(|| cqs.swap_remove(0))
        };
        if let Some(old) = evicted {
            if let Some(f) = self
                .proc
                .files
                .lock()
                .expect("files lock")
                .iter()
                .find(|f| f.id == old.file)
                .cloned()
            {
                let d = CqDestroy {
                    cq: old.cq,
                    reserved: 0,
                };
                let _ = raw_ioctl(
                    f.fd.as_raw_fd(),
                    IOC_CQ_DESTROY,
                    self.args.put(Place::Rw(0), &bytes_of(&d)),
                );
            }
        }
    }

    /// Maps a new CQ and checks its ring page: nothing produced or consumed
    /// yet, the mask and the entries' offset fit the size.
    fn check_ring(&mut self, file: &FileRef, c: CqRec) {
        let Ok(p) = mem::map_shared_file(file.fd.as_raw_fd(), c.mmap_size, c.mmap_offset) else {
            return; // the NIC may be going away: the ioctls are what is checked
        };
        let mut ring = CqRing::default();
        // SAFETY: the first page of the CQ mapping, a struct zeronic_cq_ring;
        // raw copy, no reference kept.
        unsafe { std::ptr::copy_nonoverlapping(p as *const CqRing, &mut ring, 1) };
        // SAFETY: the mapping just made.
        unsafe { libc::munmap(p as *mut libc::c_void, c.mmap_size as usize) };
        let fits = u64::from(ring.entries_offset) + u64::from(c.entries) * 32 <= c.mmap_size;
        if ring.mask != c.entries - 1
            || ring.head != 0
            || ring.tail != 0
            || ring.entries_offset < 64
            || !fits
        {
            self.inconsistent(&format!(
                "a new CQ of {} entries maps with head {} tail {} mask {:#x} entries_offset {} (mmap_size {})",
                c.entries, ring.head, ring.tail, ring.mask, ring.entries_offset, c.mmap_size
            ));
        }
    }

    pub(crate) fn cq_destroy(&mut self, file: &FileRef) {
        let (cq, what) = match self.own_cq(file) {
            Some(c) if self.rng.chance(4, 5) => (c.cq, "own CQ"),
            _ => {
                let r = self.rng.next_u32();
                (*self.rng.pick(&[0, 1, u32::MAX, r]), "made-up CQ")
            }
        };
        let reserved = self.reserved();
        let bytes = bytes_of(&CqDestroy { cq, reserved });
        let place = self
            .args
            .choose(&mut self.rng, bytes.len() as u64, 85, &self.mem);
        let ptr = self.args.put(place, &bytes);
        let res = raw_ioctl(file.fd.as_raw_fd(), IOC_CQ_DESTROY, ptr);
        let expect = Self::base_expect(place, false, reserved);
        let args = || format!("cq={cq} ({what}) reserved={reserved:#x}");
        if self.verdict(
            Call::CqDestroy,
            file,
            IOC_CQ_DESTROY,
            place,
            &args,
            res,
            expect,
        ) {
            self.proc
                .v3
                .cqs
                .lock()
                .expect("cqs lock")
                .retain(|c| !(c.file == file.id && c.cq == cq));
        }
    }

    // ---- ZERONIC_IOC_FLOW_ATTACH, FLOW_DETACH, FLOW_QUERY, STREAM_CONSUME ----

    pub(crate) fn flow_attach(&mut self, file: &FileRef) {
        let (sockfd, what, may_attach, _hold) = {
            let socks = self.proc.v3.socks.lock().expect("socks lock");
            match self.rng.below(10) {
                0 => (-1, "-1", false, None),
                1 => (file.fd.as_raw_fd(), "this /dev/zeronic file", false, None),
                _ if !socks.is_empty() => {
                    let s = self.rng.pick(&socks);
                    // Keep the descriptor open while it is in use.
                    let hold = s.fd.try_clone().ok();
                    (
                        hold.as_ref().map_or(-1, |h| h.as_raw_fd()),
                        s.what,
                        s.may_attach,
                        hold,
                    )
                }
                _ => (1_000_000, "not a descriptor", false, None),
            }
        };
        let (cq, cq_what) = match self.own_cq(file) {
            Some(c) if self.rng.chance(5, 6) => (c.cq, "own CQ"),
            _ => (self.rng.next_u32(), "made-up CQ"),
        };
        let rx_mode = match self.rng.below(10) {
            0..6 => RX_MESSAGE,
            6..9 => RX_STREAM,
            _ => *self.rng.pick(&[0, 3, u32::MAX]),
        };
        let (ring_key, key_what) = {
            let keys = self.proc.keys.lock().expect("keys lock");
            let mine: Vec<u64> = keys
                .iter()
                .filter(|k| k.file == file.id)
                .map(|k| k.key)
                .collect();
            if !mine.is_empty() && self.rng.chance(3, 4) {
                (*self.rng.pick(&mine), "own region")
            } else {
                (self.rng.next_u64(), "made-up key")
            }
        };
        let ring_size = if self.rng.chance(4, 5) {
            1u64 << self.rng.range(12, 16)
        } else {
            *self.rng.pick(&[0, 1, 4095, 4097, 1 << 40, u64::MAX])
        };
        let ring_offset = if self.rng.chance(4, 5) {
            0
        } else {
            self.rng.next_u64()
        };
        // Message mode takes no ring (any ring field is EINVAL): mostly
        // leave them zero, so that attaches can succeed.
        let (ring_key, key_what, ring_offset, ring_size) =
            if rx_mode == RX_MESSAGE && self.rng.chance(9, 10) {
                (0, "no ring", 0, 0)
            } else {
                (ring_key, key_what, ring_offset, ring_size)
            };
        let (reserved0, reserved1) = (self.reserved(), self.reserved());
        let req = FlowAttach {
            sockfd,
            cq,
            rx_mode,
            reserved0,
            ring_key,
            ring_offset,
            ring_size,
            flow: self.rng.next_u32(),
            nic: self.rng.next_u32(),
            port: self.rng.next_u32(),
            reserved1,
        };
        let mut bytes = bytes_of(&req);
        let place = self
            .args
            .choose(&mut self.rng, bytes.len() as u64, 85, &self.mem);
        let ptr = self.args.put(place, &bytes);
        let res = raw_ioctl(file.fd.as_raw_fd(), IOC_FLOW_ATTACH, ptr);
        let mut expect = Self::base_expect(place, true, reserved0 | reserved1);
        if expect == Expect::Documented
            && (!may_attach || !(rx_mode == RX_MESSAGE || rx_mode == RX_STREAM))
        {
            expect = Expect::Fail;
        }
        let args = || {
            format!(
                "sockfd={sockfd} ({what}) cq={cq} ({cq_what}) rx_mode={rx_mode} ring_key={ring_key:#x} ({key_what}) ring_offset={ring_offset:#x} ring_size={ring_size:#x} reserved0={reserved0:#x} reserved1={reserved1:#x}"
            )
        };
        if !self.verdict(
            Call::FlowAttach,
            file,
            IOC_FLOW_ATTACH,
            place,
            &args,
            res,
            expect,
        ) || !place.writable()
        {
            return;
        }
        self.args.get(place, &mut bytes);
        let out: FlowAttach = from_bytes(&bytes);
        if out.nic >= self.nics.max(1) || out.port >= zeronic_uapi::MAX_PORTS as u32 {
            self.inconsistent(&format!(
                "ZERONIC_IOC_FLOW_ATTACH gave flow {} on nic {} port {} ({})",
                out.flow,
                out.nic,
                out.port,
                args()
            ));
        }
        let mut flows = self.proc.v3.flows.lock().expect("flows lock");
        flows.push(FlowRec {
            file: file.id,
            flow: out.flow,
        });
        if flows.len() > MAX_FLOWS {
            flows.swap_remove(0); // detached when its file closes
        }
    }

    /// A call naming one flow: `struct { u32 flow; u32 reserved; ... }`.
    pub(crate) fn flow_detach(&mut self, file: &FileRef) {
        let (flow, what) = self.flow_id(file);
        let reserved = self.reserved();
        let bytes = bytes_of(&FlowDetach { flow, reserved });
        let place = self
            .args
            .choose(&mut self.rng, bytes.len() as u64, 85, &self.mem);
        let ptr = self.args.put(place, &bytes);
        let res = raw_ioctl(file.fd.as_raw_fd(), IOC_FLOW_DETACH, ptr);
        let expect = Self::base_expect(place, false, reserved);
        let args = || format!("flow={flow} ({what}) reserved={reserved:#x}");
        if self.verdict(
            Call::FlowDetach,
            file,
            IOC_FLOW_DETACH,
            place,
            &args,
            res,
            expect,
        ) {
            self.proc
                .v3
                .flows
                .lock()
                .expect("flows lock")
                .retain(|f| !(f.file == file.id && f.flow == flow));
        }
    }

    pub(crate) fn stream_consume(&mut self, file: &FileRef) {
        let (flow, what) = self.flow_id(file);
        let reserved = self.reserved();
        let r = self.rng.next_u64();
        let stream_off = *self.rng.pick(&[0, 1, 4096, r]);
        let bytes = bytes_of(&StreamConsume {
            flow,
            reserved,
            stream_off,
        });
        let place = self
            .args
            .choose(&mut self.rng, bytes.len() as u64, 85, &self.mem);
        let ptr = self.args.put(place, &bytes);
        let res = raw_ioctl(file.fd.as_raw_fd(), IOC_STREAM_CONSUME, ptr);
        let expect = Self::base_expect(place, false, reserved);
        let args =
            || format!("flow={flow} ({what}) stream_off={stream_off:#x} reserved={reserved:#x}");
        self.verdict(
            Call::StreamConsume,
            file,
            IOC_STREAM_CONSUME,
            place,
            &args,
            res,
            expect,
        );
    }

    pub(crate) fn flow_query(&mut self, file: &FileRef) {
        let (flow, what) = self.flow_id(file);
        let mut bytes = bytes_of(&FlowQuery::default());
        self.rng.fill(&mut bytes); // out-only fields: garbage must not matter
        bytes[..4].copy_from_slice(&flow.to_ne_bytes());
        let place = self
            .args
            .choose(&mut self.rng, bytes.len() as u64, 80, &self.mem);
        let ptr = self.args.put(place, &bytes);
        let res = raw_ioctl(file.fd.as_raw_fd(), IOC_FLOW_QUERY, ptr);
        let expect = Self::base_expect(place, true, 0);
        let args = || format!("flow={flow} ({what})");
        if !self.verdict(
            Call::FlowQuery,
            file,
            IOC_FLOW_QUERY,
            place,
            &args,
            res,
            expect,
        ) || !place.writable()
        {
            return;
        }
        self.args.get(place, &mut bytes);
        let out: FlowQuery = from_bytes(&bytes);
        if out.flow != flow || !(1..=4).contains(&out.state) || out.reserved != [0, 0] {
            self.inconsistent(&format!(
                "ZERONIC_IOC_FLOW_QUERY of flow {flow} gave flow {} state {} reserved {:?}",
                out.flow, out.state, out.reserved
            ));
        }
    }

    // ---- ZERONIC_IOC_POST ------------------------------------------------------

    pub(crate) fn post(&mut self, file: &FileRef) {
        let (flow, what) = self.flow_id(file);
        let count = match self.rng.below(10) {
            0..8 => self.rng.range(1, 4) as u32,
            _ => *self.rng.pick(&[0, 257, 1000, u32::MAX]),
        };
        let keys: Vec<u64> = {
            let keys = self.proc.keys.lock().expect("keys lock");
            keys.iter()
                .filter(|k| k.file == file.id)
                .map(|k| k.key)
                .collect()
        };
        let n = count.clamp(1, 4) as usize;
        let mut wrs = Vec::with_capacity(n * size_of::<Wr>());
        for i in 0..n {
            let key = if !keys.is_empty() && self.rng.chance(3, 4) {
                *self.rng.pick(&keys)
            } else {
                self.rng.next_u64()
            };
            let wr = Wr {
                wr_id: i as u64 + 1,
                key,
                offset: if self.rng.chance(4, 5) {
                    self.rng.below(4096)
                } else {
                    self.rng.next_u64()
                },
                len: if self.rng.chance(4, 5) {
                    self.rng.range(1, 4096) as u32
                } else {
                    *self.rng.pick(&[0, u32::MAX])
                },
                opcode: if self.rng.chance(9, 10) {
                    *self.rng.pick(&[WR_SEND, WR_RECV])
                } else {
                    *self.rng.pick(&[0, 3, u16::MAX])
                },
                flags: if self.rng.chance(9, 10) {
                    0
                } else {
                    1 << self.rng.below(16)
                },
            };
            wrs.extend_from_slice(&bytes_of(&wr));
        }
        // The array: readable, or partly or wholly not.
        let wplace = self
            .arrays
            .choose(&mut self.rng, wrs.len() as u64, 85, &self.mem);
        let wptr = self.arrays.put(wplace, &wrs);
        let reserved = self.reserved();
        let req = Post {
            flow,
            count,
            wrs: wptr,
            posted: self.rng.next_u32(),
            reserved,
        };
        let mut bytes = bytes_of(&req);
        let place = self
            .args
            .choose(&mut self.rng, bytes.len() as u64, 85, &self.mem);
        let ptr = self.args.put(place, &bytes);
        let res = raw_ioctl(file.fd.as_raw_fd(), IOC_POST, ptr);
        let mut expect = if !place.readable() {
            Expect::Exactly(EFAULT)
        } else if !place.writable()
            || reserved != 0
            || count == 0
            || count > 256
            || (count as usize) > n
        {
            // (count above the array written: the rest is whatever follows it)
            Expect::Fail
        } else {
            Expect::Documented
        };
        if expect == Expect::Documented && !wplace.readable() {
            expect = Expect::Fail;
        }
        let wdesc = self.arrays.describe(wplace);
        let args =
            || format!("flow={flow} ({what}) count={count} wrs at {wdesc} reserved={reserved:#x}");
        let ok = self.verdict(Call::Post, file, IOC_POST, place, &args, res, expect);
        if place.writable() && (ok || res.is_err()) {
            self.args.get(place, &mut bytes);
            let out: Post = from_bytes(&bytes);
            // On success every request was accepted; on a failure after the
            // argument was read, `posted` counts the accepted ones before
            // the refused one (and is not written if the call failed early).
            if ok && out.posted != count {
                self.inconsistent(&format!(
                    "ZERONIC_IOC_POST returned 0 with posted {} of {count}",
                    out.posted
                ));
            } else if !ok && res != Err(EFAULT) && out.posted != req.posted && out.posted >= count {
                self.inconsistent(&format!(
                    "ZERONIC_IOC_POST failed with {} but says posted {} of {count}",
                    res.err().map_or("?", |e| e.name()),
                    out.posted
                ));
            }
        }
    }
}

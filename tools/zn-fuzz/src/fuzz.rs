//! One fuzzing thread: picks a file and a call, builds hostile or valid
//! arguments, makes the call, and checks the result against the oracles:
//!
//! 1. the errno is one the header documents for the call ([`errnos`]);
//! 2. where the arguments determine the outcome, the outcome is that one:
//!    EFAULT for an unreadable argument, ENOTTY for an unknown command word,
//!    EINVAL for a non-zero reserved field, ENOENT for a key that was
//!    deregistered (keys are never handed out twice), a failure for input
//!    the header rejects (and for an argument the kernel cannot write back);
//! 3. a successful QUERY's fields are consistent, a new key is nonzero and
//!    was never handed out before.
//!
//! Violations are counted in [`Shared`] and printed with the call and its
//! arguments.

use std::collections::{HashSet, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use nix::errno::Errno;
use nix::errno::Errno::{EFAULT, EINVAL, EIO, ENODEV, ENOENT, ENOTTY};
use zeronic_uapi::{
    MrDereg, MrReg, Query, ACCESS_LOCAL_READ, ACCESS_LOCAL_WRITE, IOC_MR_DEREG, IOC_MR_REG,
    IOC_QUERY, MAX_PORTS,
};

use crate::child;
use crate::errnos::{self, Call, ErrnoName};
use crate::ioc::{self, raw_ioctl};
use crate::mem::{ArgPages, Mem, Place};
use crate::rng::Rng;
use crate::shared::Shared;

pub mod v3;

/// An open `/dev/zeronic` descriptor of the process. Closed when the last
/// clone is dropped, so a thread's call never races the close of its number.
#[derive(Clone)]
pub struct FileRef {
    /// Unique within the process.
    pub id: u64,
    /// The descriptor.
    pub fd: Arc<OwnedFd>,
    /// One of the run's shared files: kept until the end.
    pub keep: bool,
}

/// A region this process registered and has not deregistered.
#[derive(Clone, Copy, Debug)]
pub struct KeyRec {
    /// `FileRef::id` of the descriptor it was registered through.
    pub file: u64,
    /// Its key.
    pub key: u64,
    /// Its NIC.
    pub nic: u32,
}

/// What the threads of a worker process share.
pub struct Proc {
    /// Open files.
    pub files: Mutex<Vec<FileRef>>,
    /// Live regions (some are forgotten when full: the file's close releases them).
    pub keys: Mutex<Vec<KeyRec>>,
    /// Keys this process deregistered (0 or EIO), most recent last.
    pub stale: Mutex<VecDeque<(u64, u32)>>,
    /// Every key this process was handed.
    pub seen: Mutex<HashSet<u64>>,
    /// Next `FileRef::id`.
    pub next_id: AtomicU64,
    /// This worker's end for files from the others (SCM_RIGHTS).
    pub sock_rx: Mutex<Option<OwnedFd>>,
    /// The other workers' ends.
    pub sock_tx: Mutex<Vec<OwnedFd>>,
    /// Version 3 objects: CQs, flows, sockets to attach.
    pub v3: v3::ProcV3,
}

const MAX_FILES: usize = 12;
const MAX_KEYS: usize = 256;
const MAX_STALE: usize = 512;

impl Proc {
    /// A process state holding `files` (the run's shared files).
    pub fn new(
        files: Vec<OwnedFd>,
        sock_rx: OwnedFd,
        sock_tx: Vec<OwnedFd>,
        v3: v3::ProcV3,
    ) -> Proc {
        let p = Proc {
            v3,
            files: Mutex::new(Vec::new()),
            keys: Mutex::new(Vec::new()),
            stale: Mutex::new(VecDeque::new()),
            seen: Mutex::new(HashSet::new()),
            next_id: AtomicU64::new(1),
            sock_rx: Mutex::new(Some(sock_rx)),
            sock_tx: Mutex::new(sock_tx),
        };
        for f in files {
            p.add(f, true);
        }
        p
    }

    pub(crate) fn add(&self, fd: OwnedFd, keep: bool) -> bool {
        let mut files = self.files.lock().expect("files lock");
        if files.len() >= MAX_FILES && !keep {
            return false;
        }
        files.push(FileRef {
            id: self.next_id.fetch_add(1, Relaxed),
            fd: Arc::new(fd),
            keep,
        });
        true
    }

    pub(crate) fn pick(&self, rng: &mut Rng) -> Option<FileRef> {
        let files = self.files.lock().expect("files lock");
        if files.is_empty() {
            return None;
        }
        Some(rng.pick(&files).clone())
    }

    /// Closes every file and the sockets (the end of the run).
    pub fn close_all(&self) {
        self.v3.clear();
        self.files.lock().expect("files lock").clear();
        self.keys.lock().expect("keys lock").clear();
        self.sock_rx.lock().expect("sock lock").take();
        self.sock_tx.lock().expect("sock lock").clear();
    }
}

/// The outcome a call's arguments determine, beyond the documented errnos.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expect {
    /// Any documented errno, or success.
    Documented,
    /// Exactly this errno.
    Exactly(Errno),
    /// Some documented errno, never success.
    Fail,
}

/// A fuzzing thread.
pub struct Fuzzer<'a> {
    pub(crate) shared: &'static Shared,
    pub(crate) proc: &'a Proc,
    who: String,
    pub(crate) rng: Rng,
    pub(crate) args: ArgPages,
    /// A second set of argument pages, for arrays an argument points to.
    pub(crate) arrays: ArgPages,
    pub(crate) mem: Mem,
    /// NICs bound at the start (num_nics of the baseline QUERY).
    pub(crate) nics: u32,
    /// mr_max_bytes of the last successful QUERY.
    max_bytes: u64,
    /// The last call failed with ENODEV.
    unbound: bool,
}

pub(crate) fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    let mut out = vec![0u8; size_of::<T>()];
    // SAFETY: `T` is one of the uapi structs: plain integers, no padding.
    unsafe {
        std::ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), out.as_mut_ptr(), out.len())
    };
    out
}

pub(crate) fn from_bytes<T: Copy + Default>(b: &[u8]) -> T {
    let mut v = T::default();
    assert!(b.len() >= size_of::<T>());
    // SAFETY: `T` is one of the uapi structs: every bit pattern is valid.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), (&mut v as *mut T).cast::<u8>(), size_of::<T>())
    };
    v
}

impl<'a> Fuzzer<'a> {
    /// A thread's fuzzer.
    pub fn new(
        shared: &'static Shared,
        proc: &'a Proc,
        who: String,
        rng: Rng,
        mem: Mem,
        nics: u32,
        max_bytes: u64,
    ) -> anyhow::Result<Fuzzer<'a>> {
        Ok(Fuzzer {
            shared,
            proc,
            who,
            rng,
            args: ArgPages::new()?,
            arrays: ArgPages::new()?,
            mem,
            nics,
            max_bytes,
            unbound: false,
        })
    }

    /// Fuzzes until `deadline`.
    pub fn run(&mut self, deadline: Instant) {
        // query, reg, dereg, unknown, fd op, memory op, fork a caller, kill one mid-call
        // query, reg, dereg, unknown, fd op, memory op, fork a caller, kill
        // one mid-call; version 3: CQ create, destroy, flow attach, detach,
        // post, stream consume, flow query
        const WEIGHTS: [u32; 15] = [10, 24, 20, 8, 8, 3, 2, 2, 4, 2, 5, 2, 6, 2, 3];
        while Instant::now() < deadline {
            match self.rng.weighted(&WEIGHTS) {
                0 => self.with_file(Self::query),
                1 => self.with_file(Self::reg),
                2 => self.with_file(Self::dereg),
                3 => self.with_file(Self::unknown),
                4 => self.fd_op(),
                5 => {
                    self.mem.churn_volatile(&mut self.rng);
                }
                6 => self.fork(false),
                7 => self.fork(true),
                8 => self.with_file(Self::cq_create),
                9 => self.with_file(Self::cq_destroy),
                10 => self.with_file(Self::flow_attach),
                11 => self.with_file(Self::flow_detach),
                12 => self.with_file(Self::post),
                13 => self.with_file(Self::stream_consume),
                _ => self.with_file(Self::flow_query),
            }
        }
    }

    fn with_file(&mut self, f: fn(&mut Self, &FileRef)) {
        if let Some(file) = self.proc.pick(&mut self.rng) {
            f(self, &file);
        } else {
            self.fd_op();
        }
        if self.unbound {
            // While the NIC is unbound every call fails at once: do not
            // spin, the racer's bind and ip commands need the CPU.
            self.unbound = false;
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    pub(crate) fn pick_nic(&mut self) -> u32 {
        match self.rng.weighted(&[80, 5, 5, 5, 5]) {
            0 => 0,
            1 => 1,
            2 => self.nics,
            3 => u32::MAX,
            _ => self.rng.next_u32(),
        }
    }

    /// Checks one result; true if the call succeeded.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn verdict(
        &mut self,
        call: Call,
        file: &FileRef,
        cmd: u32,
        place: Place,
        args: &dyn Fn() -> String,
        res: Result<i32, Errno>,
        expect: Expect,
    ) -> bool {
        let errno = match res {
            Ok(_) => 0,
            Err(e) => e as i32,
        };
        self.shared.count(call as usize, errno);
        self.unbound |= res == Err(ENODEV);
        let mut problem = None;
        match res {
            Err(e) if !errnos::allowed(call, e) => {
                self.shared.undocumented.fetch_add(1, Relaxed);
                problem = Some(format!(
                    "undocumented errno {} (allowed: {})",
                    e.name(),
                    errnos::allowed_list(call)
                ));
            }
            Ok(r) if r != 0 => {
                self.shared.inconsistent.fetch_add(1, Relaxed);
                problem = Some(format!("returned {r}, want 0 or -1"));
            }
            _ => match (expect, res) {
                (Expect::Exactly(want), r) if r != Err(want) => {
                    self.shared.inconsistent.fetch_add(1, Relaxed);
                    problem = Some(format!("want exactly {}", want.name()));
                }
                (Expect::Fail, Ok(_)) => {
                    self.shared.inconsistent.fetch_add(1, Relaxed);
                    problem = Some("succeeded, but these arguments must fail".into());
                }
                _ => {}
            },
        }
        if let Some(p) = problem {
            let got = match res {
                Ok(r) => format!("returned {r}"),
                Err(e) => format!("failed with {}", e.name()),
            };
            self.report(&format!(
                "{} (cmd {cmd:#010x}) on fd {} {got}: {p}; argument at {}: {}",
                call.name(),
                file.fd.as_raw_fd(),
                self.args.describe(place),
                args()
            ));
        }
        res.is_ok()
    }

    fn report(&self, msg: &str) {
        if self.shared.may_print() {
            println!("zn-fuzz: VIOLATION [{}] {msg}", self.who);
        }
    }

    pub(crate) fn inconsistent(&self, msg: &str) {
        self.shared.inconsistent.fetch_add(1, Relaxed);
        self.report(msg);
    }

    // ---- ZERONIC_IOC_QUERY ----------------------------------------------

    fn query(&mut self, file: &FileRef) {
        let nic = self.pick_nic();
        let mut bytes = vec![0u8; size_of::<Query>()];
        if self.rng.chance(1, 2) {
            // Out-only fields are ignored on input: fill them with garbage.
            self.rng.fill(&mut bytes);
        }
        bytes[..4].copy_from_slice(&nic.to_ne_bytes());
        let place = self
            .args
            .choose(&mut self.rng, bytes.len() as u64, 75, &self.mem);
        let ptr = self.args.put(place, &bytes);
        let res = raw_ioctl(file.fd.as_raw_fd(), IOC_QUERY, ptr);
        let expect = if !place.readable() {
            Expect::Exactly(EFAULT)
        } else if !place.writable() {
            Expect::Fail
        } else if nic >= self.nics {
            Expect::Exactly(ENODEV)
        } else {
            Expect::Documented
        };
        let args = || format!("nic={nic}");
        if self.verdict(Call::Query, file, IOC_QUERY, place, &args, res, expect) && place.writable()
        {
            self.args.get(place, &mut bytes);
            let q: Query = from_bytes(&bytes);
            self.check_query(nic, &q);
        }
    }

    fn check_query(&mut self, nic: u32, q: &Query) {
        let mut bad = Vec::new();
        if q.nic != nic {
            bad.push(format!("nic {} (asked {nic})", q.nic));
        }
        if q.nic >= q.num_nics {
            bad.push(format!("nic {} >= num_nics {}", q.nic, q.num_nics));
        }
        if q.hw_version >> 16 == 0 {
            bad.push(format!("hw_version {:#x}", q.hw_version));
        }
        if q.num_ports == 0 || q.num_ports as usize > MAX_PORTS {
            bad.push(format!("num_ports {}", q.num_ports));
        }
        if q.mr_in_use > q.mr_capacity {
            bad.push(format!(
                "mr_in_use {} > mr_capacity {}",
                q.mr_in_use, q.mr_capacity
            ));
        }
        if q.held_pages > q.pinned_pages {
            bad.push(format!(
                "held_pages {} > pinned_pages {}",
                q.held_pages, q.pinned_pages
            ));
        }
        if q.mr_max_bytes < 256 << 20 {
            bad.push(format!("mr_max_bytes {}", q.mr_max_bytes));
        }
        if q.reserved != 0 {
            bad.push(format!("reserved {}", q.reserved));
        }
        if q.flows_in_use > q.flow_capacity {
            bad.push(format!(
                "flows_in_use {} > flow_capacity {}",
                q.flows_in_use, q.flow_capacity
            ));
        }
        for (i, p) in q.ports.iter().enumerate() {
            if p.reserved != 0 {
                bad.push(format!("ports[{i}].reserved {}", p.reserved));
            }
            if i >= q.num_ports as usize && (p.ifindex, p.mtu, p.link) != (0, 0, 0) {
                bad.push(format!("ports[{i}] beyond num_ports is {p:?}"));
            }
        }
        if bad.is_empty() {
            self.max_bytes = q.mr_max_bytes;
        } else {
            self.inconsistent(&format!(
                "ZERONIC_IOC_QUERY of nic {nic} succeeded with {}",
                bad.join(", ")
            ));
        }
    }

    // ---- ZERONIC_IOC_MR_REG ----------------------------------------------

    /// A range to register: (addr, length, what, whether it cannot succeed
    /// for any access, whether it cannot succeed with LOCAL_WRITE).
    fn range(&mut self) -> (u64, u64, &'static str, bool, bool) {
        let m = self.mem;
        let ps = m.ps;
        let r = &mut self.rng;
        let inside = |r: &mut Rng, reg: crate::mem::Region, max: u64| {
            let off = r.below(reg.len - 1);
            let len = r.range(1, (reg.len - off).min(max));
            (reg.addr + off, len)
        };
        match r.weighted(&[40, 4, 8, 4, 8, 10, 3, 6, 10]) {
            0 => {
                let (a, l) = inside(r, m.rw, 16 * ps);
                (a, l, "read-write", false, false)
            }
            1 => {
                let (a, l) = inside(r, m.rw, m.rw.len);
                (a, l, "read-write, large", false, false)
            }
            2 => {
                let (a, l) = inside(r, m.ro, 16 * ps);
                (a, l, "read-only mapping", false, true)
            }
            3 => {
                let (a, l) = inside(r, m.none, 16 * ps);
                (a, l, "PROT_NONE mapping", true, true)
            }
            4 => {
                let (a, l) = inside(r, m.shm, 64 * ps);
                (a, l, "shared memfd", false, false)
            }
            5 => {
                let (a, l) = inside(r, m.volatile, 64 * ps);
                (a, l, "mapping changing under the call", false, false)
            }
            6 => match m.hole() {
                // Into the PROT_NONE page after it, if longer than a page.
                Some(h) => {
                    let (a, l) = inside(r, h, 4 * ps);
                    (a, l, "unmapped page", true, true)
                }
                None => (m.none.addr, ps, "PROT_NONE mapping", true, true),
            },
            7 => {
                let a = *r.pick(&[
                    0u64,
                    0xffff_8880_0000_0000,
                    0xffff_ffff_8100_0000,
                    0x0000_8000_0000_0000,
                    u64::MAX - 4095,
                ]);
                (
                    a,
                    r.range(1, 4 * ps),
                    "kernel, NULL or non-canonical address",
                    true,
                    true,
                )
            }
            _ => {
                let a = m.rw.addr + r.below(m.rw.len);
                let l = *r.pick(&[
                    0,
                    u64::MAX,
                    u64::MAX - a + 1,
                    u64::MAX - a,
                    1 << 40,
                    self.max_bytes + 1,
                ]);
                (a, l, "length 0, wrapping or above mr_max_bytes", true, true)
            }
        }
    }

    fn reg(&mut self, file: &FileRef) {
        let (addr, length, what, never, never_write) = self.range();
        let access = match self.rng.weighted(&[25, 25, 30, 5, 5, 5]) {
            0 => ACCESS_LOCAL_READ,
            1 => ACCESS_LOCAL_WRITE,
            2 => ACCESS_LOCAL_READ | ACCESS_LOCAL_WRITE,
            3 => 0,
            4 => 1 << self.rng.range(2, 31),
            _ => self.rng.next_u32(),
        };
        let nic = self.pick_nic();
        let req = MrReg {
            addr,
            length,
            nic,
            access,
            key: self.rng.next_u64(), // out-only: garbage must not matter
        };
        let mut bytes = bytes_of(&req);
        let place = self
            .args
            .choose(&mut self.rng, bytes.len() as u64, 80, &self.mem);
        let ptr = self.args.put(place, &bytes);
        let res = raw_ioctl(file.fd.as_raw_fd(), IOC_MR_REG, ptr);
        let valid_access = access != 0 && access & !(ACCESS_LOCAL_READ | ACCESS_LOCAL_WRITE) == 0;
        let expect = if !place.readable() {
            Expect::Exactly(EFAULT)
        } else if !place.writable()
            || never
            || !valid_access
            || nic >= self.nics
            || (never_write && access & ACCESS_LOCAL_WRITE != 0)
        {
            Expect::Fail
        } else {
            Expect::Documented
        };
        let args =
            || format!("addr={addr:#x} ({what}) length={length:#x} nic={nic} access={access:#x}");
        if !self.verdict(Call::MrReg, file, IOC_MR_REG, place, &args, res, expect)
            || !place.writable()
        {
            return;
        }
        self.args.get(place, &mut bytes);
        let key = from_bytes::<MrReg>(&bytes).key;
        let fresh = self.proc.seen.lock().expect("seen lock").insert(key);
        if key == 0 {
            self.inconsistent(&format!("ZERONIC_IOC_MR_REG returned key 0 for {}", args()));
        } else if !fresh || self.shared.key_seen(key) {
            self.inconsistent(&format!(
                "ZERONIC_IOC_MR_REG handed out key {key:#x} again ({})",
                args()
            ));
        }
        self.shared.publish_key(key, nic);
        let evicted = {
            let mut keys = self.proc.keys.lock().expect("keys lock");
            let evicted = if keys.len() >= MAX_KEYS {
                let i = self.rng.below(keys.len() as u64) as usize;
                Some(keys.swap_remove(i))
            } else {
                None
            };
            keys.push(KeyRec {
                file: file.id,
                key,
                nic,
            });
            evicted
        };
        if let Some(k) = evicted {
            self.release(k);
        }
    }

    /// Deregisters a region the pool has no room for, so the MR Table does
    /// not fill up with regions nobody names (one in eight is left to the
    /// file's close).
    fn release(&mut self, k: KeyRec) {
        let file = {
            let files = self.proc.files.lock().expect("files lock");
            files.iter().find(|f| f.id == k.file).cloned()
        };
        let Some(file) = file else { return };
        if self.rng.chance(1, 8) {
            return;
        }
        let d = MrDereg {
            key: k.key,
            nic: k.nic,
            reserved: 0,
        };
        let place = Place::Rw(0);
        let ptr = self.args.put(place, &bytes_of(&d));
        let res = raw_ioctl(file.fd.as_raw_fd(), IOC_MR_DEREG, ptr);
        let args = || format!("key={:#x} (own key, pool full) nic={}", k.key, k.nic);
        let ok = self.verdict(
            Call::MrDereg,
            &file,
            IOC_MR_DEREG,
            place,
            &args,
            res,
            Expect::Documented,
        );
        if ok || res == Err(EIO) {
            self.stale_push(k.key, k.nic);
        }
    }

    fn stale_push(&self, key: u64, nic: u32) {
        let mut stale = self.proc.stale.lock().expect("stale lock");
        if stale.len() >= MAX_STALE {
            stale.pop_front();
        }
        stale.push_back((key, nic));
    }

    // ---- ZERONIC_IOC_MR_DEREG --------------------------------------------

    fn dereg(&mut self, file: &FileRef) {
        let own: Option<KeyRec> = {
            let keys = self.proc.keys.lock().expect("keys lock");
            let mine: Vec<&KeyRec> = keys.iter().filter(|k| k.file == file.id).collect();
            match self.rng.below(100) {
                0..60 if !mine.is_empty() => Some(**self.rng.pick(&mine)),
                60..70 if !keys.is_empty() => Some(*self.rng.pick(&keys)),
                _ => None,
            }
        };
        let (key, mut nic, source, mut expect) = match own {
            Some(k) if self.rng.chance(1, 12) => {
                // The right key named with another NIC: no such region
                // (ENOENT, or ENODEV for a NIC index that does not exist).
                (
                    k.key,
                    k.nic ^ self.rng.range(1, u64::from(u32::MAX)) as u32,
                    "own key, other nic",
                    Expect::Fail,
                )
            }
            Some(k) => (k.key, k.nic, "own key", Expect::Documented),
            None => match self.rng.weighted(&[30, 35, 20, 15]) {
                0 => {
                    let stale = self.proc.stale.lock().expect("stale lock");
                    if stale.is_empty() {
                        (self.rng.next_u64(), 0, "random key", Expect::Documented)
                    } else {
                        let i = self.rng.below(stale.len() as u64) as usize;
                        let (k, n) = stale[i];
                        (k, n, "deregistered key", Expect::Exactly(ENOENT))
                    }
                }
                1 => {
                    let (k, n) = self.shared.some_key(self.rng.next_u64());
                    (k, n, "recent key of any process", Expect::Documented)
                }
                2 => (
                    self.rng.next_u64(),
                    self.pick_nic(),
                    "random key",
                    Expect::Documented,
                ),
                _ => (0, self.pick_nic(), "key 0", Expect::Fail),
            },
        };
        if key == 0 {
            // Never handed out: no region. On NIC 0, which exists, exactly
            // ENOENT (MR_DEREG needs no NIC, bound or not).
            expect = if nic == 0 {
                Expect::Exactly(ENOENT)
            } else {
                Expect::Fail
            };
        }
        if self.rng.chance(1, 20) && matches!(expect, Expect::Documented) {
            nic = self.pick_nic();
        }
        let reserved = if self.rng.chance(1, 10) {
            self.rng.next_u32() | 1 << self.rng.below(32)
        } else {
            0
        };
        let d = MrDereg { key, nic, reserved };
        let bytes = bytes_of(&d);
        let place = self
            .args
            .choose(&mut self.rng, bytes.len() as u64, 85, &self.mem);
        let ptr = self.args.put(place, &bytes);
        let res = raw_ioctl(file.fd.as_raw_fd(), IOC_MR_DEREG, ptr);
        if !place.readable() {
            expect = Expect::Exactly(EFAULT);
        } else if reserved != 0 {
            expect = Expect::Exactly(EINVAL);
        }
        let args = || format!("key={key:#x} ({source}) nic={nic} reserved={reserved:#x}");
        let ok = self.verdict(Call::MrDereg, file, IOC_MR_DEREG, place, &args, res, expect);
        if ok || res == Err(EIO) {
            // Gone from the file (EIO: its pages wait for the NIC's reset).
            self.proc
                .keys
                .lock()
                .expect("keys lock")
                .retain(|k| k.key != key);
            self.stale_push(key, nic);
        }
    }

    // ---- other command words -----------------------------------------------

    fn unknown(&mut self, file: &FileRef) {
        let cmd = ioc::unknown(&mut self.rng);
        let size = u64::from(ioc::size_of_cmd(cmd)).clamp(16, self.mem.ps);
        let mut bytes = vec![0u8; size as usize];
        self.rng.fill(&mut bytes);
        let place = self.args.choose(&mut self.rng, size, 70, &self.mem);
        let ptr = self.args.put(place, &bytes);
        let res = raw_ioctl(file.fd.as_raw_fd(), cmd, ptr);
        let args = || format!("{} bytes of random data", bytes.len());
        self.verdict(
            Call::Unknown,
            file,
            cmd,
            place,
            &args,
            res,
            Expect::Exactly(ENOTTY),
        );
    }

    // ---- files: open, close, dup, pass over SCM_RIGHTS --------------------

    fn fd_op(&mut self) {
        match self.rng.below(6) {
            0 | 1 => {
                let flags = *self
                    .rng
                    .pick(&[libc::O_RDWR, libc::O_RDONLY, libc::O_WRONLY]);
                // SAFETY: a C string literal.
                let fd = unsafe { libc::open(c"/dev/zeronic".as_ptr(), flags | libc::O_CLOEXEC) };
                if fd < 0 {
                    let e = Errno::last();
                    if e != Errno::EMFILE && e != Errno::ENFILE {
                        self.inconsistent(&format!("open(/dev/zeronic) failed with {}", e.name()));
                    }
                    return;
                }
                // SAFETY: a descriptor we just opened and own.
                self.proc.add(unsafe { OwnedFd::from_raw_fd(fd) }, false);
            }
            2 => {
                let mut files = self.proc.files.lock().expect("files lock");
                let closable: Vec<usize> = (0..files.len()).filter(|&i| !files[i].keep).collect();
                if !closable.is_empty() {
                    let i = *self.rng.pick(&closable);
                    // The descriptor closes when no thread uses it any more.
                    files.swap_remove(i);
                }
            }
            3 => {
                if let Some(f) = self.proc.pick(&mut self.rng) {
                    if let Ok(d) = f.fd.try_clone() {
                        self.proc.add(d, false);
                    }
                }
            }
            4 => self.send_file(),
            _ => self.recv_files(),
        }
    }

    fn send_file(&mut self) {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
        let Some(f) = self.proc.pick(&mut self.rng) else {
            return;
        };
        let tx = self.proc.sock_tx.lock().expect("sock lock");
        if tx.is_empty() {
            return;
        }
        let sock = self.rng.pick(&tx);
        let fds = [f.fd.as_raw_fd()];
        let iov = [std::io::IoSlice::new(b"f")];
        let cmsg = [ControlMessage::ScmRights(&fds)];
        if sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_DONTWAIT, None).is_ok() {
            self.shared.fds_sent.fetch_add(1, Relaxed);
        }
    }

    fn recv_files(&mut self) {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
        let rx = self.proc.sock_rx.lock().expect("sock lock");
        let Some(sock) = rx.as_ref() else { return };
        let mut buf = [0u8; 8];
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!([RawFd; 4]);
        let Ok(msg) = recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
        ) else {
            return;
        };
        let mut got = Vec::new();
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    got.extend(fds);
                }
            }
        }
        drop(rx);
        for fd in got {
            self.shared.fds_received.fetch_add(1, Relaxed);
            // SAFETY: the kernel just installed this descriptor for us.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            // A full table closes it at once (drop).
            self.proc.add(owned, false);
        }
    }

    // ---- forked callers ------------------------------------------------------

    fn fork(&mut self, kill: bool) {
        let files: Vec<FileRef> = (0..4)
            .filter_map(|_| self.proc.pick(&mut self.rng))
            .collect();
        if files.is_empty() {
            return;
        }
        let mut plan = child::Plan {
            fds: [-1; 4],
            keys: [(0, 0, -1); 4],
            mem: self.mem,
            seed: self.rng.next_u64(),
            shared: self.shared,
            loop_until_killed: kill,
        };
        for (i, f) in files.iter().enumerate() {
            plan.fds[i] = f.fd.as_raw_fd();
        }
        {
            let keys = self.proc.keys.lock().expect("keys lock");
            for slot in plan.keys.iter_mut() {
                if keys.is_empty() {
                    break;
                }
                let k = self.rng.pick(&keys);
                if let Some(f) = files.iter().find(|f| f.id == k.file) {
                    *slot = (k.key, k.nic, f.fd.as_raw_fd());
                }
            }
        }
        let delay_ms = self.rng.below(40);
        self.shared.children.fetch_add(1, Relaxed);
        // `files` keeps the descriptors open until the child is reaped.
        if let Err(e) = child::run(&plan, delay_ms) {
            self.shared.child_failures.fetch_add(1, Relaxed);
            self.report(&format!("forked caller: {e}"));
        } else if kill {
            self.shared.children_killed.fetch_add(1, Relaxed);
        }
        drop(files);
    }
}

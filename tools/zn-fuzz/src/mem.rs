//! The memory a worker process offers the NIC and the kernel: mappings of
//! every kind a registration may name (writable, read-only, `PROT_NONE`,
//! shared memfd, unmapped, and one whose protection other threads change
//! under the calls), and per-thread argument pages where the ioctl
//! arguments are placed, valid or straddling into inaccessible memory.
//!
//! Nothing here is ever referenced by Rust references: the kernel may write
//! anywhere in these mappings (a buggy driver might write more than the
//! command word's size), and only raw copies go in and out.

use anyhow::{bail, Result};
use nix::errno::Errno;

use crate::rng::Rng;

/// `[addr, addr + len)` of the process's address space.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    /// Start.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
}

/// The page size.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let ps = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(ps).unwrap_or(4096)
}

/// mmap with raw arguments; the address of the new mapping.
pub fn map(addr: u64, len: u64, prot: i32, flags: i32, fd: i32) -> Result<u64, Errno> {
    // SAFETY: callers pass either no address or MAP_FIXED over a mapping of
    // this module (never over memory Rust code references).
    let p = unsafe { libc::mmap(addr as *mut libc::c_void, len as usize, prot, flags, fd, 0) };
    if p == libc::MAP_FAILED {
        Err(Errno::last())
    } else {
        Ok(p as u64)
    }
}

/// A new shared read-write mapping of `size` bytes of file `fd` at `offset`
/// (a CQ of a `/dev/zeronic` file): its address. Rust code reaches it only
/// through raw pointers.
pub fn map_shared_file(fd: i32, size: u64, offset: u64) -> Result<u64, Errno> {
    // SAFETY: a new mapping at an address of the kernel's choice: no
    // existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        Err(Errno::last())
    } else {
        Ok(p as u64)
    }
}

/// mprotect of a range of this module's mappings.
pub fn protect(addr: u64, len: u64, prot: i32) -> Result<(), Errno> {
    // SAFETY: only this module's mappings, never referenced by Rust code.
    Errno::result(unsafe { libc::mprotect(addr as *mut libc::c_void, len as usize, prot) })
        .map(drop)
}

fn anon(len: u64, prot: i32) -> Result<u64> {
    map(0, len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)
        .map_err(|e| anyhow::anyhow!("mmap of {len} bytes: {e}"))
}

/// Writes `n` bytes of every page of a mapping (faults them in).
fn touch(r: Region, ps: u64, byte: u8) {
    let mut a = r.addr;
    while a < r.addr + r.len {
        // SAFETY: a writable page of a mapping of this module.
        unsafe { (a as *mut u8).write_volatile(byte) };
        a += ps;
    }
}

/// The mappings of a worker process. Made before its threads start and
/// never unmapped (`volatile` is replaced in place by `MAP_FIXED`).
#[derive(Clone, Copy, Debug)]
pub struct Mem {
    /// The page size.
    pub ps: u64,
    /// Anonymous, read-write; its first half faulted in.
    pub rw: Region,
    /// Anonymous, faulted in, then read-only.
    pub ro: Region,
    /// `PROT_NONE`.
    pub none: Region,
    /// A memfd mapped `MAP_SHARED`, read-write.
    pub shm: Region,
    /// Read-write at start; threads change its protection and replace it.
    pub volatile: Region,
    /// One unmapped page between two `PROT_NONE` pages (see [`Mem::hole`]).
    hole_page: Region,
}

impl Mem {
    /// Maps everything.
    pub fn new() -> Result<Mem> {
        let ps = page_size();
        let rw_len = 4 << 20;
        let rw = Region {
            addr: anon(rw_len, libc::PROT_READ | libc::PROT_WRITE)?,
            len: rw_len,
        };
        touch(
            Region {
                addr: rw.addr,
                len: rw_len / 2,
            },
            ps,
            0x5a,
        );
        let ro = Region {
            addr: anon(256 << 10, libc::PROT_READ | libc::PROT_WRITE)?,
            len: 256 << 10,
        };
        touch(ro, ps, 0xa5);
        protect(ro.addr, ro.len, libc::PROT_READ).map_err(|e| anyhow::anyhow!("mprotect: {e}"))?;
        let none = Region {
            addr: anon(256 << 10, libc::PROT_NONE)?,
            len: 256 << 10,
        };
        let shm_len = 1 << 20;
        // SAFETY: a C string literal; memfd_create has no memory effects.
        let fd = unsafe { libc::memfd_create(c"zn-fuzz".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            bail!("memfd_create: {}", Errno::last());
        }
        // SAFETY: a fresh descriptor of ours.
        if unsafe { libc::ftruncate(fd, shm_len as libc::off_t) } != 0 {
            bail!("ftruncate of the memfd: {}", Errno::last());
        }
        let shm = Region {
            addr: map(
                0,
                shm_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
            )
            .map_err(|e| anyhow::anyhow!("mmap of the memfd: {e}"))?,
            len: shm_len,
        };
        // SAFETY: our descriptor; the mapping keeps the memfd alive.
        unsafe { libc::close(fd) };
        touch(shm, ps, 0x3c);
        let volatile = Region {
            addr: anon(1 << 20, libc::PROT_READ | libc::PROT_WRITE)?,
            len: 1 << 20,
        };
        // One page, so no later mapping of this process (all larger than a
        // page) fits into it; `hole()` checks anyway.
        let guard = anon(3 * ps, libc::PROT_NONE)?;
        let hole_page = Region {
            addr: guard + ps,
            len: ps,
        };
        // SAFETY: the middle page of the mapping just made, never referenced.
        unsafe { libc::munmap(hole_page.addr as *mut libc::c_void, ps as usize) };
        Ok(Mem {
            ps,
            rw,
            ro,
            none,
            shm,
            volatile,
            hole_page,
        })
    }

    /// A page with nothing mapped, between two `PROT_NONE` pages; `None` if
    /// something got mapped there after all (then it is not used: the kernel
    /// must not write into a mapping some other code of ours made).
    pub fn hole(&self) -> Option<Region> {
        let mut vec = 0u8;
        // SAFETY: mincore writes one byte for the one page asked about.
        let r = unsafe {
            libc::mincore(
                self.hole_page.addr as *mut libc::c_void,
                self.ps as usize,
                &mut vec,
            )
        };
        (r != 0 && Errno::last() == Errno::ENOMEM).then_some(self.hole_page)
    }

    /// Changes `volatile` under the other threads' calls: a new protection,
    /// fresh pages in place (`MAP_FIXED`), or its pages dropped.
    pub fn churn_volatile(&self, rng: &mut Rng) -> &'static str {
        let v = self.volatile;
        let pages = v.len / self.ps;
        let first = rng.below(pages);
        let n = rng.range(1, pages - first);
        let (a, l) = (v.addr + first * self.ps, n * self.ps);
        match rng.below(5) {
            0 => {
                let _ = protect(a, l, libc::PROT_NONE);
                "mprotect(PROT_NONE)"
            }
            1 => {
                let _ = protect(a, l, libc::PROT_READ);
                "mprotect(PROT_READ)"
            }
            2 => {
                let _ = protect(a, l, libc::PROT_READ | libc::PROT_WRITE);
                "mprotect(PROT_READ|PROT_WRITE)"
            }
            3 => {
                let _ = map(
                    a,
                    l,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                );
                "mmap(MAP_FIXED)"
            }
            _ => {
                // SAFETY: a range of `volatile`, never referenced by Rust code.
                unsafe { libc::madvise(a as *mut libc::c_void, l as usize, libc::MADV_DONTNEED) };
                "madvise(MADV_DONTNEED)"
            }
        }
    }
}

/// Where an ioctl's argument pointer points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Inside the argument page, readable and writable.
    Rw(u64),
    /// The argument's last `k` bytes lie in a `PROT_NONE` page.
    Straddle(u64),
    /// Inside a read-only page: readable, not writable.
    ReadOnly(u64),
    /// An address the kernel must refuse to touch.
    Bad(u64, &'static str),
}

impl Place {
    /// Whether the whole argument is readable by the kernel.
    pub fn readable(&self) -> bool {
        matches!(self, Place::Rw(_) | Place::ReadOnly(_))
    }

    /// Whether the whole argument is writable by the kernel.
    pub fn writable(&self) -> bool {
        matches!(self, Place::Rw(_))
    }
}

/// A thread's argument pages: two read-write pages, then a `PROT_NONE`
/// page, then a read-only one.
#[derive(Clone, Copy, Debug)]
pub struct ArgPages {
    base: u64,
    ps: u64,
}

/// Addresses no argument may be read from: NULL and low pages, the kernel's
/// direct map and text, non-canonical addresses, the end of user space.
const BAD_ADDRS: &[(u64, &str)] = &[
    (0, "NULL"),
    (1, "0x1"),
    (0xff8, "low page"),
    (0xffff_8880_0000_0000, "kernel direct map"),
    (0xffff_ffff_8100_0000, "kernel text"),
    (0x0000_8000_0000_0000, "non-canonical"),
    (0xdead_beef_0000_0000, "non-canonical"),
    (0x7fff_ffff_f000, "end of user space"),
    // 8 bytes before the end: every argument (16 bytes or more) crosses it.
    (0x7fff_ffff_eff8, "across the end of user space"),
    (u64::MAX - 7, "top of the address space"),
];

impl ArgPages {
    /// Maps a thread's argument pages.
    pub fn new() -> Result<ArgPages> {
        let ps = page_size();
        let base = anon(4 * ps, libc::PROT_READ | libc::PROT_WRITE)?;
        protect(base + 2 * ps, ps, libc::PROT_NONE)
            .map_err(|e| anyhow::anyhow!("mprotect: {e}"))?;
        protect(base + 3 * ps, ps, libc::PROT_READ)
            .map_err(|e| anyhow::anyhow!("mprotect: {e}"))?;
        Ok(ArgPages { base, ps })
    }

    /// Chooses where an argument of `size` bytes goes: mostly a valid place
    /// (`valid_pct` percent), else a hostile one of `mem`.
    pub fn choose(&self, rng: &mut Rng, size: u64, valid_pct: u64, mem: &Mem) -> Place {
        let size = size.clamp(1, self.ps);
        if rng.chance(valid_pct, 100) {
            // Any alignment, anywhere in the two read-write pages.
            return Place::Rw(rng.below(2 * self.ps - size + 1));
        }
        match rng.below(6) {
            0 => Place::Straddle(rng.range(1, size)),
            1 => Place::ReadOnly(rng.below(self.ps - size + 1)),
            2 => Place::Bad(
                mem.none.addr + rng.below(mem.none.len - size),
                "PROT_NONE mapping",
            ),
            3 => match mem.hole() {
                Some(h) => Place::Bad(h.addr + rng.below(h.len - size + 1), "unmapped page"),
                None => Place::Bad(mem.none.addr, "PROT_NONE mapping"),
            },
            _ => {
                let (a, what) = *rng.pick(BAD_ADDRS);
                Place::Bad(a, what)
            }
        }
    }

    /// Puts `bytes` at `place`; returns the pointer to pass to the kernel.
    pub fn put(&self, place: Place, bytes: &[u8]) -> u64 {
        let ps = self.ps;
        let (addr, len) = match place {
            Place::Rw(off) => (self.base + off, bytes.len() as u64),
            Place::Straddle(k) => {
                let k = k.min(bytes.len() as u64);
                (
                    self.base + 2 * ps - (bytes.len() as u64 - k),
                    bytes.len() as u64 - k,
                )
            }
            Place::ReadOnly(off) => {
                let ro = self.base + 3 * ps;
                let _ = protect(ro, ps, libc::PROT_READ | libc::PROT_WRITE);
                copy_in(ro + off, bytes);
                let _ = protect(ro, ps, libc::PROT_READ);
                return ro + off;
            }
            Place::Bad(a, _) => return a,
        };
        copy_in(addr, &bytes[..len as usize]);
        addr
    }

    /// Reads back `out.len()` bytes of an argument that was at `place`.
    pub fn get(&self, place: Place, out: &mut [u8]) {
        if let Place::Rw(off) = place {
            let src = self.base + off;
            // SAFETY: within the read-write argument pages (the offset was
            // chosen for this size); raw copy, no reference kept.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, out.as_mut_ptr(), out.len()) };
        }
    }

    /// Describes a place for messages.
    pub fn describe(&self, place: Place) -> String {
        match place {
            Place::Rw(off) => format!("read-write page +{off:#x}"),
            Place::Straddle(k) => format!("last {k} byte(s) in a PROT_NONE page"),
            Place::ReadOnly(off) => format!("read-only page +{off:#x}"),
            Place::Bad(a, what) => format!("{a:#x} ({what})"),
        }
    }
}

fn copy_in(dst: u64, bytes: &[u8]) {
    // SAFETY: `dst` is inside this thread's writable argument pages, sized
    // by the caller; raw copy, no reference kept.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, bytes.len()) };
}

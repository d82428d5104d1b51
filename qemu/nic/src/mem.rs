//! The DMA window (a guest's RAM) and the BAR2 register file, both shared
//! memory mappings another process (QEMU / the guest) writes concurrently.
//!
//! Guest memory is never turned into Rust references: all accesses are
//! bounds-checked raw copies, because the guest may change it at any time.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use anyhow::{Context, Result};
use memmap2::{MmapOptions, MmapRaw};

/// A DMA address range outside the guest's RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("DMA outside guest RAM: {addr:#x}+{len:#x}")]
pub struct DmaError {
    /// Start of the refused access.
    pub addr: u64,
    /// Length of the refused access.
    pub len: u64,
}

/// A guest's RAM: guest-physical address == offset in the window.
pub struct GuestMem {
    map: MmapRaw,
    /// Offset of guest-physical address 0 in `map`.
    base: usize,
    /// Window length.
    len: usize,
}

/// Inaccessible pages around an anonymous window, so an access the bounds
/// checks should have refused faults instead of reading or writing
/// neighbouring host memory (tests run hostile inputs against it).
const GUARD: usize = 4096;

impl GuestMem {
    /// Maps a guest RAM file (QEMU `memory-backend-file,share=on`).
    pub fn from_file(path: &Path) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .with_context(|| format!("open guest RAM file {}", path.display()))?;
        let map = MmapRaw::map_raw(&file)
            .with_context(|| format!("mmap guest RAM file {}", path.display()))?;
        let len = map.len();
        Ok(Self { map, base: 0, len })
    }

    /// Anonymous zeroed memory standing in for guest RAM (tests, bench),
    /// between two inaccessible guard pages.
    pub fn anon(len: usize) -> Result<Self> {
        let span = len.next_multiple_of(GUARD);
        let map = MmapOptions::new()
            .len(span + 2 * GUARD)
            .map_anon()
            .context("mmap anonymous guest RAM")?;
        let map = MmapRaw::from(map);
        let lo = map.as_mut_ptr();
        for guard in [lo, lo.wrapping_add(GUARD + span)] {
            let p = std::ptr::NonNull::new(guard.cast()).context("guard page")?;
            let none = nix::sys::mman::ProtFlags::PROT_NONE;
            // SAFETY: both guard pages lie inside the fresh mapping (its
            // first and last page), page-aligned as the mapping is; no
            // reference into them exists.
            unsafe { nix::sys::mman::mprotect(p, GUARD, none) }.context("mprotect guard page")?;
        }
        Ok(Self {
            map,
            base: GUARD,
            len,
        })
    }

    /// Size of the window in bytes.
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// True if the window is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bounds check; returns the host pointer of `addr`.
    pub fn check(&self, addr: u64, len: u64) -> Result<*mut u8, DmaError> {
        let err = DmaError { addr, len };
        let end = addr.checked_add(len).ok_or(err)?;
        if end > self.len() {
            return Err(err);
        }
        // SAFETY: addr + len <= window length, so base + addr stays inside
        // the mapping (addr fits usize because it is <= len).
        Ok(unsafe { self.map.as_mut_ptr().add(self.base + addr as usize) })
    }

    /// DMA read into `buf`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        let p = self.check(addr, buf.len() as u64)?;
        // SAFETY: `p..p+len` is inside the mapping (checked); `buf` is a
        // distinct host buffer, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// DMA read of a fixed-size object.
    pub fn read_array<const N: usize>(&self, addr: u64) -> Result<[u8; N], DmaError> {
        let mut b = [0u8; N];
        self.read(addr, &mut b)?;
        Ok(b)
    }

    /// DMA write of `data`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        let p = self.check(addr, data.len() as u64)?;
        // SAFETY: `p..p+len` is inside the mapping (checked); `data` is a
        // host buffer distinct from the mapping.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }
}

// SAFETY: the mapping is plain shared memory; all access goes through raw
// copies and nothing hands out references into it.
unsafe impl Send for GuestMem {}
// SAFETY: as above; concurrent raw copies are what real DMA does.
unsafe impl Sync for GuestMem {}

/// The BAR2 register file (the ivshmem shared memory object).
pub struct Bar2 {
    map: MmapRaw,
    fd: Option<std::os::fd::OwnedFd>,
}

impl Bar2 {
    /// A memfd-backed BAR2 whose fd can be handed to QEMU.
    pub fn memfd(name: &str) -> Result<Self> {
        use nix::sys::memfd::{memfd_create, MFdFlags};
        let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC).context("memfd_create")?;
        let file = std::fs::File::from(fd);
        file.set_len(zeronic_hw::regs::BAR2_SIZE as u64)
            .context("size BAR2 memfd")?;
        let map = MmapRaw::map_raw(&file).context("mmap BAR2 memfd")?;
        Ok(Self {
            map,
            fd: Some(file.into()),
        })
    }

    /// Maps an existing BAR2 object (a client's view: tests, probes).
    pub fn from_file(file: &std::fs::File) -> Result<Self> {
        let map = MmapRaw::map_raw(file).context("mmap BAR2")?;
        Ok(Self { map, fd: None })
    }

    /// Maps the first `len` bytes of `file` as a register file: a device
    /// whose shared-memory object holds more than its registers (ZACC's
    /// BAR2 is registers, then device memory; `accel/hbm.rs`).
    pub fn from_file_prefix(file: &std::fs::File, len: usize) -> Result<Self> {
        let map = MmapOptions::new()
            .len(len)
            .map_raw(file)
            .context("mmap register file")?;
        Ok(Self { map, fd: None })
    }

    /// The shared-memory fd (for the ivshmem protocol).
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.fd.as_ref().map(|f| f.as_fd())
    }

    fn ptr(&self, off: usize, size: usize) -> Option<*mut u8> {
        // checked_add: an offset derived from guest input must not wrap past
        // the bounds check.
        if off % size != 0 || off.checked_add(size).is_none_or(|end| end > self.map.len()) {
            return None;
        }
        // SAFETY: off + size <= len, checked above without overflow.
        Some(unsafe { self.map.as_mut_ptr().add(off) })
    }

    /// 32-bit register read (0 for an invalid offset).
    pub fn r32(&self, off: usize) -> u32 {
        match self.ptr(off, 4) {
            // SAFETY: aligned, in bounds, and the mapping lives as long as self.
            Some(p) => unsafe { AtomicU32::from_ptr(p.cast()) }.load(Ordering::Acquire),
            None => 0,
        }
    }

    /// 32-bit register write (ignored for an invalid offset).
    pub fn w32(&self, off: usize, v: u32) {
        if let Some(p) = self.ptr(off, 4) {
            // SAFETY: aligned, in bounds, and the mapping lives as long as self.
            unsafe { AtomicU32::from_ptr(p.cast()) }.store(v, Ordering::Release);
        }
    }

    /// 64-bit register read (0 for an invalid offset).
    pub fn r64(&self, off: usize) -> u64 {
        match self.ptr(off, 8) {
            // SAFETY: aligned, in bounds, and the mapping lives as long as self.
            Some(p) => unsafe { AtomicU64::from_ptr(p.cast()) }.load(Ordering::Acquire),
            None => 0,
        }
    }

    /// 64-bit register write (ignored for an invalid offset).
    pub fn w64(&self, off: usize, v: u64) {
        if let Some(p) = self.ptr(off, 8) {
            // SAFETY: aligned, in bounds, and the mapping lives as long as self.
            unsafe { AtomicU64::from_ptr(p.cast()) }.store(v, Ordering::Release);
        }
    }

    /// Adds to a 64-bit counter register.
    pub fn add64(&self, off: usize, v: u64) {
        if let Some(p) = self.ptr(off, 8) {
            // SAFETY: aligned, in bounds, and the mapping lives as long as self.
            unsafe { AtomicU64::from_ptr(p.cast()) }.fetch_add(v, Ordering::AcqRel);
        }
    }

    /// Zeroes the register file except `[keep.0, keep.1)`.
    pub fn clear_except(&self, keep: (usize, usize)) {
        for off in (0..self.map.len()).step_by(8) {
            if off < keep.0 || off >= keep.1 {
                self.w64(off, 0);
            }
        }
    }
}

// SAFETY: shared memory accessed only through atomics.
unsafe impl Send for Bar2 {}
// SAFETY: shared memory accessed only through atomics.
unsafe impl Sync for Bar2 {}

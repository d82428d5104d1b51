//! ZACC's BAR2 object: one memfd of `2^n` bytes holding the register file
//! at `[0, ZA_REGS_SIZE)` and device memory ("HBM") at
//! `[ZA_HBM_OFFSET, 2^n)` (`docs/accel.md` §2). The model maps it twice:
//! the register prefix as a [`Bar2`] (so the NIC's `Ring` works on it), and
//! the whole object as device memory, with the register part and one page
//! past the end made inaccessible, so an access the bounds checks should
//! have refused faults instead of touching registers or other memory.
//!
//! Device memory is never turned into Rust references: the guest CPU may
//! write it through the BAR at any time, so every access is a bounds-checked
//! raw copy, as for guest RAM (`mem.rs`).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use memmap2::{MmapOptions, MmapRaw};
use zeronic_hw::accel::*;

use crate::mem::Bar2;

/// A device range outside device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("device range outside device memory: {off:#x}+{len:#x}")]
pub struct BoundsError {
    /// Device offset of the refused access.
    pub off: u64,
    /// Its length.
    pub len: u64,
}

/// Inaccessible page after the end of the object.
const GUARD: usize = 4096;

/// Device memory: `len` bytes at offset `ZA_HBM_OFFSET` of the BAR2 object.
pub struct Hbm {
    /// The whole object plus `GUARD`; everything but device memory is
    /// `PROT_NONE`.
    map: MmapRaw,
    len: u64,
}

/// One ZACC's BAR2 object: its fd (handed to QEMU by the ivshmem
/// protocol), the register view and device memory.
pub struct AccelMem {
    /// The memfd.
    pub fd: OwnedFd,
    /// Registers, `[0, ZA_REGS_SIZE)`.
    pub regs: Arc<Bar2>,
    /// Device memory.
    pub hbm: Arc<Hbm>,
}

impl AccelMem {
    /// A fresh (zeroed, sparse) memfd-backed BAR2 of `bar2_size` bytes: a
    /// power of two in `ZA_MIN_BAR2_SIZE..=ZA_MAX_BAR2_SIZE`.
    pub fn memfd(name: &str, bar2_size: u64) -> Result<Self> {
        use nix::sys::memfd::{memfd_create, MFdFlags};
        if !bar2_size.is_power_of_two()
            || !(ZA_MIN_BAR2_SIZE..=ZA_MAX_BAR2_SIZE).contains(&bar2_size)
        {
            bail!(
                "ZACC BAR2 size {bar2_size:#x}: a power of two in {ZA_MIN_BAR2_SIZE:#x}..={ZA_MAX_BAR2_SIZE:#x}"
            );
        }
        let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC).context("memfd_create")?;
        let file = std::fs::File::from(fd);
        file.set_len(bar2_size).context("size ZACC memfd")?;
        let regs = Arc::new(Bar2::from_file_prefix(&file, ZA_REGS_SIZE)?);
        let hbm = Arc::new(Hbm::map(&file, bar2_size)?);
        Ok(Self {
            fd: file.into(),
            regs,
            hbm,
        })
    }

    /// The memfd (for the ivshmem protocol and the host-side oracle).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Hbm {
    fn map(file: &std::fs::File, bar2_size: u64) -> Result<Self> {
        let size = usize::try_from(bar2_size).context("BAR2 size")?;
        let hbm_off = ZA_HBM_OFFSET as usize;
        let map = MmapOptions::new()
            .len(size + GUARD)
            .map_raw(file)
            .context("mmap ZACC device memory")?;
        let lo = map.as_mut_ptr();
        for (p, n) in [(lo, hbm_off), (lo.wrapping_add(size), GUARD)] {
            let p = std::ptr::NonNull::new(p.cast()).context("guard")?;
            let none = nix::sys::mman::ProtFlags::PROT_NONE;
            // SAFETY: both ranges lie inside the fresh mapping (its register
            // part and its last page), page-aligned as the mapping is; no
            // reference into them exists.
            unsafe { nix::sys::mman::mprotect(p, n, none) }.context("mprotect guard")?;
        }
        Ok(Self {
            map,
            len: bar2_size - ZA_HBM_OFFSET,
        })
    }

    /// Bytes of device memory.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Never true: device memory is at least 2 MiB.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bounds check; the host pointer of device offset `off`.
    pub fn check(&self, off: u64, len: u64) -> Result<*mut u8, BoundsError> {
        let err = BoundsError { off, len };
        let end = off.checked_add(len).ok_or(err)?;
        if end > self.len {
            return Err(err);
        }
        // SAFETY: off + len <= self.len, and the mapping holds
        // ZA_HBM_OFFSET + self.len bytes (plus a guard), so the pointer
        // stays inside it; off fits usize because the mapping does.
        Ok(unsafe {
            self.map
                .as_mut_ptr()
                .add(ZA_HBM_OFFSET as usize + off as usize)
        })
    }

    /// Copies device memory at `off` into `buf`.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), BoundsError> {
        let p = self.check(off, buf.len() as u64)?;
        // SAFETY: `p..p+len` is inside the mapping (checked); `buf` is a
        // host buffer distinct from it.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copies `data` into device memory at `off`.
    pub fn write(&self, off: u64, data: &[u8]) -> Result<(), BoundsError> {
        let p = self.check(off, data.len() as u64)?;
        // SAFETY: `p..p+len` is inside the mapping (checked); `data` is a
        // host buffer distinct from it.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }

    /// Copies `len` bytes from `src` to `dst` within device memory, as if
    /// through a temporary buffer (the ranges may overlap).
    pub fn copy_within(&self, src: u64, dst: u64, len: u64) -> Result<(), BoundsError> {
        let s = self.check(src, len)?;
        let d = self.check(dst, len)?;
        // SAFETY: both ranges are inside the mapping (checked); `copy` is
        // memmove, correct for overlapping ranges.
        unsafe { std::ptr::copy(s, d, len as usize) };
        Ok(())
    }
}

/// Copies `len` bytes from `src` to `dst`, pointers a bounds check of a
/// live mapping returned (guest RAM's `check`, [`Hbm::check`]).
///
/// # Safety
///
/// `src..src+len` and `dst..dst+len` must lie inside mappings that stay
/// alive for the call (the caller holds them).
pub(crate) unsafe fn raw_copy(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller guarantees both ranges are mapped; `copy` is
    // memmove, so even two views of one object could not overlap unsoundly.
    unsafe { std::ptr::copy(src, dst, len) };
}

// SAFETY: the mapping is plain shared memory; all access goes through raw
// copies and nothing hands out references into it.
unsafe impl Send for Hbm {}
// SAFETY: as above; concurrent raw copies are what real DMA does.
unsafe impl Sync for Hbm {}

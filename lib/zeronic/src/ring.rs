//! The shared ring of a mapped completion queue: the header the kernel
//! describes in `struct zeronic_cq_ring` and the entries after it
//! (`docs/uapi.md`, "Completion queues"). The one reader of that layout:
//! [`crate::Cq`] reads its ring through it, and so does a caller that maps a
//! CQ itself (the fuzzer, which creates and maps CQs with raw ioctls).

use crate::{Cqe, Error, Result};
use nix::errno::Errno;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use zeronic_uapi::{self as zu, CqRing};

/// Byte offsets of the header words (`struct zeronic_cq_ring`).
const HEAD: usize = std::mem::offset_of!(CqRing, head);
const TAIL: usize = std::mem::offset_of!(CqRing, tail);
const FLAGS: usize = std::mem::offset_of!(CqRing, flags);

/// A view of a CQ's ring in a mapping the view does not own: pops entries
/// and arms the CQ, without system calls.
///
/// # Invariants
/// `[base, base + len)` stays mapped while the view lives (the promise of
/// [`CqRingView::new`]); `entries_off + (mask + 1) * size_of::<Cqe>() <= len`
/// and `entries_off` is aligned for a [`Cqe`].
#[derive(Debug)]
pub struct CqRingView {
    base: NonNull<u8>,
    mask: u32,
    entries_off: usize,
}

impl CqRingView {
    /// Reads the header of the CQ mapped at `base` (`len` bytes from the
    /// CQ's `mmap_offset`) and checks that its `mask` and `entries_offset`
    /// place every entry inside the mapping.
    ///
    /// # Errors
    /// EIO (op `"CQ mapping"`) if `len` is shorter than the header or the
    /// entries the header describes do not fit in `len` bytes.
    ///
    /// # Safety
    /// `[base, base + len)` must be a shared mapping of a CQ, starting at its
    /// `mmap_offset`, that stays mapped as long as the view lives. Only one
    /// consumer may pop at a time: a second one (another thread or process
    /// on the same pages) would be a race on the ring's `head`. Entries are
    /// plain integers read volatile, so what such a race yields is wrong
    /// data, which is why the contract forbids it rather than the type.
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> Result<Self> {
        let bad = Error {
            op: "CQ mapping",
            errno: Errno::EIO,
        };
        if len < size_of::<CqRing>() {
            return Err(bad);
        }
        let ring = base.as_ptr().cast::<CqRing>();
        // SAFETY: the header is mapped (`len` covers it, the caller's
        // promise); the kernel wrote `mask` and `entries_offset` before
        // CQ_CREATE returned and never changes them.
        let (mask, entries_off) = unsafe {
            (
                std::ptr::read_volatile(&raw const (*ring).mask),
                std::ptr::read_volatile(&raw const (*ring).entries_offset),
            )
        };
        let entries_off = entries_off as usize;
        let end = (mask as usize)
            .checked_add(1)
            .and_then(|n| n.checked_mul(size_of::<Cqe>()))
            .and_then(|b| b.checked_add(entries_off));
        if end.is_none_or(|e| e > len) || entries_off % align_of::<Cqe>() != 0 {
            return Err(bad);
        }
        // INVARIANT: the entries fit in the mapping and are aligned (checked
        // above); the mapping outlives the view by the caller's promise.
        Ok(Self {
            base,
            mask,
            entries_off,
        })
    }

    /// The mapping's first byte.
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Entries the ring holds (`mask + 1`, a power of two for a ring the
    /// kernel made).
    pub fn entries(&self) -> u64 {
        u64::from(self.mask) + 1
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        // SAFETY: `off` is the 4-aligned offset of a `u32` of the mapped
        // header, which lives as long as `self`; the kernel accesses it
        // atomically.
        unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(off).cast()) }
    }
    fn head(&self) -> &AtomicU32 {
        self.word(HEAD)
    }
    fn tail(&self) -> &AtomicU32 {
        self.word(TAIL)
    }
    fn flags(&self) -> &AtomicU32 {
        self.word(FLAGS)
    }

    /// The next completion, if any.
    pub fn pop(&self) -> Option<Cqe> {
        let head = self.head().load(Ordering::Relaxed);
        let tail = self.tail().load(Ordering::Acquire);
        if head == tail {
            return None;
        }
        let at = self.entries_off + (head & self.mask) as usize * size_of::<Cqe>();
        // SAFETY: within the mapping and aligned (the invariant); published
        // by the kernel's release store of `tail`, read above with acquire;
        // not rewritten before `head` passes it.
        let e = unsafe { std::ptr::read_volatile(self.base.as_ptr().add(at).cast::<Cqe>()) };
        self.head().store(head.wrapping_add(1), Ordering::Release);
        Some(e)
    }

    /// Whether no entry is waiting.
    pub fn is_empty(&self) -> bool {
        self.tail().load(Ordering::Acquire) == self.head().load(Ordering::Relaxed)
    }

    /// `head` and `tail` as they are now (consumed and produced entries,
    /// modulo 2^32), for diagnostics.
    pub fn indices(&self) -> (u32, u32) {
        (
            self.head().load(Ordering::Relaxed),
            self.tail().load(Ordering::Acquire),
        )
    }

    /// Sets `ZERONIC_CQ_ARMED`; returns whether it was set before and
    /// whether the ring is empty after arming: `(was_armed, empty)`.
    pub fn arm(&self) -> (bool, bool) {
        let was = self.flags().fetch_or(zu::CQ_ARMED, Ordering::SeqCst) & zu::CQ_ARMED != 0;
        (
            was,
            self.tail().load(Ordering::SeqCst) == self.head().load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring in plain memory, laid out as the kernel lays it out.
    #[repr(C, align(64))]
    struct FakeCq {
        header: [u8; 64],
        entries: [Cqe; 8],
    }

    fn fake(mask: u32, entries_offset: u32) -> Box<FakeCq> {
        let mut f = Box::new(FakeCq {
            header: [0; 64],
            entries: [Cqe::default(); 8],
        });
        let ring = CqRing {
            mask,
            entries_offset,
            ..Default::default()
        };
        // SAFETY: `CqRing` is plain integers and fits in the 64-byte header.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&raw const ring).cast::<u8>(),
                f.header.as_mut_ptr(),
                size_of::<CqRing>(),
            )
        };
        f
    }

    fn view(f: &mut FakeCq, len: usize) -> Result<CqRingView> {
        // SAFETY: `f` outlives every view made in these tests.
        unsafe { CqRingView::new(NonNull::from(f).cast(), len) }
    }

    #[test]
    fn pops_what_tail_publishes_in_order() {
        let mut f = fake(7, 64);
        for (i, e) in f.entries.iter_mut().enumerate() {
            e.wr_id = i as u64;
        }
        let v = view(&mut f, size_of::<FakeCq>()).unwrap();
        assert_eq!(v.entries(), 8);
        assert!(v.pop().is_none());
        v.tail().store(3, Ordering::Release);
        let got: Vec<u64> = std::iter::from_fn(|| v.pop()).map(|e| e.wr_id).collect();
        assert_eq!(got, [0, 1, 2]);
        assert_eq!(v.indices(), (3, 3));
        assert!(v.is_empty());
    }

    #[test]
    fn arm_reports_the_flag_and_emptiness() {
        let mut f = fake(7, 64);
        let v = view(&mut f, size_of::<FakeCq>()).unwrap();
        assert_eq!(v.arm(), (false, true));
        v.tail().store(1, Ordering::Release);
        assert_eq!(v.arm(), (true, false));
    }

    #[test]
    fn entries_beyond_the_mapping_are_eio() {
        let mut f = fake(7, 64);
        let len = size_of::<FakeCq>() - 1;
        assert_eq!(view(&mut f, len).unwrap_err().errno, Errno::EIO);
        let mut f = fake(u32::MAX, 64);
        assert!(view(&mut f, size_of::<FakeCq>()).is_err());
        let mut f = fake(7, 60);
        assert!(view(&mut f, size_of::<FakeCq>()).is_err(), "misaligned");
        let mut f = fake(7, 64);
        assert!(view(&mut f, 8).is_err(), "shorter than the header");
    }
}

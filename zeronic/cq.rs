// SPDX-License-Identifier: GPL-2.0

//! Completion queues: rings of `struct zeronic_cqe` the application maps.
//!
//! Layout of the mapping (`uapi/linux/zeronic.h`): one page with `struct
//! zeronic_cq_ring` (the application's `head`, the kernel's `tail`, `mask`,
//! `flags`, `entries_offset`), then `entries` 32-byte entries. The kernel
//! writes an entry, then publishes `tail` with a release store; the
//! application reads entries up to `tail` and publishes `head`.
//!
//! **Credits, so that a CQ never overflows.** Every posted work request
//! reserves the entry of its completion, and every attached flow reserves one
//! for its final flow event, when they are posted; a post that finds no free
//! entry fails with `EAGAIN`. Free entries are `entries - (tail - head) -
//! reserved`; `head` comes from the application and is only trusted to be
//! some number: a value claiming more than `entries` unread entries counts
//! as a full ring (which only hurts that application). Stream-mode data
//! notifications use a free entry if there is one and wait otherwise (the
//! data is in the ring; the flow posts the notification later).
//!
//! **Wake-ups.** If the application set `ZERONIC_CQ_ARMED` before sleeping,
//! the kernel clears it and signals the CQ's eventfd after publishing
//! entries. Publishing and the flag check are fully ordered, so with the
//! application's "arm, recheck `tail`, sleep" no wake-up is lost.
//!
//! **Accounting.** A CQ's pages (the header page and the entries, sized by
//! `entries`) are charged to the creating user's `locked_vm` against
//! `RLIMIT_MEMLOCK` ([`LockedCharge`]) for as long as they exist: a [`Ring`]
//! holds both, and is held by its CQ until the CQ's file goes
//! ([`Cq::retire`]) or the CQ is destroyed, and by each of its mappings
//! (each VMA holds a reference, taken in its `open` and dropped in its
//! `close`, [`CQ_VM_OPS`]), since a mapping keeps the pages until it is
//! unmapped. A flow detached when its file went may outlive the file (its
//! socket is open elsewhere, or TCP still sends its bytes); it keeps the
//! [`Cq`] but not the pages: entries posted to a retired CQ are dropped,
//! since nobody can read them any more.
//!
//! Entries are posted from any context (the receive path's softirq, send
//! completions wherever an skb is freed), under a spinlock that keeps
//! interrupts off.

use kernel::{
    bindings,
    eventfd::EventFd,
    mm::{
        shared::SharedPages,
        virt::VmaNew, //
    },
    new_spinlock_irq,
    page::PAGE_SIZE,
    prelude::*,
    sync::{
        Arc,
        SpinLockIrq, //
    },
};

use crate::{
    charge::LockedCharge,
    uapi, //
};

/// The operations of a CQ's mappings: each VMA's `vm_private_data` is a
/// reference to its CQ's [`Ring`] (`Arc::into_raw`), taken when the VMA is made
/// ([`Cq::map_into`], `open` for a VMA split or copied from another) and
/// given back by its `close`. Everything else is the kernel's default for a
/// `VM_MIXEDMAP` mapping whose pages are all inserted.
static CQ_VM_OPS: bindings::vm_operations_struct = bindings::vm_operations_struct {
    open: Some(cq_vma_open),
    close: Some(cq_vma_close),
    // SAFETY: All-zero is a valid `vm_operations_struct`: no callbacks.
    ..unsafe { core::mem::MaybeUninit::zeroed().assume_init() }
};

/// `vm_operations_struct::open`: a VMA was made from one of a CQ's VMAs
/// (split, `mremap`), with the same `vm_private_data`.
///
/// # Safety
///
/// `vma` is a valid VMA whose `vm_private_data` holds a reference to a
/// [`Ring`] on behalf of the VMA it was made from (see [`CQ_VM_OPS`]).
unsafe extern "C" fn cq_vma_open(vma: *mut bindings::vm_area_struct) {
    // SAFETY: By the function's requirements.
    let ptr = unsafe { (*vma).vm_private_data }.cast::<Ring>();
    // SAFETY: `ptr` came from `Arc::into_raw` and its reference (the other
    // VMA's) is live; it is given back to it just below.
    let other = unsafe { Arc::from_raw(ptr) };
    // INVARIANT: one more reference, for this VMA.
    let _ = Arc::into_raw(other.clone());
    let _ = Arc::into_raw(other);
}

/// `vm_operations_struct::close`: one of a CQ's VMAs goes.
///
/// # Safety
///
/// `vma` is a valid VMA whose `vm_private_data` holds a reference to a
/// [`Ring`] on its behalf (see [`CQ_VM_OPS`]), called once.
unsafe extern "C" fn cq_vma_close(vma: *mut bindings::vm_area_struct) {
    // SAFETY: By the function's requirements.
    let ptr = unsafe { (*vma).vm_private_data }.cast::<Ring>();
    // SAFETY: The VMA's reference, given back once, here (process context:
    // the pages may be freed there).
    drop(unsafe { Arc::from_raw(ptr) });
}

/// Offsets in the CQ's first page (`struct zeronic_cq_ring`).
const OFF_HEAD: usize = 0;
const OFF_TAIL: usize = 4;
const OFF_MASK: usize = 8;
const OFF_FLAGS: usize = 12;
const OFF_ENTRIES: usize = 16;

/// Size of one entry (`struct zeronic_cqe`).
const CQE_SIZE: usize = 32;

/// One completion, as written to the ring.
#[derive(Clone, Copy, Default)]
pub(crate) struct Cqe {
    pub(crate) wr_id: u64,
    pub(crate) stream_off: u64,
    pub(crate) len: u32,
    pub(crate) flow: u32,
    pub(crate) opcode: u16,
    /// 0 or a (positive) errno value.
    pub(crate) status: u16,
    pub(crate) flags: u32,
}

/// The `status` of an entry that failed with `err`: its positive errno
/// (`docs/uapi.md`, "Completion entries"). Every errno the driver reports
/// in an entry goes through here.
pub(crate) fn cqe_status(err: Error) -> u16 {
    // CAST: an errno is at most MAX_ERRNO (4095).
    err.to_errno().unsigned_abs() as u16
}

impl Cqe {
    fn encode(&self) -> [u8; CQE_SIZE] {
        let mut b = [0u8; CQE_SIZE];
        b[0..8].copy_from_slice(&self.wr_id.to_le_bytes());
        b[8..16].copy_from_slice(&self.stream_off.to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
        b[20..24].copy_from_slice(&self.flow.to_le_bytes());
        b[24..26].copy_from_slice(&self.opcode.to_le_bytes());
        b[26..28].copy_from_slice(&self.status.to_le_bytes());
        b[28..32].copy_from_slice(&self.flags.to_le_bytes());
        b
    }
}

/// Where an entry's credit comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credit {
    /// One the poster reserved earlier ([`Cq::reserve`]).
    Reserved,
    /// A free one, if any (`EAGAIN` otherwise).
    Free,
}

/// A CQ's pages and their charge.
struct Ring {
    pages: SharedPages,
    /// After `pages`, so uncharged once they are freed.
    _charge: LockedCharge,
}

struct Inner {
    /// Entries produced (free-running; also published at `OFF_TAIL`).
    tail: u32,
    /// Entries reserved by posted work requests and attached flows.
    reserved: u32,
    /// Whether entries were added since the last [`Cq::notify`].
    unsignalled: bool,
    /// The pages; `None` once retired ([`Cq::retire`]).
    ring: Option<Arc<Ring>>,
}

/// A completion queue.
#[pin_data]
pub(crate) struct Cq {
    /// Id within its file (`zeronic_cq_create.cq`).
    pub(crate) id: u32,
    /// Entries, a power of two.
    pub(crate) entries: u32,
    /// Bytes of the mapping.
    size: usize,
    eventfd: Option<EventFd>,
    #[pin]
    inner: SpinLockIrq<Inner>,
}

impl Cq {
    /// Pages a CQ of `entries` entries maps (header page + entries).
    pub(crate) fn pages(entries: u32) -> usize {
        // CAST: u32 -> usize is lossless on every architecture Linux supports.
        1 + (entries as usize * CQE_SIZE).div_ceil(PAGE_SIZE)
    }

    /// A CQ of `entries` entries (checked by the caller) whose wake-ups go to
    /// the eventfd `eventfd` (`-1`: none), its pages charged to the current
    /// user (see the module documentation).
    ///
    /// # Errors
    ///
    /// - `EINVAL` if `entries` is not a power of two within the uAPI's bounds.
    /// - `EBADF` if `eventfd` is not an open eventfd.
    /// - `ENOMEM` beyond `RLIMIT_MEMLOCK`, or if the pages cannot be allocated.
    pub(crate) fn new(id: u32, entries: u32, eventfd: i32) -> Result<Arc<Self>> {
        if !entries.is_power_of_two()
            || !(uapi::CQ_MIN_ENTRIES..=uapi::CQ_MAX_ENTRIES).contains(&entries)
        {
            return Err(EINVAL);
        }
        let eventfd = match eventfd {
            -1 => None,
            // A descriptor that is not an eventfd is EBADF, as for a
            // closed one (`docs/uapi.md`); `from_fd` says EINVAL for it.
            fd => Some(EventFd::from_fd(fd).map_err(|e| if e == EINVAL { EBADF } else { e })?),
        };
        // Charged before anything is allocated: a refused CQ costs nothing.
        let charge = LockedCharge::new(Self::pages(entries))?;
        let pages = SharedPages::new(Self::pages(entries))?;
        pages.store_u32_release(OFF_MASK, entries - 1)?;
        // CAST: PAGE_SIZE fits u32.
        pages.store_u32_release(OFF_ENTRIES, PAGE_SIZE as u32)?;
        let size = pages.size();
        let ring = Arc::new(
            Ring {
                pages,
                _charge: charge,
            },
            GFP_KERNEL,
        )?;
        Arc::pin_init(
            try_pin_init!(Self {
                id,
                entries,
                size,
                eventfd,
                inner <- new_spinlock_irq!(Inner {
                    tail: 0,
                    reserved: 0,
                    unsignalled: false,
                    ring: Some(ring),
                }, "zeronic::cq"),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// Size of the mapping.
    pub(crate) fn map_size(&self) -> usize {
        self.size
    }

    /// Frees the pages and gives back their charge (unless a mapping still
    /// has them): the CQ's file went, so nobody can map or read it again.
    /// Entries posted from now on are dropped. Process context.
    pub(crate) fn retire(&self) {
        let ring = self.inner.lock().ring.take();
        // Freed here, with the lock released.
        drop(ring);
    }

    /// Maps the CQ into `vma` (exactly [`Cq::map_size`] bytes). The mapping
    /// (and every VMA split or moved from it) holds a reference to the CQ,
    /// and so its pages' charge, until it is unmapped.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if `vma` is not exactly [`Cq::map_size`] bytes long, or
    ///   the CQ is retired (never: only its file maps it).
    /// - `ENOMEM`, `EBUSY`, `EFAULT` as `vm_insert_page` (a page cannot be inserted).
    pub(crate) fn map_into(&self, vma: &VmaNew) -> Result {
        // Mapping sleeps: with a reference of its own, not under the lock.
        let ring = self.inner.lock().ring.clone().ok_or(EINVAL)?;
        ring.pages.map_into(vma)?;
        let raw = vma.as_ptr();
        // SAFETY: `raw` is the VMA being set up by this `mmap` call (the mmap
        // lock is held for writing, nothing else uses it yet). Its `close`
        // is called once for this VMA when it goes (not when `mmap` fails,
        // which it cannot any more), and `open` for each VMA made from it;
        // each then holds the reference stored or taken for it, as
        // `CQ_VM_OPS` requires. `CQ_VM_OPS` is a static.
        unsafe {
            (*raw).vm_private_data = Arc::into_raw(ring).cast_mut().cast();
            (*raw).vm_ops = &CQ_VM_OPS;
        }
        Ok(())
    }

    /// Entries neither unread nor reserved.
    fn free(&self, inner: &Inner) -> u32 {
        let head = inner
            .ring
            .as_ref()
            .and_then(|r| r.pages.load_u32_acquire(OFF_HEAD).ok())
            .unwrap_or(inner.tail);
        let unread = inner.tail.wrapping_sub(head).min(self.entries);
        self.entries - unread - inner.reserved.min(self.entries - unread)
    }

    /// Reserves `n` entries for completions to come.
    ///
    /// # Errors
    ///
    /// - `EAGAIN` if fewer than `n` entries are free.
    pub(crate) fn reserve(&self, n: u32) -> Result {
        let mut inner = self.inner.lock();
        if self.free(&inner) < n {
            return Err(EAGAIN);
        }
        inner.reserved += n;
        Ok(())
    }

    /// Gives back `n` reserved entries that will not be used.
    pub(crate) fn unreserve(&self, n: u32) {
        let mut inner = self.inner.lock();
        inner.reserved = inner.reserved.saturating_sub(n);
    }

    /// Adds an entry. The application is woken by the next [`Cq::notify`].
    ///
    /// # Errors
    ///
    /// - `EAGAIN` with [`Credit::Free`] if no entry is free.
    /// - `EINVAL` if the entry lies outside the pages (never: the slot is masked).
    pub(crate) fn post(&self, cqe: &Cqe, credit: Credit) -> Result {
        let mut inner = self.inner.lock();
        match credit {
            Credit::Reserved => inner.reserved = inner.reserved.saturating_sub(1),
            Credit::Free => {
                if self.free(&inner) == 0 {
                    return Err(EAGAIN);
                }
            }
        }
        let tail = inner.tail.wrapping_add(1);
        let Some(ring) = inner.ring.as_ref() else {
            // Retired: nobody can read it.
            return Ok(());
        };
        // CAST: u32 -> usize is lossless on every architecture Linux supports.
        let slot = (inner.tail & (self.entries - 1)) as usize;
        ring.pages
            .write(PAGE_SIZE + slot * CQE_SIZE, &cqe.encode())?;
        ring.pages.store_u32_release(OFF_TAIL, tail)?;
        inner.tail = tail;
        inner.unsignalled = true;
        Ok(())
    }

    /// Wakes the application if entries were added and it armed the CQ.
    pub(crate) fn notify(&self) {
        let mut inner = self.inner.lock();
        if !core::mem::take(&mut inner.unsignalled) {
            return;
        }
        let armed = inner.ring.as_ref().is_some_and(|r| {
            r.pages
                .fetch_clear_u32(OFF_FLAGS, uapi::CQ_ARMED)
                .is_ok_and(|f| f & uapi::CQ_ARMED != 0)
        });
        drop(inner);
        if armed {
            if let Some(efd) = &self.eventfd {
                efd.signal();
            }
        }
    }
}

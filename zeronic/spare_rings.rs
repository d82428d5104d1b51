// SPDX-License-Identifier: GPL-2.0

//! Receive rings kept between sockets: a NIC's spare rings.
//!
//! A socket attached by `setsockopt(TCP_ULP)` receives into a ring of pages
//! the driver allocates, zeroes and DMA-maps (`Mr::register_kernel`). For a
//! 4 MiB ring that work is most of an attach's cost, and a server that
//! accepts short connections pays it for each. So a released ring's pages
//! are kept here, up to `spare_rings` per NIC, and a later attach takes
//! them instead of allocating. They stay mapped for the NIC but are **not
//! registered**: their region was invalidated, and the NIC confirmed it,
//! before they came here. They are charged to no user while here, and
//! freed when the NIC is unbound.
//!
//! A released ring first **cools**: socket buffers may still reference its
//! pages (skbs freed later on another CPU, a packet socket's clones of the
//! receipts), and whoever holds one must keep reading what the connection
//! received. Only once the ring's own reference is the only one left
//! (`KernelPages::max_ref_count()`; nobody can take a new one, as the flow is
//! gone) is it **zeroed**, so that nothing of one connection's stream is left
//! for the next, and ready. See docs/driver.md, "Spare rings".

use kernel::{
    dma::pages::{
        KernelPages,
        MappedPages,
        SZ_4K, //
    },
    new_mutex,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Mutex,
    },
};

/// Most spare rings a NIC may keep (`spare_rings`): 64 rings of the largest
/// size would be 4 GiB, which the operator asked for by setting both.
pub(crate) const SPARE_RINGS_MAX: u32 = 64;

/// Checks the module parameter this file reads, at load.
///
/// # Errors
///
/// `EINVAL`, with a log line, if `spare_rings` is above [`SPARE_RINGS_MAX`].
pub(crate) fn check_params() -> Result {
    let n = crate::module_parameters::spare_rings.value();
    if n > SPARE_RINGS_MAX {
        pr_err!("spare_rings={}: must be 0 to {}\n", n, SPARE_RINGS_MAX);
        return Err(EINVAL);
    }
    Ok(())
}

/// How many spare rings a NIC keeps: the `spare_rings` module parameter,
/// bounded again here.
fn limit() -> usize {
    let n = crate::module_parameters::spare_rings
        .value()
        .min(SPARE_RINGS_MAX);
    // CAST: at most 64.
    n as usize
}

/// Zeroes a ring 4 KiB at a time.
static ZEROS: [u8; SZ_4K] = [0; SZ_4K];

/// A ring's pages, mapped for the NIC.
type RingPages = MappedPages<KernelPages>;

/// The rings, by state.
struct Lists {
    /// Zeroed, referenced by nobody else: taken first.
    ready: KVec<RingPages>,
    /// Released, perhaps still referenced; zeroed once they are not.
    cooling: KVec<RingPages>,
}

impl Lists {
    fn len(&self) -> usize {
        self.ready.len() + self.cooling.len()
    }
}

/// A NIC's spare rings, and what happened to them.
#[pin_data]
pub(crate) struct SpareRings {
    /// `None` once the NIC is being unbound (nothing is kept then).
    #[pin]
    lists: Mutex<Option<Lists>>,
    /// Rings kept now, ready or cooling (read without the lock).
    count: Atomic<u32>,
    /// Of those, the cooling ones.
    cooling: Atomic<u32>,
    /// Attaches that took a spare ring instead of allocating one.
    pub(crate) reused: Atomic<u64>,
    /// Released rings kept.
    pub(crate) kept: Atomic<u64>,
    /// Cooling rings freed to make room for a released one, because a page
    /// of theirs was still referenced elsewhere.
    pub(crate) evicted: Atomic<u64>,
}

impl SpareRings {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            lists <- new_mutex!(
                Some(Lists {
                    ready: KVec::new(),
                    cooling: KVec::new(),
                }),
                "zeronic::spare_rings::lists"
            ),
            count: Atomic::new(0),
            cooling: Atomic::new(0),
            reused: Atomic::new(0),
            kept: Atomic::new(0),
            evicted: Atomic::new(0),
        })
    }

    /// Rings kept now, ready or cooling.
    pub(crate) fn count(&self) -> u32 {
        self.count.load(Relaxed)
    }

    /// Of [`SpareRings::count`], the rings still cooling.
    pub(crate) fn cooling(&self) -> u32 {
        self.cooling.load(Relaxed)
    }

    fn recount(&self, l: &Lists) {
        // CAST: both at most SPARE_RINGS_MAX.
        self.count.store(l.len() as u32, Relaxed);
        self.cooling.store(l.cooling.len() as u32, Relaxed);
    }

    /// Keeps `ring`, released after the NIC confirmed its region
    /// invalidated, to cool; frees it if there is no room (making room
    /// first from a cooling ring still referenced elsewhere). Then readies
    /// one cooled ring, if any. Process context.
    pub(crate) fn offer(&self, ring: RingPages) {
        let mut evicted = None;
        let refused = {
            let mut lists = self.lists.lock();
            match Option::as_mut(&mut *lists) {
                None => Some(ring),
                Some(l) => {
                    if l.len() >= limit() {
                        let busy = l.cooling.iter().position(|r| r.pages().max_ref_count() > 1);
                        evicted = busy.and_then(|i| l.cooling.remove(i).ok());
                    }
                    let kept = l.len() < limit() && l.cooling.reserve(1, GFP_KERNEL).is_ok();
                    let refused = if kept {
                        l.cooling.push_within_capacity(ring).err().map(|e| e.0)
                    } else {
                        Some(ring)
                    };
                    if refused.is_none() {
                        self.kept.add(1, Relaxed);
                    }
                    self.recount(l);
                    refused
                }
            }
        };
        if evicted.is_some() {
            self.evicted.add(1, Relaxed);
        }
        // Unmapped, then the pages given back, outside the lock.
        drop(evicted);
        drop(refused);
        self.ready_one();
    }

    /// Zeroes one cooling ring that nobody else references any more and
    /// makes it ready.
    fn ready_one(&self) {
        let Some(ring) = self.take_cooled(None) else {
            return;
        };
        if zero(&ring).is_err() {
            return;
        }
        let mut lists = self.lists.lock();
        if let Some(l) = Option::as_mut(&mut *lists) {
            if l.ready.reserve(1, GFP_KERNEL).is_ok() {
                let _ = l.ready.push_within_capacity(ring);
            }
            self.recount(l);
        }
    }

    /// Takes a cooling ring (of `npages` pages, if given) whose pages
    /// nobody else references.
    fn take_cooled(&self, npages: Option<usize>) -> Option<RingPages> {
        let mut lists = self.lists.lock();
        let l = Option::as_mut(&mut *lists)?;
        let at = l.cooling.iter().position(|r| {
            let fits = match npages {
                Some(n) => r.pages().page_count() == n,
                None => true,
            };
            fits && r.pages().max_ref_count() == 1
        })?;
        let ring = l.cooling.remove(at).ok();
        self.recount(l);
        ring
    }

    /// A zeroed ring of `npages` pages that nobody else references, if one
    /// is kept: a ready one, else a cooled one zeroed now.
    pub(crate) fn take(&self, npages: usize) -> Option<RingPages> {
        let ready = {
            let mut lists = self.lists.lock();
            let l = Option::as_mut(&mut *lists)?;
            let at = l
                .ready
                .iter()
                .position(|r| r.pages().page_count() == npages);
            let ring = at.and_then(|i| l.ready.remove(i).ok());
            self.recount(l);
            ring
        };
        let ring = match ready {
            Some(r) => r,
            None => {
                let r = self.take_cooled(Some(npages))?;
                zero(&r).ok()?;
                r
            }
        };
        self.reused.add(1, Relaxed);
        Some(ring)
    }

    /// Keeps nothing from now on, and hands over the rings kept (the caller
    /// drops them outside the lock).
    pub(crate) fn close(&self) -> Option<(KVec<RingPages>, KVec<RingPages>)> {
        let lists = self.lists.lock().take();
        self.count.store(0, Relaxed);
        self.cooling.store(0, Relaxed);
        lists.map(|l| (l.ready, l.cooling))
    }
}

/// Zeroes `ring`, whose pages nobody but the caller references.
///
/// # Errors
///
/// `ENOMEM` if the page references to write through cannot be had.
fn zero(ring: &RingPages) -> Result {
    let refs = ring.pages().page_refs()?;
    // Whole pages: a multiple of 4 KiB.
    for block in 0..refs.len() / SZ_4K {
        refs.write(block * SZ_4K, &ZEROS)?;
    }
    Ok(())
}

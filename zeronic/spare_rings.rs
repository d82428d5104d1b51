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
//! for the next, and ready. An attach that finds no ready ring may take a
//! cooled one unzeroed only if it served a socket of the same user: a ring
//! never goes to another user with a byte of someone else's stream in it.
//! See docs/driver.md, "Spare rings".

use kernel::{
    dma::pages::{
        KernelPages,
        MappedPages,
        SZ_4K, //
    },
    impl_has_work,
    new_mutex,
    new_work,
    prelude::*, //
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
        Mutex, //
    },
    task::Kuid,
    time::{
        delay::fsleep,
        Delta, //
    },
    workqueue::{
        self,
        Work,
        WorkItem, //
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

/// Pushes `v` onto `list` if memory allows; gives it back if not.
fn push<T>(list: &mut KVec<T>, v: T) -> Option<T> {
    if list.reserve(1, GFP_KERNEL).is_err() {
        return Some(v);
    }
    list.push_within_capacity(v).err().map(|e| e.0)
}

/// A released ring and the user whose socket it served.
struct Cooling {
    ring: RingPages,
    uid: Kuid,
}

/// The rings, by state.
struct Lists {
    /// Zeroed, referenced by nobody else: taken first.
    ready: KVec<RingPages>,
    /// Released, perhaps still referenced; zeroed once they are not.
    cooling: KVec<Cooling>,
    /// Taken from `cooling` by the readier, being zeroed outside the lock:
    /// still counted against the limit.
    zeroing: usize,
}

impl Lists {
    fn len(&self) -> usize {
        self.ready.len() + self.cooling.len() + self.zeroing
    }

    /// Rings not ready yet: cooling, or being zeroed by the readier.
    fn not_ready(&self) -> usize {
        self.cooling.len() + self.zeroing
    }
}

/// How many times the readier looks again at rings that still cool: 10 ms
/// after its first look, then twice as long each time (about 2.5 s in all);
/// after that the next release starts it again.
const READY_TRIES: u32 = 8;

/// A NIC's spare rings, and what happened to them.
#[pin_data]
pub(crate) struct SpareRings {
    /// Readies cooled rings on the system workqueue, off the paths of
    /// attach and close. It sleeps between its looks, so the module's exit,
    /// which flushes the queue, waits for it (for at most about 2.5 s).
    #[pin]
    readier: Work<SpareRings>,
    /// `None` once the NIC is being unbound (nothing is kept then).
    #[pin]
    lists: Mutex<Option<Lists>>,
    /// Attaches that took a spare ring instead of allocating one.
    pub(crate) reused: Atomic<u64>,
    /// Released rings kept.
    pub(crate) kept: Atomic<u64>,
    /// Cooling rings freed to make room for a released one, because a page
    /// of theirs was still referenced elsewhere.
    pub(crate) evicted: Atomic<u64>,
}

impl_has_work! {
    impl HasWork<Self> for SpareRings { self.readier }
}

impl WorkItem for SpareRings {
    type Pointer = Arc<SpareRings>;

    fn run(this: Arc<SpareRings>) {
        // A released ring's region lets go of its page references on this
        // workqueue just after the release queued this: look a moment later.
        let mut wait_ms = 2;
        for _ in 0..=READY_TRIES {
            fsleep(Delta::from_millis(wait_ms));
            while this.ready_one() {}
            if this.counts().1 == 0 {
                return;
            }
            wait_ms = if wait_ms < 10 { 10 } else { wait_ms * 2 };
        }
    }
}

impl SpareRings {
    /// A NIC's spare rings, none yet.
    ///
    /// # Errors
    ///
    /// - `ENOMEM` if they cannot be allocated.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(Self::init(), GFP_KERNEL)
    }

    fn init() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            readier <- new_work!("zeronic::spare_rings::readier"),
            lists <- new_mutex!(
                Some(Lists {
                    ready: KVec::new(),
                    cooling: KVec::new(),
                    zeroing: 0,
                }),
                "zeronic::spare_rings::lists"
            ),
            reused: Atomic::new(0),
            kept: Atomic::new(0),
            evicted: Atomic::new(0),
        }? Error)
    }

    /// Rings kept now, ready or not, and of those the ones not ready yet
    /// (cooling, or being zeroed). Process context.
    pub(crate) fn counts(&self) -> (usize, usize) {
        self.lists
            .lock()
            .as_ref()
            .map_or((0, 0), |l| (l.len(), l.not_ready()))
    }

    /// Keeps `ring`, the ring of a socket of user `uid` released after the
    /// NIC confirmed its region invalidated, to cool; frees it if there is
    /// no room (making room first from a cooling ring still referenced
    /// elsewhere). The readier zeroes it once nobody else references it.
    /// Process context.
    pub(crate) fn offer(this: &Arc<Self>, ring: RingPages, uid: Kuid) {
        let mut evicted = None;
        let refused = {
            let mut lists = this.lists.lock();
            match Option::as_mut(&mut *lists) {
                None => Some(ring),
                Some(l) => {
                    if l.len() >= limit() {
                        let busy = l
                            .cooling
                            .iter()
                            .position(|c| c.ring.pages().max_ref_count() > 1);
                        evicted = busy.and_then(|i| l.cooling.remove(i).ok());
                    }
                    let refused = if l.len() < limit() {
                        push(&mut l.cooling, Cooling { ring, uid }).map(|c| c.ring)
                    } else {
                        Some(ring)
                    };
                    if refused.is_none() {
                        this.kept.add(1, Relaxed);
                    }
                    refused
                }
            }
        };
        if evicted.is_some() {
            this.evicted.add(1, Relaxed);
        }
        // Unmapped, then the pages given back, outside the lock.
        drop(evicted);
        drop(refused);
        // Already queued: that run will see this ring.
        let _ = workqueue::system().enqueue(this.clone());
    }

    /// Zeroes one cooling ring that nobody else references any more and
    /// makes it ready; whether there was one.
    fn ready_one(&self) -> bool {
        let Some((ring, _)) = self.take_cooled(None, true) else {
            return false;
        };
        // Out of memory for the references to write through: freed.
        let zeroed = zero(&ring).ok().map(|()| ring);
        let refused = {
            let mut lists = self.lists.lock();
            match Option::as_mut(&mut *lists) {
                // The NIC is being unbound: freed.
                None => zeroed,
                Some(l) => {
                    l.zeroing = l.zeroing.saturating_sub(1);
                    zeroed.and_then(|r| push(&mut l.ready, r))
                }
            }
        };
        drop(refused);
        true
    }

    /// Takes a cooling ring whose pages nobody else references: of
    /// `npages` pages and, first, of user `uid`, if given (with whether it
    /// was that user's); counted as being zeroed if `to_ready`.
    fn take_cooled(
        &self,
        want: Option<(usize, Kuid)>,
        to_ready: bool,
    ) -> Option<(RingPages, bool)> {
        let mut lists = self.lists.lock();
        let l = Option::as_mut(&mut *lists)?;
        let free = |c: &Cooling| match want {
            Some((n, _)) => c.ring.pages().page_count() == n,
            None => true,
        } && c.ring.pages().max_ref_count() == 1;
        let same = |c: &Cooling| want.is_some_and(|(_, uid)| c.uid == uid);
        let at = l
            .cooling
            .iter()
            .position(|c| same(c) && free(c))
            .or_else(|| l.cooling.iter().position(free))?;
        let ring = l.cooling.remove(at).ok().map(|c| {
            let was = same(&c);
            (c.ring, was)
        });
        if ring.is_some() && to_ready {
            l.zeroing += 1;
        }
        ring
    }

    /// A ring of `npages` pages that nobody else references, for a socket
    /// of user `uid`, if one is kept: a ready one (zeroed), else a cooled one
    /// of `uid`'s own sockets as they left it (only bytes `uid`'s sockets
    /// received), else another cooled one zeroed now.
    pub(crate) fn take(&self, npages: usize, uid: Kuid) -> Option<RingPages> {
        let ready = {
            let mut lists = self.lists.lock();
            let l = Option::as_mut(&mut *lists)?;
            let at = l
                .ready
                .iter()
                .position(|r| r.pages().page_count() == npages);
            at.and_then(|i| l.ready.remove(i).ok())
        };
        let ring = match ready {
            Some(r) => r,
            None => {
                let (r, own) = self.take_cooled(Some((npages, uid)), false)?;
                if !own {
                    zero(&r).ok()?;
                }
                r
            }
        };
        self.reused.add(1, Relaxed);
        Some(ring)
    }

    /// Keeps nothing from now on, and frees the rings kept (after the
    /// lock is dropped: unmapping may sleep). Process context.
    pub(crate) fn close(&self) {
        let lists = self.lists.lock().take();
        drop(lists);
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

// SPDX-License-Identifier: GPL-2.0

//! Memory regions: user memory registered with the NIC's MR Table.
//!
//! A registration takes one MR Table entry from the calling user's share
//! (`max_mrs_per_user`), pins the user range (charged to the user's
//! `locked_vm` against `RLIMIT_MEMLOCK` and to the process's `pinned_vm`, see
//! `PinnedPages`), DMA-maps every page, hands the NIC a list of 4 KiB block
//! addresses with `CMD_MR_REG`, and keeps the key the NIC returns. An [`Mr`]
//! belongs to one open file. Releasing it invalidates the entry on the NIC
//! first (`CMD_MR_INVAL` completes only once the NIC can no longer DMA to the
//! region), then unmaps, unpins and uncharges the pages. If the NIC does not
//! confirm the invalidation (or a registration never completes), the pages
//! go to `Control::release`: pinned until the NIC is reset, never handed back
//! while a device may still write them.
//!
//! **The charge goes with the page references.** The data path holds the
//! region's pages by reference ([`MrShared`]): posted segments, a stream
//! flow, sends still in TCP, which may outlive the file. A released region
//! whose [`MrShared`] is still held elsewhere is therefore not unpinned at
//! once: its pages, pin and charges are parked in the [`MrShared`] and given
//! back (on the system workqueue) when its last holder lets go, so that
//! references to a region never exist without the pin's `RLIMIT_MEMLOCK`
//! charge. Its MR Table entry is free as soon as the NIC invalidated it.
//!
//! **Kernel rings.** A socket the application attached itself (`TCP_ULP`)
//! receives into a ring of pages the driver allocates ([`Mr::register_kernel`]):
//! zeroed, charged to the user's `locked_vm` like a pin, DMA-mapped and
//! registered with local write like any region, and released the same way
//! (invalidated first; never given back before the NIC confirmed).

use kernel::{
    alloc::flags::__GFP_NOWARN,
    device::{
        Bound,
        Device, //
    },
    dma::{
        pages::{
            KernelPages,
            MappedPages,
            SZ_4K, //
        },
        CoherentBox,
        DataDirection, //
    },
    mm::pin::{
        Access,
        PageRefs,
        PinnedPages, //
    },
    new_spinlock_irq,
    page::{
        BorrowedPage,
        PAGE_SIZE, //
    },
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
        SpinLockIrq,
        UniqueArc, //
    },
};

use crate::{
    charge::LockedCharge,
    control::{
        Control,
        Held,
        Region,
        RegionPages, //
    },
    defer::DropInProcess,
    hw::{
        cmd::{
            CmdMrInval,
            CmdMrReg,
            MR_ACCESS_LOCAL_READ,
            MR_ACCESS_LOCAL_WRITE, //
        },
        status,
    },
    spare_rings::SpareRings,
    uapi,
};

/// Largest region one registration may cover. The NIC allows 4 GiB
/// (`MR_MAX_PAGES`); the driver stops at 1 GiB so that the page list it hands
/// the NIC (8 bytes per 4 KiB) stays a 2 MiB DMA allocation.
pub(crate) const MR_MAX_BYTES: u64 = 1 << 30;

/// A registered memory region.
pub(crate) struct Mr {
    /// The NIC's key (slot and generation); never repeated by the NIC.
    pub(crate) key: u64,
    /// Index of the NIC it was registered on (`zeronic_mr_reg.nic`).
    pub(crate) nic: u32,
    control: Arc<Control>,
    /// `None` only once released.
    region: Option<Region>,
    /// What the data path uses of the region; `None` only once released.
    shared: Option<Arc<MrShared>>,
}

/// What the zero-copy data path needs of a region: its key, its pages (as
/// page references, which may be dropped in any context, unlike the pin),
/// and how many posted work requests use it. Shared with those requests and
/// receive segments, which may outlive the file's [`Mr`] (sends still in
/// flight in TCP after the region was released). Dropped in any context:
/// what must be freed in process context goes to the system workqueue.
#[pin_data]
pub(crate) struct MrShared {
    pub(crate) key: u64,
    /// `ZERONIC_ACCESS_*`.
    pub(crate) access: u32,
    /// Region bytes.
    pub(crate) len: u64,
    /// Freed on the workqueue: the page array may be `vmalloc`ed.
    pages: DropInProcess<PageRefs>,
    /// Posted work requests, receive segments and stream-mode flows whose
    /// ring it holds ([`MrUse`]) using the region; while nonzero, `MR_DEREG`
    /// fails with `EBUSY`.
    pub(crate) users: Atomic<u32>,
    /// Cleared before the region is invalidated: sends still in flight then
    /// go out by copy (their skbs hold the pages) instead of by key.
    pub(crate) valid: Atomic<bool>,
    /// The region's pinned pages once the file released it while others
    /// still held this: unpinned and uncharged when this is dropped.
    #[pin]
    parked: SpinLockIrq<Option<DropInProcess<Parked>>>,
}

/// The pinned (and DMA-mapped) pages of a released region whose page
/// references are still held ([`MrShared::parked`]): dropping it unmaps,
/// unpins and uncharges them. Process context only (unpinning may sleep).
struct Parked {
    control: Arc<Control>,
    mapped: Option<RegionPages>,
    npages: u64,
}

impl Drop for Parked {
    fn drop(&mut self) {
        drop(self.mapped.take());
        self.control.pinned_pages.fetch_sub(self.npages, Relaxed);
    }
}

impl MrShared {
    /// The page holding byte `pos` of the region, the offset in it, and how
    /// many of the region's bytes from there lie in that page.
    pub(crate) fn locate(&self, pos: u64) -> Option<(BorrowedPage<'_>, u32, u32)> {
        if pos >= self.len {
            return None;
        }
        let at = usize::try_from(pos)
            .ok()?
            .checked_add(self.pages.offset())?;
        let page = self.pages.page(at / PAGE_SIZE)?;
        let in_page = at % PAGE_SIZE;
        let left = (PAGE_SIZE - in_page).min(usize::try_from(self.len - pos).ok()?);
        Some((
            page,
            u32::try_from(in_page).ok()?,
            u32::try_from(left).ok()?,
        ))
    }

    /// The page references, to copy into the region.
    pub(crate) fn pages(&self) -> &PageRefs {
        &self.pages
    }

    /// Whether `[off, off + len)` lies in the region.
    pub(crate) fn contains(&self, off: u64, len: u64) -> bool {
        off.checked_add(len).is_some_and(|end| end <= self.len)
    }
}

/// One use of a region ([`MrShared::users`]), given back when dropped, in
/// any context: whatever took a use, and every error path after it, gives
/// it back by dropping this.
pub(crate) struct MrUse(Arc<MrShared>);

impl MrUse {
    /// Takes a use of `mr`. The caller holds the file's region table, so that
    /// `MR_DEREG` (which checks the uses under it) sees the use.
    pub(crate) fn take(mr: &Arc<MrShared>) -> Self {
        mr.users.add(1, Relaxed);
        Self(mr.clone())
    }

    /// The region.
    pub(crate) fn shared(&self) -> &Arc<MrShared> {
        &self.0
    }
}

impl Drop for MrUse {
    fn drop(&mut self) {
        self.0.users.fetch_sub(1, Relaxed);
    }
}

/// The pages of a kernel ring being registered: a NIC's spare ring, or new.
enum RingPages {
    Spare(MappedPages<KernelPages>),
    New(KernelPages),
}

/// Validates the arguments of a registration request.
fn check(len: u64, addr: u64, access: u32) -> Result {
    let known = uapi::ACCESS_LOCAL_READ | uapi::ACCESS_LOCAL_WRITE;
    if len == 0 || addr.checked_add(len).is_none() || access == 0 || access & !known != 0 {
        return Err(EINVAL);
    }
    if len > MR_MAX_BYTES {
        return Err(E2BIG);
    }
    Ok(())
}

impl Mr {
    /// Registers `len` bytes at user address `addr` of the current process on
    /// `control`'s NIC (index `nic`). On error nothing is left registered,
    /// and only a command the NIC never completed leaves its pages held.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if `len` is 0, `addr + len` overflows, or `access` is 0 or unknown.
    /// - `E2BIG` if `len` exceeds [`MR_MAX_BYTES`].
    /// - `EFAULT` if part of the range is not mapped user memory accessible as asked.
    /// - `ENOSPC` if the user holds `mr_user_max` entries, or the NIC's MR Table is full.
    /// - `ENOMEM` beyond `RLIMIT_MEMLOCK`, if a page cannot be DMA-mapped, or out of memory.
    /// - `ENODEV` once the NIC is being unbound.
    /// - `EIO` if the NIC is broken, did not complete the command (the pages are
    ///   then held), or refused it otherwise.
    pub(crate) fn register(
        control: Arc<Control>,
        nic: u32,
        addr: u64,
        len: u64,
        access: u32,
    ) -> Result<Self> {
        check(len, addr, access)?;
        let uaddr = usize::try_from(addr).map_err(|_| EFAULT)?;
        let ulen = usize::try_from(len).map_err(|_| E2BIG)?;
        let uid = current!().uid();
        control.take_share(uid)?;
        Self::complete(control, nic, uid, |control, held| {
            Self::register_pages(control, uid, uaddr, ulen, access, held)
        })
    }

    /// Runs `register` for a registration whose MR Table share the caller
    /// took for `uid`: counts the region on success; on failure gives the
    /// share back, unless `register` set its `held` flag (the NIC may still
    /// use the memory: a held registration keeps its share until it is
    /// freed).
    ///
    /// # Errors
    ///
    /// - Those of `register`.
    fn complete(
        control: Arc<Control>,
        nic: u32,
        uid: kernel::task::Kuid,
        register: impl FnOnce(&Control, &mut bool) -> Result<(u64, Region, Arc<MrShared>)>,
    ) -> Result<Self> {
        let mut held = false;
        match register(&control, &mut held) {
            Ok((key, region, shared)) => {
                control.mr_in_use.add(1, Relaxed);
                control.pinned_pages.add(region.npages, Relaxed);
                Ok(Self {
                    key,
                    nic,
                    control,
                    region: Some(region),
                    shared: Some(shared),
                })
            }
            Err(e) => {
                if !held {
                    control.put_share(uid);
                }
                Err(e)
            }
        }
    }

    /// Pins, maps and registers the pages; sets `held` when the NIC did not
    /// complete the command and the memory was handed to `Control` instead.
    fn register_pages(
        control: &Control,
        uid: kernel::task::Kuid,
        uaddr: usize,
        ulen: usize,
        access: u32,
        held: &mut bool,
    ) -> Result<(u64, Region, Arc<MrShared>)> {
        let (pin, dir) = match access {
            uapi::ACCESS_LOCAL_READ => (Access::Read, DataDirection::ToDevice),
            uapi::ACCESS_LOCAL_WRITE => (Access::Write, DataDirection::FromDevice),
            _ => (Access::Write, DataDirection::Bidirectional),
        };
        let mut hw_access = 0;
        if access & uapi::ACCESS_LOCAL_READ != 0 {
            hw_access |= MR_ACCESS_LOCAL_READ;
        }
        if access & uapi::ACCESS_LOCAL_WRITE != 0 {
            hw_access |= MR_ACCESS_LOCAL_WRITE;
        }
        // A range in the address space's last page, whose page-rounded end
        // wraps, is kernel memory: EFAULT as for any address that is not
        // mapped user memory (`pin` would call it EINVAL, which this call
        // keeps for a range whose own end wraps, `check`).
        if uaddr
            .checked_add(ulen)
            .and_then(|end| end.checked_add(PAGE_SIZE - 1))
            .is_none()
        {
            return Err(EFAULT);
        }
        // Pin before taking the command mutex: it sleeps and may fault.
        let pages = PinnedPages::pin(uaddr, ulen, pin)?;
        let offset = pages.offset();
        // Everything that can fail for lack of memory happens before the NIC
        // knows the region, so that no failure has to undo a registration.
        let refs = DropInProcess::new(pages.page_refs()?)?;
        let map = move |dev: &Device<Bound>| -> Result<RegionPages> {
            Ok(RegionPages::User(MappedPages::new(dev, pages, dir)?))
        };
        Self::register_region(
            control, uid, map, offset, ulen, access, hw_access, refs, held,
        )
    }

    /// Maps the pages `map` gives (`offset` bytes into the first of them,
    /// `ulen` bytes) and registers them: the common part of
    /// [`Mr::register_pages`] and [`Mr::register_kernel`]. `refs` are the
    /// pages' references for the data path. Sets `held` as
    /// [`Mr::register_pages`] does.
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts of a registration, once"
    )]
    fn register_region(
        control: &Control,
        uid: kernel::task::Kuid,
        map: impl FnOnce(&Device<Bound>) -> Result<RegionPages>,
        offset: usize,
        ulen: usize,
        access: u32,
        hw_access: u32,
        refs: DropInProcess<PageRefs>,
        held: &mut bool,
    ) -> Result<(u64, Region, Arc<MrShared>)> {
        let shared = UniqueArc::<MrShared>::new_uninit(GFP_KERNEL)?;
        let len = u64::try_from(ulen)?;
        control.with_bound(|dev, cmds| {
            let mapped = map(dev)?;
            let skip = offset / SZ_4K;
            let first_off = offset % SZ_4K;
            let npages = (first_off + ulen).div_ceil(SZ_4K);
            let mut list =
                CoherentBox::<[u64]>::zeroed_slice(dev, npages, GFP_KERNEL | __GFP_NOWARN)?;
            for (i, entry) in list.iter_mut().enumerate() {
                *entry = mapped.dma_address_4k(dev, skip + i)?.to_le();
            }
            let list: kernel::dma::Coherent<[u64]> = list.into();
            let cmd = CmdMrReg {
                access: hw_access,
                npages: u32::try_from(npages)?,
                first_off: u32::try_from(first_off)?,
                length: len,
                page_list: list.dma_address(),
                ..Default::default()
            };
            let region = Region {
                mapped,
                // CAST: usize -> u64 is lossless on every architecture Linux supports.
                npages: npages as u64,
                uid,
            };
            let done = match cmds.exec(&cmd) {
                Ok(done) => done,
                Err(e) => {
                    // Posted but not completed: the NIC may still read the
                    // list and register (then write) the pages; keep both
                    // until it is reset, counted as an entry in use.
                    control.mr_in_use.add(1, Relaxed);
                    control.pinned_pages.add(region.npages, Relaxed);
                    cmds.hold(Held::Block(list));
                    cmds.hold(Held::Region(region));
                    *held = true;
                    return Err(e);
                }
            };
            match done.status {
                status::ST_OK => {
                    let shared = shared.pin_init_with(pin_init!(MrShared {
                        key: done.result,
                        access,
                        len,
                        pages: refs,
                        users: Atomic::new(0),
                        valid: Atomic::new(true),
                        parked <- new_spinlock_irq!(None, "zeronic::mr::parked"),
                    }));
                    // Infallible initialiser.
                    match shared {
                        Ok(shared) => Ok((done.result, region, shared.into())),
                        Err(e) => match e {},
                    }
                }
                status::ST_NO_SPACE => Err(ENOSPC),
                st => {
                    pr_err!(
                        "NIC refused a registration of {} pages: status {}\n",
                        npages,
                        st
                    );
                    Err(EIO)
                }
            }
        })
    }

    /// Allocates `npages` zeroed pages, charged to the current task's user
    /// (`locked_vm`, against `RLIMIT_MEMLOCK`), and registers them with
    /// local write on `control`'s NIC (index `nic`): a socket's receive ring.
    /// The region belongs to the kernel (no file's table holds it); dropping
    /// it invalidates it on the NIC first, as any region's release does.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if `npages` is 0; `E2BIG` beyond [`MR_MAX_BYTES`].
    /// - `ENOSPC` if the user holds `mr_user_max` entries, or the NIC's MR Table is full.
    /// - `ENOMEM` beyond `RLIMIT_MEMLOCK`, if a page cannot be DMA-mapped, or out of memory.
    /// - `ENODEV` once the NIC is being unbound.
    /// - `EIO` as [`Mr::register`].
    pub(crate) fn register_kernel(control: Arc<Control>, nic: u32, npages: usize) -> Result<Self> {
        let ulen = npages.checked_mul(PAGE_SIZE).ok_or(E2BIG)?;
        check(u64::try_from(ulen)?, 0, uapi::ACCESS_LOCAL_WRITE)?;
        let uid = current!().uid();
        let charge = LockedCharge::new(npages)?;
        // A spare ring is mapped already, and zeroed unless it served this
        // user's own sockets (spare_rings.rs).
        let pages = match control.spares.take(npages, uid) {
            Some(mapped) => RingPages::Spare(mapped),
            None => RingPages::New(KernelPages::alloc(npages, GFP_KERNEL | __GFP_NOWARN)?),
        };
        let refs = DropInProcess::new(match &pages {
            RingPages::Spare(mapped) => mapped.pages().page_refs()?,
            RingPages::New(pages) => pages.page_refs()?,
        })?;
        control.take_share(uid)?;
        let map = move |dev: &Device<Bound>| -> Result<RegionPages> {
            let mapped = match pages {
                RingPages::Spare(mapped) => mapped,
                RingPages::New(pages) => MappedPages::new(dev, pages, DataDirection::FromDevice)?,
            };
            Ok(RegionPages::Kernel(mapped, charge))
        };
        Self::complete(control, nic, uid, |control, held| {
            Self::register_region(
                control,
                uid,
                map,
                0,
                ulen,
                uapi::ACCESS_LOCAL_WRITE,
                MR_ACCESS_LOCAL_WRITE,
                refs,
                held,
            )
        })
    }

    /// Pages this region pins.
    pub(crate) fn npages(&self) -> u64 {
        self.region.as_ref().map_or(0, |r| r.npages)
    }

    /// Invalidates the NIC's entry: `Ok` once the NIC answered (any answer:
    /// an entry it does not know is one it cannot use); `ENODEV` when the
    /// NIC is being or has been unbound, `EIO` when it did not answer.
    fn invalidate(&self) -> Result {
        self.control.with_bound(|_, cmds| {
            let cmd = CmdMrInval {
                key: self.key,
                ..Default::default()
            };
            let done = cmds.exec(&cmd)?;
            if done.status != status::ST_OK {
                pr_err!(
                    "NIC refused to invalidate key {:#x}: status {}\n",
                    self.key,
                    done.status
                );
            }
            Ok(())
        })
    }

    /// Deregisters the region: invalidate, then unmap, unpin and uncharge.
    ///
    /// While the NIC is being unbound the pages are held until the unbind's
    /// reset completes (a moment later) and this returns 0.
    ///
    /// # Errors
    ///
    /// - `EIO` if the NIC did not confirm the invalidation: the pages are then
    ///   held (still pinned and charged) until the NIC is reset.
    pub(crate) fn deregister(mut self) -> Result {
        self.release()
    }

    /// Whether posted work requests still use the region (`MR_DEREG` is
    /// `EBUSY` then).
    pub(crate) fn in_use(&self) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|s| s.users.load(Relaxed) != 0)
    }

    /// What the data path uses of the region (`None` only once released).
    pub(crate) fn shared(&self) -> Option<&Arc<MrShared>> {
        self.shared.as_ref()
    }

    fn release(&mut self) -> Result {
        let Some(region) = self.region.take() else {
            return Ok(());
        };
        let shared = self.shared.take();
        // Sends still in flight stop using the key before the NIC forgets it.
        if let Some(s) = &shared {
            s.valid.store(false, Relaxed);
        }
        match self.invalidate() {
            Ok(()) => {
                self.give_back(region, shared);
                Ok(())
            }
            Err(e) => {
                self.control.release(Held::Region(region));
                if e == ENODEV {
                    Ok(())
                } else {
                    Err(EIO)
                }
            }
        }
    }
}

impl Mr {
    /// Gives back an invalidated region: its MR Table entry now, its pages
    /// (pin and charges) now if nothing else holds their references, else
    /// when the last holder of `shared` lets go. Process context.
    fn give_back(&self, region: Region, shared: Option<Arc<MrShared>>) {
        let uid = region.uid;
        self.control.free_entry(uid);
        let parked = Parked {
            control: self.control.clone(),
            mapped: Some(region.mapped),
            npages: region.npages,
        };
        let Some(shared) = shared else {
            drop(parked);
            return;
        };
        // Out of memory for the deferral: `new` drops `parked`, which gives
        // the pages back now (the references left are not charged then).
        let Ok(parked) = DropInProcess::new(parked) else {
            pr_warn!(
                "key {:#x}: out of memory keeping a released region's pin\n",
                self.key
            );
            return;
        };
        *shared.parked.lock() = Some(parked);
        // Parked first, then checked: a holder that goes meanwhile either
        // leaves this the only reference or drops the parked pages itself.
        if let Some(only) = Arc::into_unique_or_drop(shared) {
            let parked = only.parked.lock().take();
            if let Some(mut p) = parked {
                // A kernel ring may become a spare; what is left in `p` is
                // given back now.
                if let Some(pages) = p.get_mut().mapped.take() {
                    p.get_mut().mapped = self.keep_spare(pages, uid);
                }
                // Nothing else holds the pages: give them back before
                // returning, as MR_DEREG promises.
                p.drop_now();
            }
        }
    }

    /// Offers the pages of an invalidated region to the NIC's spare rings
    /// (spare_rings.rs) if they are a kernel ring, their charge dropped:
    /// spare rings are charged to nobody. Returns them if not offered.
    fn keep_spare(&self, pages: RegionPages, uid: kernel::task::Kuid) -> Option<RegionPages> {
        let RegionPages::Kernel(mapped, charge) = pages else {
            return Some(pages);
        };
        drop(charge);
        SpareRings::offer(&self.control.spares, mapped, uid);
        None
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        if self.release().is_err() {
            pr_err!(
                "key {:#x}: NIC did not confirm invalidation; pages stay pinned until it is reset\n",
                self.key
            );
        }
    }
}

#[kernel::macros::kunit_tests(zeronic_mr_args)]
mod tests {
    use super::*;

    const RW: u32 = uapi::ACCESS_LOCAL_READ | uapi::ACCESS_LOCAL_WRITE;

    #[test]
    fn valid_requests_pass() {
        assert!(check(1, 0x1000, uapi::ACCESS_LOCAL_READ).is_ok());
        assert!(check(MR_MAX_BYTES, 0x1000, RW).is_ok());
        assert!(check(1, u64::MAX - 1, uapi::ACCESS_LOCAL_WRITE).is_ok());
    }

    #[test]
    fn bad_requests_get_the_documented_errno() {
        assert_eq!(check(0, 0x1000, RW), Err(EINVAL));
        assert_eq!(check(2, u64::MAX, RW), Err(EINVAL));
        assert_eq!(check(1, 0x1000, 0), Err(EINVAL));
        assert_eq!(check(1, 0x1000, 1 << 2), Err(EINVAL));
        assert_eq!(check(MR_MAX_BYTES + 1, 0x1000, RW), Err(E2BIG));
    }
}

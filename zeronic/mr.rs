// SPDX-License-Identifier: GPL-2.0

//! Memory regions: user memory registered with the NIC's MR Table.
//!
//! A registration pins the user range (charged to `RLIMIT_MEMLOCK` through
//! `pinned_vm`, as RDMA does), DMA-maps every page, hands the NIC a list of
//! 4 KiB block addresses with `CMD_MR_REG`, and keeps the key the NIC returns.
//! An [`Mr`] belongs to one open file. Dropping it invalidates the entry on
//! the NIC first (`CMD_MR_INVAL` completes only once the NIC can no longer
//! DMA to the region), then unmaps and unpins the pages. If the NIC cannot
//! confirm the invalidation (or a registration never completes), the pages
//! stay pinned and mapped until unbind has reset the NIC (`Control::adopt`):
//! handing memory back that a device may still write would be worse.

use kernel::{
    alloc::flags::__GFP_NOWARN,
    dma::{
        pages::{
            MappedPages,
            SZ_4K, //
        },
        CoherentBox,
        DataDirection, //
    },
    mm::pin::{
        Access,
        PinnedPages, //
    },
    prelude::*,
    sync::{
        atomic::Relaxed,
        Arc, //
    },
};

use crate::{
    control::{
        Control,
        Orphan, //
    },
    hw::{
        cmd::{
            CmdMrInval,
            CmdMrReg,
            CMD_MR_INVAL,
            CMD_MR_REG,
            MR_ACCESS_LOCAL_READ,
            MR_ACCESS_LOCAL_WRITE, //
        },
        status,
    },
    uapi,
};

/// Largest region one registration may cover. The NIC allows 4 GiB
/// (`MR_MAX_PAGES`); the driver stops at 1 GiB so that the page list it hands
/// the NIC (8 bytes per 4 KiB) stays a 2 MiB DMA allocation.
pub(crate) const MR_MAX_BYTES: u64 = 1 << 30;

/// A registered memory region.
pub(crate) struct Mr {
    /// The NIC's key: table slot and generation.
    pub(crate) key: u32,
    control: Arc<Control>,
    npages: u64,
    /// `None` only while dropping.
    mapped: Option<MappedPages<PinnedPages>>,
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
    /// `control`'s NIC. Errors as documented in `uapi/linux/zeronic.h`.
    pub(crate) fn register(
        control: Arc<Control>,
        addr: u64,
        len: u64,
        access: u32,
    ) -> Result<Self> {
        check(len, addr, access)?;
        let uaddr = usize::try_from(addr).map_err(|_| EFAULT)?;
        let ulen = usize::try_from(len).map_err(|_| E2BIG)?;
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
        // Pin before taking the command mutex: it sleeps and may fault.
        let pages = PinnedPages::pin(uaddr, ulen, pin)?;
        let offset = pages.offset();
        let (key, mapped, npages) = control.with_bound(|dev, cmds| {
            let mapped = MappedPages::new(dev, pages, dir)?;
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
                opcode: CMD_MR_REG,
                access: hw_access,
                npages: u32::try_from(npages)?,
                first_off: u32::try_from(first_off)?,
                length: len,
                page_list: list.dma_address(),
                ..Default::default()
            };
            let done = match cmds.exec(cmd.encode()) {
                Ok(done) => done,
                Err(e) => {
                    // Posted but not completed: the NIC may still read the
                    // list and register the pages; keep both until reset.
                    cmds.orphan(Orphan::PageList(list));
                    cmds.orphan(Orphan::Region(mapped));
                    return Err(e);
                }
            };
            match done.status {
                status::ST_OK => Ok((done.result, mapped, npages)),
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
        })?;
        // CAST: usize -> u64 is lossless on every architecture Linux supports.
        let npages = npages as u64;
        control.mr_in_use.add(1, Relaxed);
        control.pinned_pages.add(npages, Relaxed);
        Ok(Self {
            key,
            control,
            npages,
            mapped: Some(mapped),
        })
    }

    /// Pages this region pins.
    pub(crate) fn npages(&self) -> u64 {
        self.npages
    }

    /// Invalidates the NIC's entry. `Ok` also when the NIC is gone: unbinding
    /// reset it, which invalidated every key.
    fn invalidate(&self) -> Result {
        let res = self.control.with_bound(|_, cmds| {
            let cmd = CmdMrInval {
                opcode: CMD_MR_INVAL,
                key: self.key,
                ..Default::default()
            };
            let done = cmds.exec(cmd.encode())?;
            match done.status {
                status::ST_OK => Ok(()),
                st => {
                    pr_err!(
                        "NIC refused to invalidate key {:#x}: status {}\n",
                        self.key,
                        st
                    );
                    Err(EIO)
                }
            }
        });
        match res {
            Err(e) if e == ENODEV => Ok(()),
            res => res,
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let mapped = self.mapped.take();
        self.control.mr_in_use.fetch_sub(1, Relaxed);
        if self.invalidate().is_ok() {
            self.control.pinned_pages.fetch_sub(self.npages, Relaxed);
            // Unmaps, then unpins and uncharges the pages.
            drop(mapped);
        } else if let Some(mapped) = mapped {
            pr_err!(
                "key {:#x}: NIC did not confirm invalidation; {} pages stay pinned until it is reset\n",
                self.key,
                self.npages
            );
            self.control.adopt(Orphan::Region(mapped));
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

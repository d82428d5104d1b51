// SPDX-License-Identifier: GPL-2.0

//! The NIC's control plane: its command queue and the registry through which
//! `/dev/zeronic` files reach bound NICs.
//!
//! A [`Control`] is created at probe and shared (`Arc`) with the open files
//! that use the NIC. It outlives the binding: at unbind [`Control::shut_down`]
//! marks it dead under its mutex, after which every call fails with `ENODEV`.
//! While the mutex is held and the NIC is alive, the PCI device is bound, which
//! is what lets a file map pages for DMA (see [`Control::with_bound`]).
//!
//! Commands are executed one at a time under the mutex: post, ring `DB_CMD`,
//! then sleep-poll the completion queue. The command path is the control path
//! (registration, flows), not the per-packet path, so polling costs nothing
//! that matters and needs no interrupt.
//!
//! Lock order (outermost first): a file's region table -> [`NICS`] ->
//! [`Control::inner`]. [`NICS`] is never held while sleeping on the NIC.

use kernel::{
    device::{
        Bound,
        Device, //
    },
    dma::{
        pages::MappedPages,
        Coherent, //
    },
    mm::pin::PinnedPages,
    new_mutex, pci,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::Atomic,
        Arc,
        Mutex, //
    },
};

use crate::{
    hw::{cmd::CmdCompletion, regs, status},
    nic_regs::NicRegs,
    ring::{
        poll_until,
        Ring, //
    },
};

/// Entries of the command and command completion queues.
const CMDQ_ENTRIES: u32 = 64;

/// How long a command may take. The largest (registering 1 GiB = 256 Ki
/// pages) copies a 2 MiB page list; TCG guests on a busy host are slow.
const CMD_TIMEOUT_MS: i64 = 10_000;

kernel::sync::global_lock! {
    // SAFETY: Initialised by `init_registry` in the module initialiser, before
    // the PCI driver is registered and before `/dev/zeronic` exists.
    pub(crate) unsafe(uninit) static NICS: Mutex<KVec<Arc<Control>>> = KVec::new();
}

/// Initialises [`NICS`]. Called once, first thing in module init.
pub(crate) fn init_registry() {
    // SAFETY: Called exactly once, from module init, before any user of `NICS`.
    unsafe { NICS.init() };
}

/// Returns the NIC of index `nic` (binding order) and the number of NICs.
pub(crate) fn lookup(nic: u32) -> Result<(Arc<Control>, u32)> {
    let nics = NICS.lock();
    // CAST: usize -> u32; at most a handful of NICs are ever bound.
    let count = nics.len() as u32;
    // CAST: u32 -> usize is lossless on every architecture Linux supports.
    let ctl = nics.get(nic as usize).ok_or(ENODEV)?.clone();
    Ok((ctl, count))
}

/// What the query ioctl reports about a port, kept current by the port.
pub(crate) struct PortSnapshot {
    pub(crate) ifindex: Atomic<u32>,
    pub(crate) mtu: Atomic<u32>,
    pub(crate) link: Atomic<u32>,
}

impl PortSnapshot {
    const fn new() -> Self {
        Self {
            ifindex: Atomic::new(0),
            mtu: Atomic::new(0),
            link: Atomic::new(0),
        }
    }
}

/// Static facts about the NIC, read at probe.
#[derive(Clone, Copy)]
pub(crate) struct Identity {
    /// `major << 16 | minor`.
    pub(crate) version: u32,
    /// `CAP_*` bits.
    pub(crate) caps: u32,
    /// Ports of this function (1 ..= `MAX_PORTS`).
    pub(crate) ports: u32,
    /// Largest MTU a port accepts.
    pub(crate) max_mtu: u32,
    /// MR Table entries.
    pub(crate) mr_capacity: u32,
    /// Flow Table entries.
    pub(crate) flow_capacity: u32,
    /// Receive segments per flow.
    pub(crate) ms_per_flow: u32,
}

/// The control plane of one bound NIC.
#[pin_data]
pub(crate) struct Control {
    /// The PCI function; bound while `inner.alive` (see [`Control::with_bound`]).
    pdev: ARef<pci::Device>,
    regs: Arc<NicRegs>,
    pub(crate) identity: Identity,
    /// Per-port facts for the query ioctl.
    pub(crate) ports: [PortSnapshot; regs::MAX_PORTS as usize],
    /// MR Table entries in use, all files.
    pub(crate) mr_in_use: Atomic<u32>,
    /// Pages pinned by registrations on this NIC, all files.
    pub(crate) pinned_pages: Atomic<u64>,
    #[pin]
    inner: Mutex<Inner>,
}

/// State behind [`Control::inner`].
struct Inner {
    /// `false` once the NIC unbinds: nothing may touch it any more.
    alive: bool,
    /// `true` once the NIC stopped answering commands; only a rebind recovers.
    broken: bool,
    /// The command and completion rings; freed at unbind (DMA memory must
    /// not outlive the binding, and files may keep this object longer).
    rings: Option<(Ring<64>, Ring<16>)>,
    /// Memory the NIC may still access because a command touching it was
    /// posted but never completed (or an invalidation never confirmed):
    /// kept until unbind has reset the NIC, then released.
    orphans: KVec<Orphan>,
    /// Next free-running command index (= `Q_PROD` of the command queue).
    prod: u32,
    /// Next completion to consume (= `Q_CONS` of the completion queue).
    cons: u32,
}

/// DMA memory held back from release until the NIC is reset (see
/// `Inner::orphans`).
pub(crate) enum Orphan {
    /// A page list handed to the NIC with `CMD_MR_REG`.
    PageList(#[expect(dead_code)] Coherent<[u64]>),
    /// The pages of a region whose registration or invalidation did not
    /// complete.
    Region(#[expect(dead_code)] MappedPages<PinnedPages>),
}

/// Adds `orphan` to `orphans`; leaks it (logged) if the list cannot grow,
/// since `push` would drop, i.e. release, it.
fn hold(orphans: &mut KVec<Orphan>, orphan: Orphan) {
    if orphans.reserve(1, GFP_KERNEL).is_err() {
        pr_err!("out of memory holding back DMA memory of a failed command; leaking it\n");
        core::mem::forget(orphan);
        return;
    }
    // Cannot fail: room was reserved.
    let _ = orphans.push(orphan, GFP_KERNEL);
}

/// Command issuing rights, handed out by [`Control::with_bound`].
pub(crate) struct Commands<'a> {
    inner: &'a mut Inner,
    regs: &'a NicRegs,
}

impl Control {
    /// Allocates and enables the command queues of a freshly reset NIC.
    pub(crate) fn new(
        pdev: &pci::Device<Bound>,
        regs: Arc<NicRegs>,
        identity: Identity,
    ) -> Result<Arc<Self>> {
        let dev: &Device<Bound> = pdev.as_ref();
        let cmdq = Ring::<64>::new(dev, CMDQ_ENTRIES, regs::REG_CMDQ)?;
        let cmdcq = Ring::<16>::new(dev, CMDQ_ENTRIES, regs::REG_CMDCQ)?;
        cmdq.enable(&regs)?;
        cmdcq.enable(&regs)?;
        let pdev: &pci::Device = pdev;
        Arc::pin_init(
            try_pin_init!(Self {
                pdev: pdev.into(),
                regs,
                identity,
                ports: [const { PortSnapshot::new() }; regs::MAX_PORTS as usize],
                mr_in_use: Atomic::new(0),
                pinned_pages: Atomic::new(0),
                inner <- new_mutex!(Inner {
                    alive: true,
                    broken: false,
                    rings: Some((cmdq, cmdcq)),
                    orphans: KVec::new(),
                    prod: 0,
                    cons: 0,
                }),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// Adds this NIC to [`NICS`]; `/dev/zeronic` files can use it from now on.
    pub(crate) fn publish(self: &Arc<Self>) -> Result {
        NICS.lock().push(self.clone(), GFP_KERNEL)?;
        Ok(())
    }

    /// Withdraws the NIC: removes it from [`NICS`] and marks it dead, waiting
    /// for a command in progress. Called at unbind, before the NIC is reset.
    pub(crate) fn shut_down(self: &Arc<Self>) {
        {
            let mut nics = NICS.lock();
            nics.retain(|c| !Arc::ptr_eq(c, self));
            if nics.is_empty() {
                // The registry is a static, never dropped: give its buffer
                // back now, or unloading the module would leak it.
                *nics = KVec::new();
            }
        }
        self.inner.lock().alive = false;
    }

    /// Frees the command rings and the orphaned memory. Called at unbind once
    /// the NIC has been reset, so nothing of it can be accessed any more.
    pub(crate) fn release_dma(&self) {
        let (rings, orphans) = {
            let mut inner = self.inner.lock();
            (inner.rings.take(), core::mem::take(&mut inner.orphans))
        };
        drop(rings);
        drop(orphans);
    }

    /// Keeps `orphan` until the NIC is reset at unbind. Only if memory for
    /// the list itself runs out is it leaked instead (logged): released
    /// memory a device may still write is worse than a leak.
    pub(crate) fn adopt(&self, orphan: Orphan) {
        let mut inner = self.inner.lock();
        if !inner.alive {
            // Unbound: the NIC was reset, nothing can reach the memory.
            drop(inner);
            drop(orphan);
            return;
        }
        hold(&mut inner.orphans, orphan);
    }

    /// Runs `f` with the bound device and the right to issue commands.
    ///
    /// `ENODEV` once the NIC has been unbound, `EIO` once it stopped
    /// answering. Process context (sleeps); holds the command mutex.
    pub(crate) fn with_bound<R>(
        &self,
        f: impl FnOnce(&Device<Bound>, &mut Commands<'_>) -> Result<R>,
    ) -> Result<R> {
        let mut inner = self.inner.lock();
        if !inner.alive {
            return Err(ENODEV);
        }
        if inner.broken {
            return Err(EIO);
        }
        let dev: &Device = self.pdev.as_ref();
        // SAFETY: `alive` is true and we hold `inner`. Unbinding runs
        // `shut_down` (clearing `alive` under `inner`) from the driver's
        // remove path, before the device is unbound; so the device stays bound
        // at least until this guard is released, which outlives the reference.
        let dev = unsafe { dev.as_bound() };
        let mut cmds = Commands {
            inner: &mut inner,
            regs: &self.regs,
        };
        f(dev, &mut cmds)
    }
}

impl Commands<'_> {
    /// Keeps `orphan` until the NIC is reset at unbind (see [`Control::adopt`]).
    pub(crate) fn orphan(&mut self, orphan: Orphan) {
        hold(&mut self.inner.orphans, orphan);
    }

    /// Executes one 64-byte command and returns its completion.
    ///
    /// The cookie is filled in here. A completion whose status is not `ST_OK`
    /// is returned as is (the caller maps it); `EIO` if the NIC does not
    /// complete the command in time or answers out of order, after which the
    /// NIC is considered broken.
    pub(crate) fn exec(&mut self, mut cmd: [u8; 64]) -> Result<CmdCompletion> {
        let inner = &mut *self.inner;
        let Some((cmdq, cmdcq)) = &inner.rings else {
            return Err(ENODEV);
        };
        let cookie = inner.prod;
        cmd[4..8].copy_from_slice(&cookie.to_le_bytes());
        let opcode = u16::from_le_bytes([cmd[0], cmd[1]]);
        cmdq.write(inner.prod, cmd)?;
        inner.prod = inner.prod.wrapping_add(1);
        {
            let r = self.regs.get()?;
            // Entry before index (spec §5).
            kernel::sync::barrier::mb(kernel::sync::barrier::Write);
            r.w32(cmdq.reg(regs::Q_PROD), inner.prod)?;
            r.doorbell(regs::DB_CMD)?;
        }
        let cons = inner.cons;
        let waited = poll_until(self.regs, CMD_TIMEOUT_MS, |r| {
            if r.r32(regs::REG_DEV_STATUS)? & regs::DEV_STATUS_FATAL != 0 {
                return Err(EIO);
            }
            Ok(cmdcq.prod(r)? != cons)
        });
        if let Err(e) = waited {
            inner.broken = true;
            pr_err!(
                "NIC did not complete command {} ({:?}); commands disabled\n",
                opcode,
                e
            );
            return Err(EIO);
        }
        kernel::sync::barrier::dma_mb(kernel::sync::barrier::Read);
        let done = CmdCompletion::decode(&cmdcq.read(cons)?);
        inner.cons = cons.wrapping_add(1);
        self.regs.get()?.w32(cmdcq.reg(regs::Q_CONS), inner.cons)?;
        if done.cookie != cookie || done.opcode != opcode {
            inner.broken = true;
            pr_err!(
                "NIC completed command {}/{} while {}/{} was expected; commands disabled\n",
                done.opcode,
                done.cookie,
                opcode,
                cookie
            );
            return Err(EIO);
        }
        if done.status != status::ST_OK {
            pr_debug!("command {} failed with status {}\n", opcode, done.status);
        }
        Ok(done)
    }
}

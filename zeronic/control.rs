// SPDX-License-Identifier: GPL-2.0

//! The NIC's control plane: its command queue, the registry through which
//! `/dev/zeronic` files reach bound NICs, and the rule for giving back memory
//! the NIC was handed.
//!
//! A [`Control`] is created at probe and shared (`Arc`) with the open files
//! that use the NIC. It outlives the binding: at unbind [`Control::shut_down`]
//! withdraws it under its mutex, after which every call fails with `ENODEV`.
//! While the mutex is held and the NIC is running, the PCI device is bound,
//! which is what lets a file map pages for DMA (see [`Control::with_bound`]).
//!
//! Commands go through a [`CmdQueue`]: callers in process context post one
//! and sleep under the mutex until its completion is reaped (registration,
//! flow attach); the data path posts from any context without waiting.
//!
//! **Memory the NIC may address** (rings, page lists, registered pages) is
//! given back only once the NIC confirmed it is done with it: a queue it
//! disabled, a region it invalidated, or a reset it completed. Memory whose
//! release the NIC did not confirm goes to [`Control::release`], which keeps
//! it until the unbind's reset completes and frees it then, or leaks it (one
//! log line) if that reset never completes: a leak is bounded, a device
//! writing into memory the kernel reused is not.
//!
//! Lock order (outermost first): a file's region table -> [`NICS`] ->
//! [`Control::inner`]. [`NICS`] is never held while sleeping on the NIC.

use kernel::{
    device::{
        Bound,
        Device, //
    },
    dma::{
        pages::{
            KernelPages,
            MappedPages, //
        },
        Coherent,
        CoherentBox,
        DmaAddress, //
    },
    mm::pin::PinnedPages,
    net::{
        dev::DevId,
        napi::NapiContext, //
    },
    new_condvar, new_mutex, new_spinlock_irq,
    page::Page,
    pci,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
        CondVar,
        Mutex,
        SetOnce,
        SpinLockIrq, //
    },
    task::Kuid,
};

use crate::{
    charge::LockedCharge,
    cmdq::{
        CmdDone,
        CmdQueue,
        CmdRoom, //
    },
    hw::{
        cmd::{
            CmdCompletion,
            CmdEntry,
            Command, //
        },
        desc::HDRQ_ENTRY_SIZE,
        regs,
        status, //
    },
    nic_regs::NicRegs,
    qp_track::{
        Mark,
        QpTrack, //
    },
    ring::Ring,
    spare_rings::SpareRings,
};

/// The bounds of the `cmd_timeout_ms` module parameter: how long the NIC may
/// go without completing any command while one is waited for (the waited
/// one may sit behind a long backlog of the data path's). Its default, 10 s,
/// covers the largest command (registering 1 GiB = 256 Ki pages copies a
/// 2 MiB page list) on a TCG guest of a busy host. Below 100 ms a NIC that
/// is merely slow would be declared broken; above 10 minutes a caller (and
/// the command mutex it holds) waits on a dead NIC for longer than anyone
/// would. A value outside is refused at load ([`check_params`]).
pub(crate) const CMD_TIMEOUT_MS_MIN: u32 = 100;
/// See [`CMD_TIMEOUT_MS_MIN`].
pub(crate) const CMD_TIMEOUT_MS_MAX: u32 = 600_000;

/// Checks the module parameters this file reads, at load.
///
/// # Errors
///
/// `EINVAL`, with a log line, if `cmd_timeout_ms` is outside
/// [`CMD_TIMEOUT_MS_MIN`]..=[`CMD_TIMEOUT_MS_MAX`].
pub(crate) fn check_params() -> Result {
    let ms = crate::module_parameters::cmd_timeout_ms.value();
    if !(CMD_TIMEOUT_MS_MIN..=CMD_TIMEOUT_MS_MAX).contains(&ms) {
        pr_err!(
            "cmd_timeout_ms={}: must be {} to {} (ms)\n",
            ms,
            CMD_TIMEOUT_MS_MIN,
            CMD_TIMEOUT_MS_MAX
        );
        return Err(EINVAL);
    }
    Ok(())
}

/// The command timeout in milliseconds: the `cmd_timeout_ms` module
/// parameter, which [`check_params`] kept within its bounds at load (clamped
/// again here, so no value can make a wait endless or instant).
fn cmd_timeout_ms() -> i64 {
    let ms = crate::module_parameters::cmd_timeout_ms.value();
    i64::from(ms.clamp(CMD_TIMEOUT_MS_MIN, CMD_TIMEOUT_MS_MAX))
}

kernel::sync::global_lock! {
    // SAFETY: Initialised by `init_registry` in the module initialiser, before
    // the PCI driver is registered and before `/dev/zeronic` exists.
    pub(crate) unsafe(uninit) static NICS: Mutex<KVec<Option<Arc<Control>>>> = KVec::new();
}

/// Initialises [`NICS`]. Called once, first thing in module init.
pub(crate) fn init_registry() {
    // SAFETY: Called exactly once, from module init, before any user of `NICS`.
    unsafe { NICS.init() };
}

/// Returns the NIC of index `nic` and the number of index slots
/// (`num_nics`: one more than the highest index bound).
///
/// Indices are stable: a NIC keeps its index while bound, and an unbound
/// NIC's index is free for the next bind (lowest free first).
///
/// # Errors
///
/// - `ENODEV` if no NIC is bound at index `nic`.
pub(crate) fn lookup(nic: u32) -> Result<(Arc<Control>, u32)> {
    let nics = NICS.lock();
    // CAST: usize -> u32; at most a handful of NICs are ever bound.
    let count = nics.len() as u32;
    // CAST: u32 -> usize is lossless on every architecture Linux supports.
    let ctl = nics
        .get(nic as usize)
        .and_then(Option::as_ref)
        .ok_or(ENODEV)?
        .clone();
    Ok((ctl, count))
}

/// The bound NIC that has a port with net_device `dev`: the NIC, its
/// index and the port.
pub(crate) fn find_port(dev: DevId) -> Option<(Arc<Control>, u32, u32)> {
    let nics = NICS.lock();
    nics.iter().enumerate().find_map(|(i, c)| {
        let c = c.as_ref()?;
        let port = c.port_with(dev)?;
        // CAST: at most a handful of NICs.
        Some((c.clone(), i as u32, port))
    })
}

/// The zero-copy counters of a port's flows (`ethtool -S`: `zc_*`).
pub(crate) struct ZcStats {
    /// Flows attached now.
    pub(crate) flows: Atomic<u64>,
    /// Received bytes the NIC placed, consumed in order.
    pub(crate) rx_placed: Atomic<u64>,
    /// Received bytes the CPU copied into place (fallback, queued before
    /// the attach).
    pub(crate) rx_copied: Atomic<u64>,
    /// Of `rx_placed`, the bytes of small payloads of served sockets copied
    /// into their skbs instead of attached as fragments (`hdrq.rs`).
    pub(crate) rx_copybreak: Atomic<u64>,
    /// Sent bytes the NIC read from the region (merge sends).
    pub(crate) tx_merged: Atomic<u64>,
    /// Sent bytes of zero-copy sends the CPU copied (region released).
    pub(crate) tx_copied: Atomic<u64>,
    /// Moves of a flow's notify queue pair the NIC completed
    /// (`flow/steer.rs`).
    pub(crate) flow_moves: Atomic<u64>,
    /// Polls that stopped at an entry of a moving flow, to wait for the
    /// queue pair it left (`queues.rs`).
    pub(crate) flow_move_waits: Atomic<u64>,
    /// Moves whose wait timed out, their entries handed on unfenced
    /// (`flow/steer.rs`).
    pub(crate) flow_move_timeouts: Atomic<u64>,
}

/// What the query ioctl reports about a port, kept current by the port.
pub(crate) struct PortSnapshot {
    /// The port's net_device, set once it is registered. Published NICs'
    /// ports are registered: [`Control::shut_down`] withdraws the NIC before
    /// they are unregistered, so an id found here is never a freed device's.
    pub(crate) dev: SetOnce<DevId>,
    pub(crate) ifindex: Atomic<u32>,
    pub(crate) mtu: Atomic<u32>,
    pub(crate) link: Atomic<u32>,
    pub(crate) zc: ZcStats,
    /// The port's header/data split (`ethtool -G zn0 tcp-data-split`) is not
    /// off: new flows may be attached. See [`Control::flow_attach_allowed`].
    pub(crate) flows_allowed: Atomic<bool>,
    /// Where the port's queue pairs are serviced, and how far: what
    /// attached flows' notify queue pairs follow.
    pub(crate) qps: QpTrack,
}

impl PortSnapshot {
    const fn new() -> Self {
        Self {
            dev: SetOnce::new(),
            ifindex: Atomic::new(0),
            mtu: Atomic::new(0),
            link: Atomic::new(0),
            zc: ZcStats {
                flows: Atomic::new(0),
                rx_placed: Atomic::new(0),
                rx_copied: Atomic::new(0),
                rx_copybreak: Atomic::new(0),
                tx_merged: Atomic::new(0),
                tx_copied: Atomic::new(0),
                flow_moves: Atomic::new(0),
                flow_move_waits: Atomic::new(0),
                flow_move_timeouts: Atomic::new(0),
            },
            flows_allowed: Atomic::new(true),
            qps: QpTrack::new(),
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
    /// Queue pairs per port (`REG_MAX_QP` with `CAP_MULTI_QUEUE`, else 1).
    pub(crate) max_qp: u32,
}

/// How far the NIC got; decides what happens to memory it was handed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// Bound and answering commands.
    Running,
    /// Bound, but a command never completed: commands fail with `EIO`.
    Broken,
    /// Unbinding, the reset not done yet: the NIC may still use memory.
    Unbinding,
    /// The unbind's (or a failed probe's) reset completed: the NIC does no
    /// DMA any more, everything may be freed.
    Quiesced,
    /// That reset never completed: the NIC may still use what it was
    /// handed, which is therefore never freed.
    Lost,
}

/// The DMA-mapped pages of a registered region: unmapped, then given back
/// (and uncharged) when dropped.
pub(crate) enum RegionPages {
    /// The application's pages, pinned (unpinned after unmapping).
    User(MappedPages<PinnedPages>),
    /// Pages the driver allocated (a socket's receive ring), and their charge
    /// to the user's `locked_vm`, given back after the pages are unmapped
    /// (or when they become a spare ring, `mr.rs`).
    Kernel(MappedPages<KernelPages>, LockedCharge),
}

impl RegionPages {
    /// The DMA address of the `index`-th 4 KiB block of the pages.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if `index` is out of range or `dev` is not the mapping's device.
    pub(crate) fn dma_address_4k(&self, dev: &Device<Bound>, index: usize) -> Result<DmaAddress> {
        match self {
            Self::User(m) => m.dma_address_4k(dev, index),
            Self::Kernel(m, _) => m.dma_address_4k(dev, index),
        }
    }
}

/// Pages of a registered region and who they are charged to; freed (and
/// uncharged) only through [`Control::free_region`] or [`Control::release`].
pub(crate) struct Region {
    /// The DMA-mapped pages (unmapped, then unpinned or freed when dropped).
    pub(crate) mapped: RegionPages,
    /// Pages pinned, for the counters.
    pub(crate) npages: u64,
    /// The user whose MR Table share the region takes.
    pub(crate) uid: Kuid,
}

/// A flow attached to the NIC, as this layer and the ports see it: the NIC
/// layer keeps the Flow Table's entries and fails them at a reset, the
/// header queue (NAPI) delivers the entries the NIC wrote for them. The
/// zero-copy layer's flow implements it; this layer never names that type.
pub(crate) trait AttachedFlow: Send + Sync {
    /// The port the flow's connection runs on.
    fn port(&self) -> u32;

    /// The NIC's reset took the flow (`reset_done`: the NIC confirmed it
    /// does no DMA any more). Called once, in process context.
    fn nic_gone(&self, reset_done: bool);

    /// Delivers one header queue entry `raw` the NIC wrote for the flow to
    /// TCP (NAPI context): packets and bytes handed up. `zero` is the
    /// port's zero page.
    ///
    /// # Errors
    ///
    /// `EINVAL` for an entry that is not the flow's or does not match what
    /// the NIC placed for it, or other errnos of the delivery; the entry is
    /// dropped and counted by the caller.
    fn deliver_header(
        &self,
        ctx: &mut NapiContext<'_>,
        raw: &[u8; HDRQ_ENTRY_SIZE],
        zero: &Page,
    ) -> Result<(u64, u64)>;

    /// Whether the flow's entries on queue pair `qp` may be handed to TCP
    /// now (NAPI context): not while the flow moves to `qp` and the queue
    /// pair it left has not handed on its earlier entries
    /// (`qp_track.rs`). The caller then stops at the entry and polls again.
    fn may_deliver(&self, qp: u32) -> bool;
}

/// Memory a layer above handed to the NIC (a port's rings with their posted
/// buffers), held by [`Control::release_memory`] until the NIC confirmed it
/// is done with it; only dropped, or leaked.
pub(crate) trait NicMemory: Send {}

/// Memory the NIC was handed and has not confirmed it is done with.
pub(crate) enum Held {
    /// A block a command told the NIC to read: a `CMD_MR_REG` page list, a
    /// `CMD_FLOW_INSTALL` IPv6 address block.
    Block(#[expect(dead_code, reason = "owned, to be dropped")] Coherent<[u64]>),
    /// A registered region whose registration or invalidation did not
    /// complete.
    Region(Region),
    /// A port's rings (and posted buffers) whose queues did not confirm
    /// they stopped.
    Memory(#[expect(dead_code, reason = "owned, to be dropped")] KBox<dyn NicMemory>),
    /// The event queue.
    Events(#[expect(dead_code, reason = "owned, to be dropped")] Ring<16>),
}

/// The control plane of one bound NIC.
#[pin_data]
pub(crate) struct Control {
    /// The PCI function; bound while the state is `Running` or `Broken`.
    pdev: ARef<pci::Device>,
    regs: Arc<NicRegs>,
    pub(crate) identity: Identity,
    /// Index in [`NICS`] (`zeronic_*.nic`), set by [`Control::publish`].
    pub(crate) index: Atomic<u32>,
    /// MR Table entries one user may hold (`max_mrs_per_user`), 0 = all.
    pub(crate) mr_user_max: u32,
    /// Per-port facts for the query ioctl.
    pub(crate) ports: [PortSnapshot; regs::MAX_PORTS as usize],
    /// MR Table entries in use or possibly in use (a registration or
    /// invalidation the NIC did not complete keeps its entry), all files.
    pub(crate) mr_in_use: Atomic<u32>,
    /// Pages pinned by this NIC's regions, held ones included.
    pub(crate) pinned_pages: Atomic<u64>,
    /// Pages of held regions (in `pinned_pages`), pinned until a reset.
    pub(crate) held_pages: Atomic<u64>,
    /// Receive rings kept for the next socket attached by `TCP_ULP`.
    pub(crate) spares: Arc<SpareRings>,
    /// The command queue.
    #[pin]
    cmdq: CmdQueue,
    /// Attached flows by their index in the NIC's Flow Table, for the
    /// header queue (NAPI); taken in any context.
    #[pin]
    flows: SpinLockIrq<KVec<Option<Arc<dyn AttachedFlow>>>>,
    #[pin]
    inner: Mutex<Inner>,
    /// Notified (with [`Control::inner`]) when the unbind's reset ends the
    /// `Unbinding` state.
    #[pin]
    unbound: CondVar,
}

/// State behind [`Control::inner`].
struct Inner {
    state: State,
    /// Memory the NIC may still access; see [`Control::release`].
    held: KVec<Held>,
    /// MR Table entries held per user (only users holding some).
    shares: KVec<(Kuid, u32)>,
}

/// Never frees `value`, nor anything it owns: for memory a NIC may still
/// access. kmemleak is told the leak is deliberate, so it reports nothing.
fn leak<T>(value: T) {
    if let Some(b) = box_or_forget(value) {
        KBox::leak_on_purpose(b);
    }
}

/// Boxes `value`, without dropping it if the box cannot be had: then it is
/// forgotten (logged, and kmemleak may report it), because it may own
/// memory the NIC still addresses, and a leak is safer than a free.
fn box_or_forget<T>(value: T) -> Option<KBox<T>> {
    match KBox::<T>::new_uninit(GFP_KERNEL) {
        Ok(b) => Some(KBox::write(b, value)),
        Err(_) => {
            pr_err!("out of memory holding back memory the NIC may still access; leaking it\n");
            core::mem::forget(value);
            None
        }
    }
}

/// Command issuing rights, handed out by [`Control::with_bound`].
pub(crate) struct Commands<'a> {
    inner: &'a mut Inner,
    control: &'a Control,
}

impl Control {
    /// Allocates the command queues of a freshly reset NIC; they are enabled
    /// by [`Control::enable`].
    ///
    /// # Errors
    ///
    /// - `ENOMEM` if the command queue, the flow table, the spare rings or the `Control` cannot be allocated.
    pub(crate) fn new(
        pdev: &pci::Device<Bound>,
        regs: Arc<NicRegs>,
        identity: Identity,
        mr_user_max: u32,
    ) -> Result<Arc<Self>> {
        let dev: &Device<Bound> = pdev.as_ref();
        let cmdq = CmdQueue::new(dev, regs.clone())?;
        let mut flows = KVec::new();
        // CAST: u32 -> usize is lossless.
        flows.resize(identity.flow_capacity as usize, None, GFP_KERNEL)?;
        let pdev: &pci::Device = pdev;
        Arc::pin_init(
            try_pin_init!(Self {
                pdev: pdev.into(),
                regs,
                identity,
                index: Atomic::new(u32::MAX),
                mr_user_max,
                ports: [const { PortSnapshot::new() }; regs::MAX_PORTS as usize],
                mr_in_use: Atomic::new(0),
                pinned_pages: Atomic::new(0),
                held_pages: Atomic::new(0),
                spares: SpareRings::new()?,
                cmdq <- cmdq,
                flows <- new_spinlock_irq!(flows, "zeronic::control::flows"),
                inner <- new_mutex!(Inner {
                    state: State::Running,
                    held: KVec::new(),
                    shares: KVec::new(),
                }),
                unbound <- new_condvar!("zeronic::control::unbound"),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// Registers `flow` as the NIC's flow `hw_index`.
    ///
    /// # Errors
    ///
    /// `EIO` if the NIC named an index out of range or in use (it is
    /// broken); `ENODEV` if the NIC's reset after an unbind took the flows
    /// already: registered then, the flow and this `Control` would hold
    /// each other (each keeps an `Arc` of the other) with nobody left to
    /// fail the flow.
    pub(crate) fn add_flow(&self, hw_index: u32, flow: Arc<dyn AttachedFlow>) -> Result {
        {
            let mut flows = self.flows.lock();
            // CAST: u32 -> usize is lossless.
            match flows.get_mut(hw_index as usize) {
                Some(slot @ None) => {
                    if let Some(zc) = self.zc(flow.port()) {
                        zc.flows.add(1, Relaxed);
                    }
                    *slot = Some(flow.clone());
                }
                // Out of range, or an index in use: the NIC is broken.
                _ => return Err(EIO),
            }
        }
        // Checked after the insertion: `quiesced()` sets the state before
        // it takes the flows, so either it took this one (and fails it) or
        // this sees its state.
        if matches!(self.inner.lock().state, State::Quiesced | State::Lost) {
            self.remove_flow(hw_index, &*flow);
            return Err(ENODEV);
        }
        Ok(())
    }

    /// Unregisters `flow` (if it is the NIC's flow `hw_index`).
    pub(crate) fn remove_flow(&self, hw_index: u32, flow: &dyn AttachedFlow) {
        // The same flow: the same object (the vtable is not compared).
        let same = |f: &Arc<dyn AttachedFlow>| {
            core::ptr::addr_eq(Arc::as_ptr(f), flow as *const dyn AttachedFlow)
        };
        let old = {
            let mut flows = self.flows.lock();
            // CAST: u32 -> usize is lossless.
            match flows.get_mut(hw_index as usize) {
                Some(slot) if slot.as_ref().is_some_and(same) => slot.take(),
                _ => None,
            }
        };
        if old.is_some() {
            if let Some(zc) = self.zc(flow.port()) {
                zc.flows.fetch_sub(1, Relaxed);
            }
        }
        drop(old);
    }

    /// Flows attached to this NIC now.
    pub(crate) fn flows_in_use(&self) -> u32 {
        // CAST: at most the Flow Table's capacity.
        self.flows.lock().iter().filter(|f| f.is_some()).count() as u32
    }

    /// The zero-copy counters of `port` (of a flow of this NIC).
    pub(crate) fn zc(&self, port: u32) -> Option<&ZcStats> {
        self.port(port).map(|p| &p.zc)
    }

    /// What this layer keeps of port `port`, if the NIC has it.
    pub(crate) fn port(&self, port: u32) -> Option<&PortSnapshot> {
        // CAST: u32 -> usize is lossless.
        self.ports.get(port as usize)
    }

    /// The flow the NIC calls `hw_index` (header queue). Any context.
    pub(crate) fn flow(&self, hw_index: u32) -> Option<Arc<dyn AttachedFlow>> {
        // CAST: u32 -> usize is lossless.
        self.flows.lock().get(hw_index as usize)?.clone()
    }

    /// Port of this NIC whose net_device is `dev`.
    fn port_with(&self, dev: DevId) -> Option<u32> {
        (0..self.identity.ports).find(|&p| {
            // CAST: u32 -> usize; `p < MAX_PORTS`.
            self.ports[p as usize].dev.copy() == Some(dev)
        })
    }

    /// Enables the command queues (hardware spec §3).
    ///
    /// # Errors
    ///
    /// - `ENODEV`, `EIO`, `ETIMEDOUT`, `EINVAL` as [`CmdQueue::enable`].
    pub(crate) fn enable(&self) -> Result {
        self.cmdq.enable()
    }

    /// Consumes command completions (the `VEC_ASYNC` handler). Any context.
    pub(crate) fn reap(&self) {
        self.cmdq.reap();
    }

    /// Posts `cmd` without waiting; its completion goes to `on_done`. Any
    /// context. `Ok(false)` if the backlog is full: nothing was posted and
    /// `waiter` is called back once there is room ([`CmdQueue::submit_or_wait`]).
    ///
    /// # Errors
    ///
    /// - `ENODEV` once the NIC is broken or going away.
    /// - `ENOMEM`, `EINVAL` as [`CmdQueue::submit_or_wait`].
    pub(crate) fn submit_or_wait(
        &self,
        cmd: CmdEntry,
        on_done: Option<Arc<dyn CmdDone>>,
        waiter: &Arc<dyn CmdRoom>,
        waiting: &mut bool,
    ) -> Result<bool> {
        self.cmdq.submit_or_wait(cmd, on_done, waiter, waiting)
    }

    /// Has `waiter` called back once the backlog has room
    /// ([`CmdQueue::want_room`]).
    ///
    /// # Errors
    ///
    /// - `ENODEV`, `ENOMEM` as [`CmdQueue::want_room`].
    pub(crate) fn want_room(&self, waiter: &Arc<dyn CmdRoom>, waiting: &mut bool) -> Result {
        self.cmdq.want_room(waiter, waiting)
    }

    /// Adds this NIC to [`NICS`] at the lowest free index; `/dev/zeronic`
    /// files can use it from now on.
    ///
    /// # Errors
    ///
    /// - `ENOMEM` if the registry cannot grow.
    pub(crate) fn publish(self: &Arc<Self>) -> Result<u32> {
        let mut nics = NICS.lock();
        let free = nics.iter().position(Option::is_none);
        let index = match free {
            Some(i) => i,
            None => {
                nics.push(None, GFP_KERNEL)?;
                nics.len() - 1
            }
        };
        // CAST: usize -> u32; at most a handful of NICs are ever bound.
        self.index.store(index as u32, Relaxed);
        if let Some(slot) = nics.get_mut(index) {
            *slot = Some(self.clone());
        }
        Ok(index as u32)
    }

    /// Withdraws the NIC: removes it from [`NICS`] and stops commands, waiting
    /// for one in progress. Called at unbind (and on a failed probe), before
    /// the NIC is reset; memory released from now on is held until
    /// [`Control::quiesced`].
    pub(crate) fn shut_down(self: &Arc<Self>) {
        {
            let mut nics = NICS.lock();
            for slot in nics.iter_mut() {
                if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, self)) {
                    *slot = None;
                }
            }
            while nics.last().is_some_and(Option::is_none) {
                nics.pop();
            }
            if nics.is_empty() {
                // The registry is a static, never dropped: give its buffer
                // back now, or unloading the module would leak it.
                *nics = KVec::new();
            }
        }
        {
            let mut inner = self.inner.lock();
            inner.state = State::Unbinding;
            self.cmdq.close();
        }
        // Not registered with the NIC: nothing to wait for.
        self.spares.close();
    }

    /// Records the outcome of the reset that follows [`Control::shut_down`]:
    /// if the NIC confirmed it (`reset_done`), the command rings and every
    /// held piece of memory are freed now, and memory released later is
    /// freed at once; if not, all of it is leaked, now and later.
    pub(crate) fn quiesced(&self, reset_done: bool) {
        let (rings, held) = {
            let mut inner = self.inner.lock();
            inner.state = if reset_done {
                State::Quiesced
            } else {
                State::Lost
            };
            (self.cmdq.take_rings(), core::mem::take(&mut inner.held))
        };
        self.unbound.notify_all();
        // The NIC's flows are gone with its reset.
        let flows = core::mem::take(&mut *self.flows.lock());
        for flow in flows.into_iter().flatten() {
            if let Some(zc) = self.zc(flow.port()) {
                zc.flows.fetch_sub(1, Relaxed);
            }
            flow.nic_gone(reset_done);
        }
        if reset_done {
            drop(rings);
            for item in held {
                self.free(item);
            }
        } else {
            pr_err!(
                "NIC did not confirm its reset: leaking its rings and the memory of {} unconfirmed operations (and of every region released from now on), as the NIC may still access them\n",
                held.len()
            );
            if let Some((cmdq, cmdcq)) = rings {
                leak(cmdq);
                leak(cmdcq);
            }
            for item in held {
                leak(item);
            }
        }
    }

    /// Where port `port`'s queue pair `k` ends its header queue and RX
    /// completion queue now: what a flow that left it waits for
    /// ([`QpTrack::mark`]).
    ///
    /// # Errors
    ///
    /// - `ENODEV` if the NIC is gone.
    /// - `EINVAL` if `port` or `k` is out of range.
    pub(crate) fn qp_mark(&self, port: u32, k: u32) -> Result<Mark> {
        let snap = self.port(port).ok_or(EINVAL)?;
        snap.qps.mark(&self.regs, port, k)
    }

    /// Whether a new flow may be attached to port `port`: not while the
    /// port's header/data split is off (`ethtool -G zn0 tcp-data-split off`,
    /// `docs/uapi.md`).
    ///
    /// Flows attached before it was turned off are left alone; an attach
    /// that passed this check before is one of them.
    ///
    /// # Errors
    ///
    /// - `ENODEV` for a port the NIC does not have.
    /// - `EOPNOTSUPP` while the port's header/data split is off.
    pub(crate) fn flow_attach_allowed(&self, port: u32) -> Result {
        if port >= self.identity.ports {
            return Err(ENODEV);
        }
        // CAST: u32 -> usize; `port < ports <= MAX_PORTS`.
        let p = self.ports.get(port as usize).ok_or(ENODEV)?;
        if p.flows_allowed.load(Relaxed) {
            Ok(())
        } else {
            Err(EOPNOTSUPP)
        }
    }

    /// Waits for the outcome of the reset that follows [`Control::shut_down`]
    /// (process context, sleeps): `true` once it completed (the NIC does
    /// nothing any more), `false` if it failed or the NIC is not being
    /// unbound. Called by what needs the NIC's confirmation and found it
    /// unbinding: that reset is the only confirmation left.
    pub(crate) fn reset_confirmed(&self) -> bool {
        let mut inner = self.inner.lock();
        // The unbind that set `Unbinding` resets the NIC right after and
        // ends the state with [`Control::quiesced`] whatever the reset did,
        // within its own bounded wait for the reset: this wait is bounded
        // by that one.
        while inner.state == State::Unbinding {
            self.unbound.wait(&mut inner);
        }
        inner.state == State::Quiesced
    }

    /// Whether the NIC failed to confirm its unbind reset (see [`State::Lost`]).
    pub(crate) fn is_lost(&self) -> bool {
        self.inner.lock().state == State::Lost
    }

    /// Gives back memory the NIC has not confirmed it is done with: kept
    /// while the NIC is bound (freed once the unbind's reset completes),
    /// freed at once after a completed reset, leaked after a failed one.
    pub(crate) fn release(&self, item: Held) {
        let mut inner = self.inner.lock();
        match inner.state {
            State::Running | State::Broken | State::Unbinding => {
                Self::hold(self, &mut inner, item);
            }
            State::Quiesced => {
                drop(inner);
                // Never held, so not in `held_pages`.
                match item {
                    Held::Region(r) => self.free_region(r),
                    other => drop(other),
                }
            }
            State::Lost => {
                drop(inner);
                // Announced once, by `quiesced`.
                leak(item);
            }
        }
    }

    /// Gives back memory a layer above handed to the NIC, as
    /// [`Control::release`]; leaked (logged) if it cannot be boxed.
    pub(crate) fn release_memory<T: NicMemory + 'static>(&self, memory: T) {
        if let Some(b) = box_or_forget(memory) {
            self.release(Held::Memory(b));
        }
    }

    /// Adds `item` to the held list (counting a region's pages as held).
    /// If the list cannot grow the item is leaked (logged): released memory
    /// a device may still write is worse than a leak.
    fn hold(&self, inner: &mut Inner, item: Held) {
        if let Held::Region(r) = &item {
            self.held_pages.add(r.npages, Relaxed);
        }
        if inner.held.reserve(1, GFP_KERNEL).is_err() {
            pr_err!("out of memory holding back memory the NIC may still access; leaking it\n");
            leak(item);
            return;
        }
        // Cannot fail: room was reserved.
        let _ = inner.held.push(item, GFP_KERNEL);
    }

    /// Frees held memory once the NIC confirmed it is done with it.
    fn free(&self, item: Held) {
        match item {
            Held::Region(r) => {
                self.held_pages.fetch_sub(r.npages, Relaxed);
                self.free_region(r);
            }
            other => drop(other),
        }
    }

    /// Frees a region the NIC no longer uses: unmaps, unpins and uncharges
    /// its pages and gives its MR Table entry back to its user's share.
    pub(crate) fn free_region(&self, region: Region) {
        self.free_entry(region.uid);
        self.pinned_pages.fetch_sub(region.npages, Relaxed);
        drop(region.mapped);
    }

    /// Gives a region's MR Table entry back to `uid`'s share, once the NIC
    /// invalidated it (its pages may be given back later, `mr.rs`).
    pub(crate) fn free_entry(&self, uid: Kuid) {
        self.put_share(uid);
        self.mr_in_use.fetch_sub(1, Relaxed);
    }

    /// Takes one MR Table entry from `uid`'s share.
    ///
    /// # Errors
    ///
    /// - `ENOSPC` if the user holds `mr_user_max` entries already.
    /// - `ENOMEM` if the list of shares cannot grow.
    pub(crate) fn take_share(&self, uid: Kuid) -> Result {
        let mut inner = self.inner.lock();
        let max = self.mr_user_max;
        if let Some((_, n)) = inner.shares.iter_mut().find(|(u, _)| *u == uid) {
            if max != 0 && *n >= max {
                return Err(ENOSPC);
            }
            *n += 1;
            return Ok(());
        }
        inner.shares.push((uid, 1), GFP_KERNEL)?;
        Ok(())
    }

    /// Returns one MR Table entry to `uid`'s share.
    pub(crate) fn put_share(&self, uid: Kuid) {
        let mut inner = self.inner.lock();
        for (u, n) in inner.shares.iter_mut() {
            if *u == uid {
                *n = n.saturating_sub(1);
            }
        }
        inner.shares.retain(|(_, n)| *n != 0);
    }

    /// MR Table entries `uid` holds on this NIC.
    pub(crate) fn share_of(&self, uid: Kuid) -> u32 {
        let inner = self.inner.lock();
        inner
            .shares
            .iter()
            .find(|(u, _)| *u == uid)
            .map_or(0, |(_, n)| *n)
    }

    /// Runs `f` with the bound device and the right to issue commands.
    ///
    /// Process context (sleeps); holds the command mutex.
    ///
    /// # Errors
    ///
    /// - `ENODEV` once the NIC is being unbound.
    /// - `EIO` once the NIC stopped answering.
    /// - Any error `f` returns.
    pub(crate) fn with_bound<R>(
        &self,
        f: impl FnOnce(&Device<Bound>, &mut Commands<'_>) -> Result<R>,
    ) -> Result<R> {
        let mut inner = self.inner.lock();
        match inner.state {
            State::Running => {}
            State::Broken => return Err(EIO),
            State::Unbinding | State::Quiesced | State::Lost => return Err(ENODEV),
        }
        let dev: &Device = self.pdev.as_ref();
        // SAFETY: The state is `Running` and we hold `inner`. Unbinding runs
        // `shut_down` (leaving `Running` under `inner`) from the driver's
        // remove path, before the device is unbound; so the device stays
        // bound at least until this guard is released, which outlives the
        // reference.
        let dev = unsafe { dev.as_bound() };
        let mut cmds = Commands {
            inner: &mut inner,
            control: self,
        };
        f(dev, &mut cmds)
    }
}

impl Commands<'_> {
    /// Keeps `item` until the NIC is reset (see [`Control::release`]); the
    /// caller holds the command mutex, so this cannot go through `release`.
    pub(crate) fn hold(&mut self, item: Held) {
        self.control.hold(self.inner, item);
    }

    /// Executes `cmd` with `block` in coherent memory that the NIC reads
    /// while it executes the command (an IPv6 flow's or rule's addresses, an
    /// RSS context's table); `place` stores the memory's DMA address into
    /// the command. The memory is freed once the NIC completed the command,
    /// and held until its reset (see [`Commands::hold`]) if it did not.
    ///
    /// # Errors
    ///
    /// - `ENOMEM` if the memory cannot be allocated.
    /// - As [`Commands::exec`].
    pub(crate) fn exec_with_block<C: Command>(
        &mut self,
        dev: &Device<Bound>,
        cmd: &mut C,
        block: &[u8],
        place: impl FnOnce(&mut C, u64),
    ) -> Result<CmdCompletion> {
        let mut mem = CoherentBox::<[u64]>::zeroed_slice(dev, block.len().div_ceil(8), GFP_KERNEL)?;
        for (w, bytes) in mem.iter_mut().zip(block.chunks(8)) {
            let mut word = [0u8; 8];
            word[..bytes.len()].copy_from_slice(bytes);
            // The bytes in memory order, as the NIC reads them.
            *w = u64::from_ne_bytes(word);
        }
        let mem: Coherent<[u64]> = mem.into();
        place(cmd, mem.dma_address());
        let done = self.exec(cmd);
        if done.is_err() {
            // Posted but not completed: the NIC may still read it.
            self.hold(Held::Block(mem));
        }
        done
    }

    /// Executes one 64-byte command and returns its completion.
    ///
    /// The cookie is filled in here. A completion whose status is not `ST_OK`
    /// is returned as is (the caller maps it). If the NIC does not complete
    /// the command (it completes nothing for `cmd_timeout_ms`), the NIC is
    /// considered broken: it may still execute the command, so memory the
    /// command names must be held (see [`Commands::hold`]).
    ///
    /// # Errors
    ///
    /// - `EIO` if [`CmdQueue::wait`] fails (not posted, or not completed in time).
    pub(crate) fn exec<C: Command>(&mut self, cmd: &C) -> Result<CmdCompletion> {
        let opcode = C::OPCODE;
        match self.control.cmdq.wait(cmd.entry(), cmd_timeout_ms()) {
            Ok(done) => {
                if done.status != status::ST_OK {
                    pr_debug!("command {} failed with status {}\n", opcode, done.status);
                }
                Ok(done)
            }
            // Nothing was posted: the NIC is as it was.
            Err(ENOMEM) => Err(ENOMEM),
            Err(e) => {
                self.inner.state = State::Broken;
                pr_err!(
                    "NIC did not complete command {} ({:?}); commands disabled\n",
                    opcode,
                    e
                );
                Err(EIO)
            }
        }
    }
}

// SPDX-License-Identifier: GPL-2.0

//! One port of the NIC as a Linux network device (`zn0`, `zn1`, ...).
//!
//! [`Port`] is the net_device's private data: `open` allocates the rings of
//! each active queue pair for the current MTU, enables their queues on the
//! NIC and attaches their NAPIs (one per queue pair, numbered by it, on the
//! queue pair's RX vector), `stop` reverses it; `start_xmit` and the NAPI
//! poller live in [`Queues`]. RSS spreads received frames over the active
//! queue pairs (by default the indirection table round-robin, as
//! `ethtool_rxfh_indir_default()` does; `port_rss.rs` holds what ethtool
//! configures), n-tuple rules (`port_ntuple.rs`) steer before it, and every
//! frame carries the NIC's hash. Everything not
//! offloaded to the NIC's zero-copy units flows through here, so two ports on
//! the emulated wire form an ordinary Ethernet.

use kernel::{
    device::{
        Bound,
        Device, //
    },
    net::{
        dev::{
            ethtool::{
                ChannelCounts,
                Channels,
                Coalesce,
                CoalesceParams,
                FlowType,
                LinkSettings,
                NtupleRule,
                RingParamSupport,
                RingParams,
                RssContext,
                RssHashFunc,
                RssReport,
                RssRequest,
                RxhFields,
                TcpDataSplit, //
            },
            Features,
            NetDevice,
            NetDeviceOps,
            NetdevTx,
            QueueStatsRx,
            QueueStatsTx,
            RtnlLinkStats64,
            XmitSkb, //
        },
        napi::{
            self,
            Napi,
            QueueKind, //
        },
        netlink::ExtAck,
        skbuff::SkBuff,
    },
    new_mutex,
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
        Mutex, //
    },
};

use crate::{
    cmdq::status_errno,
    control::Control,
    ethtool::{
        self,
        PortConfig, //
    },
    flow::tx::SEND_OPS,
    hw::{
        net::{
            ETH_P_IPV4,
            ETH_P_IPV6, //
        },
        regs,
        status, //
    },
    nic_regs::{
        NicRegs,
        PortRegs,
        QueuePairRegs,
        Regs,
        VectorRegs, //
    },
    port_ntuple::{
        self,
        NtupleTable, //
    },
    port_rss::{
        self,
        RssConfig, //
    },
    queues::{
        merge_params,
        ring_geometry,
        ring_slots,
        Queues,
        RxRing,
        Stats,
        TxRing, //
    },
};

/// The NAPI and data path of every queue pair a port may have.
type QueuePairs = [Napi<Queues>; regs::MAX_QP as usize];

/// The rings of one queue pair.
type Rings = (TxRing, RxRing);

/// Private data of a port's net_device.
#[pin_data]
pub(crate) struct Port {
    /// Port number on the NIC.
    index: u32,
    /// The PCI function; bound while the net_device is registered.
    pdev: ARef<pci::Device>,
    regs: Arc<NicRegs>,
    control: Arc<Control>,
    /// What ethtool configured (ring sizes, moderation, channels); taken
    /// under RTNL only, never on the data path.
    #[pin]
    cfg: Mutex<PortConfig>,
    /// The n-tuple rules installed on the NIC (`ethtool -N`), which the NIC
    /// cannot report back; taken under RTNL only, never across a command.
    #[pin]
    ntuple: Mutex<NtupleTable>,
    /// Queue pairs the NIC serves on this port (`REG_MAX_QP`, 1 without
    /// `CAP_MULTI_QUEUE`); the net_device has as many TX and RX queues.
    max_qp: u32,
    /// Queue pairs with rings (0 while the port is down). Written under
    /// RTNL, read by the statistics callbacks.
    active: Atomic<u32>,
    /// The Linux IRQ of each queue pair's RX vector, reported with its NAPI.
    irqs: [Option<u32>; regs::MAX_QP as usize],
    /// The data path, one per queue pair (`max_qp` of them used); NAPI
    /// polls each.
    #[pin]
    qps: QueuePairs,
}

impl Port {
    /// Port `index` of a NIC with `nports` ports serving `max_qp` queue
    /// pairs per port, whose RX vectors have the Linux IRQs `irqs`.
    pub(crate) fn new(
        index: u32,
        nports: u32,
        max_qp: u32,
        irqs: [Option<u32>; regs::MAX_QP as usize],
        pdev: &pci::Device<Bound>,
        regs: Arc<NicRegs>,
        control: Arc<Control>,
        zero: Arc<Page>,
    ) -> impl PinInit<Self, Error> {
        let pdev: &pci::Device = pdev;
        let pdev: ARef<pci::Device> = pdev.into();
        let qps = {
            let regs = regs.clone();
            let control = control.clone();
            pin_init::pin_init_array_from_fn(move |qp| {
                // CAST: `qp < MAX_QP` (8).
                Napi::new(Queues::new(
                    index,
                    qp as u16,
                    nports,
                    regs.clone(),
                    control.clone(),
                    zero.clone(),
                ))
            })
        };
        let mut cfg = PortConfig::new();
        cfg.rss.fill_key();
        try_pin_init!(Self {
            cfg <- new_mutex!(cfg, "zeronic::port::cfg"),
            ntuple <- new_mutex!(NtupleTable::new(), "zeronic::port::ntuple"),
            qps <- qps,
            max_qp: max_qp.clamp(1, regs::MAX_QP),
            active: Atomic::new(0),
            irqs,
            index,
            pdev,
            regs,
            control,
        }? Error)
    }

    /// The NAPI and data path of queue pair `qp`, if the NIC serves it.
    pub(crate) fn queue_pair(&self, qp: u32) -> Option<&Napi<Queues>> {
        if qp >= self.max_qp {
            return None;
        }
        // CAST: u32 -> usize is lossless on every architecture Linux supports.
        self.qps.get(qp as usize)
    }

    /// Queue pair 0's data path, which every port has.
    fn qp0(&self) -> &Queues {
        self.qps[0].data()
    }

    /// The statistics of every queue pair the NIC serves, and whether it is
    /// active.
    fn all_stats(&self) -> impl Iterator<Item = (&Stats, bool)> {
        let active = self.active.load(Relaxed);
        self.qps
            .iter()
            .take(self.max_qp as usize)
            .enumerate()
            // CAST: `k < MAX_QP`.
            .map(move |(k, q)| (&q.data().stats, (k as u32) < active))
    }

    /// The bound PCI device, for allocations made while the port is open.
    fn bound(&self) -> &Device<Bound> {
        let dev: &Device = self.pdev.as_ref();
        // SAFETY: Only called from net_device callbacks that run under RTNL
        // while the net_device is registered (open, change_mtu, ethtool's
        // set_ringparam: the ethtool core finds the device under RTNL, and
        // unregistration unlists it under RTNL first). The driver
        // unregisters it in its remove path, before the PCI device unbinds,
        // and unregistration takes RTNL, so the device is bound for as long
        // as such a callback runs, which outlives the returned reference.
        unsafe { dev.as_bound() }
    }

    /// Base of this port's register block.
    /// The port's register block.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the index is not a port of the register map (never:
    ///   probe makes only ports below `regs::MAX_PORTS`).
    fn block(&self) -> Result<PortRegs> {
        PortRegs::new(self.index)
    }

    /// Brings the port up at `mtu`: each active queue pair's rings, NIC
    /// queues, RX buffers and NAPI, then RSS over them.
    ///
    /// Runs under RTNL (open, MTU change, ethtool), as the queue counts and
    /// NAPI links need.
    fn start(&self, dev: &NetDevice, mtu: u32) -> Result {
        let bdev = self.bound();
        // A copy: the mutex must not be taken in the register section below.
        let cfg = *self.cfg.lock();
        let n = cfg.queue_pairs(self.max_qp);
        let multi = self.control.identity.caps & regs::CAP_MULTI_QUEUE != 0;
        let tso = self.control.identity.caps & regs::CAP_PLAIN_TSO != 0;
        // CAST: `n <= MAX_QP` (8).
        let mut rings: KVec<Rings> = KVec::with_capacity(n as usize, GFP_KERNEL)?;
        for qp in 0..n {
            let block = QueuePairRegs::new(self.index, qp)?;
            let tx = TxRing::new(bdev, block, mtu, ring_slots(cfg.tx_slots, mtu), tso)?;
            let rx = RxRing::new(bdev, block, mtu, ring_slots(cfg.rx_slots, mtu))?;
            rings.push((tx, rx), GFP_KERNEL)?;
        }
        {
            let r = self.regs.get()?;
            let mac = dev.mac_addr();
            let b = self.block()?;
            r.set_port32::<{ regs::PORT_CTRL }>(b, 0)?;
            r.set_port32::<{ regs::PORT_MTU }>(b, mtu)?;
            r.set_port32::<{ regs::PORT_MAC_LO }>(
                b,
                u32::from_le_bytes([mac[0], mac[1], mac[2], mac[3]]),
            )?;
            r.set_port32::<{ regs::PORT_MAC_HI }>(b, u32::from_le_bytes([mac[4], mac[5], 0, 0]))?;
            if multi {
                r.set_port32::<{ regs::PORT_RSS_CTRL }>(b, 0)?;
                r.set_port32::<{ regs::PORT_NUM_QP }>(b, n)?;
            }
            self.moderate(&r, &cfg, mtu, n)?;
            r.set_port32::<{ regs::PORT_CTRL }>(b, regs::PORT_CTRL_ENABLE)?;
            r.doorbell(regs::DB_CMD)?;
        }
        // Each queue pair in the spec's order (§3, §14): its queues, then
        // its RX buffers.
        let enabled = rings.iter_mut().try_for_each(|(tx, rx)| {
            tx.txq.enable(&self.regs)?;
            tx.txcq.enable(&self.regs)?;
            rx.rxq.enable(&self.regs)?;
            rx.rxcq.enable(&self.regs)?;
            rx.hdrq.enable(&self.regs)?;
            rx.fill(&self.regs.get()?)
        });
        let steered = || -> Result {
            if multi {
                let r = self.regs.get()?;
                self.program_rss(&r, &cfg.rss, n)?;
                r.set_port32::<{ regs::PORT_RSS_CTRL }>(
                    self.block()?,
                    regs::RSS_CTRL_ENABLE | regs::RSS_CTRL_HASH,
                )?;
            }
            Ok(())
        };
        if let Err(e) = enabled.and_then(|()| steered()) {
            dev_err!(
                self.pdev.as_ref(),
                "port {}: bring-up failed: {:?}\n",
                self.index,
                e
            );
            self.quiesce(rings);
            return Err(e);
        }
        // SAFETY: `start` runs under RTNL (see above).
        if let Err(e) = unsafe { dev.set_real_num_queues(n, n) } {
            self.quiesce(rings);
            return Err(e);
        }
        // The queues are stopped and the NAPIs detached: nothing else holds
        // these locks.
        for (k, (tx, rx)) in (0u32..).zip(rings) {
            let Some(q) = self.queue_pair(k) else {
                // Never: `n <= max_qp`; the NIC may still use the rings.
                self.control.release_memory(tx);
                self.control.release_memory(rx);
                continue;
            };
            *q.data().tx.lock() = Some(tx);
            *q.data().rx.lock() = Some(rx);
            self.snapshot().qps.rings_made(k);
        }
        self.active.store(n, Relaxed);
        self.snapshot().qps.set_active(n);
        if let Err(e) = self.attach_napis(dev, n) {
            self.halt(dev);
            return Err(e);
        }
        let link = {
            let r = self.regs.get()?;
            for k in 0..n {
                if let Some(q) = self.queue_pair(k) {
                    q.data().mask_vectors(&r, false)?;
                }
            }
            r.doorbell(regs::DB_REARM)?;
            r.port32::<{ regs::PORT_LINK }>(self.block()?)? != 0
        };
        self.set_link(dev, link);
        self.snapshot().mtu.store(mtu, Relaxed);
        for k in 0..n {
            // CAST: `k < MAX_QP` (8).
            let k = k as u16;
            // A fresh ring has nothing in flight: BQL forgets what an
            // earlier one had (patch 0034; it takes the stack's TX queue
            // lock).
            let _ = dev.tx_reset_queue(k);
            let _ = dev.start_subqueue(k);
        }
        Ok(())
    }

    /// Attaches the NAPI of each of the first `n` queue pairs, with its
    /// persistent index (the queue pair), its IRQ and its queues, and
    /// enables it. Runs under RTNL.
    fn attach_napis(&self, dev: &NetDevice, n: u32) -> Result {
        for k in 0..n {
            let q = self.queue_pair(k).ok_or(EINVAL)?;
            q.add_config(dev, k)?;
            // CAST: u32 -> usize; `k < MAX_QP`.
            q.set_irq(self.irqs.get(k as usize).copied().flatten())?;
            // SAFETY: Runs under RTNL (`start`'s callers).
            unsafe {
                q.link_queue(QueueKind::Rx, k)?;
                q.link_queue(QueueKind::Tx, k)?;
            }
            q.enable()?;
        }
        Ok(())
    }

    /// Writes the port's RSS configuration for `n` active queue pairs: the
    /// key, the indirection table (the user's, or entry i to queue pair i
    /// mod `n`), and with `CAP_STEER_V2` the hash fields.
    /// Writes the table of RSS context `id` (1 to `RSS_CONTEXTS - 1`) to the
    /// NIC (`CMD_RSS_CTX_SET`), open or not: the NIC keeps it until its
    /// reset. Process context (sleeps).
    ///
    /// # Errors
    ///
    /// - `EOPNOTSUPP` on a NIC without `CAP_STEER_V2`.
    /// - `EINVAL` for a context ID out of range.
    /// - `ENOMEM`, `EIO`, `ENODEV` and the NIC's refusals as
    ///   [`Commands::exec_with_block`](crate::control::Commands::exec_with_block)
    ///   and [`status_errno`].
    fn set_rss_context(
        &self,
        id: u32,
        table: &[u8; port_rss::TABLE_SIZE],
        extack: &mut ExtAck<'_>,
    ) -> Result {
        if self.control.identity.caps & regs::CAP_STEER_V2 == 0 {
            extack.set_msg(c"the NIC has no RSS contexts");
            return Err(EOPNOTSUPP);
        }
        let mut cmd = port_rss::context_command(self.index, id)?;
        self.control.with_bound(|dev, cmds| {
            let done = cmds.exec_with_block(dev, &mut cmd, table, |c, addr| c.table = addr)?;
            match done.status {
                status::ST_OK => Ok(()),
                st => Err(status_errno(st)),
            }
        })
    }

    fn program_rss(&self, r: &Regs<'_>, rss: &RssConfig, n: u32) -> Result {
        let b = self.block()?;
        // Key byte i and table entry i at byte offset i of their part, as
        // 32-bit words.
        let word =
            |w: &[u8]| -> Result<u32> { Ok(u32::from_le_bytes(w.try_into().map_err(|_| EINVAL)?)) };
        for (i, w) in rss.key.chunks_exact(4).enumerate() {
            r.set_port_rss32(b, 4 * i, word(w)?)?;
        }
        let table_off = regs::PORT_RSS_TABLE - regs::PORT_RSS_KEY;
        for (i, w) in rss.table(n).chunks_exact(4).enumerate() {
            r.set_port_rss32(b, table_off + 4 * i, word(w)?)?;
        }
        if self.control.identity.caps & regs::CAP_STEER_V2 != 0 {
            r.set_port32::<{ regs::PORT_RSS_FIELDS }>(b, rss.fields)?;
        }
        Ok(())
    }

    /// Programs the port's interrupt moderation and header-entry coalescing
    /// limit from `cfg` (registers the NIC reads live, hardware spec §7, §9)
    /// for `n` queue pairs: queue pair 0's RX and TX vectors, and each other
    /// one's single vector, which its RX completions and header entries
    /// share with its TX completions, with the RX settings.
    fn moderate(&self, r: &Regs<'_>, cfg: &PortConfig, mtu: u32, n: u32) -> Result {
        for k in 0..n {
            let Some(q) = self.queue_pair(k) else {
                continue;
            };
            let (rx, tx) = q.data().vectors();
            let set = |v, itr: ethtool::Itr| -> Result {
                let v = VectorRegs::new(v)?;
                r.set_vector32::<{ regs::VEC_ITR_USECS }>(v, itr.usecs)?;
                r.set_vector32::<{ regs::VEC_ITR_ENTRIES }>(v, itr.entries)
            };
            set(rx, cfg.rx_itr)?;
            if tx != rx {
                set(tx, cfg.tx_itr)?;
            }
        }
        r.set_port32::<{ regs::PORT_COALESCE_BYTES }>(
            self.block()?,
            ethtool::cqe_bytes(cfg.cqe_frames, mtu),
        )
    }

    /// Rebuilds the rings of an open port after `cfg` changed from `old`
    /// (their sizes); if the new ones cannot be had, goes back to `old` and
    /// its rings.
    fn restart(&self, dev: &NetDevice, old: PortConfig) -> Result {
        if !self.is_open() {
            return Ok(());
        }
        self.halt(dev);
        let mtu = dev.mtu();
        if let Err(e) = self.start(dev, mtu) {
            *self.cfg.lock() = old;
            let _ = self.start(dev, mtu);
            return Err(e);
        }
        Ok(())
    }

    /// Stops the stack from transmitting on any of the port's queues.
    pub(crate) fn stop_queues(&self, dev: &NetDevice) {
        for k in 0..self.max_qp {
            // CAST: `k < MAX_QP` (8); the device has `max_qp` TX queues.
            let _ = dev.stop_subqueue(k as u16);
        }
    }

    /// Takes the port down: stops the queues and detaches the NAPIs, then
    /// the NIC's queues, and frees the rings once the NIC has let go of
    /// them. Runs under RTNL.
    fn halt(&self, dev: &NetDevice) {
        self.stop_queues(dev);
        self.set_link(dev, false);
        // Flows' notify queue pairs no longer follow the ones going.
        self.snapshot().qps.set_active(0);
        let n = self.active.load(Relaxed);
        if let Ok(r) = self.regs.get() {
            for k in 0..n {
                if let Some(q) = self.queue_pair(k) {
                    let _ = q.data().mask_vectors(&r, true);
                }
            }
        }
        // CAST: `n <= MAX_QP` (8).
        let mut rings: KVec<Rings> =
            KVec::with_capacity(n as usize, GFP_KERNEL).unwrap_or_default();
        for k in 0..n {
            let Some(q) = self.queue_pair(k) else {
                continue;
            };
            // SAFETY: Runs under RTNL (`halt`'s callers).
            unsafe {
                let _ = napi::unlink_queue(dev, QueueKind::Rx, k);
                let _ = napi::unlink_queue(dev, QueueKind::Tx, k);
            }
            // Disables it (waiting for a running poll) and detaches it.
            q.del();
            let tx = q.data().tx.lock().take();
            let rx = q.data().rx.lock().take();
            // Descriptors of the ring are never completed now: BQL's bytes
            // in flight go with it (and so does a stop of the queue by BQL).
            // CAST: `k < MAX_QP` (8).
            let _ = dev.tx_reset_queue(k as u16);
            match (tx, rx) {
                (Some(tx), Some(rx)) => {
                    if let Err((tx, rx)) = rings.push_within_capacity((tx, rx)).map_err(|e| e.0) {
                        // Only if the list could not be allocated: stopped
                        // on its own.
                        let mut one = KVec::new();
                        let _ = one.push_within_capacity((tx, rx));
                        self.quiesce(one);
                    }
                }
                (tx, rx) => {
                    // Never: they are installed and taken together.
                    if let Some(tx) = tx {
                        self.control.release_memory(tx);
                    }
                    if let Some(rx) = rx {
                        self.control.release_memory(rx);
                    }
                }
            }
        }
        self.active.store(0, Relaxed);
        self.quiesce(rings);
    }

    /// Disables the port and the queues of `rings` on the NIC, then gives
    /// the rings back: freed if the NIC confirmed every queue stopped,
    /// otherwise held by the control plane until the NIC is reset (or
    /// leaked if it never is), as the NIC may still write them.
    fn quiesce(&self, rings: KVec<Rings>) {
        let release = |rings: KVec<Rings>| {
            for (tx, rx) in rings {
                self.control.release_memory(tx);
                self.control.release_memory(rx);
            }
        };
        if self.control.is_lost() {
            // Its reset already went unanswered: waiting for each queue
            // would only add timeouts before the same outcome.
            release(rings);
            return;
        }
        // Steer nothing more to the queue pairs, then stop them (§14).
        if let (Ok(r), Ok(b)) = (self.regs.get(), self.block()) {
            if self.control.identity.caps & regs::CAP_MULTI_QUEUE != 0 {
                let _ = r.set_port32::<{ regs::PORT_RSS_CTRL }>(b, 0);
                let _ = r.set_port32::<{ regs::PORT_NUM_QP }>(b, 1);
            }
            let _ = r.doorbell(regs::DB_CMD);
        }
        // Every queue is asked to stop, whatever the others answer.
        let mut failed = None;
        for (tx, rx) in rings.iter() {
            for res in [
                tx.txq.disable(&self.regs),
                tx.txcq.disable(&self.regs),
                rx.rxq.disable(&self.regs),
                rx.rxcq.disable(&self.regs),
                rx.hdrq.disable(&self.regs),
            ] {
                if let Err(e) = res {
                    failed = Some(e);
                }
            }
        }
        if let Ok(r) = self.regs.get() {
            if let Ok(b) = self.block() {
                let _ = r.set_port32::<{ regs::PORT_CTRL }>(b, 0);
            }
            let _ = r.doorbell(regs::DB_CMD);
        }
        if let Some(e) = failed {
            dev_warn!(
                self.pdev.as_ref(),
                "port {}: queues did not confirm they stopped ({:?}); their rings are held until the NIC is reset\n",
                self.index,
                e
            );
            release(rings);
        }
    }

    /// Sets the carrier and the query snapshot.
    pub(crate) fn set_link(&self, dev: &NetDevice, up: bool) {
        if up {
            dev.carrier_on();
        } else {
            dev.carrier_off();
        }
        self.snapshot().link.store(u32::from(up), Relaxed);
    }

    fn snapshot(&self) -> &crate::control::PortSnapshot {
        // CAST: u32 -> usize; `index < MAX_PORTS`, checked at probe.
        &self.control.ports[self.index as usize]
    }

    /// Whether the port is open (its rings exist).
    fn is_open(&self) -> bool {
        self.qp0().tx.lock().is_some()
    }
}

#[vtable]
impl NetDeviceOps for Port {
    fn open(dev: &NetDevice, this: Pin<&Self>) -> Result {
        this.start(dev, dev.mtu())
    }

    fn stop(dev: &NetDevice, this: Pin<&Self>) -> Result {
        this.halt(dev);
        Ok(())
    }

    fn start_xmit<'x>(dev: &NetDevice, this: Pin<&Self>, skb: XmitSkb<'x>) -> NetdevTx<'x> {
        // The stack picks a queue below `real_num_tx_queues`, which only
        // shrinks with the port down; a stale one finds no ring and drops.
        match this.queue_pair(u32::from(skb.queue_mapping())) {
            Some(q) => q.data().xmit(dev, skb),
            None => {
                this.qp0().stats.tx_dropped.fetch_add(1, Relaxed);
                NetdevTx::Ok
            }
        }
    }

    /// ZeroNIC sends whose region is registered go out as scatter-gather
    /// merge sends (TSO by the NIC), if all of the skb's payload is the
    /// send's (not so when TCP put bytes written before the attach in front
    /// of a send's first ones). Every other skb is copied (`queues.rs`),
    /// fragments included: a TCP/IPv4 GSO skb of at most `MAX_TSO_FRAME`
    /// bytes as one plain TSO send the NIC segments (if it has
    /// `CAP_PLAIN_TSO`; a VLAN device's skb carries its tag out of band
    /// here, `skb->protocol` is still IPv4, and the NIC segments the tagged
    /// frame), a TCP/IPv6 one likewise if the NIC also has `CAP_IPV6`
    /// (hardware spec §15: without extension headers, which TCP's own
    /// segments never carry), any other GSO skb segmented by the stack
    /// first.
    fn features_check(
        _dev: &NetDevice,
        this: Pin<&Self>,
        skb: &SkBuff,
        features: Features,
    ) -> Features {
        let merge = SEND_OPS
            .lookup(skb)
            .is_some_and(|wr| wr.mr.valid.load(Relaxed) && merge_params(skb, wr).is_some());
        let caps = this.control.identity.caps;
        let plain_tso = || {
            let family = match skb.protocol() {
                ETH_P_IPV4 => true,
                ETH_P_IPV6 => caps & regs::CAP_IPV6 != 0,
                _ => false,
            };
            caps & regs::CAP_PLAIN_TSO != 0 && family && skb.len() <= regs::MAX_TSO_FRAME
        };
        if merge || !skb.is_gso() || plain_tso() {
            features
        } else {
            Features::from_bits(features.bits() & !Features::GSO_MASK.bits())
        }
    }

    fn get_stats64(_dev: &NetDevice, this: Pin<&Self>, stats: &mut RtnlLinkStats64<'_>) {
        let sum = |f: fn(&Stats) -> &Atomic<u64>| {
            this.all_stats()
                .map(|(s, _)| f(s).load(Relaxed))
                .fold(0u64, u64::wrapping_add)
        };
        stats.set_rx_packets(sum(|s| &s.rx_packets));
        stats.set_rx_bytes(sum(|s| &s.rx_bytes));
        stats.set_rx_dropped(sum(|s| &s.rx_dropped));
        stats.set_rx_errors(sum(|s| &s.rx_errors));
        stats.set_tx_packets(sum(|s| &s.tx_packets));
        stats.set_tx_bytes(sum(|s| &s.tx_bytes));
        stats.set_tx_dropped(sum(|s| &s.tx_dropped));
        stats.set_tx_errors(sum(|s| &s.tx_errors));
        // Frames the NIC dropped for lack of RX buffers, from its own counter.
        if let Ok(r) = this.regs.get() {
            let missed = this
                .block()
                .and_then(|b| r.port_stat(b, regs::PSTAT_RX_NO_BUF));
            if let Ok(missed) = missed {
                stats.set_rx_missed_errors(missed);
            }
        }
    }

    const ETHTOOL_STAT_NAMES: &'static [&'static CStr] = &crate::port_stats::NAMES;

    fn ethtool_stats(_dev: &NetDevice, this: Pin<&Self>, values: &mut [u64]) {
        // An unbound NIC leaves them zero.
        if let Ok(r) = this.regs.get() {
            let _ = crate::port_stats::read_hw(&r, this.index, values);
        }
        let qps = this.qps.iter().take(this.max_qp as usize);
        crate::port_stats::read_queues(qps.map(|q| &q.data().stats), values);
        crate::port_stats::read_zc(&this.snapshot().zc, &this.control.spares, values);
    }

    fn get_channels(_dev: &NetDevice, this: Pin<&Self>, channels: &mut Channels) {
        let n = this.cfg.lock().queue_pairs(this.max_qp);
        *channels = ethtool::channels(n, this.max_qp);
    }

    fn set_channels(dev: &NetDevice, this: Pin<&Self>, counts: &ChannelCounts) -> Result {
        let n = ethtool::set_channels(counts)?;
        let old = {
            let mut cfg = this.cfg.lock();
            let old = *cfg;
            cfg.combined = Some(n);
            old
        };
        if old.queue_pairs(this.max_qp) != n {
            this.restart(dev, old)?;
        }
        Ok(())
    }

    const SUPPORTED_RING_PARAMS: RingParamSupport = ethtool::RING_PARAMS;

    fn get_ringparam(dev: &NetDevice, this: Pin<&Self>, p: &mut RingParams) {
        let mtu = dev.mtu();
        let cfg = *this.cfg.lock();
        p.rx_max = ethtool::ring_max(mtu);
        p.tx_max = p.rx_max;
        p.rx = ring_slots(cfg.rx_slots, mtu);
        p.tx = ring_slots(cfg.tx_slots, mtu);
        p.rx_buf_len = ring_geometry(mtu).0;
        // Unconfigured means on: flows may be attached, as before the knob.
        p.tcp_data_split = if this.snapshot().flows_allowed.load(Relaxed) {
            TcpDataSplit::Enabled
        } else {
            TcpDataSplit::Disabled
        };
        // The NIC places every payload byte of a flow, whatever its size.
        p.hds_thresh = 0;
        p.hds_thresh_max = 0;
    }

    fn set_ringparam(
        dev: &NetDevice,
        this: Pin<&Self>,
        p: &RingParams,
        extack: &mut ExtAck<'_>,
    ) -> Result {
        let rx = ethtool::ring_size(p.rx, extack)?;
        let tx = ethtool::ring_size(p.tx, extack)?;
        let mtu = dev.mtu();
        let old = {
            let mut cfg = this.cfg.lock();
            let old = *cfg;
            // A size equal to the MTU's default keeps following the MTU.
            if rx != ring_slots(old.rx_slots, mtu) {
                cfg.rx_slots = Some(rx);
            }
            if tx != ring_slots(old.tx_slots, mtu) {
                cfg.tx_slots = Some(tx);
            }
            old
        };
        if (ring_slots(old.rx_slots, mtu), ring_slots(old.tx_slots, mtu)) != (rx, tx) {
            this.restart(dev, old)?;
        }
        // Attached flows are left alone; `Control::flow_attach_allowed()`
        // refuses new ones while it is off.
        let allowed = p.tcp_data_split != TcpDataSplit::Disabled;
        this.snapshot().flows_allowed.store(allowed, Relaxed);
        Ok(())
    }

    const SUPPORTED_COALESCE_PARAMS: CoalesceParams = ethtool::COALESCE_PARAMS;

    fn get_coalesce(
        dev: &NetDevice,
        this: Pin<&Self>,
        c: &mut Coalesce,
        _extack: &mut ExtAck<'_>,
    ) -> Result {
        *c = ethtool::coalesce(&this.cfg.lock(), dev.mtu());
        Ok(())
    }

    fn set_coalesce(
        dev: &NetDevice,
        this: Pin<&Self>,
        c: &Coalesce,
        extack: &mut ExtAck<'_>,
    ) -> Result {
        let mut cfg = this.cfg.lock();
        let new = ethtool::set_coalesce(&cfg, c, dev.mtu(), extack)?;
        if this.is_open() {
            // Live registers; a closed port gets them when it opens.
            let n = this.active.load(Relaxed);
            this.moderate(&this.regs.get()?, &new, dev.mtu(), n)?;
        }
        *cfg = new;
        Ok(())
    }

    fn rx_ring_count(_dev: &NetDevice, this: Pin<&Self>) -> u32 {
        // The active queue pairs while open, those it opens with while down.
        this.cfg.lock().queue_pairs(this.max_qp)
    }

    const RSS_INDIR_SIZE: u32 = regs::RSS_TABLE_SIZE;
    // CAST: `RSS_KEY_LEN` is 40.
    const RSS_KEY_SIZE: u32 = port_rss::KEY_SIZE as u32;

    fn get_rxfh(_dev: &NetDevice, this: Pin<&Self>, rss: &mut RssReport<'_>) -> Result {
        let cfg = this.cfg.lock();
        let table = cfg.rss.table(cfg.queue_pairs(this.max_qp));
        if let Some(indir) = rss.indir.as_deref_mut() {
            for (e, &q) in indir.iter_mut().zip(table.iter()) {
                *e = u32::from(q);
            }
        }
        if let Some(key) = rss.key.as_deref_mut() {
            for (k, &b) in key.iter_mut().zip(cfg.rss.key.iter()) {
                *k = b;
            }
        }
        rss.hfunc = Some(RssHashFunc::Toeplitz);
        Ok(())
    }

    fn set_rxfh(
        _dev: &NetDevice,
        this: Pin<&Self>,
        req: &RssRequest<'_>,
        extack: &mut ExtAck<'_>,
    ) -> Result {
        if this.control.identity.caps & regs::CAP_MULTI_QUEUE == 0 {
            extack.set_msg(c"the NIC has no RSS");
            return Err(EOPNOTSUPP);
        }
        let mut cfg = this.cfg.lock();
        let n = cfg.queue_pairs(this.max_qp);
        let new = port_rss::set_rxfh(&cfg.rss, req, n, extack)?;
        if this.is_open() {
            // Live registers; a closed port gets them when it opens.
            this.program_rss(&this.regs.get()?, &new, n)?;
        }
        cfg.rss = new;
        Ok(())
    }

    const RSS_CONTEXTS: u32 = regs::RSS_CONTEXTS;

    fn create_rxfh_context(
        _dev: &NetDevice,
        this: Pin<&Self>,
        id: u32,
        ctx: &mut RssContext<'_>,
        req: &RssRequest<'_>,
        extack: &mut ExtAck<'_>,
    ) -> Result {
        let n = this.cfg.lock().queue_pairs(this.max_qp);
        let table = match req.indir {
            Some(indir) => port_rss::table_of(indir, n, extack)?,
            None => {
                // The default spread; the core keeps what the driver used.
                let table = port_rss::default_table(n);
                for (e, &q) in ctx.indir.iter_mut().zip(table.iter()) {
                    *e = u32::from(q);
                }
                table
            }
        };
        this.set_rss_context(id, &table, extack)
    }

    fn modify_rxfh_context(
        _dev: &NetDevice,
        this: Pin<&Self>,
        id: u32,
        ctx: &RssContext<'_>,
        req: &RssRequest<'_>,
        extack: &mut ExtAck<'_>,
    ) -> Result {
        let n = this.cfg.lock().queue_pairs(this.max_qp);
        let table = port_rss::table_of(req.indir.unwrap_or(ctx.indir), n, extack)?;
        this.set_rss_context(id, &table, extack)
    }

    fn remove_rxfh_context(
        _dev: &NetDevice,
        this: Pin<&Self>,
        id: u32,
        extack: &mut ExtAck<'_>,
    ) -> Result {
        // Back to the reset value, all queue pair 0; no rule names the
        // context (the core checked).
        this.set_rss_context(id, &[0; port_rss::TABLE_SIZE], extack)
    }

    fn get_rxfh_fields(_dev: &NetDevice, this: Pin<&Self>, flow: FlowType) -> Result<RxhFields> {
        if this.control.identity.caps & regs::CAP_STEER_V2 == 0 {
            return port_rss::fixed_fields(flow);
        }
        port_rss::get_fields(this.cfg.lock().rss.fields, flow)
    }

    fn set_rxfh_fields(
        _dev: &NetDevice,
        this: Pin<&Self>,
        flow: FlowType,
        fields: RxhFields,
        extack: &mut ExtAck<'_>,
    ) -> Result {
        if this.control.identity.caps & regs::CAP_STEER_V2 == 0 {
            extack.set_msg(c"the NIC's hash fields are fixed (no CAP_STEER_V2)");
            return Err(EOPNOTSUPP);
        }
        let mut cfg = this.cfg.lock();
        let new = port_rss::set_fields(cfg.rss.fields, flow, fields, extack)?;
        if this.is_open() {
            this.regs
                .get()?
                .set_port32::<{ regs::PORT_RSS_FIELDS }>(this.block()?, new)?;
        }
        cfg.rss.fields = new;
        Ok(())
    }

    const NTUPLE_RULES: u32 = regs::NTUPLE_RULES;

    fn ntuple_count(_dev: &NetDevice, this: Pin<&Self>) -> u32 {
        this.ntuple.lock().count()
    }

    fn ntuple_get(_dev: &NetDevice, this: Pin<&Self>, location: u32) -> Result<NtupleRule> {
        this.ntuple.lock().get(location)
    }

    fn ntuple_locations(_dev: &NetDevice, this: Pin<&Self>, locs: &mut [u32]) -> Result<usize> {
        this.ntuple.lock().locations(locs)
    }

    fn ntuple_insert(dev: &NetDevice, this: Pin<&Self>, rule: &NtupleRule) -> Result {
        if !dev.features().contains(ethtool::NTUPLE) {
            return Err(EOPNOTSUPP);
        }
        let n = this.cfg.lock().queue_pairs(this.max_qp);
        let caps = this.control.identity.caps;
        let (cmd, addr6) = port_ntuple::rule_command(this.index, rule, n, caps)?;
        // RTNL serialises every change of the table: no other one can come
        // between the command and the record, and the mutex is not held
        // while the command waits for the NIC.
        port_ntuple::install(&this.control, cmd, addr6)?;
        this.ntuple.lock().set(*rule)
    }

    fn ntuple_delete(_dev: &NetDevice, this: Pin<&Self>, location: u32) -> Result {
        // Refused before the NIC is asked: the NIC has what the table has.
        this.ntuple.lock().get(location)?;
        port_ntuple::clear(&this.control, this.index, location)?;
        this.ntuple.lock().remove(location);
        Ok(())
    }

    fn get_link_ksettings(
        _dev: &NetDevice,
        _this: Pin<&Self>,
        settings: &mut LinkSettings,
    ) -> Result {
        *settings = ethtool::link_settings();
        Ok(())
    }

    fn queue_stats_rx(_dev: &NetDevice, this: Pin<&Self>, queue: u32, q: &mut QueueStatsRx<'_>) {
        let Some(qp) = this.queue_pair(queue) else {
            return;
        };
        let hw = this.regs.get().ok();
        QueueCounts::read(&this, queue, &qp.data().stats, hw.as_ref()).write_rx(q);
    }

    fn queue_stats_tx(_dev: &NetDevice, this: Pin<&Self>, queue: u32, q: &mut QueueStatsTx<'_>) {
        let Some(qp) = this.queue_pair(queue) else {
            return;
        };
        let hw = this.regs.get().ok();
        QueueCounts::read(&this, queue, &qp.data().stats, hw.as_ref()).write_tx(q);
    }

    fn base_stats(
        _dev: &NetDevice,
        this: Pin<&Self>,
        rx: &mut QueueStatsRx<'_>,
        tx: &mut QueueStatsTx<'_>,
    ) {
        // The counters of queue pairs that are not active now (the core
        // sums the active queues' itself): each queue pair keeps its counts
        // across ifdown and `ethtool -L`, so nothing is counted outside
        // them. Zero marks each statistic the device total is complete for.
        let mut base = QueueCounts::default();
        let hw = this.regs.get().ok();
        for (k, (stats, active)) in (0u32..).zip(this.all_stats()) {
            if !active {
                base.add(&QueueCounts::read(&this, k, stats, hw.as_ref()));
            }
        }
        base.write_rx(rx);
        base.write_tx(tx);
    }

    fn change_mtu(dev: &NetDevice, this: Pin<&Self>, new_mtu: u32) -> Result {
        if this.is_open() {
            // Buffers are sized for the MTU: rebuild the rings.
            this.halt(dev);
            if let Err(e) = this.start(dev, new_mtu) {
                // Keep the interface usable at the MTU it had.
                let _ = this.start(dev, dev.mtu());
                return Err(e);
            }
        }
        this.snapshot().mtu.store(new_mtu, Relaxed);
        Ok(())
    }
}

/// The hardware's drops of queue pair `qp` of `port`: frames it had no RX
/// buffer or header-queue slot for (`QSTAT_RX_DROPS`), then those it
/// dropped before steering, counted for the port and reported with queue
/// pair 0 (malformed frames, bad checksums of flows), and the TX drops for
/// want of link (queue pair 0 likewise).
struct HwDrops {
    rx_overruns: u64,
    rx_port: u64,
    tx_no_link: u64,
}

impl HwDrops {
    fn read(port: &Port, qp: u32, r: Option<&Regs<'_>>) -> Self {
        let Some(r) = r else {
            return Self {
                rx_overruns: 0,
                rx_port: 0,
                tx_no_link: 0,
            };
        };
        let pstat = |slot| crate::port_stats::hw(r, port.index, slot);
        let rx_overruns = if port.control.identity.caps & regs::CAP_MULTI_QUEUE != 0 {
            QueuePairRegs::new(port.index, qp)
                .and_then(|b| r.qp_stat(b, regs::QSTAT_RX_DROPS))
                .unwrap_or(0)
        } else {
            pstat(regs::PSTAT_RX_NO_BUF).saturating_add(pstat(regs::PSTAT_RX_HDRQ_FULL))
        };
        let (rx_port, tx_no_link) = if qp == 0 {
            (
                pstat(regs::PSTAT_RX_MALFORMED).saturating_add(pstat(regs::PSTAT_RX_CSUM_ERR)),
                pstat(regs::PSTAT_TX_NO_LINK),
            )
        } else {
            (0, 0)
        };
        Self {
            rx_overruns,
            rx_port,
            tx_no_link,
        }
    }
}

/// A queue pair's counters as netdev netlink's per-queue statistics report
/// them, in the order `write_rx` and `write_tx` set them: one list for a
/// queue's statistics and for the base statistics, which add up those of
/// the inactive queue pairs.
#[derive(Default)]
struct QueueCounts {
    rx: [u64; 8],
    tx: [u64; 11],
}

impl QueueCounts {
    /// The counters of queue pair `qp` of `port` (`s` its driver counters,
    /// `r` the NIC's registers unless it is gone).
    fn read(port: &Port, qp: u32, s: &Stats, r: Option<&Regs<'_>>) -> Self {
        let hw = HwDrops::read(port, qp, r);
        let errors = s.tx_errors.load(Relaxed);
        Self {
            rx: [
                s.rx_packets.load(Relaxed),
                s.rx_bytes.load(Relaxed),
                s.rx_dropped.load(Relaxed),
                s.rx_csum_unnecessary.load(Relaxed),
                s.rx_csum_none.load(Relaxed),
                s.rx_csum_bad.load(Relaxed),
                hw.rx_overruns,
                hw.rx_overruns.saturating_add(hw.rx_port),
            ],
            tx: [
                s.tx_packets.load(Relaxed),
                s.tx_bytes.load(Relaxed),
                s.tx_needs_csum.load(Relaxed),
                s.tx_csum_none.load(Relaxed),
                s.tx_stop.load(Relaxed),
                s.tx_wake.load(Relaxed),
                s.tx_tso.load(Relaxed),
                s.tx_tso_bytes.load(Relaxed),
                s.tx_tso_frames.load(Relaxed),
                // Descriptors the NIC refused, and frames it dropped for
                // want of link.
                errors,
                errors.saturating_add(hw.tx_no_link),
            ],
        }
    }

    /// Adds `other`'s counters to these.
    fn add(&mut self, other: &Self) {
        for (a, b) in self.rx.iter_mut().zip(other.rx) {
            *a = a.wrapping_add(b);
        }
        for (a, b) in self.tx.iter_mut().zip(other.tx) {
            *a = a.wrapping_add(b);
        }
    }

    fn write_rx(&self, rx: &mut QueueStatsRx<'_>) {
        let [packets, bytes, alloc_fail, unnecessary, none, bad, overruns, drops] = self.rx;
        rx.set_packets(packets);
        rx.set_bytes(bytes);
        rx.set_alloc_fail(alloc_fail);
        rx.set_csum_unnecessary(unnecessary);
        rx.set_csum_none(none);
        rx.set_csum_bad(bad);
        rx.set_hw_drop_overruns(overruns);
        rx.set_hw_drops(drops);
    }

    fn write_tx(&self, tx: &mut QueueStatsTx<'_>) {
        let [packets, bytes, needs, none, stop, wake, gso, gso_bytes, wire, errors, drops] =
            self.tx;
        tx.set_packets(packets);
        tx.set_bytes(bytes);
        tx.set_needs_csum(needs);
        tx.set_csum_none(none);
        tx.set_stop(stop);
        tx.set_wake(wake);
        tx.set_hw_gso_packets(gso);
        tx.set_hw_gso_bytes(gso_bytes);
        tx.set_hw_gso_wire_packets(wire);
        tx.set_hw_drop_errors(errors);
        tx.set_hw_drops(drops);
    }
}

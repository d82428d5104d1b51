// SPDX-License-Identifier: GPL-2.0

//! One port of the NIC as a Linux network device (`zn0`, `zn1`, ...).
//!
//! [`Port`] is the net_device's private data: `open` allocates the rings for
//! the current MTU and enables the port's queues on the NIC, `stop` reverses
//! it, `start_xmit` and the NAPI poller live in [`Queues`]. Everything not
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
                LinkSettings,
                RingParamSupport,
                RingParams,
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
        napi::Napi,
        netlink::ExtAck,
        skbuff::SkBuff,
    },
    new_mutex,
    page::Page,
    pci,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::Relaxed,
        Arc,
        Mutex, //
    },
};

use crate::{
    control::Control,
    ethtool::{
        self,
        PortConfig, //
    },
    flow::tx::SEND_OPS,
    hw::{
        net::ETH_P_IPV4,
        regs, //
    },
    nic_regs::{
        NicRegs,
        PortRegs,
        Regs,
        VectorRegs, //
    },
    queues::{
        merge_params,
        ring_geometry,
        ring_slots,
        Queues,
        RxRing,
        TxRing, //
    },
};

/// Private data of a port's net_device.
#[pin_data]
pub(crate) struct Port {
    /// Port number on the NIC.
    index: u32,
    /// The PCI function; bound while the net_device is registered.
    pdev: ARef<pci::Device>,
    regs: Arc<NicRegs>,
    control: Arc<Control>,
    /// What ethtool configured (ring sizes, moderation); taken under RTNL
    /// only, never on the data path.
    #[pin]
    cfg: Mutex<PortConfig>,
    /// The data path; NAPI polls it.
    #[pin]
    pub(crate) napi: Napi<Queues>,
}

impl Port {
    pub(crate) fn new(
        index: u32,
        pdev: &pci::Device<Bound>,
        regs: Arc<NicRegs>,
        control: Arc<Control>,
        zero: Page,
    ) -> impl PinInit<Self, Error> {
        let pdev: &pci::Device = pdev;
        let pdev: ARef<pci::Device> = pdev.into();
        try_pin_init!(Self {
            cfg <- new_mutex!(PortConfig::new(), "zeronic::port::cfg"),
            napi <- Napi::new(Queues::new(index, regs.clone(), control.clone(), zero)),
            index,
            pdev,
            regs,
            control,
        }? Error)
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

    /// Brings the port up at `mtu`: rings, NIC queues, RX buffers, NAPI.
    fn start(&self, dev: &NetDevice, mtu: u32) -> Result {
        let bdev = self.bound();
        // A copy: the mutex must not be taken in the register section below.
        let cfg = *self.cfg.lock();
        let tso = self.control.identity.caps & regs::CAP_PLAIN_TSO != 0;
        let tx = TxRing::new(bdev, self.index, mtu, ring_slots(cfg.tx_slots, mtu), tso)?;
        let mut rx = RxRing::new(bdev, self.index, mtu, ring_slots(cfg.rx_slots, mtu))?;
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
            self.moderate(&r, &cfg, mtu)?;
            r.set_port32::<{ regs::PORT_CTRL }>(b, regs::PORT_CTRL_ENABLE)?;
            r.doorbell(regs::DB_CMD)?;
        }
        let enabled = tx
            .txq
            .enable(&self.regs)
            .and_then(|()| tx.txcq.enable(&self.regs))
            .and_then(|()| rx.rxq.enable(&self.regs))
            .and_then(|()| rx.rxcq.enable(&self.regs))
            .and_then(|()| rx.hdrq.enable(&self.regs))
            .and_then(|()| rx.fill(&self.regs.get()?));
        if let Err(e) = enabled {
            dev_err!(
                self.pdev.as_ref(),
                "port {}: bring-up failed: {:?}\n",
                self.index,
                e
            );
            self.quiesce(tx, rx);
            return Err(e);
        }
        let q = self.napi.data();
        // The queue is stopped and NAPI disabled: nothing else holds these.
        *q.tx.lock() = Some(tx);
        *q.rx.lock() = Some(rx);
        if let Err(e) = self.napi.enable() {
            let tx = q.tx.lock().take();
            let rx = q.rx.lock().take();
            if let (Some(tx), Some(rx)) = (tx, rx) {
                self.quiesce(tx, rx);
            }
            return Err(e);
        }
        let link = {
            let r = self.regs.get()?;
            q.mask_vectors(&r, false)?;
            r.doorbell(regs::DB_REARM)?;
            r.port32::<{ regs::PORT_LINK }>(self.block()?)? != 0
        };
        self.set_link(dev, link);
        self.snapshot().mtu.store(mtu, Relaxed);
        // A fresh ring has nothing in flight: BQL forgets what an earlier
        // one had (patch 0034; it takes the stack's TX queue lock).
        let _ = dev.tx_reset_queue(0);
        dev.start_queue();
        Ok(())
    }

    /// Programs the port's interrupt moderation and header-entry coalescing
    /// limit from `cfg` (registers the NIC reads live, hardware spec §7, §9).
    fn moderate(&self, r: &Regs<'_>, cfg: &PortConfig, mtu: u32) -> Result {
        for (v, itr) in [
            (regs::vec_rx(self.index), cfg.rx_itr),
            (regs::vec_tx(self.index), cfg.tx_itr),
        ] {
            let v = VectorRegs::new(v)?;
            r.set_vector32::<{ regs::VEC_ITR_USECS }>(v, itr.usecs)?;
            r.set_vector32::<{ regs::VEC_ITR_ENTRIES }>(v, itr.entries)?;
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

    /// Takes the port down: stops the queue and NAPI, then the NIC's queues,
    /// and frees the rings once the NIC has let go of them.
    fn halt(&self, dev: &NetDevice) {
        dev.stop_queue();
        self.set_link(dev, false);
        let q = self.napi.data();
        if let Ok(r) = self.regs.get() {
            let _ = q.mask_vectors(&r, true);
        }
        self.napi.disable();
        let tx = q.tx.lock().take();
        let rx = q.rx.lock().take();
        // Descriptors of the ring are never completed now: BQL's bytes in
        // flight go with it (and so does a stop of the queue by BQL).
        let _ = dev.tx_reset_queue(0);
        if let (Some(tx), Some(rx)) = (tx, rx) {
            self.quiesce(tx, rx);
        }
    }

    /// Disables the port and its queues on the NIC, then gives the rings
    /// back: freed if the NIC confirmed every queue stopped, otherwise held
    /// by the control plane until the NIC is reset (or leaked if it never
    /// is), as the NIC may still write them.
    fn quiesce(&self, tx: TxRing, rx: RxRing) {
        if self.control.is_lost() {
            // Its reset already went unanswered: waiting for each queue
            // would only add timeouts before the same outcome.
            self.control.release_memory(tx);
            self.control.release_memory(rx);
            return;
        }
        // Every queue is asked to stop, whatever the others answer.
        let res = [
            tx.txq.disable(&self.regs),
            tx.txcq.disable(&self.regs),
            rx.rxq.disable(&self.regs),
            rx.rxcq.disable(&self.regs),
            rx.hdrq.disable(&self.regs),
        ];
        if let Ok(r) = self.regs.get() {
            if let Ok(b) = self.block() {
                let _ = r.set_port32::<{ regs::PORT_CTRL }>(b, 0);
            }
            let _ = r.doorbell(regs::DB_CMD);
        }
        if let Some(Err(e)) = res.into_iter().find(Result::is_err) {
            dev_warn!(
                self.pdev.as_ref(),
                "port {}: queues did not confirm they stopped ({:?}); their rings are held until the NIC is reset\n",
                self.index,
                e
            );
            self.control.release_memory(tx);
            self.control.release_memory(rx);
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
        self.napi.data().tx.lock().is_some()
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
        this.napi.data().xmit(dev, skb)
    }

    /// ZeroNIC sends whose region is registered go out as scatter-gather
    /// merge sends (TSO by the NIC), if all of the skb's payload is the
    /// send's (not so when TCP put bytes written before the attach in front
    /// of a send's first ones). Every other skb is copied (`queues.rs`),
    /// fragments included: a TCP/IPv4 GSO skb of at most `MAX_TSO_FRAME`
    /// bytes as one plain TSO send the NIC segments (if it has
    /// `CAP_PLAIN_TSO`; a VLAN device's skb carries its tag out of band
    /// here, `skb->protocol` is still IPv4, and the NIC segments the tagged
    /// frame), any other GSO skb segmented by the stack first.
    fn features_check(
        _dev: &NetDevice,
        this: Pin<&Self>,
        skb: &SkBuff,
        features: Features,
    ) -> Features {
        let merge = SEND_OPS
            .lookup(skb)
            .is_some_and(|wr| wr.mr.valid.load(Relaxed) && merge_params(skb, wr).is_some());
        let plain_tso = || {
            this.control.identity.caps & regs::CAP_PLAIN_TSO != 0
                && skb.protocol() == ETH_P_IPV4
                && skb.len() <= regs::MAX_TSO_FRAME
        };
        if merge || !skb.is_gso() || plain_tso() {
            features
        } else {
            Features::from_bits(features.bits() & !Features::GSO_MASK.bits())
        }
    }

    fn get_stats64(_dev: &NetDevice, this: Pin<&Self>, stats: &mut RtnlLinkStats64<'_>) {
        let s = &this.napi.data().stats;
        stats.set_rx_packets(s.rx_packets.load(Relaxed));
        stats.set_rx_bytes(s.rx_bytes.load(Relaxed));
        stats.set_rx_dropped(s.rx_dropped.load(Relaxed));
        stats.set_rx_errors(s.rx_errors.load(Relaxed));
        stats.set_tx_packets(s.tx_packets.load(Relaxed));
        stats.set_tx_bytes(s.tx_bytes.load(Relaxed));
        stats.set_tx_dropped(s.tx_dropped.load(Relaxed));
        stats.set_tx_errors(s.tx_errors.load(Relaxed));
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
        crate::port_stats::read_queues(&this.napi.data().stats, values);
        crate::port_stats::read_zc(&this.snapshot().zc, values);
    }

    fn get_channels(_dev: &NetDevice, _this: Pin<&Self>, channels: &mut Channels) {
        *channels = ethtool::channels();
    }

    fn set_channels(_dev: &NetDevice, _this: Pin<&Self>, counts: &ChannelCounts) -> Result {
        ethtool::set_channels(counts)
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
            this.moderate(&this.regs.get()?, &new, dev.mtu())?;
        }
        *cfg = new;
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
        if queue != 0 {
            return;
        }
        let s = &this.napi.data().stats;
        q.set_packets(s.rx_packets.load(Relaxed));
        q.set_bytes(s.rx_bytes.load(Relaxed));
        q.set_alloc_fail(s.rx_dropped.load(Relaxed));
        q.set_csum_unnecessary(s.rx_csum_unnecessary.load(Relaxed));
        q.set_csum_none(s.rx_csum_none.load(Relaxed));
        q.set_csum_bad(s.rx_csum_bad.load(Relaxed));
        // The NIC's drops of the port, which has this one RX queue.
        if let Ok(r) = this.regs.get() {
            let hw = |slot| crate::port_stats::hw(&r, this.index, slot);
            let no_buf = hw(regs::PSTAT_RX_NO_BUF);
            q.set_hw_drop_overruns(no_buf);
            q.set_hw_drops(
                no_buf
                    .saturating_add(hw(regs::PSTAT_RX_MALFORMED))
                    .saturating_add(hw(regs::PSTAT_RX_CSUM_ERR))
                    .saturating_add(hw(regs::PSTAT_RX_HDRQ_FULL)),
            );
        }
    }

    fn queue_stats_tx(_dev: &NetDevice, this: Pin<&Self>, queue: u32, q: &mut QueueStatsTx<'_>) {
        if queue != 0 {
            return;
        }
        let s = &this.napi.data().stats;
        let errors = s.tx_errors.load(Relaxed);
        q.set_packets(s.tx_packets.load(Relaxed));
        q.set_bytes(s.tx_bytes.load(Relaxed));
        q.set_needs_csum(s.tx_needs_csum.load(Relaxed));
        q.set_csum_none(s.tx_csum_none.load(Relaxed));
        q.set_stop(s.tx_stop.load(Relaxed));
        q.set_wake(s.tx_wake.load(Relaxed));
        q.set_hw_drop_errors(errors);
        // Descriptors the NIC refused, and frames it dropped for want of link.
        let no_link = this
            .regs
            .get()
            .map(|r| crate::port_stats::hw(&r, this.index, regs::PSTAT_TX_NO_LINK))
            .unwrap_or(0);
        q.set_hw_drops(errors.saturating_add(no_link));
    }

    fn base_stats(
        _dev: &NetDevice,
        _this: Pin<&Self>,
        rx: &mut QueueStatsRx<'_>,
        tx: &mut QueueStatsTx<'_>,
    ) {
        // The queues are the port's only ones and keep their counts across
        // ifdown: nothing is counted outside them. Zero marks each statistic
        // the device total (queue 0's) is complete for.
        rx.set_packets(0);
        rx.set_bytes(0);
        rx.set_alloc_fail(0);
        rx.set_csum_unnecessary(0);
        rx.set_csum_none(0);
        rx.set_csum_bad(0);
        rx.set_hw_drop_overruns(0);
        rx.set_hw_drops(0);
        tx.set_packets(0);
        tx.set_bytes(0);
        tx.set_needs_csum(0);
        tx.set_csum_none(0);
        tx.set_stop(0);
        tx.set_wake(0);
        tx.set_hw_drop_errors(0);
        tx.set_hw_drops(0);
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

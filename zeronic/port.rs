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
            Features,
            NetDevice,
            NetDeviceOps,
            NetdevTx,
            RtnlLinkStats64,
            XmitSkb, //
        },
        napi::Napi,
        skbuff::SkBuff,
    },
    page::Page,
    pci,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::Relaxed,
        Arc, //
    },
};

use crate::{
    flow_tx::SEND_OPS,
    control::{
        Control,
        Held, //
    },
    hw::regs,
    nic_regs::NicRegs,
    queues::{
        Queues,
        RxRing,
        TxRing, //
    },
};

/// TX completion interrupt moderation: completions only free ring slots, so
/// they can wait (an interrupt costs far more than a few microseconds here).
const TX_ITR_USECS: u32 = 64;
/// ... or until this many completions are pending.
const TX_ITR_ENTRIES: u32 = 32;

/// Private data of a port's net_device.
#[pin_data]
pub(crate) struct Port {
    /// Port number on the NIC.
    index: u32,
    /// The PCI function; bound while the net_device is registered.
    pdev: ARef<pci::Device>,
    regs: Arc<NicRegs>,
    control: Arc<Control>,
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
        // while the net_device is registered (open, change_mtu). The driver
        // unregisters it in its remove path, before the PCI device unbinds,
        // and unregistration takes RTNL, so the device is bound for as long
        // as such a callback runs, which outlives the returned reference.
        unsafe { dev.as_bound() }
    }

    /// Base of this port's register block.
    fn block(&self) -> usize {
        regs::port_block(self.index)
    }

    /// Brings the port up at `mtu`: rings, NIC queues, RX buffers, NAPI.
    fn start(&self, dev: &NetDevice, mtu: u32) -> Result {
        let bdev = self.bound();
        let tx = TxRing::new(bdev, self.index, mtu)?;
        let mut rx = RxRing::new(bdev, self.index, mtu)?;
        {
            let r = self.regs.get()?;
            let mac = dev.mac_addr();
            let b = self.block();
            r.w32(b + regs::PORT_CTRL, 0)?;
            r.w32(b + regs::PORT_MTU, mtu)?;
            r.w32(
                b + regs::PORT_MAC_LO,
                u32::from_le_bytes([mac[0], mac[1], mac[2], mac[3]]),
            )?;
            r.w32(
                b + regs::PORT_MAC_HI,
                u32::from_le_bytes([mac[4], mac[5], 0, 0]),
            )?;
            r.w32(b + regs::PORT_COALESCE_BYTES, regs::DEFAULT_COALESCE_BYTES)?;
            r.w32(b + regs::PORT_CTRL, regs::PORT_CTRL_ENABLE)?;
            let tx_vec = regs::vec_block(regs::vec_tx(self.index));
            r.w32(tx_vec + regs::VEC_ITR_USECS, TX_ITR_USECS)?;
            r.w32(tx_vec + regs::VEC_ITR_ENTRIES, TX_ITR_ENTRIES)?;
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
            r.r32(self.block() + regs::PORT_LINK)? != 0
        };
        self.set_link(dev, link);
        self.snapshot().mtu.store(mtu, Relaxed);
        dev.start_queue();
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
            self.control.release(Held::Tx(tx));
            self.control.release(Held::Rx(rx));
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
            let _ = r.w32(self.block() + regs::PORT_CTRL, 0);
            let _ = r.doorbell(regs::DB_CMD);
        }
        if let Some(Err(e)) = res.into_iter().find(Result::is_err) {
            dev_warn!(
                self.pdev.as_ref(),
                "port {}: queues did not confirm they stopped ({:?}); their rings are held until the NIC is reset\n",
                self.index,
                e
            );
            self.control.release(Held::Tx(tx));
            self.control.release(Held::Rx(rx));
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

    /// Only ZeroNIC sends whose region is registered go out as scatter-gather
    /// merge sends (TSO by the NIC); every other skb is segmented and
    /// linearized by the stack and copied (`queues.rs`).
    fn features_check(
        _dev: &NetDevice,
        _this: Pin<&Self>,
        skb: &SkBuff,
        features: Features,
    ) -> Features {
        let merge = SEND_OPS
            .lookup(skb)
            .is_some_and(|wr| wr.mr.valid.load(Relaxed));
        if merge {
            features
        } else {
            Features::from_bits(features.bits() & !(Features::SG | Features::GSO_MASK).bits())
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
            let off = this.block() + regs::PORT_STATS + 8 * regs::PSTAT_RX_NO_BUF;
            if let Ok(missed) = r.r64(off) {
                stats.set_rx_missed_errors(missed);
            }
        }
    }

    const ETHTOOL_STAT_NAMES: &'static [&'static CStr] = &crate::port_stats::NAMES;

    fn ethtool_stats(_dev: &NetDevice, this: Pin<&Self>, values: &mut [u64]) {
        // An unbound NIC leaves them zero.
        if let Ok(r) = this.regs.get() {
            let _ = crate::port_stats::read(&r, this.index, values);
        }
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

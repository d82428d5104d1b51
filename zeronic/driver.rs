// SPDX-License-Identifier: GPL-2.0

//! The PCI driver: binds to the emulated ZeroNIC and brings it up.
//!
//! The NIC is a QEMU `ivshmem-doorbell` function (1af4:1110) whose BAR2 is the
//! NIC's register file. Plain ivshmem devices share the PCI id, so probe
//! identifies the NIC by the magic and version in BAR2 before anything else
//! and refuses other devices with a log line. Bring-up follows
//! `docs/hardware.md` §3: reset, command and event queues, data path on,
//! MSI-X vectors, then one net_device per port.
//!
//! Teardown ([`ZeroNicDevice`]'s `Drop`) runs in the reverse order: files lose
//! the NIC, a reset stops all of its DMA, then interrupts are freed, the
//! net_devices unregistered (each port frees its rings) and the command rings
//! freed, all while the device is still bound: no DMA memory or mapping may
//! outlive the binding (DMA-API debugging reports it).

use core::pin::Pin;

use kernel::{
    alloc::flags::__GFP_ZERO,
    device::{
        Bound,
        Core, //
    },
    irq,
    net::dev::{
        Builder,
        Features,
        Registration, //
    },
    page::Page,
    pci,
    prelude::*,
    sync::{
        atomic::Relaxed,
        Arc,
        SetOnce, //
    },
};

use crate::{
    control::{
        Control,
        Identity, //
    },
    hw::regs,
    irq::{
        Events,
        PortSlots,
        Vector, //
    },
    nic_regs::{
        NicRegs,
        QueueRegs,
        Regs,
        VectorRegs, //
    },
    port::Port,
    ring::{
        poll_until,
        Ring, //
    },
};

/// Entries of the event queue.
const EVQ_ENTRIES: u32 = 64;

/// How long a reset may take (the model resets within one scan).
pub(crate) const RESET_TIMEOUT_MS: i64 = 2000;

/// Interface name template of the ports.
const IFNAME: &CStr = c"zn%d";

/// Reads and checks the identity header (hardware spec §1).
///
/// `ENODEV` when the magic is not ZeroNIC's (a plain ivshmem device) or the
/// major version is not the one this driver implements; `EINVAL` when the
/// header is inconsistent. Each case is logged.
fn read_identity(pdev: &pci::Device<Core<'_>>, r: &Regs<'_>) -> Result<Identity> {
    let magic = r.reg32::<{ regs::REG_MAGIC }>();
    if magic != regs::ZN_MAGIC {
        dev_info!(
            pdev,
            "BAR2 magic {:#010x} is not a ZeroNIC's ({:#010x}): plain ivshmem device, not binding\n",
            magic,
            regs::ZN_MAGIC
        );
        return Err(ENODEV);
    }
    let id = Identity {
        version: r.reg32::<{ regs::REG_VERSION }>(),
        caps: r.reg32::<{ regs::REG_CAPS }>(),
        ports: r.reg32::<{ regs::REG_NUM_PORTS }>(),
        max_mtu: r.reg32::<{ regs::REG_MAX_MTU }>(),
        mr_capacity: r.reg32::<{ regs::REG_MR_CAPACITY }>(),
        flow_capacity: r.reg32::<{ regs::REG_FLOW_CAPACITY }>(),
        ms_per_flow: r.reg32::<{ regs::REG_MS_PER_FLOW }>(),
        max_qp: 1,
    };
    if id.version >> 16 != regs::ZN_VERSION_MAJOR {
        dev_err!(
            pdev,
            "ZeroNIC version {}.{} is not supported (driver implements {}.x)\n",
            id.version >> 16,
            id.version & 0xffff,
            regs::ZN_VERSION_MAJOR
        );
        return Err(ENODEV);
    }
    if id.ports == 0 || id.ports > regs::MAX_PORTS {
        dev_err!(
            pdev,
            "ZeroNIC reports {} ports (1..={} valid)\n",
            id.ports,
            regs::MAX_PORTS
        );
        return Err(EINVAL);
    }
    if id.flow_capacity > regs::FLOW_CAPACITY || id.mr_capacity > regs::MR_CAPACITY {
        dev_err!(
            pdev,
            "ZeroNIC reports {} flows and {} memory regions (at most {} and {})\n",
            id.flow_capacity,
            id.mr_capacity,
            regs::FLOW_CAPACITY,
            regs::MR_CAPACITY
        );
        return Err(EINVAL);
    }
    if id.max_mtu < kernel::net::dev::ETH_MIN_MTU || id.max_mtu > regs::MAX_MTU {
        dev_err!(pdev, "ZeroNIC reports max MTU {}\n", id.max_mtu);
        return Err(EINVAL);
    }
    let mut id = id;
    if id.caps & regs::CAP_MULTI_QUEUE != 0 {
        let max_qp = r.reg32::<{ regs::REG_MAX_QP }>();
        if max_qp == 0 || max_qp > regs::MAX_QP {
            dev_err!(
                pdev,
                "ZeroNIC reports {} queue pairs per port (1..={} valid)\n",
                max_qp,
                regs::MAX_QP
            );
            return Err(EINVAL);
        }
        id.max_qp = max_qp;
    }
    Ok(id)
}

/// Resets the NIC and waits for it (hardware spec §3 step 2).
fn reset(nic: &NicRegs) -> Result {
    {
        let r = nic.get()?;
        r.set_reg32::<{ regs::REG_DEV_CTRL }>(regs::DEV_CTRL_RESET);
        r.doorbell(regs::DB_CMD)?;
    }
    poll_until(nic, RESET_TIMEOUT_MS, |r| {
        Ok(r.reg32::<{ regs::REG_DEV_CTRL }>() == 0)
    })
}

/// One bound NIC.
///
/// Lifetime: from probe to unbind; the IRQ registrations borrow the device
/// for `'bound`. See the module documentation for the teardown order.
pub(crate) struct ZeroNicDevice<'bound> {
    pdev: &'bound pci::Device,
    regs: Arc<NicRegs>,
    control: Arc<Control>,
    /// One handler per MSI-X vector in use.
    irqs: KVec<Pin<KBox<irq::Registration<'bound, Vector>>>>,
    /// The ports' net_devices (also reachable by the handlers).
    ports: KVec<Arc<Registration<Port>>>,
    /// The handlers' view of `ports`; `None` once teardown started.
    slots: Option<Arc<PortSlots>>,
}

/// Stops a half-probed NIC when dropped, unless disarmed: withdraws its
/// control plane, resets it and lets the control plane free (reset done) or
/// leak (no reset) the memory the NIC was handed, so that a probe failing
/// after the first queue was enabled never frees memory the NIC may use.
struct ProbeGuard<'a> {
    nic: &'a NicRegs,
    control: &'a Arc<Control>,
    armed: bool,
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.control.shut_down();
            self.control.quiesced(reset(self.nic).is_ok());
        }
    }
}

impl<'bound> ZeroNicDevice<'bound> {
    fn new(pdev: &'bound pci::Device<Core<'_>>) -> Result<Self> {
        let bar2_len = pdev.resource_len(2)?;
        // CAST: usize -> u64 is lossless on every architecture Linux supports.
        if bar2_len < regs::BAR2_SIZE as u64 {
            dev_info!(
                pdev,
                "BAR2 is {} bytes, smaller than a ZeroNIC register file: plain ivshmem device, not binding\n",
                bar2_len
            );
            return Err(ENODEV);
        }
        pdev.enable_device_mem()?;
        pdev.set_master();
        let bpdev: &'bound pci::Device<Bound> = pdev;
        let nic = Arc::new(NicRegs::new(bpdev)?, GFP_KERNEL)?;
        let identity = read_identity(pdev, &nic.get()?)?;

        reset(&nic).inspect_err(|e| dev_err!(pdev, "NIC did not reset: {:?}\n", e))?;
        let status = nic.get()?.reg32::<{ regs::REG_DEV_STATUS }>();
        if status & regs::DEV_STATUS_DMA_OK == 0 {
            dev_err!(pdev, "NIC cannot reach guest RAM (DMA window not mapped)\n");
            return Err(EIO);
        }
        let control = Control::new(
            bpdev,
            nic.clone(),
            identity,
            crate::module_parameters::max_mrs_per_user.value(),
        )?;

        let slots: Arc<PortSlots> = Arc::new([SetOnce::new(), SetOnce::new()], GFP_KERNEL)?;
        let evq = Ring::<16>::new(bpdev.as_ref(), EVQ_ENTRIES, QueueRegs::EVQ)?;
        let events = Events::new(nic.clone(), control.clone(), evq, slots.clone());
        // Declared after everything the NIC may DMA to, so it drops first:
        // from the first queue enabled on, a failure resets the NIC before
        // any of its memory is given back.
        let mut guard = ProbeGuard {
            nic: &nic,
            control: &control,
            armed: true,
        };
        control.enable()?;
        events.enable()?;

        // Vectors start masked; a port unmasks its own when it opens. Queue
        // pair 0 of each port has two, every other queue pair one (§14).
        let nvec = 1 + 2 * identity.ports + (identity.max_qp - 1) * identity.ports;
        {
            let r = nic.get()?;
            for v in 0..regs::MAX_VECTORS {
                r.set_vector32::<{ regs::VEC_MASK }>(
                    VectorRegs::new(v)?,
                    u32::from(v != regs::VEC_ASYNC),
                )?;
            }
            r.set_reg32::<{ regs::REG_DEV_CTRL }>(regs::DEV_CTRL_ENABLE);
            r.doorbell(regs::DB_CMD)?;
        }
        let types = pci::IrqTypes::default().with(pci::IrqType::MsiX);
        let vectors = bpdev
            .alloc_irq_vectors_managed(nvec, nvec, types)
            .inspect_err(|e| dev_err!(pdev, "cannot allocate {} MSI-X vectors: {:?}\n", nvec, e))?;

        let mut this = Self {
            pdev,
            regs: nic.clone(),
            control: control.clone(),
            irqs: KVec::new(),
            ports: KVec::new(),
            slots: Some(slots.clone()),
        };
        // From here on, `this` tears the NIC down (its `Drop`) if probe fails.
        guard.armed = false;
        this.request_irq(
            vectors,
            regs::VEC_ASYNC,
            c"zeronic-async",
            Vector::Async(events),
        )?;
        // The Linux IRQ of each queue pair's RX vector, per port.
        let mut port_irqs = [[None; regs::MAX_QP as usize]; regs::MAX_PORTS as usize];
        for p in 0..identity.ports {
            for qp in 0..identity.max_qp {
                let rx = regs::vec_qp_rx(identity.ports, p, qp);
                let tx = regs::vec_qp_tx(identity.ports, p, qp);
                let rx_name = if qp == 0 {
                    c"zeronic-rx"
                } else {
                    c"zeronic-txrx"
                };
                let irq = this.request_irq(
                    vectors,
                    rx,
                    rx_name,
                    Vector::Port {
                        regs: nic.clone(),
                        ports: slots.clone(),
                        port: p,
                        qp,
                        vector: rx,
                        rx: true,
                    },
                )?;
                if tx != rx {
                    this.request_irq(
                        vectors,
                        tx,
                        c"zeronic-tx",
                        Vector::Port {
                            regs: nic.clone(),
                            ports: slots.clone(),
                            port: p,
                            qp,
                            vector: tx,
                            rx: false,
                        },
                    )?;
                }
                // CAST: `p < MAX_PORTS`, `qp < MAX_QP`, checked at
                // identification.
                if let Some(slot) = port_irqs
                    .get_mut(p as usize)
                    .and_then(|ps| ps.get_mut(qp as usize))
                {
                    *slot = Some(irq);
                }
            }
        }

        // One zero page for every queue pair of every port (duplicates'
        // payload is read from it, never written).
        let zero = Arc::new(Page::alloc_page(GFP_KERNEL | __GFP_ZERO)?, GFP_KERNEL)?;
        for p in 0..identity.ports {
            // CAST: `p < MAX_PORTS`.
            let irqs = port_irqs.get(p as usize).copied().unwrap_or_default();
            let mut b = Builder::new(
                identity.max_qp,
                identity.max_qp,
                Port::new(
                    p,
                    identity.ports,
                    identity.max_qp,
                    irqs,
                    bpdev,
                    nic.clone(),
                    control.clone(),
                    zero.clone(),
                ),
            )?;
            b.set_name(IFNAME)?;
            // CAST: `p < MAX_PORTS` (2).
            b.set_dev_port(p as u16);
            b.set_random_mac_addr();
            let max_mtu = identity.max_mtu;
            b.set_mtu(
                regs::DEFAULT_MTU.min(max_mtu),
                kernel::net::dev::ETH_MIN_MTU,
                max_mtu,
            )?;
            // SG and TSO: zero-copy merge sends and plain TSO sends, each
            // only where the NIC can (`features_check`).
            let features = Features::HW_CSUM
                | Features::RXCSUM
                | Features::SG
                | Features::TSO
                | Features::TSO6
                | crate::ethtool::NTUPLE;
            b.set_features(features, features);
            b.set_parent(bpdev.as_ref());
            // No link until the port opens and the NIC says so; starting
            // from "off" makes that first carrier_on() move operstate to UP.
            b.carrier_off();
            let reg = Arc::new(b.register()?, GFP_KERNEL)?;
            // CAST: u32 -> usize; `p < MAX_PORTS`.
            let snap = &control.ports[p as usize];
            snap.dev.populate(reg.id());
            // CAST: ifindex is positive once registered.
            snap.ifindex.store(reg.ifindex() as u32, Relaxed);
            snap.mtu.store(reg.mtu(), Relaxed);
            // CAST: u32 -> usize; `p < MAX_PORTS`.
            if let Some(slot) = slots.get(p as usize) {
                slot.populate(reg.clone());
            }
            dev_info!(pdev, "port {}: {}\n", p, reg.name().as_cstr());
            this.ports.push(reg, GFP_KERNEL)?;
        }
        let index = control.publish()?;
        dev_info!(
            pdev,
            "ZeroNIC {}.{}: {} port(s), max MTU {}, caps {:#x}, {} MSI-X vectors, nic {}\n",
            identity.version >> 16,
            identity.version & 0xffff,
            identity.ports,
            identity.max_mtu,
            identity.caps,
            nvec,
            index
        );
        Ok(this)
    }

    /// Requests vector `vector` with `handler`; returns its Linux IRQ.
    fn request_irq(
        &mut self,
        vectors: pci::ManagedIrqVectors<'bound>,
        vector: u32,
        name: &'static CStr,
        handler: Vector,
    ) -> Result<u32> {
        let request = vectors.index(usize::try_from(vector)?)?;
        let irq = request.irq();
        // SAFETY: The registration is stored in `self.irqs` and dropped, never
        // forgotten, in `Drop` or when `self` is dropped on a probe error.
        let reg = KBox::pin_init(
            unsafe {
                irq::Registration::new(
                    request,
                    irq::Flags::TRIGGER_NONE,
                    name,
                    Ok::<_, Error>(handler),
                )
            },
            GFP_KERNEL,
        )?;
        self.irqs.push(reg, GFP_KERNEL)?;
        Ok(irq)
    }
}

/// The `pci::Driver` of the ZeroNIC.
pub(crate) struct ZeroNicDriver;

kernel::pci_device_table!(
    PCI_TABLE,
    <ZeroNicDriver as pci::Driver>::IdInfo,
    [(
        pci::DeviceId::from_id(pci::Vendor::REDHAT_QUMRANET, regs::PCI_DEVICE_ID as u32),
        ()
    )]
);

impl pci::Driver for ZeroNicDriver {
    type IdInfo = ();
    type Data<'bound> = ZeroNicDevice<'bound>;

    const ID_TABLE: pci::IdTable<Self::IdInfo> = &PCI_TABLE;

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        _info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        ZeroNicDevice::new(pdev)
    }
}

impl Drop for ZeroNicDevice<'_> {
    fn drop(&mut self) {
        // Files first: no command may start on a NIC that is going away, and
        // memory released from now on is held until the reset below.
        self.control.shut_down();
        // Stop every DMA (memory regions included: reset empties the MR
        // Table) before anything the NIC was handed is given back. If the
        // NIC does not confirm, all of it is leaked instead (logged).
        let reset_done = match reset(&self.regs) {
            Ok(()) => true,
            Err(e) => {
                dev_err!(self.pdev, "NIC did not reset at unbind: {:?}\n", e);
                false
            }
        };
        self.control.quiesced(reset_done);
        // No handler runs after this; they drop their net_device references
        // and the event ring (freed or leaked as the reset decided).
        self.irqs.clear();
        drop(self.slots.take());
        // Unregistering stops each open port (ndo_stop) and releases its
        // rings the same way.
        self.ports.clear();
        dev_info!(
            self.pdev,
            "ZeroNIC with {} port(s) unbound\n",
            self.control.identity.ports
        );
    }
}

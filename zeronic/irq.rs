// SPDX-License-Identifier: GPL-2.0

//! MSI-X interrupt handlers.
//!
//! Vector `VEC_ASYNC` carries events (link changes, queue errors, fatal
//! errors) and command completions; commands are completed by polling (see
//! `control.rs`), so this handler only drains the event queue. Queue pair 0
//! of each port has an RX and a TX vector, every other queue pair one
//! (hardware spec §14); each masks itself and schedules its queue pair's
//! NAPI, which unmasks it when it completes (hardware spec §7).

use kernel::{
    irq::{
        Handler,
        IrqReturn, //
    },
    net::dev::Registration,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        barrier::{
            dma_mb,
            Read, //
        },
        Arc,
        SetOnce, //
    },
};

use crate::{
    control::{
        Control,
        Held, //
    },
    hw::{desc::Event, regs, status},
    nic_regs::{
        NicRegs,
        VectorRegs, //
    },
    port::Port,
    ring::Ring,
};

/// The net_devices of the NIC's ports, filled in once they are registered.
///
/// Interrupts are requested before the net_devices exist (an open port must
/// find its handler), so handlers look their port up here.
pub(crate) type PortSlots = [SetOnce<Arc<Registration<Port>>>; regs::MAX_PORTS as usize];

/// State of the `VEC_ASYNC` handler: the event queue.
pub(crate) struct Events {
    regs: Arc<NicRegs>,
    control: Arc<Control>,
    /// `None` only while dropping: the ring goes to `Control::release`.
    evq: Option<Ring<16>>,
    /// Events consumed (free-running). Only the handler touches it, and a
    /// handler never runs concurrently with itself.
    cons: Atomic<u32>,
    ports: Arc<PortSlots>,
    /// Set once the fatal error has been reported.
    fatal: Atomic<bool>,
}

impl Events {
    pub(crate) fn new(
        regs: Arc<NicRegs>,
        control: Arc<Control>,
        evq: Ring<16>,
        ports: Arc<PortSlots>,
    ) -> Self {
        Self {
            regs,
            control,
            evq: Some(evq),
            cons: Atomic::new(0),
            ports,
            fatal: Atomic::new(false),
        }
    }

    fn port(&self, port: u16) -> Option<&Registration<Port>> {
        self.ports.get(usize::from(port))?.as_ref().map(|p| &**p)
    }

    /// The NIC entered the fatal state: stop every port's data path.
    fn fatal(&self, code: u32, info: u32) {
        if self.fatal.xchg(true, Relaxed) {
            return;
        }
        pr_err!(
            "NIC fatal error {} (queue {:#x}): data path stopped; rebind the device to reset it\n",
            code,
            info
        );
        for slot in self.ports.iter() {
            if let Some(port) = slot.as_ref() {
                port.data().stop_queues(port);
                port.carrier_off();
            }
        }
    }

    fn drain(&self) -> Result {
        let evq = self.evq.as_ref().ok_or(ENODEV)?;
        let r = self.regs.get()?;
        let prod = evq.prod(&r)?;
        dma_mb(Read);
        let mut cons = self.cons.load(Relaxed);
        // The producer index is the device's word: one that claims more
        // entries than the ring holds is a protocol violation, not a reason
        // to loop 2^32 times in a hard IRQ handler.
        if prod.wrapping_sub(cons) > evq.entries() {
            if !self.fatal.load(Relaxed) {
                pr_err!(
                    "NIC event queue producer {} is more than {} entries ahead of {}; ignoring its events\n",
                    prod,
                    evq.entries(),
                    cons
                );
            }
            self.fatal(status::ST_BAD_DESC.into(), u32::from(status::QK_EVQ));
            return Err(EIO);
        }
        while cons != prod {
            let ev = Event::decode(&evq.read(cons)?);
            match ev.code {
                status::EV_LINK => {
                    if let Some(port) = self.port(ev.port) {
                        port.data().set_link(port, ev.info != 0);
                    }
                }
                status::EV_QUEUE_ERROR => {
                    pr_err!("NIC refused queue {:#x}: status {}\n", ev.info, ev.detail);
                }
                // `info` is the fatal code; the queue is in REG_FATAL_INFO.
                status::EV_FATAL => self.fatal(ev.info, r.reg32::<{ regs::REG_FATAL_INFO }>()),
                _ => kernel::pr_warn_once!("unknown NIC event {}\n", ev.code),
            }
            cons = cons.wrapping_add(1);
        }
        self.cons.store(cons, Relaxed);
        evq.set_cons(&r, cons)?;
        if r.reg32::<{ regs::REG_DEV_STATUS }>() & regs::DEV_STATUS_FATAL != 0 {
            self.fatal(
                r.reg32::<{ regs::REG_FATAL_CODE }>(),
                r.reg32::<{ regs::REG_FATAL_INFO }>(),
            );
        }
        r.doorbell(regs::DB_REARM)
    }

    /// Enables the event queue (process context, before the IRQ is requested).
    ///
    /// # Errors
    ///
    /// - `EIO`, `ETIMEDOUT`, `ENODEV`, `EINVAL` as [`Ring::enable`].
    pub(crate) fn enable(&self) -> Result {
        self.evq.as_ref().ok_or(ENODEV)?.enable(&self.regs)
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        // The NIC writes the ring until it is reset: released by the rule.
        if let Some(evq) = self.evq.take() {
            self.control.release(Held::Events(evq));
        }
    }
}

/// One MSI-X vector's handler.
pub(crate) enum Vector {
    /// `VEC_ASYNC`.
    Async(Events),
    /// A vector of queue pair `qp` of a port: its RX vector (`rx`), or
    /// queue pair 0's TX vector.
    Port {
        regs: Arc<NicRegs>,
        ports: Arc<PortSlots>,
        port: u32,
        qp: u32,
        vector: u32,
        rx: bool,
    },
}

impl Handler for Vector {
    fn handle(&self) -> IrqReturn {
        match self {
            Vector::Async(events) => {
                events.control.reap();
                // Nothing to do but report: the device may be going away.
                let _ = events.drain();
            }
            Vector::Port {
                regs,
                ports,
                port,
                qp,
                vector,
                rx,
            } => {
                // CAST: u32 -> usize; `port < MAX_PORTS`, checked at probe.
                let Some(netdev) = ports.get(*port as usize).and_then(|p| p.as_ref()) else {
                    return IrqReturn::None;
                };
                if let Ok(r) = regs.get() {
                    // Hold further interrupts until NAPI has polled.
                    if let Ok(v) = VectorRegs::new(*vector) {
                        let _ = r.set_vector32::<{ regs::VEC_MASK }>(v, 1);
                    }
                }
                let port = netdev.data();
                let Some(napi) = port.get_ref().queue_pair(*qp) else {
                    return IrqReturn::None;
                };
                napi.data().stats.prof.irq(*rx);
                if *rx {
                    napi.data().rx_interrupt();
                }
                napi.schedule();
            }
        }
        IrqReturn::Handled
    }
}

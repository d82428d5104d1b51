// SPDX-License-Identifier: GPL-2.0

//! The NIC's command queue: posting commands from any context and matching
//! their completions.
//!
//! Commands are posted under a spinlock that keeps interrupts off, so process
//! context (registration, flow attach), softirq (the zero-copy receive path
//! moving the NIC's cursor) and the interrupt handler can all use the queue;
//! nothing here sleeps. Each posted command has a slot, indexed by its
//! cookie, saying what to do with its completion: keep it for a caller that
//! waits for it ([`CmdQueue::wait`], which sleep-polls in process context),
//! or hand it to a [`CmdDone`] callback. Completions are reaped by whoever
//! comes first: the `VEC_ASYNC` interrupt handler or a waiter.
//!
//! The NIC executes commands in order, one at a time (hardware spec §10), so
//! a command posted after another sees the other's effect. When the ring is
//! full, commands wait in a bounded backlog and are posted as completions
//! free slots.

use kernel::{
    device::{
        Bound,
        Device, //
    },
    new_spinlock_irq,
    prelude::*,
    sync::{
        barrier::{
            dma_mb,
            mb,
            Read,
            Write, //
        },
        Arc,
        SpinLockIrq, //
    },
};

use crate::{
    hw::{cmd::CmdCompletion, regs},
    nic_regs::{
        NicRegs,
        Regs, //
    },
    ring::{
        poll_until,
        wait_enabled,
        Ring, //
    },
};

/// Entries of the command and command completion queues.
pub(crate) const CMDQ_ENTRIES: u32 = 64;

/// Commands that may wait for ring room; beyond this, posting fails.
const BACKLOG_MAX: usize = 1024;

/// What happens once a command completed. Runs in any context (possibly the
/// interrupt handler), not under the queue's lock: it must not sleep and may
/// only take locks that are safe in hard interrupt context.
pub(crate) trait CmdDone: Send + Sync {
    /// `c` is the command's completion (any status).
    fn done(self: Arc<Self>, c: &CmdCompletion);
}

/// What a posted command's completion is for.
enum Slot {
    /// No command.
    Free,
    /// A caller waits for the completion (`None` until it arrives).
    Waited(Option<CmdCompletion>),
    /// The completion goes to a callback, or nowhere.
    Callback(Option<Arc<dyn CmdDone>>),
}

/// Completions one reaping pass consumes at most (its callbacks wait on the
/// stack until the lock is released).
const REAP_BATCH: usize = 16;

/// Callbacks of completions reaped in one pass, run after the lock.
type Done = [Option<(Arc<dyn CmdDone>, CmdCompletion)>; REAP_BATCH];

/// A command waiting for ring room.
struct Backlogged {
    cmd: [u8; 64],
    cookie: u32,
    slot: Slot,
}

/// The state behind the lock.
struct Inner {
    /// The command and completion rings; `None` once released.
    rings: Option<(Ring<64>, Ring<16>)>,
    /// `false` once the NIC is broken or going away: nothing new is posted.
    accepting: bool,
    /// Next cookie (free-running; `cookie & (CMDQ_ENTRIES - 1)` is its slot).
    next_cookie: u32,
    /// Next free-running command queue index (= `Q_PROD`).
    prod: u32,
    /// Next completion to consume (= `Q_CONS` of the completion queue).
    cons: u32,
    /// One per ring entry, indexed by cookie: the cookie and opcode of the
    /// command using it, and what its completion is for.
    slots: KVec<(u32, u16, Slot)>,
    /// Commands posted while the ring was full, in order.
    backlog: KVec<Backlogged>,
    /// The last reaping pass stopped at its batch size (more may be there).
    batch_full: bool,
}

/// A command queue and its completion queue.
#[pin_data]
pub(crate) struct CmdQueue {
    regs: Arc<NicRegs>,
    #[pin]
    inner: SpinLockIrq<Inner>,
}

impl CmdQueue {
    /// Allocates the rings (enabled by [`CmdQueue::enable`]).
    pub(crate) fn new(
        dev: &Device<Bound>,
        regs: Arc<NicRegs>,
    ) -> Result<impl PinInit<Self, Error>> {
        let cmdq = Ring::<64>::new(dev, CMDQ_ENTRIES, regs::REG_CMDQ)?;
        let cmdcq = Ring::<16>::new(dev, CMDQ_ENTRIES, regs::REG_CMDCQ)?;
        let mut slots = KVec::with_capacity(CMDQ_ENTRIES as usize, GFP_KERNEL)?;
        for _ in 0..CMDQ_ENTRIES {
            slots.push((0, 0, Slot::Free), GFP_KERNEL)?;
        }
        Ok(try_pin_init!(Self {
            regs,
            inner <- new_spinlock_irq!(Inner {
                rings: Some((cmdq, cmdcq)),
                accepting: true,
                next_cookie: 0,
                prod: 0,
                cons: 0,
                slots,
                backlog: KVec::new(),
                batch_full: false,
            }, "zeronic::cmdq"),
        }? Error))
    }

    /// Enables both queues on the NIC (hardware spec §3). Process context.
    pub(crate) fn enable(&self) -> Result {
        // Programmed under the lock; the wait for the NIC (which sleeps)
        // needs only the register blocks.
        let blocks = {
            let inner = self.inner.lock();
            let (cmdq, cmdcq) = inner.rings.as_ref().ok_or(ENODEV)?;
            let r = self.regs.get()?;
            (cmdq.start_enable(&r)?, cmdcq.start_enable(&r)?)
        };
        wait_enabled(&self.regs, blocks.0)?;
        wait_enabled(&self.regs, blocks.1)
    }

    /// Stops accepting commands; `wait` and `submit` fail from now on.
    pub(crate) fn close(&self) {
        self.inner.lock().accepting = false;
    }

    /// Takes the rings away (teardown: the caller frees or leaks them).
    pub(crate) fn take_rings(&self) -> Option<(Ring<64>, Ring<16>)> {
        let mut inner = self.inner.lock();
        inner.accepting = false;
        inner.rings.take()
    }

    /// Posts `cmd`; its completion goes to `on_done` (if any). Any context.
    ///
    /// `ENODEV` once the queue is closed, `EBUSY` if the ring and the
    /// backlog are full, `ENOMEM` if the backlog cannot grow.
    pub(crate) fn submit(&self, cmd: [u8; 64], on_done: Option<Arc<dyn CmdDone>>) -> Result<u32> {
        let mut inner = self.inner.lock();
        self.post(&mut inner, cmd, Slot::Callback(on_done))
    }

    /// Posts `cmd` and waits for its completion, at most `timeout_ms`.
    ///
    /// Process context (sleeps, polling the completion queue itself so that
    /// it does not depend on the interrupt). `ETIMEDOUT` if the NIC does not
    /// complete it in time, after which the queue is closed: the caller must
    /// treat the NIC as broken and the command as possibly still executing.
    pub(crate) fn wait(&self, cmd: [u8; 64], timeout_ms: i64) -> Result<CmdCompletion> {
        let cookie = {
            let mut inner = self.inner.lock();
            self.post(&mut inner, cmd, Slot::Waited(None))?
        };
        let mut result = None;
        let waited = poll_until(&self.regs, timeout_ms, |r| {
            if r.r32(regs::REG_DEV_STATUS)? & regs::DEV_STATUS_FATAL != 0 {
                return Err(EIO);
            }
            let mut inner = self.inner.lock();
            let done = Self::reap_locked(&mut inner, r);
            let mut finished = false;
            // `None` while the command still waits in the backlog.
            if let Some(slot) = inner.slot(cookie) {
                if let Slot::Waited(Some(c)) = slot {
                    result = Some(*c);
                    *slot = Slot::Free;
                    // The slot may be what a backlogged command waited for.
                    Self::flush_backlog(&mut inner, r);
                    finished = true;
                }
            }
            drop(inner);
            Self::run_callbacks(done);
            Ok(finished)
        });
        match (waited, result) {
            (Ok(()), Some(c)) => Ok(c),
            (res, _) => {
                let mut inner = self.inner.lock();
                inner.accepting = false;
                // A late completion finds nobody waiting.
                if let Some(slot) = inner.slot(cookie) {
                    *slot = Slot::Callback(None);
                } else if let Some(b) = inner.backlog.iter_mut().find(|b| b.cookie == cookie) {
                    b.slot = Slot::Callback(None);
                }
                Err(res.err().unwrap_or(ETIMEDOUT))
            }
        }
    }

    /// Consumes available completions (the `VEC_ASYNC` handler). Any context.
    pub(crate) fn reap(&self) {
        let Ok(r) = self.regs.get() else {
            return;
        };
        loop {
            let (done, more) = {
                let mut inner = self.inner.lock();
                let done = Self::reap_locked(&mut inner, &r);
                (done, inner.batch_full)
            };
            Self::run_callbacks(done);
            if !more {
                break;
            }
        }
    }

    /// Runs the callbacks of reaped commands, outside the lock.
    fn run_callbacks(done: Done) {
        for (cb, c) in done.into_iter().flatten() {
            cb.done(&c);
        }
    }

    fn post(&self, inner: &mut Inner, cmd: [u8; 64], slot: Slot) -> Result<u32> {
        if !inner.accepting || inner.rings.is_none() {
            return Err(ENODEV);
        }
        let cookie = inner.next_cookie;
        if inner.backlog.is_empty() && inner.can_write(cookie) {
            let r = self.regs.get()?;
            Self::write(inner, &r, cmd, cookie, slot)?;
            r.doorbell(regs::DB_CMD)?;
        } else {
            if inner.backlog.len() >= BACKLOG_MAX {
                return Err(EBUSY);
            }
            inner
                .backlog
                .push(Backlogged { cmd, cookie, slot }, GFP_ATOMIC)?;
        }
        inner.next_cookie = cookie.wrapping_add(1);
        Ok(cookie)
    }

    /// Posts backlogged commands while there is room, in order.
    fn flush_backlog(inner: &mut Inner, r: &Regs<'_>) {
        let mut posted = false;
        while inner
            .backlog
            .first()
            .is_some_and(|b| inner.can_write(b.cookie))
        {
            let Ok(b) = inner.backlog.remove(0) else {
                break;
            };
            if Self::write(inner, r, b.cmd, b.cookie, b.slot).is_err() {
                break;
            }
            posted = true;
        }
        if posted {
            let _ = r.doorbell(regs::DB_CMD);
        }
    }

    /// Writes one command into the ring and publishes it (no doorbell).
    fn write(
        inner: &mut Inner,
        r: &Regs<'_>,
        mut cmd: [u8; 64],
        cookie: u32,
        slot: Slot,
    ) -> Result {
        cmd[4..8].copy_from_slice(&cookie.to_le_bytes());
        let opcode = u16::from_le_bytes([cmd[0], cmd[1]]);
        *inner.entry(cookie).ok_or(EINVAL)? = (cookie, opcode, slot);
        let (cmdq, _) = inner.rings.as_ref().ok_or(ENODEV)?;
        cmdq.write(inner.prod, cmd)?;
        inner.prod = inner.prod.wrapping_add(1);
        // Entry before index (spec §5).
        mb(Write);
        r.w32(cmdq.reg(regs::Q_PROD), inner.prod)
    }

    /// Consumes completions; returns the callbacks to run once the lock is
    /// released.
    fn reap_locked(inner: &mut Inner, r: &Regs<'_>) -> Done {
        let mut done: Done = [const { None }; REAP_BATCH];
        let mut n = 0;
        inner.batch_full = false;
        let Some(Ok(prod)) = inner.rings.as_ref().map(|(_, cq)| cq.prod(r)) else {
            return done;
        };
        dma_mb(Read);
        let start = inner.cons;
        // Never more than was posted: the producer index is the device's word.
        // CAST: REAP_BATCH is small.
        let mut budget = inner.prod.wrapping_sub(inner.cons).min(REAP_BATCH as u32);
        while inner.cons != prod && budget > 0 {
            let Some(Ok(raw)) = inner.rings.as_ref().map(|(_, cq)| cq.read(inner.cons)) else {
                break;
            };
            let c = CmdCompletion::decode(&raw);
            match inner.entry(c.cookie) {
                Some((cookie, opcode, slot @ Slot::Waited(None)))
                    if *cookie == c.cookie && *opcode == c.opcode =>
                {
                    *slot = Slot::Waited(Some(c))
                }
                Some((cookie, opcode, slot @ Slot::Callback(_)))
                    if *cookie == c.cookie && *opcode == c.opcode =>
                {
                    if let Slot::Callback(Some(cb)) = core::mem::replace(slot, Slot::Free) {
                        // At most one per ring entry: `budget` bounds `n`.
                        if let Some(d) = done.get_mut(n) {
                            *d = Some((cb, c));
                            n += 1;
                        }
                    }
                }
                _ => {
                    // The NIC answered something never asked: stop trusting it.
                    pr_err!(
                        "NIC completed command {} (cookie {}) that is not in flight; commands disabled\n",
                        c.opcode,
                        c.cookie
                    );
                    inner.accepting = false;
                }
            }
            inner.cons = inner.cons.wrapping_add(1);
            budget -= 1;
        }
        // CAST: REAP_BATCH is small.
        inner.batch_full = inner.cons.wrapping_sub(start) == REAP_BATCH as u32;
        if inner.cons == start {
            return done;
        }
        if let Some((_, cmdcq)) = inner.rings.as_ref() {
            let _ = r.w32(cmdcq.reg(regs::Q_CONS), inner.cons);
        }
        // Room freed: post what waited for it, in order.
        Self::flush_backlog(inner, r);
        done
    }
}

impl Inner {
    /// Whether the command of `cookie` can go into the ring now: room in
    /// the ring, and its slot no longer holds an earlier command's result
    /// (a waiter may not have collected it yet).
    fn can_write(&self, cookie: u32) -> bool {
        // CAST: u32 -> usize is lossless; the mask keeps it below the length.
        let free = matches!(
            self.slots.get((cookie & (CMDQ_ENTRIES - 1)) as usize),
            Some((_, _, Slot::Free))
        );
        free && self.prod.wrapping_sub(self.cons) < CMDQ_ENTRIES
    }

    fn entry(&mut self, cookie: u32) -> Option<&mut (u32, u16, Slot)> {
        // CAST: u32 -> usize is lossless; the mask keeps it below the length.
        self.slots.get_mut((cookie & (CMDQ_ENTRIES - 1)) as usize)
    }

    /// The slot of `cookie`, if that command is the one using it.
    fn slot(&mut self, cookie: u32) -> Option<&mut Slot> {
        match self.entry(cookie) {
            Some((c, _, slot)) if *c == cookie => Some(slot),
            _ => None,
        }
    }
}

// SPDX-License-Identifier: GPL-2.0

//! The NIC's command queue: posting commands from any context and matching
//! their completions.
//!
//! Commands are posted under a spinlock that keeps interrupts off, so process
//! context (registration, flow attach), softirq (the zero-copy receive path
//! moving the NIC's cursor) and the interrupt handler can all use the queue;
//! nothing here sleeps but [`CmdQueue::wait`]. Each posted command has a
//! slot, indexed by its cookie, saying what to do with its completion: keep
//! it for a caller that waits for it ([`CmdQueue::wait`], process context,
//! woken by whoever reaps it), or hand it to a [`CmdDone`] callback.
//! Completions are reaped by whoever comes first: the `VEC_ASYNC` interrupt
//! handler or a waiter.
//!
//! The NIC executes commands in order, one at a time (hardware spec §10), so
//! a command posted after another sees the other's effect. When the ring is
//! full, commands wait in a backlog and are posted as completions free
//! slots. The backlog is bounded for commands nobody waits for (the data
//! path's): flows can have far more of those outstanding (up to
//! `MS_PER_FLOW` receive segments each, on up to `FLOW_CAPACITY` flows) than
//! is worth queueing here, so a full backlog hands such a command back and
//! registers its submitter ([`CmdRoom`]), which keeps its commands itself and
//! is called once the backlog has room. Commands a caller waits for
//! (registration, flow attach and removal) always get into the backlog:
//! there are at most as many as sleeping callers.

use kernel::{
    device::{
        Bound,
        Device, //
    },
    new_condvar,
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
        CondVar,
        SpinLockIrq, //
    },
    time::{
        msecs_to_jiffies,
        Instant,
        Monotonic, //
    }, //
};

use crate::{
    fifo::Fifo,
    hw::{
        cmd::{
            CmdCompletion,
            CmdEntry, //
        },
        regs,
        status, //
    },
    nic_regs::{
        NicRegs,
        QueueRegs,
        Regs, //
    },
    ring::{
        wait_enabled,
        Ring, //
    },
};

/// The errno a command's refusal stands for (`status`, not `ST_OK`): the one
/// map from a NIC status to an errno. A table or list full is `ENOSPC`, a
/// tuple installed twice `EEXIST`, an unknown key or flow `ENOENT`, a
/// region without the right `EACCES`, a range or field the NIC refuses
/// `EINVAL`, a port it does not have `ENODEV`; anything else (`ST_DMA`, an
/// unknown opcode or status) is the NIC failing a well-formed command, `EIO`.
pub(crate) fn status_errno(st: u16) -> Error {
    match st {
        status::ST_NO_SPACE => ENOSPC,
        status::ST_EXISTS => EEXIST,
        status::ST_BAD_KEY | status::ST_NOT_FOUND => ENOENT,
        status::ST_ACCESS => EACCES,
        status::ST_BOUNDS | status::ST_BAD_DESC => EINVAL,
        status::ST_PORT => ENODEV,
        _ => EIO,
    }
}

/// How long a command's waiter sleeps at most before it looks at the
/// completion queue itself: the completion's interrupt normally wakes it
/// long before.
const WAIT_LOOK_MS: u32 = 4;

/// Entries of the command and command completion queues.
pub(crate) const CMDQ_ENTRIES: u32 = 64;

/// Commands nobody waits for that may wait for ring room; beyond this they
/// stay with their submitter ([`CmdQueue::submit_or_wait`]).
const BACKLOG_MAX: usize = 1024;

/// Submitters waiting for backlog room are called once it is at most this
/// long, so that each finds room for a batch.
const BACKLOG_ROOM: usize = BACKLOG_MAX / 2;

/// Submitters the queue can hold waiting for room without allocating (one
/// per flow, and flows are bounded by the NIC's Flow Table).
const ROOM_WAITERS: usize = crate::hw::regs::FLOW_CAPACITY as usize;

/// What happens once a command completed. Runs in any context (possibly the
/// interrupt handler), not under the queue's lock: it must not sleep and may
/// only take locks that are safe in hard interrupt context.
pub(crate) trait CmdDone: Send + Sync {
    /// `c` is the command's completion (any status).
    fn done(self: Arc<Self>, c: &CmdCompletion);
}

/// A submitter whose commands wait, with it, for room in the backlog.
pub(crate) trait CmdRoom: Send + Sync {
    /// The backlog has room: submit what waits. Runs in any context, not
    /// under the queue's lock, like [`CmdDone::done`].
    fn room(self: Arc<Self>);
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

/// What one reaping pass found to do once the lock is released: the
/// callbacks of completed commands, and the submitters that waited for room.
struct Done {
    callbacks: [Option<(Arc<dyn CmdDone>, CmdCompletion)>; REAP_BATCH],
    room: KVec<Arc<dyn CmdRoom>>,
    /// A waited-for completion arrived: wake the waiter.
    wake: bool,
}

impl Done {
    fn new() -> Self {
        Self {
            callbacks: [const { None }; REAP_BATCH],
            room: KVec::new(),
            wake: false,
        }
    }

    /// Whether there is nothing to do once the lock is released.
    fn is_empty(&self) -> bool {
        !self.wake && self.room.is_empty() && self.callbacks.iter().all(Option::is_none)
    }
}

/// A command waiting for ring room.
struct Backlogged {
    cmd: CmdEntry,
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
    /// Commands posted while the ring was full, in order: at most
    /// [`BACKLOG_MAX`] nobody waits for, and the one a caller waits for
    /// (callers wait one at a time, under the control lock), so pushing
    /// never fails for lack of room.
    backlog: Fifo<Backlogged>,
    /// Submitters waiting for backlog room, each at most once (the submitter
    /// keeps the flag), oldest first.
    room_waiters: KVec<Arc<dyn CmdRoom>>,
    /// An empty list with room for [`ROOM_WAITERS`], swapped in when the
    /// waiters are taken (none while they are being called).
    spare_waiters: KVec<Arc<dyn CmdRoom>>,
    /// Completions consumed since the queue was created (free-running): a
    /// waiter sees the NIC progress by it.
    completed: u64,
    /// The last reaping pass stopped at its batch size (more may be there).
    batch_full: bool,
}

/// A command queue and its completion queue.
#[pin_data]
pub(crate) struct CmdQueue {
    regs: Arc<NicRegs>,
    #[pin]
    inner: SpinLockIrq<Inner>,
    /// Notified when a completion someone waits for is reaped.
    #[pin]
    reaped: CondVar,
}

impl CmdQueue {
    /// Allocates the rings (enabled by [`CmdQueue::enable`]).
    ///
    /// # Errors
    ///
    /// - `ENOMEM` if the rings or the slot, waiter and backlog lists cannot be allocated.
    pub(crate) fn new(
        dev: &Device<Bound>,
        regs: Arc<NicRegs>,
    ) -> Result<impl PinInit<Self, Error>> {
        let cmdq = Ring::<64>::new(dev, CMDQ_ENTRIES, QueueRegs::CMDQ)?;
        let cmdcq = Ring::<16>::new(dev, CMDQ_ENTRIES, QueueRegs::CMDCQ)?;
        let mut slots = KVec::with_capacity(CMDQ_ENTRIES as usize, GFP_KERNEL)?;
        for _ in 0..CMDQ_ENTRIES {
            slots.push((0, 0, Slot::Free), GFP_KERNEL)?;
        }
        let room_waiters = KVec::with_capacity(ROOM_WAITERS, GFP_KERNEL)?;
        let spare_waiters = KVec::with_capacity(ROOM_WAITERS, GFP_KERNEL)?;
        let backlog = Fifo::new(BACKLOG_MAX + 1)?;
        Ok(try_pin_init!(Self {
            regs,
            inner <- new_spinlock_irq!(Inner {
                rings: Some((cmdq, cmdcq)),
                accepting: true,
                next_cookie: 0,
                prod: 0,
                cons: 0,
                slots,
                backlog,
                room_waiters,
                spare_waiters,
                completed: 0,
                batch_full: false,
            }, "zeronic::cmdq"),
            reaped <- new_condvar!("zeronic::cmdq::reaped"),
        }? Error))
    }

    /// Enables both queues on the NIC (hardware spec §3). Process context.
    ///
    /// # Errors
    ///
    /// - `ENODEV` if the rings were taken away, or once the device is unbound.
    /// - `EIO` if the NIC refuses a queue's configuration.
    /// - `ETIMEDOUT` if the NIC does not answer.
    /// - `EINVAL` as [`Regs::set_queue32`] (never).
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
        let waiters = {
            let mut inner = self.inner.lock();
            inner.accepting = false;
            core::mem::take(&mut inner.room_waiters)
        };
        // Nothing will be posted for them: their references go (outside
        // the lock, as a submitter may be dropped with them).
        drop(waiters);
    }

    /// Takes the rings away (teardown: the caller frees or leaks them).
    pub(crate) fn take_rings(&self) -> Option<(Ring<64>, Ring<16>)> {
        let (rings, waiters) = {
            let mut inner = self.inner.lock();
            inner.accepting = false;
            (inner.rings.take(), core::mem::take(&mut inner.room_waiters))
        };
        drop(waiters);
        rings
    }

    /// Posts `cmd`; its completion goes to `on_done` (if any). Any context.
    ///
    /// `Ok(false)` if the ring and the backlog are full: nothing was posted,
    /// and `waiter` (unless `*waiting`, which says it is registered already;
    /// set here when it is) is called once the backlog has room. The
    /// submitter keeps its command until then and submits it again.
    ///
    /// # Errors
    ///
    /// - `ENODEV` once the queue is closed, or the device is unbound.
    /// - `ENOMEM` if the waiters cannot grow (more of them than flows).
    /// - `EINVAL` as [`Regs::set_queue32`] (never).
    pub(crate) fn submit_or_wait(
        &self,
        cmd: CmdEntry,
        on_done: Option<Arc<dyn CmdDone>>,
        waiter: &Arc<dyn CmdRoom>,
        waiting: &mut bool,
    ) -> Result<bool> {
        let mut inner = self.inner.lock();
        if inner.backlog.len() >= BACKLOG_MAX {
            if !inner.accepting || inner.rings.is_none() {
                return Err(ENODEV);
            }
            Self::want_room_locked(&mut inner, waiter, waiting)?;
            return Ok(false);
        }
        self.post(&mut inner, cmd, Slot::Callback(on_done))?;
        Ok(true)
    }

    /// Registers `waiter` to be called when the backlog has room (unless
    /// `*waiting`). For a submitter that just posted commands and stops to
    /// let others have the ring: their completions make sure it is called.
    ///
    /// # Errors
    ///
    /// - `ENODEV` once the queue is closed.
    /// - `ENOMEM` if the waiters cannot grow (more of them than flows).
    pub(crate) fn want_room(&self, waiter: &Arc<dyn CmdRoom>, waiting: &mut bool) -> Result {
        let mut inner = self.inner.lock();
        if !inner.accepting {
            return Err(ENODEV);
        }
        Self::want_room_locked(&mut inner, waiter, waiting)
    }

    fn want_room_locked(
        inner: &mut Inner,
        waiter: &Arc<dyn CmdRoom>,
        waiting: &mut bool,
    ) -> Result {
        if !*waiting {
            inner.room_waiters.push(waiter.clone(), GFP_ATOMIC)?;
            *waiting = true;
        }
        Ok(())
    }

    /// Posts `cmd` and waits for its completion.
    ///
    /// Process context. Sleeps until the `VEC_ASYNC` handler reaps the
    /// completion and wakes it, and looks at the completion queue itself at
    /// least every [`WAIT_LOOK_MS`], so that it does not depend on the
    /// interrupt (none yet, or one that came while it was looking). The
    /// sleep is uninterruptible: the command may still name memory, so a
    /// signal must not end the wait. The command may wait behind a long
    /// backlog: the wait times out only once the NIC has completed no
    /// command at all for `timeout_ms`. If the wait fails once the command
    /// is posted, the queue is closed: the caller must treat the NIC as
    /// broken and the command as possibly still executing. At most one
    /// command is waited for at a time (the caller's lock sees to it).
    ///
    /// # Errors
    ///
    /// - `ENODEV` if the queue is closed (nothing posted), or the device is unbound.
    /// - `ETIMEDOUT` once the NIC has completed no command at all for `timeout_ms`.
    /// - `EIO` once the NIC reports a fatal error (`DEV_STATUS_FATAL`).
    /// - `EBUSY` if the backlog is full (only if two callers wait at once).
    /// - `EINVAL` as [`Regs::set_queue32`] (never).
    pub(crate) fn wait(&self, cmd: CmdEntry, timeout_ms: i64) -> Result<CmdCompletion> {
        let (cookie, mut seen) = {
            let mut inner = self.inner.lock();
            let cookie = self.post(&mut inner, cmd, Slot::Waited(None))?;
            (cookie, inner.completed)
        };
        let mut progress = Instant::<Monotonic>::now();
        let look = msecs_to_jiffies(WAIT_LOOK_MS);
        let waited = loop {
            let r = match self.regs.get() {
                Ok(r) => r,
                Err(e) => break Err(e),
            };
            if r.reg32::<{ regs::REG_DEV_STATUS }>() & regs::DEV_STATUS_FATAL != 0 {
                break Err(EIO);
            }
            let mut inner = self.inner.lock();
            let done = Self::reap_locked(&mut inner, &r);
            // A NIC that completes commands is alive, however long the
            // backlog this one waits behind.
            let stalled = if inner.completed != seen {
                seen = inner.completed;
                progress = Instant::<Monotonic>::now();
                false
            } else {
                progress.elapsed().as_millis() > timeout_ms
            };
            let mut result = None;
            // `None` while the command still waits in the backlog.
            if let Some(slot) = inner.slot(cookie) {
                if let Slot::Waited(Some(c)) = slot {
                    result = Some(*c);
                    *slot = Slot::Free;
                    // The slot may be what a backlogged command waited for.
                    Self::flush_backlog(&mut inner, &r);
                }
            }
            drop(r);
            if result.is_some() || stalled || !done.is_empty() {
                drop(inner);
                self.run_callbacks(done);
                match result {
                    Some(c) => break Ok(c),
                    None if stalled => break Err(ETIMEDOUT),
                    None => continue,
                }
            }
            // Nothing else to do: sleep until a completion is reaped (the
            // handler wakes this after taking the lock, so none is missed
            // between the look above and the sleep) or the next look.
            let _ = self.reaped.wait_timeout(&mut inner, look);
        };
        match waited {
            Ok(c) => Ok(c),
            Err(e) => {
                let mut inner = self.inner.lock();
                inner.accepting = false;
                // A late completion finds nobody waiting.
                if let Some(slot) = inner.slot(cookie) {
                    *slot = Slot::Callback(None);
                } else if let Some(b) = inner.backlog.iter_mut().find(|b| b.cookie == cookie) {
                    b.slot = Slot::Callback(None);
                }
                Err(e)
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
            self.run_callbacks(done);
            if !more {
                break;
            }
        }
    }

    /// Runs the callbacks of reaped commands, then calls the submitters
    /// that waited for room, outside the lock.
    fn run_callbacks(&self, done: Done) {
        if done.wake {
            self.reaped.notify_all();
        }
        for (cb, c) in done.callbacks.into_iter().flatten() {
            cb.done(&c);
        }
        let mut room = done.room;
        if room.capacity() == 0 {
            return;
        }
        for w in room.drain_all() {
            w.room();
        }
        let mut inner = self.inner.lock();
        if inner.spare_waiters.capacity() < room.capacity() {
            // The old spare (none, or smaller) is freed here, which is
            // fine under a spinlock.
            inner.spare_waiters = room;
        }
    }

    /// Posts `cmd` into the ring, or the backlog if the ring is full
    /// (whatever its length: callers bound what they put there).
    fn post(&self, inner: &mut Inner, cmd: CmdEntry, slot: Slot) -> Result<u32> {
        if !inner.accepting || inner.rings.is_none() {
            return Err(ENODEV);
        }
        let cookie = inner.next_cookie;
        if inner.backlog.is_empty() && inner.can_write(cookie) {
            let r = self.regs.get()?;
            Self::write(inner, &r, cmd, cookie, slot)?;
            r.doorbell(regs::DB_CMD)?;
        } else {
            // Cannot be full: see `Inner::backlog`.
            if inner
                .backlog
                .push(Backlogged { cmd, cookie, slot })
                .is_err()
            {
                return Err(EBUSY);
            }
        }
        inner.next_cookie = cookie.wrapping_add(1);
        Ok(cookie)
    }

    /// Posts backlogged commands while there is room, in order.
    fn flush_backlog(inner: &mut Inner, r: &Regs<'_>) {
        let mut posted = false;
        while inner
            .backlog
            .front()
            .is_some_and(|b| inner.can_write(b.cookie))
        {
            let Some(b) = inner.backlog.pop() else {
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
    fn write(inner: &mut Inner, r: &Regs<'_>, cmd: CmdEntry, cookie: u32, slot: Slot) -> Result {
        let cmd = cmd.with_cookie(cookie);
        *inner.entry(cookie).ok_or(EINVAL)? = (cookie, cmd.opcode(), slot);
        let (cmdq, _) = inner.rings.as_ref().ok_or(ENODEV)?;
        cmdq.write(inner.prod, cmd.bytes())?;
        inner.prod = inner.prod.wrapping_add(1);
        // Entry before index (spec §5).
        mb(Write);
        cmdq.set_prod(r, inner.prod)
    }

    /// Consumes completions; returns the callbacks to run once the lock is
    /// released.
    fn reap_locked(inner: &mut Inner, r: &Regs<'_>) -> Done {
        let mut done = Done::new();
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
                    *slot = Slot::Waited(Some(c));
                    done.wake = true;
                }
                Some((cookie, opcode, slot @ Slot::Callback(_)))
                    if *cookie == c.cookie && *opcode == c.opcode =>
                {
                    if let Slot::Callback(Some(cb)) = core::mem::replace(slot, Slot::Free) {
                        // At most one per ring entry: `budget` bounds `n`.
                        if let Some(d) = done.callbacks.get_mut(n) {
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
            inner.completed = inner.completed.wrapping_add(1);
            budget -= 1;
        }
        // CAST: REAP_BATCH is small.
        inner.batch_full = inner.cons.wrapping_sub(start) == REAP_BATCH as u32;
        if inner.cons == start {
            return done;
        }
        if let Some((_, cmdcq)) = inner.rings.as_ref() {
            let _ = cmdcq.set_cons(r, inner.cons);
        }
        // Room freed: post what waited for it, in order.
        Self::flush_backlog(inner, r);
        if !inner.room_waiters.is_empty() && inner.backlog.len() <= BACKLOG_ROOM {
            // Swapped for the spare list, so that registering again (from
            // the calls) allocates nothing; the list comes back as the
            // spare once they were made.
            let spare = core::mem::take(&mut inner.spare_waiters);
            done.room = core::mem::replace(&mut inner.room_waiters, spare);
        }
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

// SPDX-License-Identifier: GPL-2.0

//! A flow's notify queue pair follows its application's CPU (aRFS for
//! attached flows; hardware spec §14, `qp_track.rs`).
//!
//! A flow is installed with the queue pair whose RX interrupt last came on
//! the attaching task's CPU. Whenever its application comes back to the
//! flow (a read of a served socket, a post or ring return through the char
//! device), the flow checks that its queue pair is still the one
//! interrupted on the CPU the application now runs on; if another one is,
//! it asks the NIC to move it (`FLOWU_QUEUE`), one move per port at a
//! time. From the request on, the flow's entries on any other queue pair
//! wait ([`Flow::may_deliver`]); once the NIC completed the move, the old
//! queue pair's producer indices mark where its entries of the flow end,
//! and the new queue pair's wait until the old one's consumers passed that
//! mark. So TCP gets the flow's entries in the NIC's order, as with one
//! queue. Each wait is bounded ([`MOVE_WAIT_MAX_MS`]): past it the flow's
//! entries go on unfenced (a reordering TCP sorts out), so no stuck move
//! can stop a queue pair and every flow on it.

use kernel::{
    cpu::CpuId,
    sync::{
        atomic::{
            Acquire,
            Relaxed,
            Release, //
        },
        Arc,
    },
    time::{
        Instant,
        Monotonic, //
    },
};

use crate::{
    flow::{
        cmds::owns_index,
        Awaited,
        Flow,
        FlowInner, //
    },
    hw::{
        cmd::{
            CmdCompletion,
            FLOWU_QUEUE, //
        },
        status,
    },
    qp_track::{
        Mark,
        MoveTicket, //
    },
};

/// How long a flow's entries wait for a move at most (from the request
/// for the NIC's answer, then from the answer for the old queue pair): a
/// queue pair stopped for longer than a few interrupt intervals would cost
/// every flow on it more than a reordering costs the one flow (TCP sorts
/// it out). Counted in `zc_flow_move_timeouts` when it happens.
const MOVE_WAIT_MAX_MS: i64 = 50;

/// A move of a flow's notify queue pair, under [`Flow::inner`].
#[derive(Clone, Copy, Default)]
pub(crate) enum QpMove {
    /// None under way: entries are handed on wherever they arrive.
    #[default]
    Idle,
    /// `FLOWU_QUEUE` to another queue pair is with the NIC (asked at
    /// `since`); entries on any queue pair but `from` wait. The flow holds
    /// the port's move slot.
    Asked {
        from: u32,
        ticket: MoveTicket,
        since: Instant<Monotonic>,
    },
    /// As `Asked`, but the wait timed out: entries are handed on wherever
    /// they arrive; the NIC's answer ends the move and frees the slot.
    Abandoned { ticket: MoveTicket },
    /// The NIC moved the flow (answered at `since`); entries on any queue
    /// pair but `mark.qp` wait until it handed on those below `mark`.
    Fenced {
        mark: Mark,
        since: Instant<Monotonic>,
    },
}

/// Whether a wait that began at `since` is over its bound.
fn waited_too_long(since: &Instant<Monotonic>) -> bool {
    since.elapsed().as_millis() > MOVE_WAIT_MAX_MS
}

impl Flow {
    /// The flow's notify queue pair as the driver last set it.
    pub(crate) fn queue(&self) -> u32 {
        self.queue.load(Relaxed)
    }

    /// Moves the flow's notify queue pair to the one whose RX interrupt
    /// last came on the current CPU, if that is another one and no move is under way.
    /// Process context, on the application's behalf; cheap when nothing
    /// changes (two relaxed loads).
    pub(crate) fn follow_cpu(self: &Arc<Self>) {
        if self.moving.load(Relaxed) {
            return;
        }
        let Some(snap) = self.control.port(self.port) else {
            return;
        };
        let cpu = CpuId::current().as_u32();
        let from = self.queue();
        if snap.qps.runs_on(from, cpu) {
            return;
        }
        let Some(to) = snap.qps.queue_on_cpu(cpu) else {
            return;
        };
        if to == from {
            return;
        }
        let mut inner = self.inner.lock();
        // Commands waiting for room go first, in order; a move can wait
        // for the next call.
        if !matches!(inner.qp_move, QpMove::Idle) || !owns_index(&inner) || inner.deferred.any() {
            return;
        }
        // Another flow of the port is moving: later.
        let Some(ticket) = snap.qps.begin_move() else {
            return;
        };
        inner.qp_move = QpMove::Asked {
            from,
            ticket,
            since: Instant::now(),
        };
        self.moving.store(true, Release);
        let cmd = self.update_cmd(FLOWU_QUEUE, u64::from(to));
        if !matches!(
            self.give(&mut inner, cmd, Some(Awaited::Queue(to)), false),
            Ok(true)
        ) {
            // Not given (no room, or the NIC is going): no move.
            snap.qps.end_move(ticket);
            Self::move_done(&mut inner, self);
        }
    }

    /// Ends a move: entries are handed on wherever they arrive again.
    fn move_done(inner: &mut FlowInner, flow: &Flow) {
        inner.qp_move = QpMove::Idle;
        flow.moving.store(false, Release);
    }

    /// The NIC completed the flow's `FLOWU_QUEUE` to queue pair `to`
    /// (completion context, `inner` held).
    pub(crate) fn queue_moved(&self, inner: &mut FlowInner, c: &CmdCompletion, to: u32) {
        let Some(snap) = self.control.port(self.port) else {
            return;
        };
        let (from, ticket) = match inner.qp_move {
            QpMove::Asked { from, ticket, .. } => (from, ticket),
            QpMove::Abandoned { ticket } => {
                // Its entries went on unfenced already: no mark to wait for.
                if c.status == status::ST_OK {
                    self.queue.store(to, Relaxed);
                    snap.zc.flow_moves.add(1, Relaxed);
                }
                snap.qps.end_move(ticket);
                Self::move_done(inner, self);
                return;
            }
            _ => return,
        };
        if c.status != status::ST_OK {
            snap.qps.end_move(ticket);
            Self::move_done(inner, self);
            return;
        }
        self.queue.store(to, Relaxed);
        snap.zc.flow_moves.add(1, Relaxed);
        match self.control.qp_mark(self.port, from) {
            Ok(mark) => {
                snap.qps.move_marked(ticket, &mark);
                inner.qp_move = QpMove::Fenced {
                    mark,
                    since: Instant::now(),
                };
            }
            // The NIC is gone: no entry of it comes any more.
            Err(_) => {
                snap.qps.end_move(ticket);
                Self::move_done(inner, self);
            }
        }
    }

    /// Whether the flow's entry on queue pair `qp` may be handed to TCP now
    /// (NAPI context; see the module's comment).
    pub(crate) fn may_deliver(&self, qp: u32) -> bool {
        if !self.moving.load(Acquire) {
            return true;
        }
        let Some(snap) = self.control.port(self.port) else {
            return true;
        };
        let mut inner = self.inner.lock();
        match inner.qp_move {
            QpMove::Idle | QpMove::Abandoned { .. } => true,
            QpMove::Asked { from, .. } if qp == from => true,
            QpMove::Asked { ticket, since, .. } => {
                if !waited_too_long(&since) {
                    return false;
                }
                snap.zc.flow_move_timeouts.add(1, Relaxed);
                inner.qp_move = QpMove::Abandoned { ticket };
                true
            }
            QpMove::Fenced { mark, .. } if qp == mark.qp => true,
            QpMove::Fenced { mark, since } => {
                if snap.qps.passed(&mark) {
                    Self::move_done(&mut inner, self);
                    return true;
                }
                if !waited_too_long(&since) {
                    return false;
                }
                snap.zc.flow_move_timeouts.add(1, Relaxed);
                Self::move_done(&mut inner, self);
                true
            }
        }
    }
}

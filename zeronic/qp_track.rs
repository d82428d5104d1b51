// SPDX-License-Identifier: GPL-2.0

//! Where a port's queue pairs are serviced, and how far: what an attached
//! flow's notify queue pair follows (hardware spec §14, "Notify queue of a
//! flow"; the idea of aRFS).
//!
//! Each queue pair's RX vector notes the CPU its interrupt is delivered on
//! ([`QpTrack::interrupted`]): where the NIC's entries for the queue pair
//! start being handled, so where a flow's receive work lands. An
//! application on CPU `c` wants its flow on the queue pair whose RX
//! interrupt last came on `c` ([`QpTrack::queue_on_cpu`]). Not the CPU of
//! the poll: queue pair 0's TX vector schedules the same NAPI from wherever
//! its own interrupt goes. Its NAPI notes, at the end of every poll, its
//! header queue's and RX completion queue's consumer indices
//! ([`QpTrack::consumed`]): every entry below them was handed to GRO, which
//! the core flushes into TCP as the poll returns.
//!
//! Moving a flow never reorders its entries: once the NIC completed the
//! move (`FLOWU_QUEUE`), the old queue pair's producer indices bound every
//! entry of the flow written before it ([`QpTrack::mark`]), and the flow's
//! entries on the new queue pair wait until the old one's consumers passed
//! them ([`QpTrack::passed`]). A queue pair whose rings were made again
//! (the port restarted, channels changed) starts a new epoch: its old
//! entries are gone, so a mark of an earlier epoch is passed.
//!
//! A port moves one flow at a time ([`QpTrack::begin_move`]): with two
//! flows swapping queue pairs at once, each queue pair could stop at an
//! entry of one flow while holding back entries the other flow's fence
//! waits for. One fence at a time never waits on a queue pair that waits
//! itself. The port's move ends when its mark is passed, whether or not
//! the flow that made it still has entries to notice.
//!
//! Everything here is a hint read and written with relaxed atomics, except
//! the consumer indices, which are published after the entries before them
//! were handed on (release) and read before the flow's later entries are
//! (acquire).

use kernel::{
    prelude::*,
    sync::atomic::{
        Acquire,
        Atomic,
        Relaxed,
        Release, //
    },
};

use crate::{
    hw::regs,
    nic_regs::{
        NicRegs,
        PortQueue,
        QueuePairRegs, //
    },
};

/// No RX interrupt of the queue pair came yet.
const NO_CPU: u32 = u32::MAX;

/// One queue pair's service, as its RX vector and NAPI last reported it.
struct QpState {
    /// CPU of the last RX interrupt, or [`NO_CPU`].
    cpu: Atomic<u32>,
    /// Bumped whenever the queue pair's rings are made again.
    epoch: Atomic<u32>,
    /// Header queue entries consumed (free-running, as `Q_CONS`).
    hdr_cons: Atomic<u32>,
    /// RX completions consumed (free-running, as `Q_CONS`).
    rx_cons: Atomic<u32>,
}

impl QpState {
    const fn new() -> Self {
        Self {
            cpu: Atomic::new(NO_CPU),
            epoch: Atomic::new(0),
            hdr_cons: Atomic::new(0),
            rx_cons: Atomic::new(0),
        }
    }
}

/// Where a queue pair's entries written before a flow's move end.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Mark {
    /// The queue pair the flow left.
    pub(crate) qp: u32,
    epoch: u32,
    hdr: u32,
    rx: u32,
}

/// The port's move slot ([`QpTrack::begin_move`]): a sequence number
/// above the two low bits, which say whether it is free, asked (the NIC has
/// not completed the move) or marked ([`QpTrack::mover_mark`] holds the mark).
const MOVE_FREE: u64 = 0;
const MOVE_ASKED: u64 = 1;
const MOVE_MARKED: u64 = 2;
const MOVE_STATE: u64 = 3;

/// The port's move slot, taken by [`QpTrack::begin_move`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct MoveTicket(u64);

/// A port's queue pairs: how many are active, where each is serviced and
/// how far it consumed, and the one move of a flow under way.
pub(crate) struct QpTrack {
    /// Active queue pairs; 0 while the port is down.
    active: Atomic<u32>,
    qps: [QpState; regs::MAX_QP as usize],
    /// The move slot: sequence number and `MOVE_*` state.
    mover: Atomic<u64>,
    /// The mark of the move in the slot (queue pair, epoch, header and RX
    /// completion indices), written while it is asked and read once it is
    /// marked; the sequence number tells a reader whether it changed.
    mover_mark: [Atomic<u32>; 4],
}

/// Whether free-running index `cons` reached `mark`.
fn reached(cons: u32, mark: u32) -> bool {
    // CAST: the distance of two free-running indices, within half the range.
    cons.wrapping_sub(mark) as i32 >= 0
}

impl QpTrack {
    pub(crate) const fn new() -> Self {
        Self {
            active: Atomic::new(0),
            qps: [const { QpState::new() }; regs::MAX_QP as usize],
            mover: Atomic::new(MOVE_FREE),
            mover_mark: [const { Atomic::new(0) }; 4],
        }
    }

    fn qp(&self, k: u32) -> Option<&QpState> {
        // CAST: u32 -> usize is lossless on every architecture Linux supports.
        self.qps.get(k as usize)
    }

    /// The port now runs `n` queue pairs (0: it stopped, and a move under
    /// way is forgotten: its queue pairs' rings go).
    pub(crate) fn set_active(&self, n: u32) {
        self.active.store(n, Relaxed);
        if n == 0 {
            let s = self.mover.load(Relaxed);
            let _ = self.mover.cmpxchg(s, Self::next(s, MOVE_FREE), Relaxed);
        }
    }

    /// The slot word after `s` with state `state`.
    fn next(s: u64, state: u64) -> u64 {
        ((s >> 2).wrapping_add(1) << 2) | state
    }

    /// Takes the port's move slot for one flow's move, if it is free or the
    /// move in it is done (its mark passed).
    pub(crate) fn begin_move(&self) -> Option<MoveTicket> {
        let s = self.mover.load(Acquire);
        let free = match s & MOVE_STATE {
            MOVE_FREE => true,
            MOVE_MARKED => {
                let [qp, epoch, hdr, rx] = self.mover_mark.each_ref().map(|a| a.load(Relaxed));
                // A torn read (another flow took the slot meanwhile) is
                // refused by the exchange below.
                self.passed(&Mark { qp, epoch, hdr, rx })
            }
            _ => false,
        };
        if !free {
            return None;
        }
        let t = Self::next(s, MOVE_ASKED);
        self.mover
            .cmpxchg(s, t, Acquire)
            .ok()
            .map(|_| MoveTicket(t))
    }

    /// The NIC completed the move of ticket `t`: the slot is free once `m`
    /// is passed.
    pub(crate) fn move_marked(&self, t: MoveTicket, m: &Mark) {
        if self.mover.load(Relaxed) != t.0 {
            return;
        }
        for (a, v) in self.mover_mark.iter().zip([m.qp, m.epoch, m.hdr, m.rx]) {
            a.store(v, Relaxed);
        }
        let _ = self
            .mover
            .cmpxchg(t.0, Self::next(t.0, MOVE_MARKED), Release);
    }

    /// The move of ticket `t` did not happen: the slot is free.
    pub(crate) fn end_move(&self, t: MoveTicket) {
        let _ = self.mover.cmpxchg(t.0, Self::next(t.0, MOVE_FREE), Relaxed);
    }

    /// Queue pair `k`'s rings were made: their indices start at 0 in a new
    /// epoch, and no interrupt came yet. Called before its NAPI is enabled.
    pub(crate) fn rings_made(&self, k: u32) {
        if let Some(q) = self.qp(k) {
            q.hdr_cons.store(0, Relaxed);
            q.rx_cons.store(0, Relaxed);
            q.cpu.store(NO_CPU, Relaxed);
            q.epoch.fetch_add(1, Release);
        }
    }

    /// Queue pair `k`'s RX interrupt came on `cpu`.
    pub(crate) fn interrupted(&self, k: u32, cpu: u32) {
        if let Some(q) = self.qp(k) {
            // Written only when it changes: other CPUs read it.
            if q.cpu.load(Relaxed) != cpu {
                q.cpu.store(cpu, Relaxed);
            }
        }
    }

    /// Queue pair `k`'s NAPI handed on every entry below `hdr_cons` and
    /// `rx_cons`.
    pub(crate) fn consumed(&self, k: u32, hdr_cons: u32, rx_cons: u32) {
        if let Some(q) = self.qp(k) {
            q.hdr_cons.store(hdr_cons, Release);
            q.rx_cons.store(rx_cons, Release);
        }
    }

    /// Whether active queue pair `k`'s RX interrupt last came on `cpu`.
    pub(crate) fn runs_on(&self, k: u32, cpu: u32) -> bool {
        k < self.active.load(Relaxed) && self.qp(k).is_some_and(|q| q.cpu.load(Relaxed) == cpu)
    }

    /// The lowest active queue pair whose RX interrupt last came on `cpu`,
    /// if any.
    pub(crate) fn queue_on_cpu(&self, cpu: u32) -> Option<u32> {
        let active = self.active.load(Relaxed);
        (0..active).find(|&k| self.runs_on(k, cpu))
    }

    /// Where port `port`'s queue pair `k`'s header queue and RX completion
    /// queue end now (their `Q_PROD`), in its current epoch.
    ///
    /// # Errors
    ///
    /// - `ENODEV` if the NIC is gone.
    /// - `EINVAL` if `port` or `k` is out of range.
    pub(crate) fn mark(&self, regs: &NicRegs, port: u32, k: u32) -> Result<Mark> {
        let q = self.qp(k).ok_or(EINVAL)?;
        let epoch = q.epoch.load(Acquire);
        let block = QueuePairRegs::new(port, k)?;
        let r = regs.get()?;
        let hdr = r.queue32::<{ regs::Q_PROD }>(block.queue(PortQueue::Header))?;
        let rx = r.queue32::<{ regs::Q_PROD }>(block.queue(PortQueue::RxCompletion))?;
        Ok(Mark {
            qp: k,
            epoch,
            hdr,
            rx,
        })
    }

    /// Whether every entry below `m` was handed on, or its queue pair's
    /// rings were made again since (then they are gone).
    pub(crate) fn passed(&self, m: &Mark) -> bool {
        let Some(q) = self.qp(m.qp) else {
            return true;
        };
        if q.epoch.load(Acquire) != m.epoch {
            return true;
        }
        reached(q.hdr_cons.load(Acquire), m.hdr) && reached(q.rx_cons.load(Acquire), m.rx)
    }
}

#[kernel::macros::kunit_tests(zeronic_qp_track)]
mod tests {
    use super::*;

    /// A flow moves to the queue pair interrupted on its application's CPU,
    /// and only among the active ones.
    #[test]
    fn queue_on_cpu_follows_polls() {
        let t = QpTrack::new();
        t.set_active(2);
        assert_eq!(t.queue_on_cpu(1), None);
        t.interrupted(1, 1);
        t.interrupted(0, 0);
        assert_eq!(t.queue_on_cpu(1), Some(1));
        assert_eq!(t.queue_on_cpu(0), Some(0));
        assert!(t.runs_on(1, 1));
        t.interrupted(1, 0);
        // Both on CPU 0: the lowest.
        assert_eq!(t.queue_on_cpu(0), Some(0));
        assert_eq!(t.queue_on_cpu(1), None);
        t.set_active(1);
        t.interrupted(1, 1);
        assert_eq!(t.queue_on_cpu(1), None);
        assert!(!t.runs_on(1, 1));
    }

    /// A mark is passed once both consumers reach it, across the indices'
    /// wrap, or once the rings are made again.
    #[test]
    fn marks_pass_by_consumers_or_epoch() {
        let t = QpTrack::new();
        t.set_active(2);
        t.rings_made(1);
        let epoch = t.qps[1].epoch.load(Relaxed);
        let m = Mark {
            qp: 1,
            epoch,
            hdr: 5,
            rx: u32::MAX - 1,
        };
        t.consumed(1, 4, u32::MAX - 1);
        assert!(!t.passed(&m));
        t.consumed(1, 5, u32::MAX - 2);
        assert!(!t.passed(&m));
        t.consumed(1, 5, 3);
        assert!(t.passed(&m));
        t.consumed(1, 0, 0);
        assert!(!t.passed(&m));
        t.rings_made(1);
        assert!(t.passed(&m));
        let far = Mark { qp: 7, ..m };
        assert!(t.passed(&far));
    }

    /// One move at a time per port: the slot is free again once the move
    /// was abandoned, or its mark passed, or the port stopped.
    #[test]
    fn one_move_at_a_time() {
        let t = QpTrack::new();
        t.set_active(2);
        t.rings_made(0);
        let a = t.begin_move().expect("free at first");
        assert!(t.begin_move().is_none());
        t.end_move(a);
        let b = t.begin_move().expect("free after an abandoned move");
        assert_ne!(a, b);
        let epoch = t.qps[0].epoch.load(Relaxed);
        t.move_marked(
            b,
            &Mark {
                qp: 0,
                epoch,
                hdr: 3,
                rx: 0,
            },
        );
        assert!(t.begin_move().is_none());
        t.consumed(0, 3, 0);
        let c = t.begin_move().expect("free once the mark passed");
        // A stale ticket changes nothing.
        t.end_move(b);
        assert!(t.begin_move().is_none());
        t.set_active(0);
        assert!(t.begin_move().is_some());
        t.end_move(c);
    }
}

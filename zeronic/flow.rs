// SPDX-License-Identifier: GPL-2.0

//! Flows: established TCP sockets attached to the NIC (`ZERONIC_IOC_FLOW_*`).
//!
//! A [`Flow`] ties a socket (through the `zeronic` TCP ULP, `ulp.rs`), a NIC
//! flow (Flow Table entry, placement cursor, receive segments or ring) and a
//! completion queue together. Its receive stream starts at the socket's
//! `copied_seq` when it was attached: stream offset 0 is the first byte the
//! application had not read.
//!
//! **Receive.** The NIC places payload into the posted segments (message
//! mode) or the ring (stream mode) and reports each packet on the port's
//! header queue; the NAPI poller builds skbs over those pages (`hdrq.rs`) and
//! hands them to TCP. When TCP has accepted bytes in order, the ULP's
//! `sk_data_ready` calls [`Flow::consume`], which walks them with
//! `tcp_read_sock()`: bytes already in place cost nothing (placed), others
//! (frames the NIC delivered whole because nothing was posted, data queued
//! before the attach) are copied into place (copied), after which the NIC's
//! cursor is moved past them (`FLOWU_CURSOR`, posted without waiting).
//! Completions report only bytes TCP accepted in order.
//!
//! **Send** is in `flow/tx.rs`.
//!
//! **Teardown** ([`Flow::detach`]: the ioctl, `close()` of the socket, or the
//! file going away): no more posts; the NIC flow is removed, and only once the
//! NIC confirmed it (it places nothing any more) are the posted segments given
//! back to the application (completions with `ECANCELED`, or `ECONNRESET`
//! after a reset). A connection that dies (reset, timeout) removes its NIC
//! flow from softirq through the command queue; the segments are given back
//! when that command completes. So does the end of the stream (the peer's
//! FIN, or the application's `shutdown(SHUT_RD)`, once consumed): the NIC
//! flow is removed, and the segments are completed (`F_EOF`, status 0) only
//! when that removal completes, so the NIC never writes into a segment the
//! application has back, nor places a later connection of the same tuple
//! into the old flow's memory. Once a removal was asked for, no other
//! command names the flow's index ([`FlowInner::remove_wanted`]). The NIC may give a removed flow's index to
//! the next flow installed, so the driver's slot for it
//! ([`crate::control::Control::remove_flow`]) is freed before each removal is
//! submitted, and a flow is removed from the NIC once: a detach after the
//! reset's removal was submitted waits for it (a later command completing
//! says it did) instead of removing the index again, which may be another
//! flow's by then.
//!
//! Locking: [`Flow::inner`] (a spinlock that keeps interrupts off) guards the
//! receive and send state; it is taken in process context, softirq (TCP's
//! receive path, NAPI) and wherever skbs are freed (send completions). It
//! nests inside the socket lock and outside the CQ's lock and the command
//! queue's (a flow submits its commands under it; the queue calls flows back,
//! `CmdDone` and `CmdRoom`, only after dropping its own) and the NIC's flow
//! slots ([`crate::control::Control`]'s `flows`, a leaf lock); nothing
//! sleeps under it.

use kernel::{
    net::{
        sock::{
            context::LockContext,
            Locked,
            TcpSock,
            TcpState,
            RCV_SHUTDOWN, //
        },
        tcp::{
            Piece,
            RecvChunk, //
        },
    },
    new_mutex, new_spinlock_irq,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
        Mutex,
        SpinLockIrq, //
    },
    workqueue::{
        self,
        impl_has_work,
        new_work,
        Work, //
    },
};

use crate::{
    cmdq::CmdDone,
    control::Control,
    cq::{
        cqe_status,
        Cq,
        Cqe,
        Credit, //
    },
    defer::DropInProcess,
    hw::{
        cmd::{
            CmdCompletion,
            CmdMsPost,
            Command,
            FlowRemove,
            FlowUpdate, //
        },
        status,
    },
    mr::{
        Mr,
        MrShared,
        MrUse, //
    },
    uapi,
};

mod cmds;
mod served;
mod steer;
mod tuple;
pub(crate) mod tx;
mod user;

use cmds::Deferred;
use steer::QpMove;
pub(crate) use tuple::Tuple;
use tx::{
    Pending,
    TxState, //
};

/// Receive segments one flow may have posted (the NIC's `MS_PER_FLOW`).
pub(crate) const MAX_SEGS: usize = crate::hw::regs::MS_PER_FLOW as usize;

/// How far past the consumed bytes the receive window may reach: TCP's
/// largest window (65535 << 14 is just under 2^30), and well inside the 2^31
/// that sequence-number comparisons can order.
const MAX_WINDOW_EDGE: u64 = 1 << 30;

/// CQ entries a flow reserves for its own events: one for EOF or reset, one
/// for the final `DETACHED`.
pub(crate) const EVENT_CREDITS: u32 = 2;

/// Where received bytes go.
pub(crate) enum RxTarget {
    /// Message mode: posted segments, in stream order.
    Segments,
    /// Stream mode: a ring of `size` bytes at `offset` in a region (held
    /// by [`FlowInner::ring`]).
    Ring { offset: u64, size: u64 },
}

/// A posted receive segment (message mode).
pub(crate) struct Seg {
    pub(crate) wr_id: u64,
    pub(crate) mr: Arc<MrShared>,
    /// Offset of the segment in the region.
    pub(crate) mr_off: u64,
    pub(crate) len: u32,
    /// Stream offset of its first byte.
    pub(crate) start: u64,
    /// Whether some of its bytes were copied rather than placed.
    copied: bool,
}

impl Seg {
    /// A segment of `len` bytes at `mr_off` of `mr`, covering the stream from
    /// `start`; it holds one use of `mr` (released when dropped).
    pub(crate) fn new(wr_id: u64, mr: Arc<MrShared>, mr_off: u64, len: u32, start: u64) -> Self {
        Self {
            wr_id,
            mr,
            mr_off,
            len,
            start,
            copied: false,
        }
    }

    pub(crate) fn end(&self) -> u64 {
        self.start + u64::from(self.len)
    }
}

impl Drop for Seg {
    fn drop(&mut self) {
        self.mr.users.fetch_sub(1, Relaxed);
    }
}

/// Lifecycle of a flow.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Phase {
    /// Attached and working.
    Attached,
    /// The connection died (reset, timeout): no more data either way; the
    /// NIC flow is being removed.
    Reset,
    /// Detaching or detached: nothing new is accepted.
    Detached,
}

/// What a flow's command gives the flow when it completes.
pub(crate) enum Awaited {
    /// Receive room (`MS_POST`, `FLOW_UPDATE` of the ring head): `nic_edge`
    /// moves to this stream offset.
    Room(u64),
    /// A `FLOWU_CURSOR`: its result is the NIC's cursor (`nic_confirmed`).
    Cursor,
    /// A `FLOWU_QUEUE` to this queue pair (`flow/steer.rs`).
    Queue(u32),
}

/// Mutable state of a flow, under [`Flow::inner`].
pub(crate) struct FlowInner {
    pub(crate) phase: Phase,
    /// Stream offset up to which TCP's in-order bytes were consumed.
    pub(crate) rx_done: u64,
    /// The NIC's cursor as far as the driver knows (reported or set).
    pub(crate) nic_cursor: u64,
    /// The NIC's cursor as far as the NIC confirmed it: reported by a
    /// header entry, or returned by a completed `FLOWU_CURSOR`. The NIC
    /// never writes below it again (`docs/hardware.md`), so a segment is
    /// given back only once it ends here or below.
    pub(crate) nic_confirmed: u64,
    /// Posted segments, oldest first (message mode).
    pub(crate) segs: KVec<Seg>,
    /// Stream offset where the next posted segment starts.
    pub(crate) posted_end: u64,
    /// Stream mode: the ring's region, with a use of it (`MR_DEREG` is
    /// `EBUSY`) for as long as the NIC or the CPU may write it: taken at
    /// attach, dropped once the flow left `Attached` (the CPU copies
    /// nothing then) and the NIC confirmed the flow's removal
    /// ([`Flow::flush_segments`]).
    pub(crate) ring: Option<MrUse>,
    /// A socket served by TCP: its kernel ring's registration (the region
    /// [`FlowInner::ring`] uses), released at detach, in process context
    /// (invalidated on the NIC first).
    pub(crate) kring: Option<DropInProcess<Mr>>,
    /// Stream mode: bytes the application has consumed (the ring's head).
    pub(crate) ring_head: u64,
    /// Stream mode: bytes reported with `STREAM_DATA` entries so far.
    pub(crate) ring_reported: u64,
    /// Stream mode: whether bytes reported next were (partly) copied.
    pub(crate) ring_copied: bool,
    /// The peer's FIN was consumed.
    pub(crate) eof: bool,
    /// Stream mode: a `STREAM_DATA` entry flagged EOF was posted.
    pub(crate) eof_reported: bool,
    /// The EOF or reset event was posted.
    pub(crate) event_posted: bool,
    /// The flow failed because the NIC refused one of its segments: its
    /// segments go back with `EIO`, not `ECONNRESET`.
    pub(crate) failed_by_nic: bool,
    /// The NIC flow was removed (confirmed): the segments may go back.
    pub(crate) nic_removed: bool,
    /// The reset's or EOF's `CMD_FLOW_REMOVE` was submitted (it completes
    /// later): nothing may remove the flow's index again.
    pub(crate) remove_given: bool,
    /// The NIC flow's removal was asked for (reset or EOF; given or
    /// deferred): no command but that removal names the flow's index any
    /// more, as the NIC may give the index to another flow once it executed
    /// it.
    pub(crate) remove_wanted: bool,
    /// The end of the receive room the NIC has: stream offset past the last
    /// segment whose `MS_POST` it executed (message mode), or its ring head
    /// plus the ring's size (stream mode). The receive window ends here,
    /// not at the room the driver has queued commands for: a frame that
    /// beat its room's command to the NIC would be copied.
    pub(crate) nic_edge: u64,
    /// What the flow's commands with a completion callback give it, for
    /// those queued and not completed yet, oldest first: the NIC executes
    /// commands in order, so each such completion of this flow is the
    /// first of them's.
    pub(crate) awaited: KVec<Awaited>,
    /// Commands waiting for room in the command queue (`flow/cmds.rs`).
    pub(crate) deferred: Deferred,
    /// A move of the notify queue pair (`flow/steer.rs`).
    pub(crate) qp_move: QpMove,
    /// Send state (`flow/tx.rs`).
    pub(crate) tx: TxState,
}

impl FlowInner {
    /// A header entry reported the NIC's cursor at `cursor`: both what the
    /// driver knows and what the NIC confirmed are at least there.
    pub(crate) fn saw_nic_cursor(&mut self, cursor: u64) {
        self.nic_cursor = self.nic_cursor.max(cursor);
        self.nic_confirmed = self.nic_confirmed.max(cursor);
    }
}

/// Counters of a flow (`zeronic_flow_query`).
pub(crate) struct FlowStats {
    pub(crate) rx_placed: Atomic<u64>,
    pub(crate) rx_copied: Atomic<u64>,
    pub(crate) tx_merged: Atomic<u64>,
    pub(crate) tx_copied: Atomic<u64>,
}

/// An attached flow.
#[pin_data]
pub(crate) struct Flow {
    /// Id within its file.
    pub(crate) id: u32,
    /// NIC index and port.
    pub(crate) nic: u32,
    pub(crate) port: u32,
    /// Dropped on a workqueue: the flow's last reference may go in softirq.
    pub(crate) control: DropInProcess<Arc<Control>>,
    /// Where the flow's completions go; `None` for a socket served by TCP
    /// (attached by its process), which has none.
    pub(crate) cq: Option<Arc<Cq>>,
    /// The socket is served by TCP ([`Flow::follow_reader`]): attached by
    /// its process with `TCP_ULP`, receiving into a kernel ring
    /// ([`FlowInner::kring`]), nothing consumed by the flow.
    pub(crate) served: bool,
    pub(crate) sock: ARef<TcpSock>,
    pub(crate) target: RxTarget,
    /// Sequence number of receive stream offset 0.
    pub(crate) rx_isn: u32,
    /// The connection's addresses and ports: a header entry under the
    /// flow's index whose packet is not of this connection is dropped
    /// (`hdrq.rs`).
    pub(crate) tuple: Tuple,
    /// Index of the flow in the NIC's Flow Table.
    pub(crate) hw_index: u32,
    /// The flow's notify queue pair (`flow/steer.rs`).
    queue: Atomic<u32>,
    /// A move of the notify queue pair is under way
    /// ([`FlowInner::qp_move`]); read by NAPI for every entry of the flow.
    moving: Atomic<bool>,
    pub(crate) stats: FlowStats,
    #[pin]
    pub(crate) inner: SpinLockIrq<FlowInner>,
    /// Sends not fully queued into TCP yet (`flow/tx.rs`); taken with the
    /// socket lock held.
    #[pin]
    pub(crate) tx_pending: Mutex<KVec<Pending>>,
    /// Whether `tx_pending` is not empty (read from softirq).
    pub(crate) tx_pending_hint: Atomic<bool>,
    /// Queues pending sends once TCP reports send space, and refreshes the
    /// receive window once the NIC has more room (`flow/tx.rs`).
    #[pin]
    work: Work<Flow>,
}

impl_has_work! {
    impl HasWork<Self> for Flow { self.work }
}

/// Stream offset of sequence number `seq`, given that `near` (a stream
/// offset) is within 2^31 of it.
pub(crate) fn stream_off(isn: u32, near: u64, seq: u32) -> u64 {
    // CAST: truncation to the low 32 bits is the point.
    let near_seq = isn.wrapping_add(near as u32);
    // CAST: the difference is within +-2^31 by the precondition.
    let delta = seq.wrapping_sub(near_seq) as i32;
    near.wrapping_add_signed(i64::from(delta))
}

impl Flow {
    /// A flow in state `Attached` whose NIC flow `hw_index` was installed
    /// with receive stream offset 0 at `rx_isn`.
    ///
    /// # Errors
    ///
    /// - `ENOMEM` if the flow, its process-context holder of `control` or
    ///   its list of awaited NIC confirmations cannot be allocated.
    #[expect(clippy::too_many_arguments, reason = "the parts of a flow, once")]
    pub(crate) fn new(
        id: u32,
        nic: u32,
        port: u32,
        control: Arc<Control>,
        cq: Option<Arc<Cq>>,
        served: bool,
        sock: ARef<TcpSock>,
        target: RxTarget,
        rx_isn: u32,
        tuple: Tuple,
        (hw_index, queue): (u32, u32),
        tx: TxState,
    ) -> Result<Arc<Self>> {
        let ring_start = 0;
        let nic_edge = match &target {
            RxTarget::Segments => 0,
            // The ring the NIC got with the flow.
            RxTarget::Ring { size, .. } => ring_start + size,
        };
        let control = DropInProcess::new(control)?;
        // Room for an edge per segment the NIC may have, and a few ring head
        // updates: the data path then never allocates one.
        let awaited = KVec::with_capacity(MAX_SEGS + 8, GFP_KERNEL)?;
        Arc::pin_init(
            try_pin_init!(Self {
                id,
                nic,
                port,
                control,
                cq,
                served,
                sock,
                target,
                rx_isn,
                tuple,
                hw_index,
                queue: Atomic::new(queue),
                moving: Atomic::new(false),
                stats: FlowStats {
                    rx_placed: Atomic::new(0),
                    rx_copied: Atomic::new(0),
                    tx_merged: Atomic::new(0),
                    tx_copied: Atomic::new(0),
                },
                tx_pending <- new_mutex!(KVec::new(), "zeronic::flow::tx_pending"),
                tx_pending_hint: Atomic::new(false),
                work <- new_work!("zeronic::flow::work"),
                inner <- new_spinlock_irq!(FlowInner {
                    phase: Phase::Attached,
                    rx_done: 0,
                    nic_cursor: 0,
                    nic_confirmed: 0,
                    segs: KVec::new(),
                    posted_end: 0,
                    ring: None,
                    kring: None,
                    ring_head: ring_start,
                    ring_reported: 0,
                    ring_copied: false,
                    eof: false,
                    eof_reported: false,
                    event_posted: false,
                    failed_by_nic: false,
                    nic_removed: false,
                    remove_given: false,
                    remove_wanted: false,
                    nic_edge,
                    awaited,
                    deferred: Deferred::default(),
                    qp_move: QpMove::Idle,
                    tx,
                }, "zeronic::flow"),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// Posts an entry with the flow's reserved or a free credit and wakes the
    /// application if it armed the CQ.
    ///
    /// # Errors
    ///
    /// - `EAGAIN`, `EINVAL` as [`Cq::post`].
    pub(crate) fn complete(&self, cqe: &Cqe, credit: Credit) -> Result {
        let Some(cq) = &self.cq else {
            // A served socket's events are the socket's own.
            return Ok(());
        };
        let res = cq.post(cqe, credit);
        cq.notify();
        res
    }

    /// Where byte `pos` of the stream lies: the region, the offset in it,
    /// and how many bytes from there the target holds contiguously.
    pub(crate) fn target_of(
        &self,
        inner: &FlowInner,
        pos: u64,
    ) -> Option<(Arc<MrShared>, u64, u64)> {
        match &self.target {
            RxTarget::Segments => {
                let seg = inner
                    .segs
                    .iter()
                    .find(|s| s.start <= pos && pos < s.end())?;
                Some((
                    seg.mr.clone(),
                    seg.mr_off + (pos - seg.start),
                    seg.end() - pos,
                ))
            }
            RxTarget::Ring { offset, size } => {
                // Only the window the NIC may use: [head, head + size).
                let limit = inner.ring_head + size;
                if pos < inner.ring_head || pos >= limit {
                    return None;
                }
                let in_ring = pos % size;
                Some((
                    inner.ring.as_ref()?.shared().clone(),
                    offset + in_ring,
                    (size - in_ring).min(limit - pos),
                ))
            }
        }
    }

    /// Consumes the in-order bytes TCP holds for the flow into their places,
    /// completes what is complete, and moves the NIC's cursor past copied
    /// bytes. Called by the ULP's `sk_data_ready` (softirq or the socket's
    /// owner) and after posts and ring consumption (process context, socket
    /// locked). Never sleeps.
    ///
    /// The flow's spinlock is taken per chunk, never across `read_sock()`,
    /// which may transmit (ACKs) and must not run with interrupts off.
    pub(crate) fn consume<C: LockContext>(self: &Arc<Self>, sk: &mut Locked<'_, C>) {
        if self.served {
            self.follow_reader(sk);
            return;
        }
        let mut placed = 0u64;
        let mut copied = 0u64;
        // A copy waits for the NIC's cursor (see `copy_room`).
        let mut copy_waits = false;
        let mut actor = |chunk: &RecvChunk<'_>| {
            let mut inner = self.inner.lock();
            // After the EOF nothing more is the stream's (bytes TCP still
            // takes after `shutdown(SHUT_RD)` stay in its queue): the
            // segments wait for the NIC flow's removal.
            if inner.phase != Phase::Attached || inner.eof {
                return 0;
            }
            let mut pos = stream_off(self.rx_isn, inner.rx_done, chunk.seq());
            if pos != inner.rx_done {
                // TCP hands out bytes in order from copied_seq, which is
                // rx_isn + rx_done by construction.
                return 0;
            }
            // This chunk's counts start here; `settle` records them with
            // `rx_done`, under the lock, as FLOW_QUERY reads them.
            let (p0, c0) = (placed, copied);
            let mut used = 0usize;
            for piece in chunk.pieces() {
                let n = match &piece {
                    Piece::Linear(b) => b.len(),
                    // CAST: u32 -> usize is lossless.
                    Piece::Page { len, .. } | Piece::Unreadable(len) => *len as usize,
                };
                let mut done = 0usize;
                while done < n {
                    let Some((mr, mr_off, room)) = self.target_of(&inner, pos) else {
                        // Nowhere to put it yet: stop; the rest stays queued
                        // (the window closes) until the application posts.
                        self.settle(&mut inner, pos, placed - p0, copied - c0);
                        return used + done;
                    };
                    // CAST: bounded by `n - done`, a usize.
                    let mut take = ((n - done) as u64).min(room) as usize;
                    let ok = match &piece {
                        Piece::Linear(b) => {
                            take = Self::copy_room(&inner, pos, take);
                            if take == 0 {
                                copy_waits = true;
                                self.settle(&mut inner, pos, placed - p0, copied - c0);
                                return used + done;
                            }
                            b.get(done..done + take).is_some_and(|src| {
                                usize::try_from(mr_off)
                                    .is_ok_and(|at| mr.pages().write(at, src).is_ok())
                            })
                        }
                        Piece::Page { page, offset, .. } => {
                            // CAST: `done < n <= PAGE_SIZE`.
                            let src_off = *offset + done as u32;
                            let Some((dst, dst_off, in_page)) = mr.locate(mr_off) else {
                                self.settle(&mut inner, pos, placed - p0, copied - c0);
                                return used + done;
                            };
                            // CAST: u32 -> usize is lossless.
                            take = take.min(in_page as usize);
                            if dst.as_ptr() == page.as_ptr() && dst_off == src_off {
                                // The NIC wrote it there: nothing to do.
                                placed += take as u64;
                                done += take;
                                pos += take as u64;
                                continue;
                            }
                            take = Self::copy_room(&inner, pos, take);
                            if take == 0 {
                                copy_waits = true;
                                self.settle(&mut inner, pos, placed - p0, copied - c0);
                                return used + done;
                            }
                            // CAST: `take <= PAGE_SIZE`.
                            usize::try_from(mr_off).is_ok_and(|at| {
                                mr.pages()
                                    .copy_from_page(at, page, src_off, take as u32)
                                    .is_ok()
                            })
                        }
                        Piece::Unreadable(_) => false,
                    };
                    if !ok {
                        self.settle(&mut inner, pos, placed - p0, copied - c0);
                        return used + done;
                    }
                    copied += take as u64;
                    done += take;
                    pos += take as u64;
                    self.mark_copied(&mut inner, pos);
                }
                used += n;
            }
            self.settle(&mut inner, pos, placed - p0, copied - c0);
            used
        };
        // Urgent data is part of the stream (docs/uapi.md, "Urgent data"),
        // but `read_sock()` stops before an urgent mark: pass one at the
        // read position, read, and pass one the read stopped at. The socket
        // is locked, so no new mark is set meanwhile: two rounds at most.
        sk.pass_urgent_mark();
        let mut res = sk.read_sock(&mut actor);
        if res.is_ok() && sk.pass_urgent_mark() {
            res = sk.read_sock(&mut actor);
        }
        if let Err(e) = res {
            pr_debug!("flow {}: read_sock: {:?}\n", self.id, e);
        }
        if let Some(zc) = self.control.zc(self.port) {
            zc.rx_placed.add(placed, Relaxed);
            zc.rx_copied.add(copied, Relaxed);
        }
        let eof = sk.shutdown() & RCV_SHUTDOWN != 0 && sk.copied_seq() == sk.rcv_nxt();
        let edge = {
            let inner = self.inner.lock();
            if inner.phase != Phase::Attached {
                return;
            }
            // Posted room can exceed what a sequence number can say (2 GiB
            // and more, as overlapping segments of one region): TCP compares
            // the edge with `rcv_nxt` modulo 2^32, so an edge 2 GiB or more
            // ahead would read as behind it and close the window for good.
            // No TCP window exceeds 2^30 bytes (65535 << 14); nor does this.
            inner.nic_edge.min(inner.rx_done + MAX_WINDOW_EDGE)
        };
        // The window ends where the room the NIC has does, so the peer never
        // sends what the NIC would have to hand over for copying (a lagging
        // application stalls the peer instead). Outside the spinlock: a
        // raised edge sends a window update. Edges only grow, and every
        // raise is followed by a `consume()` under the socket lock.
        // CAST: sequence numbers wrap; the low 32 bits are the point.
        sk.bound_rcv_window(self.rx_isn.wrapping_add(edge as u32));
        let mut inner = self.inner.lock();
        if inner.phase != Phase::Attached {
            return;
        }
        if copy_waits {
            // Past every byte TCP holds in order: none of them is the NIC's
            // to write any more (those it placed are placed; the others
            // TCP took from frames on the normal path, or a placement TCP
            // dropped wrote them, which the copy overwrites). But not past
            // the room posted: the NIC would start the next segment posted
            // at its cursor, not where the driver's starts. The completion
            // runs this again, and the copy goes on.
            let held = stream_off(self.rx_isn, inner.rx_done, sk.rcv_nxt());
            let want = held.min(self.posted_end(&inner));
            if want > inner.nic_cursor {
                inner.nic_cursor = want;
                self.update_cursor(&mut inner);
            }
        }
        let progressed = placed + copied != 0;
        self.complete_rx(&mut inner, progressed, eof);
    }

    /// The stream offset where the room posted so far ends.
    fn posted_end(&self, inner: &FlowInner) -> u64 {
        match self.target {
            RxTarget::Segments => inner.posted_end,
            RxTarget::Ring { size, .. } => inner.ring_head + size,
        }
    }

    /// How many of the `want` bytes at stream offset `pos` the CPU may copy
    /// into their place now: only those below the cursor the NIC confirmed,
    /// which it never writes again. A byte above it may still be written
    /// by a frame placed before the NIC saw the cursor move (one TCP drops
    /// as a duplicate: an injected one), over the copy of what TCP accepted.
    fn copy_room(inner: &FlowInner, pos: u64, want: usize) -> usize {
        // CAST: the minimum is at most `want`, a usize.
        (inner.nic_confirmed.saturating_sub(pos)).min(want as u64) as usize
    }

    /// Records that the flow consumed up to stream offset `pos`, `placed`
    /// and `copied` bytes of it since the last record. Under the flow's
    /// lock, as `FLOW_QUERY` reads them: a query then always finds
    /// `rx_done` = placed + copied, even while `consume` runs on another CPU.
    fn settle(&self, inner: &mut FlowInner, pos: u64, placed: u64, copied: u64) {
        inner.rx_done = pos;
        self.stats.rx_placed.add(placed, Relaxed);
        self.stats.rx_copied.add(copied, Relaxed);
    }

    /// Notes that bytes up to `pos` were copied (for the completions' flag).
    fn mark_copied(&self, inner: &mut FlowInner, pos: u64) {
        match self.target {
            RxTarget::Segments => {
                if let Some(seg) = inner
                    .segs
                    .iter_mut()
                    .find(|s| s.start < pos && pos <= s.end())
                {
                    seg.copied = true;
                }
            }
            RxTarget::Ring { .. } => inner.ring_copied = true,
        }
    }

    /// Posts the completions the consumed bytes allow.
    fn complete_rx(self: &Arc<Self>, inner: &mut FlowInner, progressed: bool, eof: bool) {
        match self.target {
            RxTarget::Segments => {
                // Consumed, and out of the NIC's reach: bytes the CPU
                // copied are below the NIC's cursor only once its
                // `FLOWU_CURSOR` completed (whose completion runs this again).
                let done = inner.rx_done.min(inner.nic_confirmed);
                while inner.segs.first().is_some_and(|s| s.end() <= done) {
                    let Ok(seg) = inner.segs.remove(0) else {
                        break;
                    };
                    let _ =
                        self.complete(&recv_cqe(self.id, &seg, seg.len, 0, 0), Credit::Reserved);
                }
                Self::segs_removed(inner);
                if eof && !inner.eof {
                    inner.eof = true;
                    // The partly filled segment, and those after it, end
                    // here; they go back (and the EOF event is posted) once
                    // the NIC confirmed it places nothing more in them.
                    self.end_nic_flow(inner);
                }
                return;
            }
            RxTarget::Ring { .. } => {
                if progressed || (eof && !inner.eof) {
                    if eof && !inner.eof {
                        inner.eof = true;
                        // The ring stays the flow's until it is detached,
                        // but nothing more is placed in it.
                        self.end_nic_flow(inner);
                    }
                    self.report_ring(inner);
                }
            }
        }
        if eof {
            self.post_event(inner, 0, uapi::CQE_F_EOF);
        }
    }

    /// The receive side ended (EOF) or the connection died: removes the NIC
    /// flow, once. Its driver slot is freed first (the NIC may give the
    /// index to the next flow installed once it executed the removal), its
    /// commands still waiting for room never go, and the removal is given
    /// to the NIC without waiting (any context); its completion
    /// ([`Flow::removed`]) gives the segments back.
    pub(crate) fn end_nic_flow(self: &Arc<Self>, inner: &mut FlowInner) {
        if inner.remove_wanted {
            return;
        }
        inner.remove_wanted = true;
        inner.deferred.drop_data_cmds();
        // Not the last reference: the caller holds one.
        self.control.remove_flow(self.hw_index, &**self);
        // If the NIC is broken or going away, its reset stops it; the
        // segments are given back when the flow is detached.
        self.remove_after_reset(inner);
    }

    /// Stream mode: reports the bytes not reported yet, if a CQ entry is
    /// free (otherwise a later consume, post or ring consumption does).
    pub(crate) fn report_ring(&self, inner: &mut FlowInner) {
        let new = inner.rx_done - inner.ring_reported;
        // After the EOF entry, only new bytes (none can come) are reported:
        // an application consuming on every entry must not spin.
        if new == 0 && (!inner.eof || inner.eof_reported) {
            return;
        }
        let mut flags = 0;
        if inner.ring_copied {
            flags |= uapi::CQE_F_COPIED;
        }
        if inner.eof {
            flags |= uapi::CQE_F_EOF;
        }
        let cqe = Cqe {
            stream_off: inner.ring_reported,
            // CAST: at most the ring's size, which fits u32 (checked at attach).
            len: new as u32,
            flow: self.id,
            opcode: uapi::CQE_STREAM_DATA,
            flags,
            ..Default::default()
        };
        if self.complete(&cqe, Credit::Free).is_ok() {
            inner.ring_reported = inner.rx_done;
            inner.ring_copied = false;
            inner.eof_reported = inner.eof;
        }
    }

    /// Posts the flow's EOF or reset event, once.
    fn post_event(&self, inner: &mut FlowInner, status: u16, flags: u32) {
        if inner.event_posted {
            return;
        }
        inner.event_posted = true;
        let cqe = Cqe {
            stream_off: inner.rx_done,
            flow: self.id,
            opcode: uapi::CQE_FLOW,
            status,
            flags,
            ..Default::default()
        };
        let _ = self.complete(&cqe, Credit::Reserved);
    }

    /// The connection changed state (the ULP's `sk_state_change`): a reset or
    /// a timeout ends the flow's data path.
    pub(crate) fn state_changed<C: LockContext>(self: &Arc<Self>, sk: &Locked<'_, C>) {
        if !matches!(sk.state(), TcpState::Close) {
            return;
        }
        let err = sk.err();
        if err == 0 {
            // Closed in order (FIN both ways, everything ACKed): not a
            // failure. The peer's FIN is the EOF `consume` reports; the
            // flow stays until it is detached or the socket closed.
            return;
        }
        let mut inner = self.inner.lock();
        if inner.phase != Phase::Attached {
            return;
        }
        inner.phase = Phase::Reset;
        let status = cqe_status(Error::from_errno(-err));
        self.post_event(&mut inner, status, 0);
        // Header entries still queued for this flow are dropped, as the
        // connection is dead. From softirq: the segments go back once the
        // NIC confirmed (unless the EOF's removal already did).
        self.end_nic_flow(&mut inner);
    }

    /// The flow's NIC was unbound (`reset_done`: its reset completed, so it
    /// places nothing any more): the flow fails with `ENODEV`, and its
    /// segments go back if the NIC confirmed the reset.
    pub(crate) fn nic_gone(&self, reset_done: bool) {
        let mut inner = self.inner.lock();
        if inner.phase == Phase::Attached {
            inner.phase = Phase::Reset;
        }
        let status = cqe_status(ENODEV);
        self.post_event(&mut inner, status, 0);
        if reset_done {
            inner.nic_removed = true;
            self.flush_segments(&mut inner, status);
        }
    }

    /// Gives the posted segments back (after the NIC confirmed the flow is
    /// removed, the flow no longer `Attached`), with `status`, and the
    /// ring's use: nothing writes the ring any more.
    pub(crate) fn flush_segments(&self, inner: &mut FlowInner, status: u16) {
        drop(inner.ring.take());
        self.complete_all_segments(inner, status, 0);
    }

    /// Completes every posted segment with what it holds, `status` and
    /// `flags` (the NIC no longer writes them).
    fn complete_all_segments(&self, inner: &mut FlowInner, status: u16, flags: u32) {
        let segs = core::mem::take(&mut inner.segs);
        Self::segs_removed(inner);
        for seg in segs {
            // CAST: the filled part of a segment fits its u32 length.
            let filled = inner
                .rx_done
                .saturating_sub(seg.start)
                .min(u64::from(seg.len)) as u32;
            let _ = self.complete(
                &recv_cqe(self.id, &seg, filled, status, flags),
                Credit::Reserved,
            );
        }
    }
}

/// The completion of a receive segment.
fn recv_cqe(flow: u32, seg: &Seg, len: u32, status: u16, flags: u32) -> Cqe {
    Cqe {
        wr_id: seg.wr_id,
        stream_off: seg.start,
        len,
        flow,
        opcode: uapi::CQE_RECV,
        status,
        flags: flags | if seg.copied { uapi::CQE_F_COPIED } else { 0 },
    }
}

impl CmdDone for Flow {
    /// A command submitted with this flow as its callback completed: one
    /// that raised the receive room (`raise_nic_edge`), a cursor move, or
    /// the `CMD_FLOW_REMOVE` posted at a reset or EOF.
    fn done(self: Arc<Self>, c: &CmdCompletion) {
        if c.is::<FlowRemove>() {
            self.removed(c);
            return;
        }
        {
            let mut inner = self.inner.lock();
            match inner.awaited.remove(0) {
                // A segment the NIC refused: it places the next one posted
                // where this one starts, not where the driver's starts, so
                // its stream offsets and the driver's part ways. The flow
                // fails (EIO) before anything lands in the wrong place.
                Ok(Awaited::Room(_)) if c.is::<CmdMsPost>() && c.status != status::ST_OK => {
                    self.nic_refused(&mut inner, c.status);
                    return;
                }
                // The NIC has the room now (a failed ring head move gives
                // none, but the window must not stall behind it either:
                // what arrives past real room is copied, as before the NIC
                // had it).
                Ok(Awaited::Room(edge)) => inner.nic_edge = edge,
                // A failed move confirms nothing: the segments it would
                // have freed wait for the flow's removal.
                Ok(Awaited::Cursor) if c.is::<FlowUpdate>() && c.status == status::ST_OK => {
                    inner.nic_confirmed = inner.nic_confirmed.max(FlowUpdate::output(c))
                }
                Ok(Awaited::Cursor) => return,
                Ok(Awaited::Queue(to)) => {
                    self.queue_moved(&mut inner, c, to);
                    return;
                }
                Err(_) => return,
            }
        }
        // A served socket's window is TCP's own, and nothing goes back to
        // its process: nothing to do.
        if self.served {
            return;
        }
        // The window may grow, and segments the cursor passed may go back:
        // `consume()` raises the window's bound and sends the update, under
        // the socket lock, so from process context.
        let _ = workqueue::system().enqueue(self);
    }
}

impl Flow {
    /// The NIC refused the flow's segment post (`status`): the flow fails
    /// with `EIO`, as a connection that dies does (a flow event, the NIC
    /// flow removed, then the segments back with `EIO`; posts get `EPIPE`).
    fn nic_refused(self: &Arc<Self>, inner: &mut FlowInner, status: u16) {
        if inner.phase != Phase::Attached {
            return;
        }
        // Once per flow: it fails.
        pr_warn!(
            "flow {}: the NIC refused a receive segment (status {}): flow failed\n",
            self.id,
            status
        );
        inner.phase = Phase::Reset;
        inner.failed_by_nic = true;
        self.post_event(inner, cqe_status(EIO), 0);
        self.end_nic_flow(inner);
    }

    /// `CMD_FLOW_REMOVE` posted at a reset or EOF completed: the NIC places
    /// nothing any more, so the segments go back.
    fn removed(&self, c: &CmdCompletion) {
        if c.status != status::ST_OK {
            pr_warn!("flow {}: NIC flow removal: status {}\n", self.id, c.status);
        }
        let mut inner = self.inner.lock();
        inner.nic_removed = true;
        self.give_back_removed(&mut inner);
    }

    /// Gives the segments back once the NIC flow's removal (reset or EOF)
    /// completed: after an EOF with what they hold and `F_EOF` (then the
    /// EOF event), after a reset with `ECONNRESET`.
    pub(crate) fn give_back_removed(&self, inner: &mut FlowInner) {
        if !inner.eof {
            let err = if inner.failed_by_nic { EIO } else { ECONNRESET };
            self.flush_segments(inner, cqe_status(err));
            return;
        }
        self.complete_all_segments(inner, 0, uapi::CQE_F_EOF);
        self.post_event(inner, 0, uapi::CQE_F_EOF);
    }
}

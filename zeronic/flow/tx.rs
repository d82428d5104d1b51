// SPDX-License-Identifier: GPL-2.0

//! Zero-copy sends of a flow.
//!
//! `ZERONIC_WR_SEND` queues the region's pages into TCP with
//! `tcp_sendmsg_locked()` over a bvec, as one driver-owned `ubuf_info` per
//! send ([`SendWr`], patch 0021): TCP's skbs reference the application's
//! pages, TSO splits and retransmissions included. The port's `start_xmit`
//! recognises such skbs ([`SEND_OPS`]) and posts a `TX_OP_MERGE` descriptor:
//! the NIC reads the payload by region key, at the offset the TCP sequence
//! number gives, so the CPU never touches it.
//!
//! A send is complete when the last skb referencing it is freed; it
//! succeeded if by then `snd_una` covers its last byte ("freed" alone also
//! happens at a reset or close). A send a detach dropped before TCP took all
//! of its bytes was not sent whatever `snd_una` says (its sequence numbers
//! may not even be set): it completes with `ECANCELED` and does not count as
//! sent. Completions are posted in posting order, whatever order the skbs
//! are freed in.
//!
//! Bytes that do not fit the send buffer stay pending and are queued from
//! the flow's work item when TCP reports send space (`sk_write_space`).
//! Lock order: the socket lock, then [`Flow::tx_pending`], then the flow's
//! spinlock.

use kernel::{
    net::{
        sock::{
            context,
            seq_before,
            Locked, //
        },
        ubuf::{
            BvecSeg,
            Ubuf,
            UbufComplete,
            UbufOps, //
        },
    },
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
    },
    workqueue::{
        self,
        WorkItem, //
    },
};

use crate::{
    cq::{
        cqe_status,
        Cqe,
        Credit, //
    },
    flow::{
        Flow,
        Phase, //
    },
    mr::MrShared,
    uapi,
};

/// The `ubuf_info` operations of ZeroNIC sends; `start_xmit` recognises
/// their skbs by it.
pub(crate) static SEND_OPS: UbufOps<SendWr> = UbufOps::new();

/// Pages handed to one `tcp_sendmsg_locked()` call at most (bounds the bvec).
const BVEC_PAGES: usize = 64;

/// The state of one send, shared with TCP's skbs through its `ubuf_info`.
pub(crate) struct SendWr {
    flow: Arc<Flow>,
    /// Posting order within the flow.
    idx: u64,
    pub(crate) mr: Arc<MrShared>,
    /// Offset of the first byte in the region.
    pub(crate) mr_off: u64,
    pub(crate) len: u32,
    /// TCP sequence number of the first byte, set when it is queued.
    pub(crate) seq0: Atomic<u32>,
    /// Dropped by a detach before TCP took all of its bytes.
    cancelled: Atomic<bool>,
}

impl SendWr {
    /// The region offset of the bytes that start at TCP sequence `seq`, if
    /// `[seq, seq + len)` lies in this send.
    pub(crate) fn mr_offset_of(&self, seq: u32, len: u32) -> Option<u64> {
        let off = seq.wrapping_sub(self.seq0.load(Relaxed));
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        Some(self.mr_off + u64::from(off))
    }

    /// Counts bytes sent by the NIC from the region (`true`) or copied.
    pub(crate) fn count(&self, merged: bool, bytes: u64) {
        let stats = &self.flow.stats;
        let port = self.flow.control.zc(self.flow.port);
        if merged {
            stats.tx_merged.add(bytes, Relaxed);
            if let Some(zc) = port {
                zc.tx_merged.add(bytes, Relaxed);
            }
        } else {
            stats.tx_copied.add(bytes, Relaxed);
            if let Some(zc) = port {
                zc.tx_copied.add(bytes, Relaxed);
            }
        }
    }
}

#[vtable]
impl UbufComplete for SendWr {
    fn complete(self, _zerocopy: bool) {
        let end = self.seq0.load(Relaxed).wrapping_add(self.len);
        let acked = !seq_before(self.flow.sock.snd_una_lockless(), end);
        let status = if self.cancelled.load(Relaxed) {
            cqe_status(ECANCELED)
        } else if acked {
            0
        } else {
            cqe_status(ECONNRESET)
        };
        self.flow.send_done(self.idx, status);
    }
}

impl Drop for SendWr {
    fn drop(&mut self) {
        // The send no longer uses the region (see `MrShared::users`).
        self.mr.users.fetch_sub(1, Relaxed);
    }
}

/// A send whose completion is not posted yet.
struct Outstanding {
    idx: u64,
    wr_id: u64,
    len: u32,
    /// `Some(status)` once complete.
    status: Option<u16>,
}

/// Send state of a flow (under the flow's spinlock).
pub(crate) struct TxState {
    next_idx: u64,
    /// In posting order.
    outstanding: KVec<Outstanding>,
    /// Sends posted on this flow.
    pub(crate) posted: u64,
    /// Bytes of sends completed successfully (all ACKed).
    pub(crate) acked_bytes: u64,
}

impl TxState {
    pub(crate) fn new() -> Self {
        Self {
            next_idx: 0,
            outstanding: KVec::new(),
            posted: 0,
            acked_bytes: 0,
        }
    }

    /// Sends posted and not completed.
    pub(crate) fn in_flight(&self) -> usize {
        self.outstanding.len()
    }
}

/// A send not fully queued into TCP yet: its handle and how much is queued.
pub(crate) struct Pending {
    ubuf: Ubuf<SendWr>,
    queued: u32,
}

impl Flow {
    /// Posts a send of `len` bytes at `mr_off` of `mr` (checked by the caller,
    /// whose `users` reference the send takes over, and gives back if it
    /// fails). Process context, the socket locked (`sk`). The CQ entry was
    /// reserved by the caller.
    ///
    /// # Errors
    ///
    /// - `EPIPE` if the flow is no longer attached.
    /// - `ENOMEM` if the send's bookkeeping cannot be allocated.
    /// - `ENODEV` if the module is being unloaded, `EINVAL` if the kernel's `ubuf_info`
    ///   differs from the bindings' (both from `Ubuf::new`).
    pub(crate) fn post_send(
        self: &Arc<Self>,
        sk: &mut Locked<'_, context::Process>,
        wr_id: u64,
        mr: Arc<MrShared>,
        mr_off: u64,
        len: u32,
    ) -> Result {
        let idx = {
            let mut inner = self.inner.lock();
            if inner.phase != Phase::Attached {
                // No `SendWr` took the use yet.
                mr.users.fetch_sub(1, Relaxed);
                return Err(EPIPE);
            }
            inner.tx.next_idx += 1;
            inner.tx.next_idx - 1
        };
        let wr = SendWr {
            flow: self.clone(),
            idx,
            mr,
            mr_off,
            len,
            seq0: Atomic::new(0),
            cancelled: Atomic::new(false),
        };
        // Room first, so that nothing fails once the send exists.
        let mut pending = self.tx_pending.lock();
        pending.reserve(1, GFP_KERNEL)?;
        self.inner.lock().tx.outstanding.reserve(1, GFP_ATOMIC)?;
        let ubuf = Ubuf::new(&SEND_OPS, wr, GFP_KERNEL)?;
        {
            let mut inner = self.inner.lock();
            // Cannot fail: room was reserved, and only this path (under the
            // socket lock) adds entries.
            let _ = inner.tx.outstanding.push(
                Outstanding {
                    idx,
                    wr_id,
                    len,
                    status: None,
                },
                GFP_ATOMIC,
            );
            inner.tx.posted += 1;
        }
        // From here the send completes through its `ubuf_info`, whatever
        // happens (dropping the handle with nothing queued completes it).
        let _ = pending.push(Pending { ubuf, queued: 0 }, GFP_KERNEL);
        drop(pending);
        self.push_sends(sk);
        Ok(())
    }

    /// Queues pending sends into TCP, oldest first, while it takes them.
    /// Process context, the socket locked.
    pub(crate) fn push_sends(&self, sk: &mut Locked<'_, context::Process>) {
        let mut pending = self.tx_pending.lock();
        // Published before TCP sees the send: `tcp_sendmsg_locked()` itself
        // calls `sk_write_space` (every segment it sends runs
        // `tcp_check_space()`, also after the `SOCK_NOSPACE` of its EAGAIN is
        // set), and `sk_stream_write_space` then clears `SOCK_NOSPACE`. A
        // hook still seeing "nothing pending" there dropped the only wake-up
        // TCP would give, leaving the rest of the send unqueued for good.
        self.tx_pending_hint.store(!pending.is_empty(), Relaxed);
        while let Some(p) = pending.first_mut() {
            if p.queued == 0 {
                // Sequence number of the send's first byte: nothing queued
                // after the previous send's last byte, in order.
                p.ubuf.seq0.store(sk.write_seq(), Relaxed);
            }
            let res = queue_some(sk, p);
            let full = p.queued == p.ubuf.len;
            match res {
                Ok(true) if full => {
                    // Fully queued: the skbs hold the send from now on.
                    let _ = pending.remove(0);
                }
                // TCP took all that was offered: offer the next pages.
                Ok(true) => {}
                // The send buffer is full: TCP set `SOCK_NOSPACE`, so
                // `sk_write_space` calls again (or already queued the work).
                Ok(false) => break,
                Err(e) => {
                    // The connection cannot send: the send completes (with
                    // an error, `snd_una` not covering it) when its skbs go.
                    pr_debug!("flow {}: send failed: {:?}\n", self.id, e);
                    let _ = pending.remove(0);
                }
            }
        }
        self.tx_pending_hint.store(!pending.is_empty(), Relaxed);
    }

    /// Drops the sends not fully queued yet (detach): they complete with
    /// `ECANCELED` once TCP freed what it took of them.
    pub(crate) fn drop_pending_sends(&self) {
        let pending = core::mem::take(&mut *self.tx_pending.lock());
        for p in pending.iter() {
            // Before the handle goes: dropping it may complete the send.
            p.ubuf.cancelled.store(true, Relaxed);
        }
        drop(pending);
    }

    /// A send completed (any context but hard interrupt): posts the
    /// completions now in order.
    pub(crate) fn send_done(&self, idx: u64, status: u16) {
        let mut inner = self.inner.lock();
        if let Some(o) = inner.tx.outstanding.iter_mut().find(|o| o.idx == idx) {
            o.status = Some(status);
        }
        while inner
            .tx
            .outstanding
            .first()
            .is_some_and(|o| o.status.is_some())
        {
            let Ok(o) = inner.tx.outstanding.remove(0) else {
                break;
            };
            if o.status == Some(0) {
                inner.tx.acked_bytes += u64::from(o.len);
            }
            let cqe = Cqe {
                wr_id: o.wr_id,
                len: o.len,
                flow: self.id,
                opcode: uapi::CQE_SEND,
                status: o.status.unwrap_or(0),
                ..Default::default()
            };
            if let Some(cq) = &self.cq {
                let _ = cq.post(&cqe, Credit::Reserved);
            }
        }
        drop(inner);
        if let Some(cq) = &self.cq {
            cq.notify();
        }
    }

    /// Send space freed up (the ULP's `sk_write_space`, softirq): queue the
    /// pending sends from process context.
    pub(crate) fn write_space(self: &Arc<Self>) {
        if self.tx_pending_hint.load(Relaxed) {
            let _ = workqueue::system().enqueue(self.clone());
        }
    }
}

/// Queues as much of `p` as TCP takes now; `Ok(true)` if all of what was
/// offered was queued.
fn queue_some(sk: &mut Locked<'_, context::Process>, p: &mut Pending) -> Result<bool> {
    let wr = &*p.ubuf;
    let mut segs = KVec::with_capacity(BVEC_PAGES, GFP_KERNEL)?;
    let mut pos = wr.mr_off + u64::from(p.queued);
    let end = wr.mr_off + u64::from(wr.len);
    while pos < end && segs.len() < BVEC_PAGES {
        let (page, off, left) = wr.mr.locate(pos).ok_or(EINVAL)?;
        // CAST: at most `end - pos`, which fits the send's u32 length.
        let n = u64::from(left).min(end - pos) as u32;
        segs.push((page, off, n), GFP_KERNEL)?;
        pos += u64::from(n);
    }
    let bvec: KVec<BvecSeg<'_>> = {
        let mut v = KVec::with_capacity(segs.len(), GFP_KERNEL)?;
        for (page, offset, len) in segs.iter() {
            v.push(
                BvecSeg {
                    page: &**page,
                    offset: *offset,
                    len: *len,
                },
                GFP_KERNEL,
            )?;
        }
        v
    };
    // CAST: at most the send's u32 length.
    let offered = bvec.iter().map(|s| s.len as usize).sum::<usize>();
    match sk.sendmsg_zerocopy(&p.ubuf, &bvec) {
        Ok(n) => {
            // CAST: `n <= offered <= u32::MAX`.
            p.queued += n as u32;
            Ok(n == offered)
        }
        Err(e) if e == EAGAIN => Ok(false),
        Err(e) => Err(e),
    }
}

impl WorkItem for Flow {
    type Pointer = Arc<Flow>;

    fn run(this: Arc<Flow>) {
        let mut guard = this.sock.lock();
        this.push_sends(&mut guard);
        // Also queued when the NIC executed a command that gave it receive
        // room (`Flow::done`): the window may grow now.
        this.consume(&mut guard);
    }
}

// SPDX-License-Identifier: GPL-2.0

//! What the application asks of a flow through `/dev/zeronic`
//! (`cdev_zc.rs`): the checks before a post, receive posts, moving a
//! stream-mode ring's head, and the flow's query. The char device calls
//! these and never touches the flow's state itself.

use kernel::{
    prelude::*,
    sync::{
        atomic::Relaxed,
        Arc, //
    },
};

use crate::{
    flow::{
        Flow,
        Phase,
        RxTarget,
        Seg,
        MAX_SEGS, //
    },
    mr::MrShared,
    uapi,
};

use super::cmds::ms_post_cmd;

impl Flow {
    /// Whether a work request may be posted now: a send (`send`) on a
    /// connection whose sending side is not shut down (`!send_shut`), or a
    /// receive while the flow has room for another segment.
    ///
    /// A receive after the EOF is accepted, as `read()` after it returns 0:
    /// it never reaches the NIC (its flow is gone or going) and completes
    /// with `F_EOF` and nothing in it once the removal did
    /// ([`Flow::post_recv`]). A reset flow is no longer attached.
    ///
    /// # Errors
    ///
    /// - `EPIPE` if the flow is not attached, or a send's side is shut down.
    /// - `EAGAIN` if a receive finds [`MAX_SEGS`] segments posted.
    pub(crate) fn may_post(&self, send: bool, send_shut: bool) -> Result {
        let inner = self.inner.lock();
        if inner.phase != Phase::Attached || send_shut {
            return Err(EPIPE);
        }
        if !send && inner.segs.len() >= MAX_SEGS {
            return Err(EAGAIN);
        }
        Ok(())
    }

    /// Posts a receive segment: into the flow's shadow list first (the NIC
    /// may place into it as soon as it has it), then to the NIC (or, if the
    /// command queue is full, to the flow's deferred commands:
    /// `flow/cmds.rs`). The segment takes over `mr`'s use; on error the use
    /// is given back here.
    ///
    /// # Errors
    ///
    /// - `EIO` if the NIC is broken (or going away): nothing was posted.
    /// - `ENOMEM` if the segment list cannot grow.
    /// - `ENOMEM`, `EINVAL` as [`Flow::post_segment`].
    pub(crate) fn post_recv(self: &Arc<Self>, mr: Arc<MrShared>, wr: &uapi::Wr) -> Result {
        let release = |e: Error| {
            mr.users.fetch_sub(1, Relaxed);
            e
        };
        let mut inner = self.inner.lock();
        inner
            .segs
            .reserve(1, GFP_ATOMIC)
            .map_err(|e| release(e.into()))?;
        let start = inner.posted_end;
        let cmd = ms_post_cmd(self.hw_index, mr.key, wr.offset, wr.len, wr.wr_id);
        self.post_segment(&mut inner, cmd, start, start + u64::from(wr.len))
            // The command queue refuses commands once the NIC is broken or
            // withdrawn (`ENODEV`): POST reports a broken NIC as `EIO`, as
            // the other calls that need it do.
            .map_err(|e| release(if e == ENODEV { EIO } else { e }))?;
        // Cannot fail: reserved above.
        let _ = inner
            .segs
            .push(Seg::new(wr.wr_id, mr, wr.offset, wr.len, start), GFP_ATOMIC);
        inner.posted_end = start + u64::from(wr.len);
        if inner.nic_removed && inner.phase == Phase::Attached {
            // The EOF's removal completed since the caller checked: the NIC
            // never got this segment, and nothing else would give it back.
            self.give_back_removed(&mut inner);
        }
        Ok(())
    }

    /// The application consumed a stream-mode flow's ring up to stream
    /// offset `stream_off`: the NIC may place there again. Process context.
    ///
    /// # Errors
    ///
    /// `EINVAL` if the flow is not in stream mode, or `stream_off` is before
    /// the ring's head or past what was reported.
    pub(crate) fn consume_ring(self: &Arc<Self>, stream_off: u64) -> Result {
        if !matches!(self.target, RxTarget::Ring { .. }) {
            return Err(EINVAL);
        }
        {
            let mut inner = self.inner.lock();
            if stream_off < inner.ring_head || stream_off > inner.ring_reported {
                return Err(EINVAL);
            }
            if stream_off > inner.ring_head {
                inner.ring_head = stream_off;
                // Sends nothing once the NIC flow's removal was asked for
                // (reset, EOF) or the flow detached: its hw index may be
                // another flow's by then.
                self.update_ring_head(&mut inner);
            }
        }
        let mut sk = self.sock.lock();
        self.consume(&mut sk);
        let mut inner = self.inner.lock();
        self.report_ring(&mut inner);
        drop(inner);
        // The application is here: its flow's entries come here too.
        self.follow_cpu();
        Ok(())
    }

    /// Fills `req`'s state and counters (`ZERONIC_IOC_FLOW_QUERY`).
    pub(crate) fn query(&self, req: &mut uapi::FlowQuery) {
        let inner = self.inner.lock();
        req.state = match inner.phase {
            Phase::Attached if inner.eof => uapi::FLOW_EOF,
            Phase::Attached => uapi::FLOW_ATTACHED,
            Phase::Reset => uapi::FLOW_RESET,
            Phase::Detached => uapi::FLOW_DETACHED,
        };
        req.rx_stream_off = inner.rx_done;
        req.tx_stream_off = inner.tx.acked_bytes;
        // CAST: at most MS_PER_FLOW and the CQ's size.
        req.rx_posted = inner.segs.len() as u32;
        req.tx_posted = inner.tx.in_flight() as u32;
        // Under the lock `Flow::consume` updates them with `rx_done`: the
        // stream offset is always placed + copied.
        req.rx_placed_bytes = self.stats.rx_placed.load(Relaxed);
        req.rx_copied_bytes = self.stats.rx_copied.load(Relaxed);
        drop(inner);
        req.tx_merged_bytes = self.stats.tx_merged.load(Relaxed);
        req.tx_copied_bytes = self.stats.tx_copied.load(Relaxed);
        req.reserved = [0; 2];
    }
}

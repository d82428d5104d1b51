// SPDX-License-Identifier: GPL-2.0

//! Sockets served by TCP: flows whose process attached its own socket
//! (`setsockopt(TCP_ULP, "zeronic")`, `attach.rs`).
//!
//! The NIC places received payload into the flow's kernel ring, the NAPI
//! poller hands TCP receipt skbs over those pages (`hdrq.rs`), and TCP's own
//! `recvmsg()`, `poll()` and friends serve them: the flow consumes nothing.
//! What it does is keep the NIC in step with the reader:
//!
//! - the **ring's head** follows `copied_seq`: the NIC places only inside
//!   `[head, head + size)`, and a ring position is reused only for a byte a
//!   ring's size past one the application already read, so the NIC never
//!   writes a byte TCP still holds (in its receive or out-of-order queue);
//! - the **cursor** moves past the bytes TCP holds in order that the NIC did
//!   not place (those that arrived whole on the normal path, because the
//!   ring was full, or before the attach): the NIC then places the next ones
//!   in order again, and the head, which the NIC keeps at or below its
//!   cursor, can follow the reader;
//! - at the end of the stream the NIC flow is removed, as for any flow.
//!
//! The receive window stays TCP's own (no bound, unlike flows whose driver
//! consumes): a peer that sends past the ring's room gets its bytes through
//! the normal path, copied by TCP as on any NIC, never lost.

use kernel::{
    net::sock::{
        context::LockContext,
        Locked,
        RCV_SHUTDOWN, //
    },
    sync::Arc,
};

use crate::flow::{
    stream_off,
    Flow,
    Phase,
    RxTarget, //
};

impl Flow {
    /// Brings the NIC in step with the reader of a served socket (see the
    /// module documentation): after TCP's `recvmsg()`, and whenever TCP
    /// calls the flow back (`sk_data_ready`). Any context with the socket
    /// locked; never sleeps. Idempotent.
    pub(crate) fn follow_reader<C: LockContext>(self: &Arc<Self>, sk: &Locked<'_, C>) {
        let copied_seq = sk.copied_seq();
        let rcv_nxt = sk.rcv_nxt();
        let eof = sk.shutdown() & RCV_SHUTDOWN != 0 && copied_seq == rcv_nxt;
        let mut inner = self.inner.lock();
        if inner.phase != Phase::Attached || inner.eof {
            return;
        }
        // Both within 2^31 of what was read before: TCP's window is far
        // smaller.
        let read = stream_off(self.rx_isn, inner.rx_done, copied_seq);
        let held = stream_off(self.rx_isn, inner.rx_done, rcv_nxt);
        if read > inner.rx_done {
            inner.rx_done = read;
        }
        // Nothing below `held` is the NIC's to write any more: TCP has it.
        // If the NIC placed further than the driver heard of, it refuses the
        // move, which is harmless (its cursor is past `held` then).
        if held > inner.nic_cursor {
            inner.nic_cursor = held;
            self.update_cursor(&mut inner);
        }
        // At most what was read, and at most the cursor (the NIC refuses a
        // head beyond it; the cursor's command goes first). Moved once the
        // reader is an eighth of the ring past it, not on every read: each
        // move is a command (a doorbell and a completion), and the NIC
        // keeps at least seven eighths of the ring as room meanwhile.
        let head = inner.rx_done.min(inner.nic_cursor);
        if head >= inner.ring_head + self.head_step() {
            inner.ring_head = head;
            self.update_ring_head(&mut inner);
        }
        if eof {
            inner.eof = true;
            // Nothing more comes: the NIC flow goes (the ring stays the
            // flow's until it is detached).
            self.end_nic_flow(&mut inner);
        }
    }

    /// How far the reader gets past the ring's head before it moves.
    fn head_step(&self) -> u64 {
        match self.target {
            RxTarget::Ring { size, .. } => (size / 8).max(1),
            // Not a ring: nothing to batch.
            _ => 1,
        }
    }
}

// SPDX-License-Identifier: GPL-2.0

//! A flow's commands to the NIC, and those that wait for room.
//!
//! The data path tells the NIC about receive room without waiting: one
//! `CMD_MS_POST` per posted segment, `CMD_FLOW_UPDATE` of the ring head or
//! the cursor, `CMD_FLOW_REMOVE` after a reset. Many flows posting at once
//! can have far more of these outstanding than the command queue's backlog
//! holds (`MS_PER_FLOW` segments each), so when it is full the flow keeps
//! them ([`Deferred`]) and the queue calls it back ([`CmdRoom`]) once there
//! is room. A post is never refused for it: the segment is posted, the NIC
//! gets it later, and the receive window, which ends at the room the NIC has
//! confirmed, opens later.
//!
//! Order: the NIC executes commands in order and places a posted segment
//! right after the previous one it has, or at its cursor if that is further
//! (hardware spec, `CMD_MS_POST`), so a segment's command never overtakes
//! an earlier one's: once one waits, later ones wait behind it. A segment
//! whose command waited may be completed meanwhile, by bytes copied into it;
//! its command then never goes (the NIC would write into memory the
//! application has back), and the cursor is moved to the next segment's
//! start before that one goes, so that the NIC places it where the driver
//! does. Deferred commands go out as segments, cursor, ring head (the last
//! two carry the newest value when they go; the cursor first, as the NIC
//! refuses a ring head beyond it), removal. Nothing but the removal goes
//! once it was asked for (reset, EOF) or the flow is no longer attached,
//! and nothing at all after it (its Flow Table entry may be another flow's
//! by then): what waited is dropped then, and later cursor or ring head
//! updates are not sent.

use kernel::{prelude::*, sync::Arc};

use crate::{
    cmdq::{
        CmdDone,
        CmdRoom, //
    },
    flow::{
        Awaited,
        Flow,
        FlowInner,
        Phase,
        RxTarget,
        Seg, //
    },
    hw::cmd::{
        CmdEntry,
        CmdMsPost,
        Command,
        FlowRemove,
        FlowUpdate,
        FLOWU_CURSOR,
        FLOWU_RING_HEAD,
        MS_DIR_RECV, //
    },
};

/// Deferred commands a flow gives per call back, so that flows waiting for
/// room take turns.
const ROOM_BATCH: usize = 32;

/// A flow's commands waiting for room in the command backlog, under
/// [`Flow::inner`].
#[derive(Default)]
pub(crate) struct Deferred {
    /// The `MS_POST`s of the last `segs` posted segments.
    pub(crate) segs: usize,
    /// A `FLOWU_RING_HEAD` (of the ring head when it goes).
    ring_head: bool,
    /// A `FLOWU_CURSOR` (of the cursor when it goes).
    cursor: bool,
    /// The `CMD_FLOW_REMOVE` of a reset.
    remove: bool,
    /// Registered with the command queue to be called back.
    waiting: bool,
    /// Where the NIC places the next posted segment as far as the driver
    /// told it: the end of the last segment given, or the cursor given, if
    /// further (the NIC's own cursor, moved by placement, never passes it).
    nic_end: u64,
}

impl Deferred {
    pub(super) fn any(&self) -> bool {
        self.segs != 0 || self.ring_head || self.cursor || self.remove
    }

    /// Forgets the waiting commands that give or move receive room: the NIC
    /// flow is being removed, and they would name an index that may be
    /// another flow's once the removal ran.
    pub(crate) fn drop_data_cmds(&mut self) {
        self.segs = 0;
        self.ring_head = false;
        self.cursor = false;
    }
}

/// Whether commands other than its removal may still name the flow's index:
/// it is attached and no removal was asked for.
pub(super) fn owns_index(inner: &FlowInner) -> bool {
    inner.phase == Phase::Attached && !inner.remove_wanted
}

impl Flow {
    /// Submits one of the flow's commands: `Ok(false)` if the backlog is full
    /// (the flow is then registered for room and the caller defers the
    /// command). `awaited`: what its completion gives the flow (it then
    /// comes back to the flow, [`CmdDone`]); `done`: whether the completion
    /// comes back without (the removal).
    pub(super) fn give(
        self: &Arc<Self>,
        inner: &mut FlowInner,
        cmd: CmdEntry,
        awaited: Option<Awaited>,
        done: bool,
    ) -> Result<bool> {
        if awaited.is_some() {
            inner.awaited.reserve(1, GFP_ATOMIC)?;
        }
        let waiter: Arc<dyn CmdRoom> = self.clone();
        let on_done: Option<Arc<dyn CmdDone>> = if done || awaited.is_some() {
            Some(self.clone())
        } else {
            None
        };
        let given =
            self.control
                .submit_or_wait(cmd, on_done, &waiter, &mut inner.deferred.waiting)?;
        if given {
            if let Some(a) = awaited {
                // Cannot fail: reserved above. The completion cannot come
                // first: it takes `inner`, which the caller holds with
                // interrupts off.
                let _ = inner.awaited.push(a, GFP_ATOMIC);
            }
        }
        Ok(given)
    }

    /// Gives the NIC a segment the caller posts next (message mode), ending
    /// at stream offset `end`, or defers it. Any context.
    ///
    /// # Errors
    ///
    /// - `ENOMEM` if the flow's list of awaited completions cannot grow.
    /// - `ENODEV`, `ENOMEM`, `EINVAL` as
    ///   [`Control::submit_or_wait`](crate::control::Control::submit_or_wait).
    pub(crate) fn post_segment(
        self: &Arc<Self>,
        inner: &mut FlowInner,
        cmd: CmdEntry,
        start: u64,
        end: u64,
    ) -> Result {
        if !owns_index(inner) {
            // The segment is given back with the others when the removal
            // completes (or at detach).
            return Ok(());
        }
        if inner.deferred.segs == 0 && self.give_segment(inner, cmd, start, end)? {
            return Ok(());
        }
        inner.deferred.segs += 1;
        Ok(())
    }

    /// Gives the NIC the `MS_POST` of the segment covering stream offsets
    /// `start..end`, after moving its cursor there if segments before it
    /// were completed without the NIC (see the module's comment).
    fn give_segment(
        self: &Arc<Self>,
        inner: &mut FlowInner,
        cmd: CmdEntry,
        start: u64,
        end: u64,
    ) -> Result<bool> {
        if inner.deferred.nic_end < start {
            // Bytes below `start` were all copied and TCP accepted them:
            // a cursor the NIC takes.
            let cursor = self.update_cmd(FLOWU_CURSOR, start);
            if !self.give(inner, cursor, Some(Awaited::Cursor), false)? {
                return Ok(false);
            }
            inner.deferred.nic_end = start;
        }
        if !self.give(inner, cmd, Some(Awaited::Room(end)), false)? {
            return Ok(false);
        }
        inner.deferred.nic_end = end;
        Ok(true)
    }

    /// Gives the NIC the ring's new head, `inner.ring_head` (stream mode),
    /// and with it the room up to that head plus the ring's size.
    pub(crate) fn update_ring_head(self: &Arc<Self>, inner: &mut FlowInner) {
        if !owns_index(inner) {
            return;
        }
        if inner.deferred.any() {
            inner.deferred.ring_head = true;
            return;
        }
        if let Some((cmd, edge)) = self.ring_head_cmd(inner) {
            match self.give(inner, cmd, Some(Awaited::Room(edge)), false) {
                Ok(true) => {}
                Ok(false) => inner.deferred.ring_head = true,
                Err(e) => pr_debug!("flow {}: ring head not posted: {:?}\n", self.id, e),
            }
        }
    }

    /// Moves the NIC's cursor to `inner.nic_cursor`.
    pub(crate) fn update_cursor(self: &Arc<Self>, inner: &mut FlowInner) {
        if !owns_index(inner) {
            return;
        }
        if inner.deferred.any() {
            inner.deferred.cursor = true;
            return;
        }
        match self.give_cursor(inner) {
            Ok(true) => {}
            Ok(false) => inner.deferred.cursor = true,
            Err(e) => pr_debug!("flow {}: cursor not posted: {:?}\n", self.id, e),
        }
    }

    fn give_cursor(self: &Arc<Self>, inner: &mut FlowInner) -> Result<bool> {
        let to = inner.nic_cursor;
        if !self.give(
            inner,
            self.update_cmd(FLOWU_CURSOR, to),
            Some(Awaited::Cursor),
            false,
        )? {
            return Ok(false);
        }
        inner.deferred.nic_end = inner.deferred.nic_end.max(to);
        Ok(true)
    }

    /// Removes the NIC flow after a reset or EOF ([`Flow::end_nic_flow`]);
    /// its completion gives the segments back. If the command queue is
    /// closed, the NIC is broken or going away: its reset removes the flow.
    pub(crate) fn remove_after_reset(self: &Arc<Self>, inner: &mut FlowInner) {
        match self.give(inner, self.remove_cmd(), None, true) {
            Ok(true) => inner.remove_given = true,
            Ok(false) => inner.deferred.remove = true,
            Err(_) => {}
        }
    }

    /// Gives the NIC what waited for room, in order, at most [`ROOM_BATCH`]
    /// commands before letting other flows go first.
    fn give_deferred(self: &Arc<Self>, inner: &mut FlowInner) -> Result {
        if owns_index(inner) {
            let mut budget = ROOM_BATCH;
            while inner.deferred.segs != 0 {
                if budget == 0 {
                    let waiter: Arc<dyn CmdRoom> = self.clone();
                    return self.control.want_room(&waiter, &mut inner.deferred.waiting);
                }
                let first = inner.segs.len().checked_sub(inner.deferred.segs);
                let Some(seg) = first.and_then(|i| inner.segs.get(i)) else {
                    // Cannot happen: `Flow::segs_removed` keeps the count
                    // within the list.
                    inner.deferred.segs = 0;
                    break;
                };
                let (cmd, start, end) = (self.ms_post_cmd(seg), seg.start, seg.end());
                if !self.give_segment(inner, cmd, start, end)? {
                    return Ok(());
                }
                inner.deferred.segs -= 1;
                budget -= 1;
            }
            if inner.deferred.cursor {
                if !self.give_cursor(inner)? {
                    return Ok(());
                }
                inner.deferred.cursor = false;
            }
            if inner.deferred.ring_head {
                if let Some((cmd, edge)) = self.ring_head_cmd(inner) {
                    if !self.give(inner, cmd, Some(Awaited::Room(edge)), false)? {
                        return Ok(());
                    }
                }
                inner.deferred.ring_head = false;
            }
        }
        // A detach removes the flow itself (waiting for the NIC).
        if inner.phase != Phase::Detached && inner.remove_wanted && inner.deferred.remove {
            if !self.give(inner, self.remove_cmd(), None, true)? {
                return Ok(());
            }
            inner.remove_given = true;
            inner.deferred.remove = false;
        }
        Ok(())
    }

    /// Segments were taken off the front of `inner.segs` (completed, or
    /// given back): those among them that waited for room never go.
    pub(crate) fn segs_removed(inner: &mut FlowInner) {
        inner.deferred.segs = inner.deferred.segs.min(inner.segs.len());
    }

    /// The `CMD_MS_POST` of a receive segment.
    pub(crate) fn ms_post_cmd(&self, seg: &Seg) -> CmdEntry {
        ms_post_cmd(self.hw_index, seg.mr.key, seg.mr_off, seg.len, seg.wr_id)
    }

    /// The `FLOWU_RING_HEAD` of the ring head and the room it gives.
    fn ring_head_cmd(&self, inner: &FlowInner) -> Option<(CmdEntry, u64)> {
        let RxTarget::Ring { size, .. } = &self.target else {
            return None;
        };
        let cmd = self.update_cmd(FLOWU_RING_HEAD, inner.ring_head);
        Some((cmd, inner.ring_head + size))
    }

    /// This flow's `CMD_FLOW_UPDATE` of `flag` at `stream_off`.
    pub(super) fn update_cmd(&self, flag: u16, stream_off: u64) -> CmdEntry {
        FlowUpdate {
            flow: self.hw_index,
            flags: flag,
            stream_off,
        }
        .entry()
    }

    fn remove_cmd(&self) -> CmdEntry {
        FlowRemove {
            flow: self.hw_index,
        }
        .entry()
    }
}

/// The `CMD_MS_POST` of a receive segment of `len` bytes at `mr_off` of
/// region `key`, on NIC flow `hw_index`.
pub(crate) fn ms_post_cmd(hw_index: u32, key: u64, mr_off: u64, len: u32, wr_id: u64) -> CmdEntry {
    CmdMsPost {
        flow: hw_index,
        dir: MS_DIR_RECV,
        mr_key: key,
        mr_offset: mr_off,
        len,
        seg_cookie: wr_id,
        ..Default::default()
    }
    .entry()
}

impl CmdRoom for Flow {
    fn room(self: Arc<Self>) {
        let mut inner = self.inner.lock();
        inner.deferred.waiting = false;
        if let Err(e) = self.give_deferred(&mut inner) {
            pr_debug!("flow {}: deferred commands not posted: {:?}\n", self.id, e);
            // Closed: the NIC is broken or going away, and its reset ends
            // the flow. Otherwise (no memory) the next pass tries again.
            if e != ENODEV {
                let waiter: Arc<dyn CmdRoom> = self.clone();
                let _ = self.control.want_room(&waiter, &mut inner.deferred.waiting);
            }
        }
    }
}

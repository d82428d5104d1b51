//! Flow Table and per-flow receive state: cursor, MS List (posted receive
//! segments, or a ring window) and the out-of-order placed ranges. Pure
//! bookkeeping; the DMA itself is done by the RX unit.
//!
//! Everything here is bounded per flow: `MS_PER_FLOW` segments and
//! `FLOW_MAX_OOO` out-of-order ranges (a packet that would need one more is
//! not placed, [`Plan::OooFull`]), so memory and the work per packet
//! (binary searches over at most those many entries) stay constant.
//! Stream offsets from commands stay below `STREAM_OFF_LIMIT`, so adding a
//! packet's (32-bit) position and length to them never wraps; the sums are
//! checked all the same.

use std::collections::{HashMap, VecDeque};

use zeronic_hw::cmd::*;
use zeronic_hw::regs::{FLOW_CAPACITY, FLOW_MAX_OOO, MAX_QP, MS_PER_FLOW};
use zeronic_hw::status::*;

use zeronic_hw::net::{ipv4_mapped, is_ipv4_mapped};

use crate::mr::MrTable;

/// 5-tuple key as seen from this port: (port, local ip, local port, remote
/// ip, remote port); IPv4 addresses IPv4-mapped (an IPv6 flow never has
/// one, so the families cannot collide).
pub type FlowKey = (u16, [u8; 16], u16, [u8; 16], u16);

/// A posted receive segment covering stream `[start, start + len)`.
#[derive(Clone, Copy, Debug)]
pub struct Seg {
    /// Stream offset of the first byte.
    pub start: u64,
    /// Bytes.
    pub len: u64,
    /// MR key.
    pub key: u64,
    /// Offset in the MR.
    pub mr_off: u64,
}

/// Ring placement target.
#[derive(Clone, Copy, Debug)]
pub struct RingTarget {
    key: u64,
    off: u64,
    size: u64,
    head: u64,
}

/// One offloaded flow.
pub struct Flow {
    /// Lookup key.
    pub key: FlowKey,
    /// Sequence number of stream offset 0.
    pub rx_isn: u32,
    /// Stream offset below which everything is placed.
    pub cursor: u64,
    segs: VecDeque<Seg>,
    post_end: u64,
    ring: Option<RingTarget>,
    /// Ring mode whose ring MR was invalidated: nothing can be placed.
    ring_dead: bool,
    /// Placed ranges above the cursor, sorted, disjoint, not adjacent.
    ooo: Vec<(u64, u64)>,
    /// Stream offset just past the largest receive window the host
    /// advertised: TCP refuses bytes at or past it, so none are placed.
    edge: u64,
    /// Shift of the window field in the host's ACKs.
    wscale: u8,
    /// Queue pair of its header entries and normal-path completions (§14).
    pub notify: u32,
}

/// Where a packet's payload goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Overlaps bytes already placed (below the cursor or in an
    /// out-of-order range): nothing is written. Each byte is written at
    /// most once, by the first packet that brought it, so bytes TCP may
    /// already hold never change; the frame takes the normal path, where
    /// TCP decides on its own bytes.
    Dup,
    /// Write the whole payload, `[start, start + len)` in stream offsets,
    /// to these (key, mr offset, len) pieces.
    Place {
        /// Stream offset of the first byte written (the packet's own).
        start: u64,
        /// (MR key, MR offset, length) pieces in order.
        pieces: Vec<(u64, u64, u64)>,
    },
    /// Not (entirely) inside posted space.
    NoSpace,
    /// Reaches past the receive window the host advertised: TCP would
    /// refuse those bytes, so the NIC writes none of them.
    Unacceptable,
    /// Inside posted space, but placing it would need more than
    /// `FLOW_MAX_OOO` out-of-order ranges.
    OooFull,
}

impl Flow {
    /// Stream offset of sequence number `seq`, relative to the cursor; None
    /// if it would be before stream offset 0.
    pub fn stream_off(&self, seq: u32) -> Option<u64> {
        let cur_seq = self.rx_isn.wrapping_add(self.cursor as u32);
        let d = seq.wrapping_sub(cur_seq) as i32;
        if d >= 0 {
            self.cursor.checked_add(d as u64)
        } else {
            self.cursor.checked_sub(d.unsigned_abs() as u64)
        }
    }

    /// Plans placement of `len` payload bytes starting at stream offset `o`.
    pub fn plan(&self, o: u64, len: u64) -> Plan {
        let Some(end) = o.checked_add(len) else {
            return Plan::NoSpace;
        };
        if self.overlaps_placed(o, end) {
            return Plan::Dup;
        }
        if end > self.edge {
            return Plan::Unacceptable;
        }
        let start = o;
        let mut pieces = Vec::new();
        if self.ring_dead {
            return Plan::NoSpace;
        }
        if let Some(r) = &self.ring {
            if r.head.checked_add(r.size).is_none_or(|lim| end > lim) {
                return Plan::NoSpace;
            }
            let mut s = start;
            while s < end {
                let ro = s % r.size;
                let n = (end - s).min(r.size - ro);
                // ring offset + size was checked against the MR at install.
                pieces.push((r.key, r.off + ro, n));
                s += n;
            }
        } else {
            // Segments are in stream order and end before STREAM_OFF_LIMIT.
            let mut s = start;
            let first = self.segs.partition_point(|seg| seg.start + seg.len <= s);
            for seg in self.segs.range(first..) {
                if s >= end {
                    break;
                }
                if seg.start > s {
                    return Plan::NoSpace; // a hole (segment dropped)
                }
                let skip = s - seg.start;
                let n = (end - s).min(seg.len - skip);
                pieces.push((seg.key, seg.mr_off + skip, n));
                s += n;
            }
            if s < end {
                return Plan::NoSpace;
            }
        }
        if !self.ooo_fits(start, end) {
            return Plan::OooFull;
        }
        Plan::Place { start, pieces }
    }

    /// True if `[o, end)` holds a byte already placed: below the cursor or
    /// in an out-of-order range (an empty range holds none).
    fn overlaps_placed(&self, o: u64, end: u64) -> bool {
        if o >= end {
            return false;
        }
        if o < self.cursor {
            return true;
        }
        // The first range ending after `o` is the only one that can overlap
        // without a later one starting below `end` first.
        let i = self.ooo.partition_point(|&(_, b)| b <= o);
        self.ooo.get(i).is_some_and(|&(a, _)| a < end)
    }

    /// Index range of the out-of-order ranges that `[start, end)` overlaps
    /// or touches (they merge with it).
    fn ooo_touching(&self, start: u64, end: u64) -> std::ops::Range<usize> {
        let lo = self.ooo.partition_point(|&(_, b)| b < start);
        let hi = self.ooo.partition_point(|&(a, _)| a <= end);
        lo..hi.max(lo)
    }

    /// True if placing `[start, end)` leaves at most `FLOW_MAX_OOO` ranges
    /// above the cursor (a placement at the cursor never adds one).
    fn ooo_fits(&self, start: u64, end: u64) -> bool {
        if start <= self.cursor {
            return true;
        }
        let merged = self.ooo_touching(start, end).len();
        self.ooo.len() + 1 - merged <= FLOW_MAX_OOO as usize
    }

    /// Out-of-order ranges tracked above the cursor.
    pub fn ooo_ranges(&self) -> usize {
        self.ooo.len()
    }

    /// Records `[start, end)` as placed and advances the cursor over any
    /// contiguous placed data; retires segments wholly below the cursor.
    pub fn mark_placed(&mut self, start: u64, end: u64) {
        if start <= self.cursor {
            self.advance(end);
            return;
        }
        // Above the cursor with a gap: no absorption, just merge ranges.
        let r = self.ooo_touching(start, end);
        let (mut s, mut e) = (start, end);
        if !r.is_empty() {
            s = s.min(self.ooo[r.start].0);
            e = e.max(self.ooo[r.end - 1].1);
        }
        self.ooo.splice(r, [(s, e)]);
    }

    /// Moves the cursor to at least `to`: out-of-order ranges it covers
    /// are dropped and one that it reaches (starting at or below the new
    /// cursor) is absorbed, moving the cursor to its end.
    pub fn advance(&mut self, to: u64) {
        self.cursor = self.cursor.max(to);
        let below = self.ooo.partition_point(|&(a, _)| a <= self.cursor);
        if below > 0 {
            self.cursor = self.cursor.max(self.ooo[below - 1].1);
            self.ooo.drain(..below);
        }
        let done = self
            .segs
            .partition_point(|seg| seg.start + seg.len <= self.cursor);
        self.segs.drain(..done);
        self.post_end = self.post_end.max(self.cursor);
    }

    /// Posted receive segments.
    pub fn posted(&self) -> usize {
        self.segs.len()
    }

    /// Stream offset just past the receive window the host advertised.
    pub fn edge(&self) -> u64 {
        self.edge
    }

    /// Raises the receive window edge to `to` (stream offset); a lower
    /// one changes nothing: TCP accepts up to the largest edge it offered.
    pub fn raise_edge(&mut self, to: u64) {
        self.edge = self.edge.max(to.min(STREAM_OFF_LIMIT));
    }

    /// Learns the window of an ACK the host sends on this flow: its
    /// acknowledgment number plus the window field scaled by `rx_wscale`
    /// is the right edge TCP offered. An edge more than 2^31 from the
    /// cursor names no stream offset and is ignored.
    pub fn learn_ack(&mut self, ack: u32, win: u16) {
        let edge_seq = ack.wrapping_add(u32::from(win) << self.wscale);
        if let Some(to) = self.stream_off(edge_seq) {
            self.raise_edge(to);
        }
    }
}

/// The Flow Table.
pub struct FlowTable {
    slots: Vec<Option<Flow>>,
    index: HashMap<FlowKey, u32>,
}

impl Default for FlowTable {
    fn default() -> Self {
        Self::new()
    }
}

impl FlowTable {
    /// Empty table of `FLOW_CAPACITY` entries.
    pub fn new() -> Self {
        Self {
            slots: (0..FLOW_CAPACITY).map(|_| None).collect(),
            index: HashMap::new(),
        }
    }

    /// Installed flows.
    pub fn used(&self) -> usize {
        self.index.len()
    }

    /// Looks up the flow of an RX packet.
    pub fn lookup(&self, key: &FlowKey) -> Option<u32> {
        self.index.get(key).copied()
    }

    /// Flow by index.
    pub fn get_mut(&mut self, idx: u32) -> Option<&mut Flow> {
        self.slots.get_mut(idx as usize).and_then(|s| s.as_mut())
    }

    /// Installed flows, for invariant checks.
    pub fn iter(&self) -> impl Iterator<Item = &Flow> {
        self.slots.iter().flatten()
    }

    /// CMD_FLOW_INSTALL; `addr6` is the address block of an IPv6 flow
    /// (`FLOWI_IPV6`, read by the caller), None for IPv4.
    pub fn install(
        &mut self,
        c: &CmdFlow,
        addr6: Option<&FlowAddr6>,
        nports: u32,
        mrs: &MrTable,
    ) -> Result<u32, u16> {
        if c.port as u32 >= nports {
            return Err(ST_PORT);
        }
        if c.proto != IPPROTO_TCP || c.rx_wscale > FLOW_MAX_WSCALE {
            return Err(ST_BAD_DESC);
        }
        // Other flag bits are ignored, as before version 2.2.
        let notify = if c.flags & FLOWI_QUEUE != 0 {
            let q = u32::from(c.flags) >> FLOW_QUEUE_SHIFT;
            if q >= MAX_QP {
                return Err(ST_BAD_DESC);
            }
            q
        } else {
            0
        };
        let ring = match c.mode {
            FLOW_RX_SEGMENTS => None,
            FLOW_RX_RING => {
                let window_end = c.stream_off.checked_add(c.ring_size as u64);
                if c.ring_size == 0 || window_end.is_none_or(|e| e > STREAM_OFF_LIMIT) {
                    return Err(ST_BAD_DESC);
                }
                mrs.check(
                    c.ring_key,
                    MR_ACCESS_LOCAL_WRITE,
                    c.ring_offset,
                    c.ring_size as u64,
                )?;
                Some(RingTarget {
                    key: c.ring_key,
                    off: c.ring_offset,
                    size: c.ring_size as u64,
                    head: c.stream_off,
                })
            }
            _ => return Err(ST_BAD_DESC),
        };
        let (local, remote) = match addr6 {
            Some(a) => {
                // A mapped address is IPv4 on the wire: never an IPv6 flow.
                if is_ipv4_mapped(&a.local_addr) || is_ipv4_mapped(&a.remote_addr) {
                    return Err(ST_BAD_DESC);
                }
                (a.local_addr, a.remote_addr)
            }
            None => (
                ipv4_mapped(c.local_ip.to_be_bytes()),
                ipv4_mapped(c.remote_ip.to_be_bytes()),
            ),
        };
        // Version 2.5: the first window edge, as FLOWU_EDGE would give it.
        let edge = if c.flags & FLOWI_EDGE != 0 {
            if u64::from(c.flow) >= 1 << 31 {
                return Err(ST_BAD_DESC);
            }
            Some(u64::from(c.flow))
        } else {
            None
        };
        let key = (c.port, local, c.local_port, remote, c.remote_port);
        if self.index.contains_key(&key) {
            return Err(ST_EXISTS);
        }
        let idx = self
            .slots
            .iter()
            .position(|s| s.is_none())
            .ok_or(ST_NO_SPACE)?;
        let cursor = ring.map_or(0, |r| r.head);
        self.slots[idx] = Some(Flow {
            key,
            rx_isn: c.rx_isn,
            cursor,
            segs: VecDeque::new(),
            post_end: cursor,
            ring,
            ring_dead: false,
            ooo: Vec::new(),
            // Nothing is placed before the driver or an ACK names an edge.
            edge: cursor,
            // CAST: at most FLOW_MAX_WSCALE (checked above).
            wscale: c.rx_wscale as u8,
            notify,
        });
        if let (Some(to), Some(f)) = (edge, self.slots[idx].as_mut()) {
            f.raise_edge(to);
        }
        self.index.insert(key, idx as u32);
        Ok(idx as u32)
    }

    /// CMD_FLOW_UPDATE; returns the cursor after it. Both flags together
    /// move the cursor first, then the ring head; `FLOWU_EDGE` comes alone.
    /// Nothing changes on error.
    pub fn update(&mut self, c: &CmdFlow) -> Result<u64, u16> {
        if c.flags == FLOWU_QUEUE {
            if c.stream_off >= u64::from(MAX_QP) {
                return Err(ST_BAD_DESC);
            }
            let f = self.get_mut(c.flow).ok_or(ST_NOT_FOUND)?;
            // CAST: below MAX_QP (checked).
            f.notify = c.stream_off as u32;
            return Ok(f.cursor);
        }
        if c.flags & !(FLOWU_RING_HEAD | FLOWU_CURSOR | FLOWU_EDGE) != 0
            || c.flags == 0
            || (c.flags & FLOWU_EDGE != 0 && c.flags != FLOWU_EDGE)
        {
            return Err(ST_BAD_DESC);
        }
        let f = self.get_mut(c.flow).ok_or(ST_NOT_FOUND)?;
        let to = c.stream_off;
        if c.flags == FLOWU_EDGE {
            if to >= STREAM_OFF_LIMIT {
                return Err(ST_BAD_DESC);
            }
            f.raise_edge(to);
            return Ok(f.cursor);
        }
        if c.flags & FLOWU_CURSOR != 0 && (to < f.cursor || to >= STREAM_OFF_LIMIT) {
            return Err(ST_BAD_DESC);
        }
        if c.flags & FLOWU_RING_HEAD != 0 {
            let Some(r) = f.ring.as_ref() else {
                return Err(ST_BAD_DESC);
            };
            let cursor_after = if c.flags & FLOWU_CURSOR != 0 {
                to
            } else {
                f.cursor
            };
            if to < r.head || to > cursor_after {
                return Err(ST_BAD_DESC);
            }
        }
        if c.flags & FLOWU_CURSOR != 0 {
            f.advance(to);
        }
        if let Some(r) = f.ring.as_mut().filter(|_| c.flags & FLOWU_RING_HEAD != 0) {
            r.head = to;
        }
        Ok(f.cursor)
    }

    /// CMD_FLOW_REMOVE.
    pub fn remove(&mut self, idx: u32) -> Result<(), u16> {
        let f = self
            .slots
            .get_mut(idx as usize)
            .and_then(|s| s.take())
            .ok_or(ST_NOT_FOUND)?;
        self.index.remove(&f.key);
        Ok(())
    }

    /// CMD_MS_POST; returns the segment's start stream offset.
    pub fn post(&mut self, c: &CmdMsPost, mrs: &MrTable) -> Result<u64, u16> {
        if c.dir == MS_DIR_SEND {
            return Err(ST_UNSUPPORTED);
        }
        if c.dir != MS_DIR_RECV || c.len == 0 {
            return Err(ST_BAD_DESC);
        }
        let f = self.get_mut(c.flow).ok_or(ST_NOT_FOUND)?;
        if f.ring.is_some() {
            return Err(ST_BAD_DESC);
        }
        mrs.check(c.mr_key, MR_ACCESS_LOCAL_WRITE, c.mr_offset, c.len as u64)?;
        if f.segs.len() >= MS_PER_FLOW as usize {
            return Err(ST_NO_SPACE);
        }
        let start = f.post_end.max(f.cursor);
        let end = start
            .checked_add(c.len as u64)
            .filter(|&e| e <= STREAM_OFF_LIMIT)
            .ok_or(ST_BAD_DESC)?;
        f.segs.push_back(Seg {
            start,
            len: c.len as u64,
            key: c.mr_key,
            mr_off: c.mr_offset,
        });
        f.post_end = end;
        Ok(start)
    }

    /// Drops every receive segment and ring target on `key` (MR invalidated).
    pub fn drop_key(&mut self, key: u64) {
        for f in self.slots.iter_mut().flatten() {
            f.segs.retain(|s| s.key != key);
            if f.ring.is_some_and(|r| r.key == key) {
                f.ring_dead = true;
            }
        }
    }
}

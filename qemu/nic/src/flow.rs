//! Flow Table and per-flow receive state: cursor, MS List (posted receive
//! segments, or a ring window) and the out-of-order placed ranges. Pure
//! bookkeeping; the DMA itself is done by the RX unit.

use std::collections::{HashMap, VecDeque};

use zeronic_hw::cmd::*;
use zeronic_hw::regs::{FLOW_CAPACITY, MS_PER_FLOW};
use zeronic_hw::status::*;

use crate::mr::MrTable;

/// 5-tuple key as seen from this port: (port, local ip, local port, remote ip, remote port).
pub type FlowKey = (u16, u32, u16, u32, u16);

/// A posted receive segment covering stream `[start, start + len)`.
#[derive(Clone, Copy, Debug)]
pub struct Seg {
    /// Stream offset of the first byte.
    pub start: u64,
    /// Bytes.
    pub len: u64,
    /// MR key.
    pub key: u32,
    /// Offset in the MR.
    pub mr_off: u64,
}

/// Ring placement target.
#[derive(Clone, Copy, Debug)]
pub struct RingTarget {
    key: u32,
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
}

/// Where a packet's payload goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Entirely below the cursor: nothing to write.
    Dup,
    /// Write `[start, end)` (stream offsets) to these (key, mr offset, len) pieces;
    /// `skip` leading payload bytes lie below the cursor.
    Place {
        /// Payload bytes below the cursor (not rewritten).
        skip: u64,
        /// Stream offset of the first byte written.
        start: u64,
        /// (MR key, MR offset, length) pieces in order.
        pieces: Vec<(u32, u64, u64)>,
    },
    /// Not (entirely) inside posted space.
    NoSpace,
}

impl Flow {
    /// Stream offset of sequence number `seq`, relative to the cursor; None
    /// if it would be before stream offset 0.
    pub fn stream_off(&self, seq: u32) -> Option<u64> {
        let cur_seq = self.rx_isn.wrapping_add(self.cursor as u32);
        let d = seq.wrapping_sub(cur_seq) as i32 as i64;
        let o = self.cursor as i64 + d;
        (o >= 0).then_some(o as u64)
    }

    /// Plans placement of `len` payload bytes starting at stream offset `o`.
    pub fn plan(&self, o: u64, len: u64) -> Plan {
        let end = o + len;
        if end <= self.cursor {
            return Plan::Dup;
        }
        let start = o.max(self.cursor);
        let mut pieces = Vec::new();
        if self.ring_dead {
            return Plan::NoSpace;
        }
        if let Some(r) = &self.ring {
            if end > r.head + r.size {
                return Plan::NoSpace;
            }
            let mut s = start;
            while s < end {
                let ro = s % r.size;
                let n = (end - s).min(r.size - ro);
                pieces.push((r.key, r.off + ro, n));
                s += n;
            }
        } else {
            let mut s = start;
            for seg in &self.segs {
                if s >= end {
                    break;
                }
                if seg.start + seg.len <= s {
                    continue;
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
        Plan::Place {
            skip: start - o,
            start,
            pieces,
        }
    }

    /// Records `[start, end)` as placed and advances the cursor over any
    /// contiguous placed data; retires segments wholly below the cursor.
    pub fn mark_placed(&mut self, start: u64, end: u64) {
        if start <= self.cursor && self.ooo.is_empty() {
            // In-order fast path: no range bookkeeping.
            self.advance(end);
            return;
        }
        let (mut s, mut e) = (start, end);
        let mut out = Vec::with_capacity(self.ooo.len() + 1);
        for &(a, b) in &self.ooo {
            if b < s || a > e {
                out.push((a, b));
            } else {
                s = s.min(a);
                e = e.max(b);
            }
        }
        out.push((s, e));
        out.sort_unstable();
        self.ooo = out;
        self.advance(self.cursor);
    }

    /// Moves the cursor to at least `to`, absorbing placed ranges.
    pub fn advance(&mut self, to: u64) {
        self.cursor = self.cursor.max(to);
        while let Some(&(a, b)) = self.ooo.first() {
            if a > self.cursor {
                break;
            }
            self.cursor = self.cursor.max(b);
            self.ooo.remove(0);
        }
        while let Some(seg) = self.segs.front() {
            if seg.start + seg.len > self.cursor {
                break;
            }
            self.segs.pop_front();
        }
        self.post_end = self.post_end.max(self.cursor);
    }

    /// Posted receive segments.
    pub fn posted(&self) -> usize {
        self.segs.len()
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

    /// CMD_FLOW_INSTALL.
    pub fn install(&mut self, c: &CmdFlow, nports: u32, mrs: &MrTable) -> Result<u32, u16> {
        if c.port as u32 >= nports {
            return Err(ST_PORT);
        }
        if c.proto != IPPROTO_TCP {
            return Err(ST_BAD_DESC);
        }
        let ring = match c.mode {
            FLOW_RX_SEGMENTS => None,
            FLOW_RX_RING => {
                if c.ring_size == 0 {
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
        let key = (c.port, c.local_ip, c.local_port, c.remote_ip, c.remote_port);
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
        });
        self.index.insert(key, idx as u32);
        Ok(idx as u32)
    }

    /// CMD_FLOW_UPDATE.
    pub fn update(&mut self, c: &CmdFlow) -> Result<(), u16> {
        if c.flags & !(FLOWU_RING_HEAD | FLOWU_CURSOR) != 0 || c.flags == 0 {
            return Err(ST_BAD_DESC);
        }
        let f = self.get_mut(c.flow).ok_or(ST_NOT_FOUND)?;
        if c.flags & FLOWU_CURSOR != 0 {
            if c.stream_off < f.cursor {
                return Err(ST_BAD_DESC);
            }
            f.ooo.retain(|&(_, b)| b > c.stream_off);
            f.advance(c.stream_off);
        }
        if c.flags & FLOWU_RING_HEAD != 0 {
            let Some(r) = f.ring.as_mut() else {
                return Err(ST_BAD_DESC);
            };
            if c.stream_off < r.head || c.stream_off > f.cursor {
                return Err(ST_BAD_DESC);
            }
            r.head = c.stream_off;
        }
        Ok(())
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
        f.segs.push_back(Seg {
            start,
            len: c.len as u64,
            key: c.mr_key,
            mr_off: c.mr_offset,
        });
        f.post_end = start + c.len as u64;
        Ok(start)
    }

    /// Drops every receive segment and ring target on `key` (MR invalidated).
    pub fn drop_key(&mut self, key: u32) {
        for f in self.slots.iter_mut().flatten() {
            f.segs.retain(|s| s.key != key);
            if f.ring.is_some_and(|r| r.key == key) {
                f.ring_dead = true;
            }
        }
    }
}

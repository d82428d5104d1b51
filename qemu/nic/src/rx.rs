//! RX unit: normal delivery into posted RX buffers, and the RX Split Unit
//! for installed flows (checksum, placement by sequence number through the
//! MS List and MR Table, header + placement metadata on the header queue,
//! coalescing of contiguous placements).
//!
//! A flow packet's TCP checksum is known good before any of its bytes are
//! written: either verified by a read pass, or, for a merged frame whose
//! checksum the sender's TX Merge Unit has not inserted yet, computed by the
//! placement pass from the very bytes it copies (it cannot disagree).

use std::time::Instant;

use zeronic_hw::cmd::MR_ACCESS_LOCAL_WRITE;
use zeronic_hw::desc::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;

use crate::csum::{copy_stream, copy_sum_stream, pseudo_tcp, sum_raw};
use crate::device::{Device, OpenHdr, Shape};
use crate::flow::Plan;
use crate::frame::{ipv6_ext_frame, max_frame_len, parse_tcp, Frame, Tcp, TCP_ACK, TCP_PSH};
use crate::steer::{parse_l3, Verdict};
use zeronic_hw::net::is_ipv4_mapped;

/// Checksum of the TCP segment of `f` (pseudo-header included); true if good.
fn tcp_csum_ok(f: &Frame, t: &Tcp) -> bool {
    let mut c = pseudo_tcp(t, t.tcp_len());
    let r = f.for_pieces(t.l4_off(), t.tcp_len(), |p, n| {
        // SAFETY: for_pieces hands out ranges valid for the call.
        c.add_sum(unsafe { sum_raw(p, n) }, n)
    });
    r.is_ok() && c.folded() == 0xffff
}

fn shape(t: &Tcp) -> Shape {
    Shape {
        ack: t.ack,
        tos: t.tos,
        ttl: t.ttl,
        flow_label: t.flow_label,
        ihl: t.ihl as u8,
        thl: t.thl as u8,
    }
}

impl Device {
    /// Receives one frame from the wire on port `p`.
    pub fn rx_frame(&mut self, p: u32, f: &mut Frame, now: Instant) {
        if self.frozen {
            return; // a dead NIC: not even counted
        }
        let Some(port) = self.ports.get(p as usize) else {
            return;
        };
        let len = f.len();
        self.pstat(p, PSTAT_RX_FRAMES, 1);
        self.pstat(p, PSTAT_RX_BYTES, len as u64);
        if !self.enabled() || !port.enabled || self.mem.is_none() {
            self.pstat(p, PSTAT_RX_NO_BUF, 1);
            return;
        }
        if len > max_frame_len(port.mtu, &f.head) {
            self.pstat(p, PSTAT_RX_MALFORMED, 1);
            return;
        }
        let parsed = parse_tcp(&f.head, len);
        // IPv4 flows are keyed by IPv4-mapped addresses, which no IPv6
        // flow has: an IPv6 frame carrying them matches no flow (§15).
        let flow = match parsed {
            Ok(Some(t)) if t.v6 && (is_ipv4_mapped(&t.src) || is_ipv4_mapped(&t.dst)) => None,
            Ok(Some(t)) => self
                .flows
                .lookup(&(p as u16, t.dst, t.dport, t.src, t.sport)),
            _ => None,
        };
        // Only placement folds a pending TX checksum into its copy; every
        // other path needs the frame's bytes final first.
        if flow.is_none() && f.finalize().is_err() {
            self.pstat(p, PSTAT_RX_PLACE_ERR, 1);
            return;
        }
        if parsed.is_err() {
            return self.pstat(p, PSTAT_RX_MALFORMED, 1);
        }
        // Receive steering (§14) of a frame of no flow: rules, RSS, else
        // queue pair 0; the frame is parsed only if a rule or RSS needs it.
        let mut qp = 0;
        if flow.is_none() {
            let s = &self.ports[p as usize].steer;
            if s.has_rules() || s.ctrl & RSS_CTRL_ENABLE != 0 {
                match s.steer(parse_l3(&f.head).as_ref()) {
                    Verdict::Drop => return self.pstat(p, PSTAT_RX_RULE_DROP, 1),
                    Verdict::Queue(q) => qp = self.steer_to(p, q),
                }
            }
        }
        match parsed {
            Err(_) => {}
            Ok(None) => {
                if ipv6_ext_frame(&f.head) {
                    self.pstat(p, PSTAT_RX_V6_EXTHDR, 1);
                }
                self.rx_normal(p, qp, f, 0, 0, now)
            }
            Ok(Some(t)) => match flow {
                Some(idx) => self.rx_flow(p, idx, f, &t, now),
                None => {
                    let ok = tcp_csum_ok(f, &t);
                    let fl = RXF_TCP | if ok { RXF_CSUM_OK } else { RXF_CSUM_BAD };
                    self.rx_normal(p, qp, f, fl, 0, now)
                }
            },
        }
    }

    /// The queue pair of port `p` a frame steered to `q` goes to: `q` if
    /// it is active, else queue pair 0 (`PSTAT_RX_BAD_QUEUE`).
    fn steer_to(&self, p: u32, q: u32) -> u32 {
        let (k, ok) = self.ports[p as usize].active_qp(q);
        if !ok {
            self.pstat(p, PSTAT_RX_BAD_QUEUE, 1);
        }
        k
    }

    /// The queue pair that gets flow `idx`'s entries on port `p`.
    fn flow_qp(&mut self, p: u32, idx: u32) -> u32 {
        let q = self.flows.get_mut(idx).map_or(0, |fl| fl.notify);
        self.steer_to(p, q)
    }

    /// Delivers a frame whole into the next RX buffer of queue pair `k`.
    fn rx_normal(&mut self, p: u32, k: u32, f: &Frame, flags: u16, flow: u32, now: Instant) {
        let Some(mem) = self.mem.clone() else { return };
        let port = &mut self.ports[p as usize];
        let (rss_hash, rss_type) = if port.steer.ctrl & RSS_CTRL_HASH != 0 {
            port.steer.hash(parse_l3(&f.head).as_ref())
        } else {
            (0, 0)
        };
        let qp = &mut port.qps[k as usize];
        let Some(pending) = qp.rxq.pending(&self.bar) else {
            self.fail_qp_queue(p, k, QK_RXQ);
            self.pstat(p, PSTAT_RX_NO_BUF, 1);
            self.qstat(p, k, QSTAT_RX_DROPS, 1);
            return;
        };
        let qp = &mut self.ports[p as usize].qps[k as usize];
        if pending == 0 || qp.rxcq.space(&self.bar) == 0 {
            self.pstat(p, PSTAT_RX_NO_BUF, 1);
            self.qstat(p, k, QSTAT_RX_DROPS, 1);
            return;
        }
        let index = qp.rxq.idx;
        let desc = mem.read_array::<16>(qp.rxq.slot(index));
        qp.rxq.consume(&self.bar);
        let len = f.len();
        let status = match desc.map(|b| RxBufDesc::decode(&b)) {
            Err(_) => ST_DMA,
            Ok(d) if (d.len as usize) < len => ST_TOO_BIG,
            Ok(d) => match mem.check(d.addr, len as u64) {
                Err(_) => ST_DMA,
                Ok(dst) => {
                    let mut off = 0;
                    let r = f.for_pieces(0, len, |src, n| {
                        // SAFETY: dst..dst+len is inside guest RAM (checked)
                        // and off + n <= len; src is valid for the call.
                        unsafe { copy_stream(dst.add(off), src, n) };
                        off += n;
                    });
                    if r.is_ok() {
                        ST_OK
                    } else {
                        ST_DMA
                    }
                }
            },
        };
        match status {
            ST_OK => {
                self.pstat(p, PSTAT_RX_NORMAL, 1);
                self.qstat(p, k, QSTAT_RX_PACKETS, 1);
                self.qstat(p, k, QSTAT_RX_BYTES, len as u64);
            }
            ST_TOO_BIG => self.pstat(p, PSTAT_RX_BUF_SMALL, 1),
            _ => self.pstat(p, PSTAT_RX_PLACE_ERR, 1),
        }
        let c = RxCompletion {
            index,
            len: len as u32,
            status,
            flags,
            flow,
            rss_hash,
            rss_type,
            ..Default::default()
        };
        if self.ports[p as usize].qps[k as usize]
            .rxcq
            .produce(&self.bar, &mem, &c.encode())
        {
            self.note_entry(vec_qp_rx(self.nports, p, k), now);
        }
    }

    /// RX Split Unit for a packet of installed flow `idx`.
    fn rx_flow(&mut self, p: u32, idx: u32, f: &mut Frame, t: &Tcp, now: Instant) {
        let Some(mem) = self.mem.clone() else { return };
        let k = self.flow_qp(p, idx);
        let pay_len = t.pay_len() as u64;
        let Some(flow) = self.flows.get_mut(idx) else {
            return;
        };
        let old_cursor = flow.cursor;
        let o = flow.stream_off(t.seq);
        let plan = match o {
            // Starting below stream offset 0: no stream offset names it (and
            // it may carry new bytes from offset 0 on): the normal path.
            None => Plan::NoSpace,
            Some(_) if pay_len == 0 => Plan::Dup,
            Some(_) if !t.is_plain_ack() => Plan::Unacceptable,
            Some(o) => flow.plan(o, pay_len),
        };
        // Only NoSpace has no offset, and it uses none.
        let o = o.unwrap_or(0);
        // The checksum decides before anything is written or reported
        // (duplicates and pure ACKs included); placement of a frame still
        // owing its TX checksum computes it in its copy pass instead.
        let fused = matches!(plan, Plan::Place { .. }) && f.csum.is_some();
        if !fused {
            if f.finalize().is_err() {
                self.pstat(p, PSTAT_RX_PLACE_ERR, 1);
                return;
            }
            if !tcp_csum_ok(f, t) {
                self.pstat(p, PSTAT_RX_CSUM_ERR, 1);
                return;
            }
        }
        // Not placed: the frame goes whole to the normal path, where TCP
        // judges its bytes and the driver copies what TCP accepts. A frame
        // over bytes already placed is one: the NIC writes each byte once,
        // and a receipt may only carry bytes its own packet wrote (TCP may
        // have dropped the packet that wrote them).
        let dup = plan == Plan::Dup && pay_len > 0;
        if dup || matches!(plan, Plan::NoSpace | Plan::OooFull | Plan::Unacceptable) {
            if dup {
                self.pstat(p, PSTAT_RX_DUP_FRAMES, 1);
                self.pstat(p, PSTAT_RX_DUP_BYTES, pay_len);
            } else if plan == Plan::Unacceptable {
                self.pstat(p, PSTAT_RX_UNACCEPTABLE, 1);
            } else {
                if plan == Plan::OooFull {
                    self.pstat(p, PSTAT_RX_OOO_FULL, 1);
                }
                self.pstat(p, PSTAT_RX_FALLBACK, 1);
            }
            self.flush_open(p, now);
            self.rx_normal(p, k, f, RXF_TCP | RXF_CSUM_OK | RXF_FLOW, idx, now);
            return;
        }
        // Header-queue room: merging needs none, a new entry one more than
        // the open entry (which is flushed first).
        let can_merge = matches!(plan, Plan::Place { start, .. } if start == old_cursor)
            && self.can_coalesce(p, k, idx, t, pay_len);
        let port = &self.ports[p as usize];
        let need = if can_merge {
            0
        } else {
            1 + port.open.as_ref().is_some_and(|o| o.qp == k) as u32
        };
        let hdrq = &port.qps[k as usize].hdrq;
        if !hdrq.on || hdrq.space(&self.bar) < need {
            self.pstat(p, PSTAT_RX_HDRQ_FULL, 1);
            self.qstat(p, k, QSTAT_RX_DROPS, 1);
            return;
        }
        let (mut hflags, mut placed) = (0u16, 0u64);
        match plan {
            Plan::Place { start, pieces } => {
                let mut dst = std::mem::take(&mut self.place_ext);
                dst.clear();
                for &(key, off, n) in &pieces {
                    if let Err(_e) =
                        self.mrs
                            .translate(key, MR_ACCESS_LOCAL_WRITE, off, n, &mut dst)
                    {
                        // Only reachable if a segment outlived its key.
                        self.pstat(p, PSTAT_RX_PLACE_ERR, 1);
                        self.flush_open(p, now);
                        if f.finalize().is_err() {
                            return;
                        }
                        let fl = RXF_TCP | RXF_CSUM_OK | RXF_FLOW;
                        return self.rx_normal(p, k, f, fl, idx, now);
                    }
                }
                let placed_ok = place(f, t, &dst, &mem).is_some();
                self.place_ext = dst;
                if !placed_ok {
                    self.pstat(p, PSTAT_RX_PLACE_ERR, 1);
                    return;
                }
                placed = pay_len;
                let Some(flow) = self.flows.get_mut(idx) else {
                    return;
                };
                flow.mark_placed(start, o + pay_len);
                if start > old_cursor {
                    hflags |= HDRF_OOO;
                    self.pstat(p, PSTAT_RX_OOO_FRAMES, 1);
                }
                self.pstat(p, PSTAT_RX_PLACED_BYTES, placed);
            }
            // Only a packet without payload is left (above).
            _ => hflags |= HDRF_NO_PAYLOAD,
        }
        self.pstat(p, PSTAT_RX_SPLIT, 1);
        self.qstat(p, k, QSTAT_RX_HDR_PACKETS, 1);
        let cursor = self.flows.get_mut(idx).map_or(0, |fl| fl.cursor);
        let hdr = &f.head[..t.pay_off().min(HDRQ_HDR_MAX)];
        let port = &mut self.ports[p as usize];
        if can_merge {
            if let Some(open) = port.open.as_mut() {
                open.meta.len += pay_len as u32;
                open.meta.placed += placed as u32;
                open.meta.cursor = cursor;
                open.meta.nsegs += 1;
                open.meta.hdr_len = hdr.len() as u16;
                open.meta.tcp_flags = t.flags as u16;
                open.meta.flags |= HDRF_COALESCED;
                open.hdr.clear();
                open.hdr.extend_from_slice(hdr);
                self.pstat(p, PSTAT_RX_COALESCED, 1);
                return;
            }
        }
        self.flush_open(p, now);
        let meta = HdrEntry {
            status: ST_OK,
            flags: hflags,
            flow: idx,
            seq: t.seq,
            len: pay_len as u32,
            stream_off: o,
            cursor,
            placed: placed as u32,
            nsegs: 1,
            hdr_len: hdr.len() as u16,
            port: p as u16,
            tcp_flags: t.flags as u16,
            ..Default::default()
        };
        self.ports[p as usize].open = Some(OpenHdr {
            meta,
            hdr: hdr.to_vec(),
            shape: shape(t),
            qp: k,
        });
        if self.bar.r32(port_block(p) + PORT_COALESCE_BYTES) == 0 || hflags != 0 || t.ce() {
            self.flush_open(p, now);
        }
    }

    /// True if packet `t` of flow `idx`, placed at the cursor, may join
    /// the open entry: same flow, contiguous, only ACK/PSH, the same
    /// [`Shape`] (ACK number, TOS/ECN, TTL, flow label, IP and TCP header lengths),
    /// no ECN CE mark (a CE packet is reported alone), and the entry's
    /// payload stays within `PORT_COALESCE_BYTES` and within what an IPv4
    /// total length can describe with these headers.
    fn can_coalesce(&self, p: u32, k: u32, idx: u32, t: &Tcp, pay_len: u64) -> bool {
        let port_limit = self.bar.r32(port_block(p) + PORT_COALESCE_BYTES) as u64;
        // The rebuilt IP length must fit 16 bits: the IPv4 total length
        // counts the IPv4 header, the IPv6 payload length does not.
        let ip_hdr = if t.v6 { 0 } else { t.ihl };
        let ip_limit = (IPV4_MAX_TOT_LEN as usize - ip_hdr - t.thl) as u64;
        let Some(open) = self.ports[p as usize].open.as_ref() else {
            return false;
        };
        let m = &open.meta;
        m.flow == idx
            && open.qp == k
            && m.flags & (HDRF_OOO | HDRF_DUP | HDRF_NO_PAYLOAD) == 0
            && t.flags & !(TCP_ACK | TCP_PSH) == 0
            && m.tcp_flags as u8 & !(TCP_ACK | TCP_PSH) == 0
            && m.seq.wrapping_add(m.len) == t.seq
            && open.shape == shape(t)
            && !t.ce()
            && m.len as u64 + pay_len <= port_limit.min(ip_limit)
            && m.nsegs < u16::MAX
    }

    /// Writes the open header entry of port `p` to the header queue.
    pub fn flush_open(&mut self, p: u32, now: Instant) {
        let Some(mem) = self.mem.clone() else { return };
        let Some(open) = self.ports[p as usize].open.take() else {
            return;
        };
        let mut slot = [0u8; HDRQ_ENTRY_SIZE];
        slot[..HdrEntry::SIZE].copy_from_slice(&open.meta.encode());
        let n = open.hdr.len().min(HDRQ_HDR_MAX);
        slot[HDRQ_HDR_OFFSET..HDRQ_HDR_OFFSET + n].copy_from_slice(&open.hdr[..n]);
        let k = open.qp;
        let Some(qp) = self.ports[p as usize].qps.get_mut(k as usize) else {
            return;
        };
        if qp.hdrq.produce(&self.bar, &mem, &slot) {
            self.pstat(p, PSTAT_HDRQ_ENTRIES, 1);
            self.note_entry(vec_qp_rx(self.nports, p, k), now);
        } else {
            self.pstat(p, PSTAT_RX_HDRQ_FULL, 1);
            self.qstat(p, k, QSTAT_RX_DROPS, u64::from(open.meta.nsegs));
        }
    }

    /// End of a delivery batch: publish open entries, raise interrupts.
    pub fn rx_flush(&mut self, now: Instant) -> Option<Instant> {
        if self.frozen {
            return None; // nothing written, no interrupt until thawed
        }
        for p in 0..self.nports {
            self.flush_open(p, now);
        }
        self.service_irqs(now)
    }
}

/// Copies the payload of `f` into the guest extents
/// `dst`. A checksum the sender's TX Merge Unit still owes (`f.csum`) is
/// computed in the same pass and inserted into `f.head` (the header the
/// driver sees carries the real checksum); any other frame was verified
/// before. None: DMA refused (nothing is reported placed).
fn place(f: &mut Frame, t: &Tcp, dst: &[(u64, u64)], mem: &crate::mem::GuestMem) -> Option<()> {
    let pending = f.csum.take();
    let mut c = pending.map(|pc| pc.partial).unwrap_or_default();
    let (mut di, mut doff) = (0usize, 0u64);
    let mut fail = false;
    f.for_pieces(t.pay_off(), t.pay_len(), |mut src, mut n| {
        while n > 0 && !fail {
            let Some(&(a, l)) = dst.get(di) else {
                fail = true;
                return;
            };
            let k = (n as u64).min(l - doff);
            match mem.check(a + doff, k) {
                Ok(d) if pending.is_some() => {
                    // SAFETY: d..d+k inside guest RAM (checked); src..src+k
                    // valid for this call (k <= n).
                    let s = unsafe { copy_sum_stream(d, src, k as usize) };
                    c.add_sum(s, k as usize);
                }
                // SAFETY: as above; copy_stream tolerates a hostile overlap.
                Ok(d) => unsafe { copy_stream(d, src, k as usize) },
                Err(_) => {
                    fail = true;
                    return;
                }
            }
            // SAFETY: k <= n, stays within the piece.
            src = unsafe { src.add(k as usize) };
            n -= k as usize;
            doff += k;
            if doff == l {
                di += 1;
                doff = 0;
            }
        }
    })
    .ok()?;
    if fail {
        return None;
    }
    if let Some(pc) = pending {
        f.set_csum(pc.field, c.finish());
    }
    Some(())
}

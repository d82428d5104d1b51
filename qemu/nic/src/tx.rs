//! TX unit: plain frames (with optional CHECKSUM_PARTIAL insertion) and the
//! TX Merge Unit (host header + payload DMA-read from a registered region,
//! checksums, TSO). Frames keep their payload in the sender's RAM until the
//! wire delivers them, so the data path copies each byte once.

use std::sync::Arc;
use std::time::Instant;

use zeronic_hw::desc::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;

use crate::csum::{pseudo_v4, Csum};
use crate::device::Device;
use crate::frame::{
    parse_tcp4, set_ipv4_csum, Frame, PendingCsum, Tail, ETH_HLEN, TCP_FIN, TCP_PSH,
};
use crate::mem::GuestMem;
use crate::mr::{MrTable, NEED_TX};

/// TX descriptors taken per port per scan.
const TX_BUDGET: u32 = 64;
/// Largest merge header accepted.
const MAX_MERGE_HDR: u32 = 256;

/// One TX descriptor's outcome: frames for the wire, then a completion.
pub struct TxJob {
    /// Port.
    pub port: u32,
    /// Frames to transmit (empty on error).
    pub frames: Vec<Frame>,
    /// Completion to post once the frames left.
    pub comp: TxCompletion,
}

impl Device {
    /// Takes TX descriptors of all ports (as many as completions fit).
    pub fn scan_tx(&mut self, out: &mut Vec<TxJob>) {
        let Some(mem) = self.mem.clone() else { return };
        if !self.enabled() {
            return;
        }
        for p in 0..self.nports {
            let port = &self.ports[p as usize];
            if !port.txq.on || !port.txcq.on {
                continue;
            }
            let Some(n) = port.txq.pending(&self.bar) else {
                let (q, reg) = (port.txq.qid, port.txq.reg);
                self.ports[p as usize].txq.on = false;
                self.ports[p as usize].txq.failed = true;
                self.bar.w32(reg + Q_STATUS, Q_STATUS_ERROR);
                self.bar.w32(reg + Q_ERROR, ST_BAD_DESC as u32);
                self.event(EV_QUEUE_ERROR, p as u16, q, ST_BAD_DESC as u64);
                continue;
            };
            let n = n.min(TX_BUDGET).min(port.txcq.space(&self.bar));
            for _ in 0..n {
                let port = &mut self.ports[p as usize];
                let index = port.txq.idx;
                let res = mem.read_array::<64>(port.txq.slot(index));
                port.txq.consume(&self.bar);
                let (enabled, link, mtu) = (port.enabled, port.link, port.mtu);
                let (cookie, res) = match res {
                    Ok(b) => {
                        let d = TxDesc::decode(&b);
                        let r = if enabled {
                            build(&d, &mem, &self.mrs, mtu)
                        } else {
                            Err(ST_PORT)
                        };
                        (d.cookie, r)
                    }
                    Err(_) => (0, Err(ST_DMA)),
                };
                let (status, mut frames) = match res {
                    Ok(f) => (ST_OK, f),
                    Err(s) => (s, Vec::new()),
                };
                self.count_tx(p, status, &frames);
                if !link && !frames.is_empty() {
                    self.pstat(p, PSTAT_TX_NO_LINK, frames.len() as u64);
                    frames.clear();
                }
                let comp = TxCompletion {
                    cookie,
                    index,
                    status,
                    frames: frames.len() as u16,
                };
                out.push(TxJob {
                    port: p,
                    frames,
                    comp,
                });
            }
        }
    }

    fn count_tx(&self, p: u32, status: u16, frames: &[Frame]) {
        if status != ST_OK {
            self.pstat(p, PSTAT_TX_ERRORS, 1);
            let specific = match status {
                ST_DMA => PSTAT_TX_DMA_ERR,
                ST_BAD_KEY | ST_ACCESS | ST_BOUNDS => PSTAT_TX_KEY_ERR,
                _ => PSTAT_TX_BAD_DESC,
            };
            self.pstat(p, specific, 1);
            return;
        }
        let bytes: usize = frames.iter().map(Frame::len).sum();
        let merged: usize = frames
            .iter()
            .map(|f| f.len() - f.head.len().min(f.len()))
            .sum();
        self.pstat(p, PSTAT_TX_FRAMES, frames.len() as u64);
        self.pstat(p, PSTAT_TX_BYTES, bytes as u64);
        self.pstat(p, PSTAT_TX_MERGE_BYTES, merged as u64);
        if frames.len() > 1 {
            self.pstat(p, PSTAT_TX_TSO_FRAMES, frames.len() as u64 - 1);
        }
    }

    /// Posts the completions of jobs whose frames left the port.
    pub fn complete_tx(&mut self, jobs: &[TxJob], now: Instant) {
        let Some(mem) = self.mem.clone() else { return };
        for j in jobs {
            let Some(port) = self.ports.get_mut(j.port as usize) else {
                continue;
            };
            if port.txcq.produce(&self.bar, &mem, &j.comp.encode()) {
                self.note_entry(vec_tx(j.port), now);
            }
        }
    }
}

fn build(d: &TxDesc, mem: &Arc<GuestMem>, mrs: &MrTable, mtu: u32) -> Result<Vec<Frame>, u16> {
    if d.flags & !TXF_ALL != 0 || d.rsvd0 != 0 || d.rsvd1 != 0 || d.rsvd2 != 0 {
        return Err(ST_BAD_DESC);
    }
    match d.opcode {
        TX_OP_PLAIN => build_plain(d, mem, mtu).map(|f| vec![f]),
        TX_OP_MERGE => build_merge(d, mem, mrs, mtu),
        _ => Err(ST_BAD_OPCODE),
    }
}

fn build_plain(d: &TxDesc, mem: &GuestMem, mtu: u32) -> Result<Frame, u16> {
    if d.flags & TXF_TSO != 0 || d.mr_key != 0 || d.pay_len != 0 || d.buf_len < ETH_HLEN as u32 {
        return Err(ST_BAD_DESC);
    }
    if d.buf_len > mtu + ETH_HLEN as u32 {
        return Err(ST_TOO_BIG);
    }
    let mut f = vec![0u8; d.buf_len as usize];
    mem.read(d.buf_addr, &mut f).map_err(|_| ST_DMA)?;
    if d.flags & TXF_CSUM_PARTIAL != 0 {
        let start = d.csum_start as usize;
        let field = start + d.csum_offset as usize;
        if start >= f.len() || field + 2 > f.len() {
            return Err(ST_BAD_DESC);
        }
        let mut c = Csum::default();
        c.add(&f[start..]);
        f[field..field + 2].copy_from_slice(&c.finish().to_le_bytes());
    }
    Ok(Frame::owned(f))
}

fn build_merge(
    d: &TxDesc,
    mem: &Arc<GuestMem>,
    mrs: &MrTable,
    mtu: u32,
) -> Result<Vec<Frame>, u16> {
    if d.flags & TXF_CSUM_PARTIAL != 0 || d.buf_len > MAX_MERGE_HDR || d.buf_len < 54 {
        return Err(ST_BAD_DESC);
    }
    let mut hdr = vec![0u8; d.buf_len as usize];
    mem.read(d.buf_addr, &mut hdr).map_err(|_| ST_DMA)?;
    // The host's IP total length is ignored (rewritten per segment): parse
    // the header as a payload-less packet.
    if hdr.len() >= ETH_HLEN + 4 {
        let l = (hdr.len() - ETH_HLEN) as u16;
        hdr[ETH_HLEN + 2..ETH_HLEN + 4].copy_from_slice(&l.to_be_bytes());
    }
    let t = match parse_tcp4(&hdr, hdr.len()) {
        Ok(Some(t)) if t.pay_off() == hdr.len() => t,
        _ => return Err(ST_MALFORMED),
    };
    let hl = (t.ihl + t.thl) as u32;
    let pay = d.pay_len as u64;
    let mss = if d.flags & TXF_TSO != 0 {
        let m = if d.mss != 0 {
            d.mss as u32
        } else {
            mtu.saturating_sub(hl)
        };
        if m == 0 || hl + m > mtu {
            return Err(ST_BAD_DESC);
        }
        m as u64
    } else {
        if hl as u64 + pay > mtu as u64 {
            return Err(ST_TOO_BIG);
        }
        pay.max(1)
    };
    let nseg = pay.div_ceil(mss).max(1);
    if nseg > u16::MAX as u64 {
        return Err(ST_BAD_DESC);
    }
    let mut ext = Vec::new();
    if pay > 0 {
        mrs.translate(d.mr_key, NEED_TX, d.mr_offset, pay, &mut ext)?;
    }
    let ip_id = u16::from_be_bytes([hdr[ETH_HLEN + 4], hdr[ETH_HLEN + 5]]);
    let mut frames = Vec::with_capacity(nseg as usize);
    let (mut ei, mut eoff) = (0usize, 0u64);
    for i in 0..nseg {
        let n = if pay == 0 { 0 } else { mss.min(pay - i * mss) };
        // Slice this segment's extents.
        let mut seg = Vec::new();
        let mut left = n;
        while left > 0 {
            let Some(&(a, l)) = ext.get(ei) else {
                return Err(ST_BOUNDS);
            };
            let k = left.min(l - eoff);
            seg.push((a + eoff, k));
            eoff += k;
            left -= k;
            if eoff == l {
                ei += 1;
                eoff = 0;
            }
        }
        let mut h = hdr.clone();
        let l4 = t.l4_off();
        let ip = &mut h[ETH_HLEN..l4];
        ip[2..4].copy_from_slice(&((hl as u64 + n) as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&ip_id.wrapping_add(i as u16).to_be_bytes());
        set_ipv4_csum(ip);
        let seq = t.seq.wrapping_add((i * mss) as u32);
        h[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
        if i + 1 < nseg {
            h[l4 + 13] &= !(TCP_FIN | TCP_PSH);
        }
        h[l4 + 16] = 0;
        h[l4 + 17] = 0;
        let mut c = pseudo_v4(t.src, t.dst, (t.thl as u64 + n) as u16);
        c.add(&h[l4..]);
        let mut f = Frame::owned(h);
        if seg.is_empty() {
            f.set_csum(l4 + 16, c.finish());
        } else {
            // The payload checksum is folded into the pass that moves the
            // payload (placement copy or wire copy), as a streaming NIC does.
            f.tail = Tail::Guest {
                mem: mem.clone(),
                ext: seg,
            };
            f.csum = Some(PendingCsum {
                field: l4 + 16,
                partial: c,
            });
        }
        frames.push(f);
    }
    Ok(frames)
}

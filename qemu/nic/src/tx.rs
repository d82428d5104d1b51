//! TX unit: plain frames (with optional CHECKSUM_PARTIAL insertion, or TSO
//! of a whole IPv4/TCP packet in guest RAM) and the TX Merge Unit (host
//! header + payload DMA-read from a registered region, checksums, TSO). Frames keep their payload in the sender's RAM until the
//! wire delivers them, so the data path copies each byte once.
//!
//! A scan takes descriptors ([`Device::scan_tx`]); their frames are built
//! later, at most [`TX_BATCH`] at a time ([`Device::tx_build`]), while the
//! model puts each batch on the wire. So one descriptor (up to 65535 TSO
//! segments) never holds more than a batch of frames in host memory.

use std::sync::Arc;
use std::time::Instant;

use zeronic_hw::desc::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;

use crate::csum::{pseudo_tcp, Csum};
use crate::device::Device;
use crate::frame::{
    max_frame_len, parse_tcp, set_ipv4_csum, Frame, PendingCsum, Tail, Tcp, ETH_HLEN, ETH_P_IPV4,
    ETH_P_IPV6, IPV6_HLEN, TCP_FIN, TCP_PSH,
};
use crate::mem::GuestMem;
use crate::mr::{MrTable, NEED_TX};

/// TX descriptors taken per queue pair per scan.
const TX_BUDGET: u32 = 64;
/// Frames built at once for the wire (host memory per batch: at most this
/// many frames of at most `MAX_FRAME` bytes).
pub const TX_BATCH: usize = 32;
/// Largest merge header accepted.
const MAX_MERGE_HDR: u32 = 256;
/// Smallest merge header: Ethernet + IPv4 + TCP without options.
const MIN_MERGE_HDR: u32 = 54;

/// One TX descriptor taken from the ring: its frames still to build, then
/// its completion.
pub struct TxJob {
    /// Port.
    pub port: u32,
    /// Queue pair of the port (§14).
    pub qp: u32,
    /// A TSO send (`TXF_TSO`) whose frames are built (per-queue LSO counters).
    tso: bool,
    /// Completion to post once all frames left (status and frame count are
    /// final once [`Device::tx_build`] returned no frame).
    pub comp: TxCompletion,
    state: State,
}

enum State {
    /// Read and checked at the first build.
    New(TxDesc),
    /// Merge send or plain TSO send: segments `next..nseg` still to build.
    Merge(Box<Merge>),
    /// Everything built (or refused).
    Done,
}

/// Where the payload of a segmented send is.
enum PaySrc {
    /// A merge send: region `key` from `offset`.
    Mr { key: u64, offset: u64 },
    /// A plain TSO send: guest-physical `addr` (checked to lie in guest RAM
    /// with the whole payload).
    Guest { addr: u64 },
}

/// A checked merge send or plain TSO send.
struct Merge {
    /// Host header; IPv4 length, id and checksum (IPv6: payload length),
    /// TCP seq and checksum are rewritten per segment.
    hdr: Vec<u8>,
    t: Tcp,
    ip_id: u16,
    mss: u64,
    pay: u64,
    nseg: u64,
    next: u64,
    src: PaySrc,
    /// A plain TSO send's 802.1Q tag (TPID + TCI), put back into every
    /// segment after the source MAC; `hdr` and `t` are of the untagged
    /// frame.
    tag: Option<[u8; 4]>,
}

impl TxJob {
    /// True once the job has no frame left to build.
    pub fn done(&self) -> bool {
        matches!(self.state, State::Done)
    }
}

impl Device {
    /// Takes TX descriptors of all ports (as many as completions fit).
    pub fn scan_tx(&mut self, out: &mut Vec<TxJob>) {
        let Some(mem) = self.mem.clone() else { return };
        if !self.enabled() {
            return;
        }
        for p in 0..self.nports {
            let nqp = self.ports[p as usize].steer.nqp;
            for k in 0..nqp {
                let Some(qp) = self.ports[p as usize].qps.get(k as usize) else {
                    continue;
                };
                if !qp.txq.on || !qp.txcq.on {
                    continue;
                }
                let Some(n) = qp.txq.pending(&self.bar) else {
                    self.fail_qp_queue(p, k, QK_TXQ);
                    continue;
                };
                let n = n.min(TX_BUDGET).min(qp.txcq.space(&self.bar));
                if n > 0 {
                    self.prof.tx_descs += u64::from(n);
                    self.prof.tx_scans += 1;
                }
                for _ in 0..n {
                    let qp = &mut self.ports[p as usize].qps[k as usize];
                    let index = qp.txq.idx;
                    let res = mem.read_array::<64>(qp.txq.slot(index));
                    qp.txq.consume(&self.bar);
                    let mut job = TxJob {
                        port: p,
                        qp: k,
                        tso: false,
                        comp: TxCompletion {
                            index,
                            ..Default::default()
                        },
                        state: State::Done,
                    };
                    match res {
                        Ok(b) => {
                            let d = TxDesc::decode(&b);
                            job.comp.cookie = d.cookie;
                            job.state = State::New(d);
                        }
                        Err(_) => self.tx_failed(&mut job, ST_DMA),
                    }
                    out.push(job);
                }
            }
        }
    }

    fn tx_failed(&self, job: &mut TxJob, status: u16) {
        job.comp.status = status;
        job.comp.frames = 0;
        job.state = State::Done;
        self.pstat(job.port, PSTAT_TX_ERRORS, 1);
        let specific = match status {
            ST_DMA => PSTAT_TX_DMA_ERR,
            ST_BAD_KEY | ST_ACCESS | ST_BOUNDS => PSTAT_TX_KEY_ERR,
            _ => PSTAT_TX_BAD_DESC,
        };
        self.pstat(job.port, specific, 1);
    }

    /// Builds the next frames of `job` (at most [`TX_BATCH`]) into `out`;
    /// nothing once the job is done. Counters follow what is built.
    pub fn tx_build(&mut self, job: &mut TxJob, out: &mut Vec<Frame>) {
        let Some(mem) = self.mem.clone() else {
            job.state = State::Done; // detached: nothing more leaves
            return;
        };
        let p = job.port;
        if let State::New(d) = job.state {
            let Some(port) = self.ports.get(p as usize) else {
                return self.tx_failed(job, ST_PORT);
            };
            let checked = if !port.enabled {
                Err(ST_PORT)
            } else {
                check(&d, &mem, &self.mrs, port.mtu)
            };
            let first = match checked {
                Ok(f) => f,
                Err(s) => return self.tx_failed(job, s),
            };
            let nframes = match &first {
                First::Plain(_) => 1,
                First::Merge(m) => m.nseg,
            };
            job.comp.status = ST_OK;
            if !port.link {
                self.pstat(p, PSTAT_TX_NO_LINK, nframes);
                job.state = State::Done;
                return;
            }
            job.comp.frames = nframes as u16; // at most u16::MAX (checked)
            if d.flags & TXF_TSO != 0 {
                job.tso = true;
                self.qstat(p, job.qp, QSTAT_TX_LSO_PACKETS, 1);
            }
            if nframes > 1 {
                self.pstat(p, PSTAT_TX_TSO_FRAMES, nframes - 1);
            }
            job.state = match first {
                First::Plain(f) => {
                    out.push(f);
                    State::Done
                }
                First::Merge(m) => State::Merge(m),
            };
        }
        if let State::Merge(m) = &mut job.state {
            while out.len() < TX_BATCH && m.next < m.nseg {
                match m.segment(&mem, &self.mrs) {
                    Some(f) => out.push(f),
                    None => m.next = m.nseg, // region gone (reset): stop
                }
                m.next += 1;
            }
            if m.next >= m.nseg {
                job.state = State::Done;
            }
        }
        let bytes: usize = out.iter().map(Frame::len).sum();
        let merged: usize = out.iter().map(|f| f.len() - f.head.len()).sum();
        self.pstat(p, PSTAT_TX_FRAMES, out.len() as u64);
        self.pstat(p, PSTAT_TX_BYTES, bytes as u64);
        self.pstat(p, PSTAT_TX_MERGE_BYTES, merged as u64);
        if !out.is_empty() {
            self.qstat(p, job.qp, QSTAT_TX_PACKETS, out.len() as u64);
            self.qstat(p, job.qp, QSTAT_TX_BYTES, bytes as u64);
            if job.tso {
                self.qstat(p, job.qp, QSTAT_TX_LSO_BYTES, bytes as u64);
            }
        }
        self.learn_windows(p, out);
    }

    /// Reads the receive window of every ACK the host sends on an installed
    /// flow of port `p`: TCP accepts bytes up to the edge it offered, and
    /// the flow places none past it. Read as the frame leaves, so the edge
    /// is known before the peer can send into it.
    fn learn_windows(&mut self, p: u32, out: &[Frame]) {
        if self.flows.used() == 0 {
            return;
        }
        for f in out {
            let Ok(Some(t)) = parse_tcp(&f.head, f.len()) else {
                continue;
            };
            if !t.is_plain_ack() {
                continue;
            }
            // CAST: ports are < MAX_PORTS.
            let key = (p as u16, t.src, t.sport, t.dst, t.dport);
            if let Some(flow) = self.flows.lookup(&key).and_then(|i| self.flows.get_mut(i)) {
                flow.learn_ack(t.ack, t.win);
            }
        }
    }

    /// Posts the completions of jobs whose frames left the port.
    pub fn complete_tx(&mut self, jobs: &[TxJob], now: Instant) {
        let Some(mem) = self.mem.clone() else { return };
        for j in jobs {
            let Some(qp) = self
                .ports
                .get_mut(j.port as usize)
                .and_then(|port| port.qps.get_mut(j.qp as usize))
            else {
                continue;
            };
            if qp.txcq.produce(&self.bar, &mem, &j.comp.encode()) {
                self.note_entry(vec_qp_tx(self.nports, j.port, j.qp), now);
            }
        }
    }
}

/// A descriptor that passed its checks.
enum First {
    /// The whole plain frame.
    Plain(Frame),
    /// A merge send, its segments still to build.
    Merge(Box<Merge>),
}

fn check(d: &TxDesc, mem: &GuestMem, mrs: &MrTable, mtu: u32) -> Result<First, u16> {
    if d.flags & !TXF_ALL != 0 || d.rsvd0 != 0 || d.rsvd1 != 0 || d.rsvd2 != 0 {
        return Err(ST_BAD_DESC);
    }
    match d.opcode {
        TX_OP_PLAIN if d.flags & TXF_TSO != 0 => {
            check_plain_tso(d, mem, mtu).map(|m| First::Merge(Box::new(m)))
        }
        TX_OP_PLAIN => build_plain(d, mem, mtu).map(First::Plain),
        TX_OP_MERGE => check_merge(d, mem, mrs, mtu).map(|m| First::Merge(Box::new(m))),
        _ => Err(ST_BAD_OPCODE),
    }
}

fn build_plain(d: &TxDesc, mem: &GuestMem, mtu: u32) -> Result<Frame, u16> {
    if d.flags & TXF_TSO != 0 || d.mr_key != 0 || d.pay_len != 0 || d.buf_len < ETH_HLEN as u32 {
        return Err(ST_BAD_DESC);
    }
    if d.buf_len > mtu + ETH_HLEN as u32 + VLAN_HLEN {
        return Err(ST_TOO_BIG);
    }
    let mut f = vec![0u8; d.buf_len as usize];
    mem.read(d.buf_addr, &mut f).map_err(|_| ST_DMA)?;
    if f.len() > max_frame_len(mtu, &f) {
        return Err(ST_TOO_BIG); // the VLAN allowance needs a tag
    }
    if d.flags & TXF_CSUM_PARTIAL != 0 {
        let start = d.csum_start as usize;
        let field = start + d.csum_offset as usize;
        if start >= f.len() || field + 2 > f.len() {
            return Err(ST_BAD_DESC);
        }
        let mut c = Csum::default();
        c.add(&f[start..]);
        // A result of 0 goes out as 0xffff (skb_checksum_help() does so;
        // UDP over IPv6 must not carry 0, §15).
        let v = match c.finish() {
            0 => 0xffff,
            v => v,
        };
        f[field..field + 2].copy_from_slice(&v.to_le_bytes());
    }
    Ok(Frame::owned(f))
}

fn check_merge(d: &TxDesc, mem: &GuestMem, mrs: &MrTable, mtu: u32) -> Result<Merge, u16> {
    if d.flags & TXF_CSUM_PARTIAL != 0 || d.buf_len > MAX_MERGE_HDR || d.buf_len < MIN_MERGE_HDR {
        return Err(ST_BAD_DESC);
    }
    let mut hdr = vec![0u8; d.buf_len as usize];
    mem.read(d.buf_addr, &mut hdr).map_err(|_| ST_DMA)?;
    // The host's IP length is ignored (rewritten per segment): parse
    // the header as a payload-less packet.
    let l = hdr.len() - ETH_HLEN;
    set_ip_len(&mut hdr, l)?;
    let t = match parse_tcp(&hdr, hdr.len()) {
        Ok(Some(t)) if t.pay_off() == hdr.len() => t,
        _ => return Err(ST_MALFORMED),
    };
    let pay = d.pay_len as u64;
    if pay > 0 {
        mrs.check(d.mr_key, NEED_TX, d.mr_offset, pay)?;
    }
    let src = PaySrc::Mr {
        key: d.mr_key,
        offset: d.mr_offset,
    };
    segmented(d, hdr, t, pay, mtu, src)
}

/// A checked send of `pay` payload bytes after header `hdr` (parsed as `t`):
/// segment size and count from the descriptor's `TXF_TSO`/`mss` and `mtu`.
fn segmented(
    d: &TxDesc,
    hdr: Vec<u8>,
    t: Tcp,
    pay: u64,
    mtu: u32,
    src: PaySrc,
) -> Result<Merge, u16> {
    let hl = (t.ihl + t.thl) as u32;
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
    // IPv6 has no identification.
    let ip_id = if t.v6 {
        0
    } else {
        u16::from_be_bytes([hdr[ETH_HLEN + 4], hdr[ETH_HLEN + 5]])
    };
    Ok(Merge {
        hdr,
        t,
        ip_id,
        mss,
        pay,
        nseg,
        next: 0,
        src,
        tag: None,
    })
}

/// Writes `l`, the length of the IP packet after the Ethernet header of
/// the untagged `hdr`, as its IPv4 total length or IPv6 payload length
/// (what the host wrote there is ignored). Other EtherTypes are left for
/// the parser to refuse.
fn set_ip_len(hdr: &mut [u8], l: usize) -> Result<(), u16> {
    let (off, v) = match hdr.get(12..14) {
        Some(e) if e == ETH_P_IPV4.to_be_bytes() => (2, l),
        Some(e) if e == ETH_P_IPV6.to_be_bytes() => {
            (4, l.checked_sub(IPV6_HLEN).ok_or(ST_MALFORMED)?)
        }
        _ => return Ok(()),
    };
    let v = u16::try_from(v).map_err(|_| ST_MALFORMED)?;
    hdr.get_mut(ETH_HLEN + off..ETH_HLEN + off + 2)
        .ok_or(ST_MALFORMED)?
        .copy_from_slice(&v.to_be_bytes());
    Ok(())
}

/// `TX_OP_PLAIN` with `TXF_TSO`: the frame is one Ethernet II + IPv4 + TCP
/// packet (untagged or with one 802.1Q tag) of up to `MAX_TSO_FRAME` bytes
/// in guest RAM, cut into segments as a merge send is (its IPv4 total
/// length and checksums are ignored; `TXF_CSUM_PARTIAL` may be set and
/// changes nothing).
fn check_plain_tso(d: &TxDesc, mem: &GuestMem, mtu: u32) -> Result<Merge, u16> {
    if d.mr_key != 0 || d.mr_offset != 0 || d.pay_len != 0 || d.buf_len < MIN_MERGE_HDR {
        return Err(ST_BAD_DESC);
    }
    if d.buf_len > MAX_TSO_FRAME {
        return Err(ST_TOO_BIG);
    }
    // The whole frame must be guest RAM: its payload is read when the
    // segments are moved, and a send fails before any frame leaves.
    mem.check(d.buf_addr, d.buf_len as u64)
        .map_err(|_| ST_DMA)?;
    let mut hdr = vec![0u8; d.buf_len.min(MAX_MERGE_HDR + VLAN_HLEN) as usize];
    mem.read(d.buf_addr, &mut hdr).map_err(|_| ST_DMA)?;
    // One 802.1Q tag: parsed and segmented as the untagged frame, the tag
    // put back into every segment.
    let mut tag = None;
    if hdr[12..14] == ETH_P_8021Q.to_be_bytes() {
        if hdr.len() < MIN_MERGE_HDR as usize + VLAN_HLEN as usize {
            return Err(ST_MALFORMED);
        }
        let mut t = [0u8; 4];
        t.copy_from_slice(&hdr[12..16]);
        tag = Some(t);
        hdr.drain(12..16);
    }
    let vlan = if tag.is_some() { VLAN_HLEN } else { 0 };
    let len = d.buf_len - vlan; // the untagged frame's length, >= 50
    if len < MIN_MERGE_HDR {
        return Err(ST_MALFORMED);
    }
    // The host's IP length is ignored: the frame's length rules.
    set_ip_len(&mut hdr, (len - ETH_HLEN as u32) as usize)?;
    let t = match parse_tcp(&hdr, len as usize) {
        Ok(Some(t)) => t,
        _ => return Err(ST_MALFORMED),
    };
    hdr.truncate(t.pay_off());
    let pay = (len as usize - t.pay_off()) as u64;
    let src = PaySrc::Guest {
        // Checked above: the frame is within RAM.
        addr: d.buf_addr + u64::from(vlan) + t.pay_off() as u64,
    };
    let mut m = segmented(d, hdr, t, pay, mtu, src)?;
    m.tag = tag;
    Ok(m)
}

impl Merge {
    /// Builds segment `self.next`; None if its payload no longer translates.
    fn segment(&self, mem: &Arc<GuestMem>, mrs: &MrTable) -> Option<Frame> {
        let (t, i) = (&self.t, self.next);
        let off = i * self.mss; // < pay <= u32::MAX
        let n = if self.pay == 0 {
            0
        } else {
            self.mss.min(self.pay - off)
        };
        let mut ext = Vec::new();
        if n > 0 {
            // Checked when the descriptor was taken: offset + pay fits.
            match self.src {
                PaySrc::Mr { key, offset } => mrs
                    .translate(key, NEED_TX, offset + off, n, &mut ext)
                    .ok()?,
                PaySrc::Guest { addr } => ext.push((addr + off, n)),
            }
        }
        let mut h = self.hdr.clone();
        let l4 = t.l4_off();
        let hl = (t.ihl + t.thl) as u64;
        let ip = &mut h[ETH_HLEN..l4];
        if t.v6 {
            // Payload length: TCP header + segment (mss + headers fit the
            // MTU, checked). No identification, no header checksum.
            ip[4..6].copy_from_slice(&((t.thl as u64 + n) as u16).to_be_bytes());
        } else {
            ip[2..4].copy_from_slice(&((hl + n) as u16).to_be_bytes());
            ip[4..6].copy_from_slice(&self.ip_id.wrapping_add(i as u16).to_be_bytes());
            set_ipv4_csum(ip);
        }
        let seq = t.seq.wrapping_add(off as u32);
        h[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
        if i + 1 < self.nseg {
            h[l4 + 13] &= !(TCP_FIN | TCP_PSH);
        }
        h[l4 + 16] = 0;
        h[l4 + 17] = 0;
        let mut c = pseudo_tcp(t, t.thl + n as usize);
        c.add(&h[l4..]);
        // The checksum field's offset in the frame that leaves.
        let mut field = l4 + 16;
        if let Some(tag) = self.tag {
            h.splice(12..12, tag);
            field += VLAN_HLEN as usize;
        }
        let mut f = Frame::owned(h);
        if ext.is_empty() {
            f.set_csum(field, c.finish());
        } else {
            // The payload checksum is folded into the pass that moves the
            // payload (placement copy or wire copy), as a streaming NIC does.
            f.tail = Tail::Guest {
                mem: mem.clone(),
                ext,
            };
            f.csum = Some(PendingCsum { field, partial: c });
        }
        Some(f)
    }
}

// SPDX-License-Identifier: GPL-2.0

//! The header queue: receipt skbs for Linux TCP.
//!
//! For every entry of a port's header queue (a packet, or several coalesced
//! in-order packets, of an attached flow whose payload the NIC placed, or a
//! duplicate it did not rewrite) the NAPI poller builds one skb, or a few if
//! the payload needs more than `MAX_SKB_FRAGS` fragments:
//!
//! - the linear part is the Ethernet, IP and TCP header as received (of the
//!   last packet, with its ACK, window and timestamps), with the IPv4 total
//!   length and checksum (or the IPv6 payload length) rewritten for the
//!   payload the skb covers and the TCP sequence number of its first byte,
//!   as LRO drivers do; it has no tailroom, so the stack never pulls the
//!   payload into it (`skb_condense()` does that to packets whose fragments
//!   fit the tailroom when TCP queues them to its backlog or out-of-order
//!   queue, which would make placed bytes copied ones);
//! - the fragments are the application's pages at that stream offset (the
//!   posted segment or the ring), each with its own page reference, so the
//!   skb stays valid whatever happens to the registration; bytes TCP already
//!   consumed (duplicates below the flow's completion point, whose buffers
//!   may be back with the application) point at a zeroed page instead: TCP
//!   drops such old data without reading it;
//! - `CHECKSUM_UNNECESSARY` (the NIC verified every packet before writing
//!   it, hardware spec §9), GSO size and segments when the entry covers
//!   several packets (TCP measures the peer's MSS from them).
//!
//! TCP then does everything it does for any packet. The flow's ULP consumes
//! the in-order bytes without copying them (`Flow::consume`).
//!
//! **Copybreak.** A socket served by TCP copies what it receives to the
//! application anyway, so for a small payload (one packet of at most
//! `rx_copybreak` bytes, 256 by default) a page fragment costs more than it
//! saves: the fragment's page reference is taken here and dropped on
//! another CPU, and TCP reads through a page mapping. Such a payload is
//! copied from the ring into the skb's linear part instead, as drivers'
//! `rx_copybreak` does for small frames; it still counts as placed (the NIC
//! placed it), and as `zc_rx_copybreak_bytes`.

use kernel::{
    net::{
        napi::NapiContext,
        skbuff::{
            RxChecksum,
            MAX_SKB_FRAGS, //
        },
    },
    page::Page,
    prelude::*,
    sync::atomic::Relaxed,
};

use crate::{
    control::AttachedFlow,
    flow::{
        stream_off,
        Flow,
        FlowInner,
        Phase,
        Tuple, //
    },
    hw::{
        desc::{
            HdrEntry,
            HDRF_DUP,
            HDRF_NO_PAYLOAD,
            HDRQ_ENTRY_SIZE,
            HDRQ_HDR_OFFSET, //
        },
        net::{
            ipv4_header_checksum,
            parse_tcp,
            Tcp,
            TCP_FIN,
            TCP_PSH, //
        },
    },
};

/// Largest `rx_copybreak`: a page.
pub(crate) const COPYBREAK_MAX: u32 = 4096;

/// Checks the module parameter this file reads, at load.
///
/// # Errors
///
/// `EINVAL`, with a log line, if `rx_copybreak` is above [`COPYBREAK_MAX`].
pub(crate) fn check_params() -> Result {
    let n = crate::module_parameters::rx_copybreak.value();
    if n > COPYBREAK_MAX {
        pr_err!("rx_copybreak={}: must be 0 to {}\n", n, COPYBREAK_MAX);
        return Err(EINVAL);
    }
    Ok(())
}

/// Payloads of served sockets copied rather than attached as fragments are
/// at most this long (the `rx_copybreak` module parameter, bounded again).
fn copybreak() -> u32 {
    crate::module_parameters::rx_copybreak
        .value()
        .min(COPYBREAK_MAX)
}

/// Offsets of the parts of a received header.
struct Layout {
    /// The IP header is IPv6 (else IPv4).
    v6: bool,
    /// Offset of the IP header.
    ip: usize,
    /// IP header length.
    ip_len: usize,
    /// Offset of the TCP header.
    tcp: usize,
    /// Total header length.
    len: usize,
}

/// Checks that `hdr` is exactly an Ethernet II + IPv4 or IPv6 (no
/// extension header) + TCP header (what the NIC reports for flows: the
/// headers of one packet, its payload placed) and returns its layout and
/// fields.
fn parse(hdr: &[u8]) -> Option<(Layout, Tcp)> {
    // The packet's length is its IP length: nothing to check against but
    // the header itself.
    let t = parse_tcp(hdr, usize::MAX).ok()??;
    (t.pay_off() == hdr.len()).then(|| {
        let l = Layout {
            v6: t.v6,
            ip: t.l3_off(),
            ip_len: t.ihl,
            tcp: t.l4_off(),
            len: hdr.len(),
        };
        (l, t)
    })
}

/// Whether the packet of header `t` came from the peer of `conn` to its
/// socket. The NIC reports a flow's packets under its Flow Table index,
/// which it gives to the next flow installed once the flow is removed:
/// without this, an entry of the old flow still queued then (or one a
/// broken NIC misfiles) would build skbs of this flow's pages under another
/// connection's header, for TCP to deliver to that connection.
fn of_connection(t: &Tcp, conn: &Tuple) -> bool {
    conn.receives(t)
}

/// Rewrites the header of an skb covering `len` payload bytes from TCP
/// sequence `seq`; `last` keeps FIN and PSH.
fn fix_header(h: &mut [u8], l: &Layout, seq: u32, len: u32, last: bool) -> Result {
    let tcp_len = (l.len - l.tcp) + len as usize;
    if l.v6 {
        // The payload length (no extension headers); IPv6 has no header
        // checksum.
        let pay = u16::try_from(tcp_len).map_err(|_| EINVAL)?;
        h.get_mut(l.ip + 4..l.ip + 6)
            .ok_or(EINVAL)?
            .copy_from_slice(&pay.to_be_bytes());
    } else {
        let tot = u16::try_from(l.ip_len + tcp_len).map_err(|_| EINVAL)?;
        h.get_mut(l.ip + 2..l.ip + 4)
            .ok_or(EINVAL)?
            .copy_from_slice(&tot.to_be_bytes());
        let ip = h.get_mut(l.ip..l.ip + l.ip_len).ok_or(EINVAL)?;
        let csum = ipv4_header_checksum(ip);
        ip.get_mut(10..12)
            .ok_or(EINVAL)?
            .copy_from_slice(&csum.to_be_bytes());
    }
    h.get_mut(l.tcp + 4..l.tcp + 8)
        .ok_or(EINVAL)?
        .copy_from_slice(&seq.to_be_bytes());
    if !last {
        if let Some(f) = h.get_mut(l.tcp + 13) {
            *f &= !(TCP_FIN | TCP_PSH);
        }
    }
    Ok(())
}

/// The NIC layer's view of a flow: its Flow Table entry is failed at a
/// reset, and the header queue hands it the entries the NIC wrote for it.
impl AttachedFlow for Flow {
    fn port(&self) -> u32 {
        self.port
    }

    fn nic_gone(&self, reset_done: bool) {
        Flow::nic_gone(self, reset_done);
    }

    fn deliver_header(
        &self,
        ctx: &mut NapiContext<'_>,
        raw: &[u8; HDRQ_ENTRY_SIZE],
        zero: &Page,
    ) -> Result<(u64, u64)> {
        deliver(ctx, self, raw, zero)
    }

    fn may_deliver(&self, qp: u32) -> bool {
        Flow::may_deliver(self, qp)
    }
}

/// Builds and delivers the skbs of one header-queue entry (`raw`, a whole
/// 256-byte slot) of `flow`; returns the skbs and bytes delivered.
///
/// # Errors
///
/// - `EINVAL` if the entry is malformed, not of the flow's connection, disagrees
///   with its own placement or sequence number, or names bytes the flow has no
///   target for.
/// - `ENOMEM` if an skb cannot be allocated.
/// - `EINVAL`, `EMSGSIZE` as the skb calls (never: each skb is sized for its header).
fn deliver(
    ctx: &mut NapiContext<'_>,
    flow: &Flow,
    raw: &[u8; HDRQ_ENTRY_SIZE],
    zero: &Page,
) -> Result<(u64, u64)> {
    let mut delivered = (0u64, 0u64);
    let head: &[u8; 64] = raw
        .get(..64)
        .and_then(|b| b.try_into().ok())
        .ok_or(EINVAL)?;
    let e = HdrEntry::decode(head);
    let hdr = raw
        .get(HDRQ_HDR_OFFSET..HDRQ_HDR_OFFSET + usize::from(e.hdr_len))
        .ok_or(EINVAL)?;
    let (layout, parsed) = parse(hdr).ok_or(EINVAL)?;
    if !of_connection(&parsed, &flow.tuple) {
        return Err(EINVAL);
    }
    let payload = if e.flags & HDRF_NO_PAYLOAD != 0 {
        0
    } else {
        e.len
    };
    // A receipt carries only bytes its own packets wrote (docs/hardware.md
    // §9, rule 1): bytes another packet wrote may be ones TCP dropped.
    if payload != 0 && (e.flags & HDRF_DUP != 0 || e.placed != payload) {
        return Err(EINVAL);
    }
    let mut pos = e.stream_off;
    let end = pos.checked_add(u64::from(payload)).ok_or(EINVAL)?;
    // The NIC's stream offset agrees with the sequence number it reports.
    if stream_off(flow.rx_isn, pos, e.seq) != pos {
        return Err(EINVAL);
    }
    let mss = if e.nsegs > 1 {
        // CAST: at most `len`, a u32 below 64 KiB for coalesced entries.
        payload
            .div_ceil(u32::from(e.nsegs))
            .min(u32::from(u16::MAX)) as u16
    } else {
        0
    };
    // Bytes handed to TCP in the pages the NIC wrote: a served socket's
    // count of placed bytes (TCP copies them to the application; the flow
    // itself consumes nothing).
    let mut placed = 0u64;
    let count_placed = |placed: u64| {
        if flow.served && placed != 0 {
            flow.stats.rx_placed.add(placed, Relaxed);
            if let Some(zc) = flow.control.zc(flow.port) {
                zc.rx_placed.add(placed, Relaxed);
            }
        }
    };
    if flow.served && payload != 0 && e.nsegs <= 1 && payload <= copybreak() {
        if let Some(done) = deliver_copied(ctx, flow, &e, hdr, &layout, pos, end)? {
            count_placed(done.1.saturating_sub(u64::from(e.hdr_len)));
            return Ok(done);
        }
    }
    loop {
        let first = pos;
        let mut skb = match ctx.alloc_skb(u32::from(e.hdr_len)) {
            Ok(skb) => skb,
            Err(err) => {
                count_placed(placed);
                return Err(err);
            }
        };
        // The linear part ends with the header: no tailroom. The stack
        // pulls the fragments of a packet into its linear part when they
        // fit there (`skb_condense()`, on TCP's backlog while the
        // application holds the socket, and on the out-of-order queue),
        // and the payload the NIC placed would come back as a copy.
        let room = skb.tailroom().saturating_sub(u32::from(e.hdr_len));
        skb.reserve(room)?;
        skb.put_data(hdr)?;
        {
            // Fragments for [pos, end), at most MAX_SKB_FRAGS, chosen under
            // the flow's lock (the segments may go back meanwhile).
            let mut inner = flow.inner.lock();
            if inner.phase != Phase::Attached {
                return Ok(delivered);
            }
            inner.saw_nic_cursor(e.cursor);
            while pos < end && usize::from(skb.nr_frags()) < MAX_SKB_FRAGS {
                if pos < inner.rx_done {
                    // Already consumed: TCP drops it unread.
                    // CAST: at most 4096.
                    let n = (inner.rx_done - pos).min(end - pos).min(4096) as u32;
                    skb.add_rx_frag_ref(zero, 0, n, n)?;
                    pos += u64::from(n);
                    continue;
                }
                let n = with_piece(flow, &inner, pos, end, |page, off, n| {
                    skb.add_rx_frag_ref(page, off, n, n)
                })?;
                pos += u64::from(n);
                placed += u64::from(n);
            }
        }
        let last = pos >= end;
        // CAST: truncation to the sequence space is the point.
        let seq = e.seq.wrapping_add((first - e.stream_off) as u32);
        // CAST: one skb covers at most MAX_SKB_FRAGS pages.
        let len = (pos - first) as u32;
        fix_header(skb.data_mut()?, &layout, seq, len, last)?;
        if mss != 0 && len > u32::from(mss) {
            // CAST: a few dozen segments at most.
            let segs = len.div_ceil(u32::from(mss)) as u16;
            if layout.v6 {
                skb.set_rx_gso_tcpv6(mss, segs)?;
            } else {
                skb.set_rx_gso_tcpv4(mss, segs)?;
            }
        }
        skb.set_rx_checksum(RxChecksum::Unnecessary)?;
        skb.eth_type_trans(ctx.dev())?;
        delivered.0 += 1;
        delivered.1 += u64::from(e.hdr_len) + u64::from(len);
        // Into TCP before this returns, not held by GRO past the poll: a
        // flow moving to another queue pair waits until this one's entries
        // were handed on (`flow/steer.rs`). A receipt is one entry of up
        // to 64 KiB the NIC already coalesced; GRO adds little to it.
        ctx.gro_receive(skb);
        if last {
            break;
        }
    }
    count_placed(placed);
    Ok(delivered)
}

/// Calls `f` with the page of `flow`'s target that holds stream offset `pos`,
/// the offset of that byte in the page, and how many of the bytes up to
/// `end` lie there contiguously (at least one); returns that count. The
/// one lookup of where received bytes are, for fragments and copies alike.
///
/// # Errors
///
/// - `EINVAL` if the flow has no target for `pos`.
/// - Any error `f` returns.
fn with_piece(
    flow: &Flow,
    inner: &FlowInner,
    pos: u64,
    end: u64,
    f: impl FnOnce(&Page, u32, u32) -> Result,
) -> Result<u32> {
    let (mr, mr_off, room) = flow.target_of(inner, pos).ok_or(EINVAL)?;
    let (page, off, in_page) = mr.locate(mr_off).ok_or(EINVAL)?;
    // CAST: bounded by `in_page`, a u32.
    let n = u64::from(in_page).min(room).min(end.saturating_sub(pos)) as u32;
    if n == 0 {
        return Err(EINVAL);
    }
    f(&page, off, n)?;
    Ok(n)
}

/// Delivers the payload `[start, end)` of entry `e` of a served socket,
/// one packet of at most [`copybreak`] bytes, copied from the ring into
/// the skb after the header `hdr`; returns the skbs and bytes delivered,
/// or `None` if part of it was consumed already (the caller then builds
/// fragments, which point such bytes at the zeroed page).
///
/// # Errors
///
/// - `EINVAL` if the flow has no target for the bytes.
/// - `ENOMEM` if the skb cannot be allocated.
/// - `EINVAL`, `EMSGSIZE` as the skb calls (never: the skb is sized for both).
fn deliver_copied(
    ctx: &mut NapiContext<'_>,
    flow: &Flow,
    e: &HdrEntry,
    hdr: &[u8],
    layout: &Layout,
    start: u64,
    end: u64,
) -> Result<Option<(u64, u64)>> {
    // CAST: at most `copybreak()`, a u32.
    let len = (end - start) as u32;
    let mut skb = ctx.alloc_skb(u32::from(e.hdr_len) + len)?;
    skb.put_data(hdr)?;
    {
        let mut inner = flow.inner.lock();
        if inner.phase != Phase::Attached {
            return Ok(Some((0, 0)));
        }
        if start < inner.rx_done {
            return Ok(None);
        }
        inner.saw_nic_cursor(e.cursor);
        // CAST: u32 -> usize is lossless on every architecture Linux supports.
        let buf = skb.put_zeroed(len as usize)?;
        let (mut pos, mut at) = (start, 0usize);
        while pos < end {
            let n = with_piece(flow, &inner, pos, end, |page, off, n| {
                // CAST: u32 -> usize is lossless on every architecture Linux supports.
                let (off, n) = (off as usize, n as usize);
                let dst = buf
                    .get_mut(at..at.checked_add(n).ok_or(EINVAL)?)
                    .ok_or(EINVAL)?;
                // SAFETY: `dst` is `n` bytes of the skb, valid for writes. The
                // NIC wrote `[start, end)` for this entry, and writes a ring
                // position again only for a byte a ring's size past one the
                // application has read (`flow/served.rs`): none of these is
                // read yet (`start >= rx_done`), so nothing writes them
                // during the copy.
                unsafe { page.read_raw(dst.as_mut_ptr(), off, n) }
            })?;
            pos += u64::from(n);
            // CAST: u32 -> usize is lossless on every architecture Linux supports.
            at += n as usize;
        }
    }
    fix_header(skb.data_mut()?, layout, e.seq, len, true)?;
    skb.set_rx_checksum(RxChecksum::Unnecessary)?;
    skb.eth_type_trans(ctx.dev())?;
    if let Some(zc) = flow.control.zc(flow.port) {
        zc.rx_copybreak.add(u64::from(len), Relaxed);
    }
    ctx.gro_receive(skb);
    Ok(Some((1, u64::from(e.hdr_len) + u64::from(len))))
}

#[kernel::macros::kunit_tests(zeronic_hdrq)]
mod tests {
    use super::*;

    /// The socket 10.0.0.1:5000 connected to 10.0.0.2:80.
    const T: Tuple = Tuple {
        v6: false,
        local: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1],
        local_port: 5000,
        remote: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2],
        remote_port: 80,
    };

    use crate::hw::net::{
        ETH_HLEN,
        ETH_P_IPV4, //
    };

    /// Ethernet + minimal IPv4 + minimal TCP header.
    const MIN_HDR: usize = ETH_HLEN + 20 + 20;

    /// An Ethernet + IPv4 + TCP header (no options) from `src:sport` to
    /// `dst:dport`.
    fn header(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> [u8; MIN_HDR] {
        let mut h = [0u8; MIN_HDR];
        h[12..14].copy_from_slice(&ETH_P_IPV4.to_be_bytes());
        h[14] = 0x45;
        // The total length of a packet without payload.
        h[16..18].copy_from_slice(&40u16.to_be_bytes());
        h[23] = 6;
        h[26..30].copy_from_slice(&src);
        h[30..34].copy_from_slice(&dst);
        h[34..36].copy_from_slice(&sport.to_be_bytes());
        h[36..38].copy_from_slice(&dport.to_be_bytes());
        h[46] = 5 << 4;
        h
    }

    /// Only the peer's packets to the socket are the connection's: not
    /// those of another port or address, nor the socket's own direction.
    #[test]
    fn packets_of_the_connection() {
        let ours = header([10, 0, 0, 2], 80, [10, 0, 0, 1], 5000);
        let (_, t) = parse(&ours).expect("a minimal header parses");
        assert!(of_connection(&t, &T));
        for other in [
            header([10, 0, 0, 2], 81, [10, 0, 0, 1], 5000),
            header([10, 0, 0, 2], 80, [10, 0, 0, 1], 5001),
            header([10, 0, 0, 3], 80, [10, 0, 0, 1], 5000),
            header([10, 0, 0, 2], 80, [10, 0, 0, 9], 5000),
            header([10, 0, 0, 1], 5000, [10, 0, 0, 2], 80),
        ] {
            let (_, t) = parse(&other).expect("a minimal header parses");
            assert!(!of_connection(&t, &T));
        }
    }

    /// Headers that are not exactly Ethernet II + IPv4 + TCP are refused
    /// (an EtherType that is neither IPv4 nor IPv6, UDP, a short IPv4
    /// header, a TCP header longer than what is there).
    #[test]
    fn parse_refuses_other_headers() {
        let good = header([10, 0, 0, 2], 80, [10, 0, 0, 1], 5000);
        assert!(parse(&good[..MIN_HDR - 1]).is_none());
        let mut h = good;
        h[12] = 0x86;
        assert!(parse(&h).is_none());
        let mut h = good;
        h[23] = 17;
        assert!(parse(&h).is_none());
        let mut h = good;
        h[14] = 0x44;
        assert!(parse(&h).is_none());
        let mut h = good;
        h[46] = 6 << 4;
        assert!(parse(&h).is_none());
    }
}

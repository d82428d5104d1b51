//! Frames on the emulated wire and the Ethernet II / IPv4 / TCP parsing the
//! RX Split Unit needs. Frame bytes are hostile input: parsing only returns
//! errors, never panics.

use std::sync::Arc;

use crate::csum::{copy_sum, sum_raw, Csum};
use crate::mem::{DmaError, GuestMem};

/// Bytes of a frame after its `head`.
pub enum Tail {
    /// Nothing beyond `head`.
    None,
    /// Payload still in the sender's guest RAM: (guest-physical, length)
    /// extents, read at delivery (the one copy of the data path).
    Guest {
        /// The sender's RAM (kept mapped while the frame lives).
        mem: Arc<GuestMem>,
        /// Extents in order.
        ext: Vec<(u64, u64)>,
    },
}

/// A TCP checksum the TX Merge Unit has not inserted yet: it is computed
/// while the payload streams out of the sender's RAM (at placement, in the
/// same pass as the copy; or when the wire copies the frame).
#[derive(Clone, Copy, Debug)]
pub struct PendingCsum {
    /// Offset of the checksum field in `head` (currently zero).
    pub field: usize,
    /// Sum of the pseudo-header and the TCP header (field zero).
    pub partial: Csum,
}

/// A frame: `head` followed by `tail`.
pub struct Frame {
    /// Leading bytes (a whole plain frame, or the headers of a merged one).
    pub head: Vec<u8>,
    /// Remaining bytes.
    pub tail: Tail,
    /// TCP checksum still to insert (merged frames with a payload).
    pub csum: Option<PendingCsum>,
}

impl Frame {
    /// A frame held entirely in host memory.
    pub fn owned(bytes: Vec<u8>) -> Self {
        Self {
            head: bytes,
            tail: Tail::None,
            csum: None,
        }
    }

    /// Inserts a pending checksum (one read pass over the tail).
    pub fn finalize(&mut self) -> Result<(), DmaError> {
        let Some(pc) = self.csum.take() else {
            return Ok(());
        };
        let mut c = pc.partial;
        let start = self.head.len();
        self.for_pieces(start, self.len() - start, |p, n| {
            // SAFETY: for_pieces hands out ranges valid for the call.
            c.add_sum(unsafe { sum_raw(p, n) }, n)
        })?;
        self.set_csum(pc.field, c.finish());
        Ok(())
    }

    /// Writes a checksum field value into `head`.
    pub fn set_csum(&mut self, field: usize, v: u16) {
        if let Some(b) = self.head.get_mut(field..field + 2) {
            b.copy_from_slice(&v.to_le_bytes());
        }
    }

    /// Total length.
    pub fn len(&self) -> usize {
        self.head.len() + self.tail_len()
    }

    /// True if the frame has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn tail_len(&self) -> usize {
        match &self.tail {
            Tail::None => 0,
            Tail::Guest { ext, .. } => ext.iter().map(|e| e.1 as usize).sum(),
        }
    }

    /// Copies the tail into `head` (the wire must own frames it holds
    /// back), inserting a pending checksum in the same pass.
    pub fn make_owned(&mut self) -> Result<(), DmaError> {
        let mut c = self.csum.map(|pc| pc.partial).unwrap_or_default();
        if let Tail::Guest { mem, ext } = &self.tail {
            for &(a, l) in ext {
                let src = mem.check(a, l)?;
                let start = self.head.len();
                self.head.resize(start + l as usize, 0);
                // SAFETY: src..src+l is inside the guest mapping (checked);
                // the destination was just sized to hold l bytes.
                let s = unsafe { copy_sum(self.head[start..].as_mut_ptr(), src, l as usize) };
                c.add_sum(s, l as usize);
            }
        }
        self.tail = Tail::None;
        if let Some(pc) = self.csum.take() {
            self.set_csum(pc.field, c.finish());
        }
        Ok(())
    }

    /// A second reference to the same bytes (tail still in guest RAM).
    pub fn share(&self) -> Self {
        let tail = match &self.tail {
            Tail::None => Tail::None,
            Tail::Guest { mem, ext } => Tail::Guest {
                mem: mem.clone(),
                ext: ext.clone(),
            },
        };
        Self {
            head: self.head.clone(),
            tail,
            csum: self.csum,
        }
    }

    /// Calls `f(ptr, len)` for the host pieces covering `[off, off + len)`;
    /// stops at the end of the frame. Pointers are valid during the call.
    pub fn for_pieces(
        &self,
        mut off: usize,
        mut len: usize,
        mut f: impl FnMut(*const u8, usize),
    ) -> Result<(), DmaError> {
        if off < self.head.len() {
            let n = len.min(self.head.len() - off);
            f(self.head[off..].as_ptr(), n);
            off += n;
            len -= n;
        }
        if len == 0 {
            return Ok(());
        }
        let mut pos = self.head.len();
        if let Tail::Guest { mem, ext } = &self.tail {
            for &(a, l) in ext {
                let l = l as usize;
                if off < pos + l && len > 0 {
                    let skip = off - pos;
                    let n = len.min(l - skip);
                    let p = mem.check(a + skip as u64, n as u64)?;
                    f(p, n);
                    off += n;
                    len -= n;
                }
                pos += l;
            }
        }
        Ok(())
    }
}

/// Ethernet II header length.
pub const ETH_HLEN: usize = 14;
/// EtherType of IPv4.
pub const ETH_P_IPV4: u16 = 0x0800;

/// Largest frame a port with `mtu` carries: MTU + Ethernet header, plus
/// one 802.1Q tag when the frame's EtherType (bytes 12..14) is 0x8100.
pub fn max_frame_len(mtu: u32, head: &[u8]) -> usize {
    use zeronic_hw::regs::{ETH_P_8021Q, VLAN_HLEN};
    let tagged = head.get(12..14) == Some(&ETH_P_8021Q.to_be_bytes()[..]);
    mtu as usize + ETH_HLEN + if tagged { VLAN_HLEN as usize } else { 0 }
}

/// ECN codepoint "Congestion Experienced" (the low two bits of IPv4 TOS).
pub const ECN_CE: u8 = 0x3;

/// TCP flag bits.
pub const TCP_FIN: u8 = 0x01;
/// TCP SYN.
pub const TCP_SYN: u8 = 0x02;
/// TCP RST.
pub const TCP_RST: u8 = 0x04;
/// TCP PSH.
pub const TCP_PSH: u8 = 0x08;
/// TCP ACK.
pub const TCP_ACK: u8 = 0x10;

/// A parsed IPv4/TCP frame (offsets into the frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tcp4 {
    /// IPv4 header length.
    pub ihl: usize,
    /// IPv4 TOS byte (DSCP and ECN).
    pub tos: u8,
    /// IPv4 time to live.
    pub ttl: u8,
    /// IPv4 total length.
    pub tot_len: usize,
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// TCP header length.
    pub thl: usize,
    /// TCP flags.
    pub flags: u8,
    /// TCP window field (unscaled).
    pub win: u16,
}

impl Tcp4 {
    /// ACK set, SYN and RST clear: a segment of an established connection
    /// whose ACK (and window) and payload TCP takes. TCP discards the
    /// payload of any other (RFC 9293 3.10.7.4; Linux does).
    pub fn is_plain_ack(&self) -> bool {
        self.flags & TCP_ACK != 0 && self.flags & (TCP_SYN | TCP_RST) == 0
    }

    /// Offset of the TCP header.
    pub fn l4_off(&self) -> usize {
        ETH_HLEN + self.ihl
    }
    /// Offset of the payload (= total header length).
    pub fn pay_off(&self) -> usize {
        ETH_HLEN + self.ihl + self.thl
    }
    /// Payload length.
    pub fn pay_len(&self) -> usize {
        self.tot_len - self.ihl - self.thl
    }
    /// TCP segment length (header + payload).
    pub fn tcp_len(&self) -> usize {
        self.tot_len - self.ihl
    }
    /// The packet carries an ECN Congestion Experienced mark.
    pub fn ce(&self) -> bool {
        self.tos & ECN_CE == ECN_CE
    }
}

/// A frame the RX/TX units refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Shorter than an Ethernet header.
    #[error("runt frame")]
    Runt,
    /// IPv4/TCP lengths inconsistent or headers not in the header part.
    #[error("malformed IPv4/TCP")]
    Malformed,
}

fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// Parses a frame of `frame_len` bytes whose first bytes are `head`.
/// `Ok(None)`: not an unfragmented IPv4/TCP frame (passed through whole).
pub fn parse_tcp4(head: &[u8], frame_len: usize) -> Result<Option<Tcp4>, ParseError> {
    if frame_len < ETH_HLEN || head.len() < ETH_HLEN {
        return Err(ParseError::Runt);
    }
    if be16(head, 12) != ETH_P_IPV4 {
        return Ok(None);
    }
    let ip = &head[ETH_HLEN..];
    if ip.len() < 20 || ip[0] >> 4 != 4 {
        return Err(ParseError::Malformed);
    }
    let ihl = (ip[0] & 0x0f) as usize * 4;
    let tot_len = be16(ip, 2) as usize;
    if ihl < 20 || tot_len < ihl || ETH_HLEN + tot_len > frame_len || ip.len() < ihl {
        return Err(ParseError::Malformed);
    }
    let frag = be16(ip, 6);
    if ip[9] != 6 || frag & 0x3fff != 0 {
        return Ok(None);
    }
    let t = &ip[ihl..];
    if t.len() < 20 || tot_len < ihl + 20 {
        return Err(ParseError::Malformed);
    }
    let thl = (t[12] >> 4) as usize * 4;
    if thl < 20 || ihl + thl > tot_len || t.len() < thl {
        return Err(ParseError::Malformed);
    }
    Ok(Some(Tcp4 {
        ihl,
        tos: ip[1],
        ttl: ip[8],
        tot_len,
        src: [ip[12], ip[13], ip[14], ip[15]],
        dst: [ip[16], ip[17], ip[18], ip[19]],
        sport: be16(t, 0),
        dport: be16(t, 2),
        seq: be32(t, 4),
        ack: be32(t, 8),
        thl,
        flags: t[13],
        win: be16(t, 14),
    }))
}

/// Recomputes the IPv4 header checksum in place (`ip` = the IPv4 header).
pub fn set_ipv4_csum(ip: &mut [u8]) {
    ip[10] = 0;
    ip[11] = 0;
    let mut c = crate::csum::Csum::default();
    c.add(ip);
    ip[10..12].copy_from_slice(&c.finish().to_le_bytes());
}

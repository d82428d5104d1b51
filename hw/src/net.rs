//! Ethernet II, IPv4 and TCP headers as the NIC reads them: the one parser
//! of the model's RX and TX units (frames) and the driver's header queue
//! (the headers of the NIC's entries), and the IPv4 header checksum both
//! rewrite headers with. `core` only, no panics: every byte is read with a
//! bounds check. It names `regs.rs` through `super::`, which is its
//! sibling in the crate and in the kernel module alike.

/// Ethernet II header length ([`super::regs::ETH_HLEN`], as a length).
pub const ETH_HLEN: usize = super::regs::ETH_HLEN as usize;
/// EtherType of IPv4.
pub const ETH_P_IPV4: u16 = 0x0800;
/// IP protocol number of TCP.
const PROTO_TCP: u8 = 6;

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
/// TCP URG (the urgent pointer is significant).
pub const TCP_URG: u8 = 0x20;

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

    /// Offset of the IPv4 header.
    pub fn l3_off(&self) -> usize {
        ETH_HLEN
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

/// A frame the parser refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Shorter than an Ethernet header.
    Runt,
    /// IPv4/TCP lengths inconsistent or headers not in the header part.
    Malformed,
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            ParseError::Runt => "runt frame",
            ParseError::Malformed => "malformed IPv4/TCP",
        })
    }
}

impl core::error::Error for ParseError {}

fn byte(b: &[u8], o: usize) -> Result<u8, ParseError> {
    b.get(o).copied().ok_or(ParseError::Malformed)
}

fn be16(b: &[u8], o: usize) -> Result<u16, ParseError> {
    Ok(u16::from_be_bytes([byte(b, o)?, byte(b, o + 1)?]))
}

fn be32(b: &[u8], o: usize) -> Result<u32, ParseError> {
    Ok(u32::from_be_bytes([
        byte(b, o)?,
        byte(b, o + 1)?,
        byte(b, o + 2)?,
        byte(b, o + 3)?,
    ]))
}

/// Parses a frame of `frame_len` bytes whose first bytes are `head` (the
/// whole Ethernet, IPv4 and TCP headers must be in `head`).
/// `Ok(None)`: not an unfragmented IPv4/TCP frame (passed through whole).
///
/// # Errors
///
/// [`ParseError::Runt`] for a frame shorter than an Ethernet header,
/// [`ParseError::Malformed`] for IPv4/TCP lengths that contradict each
/// other, the frame's length, or what `head` holds.
pub fn parse_tcp4(head: &[u8], frame_len: usize) -> Result<Option<Tcp4>, ParseError> {
    if frame_len < ETH_HLEN || head.len() < ETH_HLEN {
        return Err(ParseError::Runt);
    }
    if be16(head, 12)? != ETH_P_IPV4 {
        return Ok(None);
    }
    let ip = head.get(ETH_HLEN..).ok_or(ParseError::Malformed)?;
    if ip.len() < 20 || byte(ip, 0)? >> 4 != 4 {
        return Err(ParseError::Malformed);
    }
    let ihl = usize::from(byte(ip, 0)? & 0x0f) * 4;
    let tot_len = usize::from(be16(ip, 2)?);
    let past_frame = ETH_HLEN.saturating_add(tot_len) > frame_len;
    if ihl < 20 || tot_len < ihl || past_frame || ip.len() < ihl {
        return Err(ParseError::Malformed);
    }
    let frag = be16(ip, 6)?;
    if byte(ip, 9)? != PROTO_TCP || frag & 0x3fff != 0 {
        return Ok(None);
    }
    let t = ip.get(ihl..).ok_or(ParseError::Malformed)?;
    if t.len() < 20 || tot_len < ihl + 20 {
        return Err(ParseError::Malformed);
    }
    let thl = usize::from(byte(t, 12)? >> 4) * 4;
    if thl < 20 || ihl + thl > tot_len || t.len() < thl {
        return Err(ParseError::Malformed);
    }
    Ok(Some(Tcp4 {
        ihl,
        tos: byte(ip, 1)?,
        ttl: byte(ip, 8)?,
        tot_len,
        src: [byte(ip, 12)?, byte(ip, 13)?, byte(ip, 14)?, byte(ip, 15)?],
        dst: [byte(ip, 16)?, byte(ip, 17)?, byte(ip, 18)?, byte(ip, 19)?],
        sport: be16(t, 0)?,
        dport: be16(t, 2)?,
        seq: be32(t, 4)?,
        ack: be32(t, 8)?,
        thl,
        flags: byte(t, 13)?,
        win: be16(t, 14)?,
    }))
}

/// The checksum of the IPv4 header `ip` (RFC 791: the ones' complement of
/// the ones' complement sum of its 16-bit words, its checksum field taken
/// as zero), to be stored big-endian at bytes 10..12.
pub fn ipv4_header_checksum(ip: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for (i, w) in ip.chunks(2).enumerate() {
        if i == 5 {
            continue;
        }
        let hi = w.first().copied().unwrap_or(0);
        let lo = w.get(1).copied().unwrap_or(0);
        sum += u32::from(u16::from_be_bytes([hi, lo]));
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    // CAST: folded to 16 bits above.
    !(sum as u16)
}

//! Ethernet II, IPv4, IPv6 and TCP headers as the NIC reads them: the one parser
//! of the model's RX and TX units (frames) and the driver's header queue
//! (the headers of the NIC's entries), and the IPv4 header checksum both
//! rewrite headers with. `core` only, no panics: every byte is read with a
//! bounds check. It names `regs.rs` through `super::`, which is its
//! sibling in the crate and in the kernel module alike.

/// Ethernet II header length ([`super::regs::ETH_HLEN`], as a length).
pub const ETH_HLEN: usize = super::regs::ETH_HLEN as usize;
/// EtherType of IPv4.
pub const ETH_P_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETH_P_IPV6: u16 = 0x86dd;
/// Length of the IPv6 fixed header.
pub const IPV6_HLEN: usize = 40;
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

/// A frame the parser refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Shorter than an Ethernet header.
    Runt,
    /// IP/TCP lengths inconsistent or headers not in the header part.
    Malformed,
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            ParseError::Runt => "runt frame",
            ParseError::Malformed => "malformed IP/TCP",
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

/// Parses an IPv4/TCP frame: [`parse_tcp`] for IPv4 frames only (the
/// addresses are IPv4-mapped, [`v4_of_mapped`] gives them back).
/// `Ok(None)`: not an unfragmented IPv4/TCP frame (passed through whole;
/// IPv6 included).
///
/// # Errors
///
/// As [`parse_tcp`], for IPv4 frames.
pub fn parse_tcp4(head: &[u8], frame_len: usize) -> Result<Option<Tcp>, ParseError> {
    if frame_len < ETH_HLEN || head.len() < ETH_HLEN {
        return Err(ParseError::Runt);
    }
    if be16(head, 12)? != ETH_P_IPV4 {
        return Ok(None);
    }
    parse_tcp(head, frame_len)
}

/// The IPv4-mapped IPv6 address of `a` (`::ffff:a.b.c.d`, RFC 4291
/// 2.5.5.2).
pub fn ipv4_mapped(a: [u8; 4]) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[10] = 0xff;
    m[11] = 0xff;
    m[12..].copy_from_slice(&a);
    m
}

/// True if `a` is an IPv4-mapped IPv6 address.
pub fn is_ipv4_mapped(a: &[u8; 16]) -> bool {
    a[..10] == [0; 10] && a[10..12] == [0xff, 0xff]
}

/// The IPv4 address in the last four bytes of `a` (an IPv4-mapped one).
pub fn v4_of_mapped(a: [u8; 16]) -> [u8; 4] {
    [a[12], a[13], a[14], a[15]]
}

/// A parsed IPv4/TCP or IPv6/TCP frame (offsets into the frame). IPv4
/// addresses are held IPv4-mapped ([`ipv4_mapped`]), so one 16-byte
/// address names either family (the flag `v6` says which is on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tcp {
    /// An IPv6 packet (else IPv4).
    pub v6: bool,
    /// IP header length: the IPv4 header with its options, or
    /// [`IPV6_HLEN`].
    pub ihl: usize,
    /// IPv4 TOS byte or IPv6 traffic class (DSCP and ECN).
    pub tos: u8,
    /// IPv4 time to live or IPv6 hop limit.
    pub ttl: u8,
    /// IPv6 flow label (0 for IPv4).
    pub flow_label: u32,
    /// IP packet length: the IPv4 total length, or the IPv6 fixed header
    /// plus its payload length.
    pub tot_len: usize,
    /// Source address (IPv4-mapped for IPv4).
    pub src: [u8; 16],
    /// Destination address (IPv4-mapped for IPv4).
    pub dst: [u8; 16],
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

impl Tcp {
    /// ACK set, SYN and RST clear: a segment of an established connection
    /// whose ACK (and window) and payload TCP takes. TCP discards the
    /// payload of any other (RFC 9293 3.10.7.4; Linux does).
    pub fn is_plain_ack(&self) -> bool {
        self.flags & TCP_ACK != 0 && self.flags & (TCP_SYN | TCP_RST) == 0
    }
    /// Offset of the IP header.
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

/// True for an IPv6 next-header value that names an extension header
/// (IANA's "IPv6 Extension Header Types": hop-by-hop options, routing,
/// fragment, ESP, AH, destination options, mobility, HIP, shim6 and the
/// two experimental values).
pub fn is_ipv6_ext_header(nh: u8) -> bool {
    matches!(nh, 0 | 43 | 44 | 50 | 51 | 60 | 135 | 139 | 140 | 253 | 254)
}

/// The next header of an untagged IPv6 frame whose first bytes are
/// `head`, if its fixed header is there (no other check).
pub fn ipv6_next_header(head: &[u8]) -> Option<u8> {
    if head.get(12..14)? != ETH_P_IPV6.to_be_bytes() || head.get(ETH_HLEN)? >> 4 != 6 {
        return None;
    }
    head.get(ETH_HLEN + 6).copied()
}

/// The IP part of a frame [`parse_tcp`] goes on with: (v6, IP header
/// length, TOS/traffic class, TTL/hop limit, flow label, IP packet
/// length, source, destination).
type IpPart = (bool, usize, u8, u8, u32, usize, [u8; 16], [u8; 16]);

fn addr16(b: &[u8], o: usize) -> Result<[u8; 16], ParseError> {
    let mut a = [0u8; 16];
    a.copy_from_slice(b.get(o..o + 16).ok_or(ParseError::Malformed)?);
    Ok(a)
}

/// The IPv4 header at `ip`: `Ok(None)` if not TCP or a fragment.
fn ipv4_part(ip: &[u8], frame_len: usize) -> Result<Option<IpPart>, ParseError> {
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
    let a4 = |o| -> Result<[u8; 16], ParseError> {
        Ok(ipv4_mapped([
            byte(ip, o)?,
            byte(ip, o + 1)?,
            byte(ip, o + 2)?,
            byte(ip, o + 3)?,
        ]))
    };
    let (tos, ttl) = (byte(ip, 1)?, byte(ip, 8)?);
    Ok(Some((false, ihl, tos, ttl, 0, tot_len, a4(12)?, a4(16)?)))
}

/// The IPv6 fixed header at `ip`: `Ok(None)` if its next header is not
/// TCP (an extension header included: the NIC does not walk them).
fn ipv6_part(ip: &[u8], frame_len: usize) -> Result<Option<IpPart>, ParseError> {
    if ip.len() < IPV6_HLEN || byte(ip, 0)? >> 4 != 6 {
        return Err(ParseError::Malformed);
    }
    let tot_len = IPV6_HLEN + usize::from(be16(ip, 4)?);
    if ETH_HLEN + tot_len > frame_len {
        return Err(ParseError::Malformed);
    }
    if byte(ip, 6)? != PROTO_TCP {
        return Ok(None);
    }
    let first = be32(ip, 0)?;
    // CAST: the traffic class is bits 20..28 of the first word.
    let tos = (first >> 20) as u8;
    let label = first & 0x000f_ffff;
    let (src, dst) = (addr16(ip, 8)?, addr16(ip, 24)?);
    Ok(Some((
        true,
        IPV6_HLEN,
        tos,
        byte(ip, 7)?,
        label,
        tot_len,
        src,
        dst,
    )))
}

/// Parses a frame of `frame_len` bytes whose first bytes are `head` (the
/// whole Ethernet, IP and TCP headers must be in `head`): untagged IPv4
/// (not a fragment) or IPv6 (no extension header) carrying TCP.
/// `Ok(None)`: anything else (passed through whole).
///
/// # Errors
///
/// [`ParseError::Runt`] for a frame shorter than an Ethernet header,
/// [`ParseError::Malformed`] for IP/TCP lengths that contradict each
/// other, the frame's length, or what `head` holds: an IPv4 header as
/// before, and an IPv6 frame without its whole fixed header, with a
/// version other than 6 or with a payload length past the frame's end.
pub fn parse_tcp(head: &[u8], frame_len: usize) -> Result<Option<Tcp>, ParseError> {
    if frame_len < ETH_HLEN || head.len() < ETH_HLEN {
        return Err(ParseError::Runt);
    }
    let ip = head.get(ETH_HLEN..).ok_or(ParseError::Malformed)?;
    let part = match be16(head, 12)? {
        ETH_P_IPV4 => ipv4_part(ip, frame_len)?,
        ETH_P_IPV6 => ipv6_part(ip, frame_len)?,
        _ => return Ok(None),
    };
    let Some((v6, ihl, tos, ttl, flow_label, tot_len, src, dst)) = part else {
        return Ok(None);
    };
    let t = ip.get(ihl..).ok_or(ParseError::Malformed)?;
    if t.len() < 20 || tot_len < ihl + 20 {
        return Err(ParseError::Malformed);
    }
    let thl = usize::from(byte(t, 12)? >> 4) * 4;
    if thl < 20 || ihl + thl > tot_len || t.len() < thl {
        return Err(ParseError::Malformed);
    }
    Ok(Some(Tcp {
        v6,
        ihl,
        tos,
        ttl,
        flow_label,
        tot_len,
        src,
        dst,
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

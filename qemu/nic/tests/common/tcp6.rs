//! IPv6/TCP frames with correct checksums, and IPv6 flows: what a peer
//! sends to (and a host acknowledges on) an IPv6 flow's tuple. Checksums
//! use the textbook RFC 1071 sum below, not the model's.

use zeronic_hw::cmd::*;

use super::ip6::{A6, B6};
use super::Tb;

/// Ethernet + IPv6 + TCP without options.
pub const HL: usize = 14 + 40 + 20;

/// Textbook RFC 1071 ones' complement sum of big-endian 16-bit words.
pub fn sum16(data: &[u8]) -> u32 {
    let mut s: u32 = 0;
    for w in data.chunks(2) {
        s += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
        s = (s & 0xffff) + (s >> 16);
    }
    s
}

pub fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The IPv6 pseudo-header sum (RFC 8200 8.1) of an upper-layer packet.
pub fn pseudo6(src: &[u8], dst: &[u8], len: usize, nh: u8) -> u32 {
    let mut p = Vec::new();
    p.extend_from_slice(src);
    p.extend_from_slice(dst);
    p.extend_from_slice(&(len as u32).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, nh]);
    sum16(&p)
}

/// True if the untagged IPv6 frame `f`'s upper-layer checksum (next header
/// `nh`, no extension header) verifies.
pub fn l4_csum_ok(f: &[u8], nh: u8) -> bool {
    let l4 = &f[54..];
    fold(pseudo6(&f[22..38], &f[38..54], l4.len(), nh) + sum16(l4)) == 0xffff
}

/// The checksum to store at `field` of the untagged IPv6 frame `f`.
pub fn l4_csum(f: &mut [u8], field: usize, nh: u8) {
    f[field..field + 2].copy_from_slice(&[0, 0]);
    let l4 = &f[54..];
    let c = !fold(pseudo6(&f[22..38], &f[38..54], l4.len(), nh) + sum16(l4));
    f[field..field + 2].copy_from_slice(&c.to_be_bytes());
}

/// Ethernet + IPv6 + TCP header (payload length 20, checksum 0).
pub fn tcp6_hdr(
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    seq: u32,
    flags: u8,
) -> Vec<u8> {
    let mut h = vec![0u8; HL];
    h[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    h[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    h[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    // Version 6, traffic class 0, flow label 0x12345.
    h[14..18].copy_from_slice(&0x6001_2345u32.to_be_bytes());
    h[18..20].copy_from_slice(&20u16.to_be_bytes());
    h[20] = 6;
    h[21] = 64;
    h[22..38].copy_from_slice(&src);
    h[38..54].copy_from_slice(&dst);
    let t = &mut h[54..74];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&1u32.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    h
}

/// A whole IPv6/TCP frame with a correct checksum.
pub fn tcp6_frame(
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    seq: u32,
    pay: &[u8],
) -> Vec<u8> {
    let mut f = tcp6_hdr(src, dst, sport, dport, seq, 0x18);
    f.extend_from_slice(pay);
    let pl = (f.len() - 54) as u16;
    f[18..20].copy_from_slice(&pl.to_be_bytes());
    l4_csum(&mut f, 70, 6);
    f
}

/// The IPv6 flow of receiver B (local B6:5001, remote A6:4000), its
/// `FlowAddr6` block written into guest g's RAM.
pub fn flow6(tb: &mut Tb, g: usize, rx_isn: u32) -> CmdFlow {
    let a = tb.drv[g].alloc(FlowAddr6::SIZE as u64);
    let block = FlowAddr6 {
        local_addr: B6,
        remote_addr: A6,
    };
    tb.drv[g].mem.write(a, &block.encode()).unwrap();
    let mut c = CmdFlow {
        flags: FLOWI_IPV6,
        local_port: 5001,
        remote_port: 4000,
        rx_isn,
        mode: FLOW_RX_SEGMENTS,
        ..Default::default()
    };
    c.set_addr6(a);
    c
}

/// The ACK the host (B6:`sport`) sends to A6:`dport` acknowledging `ack`
/// with window field `win` and TCP `flags`, checksum filled in.
pub fn ack6_frame(sport: u16, dport: u16, ack: u32, win: u16, flags: u8) -> Vec<u8> {
    let mut f = tcp6_hdr(B6, A6, sport, dport, 1, flags);
    f[62..66].copy_from_slice(&ack.to_be_bytes());
    f[68..70].copy_from_slice(&win.to_be_bytes());
    l4_csum(&mut f, 70, 6);
    f
}

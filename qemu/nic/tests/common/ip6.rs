//! Untagged IPv6 frames for the steering tests and the fuzzers: TCP or
//! UDP (any next header), with or without an extension header before it.

/// The sender's IPv6 address, 2001:db8::1.
pub const A6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// The receiver's IPv6 address (destination of every IPv6 test frame).
pub const B6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// A source address in 2001:db8:0:`net`::/64.
pub fn a6(net: u8, host: u8) -> [u8; 16] {
    let mut a = B6;
    a[7] = net;
    a[15] = host;
    a
}

/// An untagged IPv6 frame `src` -> `B6` whose L4 header (TCP for next
/// header 6, else 8 bytes as UDP) carries the ports; with `ext`, behind a
/// destination-options header. Checksums are not filled in: steering does
/// not look at them.
pub fn ip6(src: [u8; 16], nh: u8, sport: u16, dport: u16, ext: bool) -> Vec<u8> {
    let mut l4 = vec![0u8; if nh == 6 { 20 } else { 8 }];
    l4[..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    if nh == 6 {
        l4[12] = 5 << 4;
        l4[13] = 0x10;
    } else {
        let len = (l4.len() + 4) as u16;
        l4[4..6].copy_from_slice(&len.to_be_bytes());
    }
    l4.extend_from_slice(b"data");
    let mut f = vec![0u8; 14 + 40];
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    f[14] = 0x60;
    f[18..20].copy_from_slice(&(l4.len() as u16).to_be_bytes());
    f[20] = nh;
    f[21] = 64;
    f[22..38].copy_from_slice(&src);
    f[38..54].copy_from_slice(&B6);
    f.extend_from_slice(&l4);
    if ext {
        insert_ext6(&mut f, 60);
    }
    f
}

/// Puts an 8-byte extension header of type `ext` (shaped as destination
/// options holding one PadN) right behind the fixed header of the untagged
/// IPv6 frame `f`: it chains the old next header, and the payload length
/// grows by 8 (whatever it said before).
pub fn insert_ext6(f: &mut Vec<u8>, ext: u8) {
    let nh = f[20];
    f.splice(54..54, [nh, 0, 1, 4, 0, 0, 0, 0]);
    f[20] = ext;
    let pl = u16::from_be_bytes([f[18], f[19]]).wrapping_add(8);
    f[18..20].copy_from_slice(&pl.to_be_bytes());
}

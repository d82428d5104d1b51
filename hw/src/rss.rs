//! Receive-side scaling: the Toeplitz hash over a packet's addresses and
//! ports that picks its RX queue, as Microsoft's RSS specification and
//! Linux's software hash (`toeplitz.c` of the kernel's `drivers/net/hw`
//! selftests) define it: the hash of the NIC's receive steering
//! (docs/hardware.md §14, issue 35). `core` only, no panics.
//!
//! The input is the source address, the destination address, then (for
//! TCP) the source and destination ports, all in network byte order.

/// Length of an RSS key: 40 bytes, enough for an IPv6 4-tuple (36 bytes
/// of input need 36 + 4 key bytes).
pub const RSS_KEY_LEN: usize = 40;

/// The key of Microsoft's RSS verification suite, which many NICs use as
/// their default.
pub const RSS_KEY_DEFAULT: [u8; RSS_KEY_LEN] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// The Toeplitz hash of `input` under `key`: for each set bit of the input
/// (most significant first), the 32 key bits starting at that bit position
/// are XORed into the result. Input bytes beyond `key.len() - 4` have no
/// key bits left and are ignored.
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let mut hash = 0u32;
    // The 32-bit window of the key at the current bit, and the key bits
    // still to shift in, one byte at a time.
    let mut window = match key {
        [a, b, c, d, ..] => u32::from_be_bytes([*a, *b, *c, *d]),
        _ => return 0,
    };
    let mut next = key.iter().skip(4);
    for &byte in input.iter().take(key.len().saturating_sub(4)) {
        let k = next.next().copied().unwrap_or(0);
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= window;
            }
            window = (window << 1) | u32::from((k >> (7 - bit)) & 1);
        }
    }
    hash
}

/// The hash of a TCP/IPv4 packet's 4-tuple (addresses as their four
/// bytes, ports as numbers).
pub fn hash_tcp4(key: &[u8], saddr: [u8; 4], daddr: [u8; 4], sport: u16, dport: u16) -> u32 {
    let mut input = [0u8; 12];
    input[..4].copy_from_slice(&saddr);
    input[4..8].copy_from_slice(&daddr);
    input[8..10].copy_from_slice(&sport.to_be_bytes());
    input[10..].copy_from_slice(&dport.to_be_bytes());
    toeplitz(key, &input)
}

/// The hash of an IPv6 packet's addresses (`RSS_TYPE_IPV6`).
pub fn hash_ipv6(key: &[u8], saddr: [u8; 16], daddr: [u8; 16]) -> u32 {
    let mut input = [0u8; 32];
    input[..16].copy_from_slice(&saddr);
    input[16..].copy_from_slice(&daddr);
    toeplitz(key, &input)
}

/// The hash of a TCP/IPv6 packet's 4-tuple (`RSS_TYPE_TCP6`).
pub fn hash_tcp6(key: &[u8], saddr: [u8; 16], daddr: [u8; 16], sport: u16, dport: u16) -> u32 {
    let mut input = [0u8; 36];
    input[..16].copy_from_slice(&saddr);
    input[16..32].copy_from_slice(&daddr);
    input[32..34].copy_from_slice(&sport.to_be_bytes());
    input[34..].copy_from_slice(&dport.to_be_bytes());
    toeplitz(key, &input)
}

/// Hash input field (version 2.4): the source address.
pub const RSS_FIELD_SA: u32 = 1 << 0;
/// Hash input field (version 2.4): the destination address.
pub const RSS_FIELD_DA: u32 = 1 << 1;
/// Hash input field (version 2.4): the source port (L4 bytes 0..2).
pub const RSS_FIELD_SP: u32 = 1 << 2;
/// Hash input field (version 2.4): the destination port (L4 bytes 2..4).
pub const RSS_FIELD_DP: u32 = 1 << 3;
/// All hash input fields: the 4-tuple.
pub const RSS_FIELDS_ALL: u32 = 0xf;

/// The hash over the fields `fields` (`RSS_FIELD_*`, other bits ignored)
/// selects of a packet, concatenated in the fixed order source address,
/// destination address, source port, destination port (addresses as 4 or
/// 16 bytes in network byte order; longer slices are cut at 16 bytes).
/// `RSS_FIELDS_ALL` is [`hash_tcp4`] / [`hash_tcp6`], `RSS_FIELD_SA |
/// RSS_FIELD_DA` the addresses' hash; no field hashes nothing (0).
pub fn hash_fields(
    key: &[u8],
    fields: u32,
    saddr: &[u8],
    daddr: &[u8],
    sport: u16,
    dport: u16,
) -> u32 {
    let (sp, dp) = (sport.to_be_bytes(), dport.to_be_bytes());
    let parts: [(u32, &[u8]); 4] = [
        (RSS_FIELD_SA, saddr),
        (RSS_FIELD_DA, daddr),
        (RSS_FIELD_SP, &sp),
        (RSS_FIELD_DP, &dp),
    ];
    // The largest input: two IPv6 addresses and two ports.
    let mut input = [0u8; 36];
    let mut len = 0;
    for (bit, bytes) in parts {
        if fields & bit == 0 {
            continue;
        }
        for &b in bytes.iter().take(16) {
            if let Some(slot) = input.get_mut(len) {
                *slot = b;
                len += 1;
            }
        }
    }
    toeplitz(key, input.get(..len).unwrap_or(&[]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A case of Microsoft's "Verifying the RSS Hash Calculation"
    /// (<https://learn.microsoft.com/en-us/windows-hardware/drivers/network/verifying-the-rss-hash-calculation>,
    /// the IPv4 and the IPv6 tables, both under `RSS_KEY_DEFAULT`): source,
    /// source port, destination, destination port, the 4-tuple's hash and
    /// the addresses' alone.
    type Case<A> = (A, u16, A, u16, u32, u32);

    /// The IPv4 cases.
    const IPV4: [Case<[u8; 4]>; 5] = [
        (
            [66, 9, 149, 187],
            2794,
            [161, 142, 100, 80],
            1766,
            0x51cc_c178,
            0x323e_8fc2,
        ),
        (
            [199, 92, 111, 2],
            14230,
            [65, 69, 140, 83],
            4739,
            0xc626_b0ea,
            0xd718_262a,
        ),
        (
            [24, 19, 198, 95],
            12898,
            [12, 22, 207, 184],
            38024,
            0x5c2b_394a,
            0xd2d0_a5de,
        ),
        (
            [38, 27, 205, 30],
            48228,
            [209, 142, 163, 6],
            2217,
            0xafc7_327f,
            0x8298_9176,
        ),
        (
            [153, 39, 163, 191],
            44251,
            [202, 188, 127, 2],
            1303,
            0x10e8_28a2,
            0x5d18_09c5,
        ),
    ];

    #[test]
    fn ipv4_vectors() {
        for (s, sp, d, dp, tuple, addrs) in IPV4 {
            assert_eq!(hash_tcp4(&RSS_KEY_DEFAULT, s, d, sp, dp), tuple);
            let mut input = [0u8; 8];
            input[..4].copy_from_slice(&s);
            input[4..].copy_from_slice(&d);
            assert_eq!(toeplitz(&RSS_KEY_DEFAULT, &input), addrs);
        }
    }

    fn v6(groups: [u16; 8]) -> [u8; 16] {
        let mut a = [0u8; 16];
        for (i, g) in groups.iter().enumerate() {
            a[2 * i..2 * i + 2].copy_from_slice(&g.to_be_bytes());
        }
        a
    }

    /// The IPv6 table of the same page: `RSS_TYPE_TCP6` hashes the
    /// 36-byte input, `RSS_TYPE_IPV6` the 32 bytes of the addresses.
    #[test]
    fn ipv6_vectors() {
        let cases = [
            (
                v6([0x3ffe, 0x2501, 0x200, 0x1fff, 0, 0, 0, 7]),
                2794,
                v6([0x3ffe, 0x2501, 0x200, 3, 0, 0, 0, 1]),
                1766,
                0x4020_7d3d,
                0x2cc1_8cd5,
            ),
            (
                v6([0x3ffe, 0x501, 8, 0, 0x260, 0x97ff, 0xfe40, 0xefab]),
                14230,
                v6([0xff02, 0, 0, 0, 0, 0, 0, 1]),
                4739,
                0xdde5_1bbf,
                0x0f0c_461c,
            ),
            (
                v6([0x3ffe, 0x1900, 0x4545, 3, 0x200, 0xf8ff, 0xfe21, 0x67cf]),
                44251,
                v6([0xfe80, 0, 0, 0, 0x200, 0xf8ff, 0xfe21, 0x67cf]),
                38024,
                0x02d1_feef,
                0x4b61_e985,
            ),
        ];
        for (s, sp, d, dp, tuple, addrs) in cases {
            assert_eq!(hash_tcp6(&RSS_KEY_DEFAULT, s, d, sp, dp), tuple);
            assert_eq!(hash_ipv6(&RSS_KEY_DEFAULT, s, d), addrs);
        }
    }

    /// The defaults of `PORT_RSS_FIELDS` (TCP: all four, UDP: the
    /// addresses) reproduce the hashes of 2.3, Microsoft's vectors.
    #[test]
    fn field_selection_defaults_are_microsoft_s_hashes() {
        let k = &RSS_KEY_DEFAULT;
        for (s, sp, d, dp, tuple, addrs) in IPV4 {
            assert_eq!(hash_fields(k, RSS_FIELDS_ALL, &s, &d, sp, dp), tuple);
            let sd = RSS_FIELD_SA | RSS_FIELD_DA;
            assert_eq!(hash_fields(k, sd, &s, &d, sp, dp), addrs);
            assert_eq!(hash_fields(k, sd | 0xf0, &s, &d, sp, dp), addrs);
            assert_eq!(hash_fields(k, 0, &s, &d, sp, dp), 0);
        }
        let s = v6([0x3ffe, 0x2501, 0x200, 0x1fff, 0, 0, 0, 7]);
        let d = v6([0x3ffe, 0x2501, 0x200, 3, 0, 0, 0, 1]);
        assert_eq!(
            hash_fields(k, RSS_FIELDS_ALL, &s, &d, 2794, 1766),
            0x4020_7d3d
        );
        assert_eq!(hash_fields(k, 3, &s, &d, 2794, 1766), 0x2cc1_8cd5);
    }

    /// A subset is the selected fields concatenated in the fixed order,
    /// hashed from the first key bit.
    #[test]
    fn field_subsets_concatenate_in_order() {
        let k = &RSS_KEY_DEFAULT;
        let (s, d) = ([66, 9, 149, 187], [161, 142, 100, 80]);
        let sa_dp = [66, 9, 149, 187, 0x06, 0xe6];
        let got = hash_fields(k, RSS_FIELD_SA | RSS_FIELD_DP, &s, &d, 2794, 1766);
        assert_eq!(got, toeplitz(k, &sa_dp));
        let ports = [0x0a, 0xea, 0x06, 0xe6];
        let got = hash_fields(k, RSS_FIELD_SP | RSS_FIELD_DP, &s, &d, 2794, 1766);
        assert_eq!(got, toeplitz(k, &ports));
        let got = hash_fields(k, RSS_FIELD_DA, &s, &d, 2794, 1766);
        assert_eq!(got, toeplitz(k, &d));
    }

    #[test]
    fn a_short_key_hashes_what_it_covers() {
        assert_eq!(toeplitz(&[1, 2, 3], &[0xff]), 0);
        // A 5-byte key covers one input byte: bit 7 takes key bits 0..32.
        assert_eq!(toeplitz(&[0x80, 0, 0, 0, 0], &[0x80, 0xff]), 0x8000_0000);
    }
}

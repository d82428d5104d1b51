// SPDX-License-Identifier: GPL-2.0

//! The addresses and ports of an attached connection, of either family.

use kernel::{
    net::sock::{
        context::LockContext,
        Locked,
        AF_INET,
        AF_INET6, //
    },
    prelude::*,
};

use crate::hw::net::{
    ipv4_mapped,
    is_ipv4_mapped,
    v4_of_mapped,
    Tcp, //
};

/// The addresses and ports of a connection as its packets carry them.
/// IPv4 addresses are held IPv4-mapped, as [`Tcp`] holds them, so one
/// type names both families.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tuple {
    /// The packets are IPv6 ones; else IPv4 (an IPv6 socket whose peer is
    /// IPv4-mapped sends and receives IPv4).
    pub(crate) v6: bool,
    /// Local address.
    pub(crate) local: [u8; 16],
    /// Local port.
    pub(crate) local_port: u16,
    /// Remote address.
    pub(crate) remote: [u8; 16],
    /// Remote port.
    pub(crate) remote_port: u16,
}

impl Tuple {
    /// The connection of `sk`.
    ///
    /// # Errors
    ///
    /// `EAFNOSUPPORT` if the socket is neither IPv4 nor IPv6.
    pub(crate) fn of<C: LockContext>(sk: &Locked<'_, C>) -> Result<Self> {
        match sk.sock().family() {
            AF_INET => {
                let t = sk.ipv4_tuple();
                Ok(Self {
                    v6: false,
                    local: ipv4_mapped(t.saddr.octets()),
                    local_port: t.sport,
                    remote: ipv4_mapped(t.daddr.octets()),
                    remote_port: t.dport,
                })
            }
            AF_INET6 => {
                let t = sk.ipv6_tuple();
                let remote = t.daddr.octets();
                Ok(Self {
                    v6: !is_ipv4_mapped(&remote),
                    local: t.saddr.octets(),
                    local_port: t.sport,
                    remote,
                    remote_port: t.dport,
                })
            }
            _ => Err(EAFNOSUPPORT),
        }
    }

    /// Whether `t`, a parsed header, is of a packet from the peer to this
    /// end of the connection.
    pub(crate) fn receives(&self, t: &Tcp) -> bool {
        t.v6 == self.v6
            && t.src == self.remote
            && t.dst == self.local
            && t.sport == self.remote_port
            && t.dport == self.local_port
    }

    /// The local and remote IPv4 addresses (host byte order) of an IPv4
    /// connection.
    pub(crate) fn v4_addrs(&self) -> (u32, u32) {
        (
            u32::from_be_bytes(v4_of_mapped(self.local)),
            u32::from_be_bytes(v4_of_mapped(self.remote)),
        )
    }
}

#[kernel::macros::kunit_tests(zeronic_tuple)]
mod tests {
    use super::*;
    use crate::hw::net::parse_tcp;

    /// An Ethernet + IPv6 + TCP header (no options) from `src:sport` to
    /// `dst:dport`.
    fn header6(src: [u8; 16], sport: u16, dst: [u8; 16], dport: u16) -> [u8; 74] {
        let mut h = [0u8; 74];
        h[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        h[14] = 0x60;
        h[18..20].copy_from_slice(&20u16.to_be_bytes());
        h[20] = 6;
        h[22..38].copy_from_slice(&src);
        h[38..54].copy_from_slice(&dst);
        h[54..56].copy_from_slice(&sport.to_be_bytes());
        h[56..58].copy_from_slice(&dport.to_be_bytes());
        h[66] = 5 << 4;
        h
    }

    fn addr(last: u8) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[0] = 0xfd;
        a[15] = last;
        a
    }

    /// An IPv6 connection receives only its peer's IPv6 packets.
    #[test]
    fn receives_ipv6_packets_of_the_connection() {
        let t = Tuple {
            v6: true,
            local: addr(1),
            local_port: 5000,
            remote: addr(2),
            remote_port: 80,
        };
        let parsed = |h: [u8; 74]| {
            parse_tcp(&h, h.len())
                .ok()
                .flatten()
                .expect("a minimal header parses")
        };
        assert!(t.receives(&parsed(header6(addr(2), 80, addr(1), 5000))));
        assert!(!t.receives(&parsed(header6(addr(3), 80, addr(1), 5000))));
        assert!(!t.receives(&parsed(header6(addr(2), 80, addr(1), 5001))));
        assert!(!t.receives(&parsed(header6(addr(1), 5000, addr(2), 80))));
        // The same addresses as an IPv4 connection's never match.
        let v4 = Tuple { v6: false, ..t };
        assert!(!v4.receives(&parsed(header6(addr(2), 80, addr(1), 5000))));
    }
}

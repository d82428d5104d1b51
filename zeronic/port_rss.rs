// SPDX-License-Identifier: GPL-2.0

//! RSS of a port as ethtool configures it (`ethtool -x`/`-X`, `-n`/`-N
//! rx-flow-hash`): the hash key, the indirection table and the header
//! fields hashed per flow type (hardware spec §14, §16).
//!
//! - The key (`PORT_RSS_KEY`, `RSS_KEY_LEN` bytes) is the host's random RSS
//!   key (`netdev_rss_key_fill()`) from probe on, until `-X hkey` sets
//!   another; the hash function is Toeplitz, the NIC's only one.
//! - The table (`PORT_RSS_TABLE`, `RSS_TABLE_SIZE` entries) is either the
//!   default, entry i to queue pair i mod n over the n active queue pairs
//!   (`ethtool_rxfh_indir_default()`), which follows `ethtool -L`, or one
//!   user space set (`-X equal`, `weight`, a netlink table), which stays
//!   across down/up and `-L` (the core refuses `-L` below its highest
//!   queue). A table equal to the default one (`-X default` hands the
//!   driver exactly that) makes the table the default again.
//! - The fields (`PORT_RSS_FIELDS`, `CAP_STEER_V2`) of TCP and UDP over
//!   IPv4 and IPv6: any subset of source and destination address and port
//!   (`s`, `d`, `f`, `n`). Without `CAP_STEER_V2` they are 2.3's, fixed:
//!   TCP over all four, UDP over the addresses.
//!
//! - Additional contexts (`ethtool -X <dev> context new`, `CAP_STEER_V2`):
//!   contexts 1 to `RSS_CONTEXTS - 1`, each its own table on the NIC
//!   (`CMD_RSS_CTX_SET`), with the port's key and fields; n-tuple rules
//!   steer to them (`context N`). The core keeps their tables.
//!
//! Everything here is pure: `port.rs` keeps an [`RssConfig`] in the port's
//! configuration and writes it to the NIC when the port opens or, while it
//! is open, when ethtool changes it.

use kernel::{
    net::{
        dev::ethtool::{
            rss_key_fill,
            FlowType,
            RssHashFunc,
            RssRequest,
            RxhFields, //
        },
        netlink::ExtAck,
    },
    prelude::*,
};

use crate::hw::{
    cmd::CmdRssCtx,
    regs,
    rss, //
};

/// Entries of the indirection table.
pub(crate) const TABLE_SIZE: usize = regs::RSS_TABLE_SIZE as usize;

/// Bytes of the hash key.
pub(crate) const KEY_SIZE: usize = rss::RSS_KEY_LEN;

/// A port's RSS configuration; applied to the NIC when the port opens.
#[derive(Clone, Copy)]
pub(crate) struct RssConfig {
    /// The hash key (`PORT_RSS_KEY`).
    pub(crate) key: [u8; KEY_SIZE],
    /// The indirection table user space set; `None`: the default spread
    /// over the active queue pairs ([`default_entry`]).
    pub(crate) table: Option<[u8; TABLE_SIZE]>,
    /// `PORT_RSS_FIELDS` (used with `CAP_STEER_V2` only).
    pub(crate) fields: u32,
}

impl RssConfig {
    /// The configuration of a port nobody has configured: the NIC's
    /// default key (until [`RssConfig::fill_key`]), the default table and
    /// fields.
    pub(crate) const fn new() -> Self {
        Self {
            key: rss::RSS_KEY_DEFAULT,
            table: None,
            fields: regs::RSS_FIELDS_DEFAULT,
        }
    }

    /// Replaces the key with the host's random RSS key; keeps the NIC's
    /// default if the host's cannot be had (never: it is longer).
    pub(crate) fn fill_key(&mut self) {
        let mut key = [0u8; KEY_SIZE];
        if rss_key_fill(&mut key).is_ok() {
            self.key = key;
        }
    }

    /// The table in effect with `n` active queue pairs.
    pub(crate) fn table(&self, n: u32) -> [u8; TABLE_SIZE] {
        self.table.unwrap_or_else(|| default_table(n))
    }
}

/// Entry `i` of the default table over `n` queue pairs: `i mod n`.
pub(crate) fn default_entry(i: usize, n: u32) -> u8 {
    // CAST: u32 -> usize is lossless; the remainder is below `n <= MAX_QP`.
    (i % n.max(1) as usize) as u8
}

/// The default table over `n` queue pairs.
pub(crate) fn default_table(n: u32) -> [u8; TABLE_SIZE] {
    core::array::from_fn(|i| default_entry(i, n))
}

/// `ethtool -X` (and netlink's `rss-set`): the configuration `req` asks for
/// on a port with `n` receive queues, or why the NIC cannot do it (nothing
/// changes then). A request without a part keeps it.
///
/// # Errors
///
/// - `EOPNOTSUPP` for a hash function other than Toeplitz.
/// - `EINVAL` for a key or table of the wrong size or a table entry at or
///   past `n` (the core checked both; refused again rather than trusted).
pub(crate) fn set_rxfh(
    cfg: &RssConfig,
    req: &RssRequest<'_>,
    n: u32,
    extack: &mut ExtAck<'_>,
) -> Result<RssConfig> {
    let mut new = *cfg;
    if let Some(f) = req.hfunc {
        if f != RssHashFunc::Toeplitz {
            extack.set_msg(c"the NIC hashes with Toeplitz only");
            return Err(EOPNOTSUPP);
        }
    }
    if let Some(key) = req.key {
        new.key = key.try_into().map_err(|_| EINVAL)?;
    }
    if let Some(indir) = req.indir {
        let table = table_of(indir, n, extack)?;
        new.table = (table != default_table(n)).then_some(table);
    }
    Ok(new)
}

// ---- Additional contexts ----------------------------------------------------

/// The NIC's form of an indirection table `indir` (the port's own, or an
/// additional RSS context's, `ethtool -X <dev> context N`, hardware spec
/// §16), whose entries name receive queues below `n`. A context's key and
/// hash function are the port's.
///
/// # Errors
///
/// `EINVAL` for a table of the wrong size or an entry at or past `n` (the
/// core checked both; refused again rather than trusted).
pub(crate) fn table_of(indir: &[u32], n: u32, extack: &mut ExtAck<'_>) -> Result<[u8; TABLE_SIZE]> {
    if indir.len() != TABLE_SIZE {
        return Err(EINVAL);
    }
    let mut table = [0u8; TABLE_SIZE];
    for (e, &q) in table.iter_mut().zip(indir) {
        if q >= n {
            extack.set_msg(c"indirection table entry past the receive queues");
            return Err(EINVAL);
        }
        // CAST: below `n <= MAX_QP` (8).
        *e = q as u8;
    }
    Ok(table)
}

/// `CMD_RSS_CTX_SET` of context `id` of port `port`; the table's address
/// is filled in when it is placed.
///
/// # Errors
///
/// `EINVAL` for context 0 (the port's own table, `PORT_RSS_TABLE`) or one
/// at or past `RSS_CONTEXTS`.
pub(crate) fn context_command(port: u32, id: u32) -> Result<CmdRssCtx> {
    if id == 0 || id >= regs::RSS_CONTEXTS {
        return Err(EINVAL);
    }
    Ok(CmdRssCtx {
        port: u16::try_from(port)?,
        // CAST: below RSS_CONTEXTS (8).
        ctx: id as u16,
        ..Default::default()
    })
}

// ---- Hash fields ------------------------------------------------------------

/// The hash fields of TCP: the 4-tuple (`sdfn`).
const RXH_TUPLE: RxhFields = RxhFields::IP_SRC
    .with(RxhFields::IP_DST)
    .with(RxhFields::L4_B_0_1)
    .with(RxhFields::L4_B_2_3);

/// The hash fields of addresses only (`sd`).
const RXH_ADDRS: RxhFields = RxhFields::IP_SRC.with(RxhFields::IP_DST);

/// Each `RSS_FIELD_*` bit with the ethtool field it stands for.
const FIELD_MAP: [(u32, RxhFields); 4] = [
    (rss::RSS_FIELD_SA, RxhFields::IP_SRC),
    (rss::RSS_FIELD_DA, RxhFields::IP_DST),
    (rss::RSS_FIELD_SP, RxhFields::L4_B_0_1),
    (rss::RSS_FIELD_DP, RxhFields::L4_B_2_3),
];

/// Where `flow`'s four bits are in `PORT_RSS_FIELDS`; `None` for a flow
/// type the NIC does not hash by fields.
fn fields_shift(flow: FlowType) -> Option<u32> {
    match flow {
        FlowType::Tcp4 => Some(regs::RSS_FIELDS_TCP4_SHIFT),
        FlowType::Udp4 => Some(regs::RSS_FIELDS_UDP4_SHIFT),
        FlowType::Tcp6 => Some(regs::RSS_FIELDS_TCP6_SHIFT),
        FlowType::Udp6 => Some(regs::RSS_FIELDS_UDP6_SHIFT),
        FlowType::Other(_) => None,
    }
}

/// The ethtool fields of four `RSS_FIELD_*` bits.
fn rxh_of(bits: u32) -> RxhFields {
    FIELD_MAP
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .fold(RxhFields::empty(), |acc, (_, f)| acc.with(*f))
}

/// The `RSS_FIELD_*` bits of ethtool fields; `None` if one has no bit.
fn bits_of(rxh: RxhFields) -> Option<u32> {
    let mut left = rxh.bits();
    let mut bits = 0;
    for (b, f) in FIELD_MAP {
        if rxh.contains(f) {
            bits |= b;
            left &= !f.bits();
        }
    }
    (left == 0).then_some(bits)
}

/// `ethtool -n rx-flow-hash` on a NIC with `CAP_STEER_V2`: `flow`'s fields
/// in `PORT_RSS_FIELDS` value `fields`.
///
/// # Errors
///
/// - `EOPNOTSUPP` for a flow type other than TCP or UDP over IPv4 or IPv6.
pub(crate) fn get_fields(fields: u32, flow: FlowType) -> Result<RxhFields> {
    let shift = fields_shift(flow).ok_or(EOPNOTSUPP)?;
    Ok(rxh_of((fields >> shift) & rss::RSS_FIELDS_ALL))
}

/// `ethtool -n rx-flow-hash` on a NIC without `CAP_STEER_V2` (version
/// 2.3): TCP over the 4-tuple, UDP over the addresses.
///
/// # Errors
///
/// - `EOPNOTSUPP` for a flow type other than TCP or UDP over IPv4 or IPv6.
pub(crate) fn fixed_fields(flow: FlowType) -> Result<RxhFields> {
    match flow {
        FlowType::Tcp4 | FlowType::Tcp6 => Ok(RXH_TUPLE),
        FlowType::Udp4 | FlowType::Udp6 => Ok(RXH_ADDRS),
        FlowType::Other(_) => Err(EOPNOTSUPP),
    }
}

/// `ethtool -N rx-flow-hash`: `PORT_RSS_FIELDS` value `fields` with
/// `flow`'s fields set to `rxh`, or why the NIC cannot hash so.
///
/// # Errors
///
/// - `EOPNOTSUPP` for a flow type other than TCP or UDP over IPv4 or IPv6.
/// - `EINVAL` for a field other than the addresses and ports (the L3
///   protocol, a VLAN tag, the destination MAC, the IPv6 flow label,
///   discarding).
pub(crate) fn set_fields(
    fields: u32,
    flow: FlowType,
    rxh: RxhFields,
    extack: &mut ExtAck<'_>,
) -> Result<u32> {
    let Some(shift) = fields_shift(flow) else {
        extack.set_msg(c"the NIC hashes fields of tcp4, udp4, tcp6 and udp6 only");
        return Err(EOPNOTSUPP);
    };
    let Some(bits) = bits_of(rxh) else {
        extack.set_msg(c"the NIC hashes over addresses and ports only (s, d, f, n)");
        return Err(EINVAL);
    };
    Ok((fields & !(rss::RSS_FIELDS_ALL << shift)) | (bits << shift))
}

#[kernel::macros::kunit_tests(zeronic_rss)]
mod tests {
    use super::*;

    fn no_extack() -> ExtAck<'static> {
        // SAFETY: A null extended ACK is valid: messages are only traced.
        unsafe { ExtAck::from_raw(core::ptr::null_mut()) }
    }

    /// The default table is the core's round-robin, over every count.
    #[test]
    fn default_spread() {
        for n in 1..=regs::MAX_QP {
            let t = default_table(n);
            for (i, &e) in t.iter().enumerate() {
                assert_eq!(usize::from(e), i % n as usize);
            }
        }
        assert_eq!(default_table(0), [0u8; TABLE_SIZE]);
        let mut cfg = RssConfig::new();
        assert_eq!(cfg.table(2)[1], 1);
        cfg.table = Some([1; TABLE_SIZE]);
        assert_eq!(cfg.table(4), [1; TABLE_SIZE]);
    }

    fn req<'a>(
        indir: Option<&'a [u32]>,
        key: Option<&'a [u8]>,
        hfunc: Option<RssHashFunc>,
    ) -> RssRequest<'a> {
        RssRequest { indir, key, hfunc }
    }

    /// A table becomes the user's unless it is the default; each part of a
    /// request is optional; only Toeplitz is accepted.
    #[test]
    fn rxfh_requests() {
        let cfg = RssConfig::new();
        let mut ea = no_extack();
        let mut indir = [0u32; TABLE_SIZE];
        let got = set_rxfh(&cfg, &req(Some(&indir[..]), None, None), 2, &mut ea).unwrap();
        assert_eq!(got.table, Some([0; TABLE_SIZE]));
        for (i, e) in indir.iter_mut().enumerate() {
            *e = (i % 2) as u32;
        }
        let got = set_rxfh(&got, &req(Some(&indir[..]), None, None), 2, &mut ea).unwrap();
        assert!(got.table.is_none());
        indir[5] = 2;
        assert_eq!(
            set_rxfh(&cfg, &req(Some(&indir[..]), None, None), 2, &mut ea).err(),
            Some(EINVAL)
        );
        let key = [7u8; KEY_SIZE];
        let got = set_rxfh(&cfg, &req(None, Some(&key[..]), None), 2, &mut ea).unwrap();
        assert_eq!(got.key, key);
        assert_eq!(
            set_rxfh(&cfg, &req(None, Some(&key[1..]), None), 2, &mut ea).err(),
            Some(EINVAL)
        );
        let t = Some(RssHashFunc::Toeplitz);
        assert!(set_rxfh(&cfg, &req(None, None, t), 2, &mut ea).is_ok());
        let x = Some(RssHashFunc::Xor);
        assert_eq!(
            set_rxfh(&cfg, &req(None, None, x), 2, &mut ea).err(),
            Some(EOPNOTSUPP)
        );
    }

    /// The reset value of `PORT_RSS_FIELDS` reads as 2.3's fixed fields;
    /// every subset of s, d, f, n round-trips through the register, and
    /// nothing else is accepted.
    #[test]
    fn field_mapping() {
        let flows = [
            FlowType::Tcp4,
            FlowType::Udp4,
            FlowType::Tcp6,
            FlowType::Udp6,
        ];
        for flow in flows {
            assert_eq!(
                get_fields(regs::RSS_FIELDS_DEFAULT, flow),
                fixed_fields(flow)
            );
        }
        let mut ea = no_extack();
        for flow in flows {
            for bits in 0..=rss::RSS_FIELDS_ALL {
                let rxh = rxh_of(bits);
                let v = set_fields(regs::RSS_FIELDS_DEFAULT, flow, rxh, &mut ea).unwrap();
                assert_eq!(get_fields(v, flow), Ok(rxh));
                for other in flows.iter().filter(|f| **f != flow) {
                    assert_eq!(
                        get_fields(v, *other),
                        get_fields(regs::RSS_FIELDS_DEFAULT, *other)
                    );
                }
            }
            for bad in [
                RxhFields::L3_PROTO,
                RxhFields::VLAN,
                RxhFields::L2DA,
                RxhFields::DISCARD,
            ] {
                let rxh = RXH_ADDRS.with(bad);
                assert_eq!(set_fields(0, flow, rxh, &mut ea), Err(EINVAL));
            }
        }
        let ip4 = FlowType::Other(0x10);
        assert_eq!(get_fields(0, ip4), Err(EOPNOTSUPP));
        assert_eq!(set_fields(0, ip4, RXH_ADDRS, &mut ea), Err(EOPNOTSUPP));
        assert_eq!(
            set_fields(0, FlowType::Tcp4, RXH_TUPLE, &mut ea),
            Ok(rss::RSS_FIELDS_ALL << regs::RSS_FIELDS_TCP4_SHIFT)
        );
    }

    /// A context's table takes entries below the queue count only, and
    /// only contexts 1 to `RSS_CONTEXTS - 1` have a command.
    #[test]
    fn contexts() {
        let mut ea = no_extack();
        // CAST: below TABLE_SIZE (128).
        let spread: [u32; TABLE_SIZE] = core::array::from_fn(|i| i as u32 % 2);
        let table = table_of(&spread, 2, &mut ea).expect("entries below 2");
        assert_eq!(table, default_table(2));
        assert_eq!(table_of(&spread, 1, &mut ea), Err(EINVAL));
        assert_eq!(table_of(&spread[1..], 2, &mut ea), Err(EINVAL));
        assert!(context_command(1, 0).is_err());
        assert!(context_command(1, regs::RSS_CONTEXTS).is_err());
        let cmd = context_command(1, regs::RSS_CONTEXTS - 1).expect("the last context");
        assert_eq!((cmd.port, u32::from(cmd.ctx)), (1, regs::RSS_CONTEXTS - 1));
    }
}

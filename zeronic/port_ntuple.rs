// SPDX-License-Identifier: GPL-2.0

//! The n-tuple rules of a port (`ethtool -N <dev> flow-type ...`, `delete`,
//! `ethtool -n`): hardware spec §14 ("N-tuple rules") and §16 (IPv6 rules).
//!
//! A rule of flow type tcp4, udp4, tcp6 or udp6 (IPv6 only on a NIC with
//! `CAP_STEER_V2`) matches source and destination address and port under
//! masks and sends the frame to a queue pair, through an RSS context's
//! table (`context N`, `CAP_STEER_V2`) or drops it; it is the NIC's
//! rule at the same index (`CMD_RULE_SET`, `CMD_RULE_CLEAR`), the lowest
//! index matching first. The NIC has no way to read a rule back, so the
//! port keeps what it installed ([`NtupleTable`]) and answers `ethtool -n`
//! from that. The NIC's rules live until `CMD_RULE_CLEAR` or a reset;
//! the driver resets the NIC only at probe and unbind, where the port's
//! table is new or goes with it, so nothing is ever reinstalled.
//!
//! Refused with `EINVAL`: a location past the table, a queue at or past the
//! port's receive queues, a `tos`/`tclass` match (the NIC does not compare
//! it), an address of the other family. IPv6 rules on a NIC without
//! `CAP_STEER_V2`: `EOPNOTSUPP`.

use core::net::IpAddr;
use kernel::{
    net::dev::ethtool::{
        FlowType,
        NtupleRule,
        RuleAction, //
    },
    prelude::*,
};

use crate::{
    cmdq::status_errno,
    control::Control,
    hw::{
        cmd::{
            CmdRule,
            RuleAddr6,
            RuleClear,
            IPPROTO_TCP,
            RULEF_IPV6,
            RULE_ACT_DROP,
            RULE_ACT_QUEUE,
            RULE_ACT_RSS, //
        },
        regs,
        status, //
    },
};

/// Rules per port (`NTUPLE_RULES`): locations are below it.
pub(crate) const RULES: usize = regs::NTUPLE_RULES as usize;

/// IP protocol number of UDP.
const IPPROTO_UDP: u16 = 17;

/// The rules installed on a port, by location.
pub(crate) struct NtupleTable {
    rules: [Option<NtupleRule>; RULES],
}

impl NtupleTable {
    /// No rules.
    pub(crate) const fn new() -> Self {
        Self {
            rules: [None; RULES],
        }
    }

    /// Number of rules installed.
    pub(crate) fn count(&self) -> u32 {
        // CAST: at most `RULES` (16).
        self.rules.iter().flatten().count() as u32
    }

    /// The rule at `location`.
    ///
    /// # Errors
    ///
    /// - `ENOENT` if there is none.
    pub(crate) fn get(&self, location: u32) -> Result<NtupleRule> {
        usize::try_from(location)
            .ok()
            .and_then(|l| self.rules.get(l).copied().flatten())
            .ok_or(ENOENT)
    }

    /// Writes the locations of the rules to the start of `locs` and returns
    /// how many.
    ///
    /// # Errors
    ///
    /// - `EMSGSIZE` if they do not fit.
    pub(crate) fn locations(&self, locs: &mut [u32]) -> Result<usize> {
        let mut n = 0;
        for rule in self.rules.iter().flatten() {
            *locs.get_mut(n).ok_or(EMSGSIZE)? = rule.location;
            n += 1;
        }
        Ok(n)
    }

    /// Records `rule` at its location (checked by [`rule_command`]).
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the location is past the table.
    pub(crate) fn set(&mut self, rule: NtupleRule) -> Result {
        let slot = usize::try_from(rule.location)
            .ok()
            .and_then(|l| self.rules.get_mut(l))
            .ok_or(EINVAL)?;
        *slot = Some(rule);
        Ok(())
    }

    /// Forgets the rule at `location`.
    pub(crate) fn remove(&mut self, location: u32) {
        if let Some(slot) = usize::try_from(location)
            .ok()
            .and_then(|l| self.rules.get_mut(l))
        {
            *slot = None;
        }
    }
}

/// An IPv4 address and mask of a rule as `CMD_RULE_SET` takes them
/// (numeric).
///
/// # Errors
///
/// - `EINVAL` for an IPv6 address (never: the abstraction reads a rule's
///   addresses in its flow type's family).
fn v4(a: IpAddr) -> Result<u32> {
    match a {
        IpAddr::V4(a) => Ok(u32::from(a)),
        IpAddr::V6(_) => Err(EINVAL),
    }
}

/// An IPv6 address of a rule in network byte order.
///
/// # Errors
///
/// - `EINVAL` for an IPv4 address (never, as in [`v4`]).
fn v6(a: IpAddr) -> Result<[u8; 16]> {
    match a {
        IpAddr::V6(a) => Ok(a.octets()),
        IpAddr::V4(_) => Err(EINVAL),
    }
}

/// `CMD_RULE_SET` for `rule` on port `port` with `rx_rings` receive queues,
/// on a NIC with capabilities `caps`, and the address block of an IPv6
/// rule; or why the NIC cannot install it.
///
/// # Errors
///
/// - `EINVAL` for a location at or past [`RULES`], a queue at or past
///   `rx_rings`, a `tos`/`tclass` mask, or an address of the other family.
/// - `EOPNOTSUPP` for an IPv6 rule on a NIC without `CAP_STEER_V2`, or a
///   flow type other than TCP or UDP over IPv4 or IPv6.
pub(crate) fn rule_command(
    port: u32,
    rule: &NtupleRule,
    rx_rings: u32,
    caps: u32,
) -> Result<(CmdRule, Option<RuleAddr6>)> {
    let index = u16::try_from(rule.location).map_err(|_| EINVAL)?;
    if usize::from(index) >= RULES || rule.tos_mask != 0 {
        return Err(EINVAL);
    }
    let (action, queue, rss_ctx) = match rule.action {
        RuleAction::Queue(q) if q < rx_rings => (RULE_ACT_QUEUE, u16::try_from(q)?, 0),
        RuleAction::Queue(_) => return Err(EINVAL),
        RuleAction::Drop => (RULE_ACT_DROP, 0, 0),
        // Through an RSS context's table (§16); the core allows only queue 0
        // (the abstraction does not offer adding it to the entry).
        RuleAction::Rss { context, queue } => {
            if caps & regs::CAP_STEER_V2 == 0 {
                return Err(EOPNOTSUPP);
            }
            if context >= regs::RSS_CONTEXTS || queue != 0 {
                return Err(EINVAL);
            }
            // CAST: below RSS_CONTEXTS (8).
            (RULE_ACT_RSS, 0, context as u16)
        }
    };
    let (proto, ipv6) = match rule.flow {
        FlowType::Tcp4 => (IPPROTO_TCP, false),
        FlowType::Udp4 => (IPPROTO_UDP, false),
        FlowType::Tcp6 => (IPPROTO_TCP, true),
        FlowType::Udp6 => (IPPROTO_UDP, true),
        FlowType::Other(_) => return Err(EOPNOTSUPP),
    };
    let mut cmd = CmdRule {
        port: u16::try_from(port)?,
        index,
        action,
        queue,
        rss_ctx,
        src_port: rule.sport,
        src_port_mask: rule.sport_mask,
        dst_port: rule.dport,
        dst_port_mask: rule.dport_mask,
        proto,
        ..Default::default()
    };
    if !ipv6 {
        cmd.src_ip = v4(rule.src)?;
        cmd.src_ip_mask = v4(rule.src_mask)?;
        cmd.dst_ip = v4(rule.dst)?;
        cmd.dst_ip_mask = v4(rule.dst_mask)?;
        return Ok((cmd, None));
    }
    if caps & regs::CAP_STEER_V2 == 0 {
        return Err(EOPNOTSUPP);
    }
    cmd.flags = RULEF_IPV6;
    let addr6 = RuleAddr6 {
        src_addr: v6(rule.src)?,
        src_mask: v6(rule.src_mask)?,
        dst_addr: v6(rule.dst)?,
        dst_mask: v6(rule.dst_mask)?,
    };
    Ok((cmd, Some(addr6)))
}

/// Executes `CMD_RULE_SET` `cmd`, with an IPv6 rule's address block in
/// memory the NIC reads while it executes the command.
///
/// Process context (sleeps).
///
/// # Errors
///
/// - `ENOMEM` if the address block cannot be allocated.
/// - `EIO` if the NIC did not complete the command (the block is held then)
///   or failed it; the NIC's refusals as [`status_errno`].
/// - `ENODEV` once the NIC is being unbound.
pub(crate) fn install(control: &Control, mut cmd: CmdRule, addr6: Option<RuleAddr6>) -> Result {
    control.with_bound(|dev, cmds| {
        let done = match addr6 {
            Some(a) => {
                cmds.exec_with_block(dev, &mut cmd, &a.encode(), |c, addr| c.set_addr6(addr))?
            }
            None => cmds.exec(&cmd)?,
        };
        match done.status {
            status::ST_OK => Ok(()),
            st => Err(status_errno(st)),
        }
    })
}

/// Executes `CMD_RULE_CLEAR` of rule `location` of port `port`.
///
/// Process context (sleeps).
///
/// # Errors
///
/// - `ENOENT` if the NIC has no rule there.
/// - `EINVAL` for a location past the table.
/// - `EIO` if the NIC did not complete the command; other refusals as
///   [`status_errno`].
/// - `ENODEV` once the NIC is being unbound.
pub(crate) fn clear(control: &Control, port: u32, location: u32) -> Result {
    let cmd = RuleClear {
        port: u16::try_from(port)?,
        index: u16::try_from(location).map_err(|_| EINVAL)?,
    };
    control.with_bound(|_, cmds| match cmds.exec(&cmd)?.status {
        status::ST_OK => Ok(()),
        st => Err(status_errno(st)),
    })
}

#[kernel::macros::kunit_tests(zeronic_ntuple)]
mod tests {
    use super::*;
    use core::net::{
        Ipv4Addr,
        Ipv6Addr, //
    };

    fn rule(flow: FlowType, location: u32, action: RuleAction) -> NtupleRule {
        let (any, a, b) = if flow.is_ipv6() {
            (
                IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                IpAddr::V6(Ipv6Addr::new(0xfd90, 0, 0, 0, 0, 0, 0, 2)),
                IpAddr::V6(Ipv6Addr::new(0xfd90, 0, 0, 0, 0, 0, 0, 1)),
            )
        } else {
            (
                IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            )
        };
        NtupleRule {
            location,
            flow,
            src: a,
            src_mask: if flow.is_ipv6() {
                IpAddr::V6(Ipv6Addr::from([0xff; 16]))
            } else {
                IpAddr::V4(Ipv4Addr::BROADCAST)
            },
            dst: b,
            dst_mask: any,
            sport: 0,
            sport_mask: 0,
            dport: 5201,
            dport_mask: 0xffff,
            tos: 0,
            tos_mask: 0,
            action,
        }
    }

    /// IPv4 rules carry their addresses numerically, IPv6 ones in a block;
    /// the protocol follows the flow type.
    #[test]
    fn rule_commands() {
        let caps = regs::CAP_STEER_V2;
        let r = rule(FlowType::Udp4, 3, RuleAction::Queue(1));
        let (cmd, addr6) = rule_command(1, &r, 2, caps).unwrap();
        assert!(addr6.is_none());
        assert_eq!((cmd.port, cmd.index, cmd.queue), (1, 3, 1));
        assert_eq!((cmd.action, cmd.proto, cmd.flags), (RULE_ACT_QUEUE, 17, 0));
        assert_eq!((cmd.src_ip, cmd.src_ip_mask), (0x0a00_0002, u32::MAX));
        assert_eq!((cmd.dst_ip, cmd.dst_ip_mask), (0x0a00_0001, 0));
        assert_eq!((cmd.dst_port, cmd.dst_port_mask), (5201, 0xffff));
        let r = rule(FlowType::Tcp6, 15, RuleAction::Drop);
        let (cmd, addr6) = rule_command(0, &r, 2, caps).unwrap();
        assert_eq!(
            (cmd.action, cmd.proto, cmd.flags),
            (RULE_ACT_DROP, 6, RULEF_IPV6)
        );
        let a = addr6.unwrap();
        assert_eq!(a.src_mask, [0xff; 16]);
        assert_eq!(a.dst_mask, [0; 16]);
        assert_eq!(
            (a.src_addr[0], a.src_addr[15], a.dst_addr[15]),
            (0xfd, 2, 1)
        );
    }

    /// What the NIC cannot do is refused before a command is made.
    #[test]
    fn rule_refusals() {
        let caps = regs::CAP_STEER_V2;
        let q = RuleAction::Queue(2);
        assert_eq!(
            rule_command(0, &rule(FlowType::Tcp4, 0, q), 2, caps).err(),
            Some(EINVAL)
        );
        let r = rule(FlowType::Tcp4, RULES as u32, RuleAction::Drop);
        assert_eq!(rule_command(0, &r, 2, caps).err(), Some(EINVAL));
        let mut r = rule(FlowType::Tcp4, 0, RuleAction::Drop);
        r.tos_mask = 0xff;
        assert_eq!(rule_command(0, &r, 2, caps).err(), Some(EINVAL));
        let r = rule(FlowType::Udp6, 0, RuleAction::Drop);
        assert_eq!(rule_command(0, &r, 2, 0).err(), Some(EOPNOTSUPP));
        let mut r = rule(FlowType::Tcp4, 0, RuleAction::Drop);
        r.flow = FlowType::Tcp6;
        assert_eq!(rule_command(0, &r, 2, caps).err(), Some(EINVAL));
    }

    /// The table answers get, count and list as installed.
    #[test]
    fn table() {
        let mut t = NtupleTable::new();
        assert_eq!(t.count(), 0);
        assert_eq!(t.get(0).err(), Some(ENOENT));
        t.set(rule(FlowType::Tcp4, 15, RuleAction::Queue(1)))
            .unwrap();
        t.set(rule(FlowType::Udp6, 2, RuleAction::Drop)).unwrap();
        assert_eq!(t.count(), 2);
        let mut locs = [0u32; 4];
        assert_eq!(t.locations(&mut locs), Ok(2));
        assert_eq!(&locs[..2], &[2, 15]);
        assert_eq!(t.locations(&mut locs[..1]).err(), Some(EMSGSIZE));
        assert_eq!(t.get(15).unwrap().flow, FlowType::Tcp4);
        t.remove(15);
        assert_eq!(t.get(15).err(), Some(ENOENT));
        assert_eq!(
            t.set(rule(FlowType::Tcp4, 16, RuleAction::Drop)).err(),
            Some(EINVAL)
        );
    }
}

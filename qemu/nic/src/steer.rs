//! Receive steering (docs/hardware.md §14): the RSS hash of a frame, the
//! n-tuple rules of a port, and the queue pair a frame goes to. Pure
//! functions over a frame's header bytes and the port's latched
//! configuration; nothing here can fail on what a guest wrote.

use zeronic_hw::cmd::*;
use zeronic_hw::desc::{RSS_TYPE_IPV4, RSS_TYPE_IPV6, RSS_TYPE_NONE, RSS_TYPE_TCP4, RSS_TYPE_TCP6};
use zeronic_hw::net::{ipv4_mapped, v4_of_mapped, ETH_P_IPV6, IPV6_HLEN};
use zeronic_hw::regs::{MAX_QP, NTUPLE_RULES, RSS_TABLE_SIZE};
use zeronic_hw::rss::{hash_ipv6, hash_tcp4, hash_tcp6, toeplitz, RSS_KEY_DEFAULT, RSS_KEY_LEN};
use zeronic_hw::status::*;

use crate::frame::ETH_HLEN;

/// IP protocol number of UDP (ports are matched for TCP and UDP only).
const IPPROTO_UDP: u8 = 17;

/// What steering needs of an untagged IPv4 or IPv6 frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L3 {
    /// An IPv6 frame (version 2.3, §15).
    pub v6: bool,
    /// Source address (IPv4-mapped for IPv4).
    pub src: [u8; 16],
    /// Destination address (IPv4-mapped for IPv4).
    pub dst: [u8; 16],
    /// IPv4 protocol, or the IPv6 fixed header's next header.
    pub proto: u8,
    /// Source and destination port of an unfragmented TCP or UDP packet
    /// whose L4 header starts in `head`.
    pub ports: Option<(u16, u16)>,
    /// A fragment (MF set or a nonzero offset).
    pub frag: bool,
}

/// The fields of an untagged IPv6 frame's fixed header (`ports` only for
/// next header TCP: an extension header hides them).
fn parse_l3_v6(head: &[u8]) -> Option<L3> {
    let ip = head.get(ETH_HLEN..ETH_HLEN + IPV6_HLEN)?;
    if ip[0] >> 4 != 6 {
        return None;
    }
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&ip[8..24]);
    dst.copy_from_slice(&ip[24..40]);
    let proto = ip[6];
    let ports = match head.get(ETH_HLEN + IPV6_HLEN..ETH_HLEN + IPV6_HLEN + 4) {
        Some(l4) if proto == IPPROTO_TCP as u8 => Some((
            u16::from_be_bytes([l4[0], l4[1]]),
            u16::from_be_bytes([l4[2], l4[3]]),
        )),
        _ => None,
    };
    Some(L3 {
        v6: true,
        src,
        dst,
        proto,
        ports,
        frag: false,
    })
}

/// The IP fields of an untagged IPv4 or IPv6 frame whose first bytes are
/// `head`; None for anything else (too short for the IP header included).
pub fn parse_l3(head: &[u8]) -> Option<L3> {
    if head.get(12..14)? == ETH_P_IPV6.to_be_bytes() {
        return parse_l3_v6(head);
    }
    if head.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ip = head.get(ETH_HLEN..)?;
    let first = *ip.first()?;
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || ihl < 20 || ip.len() < 20 {
        return None;
    }
    let a = |o: usize| -> Option<[u8; 4]> { ip.get(o..o + 4)?.try_into().ok() };
    let (src, dst) = (a(12)?, a(16)?);
    let frag = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]) & 0x3fff != 0;
    let proto = *ip.get(9)?;
    let ports = match ip.get(ihl..ihl + 4) {
        Some(l4) if !frag && (proto == IPPROTO_TCP as u8 || proto == IPPROTO_UDP) => Some((
            u16::from_be_bytes([l4[0], l4[1]]),
            u16::from_be_bytes([l4[2], l4[3]]),
        )),
        _ => None,
    };
    Some(L3 {
        v6: false,
        src: ipv4_mapped(src),
        dst: ipv4_mapped(dst),
        proto,
        ports,
        frag,
    })
}

/// The RSS hash and its `RSS_TYPE_*` of a frame (`l3` = its parse): the
/// 4-tuple of unfragmented TCP, the addresses of other IPv4; for IPv6 the
/// 4-tuple of TCP (no extension header), else the addresses; none else.
pub fn rss_hash(key: &[u8; RSS_KEY_LEN], l3: Option<&L3>) -> (u32, u16) {
    let Some(l) = l3 else {
        return (0, RSS_TYPE_NONE);
    };
    let tcp_ports = l.ports.filter(|_| l.proto == IPPROTO_TCP as u8);
    match (l.v6, tcp_ports) {
        (true, Some((sp, dp))) => (hash_tcp6(key, l.src, l.dst, sp, dp), RSS_TYPE_TCP6),
        (true, None) => (hash_ipv6(key, l.src, l.dst), RSS_TYPE_IPV6),
        (false, Some((sp, dp))) => {
            let (s, d) = (v4_of_mapped(l.src), v4_of_mapped(l.dst));
            (hash_tcp4(key, s, d, sp, dp), RSS_TYPE_TCP4)
        }
        (false, None) => {
            let mut input = [0u8; 8];
            input[..4].copy_from_slice(&v4_of_mapped(l.src));
            input[4..].copy_from_slice(&v4_of_mapped(l.dst));
            (toeplitz(key, &input), RSS_TYPE_IPV4)
        }
    }
}

/// One n-tuple rule as `CMD_RULE_SET` wrote it (checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    src: (u32, u32),
    dst: (u32, u32),
    sport: (u16, u16),
    dport: (u16, u16),
    proto: u8,
    /// Some(queue pair) for `RULE_ACT_QUEUE`, None for `RULE_ACT_DROP`.
    pub queue: Option<u32>,
}

impl Rule {
    /// True if the rule matches the frame `l3` (None: not untagged IP).
    /// Rules are IPv4-only: an IPv6 frame matches none (§15).
    pub fn matches(&self, l3: Option<&L3>) -> bool {
        let Some(l) = l3.filter(|l| !l.v6) else {
            return false;
        };
        let m32 =
            |(v, m): (u32, u32), x: [u8; 16]| u32::from_be_bytes(v4_of_mapped(x)) & m == v & m;
        let ports_ok = if self.sport.1 == 0 && self.dport.1 == 0 {
            true
        } else {
            match l.ports {
                Some((sp, dp)) => {
                    sp & self.sport.1 == self.sport.0 & self.sport.1
                        && dp & self.dport.1 == self.dport.0 & self.dport.1
                }
                None => false,
            }
        };
        m32(self.src, l.src)
            && m32(self.dst, l.dst)
            && (self.proto == 0 || self.proto == l.proto)
            && ports_ok
    }
}

/// A port's receive-steering state: RSS configuration latched at the last
/// scan and the n-tuple rules.
#[derive(Clone, Debug)]
pub struct Steering {
    /// Active queue pairs (1..=MAX_QP), `PORT_NUM_QP` as last latched.
    pub nqp: u32,
    /// `PORT_RSS_CTRL` as last latched.
    pub ctrl: u32,
    /// RSS key.
    pub key: [u8; RSS_KEY_LEN],
    /// Indirection table.
    pub table: [u8; RSS_TABLE_SIZE as usize],
    /// N-tuple rules by index.
    pub rules: [Option<Rule>; NTUPLE_RULES as usize],
}

impl Default for Steering {
    fn default() -> Self {
        Self {
            nqp: 1,
            ctrl: 0,
            key: RSS_KEY_DEFAULT,
            table: [0; RSS_TABLE_SIZE as usize],
            rules: [None; NTUPLE_RULES as usize],
        }
    }
}

/// Where steering sends a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Queue pair (not yet checked against the active count).
    Queue(u32),
    /// Dropped by a rule.
    Drop,
}

impl Steering {
    /// True if any rule is written (frames then need parsing).
    pub fn has_rules(&self) -> bool {
        self.rules.iter().any(Option::is_some)
    }

    /// Steps 2 to 4 of §14's receive steering for a frame not of a flow.
    pub fn steer(&self, l3: Option<&L3>) -> Verdict {
        if let Some(r) = self.rules.iter().flatten().find(|r| r.matches(l3)) {
            return r.queue.map_or(Verdict::Drop, Verdict::Queue);
        }
        if self.ctrl & zeronic_hw::regs::RSS_CTRL_ENABLE != 0 {
            let (h, ty) = rss_hash(&self.key, l3);
            if ty != RSS_TYPE_NONE {
                // CAST: the mask keeps the index below RSS_TABLE_SIZE.
                let i = (h & (RSS_TABLE_SIZE - 1)) as usize;
                return Verdict::Queue(u32::from(self.table[i]));
            }
        }
        Verdict::Queue(0)
    }

    /// CMD_RULE_SET on this port; returns the rule's index.
    pub fn set_rule(&mut self, c: &CmdRule) -> Result<u64, u16> {
        if c.flags != 0 || c.rss_ctx != 0 || c.rsvd1 != 0 || c.rsvd2 != 0 || c.rsvd3 != 0 {
            return Err(ST_BAD_DESC);
        }
        let queue = match c.action {
            RULE_ACT_QUEUE if u32::from(c.queue) < MAX_QP => Some(u32::from(c.queue)),
            RULE_ACT_DROP => None,
            _ => return Err(ST_BAD_DESC),
        };
        let proto = u8::try_from(c.proto).map_err(|_| ST_BAD_DESC)?;
        let idx = match c.index {
            RULE_INDEX_ANY => self
                .rules
                .iter()
                .position(Option::is_none)
                .ok_or(ST_NO_SPACE)?,
            i if u32::from(i) < NTUPLE_RULES => usize::from(i),
            _ => return Err(ST_BAD_DESC),
        };
        self.rules[idx] = Some(Rule {
            src: (c.src_ip, c.src_ip_mask),
            dst: (c.dst_ip, c.dst_ip_mask),
            sport: (c.src_port, c.src_port_mask),
            dport: (c.dst_port, c.dst_port_mask),
            proto,
            queue,
        });
        Ok(idx as u64)
    }

    /// CMD_RULE_CLEAR on this port.
    pub fn clear_rule(&mut self, index: u16) -> Result<(), u16> {
        let slot = self.rules.get_mut(usize::from(index)).ok_or(ST_BAD_DESC)?;
        slot.take().map(|_| ()).ok_or(ST_NOT_FOUND)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(proto: u8, frag: u16, ports: (u16, u16)) -> Vec<u8> {
        let mut f = vec![0u8; 54];
        f[12..14].copy_from_slice(&[0x08, 0]);
        f[14] = 0x45;
        f[20..22].copy_from_slice(&frag.to_be_bytes());
        f[23] = proto;
        f[26..30].copy_from_slice(&[66, 9, 149, 187]);
        f[30..34].copy_from_slice(&[161, 142, 100, 80]);
        f[34..36].copy_from_slice(&ports.0.to_be_bytes());
        f[36..38].copy_from_slice(&ports.1.to_be_bytes());
        f
    }

    #[test]
    fn hash_types_follow_the_spec() {
        let k = &RSS_KEY_DEFAULT;
        let tcp = parse_l3(&frame(6, 0, (2794, 1766)));
        assert_eq!(rss_hash(k, tcp.as_ref()), (0x51cc_c178, RSS_TYPE_TCP4));
        for (proto, frag) in [(17, 0), (1, 0), (6, 0x2000), (6, 5)] {
            let l = parse_l3(&frame(proto, frag, (2794, 1766)));
            assert_eq!(rss_hash(k, l.as_ref()), (0x323e_8fc2, RSS_TYPE_IPV4));
        }
        let mut tagged = frame(6, 0, (1, 2));
        tagged[12..14].copy_from_slice(&[0x81, 0]);
        assert_eq!(parse_l3(&tagged), None);
        assert_eq!(rss_hash(k, None), (0, RSS_TYPE_NONE));
        assert_eq!(parse_l3(&frame(6, 0, (1, 2))[..30]), None);
    }

    #[test]
    fn rules_need_ports_only_when_masked() {
        let mut s = Steering::default();
        let c = CmdRule {
            action: RULE_ACT_QUEUE,
            queue: 3,
            index: RULE_INDEX_ANY,
            dst_port: 1766,
            dst_port_mask: 0xffff,
            ..Default::default()
        };
        assert_eq!(s.set_rule(&c), Ok(0));
        let tcp = parse_l3(&frame(6, 0, (2794, 1766)));
        let frag = parse_l3(&frame(6, 0x2000, (2794, 1766)));
        assert_eq!(s.steer(tcp.as_ref()), Verdict::Queue(3));
        assert_eq!(s.steer(frag.as_ref()), Verdict::Queue(0));
        assert_eq!(s.clear_rule(0), Ok(()));
        assert_eq!(s.clear_rule(0), Err(ST_NOT_FOUND));
        assert_eq!(s.clear_rule(NTUPLE_RULES as u16), Err(ST_BAD_DESC));
    }
}

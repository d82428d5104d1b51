//! Receive steering (docs/hardware.md §14, §16): the RSS hash of a frame
//! over the fields its flow type selects, the n-tuple rules of a port
//! (IPv4 and IPv6), its RSS contexts, and the queue pair a frame goes to.
//! Pure functions over a frame's header bytes and the port's latched
//! configuration; nothing here can fail on what a guest wrote.

use zeronic_hw::cmd::*;
use zeronic_hw::desc::*;
use zeronic_hw::net::{ipv4_mapped, ETH_P_IPV6, IPV6_HLEN};
use zeronic_hw::regs::*;
use zeronic_hw::rss::*;
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
    /// whose L4 header starts in `head` (IPv6: next header TCP or UDP and a
    /// payload length covering them).
    pub ports: Option<(u16, u16)>,
    /// A fragment (MF set or a nonzero offset).
    pub frag: bool,
}

/// The fields of an untagged IPv6 frame's fixed header (`ports` only for
/// next header TCP or UDP: an extension header hides them).
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
    let plen = u16::from_be_bytes([ip[4], ip[5]]);
    let ports = match head.get(ETH_HLEN + IPV6_HLEN..ETH_HLEN + IPV6_HLEN + 4) {
        Some(l4) if plen >= 4 && (proto == IPPROTO_TCP as u8 || proto == IPPROTO_UDP) => Some((
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

/// The ports, `RSS_FIELDS_*_SHIFT` and L4 `RSS_TYPE_*` of a frame of one
/// of the flow types of `PORT_RSS_FIELDS` (§16); None for other frames.
fn flow_type(l: &L3) -> Option<((u16, u16), u32, u16)> {
    let ports = l.ports?;
    match (l.v6, l.proto) {
        (false, p) if p == IPPROTO_TCP as u8 => Some((ports, RSS_FIELDS_TCP4_SHIFT, RSS_TYPE_TCP4)),
        (false, IPPROTO_UDP) => Some((ports, RSS_FIELDS_UDP4_SHIFT, RSS_TYPE_UDP4)),
        (true, p) if p == IPPROTO_TCP as u8 => Some((ports, RSS_FIELDS_TCP6_SHIFT, RSS_TYPE_TCP6)),
        (true, IPPROTO_UDP) => Some((ports, RSS_FIELDS_UDP6_SHIFT, RSS_TYPE_UDP6)),
        _ => None,
    }
}

/// The RSS hash and its `RSS_TYPE_*` of a frame (`l3` = its parse) under
/// `fields` (`PORT_RSS_FIELDS`): a frame of a flow type hashes the fields
/// selected for it (an L4 type with a port, an L3 type with addresses
/// only, none with nothing); other IPv4 and IPv6 frames hash their
/// addresses; anything else has no hash.
pub fn rss_hash(key: &[u8; RSS_KEY_LEN], fields: u32, l3: Option<&L3>) -> (u32, u16) {
    let Some(l) = l3 else {
        return (0, RSS_TYPE_NONE);
    };
    // IPv4 addresses are the last four bytes of their mapped form.
    let (sa, da, l3_type) = match l.v6 {
        true => (&l.src[..], &l.dst[..], RSS_TYPE_IPV6),
        false => (&l.src[12..], &l.dst[12..], RSS_TYPE_IPV4),
    };
    let addrs = RSS_FIELD_SA | RSS_FIELD_DA;
    let Some(((sp, dp), shift, l4_type)) = flow_type(l) else {
        return (hash_fields(key, addrs, sa, da, 0, 0), l3_type);
    };
    let sel = (fields >> shift) & RSS_FIELDS_ALL;
    let ty = match sel {
        0 => return (0, RSS_TYPE_NONE),
        s if s & !addrs != 0 => l4_type,
        _ => l3_type,
    };
    (hash_fields(key, sel, sa, da, sp, dp), ty)
}

/// What a matching rule does with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `RULE_ACT_QUEUE`: to this queue pair.
    Queue(u32),
    /// `RULE_ACT_DROP`.
    Drop,
    /// `RULE_ACT_RSS`: through RSS context `ctx`'s table, plus `add`.
    Rss {
        /// RSS context (< `RSS_CONTEXTS`).
        ctx: usize,
        /// Added to the table's entry.
        add: u32,
    },
}

/// An address to match and its mask, both as 16 bytes (IPv4 mapped).
type Masked = ([u8; 16], [u8; 16]);

/// An IPv4 address and mask of a `CmdRule` as a [`Masked`] pair that
/// compares with an IPv4 frame's mapped address.
fn masked_v4(addr: u32, mask: u32) -> Masked {
    let mut m = [0u8; 16];
    m[12..].copy_from_slice(&mask.to_be_bytes());
    (ipv4_mapped(addr.to_be_bytes()), m)
}

/// True if `x` equals the address of `a` under its mask.
fn masked_eq(a: &Masked, x: &[u8; 16]) -> bool {
    a.0.iter()
        .zip(&a.1)
        .zip(x)
        .all(|((v, m), x)| v & m == x & m)
}

/// One n-tuple rule as `CMD_RULE_SET` wrote it (checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// An IPv6 rule (`RULEF_IPV6`): it matches IPv6 frames only, an IPv4
    /// rule IPv4 frames only.
    v6: bool,
    src: Masked,
    dst: Masked,
    sport: (u16, u16),
    dport: (u16, u16),
    proto: u8,
    /// What it does with a matching frame.
    pub action: Action,
}

impl Rule {
    /// True if the rule matches the frame `l3` (None: not untagged IP).
    pub fn matches(&self, l3: Option<&L3>) -> bool {
        let Some(l) = l3.filter(|l| l.v6 == self.v6) else {
            return false;
        };
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
        masked_eq(&self.src, &l.src)
            && masked_eq(&self.dst, &l.dst)
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
    /// `PORT_RSS_FIELDS` as last latched.
    pub fields: u32,
    /// RSS key.
    pub key: [u8; RSS_KEY_LEN],
    /// Indirection tables by RSS context: 0 is `PORT_RSS_TABLE` as last
    /// latched, the others as `CMD_RSS_CTX_SET` wrote them (§16).
    pub tables: [[u8; RSS_TABLE_SIZE as usize]; RSS_CONTEXTS as usize],
    /// N-tuple rules by index.
    pub rules: [Option<Rule>; NTUPLE_RULES as usize],
}

impl Default for Steering {
    fn default() -> Self {
        Self {
            nqp: 1,
            ctrl: 0,
            fields: RSS_FIELDS_DEFAULT,
            key: RSS_KEY_DEFAULT,
            tables: [[0; RSS_TABLE_SIZE as usize]; RSS_CONTEXTS as usize],
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

    /// The frame's RSS hash and type under the port's key and fields.
    pub fn hash(&self, l3: Option<&L3>) -> (u32, u16) {
        rss_hash(&self.key, self.fields, l3)
    }

    /// Entry `hash & (RSS_TABLE_SIZE - 1)` of RSS context `ctx`'s table.
    fn entry(&self, ctx: usize, hash: u32) -> u32 {
        // CAST: the mask keeps the index below RSS_TABLE_SIZE.
        let i = (hash & (RSS_TABLE_SIZE - 1)) as usize;
        let e = self.tables.get(ctx).and_then(|t| t.get(i));
        e.map_or(0, |&q| u32::from(q))
    }

    /// Steps 2 to 4 of §14's receive steering for a frame not of a flow.
    pub fn steer(&self, l3: Option<&L3>) -> Verdict {
        if let Some(r) = self.rules.iter().flatten().find(|r| r.matches(l3)) {
            return match r.action {
                Action::Queue(q) => Verdict::Queue(q),
                Action::Drop => Verdict::Drop,
                // A frame without a hash has hash 0: entry 0 (§16).
                Action::Rss { ctx, add } => Verdict::Queue(self.entry(ctx, self.hash(l3).0) + add),
            };
        }
        if self.ctrl & RSS_CTRL_ENABLE != 0 {
            let (h, ty) = self.hash(l3);
            if ty != RSS_TYPE_NONE {
                return Verdict::Queue(self.entry(0, h));
            }
        }
        Verdict::Queue(0)
    }

    /// CMD_RULE_SET on this port; returns the rule's index. `addr6` reads
    /// the `RuleAddr6` block at the given address (DMA), only once the
    /// command's own fields were checked. Nothing changes on an error.
    pub fn set_rule(
        &mut self,
        c: &CmdRule,
        addr6: impl FnOnce(u64) -> Result<RuleAddr6, u16>,
    ) -> Result<u64, u16> {
        let v6 = c.flags & RULEF_IPV6 != 0;
        if c.flags & !RULEF_IPV6 != 0 || c.rsvd1 != 0 || c.rsvd2 != 0 || c.rsvd3 != 0 {
            return Err(ST_BAD_DESC);
        }
        if v6 && (c.dst_ip != 0 || c.dst_ip_mask != 0) {
            return Err(ST_BAD_DESC);
        }
        let queue = u32::from(c.queue);
        let ctx = usize::from(c.rss_ctx);
        let action = match c.action {
            RULE_ACT_QUEUE if queue < MAX_QP && ctx == 0 => Action::Queue(queue),
            RULE_ACT_DROP if ctx == 0 => Action::Drop,
            RULE_ACT_RSS if queue < MAX_QP && ctx < RSS_CONTEXTS as usize => {
                Action::Rss { ctx, add: queue }
            }
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
        let (src, dst) = if v6 {
            let a = addr6(c.addr6())?;
            ((a.src_addr, a.src_mask), (a.dst_addr, a.dst_mask))
        } else {
            (
                masked_v4(c.src_ip, c.src_ip_mask),
                masked_v4(c.dst_ip, c.dst_ip_mask),
            )
        };
        self.rules[idx] = Some(Rule {
            v6,
            src,
            dst,
            sport: (c.src_port, c.src_port_mask),
            dport: (c.dst_port, c.dst_port_mask),
            proto,
            action,
        });
        Ok(idx as u64)
    }

    /// CMD_RSS_CTX_SET on this port: `table` reads the new table at the
    /// given address (DMA), only once the command's own fields were
    /// checked; it replaces the context's whole, between two frames.
    pub fn set_context(
        &mut self,
        c: &CmdRssCtx,
        table: impl FnOnce(u64) -> Result<[u8; RSS_TABLE_SIZE as usize], u16>,
    ) -> Result<u64, u16> {
        let reserved = [c.rsvd1, c.rsvd2, c.rsvd3, c.rsvd4, c.rsvd5];
        if c.flags != 0 || c.rsvd0 != 0 || reserved.iter().any(|&r| r != 0) {
            return Err(ST_BAD_DESC);
        }
        let ctx = usize::from(c.ctx);
        if ctx == 0 || ctx >= self.tables.len() {
            return Err(ST_BAD_DESC);
        }
        self.tables[ctx] = table(c.table)?;
        Ok(0)
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
        assert_eq!(
            rss_hash(k, RSS_FIELDS_DEFAULT, tcp.as_ref()),
            (0x51cc_c178, RSS_TYPE_TCP4)
        );
        for (proto, frag) in [(17, 0), (1, 0), (6, 0x2000), (6, 5)] {
            let l = parse_l3(&frame(proto, frag, (2794, 1766)));
            assert_eq!(
                rss_hash(k, RSS_FIELDS_DEFAULT, l.as_ref()),
                (0x323e_8fc2, RSS_TYPE_IPV4)
            );
        }
        let mut tagged = frame(6, 0, (1, 2));
        tagged[12..14].copy_from_slice(&[0x81, 0]);
        assert_eq!(parse_l3(&tagged), None);
        assert_eq!(rss_hash(k, RSS_FIELDS_DEFAULT, None), (0, RSS_TYPE_NONE));
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
        assert_eq!(s.set_rule(&c, |_| Err(ST_DMA)), Ok(0));
        let tcp = parse_l3(&frame(6, 0, (2794, 1766)));
        let frag = parse_l3(&frame(6, 0x2000, (2794, 1766)));
        assert_eq!(s.steer(tcp.as_ref()), Verdict::Queue(3));
        assert_eq!(s.steer(frag.as_ref()), Verdict::Queue(0));
        assert_eq!(s.clear_rule(0), Ok(()));
        assert_eq!(s.clear_rule(0), Err(ST_NOT_FOUND));
        assert_eq!(s.clear_rule(NTUPLE_RULES as u16), Err(ST_BAD_DESC));
    }
}

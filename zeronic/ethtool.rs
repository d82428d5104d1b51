// SPDX-License-Identifier: GPL-2.0

//! ethtool on a port: what each operation means on the NIC.
//!
//! The port's `NetDeviceOps` (`port.rs`) answers ethtool through the
//! functions here, which hold the mapping and its checks:
//!
//! - channels (`ethtool -l`/`-L`): one combined channel per active queue
//!   pair (hardware spec §14: its TX, RX and header queues and its NAPI),
//!   from 1 to the NIC's `REG_MAX_QP` (as many as its MSI-X vectors allow),
//!   and one other (`VEC_ASYNC`: commands and events, shared by the ports).
//!   Queue pair 0 has an RX and a TX vector, the others one vector each.
//! - rings (`ethtool -g`/`-G`): entries of the RX and TX rings, a power of two
//!   up to [`max_slots`] for the MTU; `tcp-data-split` says whether flows may
//!   be attached to the port; `hds-thresh` is 0, the only value the NIC has
//!   (it places every payload byte of a flow, whatever the packet's size).
//! - coalescing (`ethtool -c`/`-C`): `rx-usecs`/`rx-frames` and
//!   `tx-usecs`/`tx-frames` are `VEC_ITR_USECS`/`VEC_ITR_ENTRIES` of the
//!   port's RX and TX vectors (hardware spec §7); `rx-cqe-frames` bounds the
//!   packets one header-queue entry covers (`PORT_COALESCE_BYTES`, §9).
//! - link settings (`ethtool zn0`): an emulated wire, full duplex, no
//!   autonegotiation, no fixed speed.
//! - RSS (`ethtool -x`/`-X`, `rx-flow-hash`) is `port_rss.rs`'s; its
//!   configuration is part of [`PortConfig`].
//!
//! Everything runs under RTNL in process context; the configuration lives in
//! [`PortConfig`] (the port's mutex) and is applied to the NIC whenever the
//! port opens.

use kernel::{
    net::{
        dev::ethtool::{
            ChannelCounts,
            Channels,
            Coalesce,
            CoalesceParams,
            Connector,
            Duplex,
            LinkSettings,
            RingParamSupport, //
        },
        dev::Features,
        netlink::ExtAck,
    },
    prelude::*,
};

use crate::{
    hw::regs,
    port_rss::RssConfig,
    queues::{
        max_slots,
        MIN_SLOTS, //
    },
};

/// Interrupt moderation of one vector, as its registers hold it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Itr {
    /// `VEC_ITR_USECS`.
    pub(crate) usecs: u32,
    /// `VEC_ITR_ENTRIES`.
    pub(crate) entries: u32,
}

/// What ethtool configured on a port; applied to the NIC when it opens.
#[derive(Clone, Copy)]
pub(crate) struct PortConfig {
    /// RX ring entries asked for (`ethtool -G rx`); `None`: sized for the MTU.
    pub(crate) rx_slots: Option<u32>,
    /// TX ring entries likewise.
    pub(crate) tx_slots: Option<u32>,
    /// Moderation of the RX vector.
    pub(crate) rx_itr: Itr,
    /// Moderation of the TX vector.
    pub(crate) tx_itr: Itr,
    /// `rx-cqe-frames` asked for; `None`: the NIC's default limit.
    pub(crate) cqe_frames: Option<u32>,
    /// Combined channels asked for (`ethtool -L combined`); `None`: one per
    /// CPU, at most what the NIC serves ([`default_channels`]).
    pub(crate) combined: Option<u32>,
    /// RSS key, indirection table and hash fields (`ethtool -X`, `-N
    /// rx-flow-hash`).
    pub(crate) rss: RssConfig,
}

impl PortConfig {
    /// The configuration of a port nobody has configured: the NIC's defaults
    /// and the driver's TX moderation.
    pub(crate) const fn new() -> Self {
        Self {
            rx_slots: None,
            tx_slots: None,
            // An interrupt per RX entry: latency first (the stack's GRO and
            // NAPI batch what arrives together anyway).
            rx_itr: Itr {
                usecs: 0,
                entries: 1,
            },
            // TX completions only free ring slots, so they can wait (an
            // interrupt costs far more than a few microseconds here).
            tx_itr: Itr {
                usecs: 64,
                entries: 32,
            },
            cqe_frames: None,
            combined: None,
            rss: RssConfig::new(),
        }
    }

    /// Queue pairs to bring up on a NIC serving `max_qp` per port.
    pub(crate) fn queue_pairs(&self, max_qp: u32) -> u32 {
        self.combined
            .unwrap_or_else(|| default_channels(max_qp))
            .clamp(1, max_qp.max(1))
    }
}

// ---- Channels ---------------------------------------------------------------

/// Combined channels of a port nobody configured: one per CPU (more queues
/// than CPUs only add interrupts), at most `max_qp`.
pub(crate) fn default_channels(max_qp: u32) -> u32 {
    kernel::cpu::nr_cpu_ids().clamp(1, max_qp.max(1))
}

/// `ethtool -l`: `active` combined channels of at most `max_qp`, and the
/// shared async vector.
pub(crate) fn channels(active: u32, max_qp: u32) -> Channels {
    Channels {
        max: ChannelCounts {
            rx: 0,
            tx: 0,
            other: 1,
            combined: max_qp,
        },
        current: ChannelCounts {
            rx: 0,
            tx: 0,
            other: 1,
            combined: active,
        },
    }
}

/// `ethtool -L`: the combined channels asked for. The core has checked the
/// counts against the maxima and that some channel receives and some
/// transmits, so only `other` (the async vector, which cannot be turned
/// off) and separate RX or TX channels, which the NIC does not have, are
/// left to refuse.
///
/// # Errors
///
/// - `EINVAL` for `other` other than 1, or separate RX or TX channels.
pub(crate) fn set_channels(counts: &ChannelCounts) -> Result<u32> {
    if counts.other != 1 || counts.rx != 0 || counts.tx != 0 || counts.combined == 0 {
        return Err(EINVAL);
    }
    Ok(counts.combined)
}

// ---- Features ---------------------------------------------------------------

/// `NETIF_F_NTUPLE` (`ethtool -K <dev> ntuple-filters`): n-tuple rules may be
/// inserted while it is on. `Features` does not name it, so it is made from
/// its bit.
pub(crate) const NTUPLE: Features =
    Features::from_bits(1u64 << kernel::bindings::NETIF_F_NTUPLE_BIT);

// ---- Rings ------------------------------------------------------------------

/// Ring parameters `ethtool -G` may set besides the sizes.
pub(crate) const RING_PARAMS: RingParamSupport =
    RingParamSupport::TCP_DATA_SPLIT.with(RingParamSupport::HDS_THRESH);

/// Checks a ring size asked for (the core checked it against
/// [`max_slots`]) and rounds it up to a power of two, as the NIC's rings are.
///
/// # Errors
///
/// - `EINVAL` if `asked` is below `MIN_SLOTS`.
pub(crate) fn ring_size(asked: u32, extack: &mut ExtAck<'_>) -> Result<u32> {
    if asked < MIN_SLOTS {
        extack.set_msg(c"rings have at least 16 entries");
        return Err(EINVAL);
    }
    // At most `max_slots()`, a power of two: the result does not exceed it.
    Ok(asked.next_power_of_two())
}

/// The largest ring size, for the report (`rx_max`, `tx_max`).
pub(crate) fn ring_max(mtu: u32) -> u32 {
    max_slots(mtu)
}

// ---- Coalescing -------------------------------------------------------------

/// Coalescing parameters the port supports.
pub(crate) const COALESCE_PARAMS: CoalesceParams = CoalesceParams::RX_USECS
    .with(CoalesceParams::RX_MAX_FRAMES)
    .with(CoalesceParams::TX_USECS)
    .with(CoalesceParams::TX_MAX_FRAMES)
    .with(CoalesceParams::RX_CQE_FRAMES);

/// Longest interrupt delay accepted, in microseconds.
const ITR_USECS_MAX: u32 = 1_000_000;

/// `VEC_ITR_ENTRIES` for "no entry count": no ring holds this many entries,
/// so only the delay raises the interrupt (`*-frames 0`).
const ITR_NO_COUNT: u32 = u32::MAX;

/// A direction's words in error messages (they must be `'static`).
struct Words {
    usecs_big: &'static CStr,
    frames_big: &'static CStr,
    never: &'static CStr,
    at_once: &'static CStr,
}

const RX_WORDS: Words = Words {
    usecs_big: c"rx-usecs above 1000000",
    frames_big: c"rx-frames above 4096, the largest ring",
    never: c"rx-usecs 0 and rx-frames 0 would never interrupt",
    at_once: c"with rx-usecs 0 the NIC interrupts for every entry: rx-frames must be 1",
};

const TX_WORDS: Words = Words {
    usecs_big: c"tx-usecs above 1000000",
    frames_big: c"tx-frames above 4096, the largest ring",
    never: c"tx-usecs 0 and tx-frames 0 would never interrupt",
    at_once: c"with tx-usecs 0 the NIC interrupts for every entry: tx-frames must be 1",
};

/// The `*-frames` a vector's registers stand for.
fn itr_frames(itr: Itr) -> u32 {
    if itr.entries == ITR_NO_COUNT {
        0
    } else {
        // The NIC counts 0 as 1 (hardware spec §7).
        itr.entries.max(1)
    }
}

/// The registers for `usecs` and `frames`, or why the NIC cannot do it.
///
/// The NIC raises a vector when `max(1, VEC_ITR_ENTRIES)` entries are new or
/// `VEC_ITR_USECS` passed since the first: a delay of 0 means at once, so
/// "count only, no delay" does not exist, and `frames` 0 ("delay only")
/// becomes a count no ring reaches.
fn itr_from(usecs: u32, frames: u32, words: &Words, extack: &mut ExtAck<'_>) -> Result<Itr> {
    let msg = if usecs > ITR_USECS_MAX {
        Some(words.usecs_big)
    } else if frames > regs::MAX_RING {
        Some(words.frames_big)
    } else if usecs == 0 && frames == 0 {
        Some(words.never)
    } else if usecs == 0 && frames > 1 {
        Some(words.at_once)
    } else {
        None
    };
    if let Some(msg) = msg {
        extack.set_msg(msg);
        return Err(EINVAL);
    }
    Ok(Itr {
        usecs,
        entries: if frames == 0 { ITR_NO_COUNT } else { frames },
    })
}

/// Payload bytes of a full-sized TCP segment at `mtu` (IPv4 and TCP headers
/// without options).
fn full_segment(mtu: u32) -> u32 {
    mtu.saturating_sub(40).max(1)
}

/// Most `rx-cqe-frames` at `mtu`: as many full-sized segments as the NIC's
/// largest limit (`DEFAULT_COALESCE_BYTES`) holds, rounded up.
pub(crate) fn max_cqe_frames(mtu: u32) -> u32 {
    regs::DEFAULT_COALESCE_BYTES.div_ceil(full_segment(mtu))
}

/// `PORT_COALESCE_BYTES` for `rx-cqe-frames` at `mtu`: room for that many
/// full-sized segments, within the NIC's limit; one frame is no coalescing
/// (limit 0), and no setting the NIC's default.
pub(crate) fn cqe_bytes(frames: Option<u32>, mtu: u32) -> u32 {
    match frames {
        None => regs::DEFAULT_COALESCE_BYTES,
        Some(0 | 1) => 0,
        Some(n) => n
            .saturating_mul(full_segment(mtu))
            .min(regs::DEFAULT_COALESCE_BYTES),
    }
}

/// `ethtool -c`: what `cfg` programs at `mtu`.
pub(crate) fn coalesce(cfg: &PortConfig, mtu: u32) -> Coalesce {
    Coalesce {
        rx_usecs: cfg.rx_itr.usecs,
        rx_max_frames: itr_frames(cfg.rx_itr),
        tx_usecs: cfg.tx_itr.usecs,
        tx_max_frames: itr_frames(cfg.tx_itr),
        rx_cqe_frames: cfg.cqe_frames.unwrap_or(u32::MAX).min(max_cqe_frames(mtu)),
        ..Coalesce::default()
    }
}

/// `ethtool -C`: the configuration `c` asks for at `mtu`, or why the NIC
/// cannot do it (nothing changes then).
///
/// # Errors
///
/// - `EINVAL` if a setting is out of range or contradictory (reason in `extack`).
pub(crate) fn set_coalesce(
    cfg: &PortConfig,
    c: &Coalesce,
    mtu: u32,
    extack: &mut ExtAck<'_>,
) -> Result<PortConfig> {
    let rx_itr = itr_from(c.rx_usecs, c.rx_max_frames, &RX_WORDS, extack)?;
    let tx_itr = itr_from(c.tx_usecs, c.tx_max_frames, &TX_WORDS, extack)?;
    let max = max_cqe_frames(mtu);
    if c.rx_cqe_frames == 0 {
        extack.set_msg(c"rx-cqe-frames must be at least 1 (1: no coalescing)");
        return Err(EINVAL);
    }
    if c.rx_cqe_frames > max {
        extack.set_msg(c"rx-cqe-frames above what 65455 bytes hold at this MTU");
        return Err(EINVAL);
    }
    Ok(PortConfig {
        rx_slots: cfg.rx_slots,
        tx_slots: cfg.tx_slots,
        rx_itr,
        tx_itr,
        // The largest value is the NIC's default limit: keep following the
        // MTU then.
        cqe_frames: if c.rx_cqe_frames == max {
            None
        } else {
            Some(c.rx_cqe_frames)
        },
        combined: cfg.combined,
        rss: cfg.rss,
    })
}

// ---- Link settings ----------------------------------------------------------

/// `ethtool zn0`: the port is one end of the model's emulated wire. Frames
/// cross it whole in both directions at once; it has no line rate of its own
/// (a `zn-wire rate=` impairment is invisible to the driver) and nothing to
/// negotiate.
pub(crate) fn link_settings() -> LinkSettings {
    LinkSettings {
        speed: None,
        duplex: Duplex::Full,
        connector: Connector::Other,
        autoneg: false,
    }
}

#[kernel::macros::kunit_tests(zeronic_ethtool)]
mod tests {
    use super::*;

    /// `itr_from` for the RX vector, `None` if refused.
    fn itr_checked(usecs: u32, frames: u32) -> Option<Itr> {
        // SAFETY: A null extended ACK is valid: messages are only traced.
        let mut extack = unsafe { ExtAck::from_raw(core::ptr::null_mut()) };
        itr_from(usecs, frames, &RX_WORDS, &mut extack).ok()
    }

    /// `-L` takes combined channels only, and the count asked for is used
    /// within what the NIC serves; unset, one per CPU.
    #[test]
    fn channels_are_queue_pairs() {
        let c = |rx, tx, other, combined| ChannelCounts {
            rx,
            tx,
            other,
            combined,
        };
        assert_eq!(set_channels(&c(0, 0, 1, 2)), Ok(2));
        assert_eq!(set_channels(&c(0, 0, 0, 2)), Err(EINVAL));
        assert_eq!(set_channels(&c(1, 1, 1, 0)), Err(EINVAL));
        assert_eq!(set_channels(&c(0, 0, 1, 0)), Err(EINVAL));
        let mut cfg = PortConfig::new();
        assert_eq!(cfg.queue_pairs(4), default_channels(4));
        assert!((1..=4).contains(&default_channels(4)));
        assert_eq!(cfg.queue_pairs(1), 1);
        cfg.combined = Some(3);
        assert_eq!(cfg.queue_pairs(8), 3);
        assert_eq!(cfg.queue_pairs(2), 2);
        let ch = channels(2, 4);
        assert_eq!(ch.max.combined, 4);
        assert_eq!(ch.current.combined, 2);
        assert_eq!(ch.current.other, 1);
    }

    /// Every `*-frames`/`*-usecs` pair the NIC can do reads back as set.
    #[test]
    fn itr_round_trip() {
        for (usecs, frames) in [(0, 1), (1, 0), (64, 32), (ITR_USECS_MAX, regs::MAX_RING)] {
            let itr = itr_checked(usecs, frames).expect("valid pair");
            assert_eq!(itr.usecs, usecs);
            assert_eq!(itr_frames(itr), frames);
        }
        for (usecs, frames) in [
            (0, 0),
            (0, 2),
            (ITR_USECS_MAX + 1, 1),
            (1, regs::MAX_RING + 1),
        ] {
            assert!(itr_checked(usecs, frames).is_none());
        }
        // The NIC's reset value (0, 0) means an interrupt per entry.
        assert_eq!(
            itr_frames(Itr {
                usecs: 0,
                entries: 0
            }),
            1
        );
    }

    /// `rx-cqe-frames` maps onto byte limits the NIC accepts, the largest
    /// being its default.
    #[test]
    fn cqe_limits() {
        let mut mtu = kernel::net::dev::ETH_MIN_MTU;
        while mtu <= regs::MAX_MTU {
            let max = max_cqe_frames(mtu);
            assert!(max >= 1);
            assert_eq!(cqe_bytes(Some(max), mtu), regs::DEFAULT_COALESCE_BYTES);
            assert_eq!(cqe_bytes(None, mtu), regs::DEFAULT_COALESCE_BYTES);
            assert_eq!(cqe_bytes(Some(1), mtu), 0);
            for n in 2..max.min(64) {
                assert!(cqe_bytes(Some(n), mtu) < regs::DEFAULT_COALESCE_BYTES);
                assert!(cqe_bytes(Some(n), mtu) >= n * full_segment(mtu));
            }
            mtu += 97;
        }
        assert_eq!(max_cqe_frames(9000), 8);
        assert_eq!(max_cqe_frames(1500), 45);
    }
}

// SPDX-License-Identifier: GPL-2.0

//! A port's counters as `ethtool -S zn0` shows them: the NIC's own per-port
//! counters, then the driver's per-queue ones.
//!
//! `ip -s link` shows the driver's view (packets it handed to and took from
//! the NIC); the `hw_*` lines are the NIC's (`PORT_STATS`, hardware spec
//! §12): what the wire, the RX Split Unit and the TX Merge Unit did,
//! including drops the driver never sees. Their names are the `PSTAT_*`
//! names, prefixed `hw_`. The `rx0_*` and `tx0_*` lines are the driver's
//! counters of the port's one RX and one TX queue, the same ones netdev
//! netlink's per-queue statistics report (`qstats-get`), so `rx0_packets`
//! (the sum over the RX queues) equals `ip -s link`'s RX packets, and so on.
//! Last come the driver's counters of the port's zero-copy flows (`zc_*`).

use kernel::{
    prelude::*,
    sync::atomic::{
        Atomic,
        Relaxed, //
    },
};

use crate::{
    hw::regs,
    nic_regs::{
        PortRegs,
        Regs, //
    },
    queues::Stats,
    spare_rings::SpareRings, //
};

/// `(ethtool name, PSTAT_* slot)` of every counter shown.
const STATS: [(&CStr, usize); 28] = [
    (c"hw_tx_frames", regs::PSTAT_TX_FRAMES),
    (c"hw_tx_bytes", regs::PSTAT_TX_BYTES),
    (c"hw_tx_errors", regs::PSTAT_TX_ERRORS),
    (c"hw_tx_merge_bytes", regs::PSTAT_TX_MERGE_BYTES),
    (c"hw_tx_tso_frames", regs::PSTAT_TX_TSO_FRAMES),
    (c"hw_tx_bad_desc", regs::PSTAT_TX_BAD_DESC),
    (c"hw_tx_dma_err", regs::PSTAT_TX_DMA_ERR),
    (c"hw_tx_key_err", regs::PSTAT_TX_KEY_ERR),
    (c"hw_tx_no_link", regs::PSTAT_TX_NO_LINK),
    (c"hw_rx_frames", regs::PSTAT_RX_FRAMES),
    (c"hw_rx_bytes", regs::PSTAT_RX_BYTES),
    (c"hw_rx_normal", regs::PSTAT_RX_NORMAL),
    (c"hw_rx_split", regs::PSTAT_RX_SPLIT),
    (c"hw_rx_placed_bytes", regs::PSTAT_RX_PLACED_BYTES),
    (c"hw_rx_dup_bytes", regs::PSTAT_RX_DUP_BYTES),
    (c"hw_rx_dup_frames", regs::PSTAT_RX_DUP_FRAMES),
    (c"hw_rx_ooo_frames", regs::PSTAT_RX_OOO_FRAMES),
    (c"hw_rx_ooo_full", regs::PSTAT_RX_OOO_FULL),
    (c"hw_rx_unacceptable", regs::PSTAT_RX_UNACCEPTABLE),
    (c"hw_rx_fallback", regs::PSTAT_RX_FALLBACK),
    (c"hw_rx_csum_err", regs::PSTAT_RX_CSUM_ERR),
    (c"hw_rx_no_buf", regs::PSTAT_RX_NO_BUF),
    (c"hw_rx_hdrq_full", regs::PSTAT_RX_HDRQ_FULL),
    (c"hw_rx_malformed", regs::PSTAT_RX_MALFORMED),
    (c"hw_rx_buf_small", regs::PSTAT_RX_BUF_SMALL),
    (c"hw_rx_place_err", regs::PSTAT_RX_PLACE_ERR),
    (c"hw_hdrq_entries", regs::PSTAT_HDRQ_ENTRIES),
    (c"hw_rx_coalesced", regs::PSTAT_RX_COALESCED),
];

/// The driver's own counters of the port's zero-copy flows, shown last
/// (`control::ZcStats`), then the NIC's spare rings (`spare_rings.rs`;
/// NIC-wide: the same on each of its ports).
const ZC: [&CStr; 14] = [
    c"zc_flows",
    c"zc_rx_placed_bytes",
    c"zc_rx_copied_bytes",
    c"zc_rx_copybreak_bytes",
    c"zc_tx_merged_bytes",
    c"zc_tx_copied_bytes",
    c"zc_flow_moves",
    c"zc_flow_move_waits",
    c"zc_flow_move_timeouts",
    c"zc_ring_spares",
    c"zc_ring_spares_cooling",
    c"zc_ring_spare_reused",
    c"zc_ring_spare_kept",
    c"zc_ring_spare_evicted",
];

/// `(ethtool name, counter)` of the driver's per-queue counters shown:
/// queue pair 0's (`rx0_*`, `tx0_*`), then the profile's, summed over the
/// queue pairs (`prof_*`, from [`FIRST_PROF`] on).
const QUEUE_STATS: [(&CStr, fn(&Stats) -> &Atomic<u64>); 31] = [
    (c"rx0_packets", |s| &s.rx_packets),
    (c"rx0_bytes", |s| &s.rx_bytes),
    (c"rx0_alloc_fail", |s| &s.rx_dropped),
    (c"rx0_csum_unnecessary", |s| &s.rx_csum_unnecessary),
    (c"rx0_csum_none", |s| &s.rx_csum_none),
    (c"rx0_csum_bad", |s| &s.rx_csum_bad),
    (c"rx0_hdr_stale", |s| &s.rx_hdr_stale),
    (c"tx0_packets", |s| &s.tx_packets),
    (c"tx0_bytes", |s| &s.tx_bytes),
    (c"tx0_errors", |s| &s.tx_errors),
    (c"tx0_needs_csum", |s| &s.tx_needs_csum),
    (c"tx0_csum_none", |s| &s.tx_csum_none),
    (c"tx0_stop", |s| &s.tx_stop),
    (c"tx0_wake", |s| &s.tx_wake),
    (c"tx0_tso", |s| &s.tx_tso),
    (c"tx0_tso_frames", |s| &s.tx_tso_frames),
    // Where the time goes (`queues::Prof`, docs/performance.md): doorbells
    // rung, interrupts taken, NAPI polls and the work they did; the `_ns`
    // sums and their `_n` counts only with the module parameter profile=1.
    (c"prof_db_tx", |s| &s.prof.db_tx),
    (c"prof_tx_descs", |s| &s.prof.tx_descs),
    (c"prof_db_tx_deferred", |s| &s.prof.db_tx_deferred),
    (c"prof_db_rx", |s| &s.prof.db_rx),
    (c"prof_db_rearm", |s| &s.prof.db_rearm),
    (c"prof_irq_rx", |s| &s.prof.irq_rx),
    (c"prof_irq_tx", |s| &s.prof.irq_tx),
    (c"prof_polls", |s| &s.prof.polls),
    (c"prof_poll_work", |s| &s.prof.poll_work),
    (c"prof_db_to_irq_ns", |s| &s.prof.db_to_irq_ns),
    (c"prof_db_to_irq_n", |s| &s.prof.db_to_irq_n),
    (c"prof_irq_to_poll_ns", |s| &s.prof.irq_to_poll_ns),
    (c"prof_irq_to_poll_n", |s| &s.prof.irq_to_poll_n),
    (c"prof_poll_ns", |s| &s.prof.poll_ns),
    (c"prof_poll_n", |s| &s.prof.poll_n),
];

/// Index in [`QUEUE_STATS`] of the first `prof_*` counter.
const FIRST_PROF: usize = 16;

/// The packet and byte counters of queue pairs 1.. (hardware spec §14),
/// four per queue pair: zero for those the NIC does not serve.
const OTHER_QUEUES: [&CStr; 4 * (regs::MAX_QP as usize - 1)] = [
    c"rx1_packets",
    c"rx1_bytes",
    c"tx1_packets",
    c"tx1_bytes",
    c"rx2_packets",
    c"rx2_bytes",
    c"tx2_packets",
    c"tx2_bytes",
    c"rx3_packets",
    c"rx3_bytes",
    c"tx3_packets",
    c"tx3_bytes",
    c"rx4_packets",
    c"rx4_bytes",
    c"tx4_packets",
    c"tx4_bytes",
    c"rx5_packets",
    c"rx5_bytes",
    c"tx5_packets",
    c"tx5_bytes",
    c"rx6_packets",
    c"rx6_bytes",
    c"tx6_packets",
    c"tx6_bytes",
    c"rx7_packets",
    c"rx7_bytes",
    c"tx7_packets",
    c"tx7_bytes",
];

/// Number of lines of `ethtool -S`.
const LINES: usize = STATS.len() + QUEUE_STATS.len() + OTHER_QUEUES.len() + ZC.len();

/// The names: the NIC's in `STATS` order, the queues' in `QUEUE_STATS`
/// order, the other queue pairs', then the zero-copy ones (what
/// `NetDeviceOps::ETHTOOL_STAT_NAMES` wants).
pub(crate) const NAMES: [&CStr; LINES] = {
    let mut names = [c""; LINES];
    let mut i = 0;
    while i < STATS.len() {
        names[i] = STATS[i].0;
        i += 1;
    }
    let mut j = 0;
    while j < QUEUE_STATS.len() {
        names[i] = QUEUE_STATS[j].0;
        i += 1;
        j += 1;
    }
    j = 0;
    while j < OTHER_QUEUES.len() {
        names[i] = OTHER_QUEUES[j];
        i += 1;
        j += 1;
    }
    j = 0;
    while j < ZC.len() {
        names[i] = ZC[j];
        i += 1;
        j += 1;
    }
    names
};

/// Reads port `port`'s NIC counters into the first `STATS.len()` of
/// `values`; an unbound NIC leaves them as they are.
///
/// # Errors
///
/// - `EINVAL` if `port` is not a port of the register map, or as
///   [`Regs::port_stat`] (a slot beyond the port's statistics).
pub(crate) fn read_hw(r: &Regs<'_>, port: u32, values: &mut [u64]) -> Result {
    let p = PortRegs::new(port)?;
    for (value, (_, slot)) in values.iter_mut().zip(STATS.iter()) {
        *value = r.port_stat(p, *slot)?;
    }
    Ok(())
}

/// Reads the driver's per-queue counters of `qps` (every queue pair the
/// port may have, queue pair 0 first) into the `values` after the NIC's.
pub(crate) fn read_queues<'a>(qps: impl Iterator<Item = &'a Stats> + Clone, values: &mut [u64]) {
    let qp0 = qps.clone().next();
    let queues = values.iter_mut().skip(STATS.len());
    for (i, (value, (_, counter))) in queues.zip(QUEUE_STATS.iter()).enumerate() {
        *value = if i < FIRST_PROF {
            qp0.map_or(0, |s| counter(s).load(Relaxed))
        } else {
            qps.clone()
                .map(|s| counter(s).load(Relaxed))
                .fold(0, u64::wrapping_add)
        };
    }
    let others = values.iter_mut().skip(STATS.len() + QUEUE_STATS.len());
    let counts = qps.skip(1).flat_map(|s| {
        [
            s.rx_packets.load(Relaxed),
            s.rx_bytes.load(Relaxed),
            s.tx_packets.load(Relaxed),
            s.tx_bytes.load(Relaxed),
        ]
    });
    for (value, count) in others.take(OTHER_QUEUES.len()).zip(counts) {
        *value = count;
    }
}

/// One of the NIC's per-port counters (`PSTAT_*`), 0 if it cannot be read.
pub(crate) fn hw(r: &Regs<'_>, port: u32, slot: usize) -> u64 {
    PortRegs::new(port)
        .and_then(|p| r.port_stat(p, slot))
        .unwrap_or(0)
}

/// Writes the driver's zero-copy counters, and the NIC's spare rings', into
/// the values after the queues'.
pub(crate) fn read_zc(zc: &crate::control::ZcStats, spares: &SpareRings, values: &mut [u64]) {
    let spare_counts = spares.counts();
    let ours = [
        zc.flows.load(Relaxed),
        zc.rx_placed.load(Relaxed),
        zc.rx_copied.load(Relaxed),
        zc.rx_copybreak.load(Relaxed),
        zc.tx_merged.load(Relaxed),
        zc.tx_copied.load(Relaxed),
        zc.flow_moves.load(Relaxed),
        zc.flow_move_waits.load(Relaxed),
        zc.flow_move_timeouts.load(Relaxed),
        // CAST: usize -> u64 is lossless on every architecture Linux supports.
        spare_counts.0 as u64,
        spare_counts.1 as u64,
        spares.reused.load(Relaxed),
        spares.kept.load(Relaxed),
        spares.evicted.load(Relaxed),
    ];
    let skip = STATS.len() + QUEUE_STATS.len() + OTHER_QUEUES.len();
    for (value, v) in values.iter_mut().skip(skip).zip(ours) {
        *value = v;
    }
}

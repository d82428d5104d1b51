// SPDX-License-Identifier: GPL-2.0

//! The NIC's own per-port counters, as `ethtool -S zn0` shows them.
//!
//! `ip -s link` shows the driver's view (packets it handed to and took from
//! the NIC); these are the NIC's (`PORT_STATS`, hardware spec §12): what the
//! wire, the RX Split Unit and the TX Merge Unit did, including drops the
//! driver never sees. Names are the `PSTAT_*` names, prefixed `hw_`.

use kernel::prelude::*;

use crate::{
    hw::regs,
    nic_regs::Regs, //
};

/// `(ethtool name, PSTAT_* slot)` of every counter shown.
const STATS: [(&CStr, usize); 27] = [
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

/// The names, in `STATS` order (what `NetDeviceOps::ETHTOOL_STAT_NAMES` wants).
pub(crate) const NAMES: [&CStr; STATS.len()] = {
    let mut names = [c""; STATS.len()];
    let mut i = 0;
    while i < STATS.len() {
        names[i] = STATS[i].0;
        i += 1;
    }
    names
};

/// Reads port `port`'s counters into `values` (one per name).
pub(crate) fn read(r: &Regs<'_>, port: u32, values: &mut [u64]) -> Result {
    let base = regs::port_block(port) + regs::PORT_STATS;
    for (value, (_, slot)) in values.iter_mut().zip(STATS.iter()) {
        *value = r.r64(base + 8 * slot)?;
    }
    Ok(())
}

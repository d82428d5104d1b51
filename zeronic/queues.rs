// SPDX-License-Identifier: GPL-2.0

//! The normal data path of one queue pair of a port: the TX and RX rings,
//! their buffers, and the NAPI poller that reaps TX completions and receives
//! frames. A port has one [`Queues`] per queue pair the NIC may serve
//! (hardware spec §14), each the poller data of its own NAPI; those past the
//! port's active count hold no rings.
//!
//! Frames are copied through DMA-coherent buffers, one per ring slot: on TX
//! the skb is copied into the slot's buffer, on RX the frame is copied out of
//! it into a fresh skb, which GRO merges. A TCP GSO skb (up to 64 KiB)
//! is copied whole into one of `TSO_BUFS` larger buffers and posted as one
//! plain TSO send that the NIC segments (hardware spec §8), so the stack
//! handles one skb per 64 KiB instead of one per MSS. This path carries what
//! is not offloaded (ARP, ICMP, TCP handshakes, plain TCP/UDP); bulk payload
//! of offloaded flows goes through registered memory instead, so the copy is
//! not on the fast path the NIC exists for.
//!
//! Locking: `tx` is taken by `start_xmit` (BH disabled) and by the poller
//! (softirq); `rx` by the poller; both by process context (open, stop, MTU
//! change) to install and remove the rings. They are `SpinLockBh` (patch
//! 0010): no softirq can interrupt a holder on its CPU and spin on the lock,
//! and the stack may be called with them held (GRO delivery, which can
//! transmit: lock order `rx` -> `tx`).

use kernel::{
    cpu::CpuId,
    device::{
        Bound,
        Device, //
    },
    dma::Coherent,
    io::{
        io_project,
        Io, //
    },
    net::{
        dev::{
            Features,
            NetDevice,
            NetdevTx,
            XmitSkb, //
        },
        napi::{
            NapiContext,
            NapiPoller, //
        },
        skbuff::{
            Checksum,
            HashType,
            RxChecksum,
            SkBuff, //
        },
    },
    new_spinlock_bh,
    page::Page,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        barrier::{
            dma_mb,
            Read, //
        },
        Arc,
        SpinLockBh, //
    },
    time::{
        Instant,
        Monotonic, //
    },
};

use crate::{
    control::{
        Control,
        NicMemory,
        PortSnapshot, //
    },
    flow::tx::{
        SendWr,
        SEND_OPS, //
    },
    hw::{
        desc::{
            RxBufDesc,
            RxCompletion,
            TxCompletion,
            TxDesc,
            HDRQ_ENTRY_SIZE,
            RSS_TYPE_IPV4,
            RSS_TYPE_IPV6,
            RSS_TYPE_TCP4,
            RSS_TYPE_TCP6,
            RSS_TYPE_UDP4,
            RSS_TYPE_UDP6,
            RXF_CSUM_BAD,
            RXF_CSUM_OK,
            RXF_FLOW,
            RXF_TCP,
            TXF_CSUM_PARTIAL,
            TXF_TSO,
            TX_OP_MERGE,
            TX_OP_PLAIN, //
        },
        net::parse_tcp,
        regs, status,
    },
    nic_regs::{
        NicRegs,
        PortQueue,
        QueuePairRegs,
        Regs,
        VectorRegs, //
    },
    qp_track::QpTrack,
    ring::Ring,
};

/// Ethernet header bytes added to the MTU to get the largest frame.
const ETH_HLEN: u32 = regs::ETH_HLEN;

/// An 802.1Q tag: a VLAN device on a port sends and receives frames of MTU +
/// 18 bytes (the NIC carries them, hardware spec §9).
const VLAN_HLEN: u32 = regs::VLAN_HLEN;

/// Entries of a port's header queue (256 B each).
const HDRQ_ENTRIES: u32 = 512;

/// Bytes of buffers per ring the ring size aims at: big MTUs get fewer slots.
const RING_BYTES: u32 = 4 << 20;

/// Most bytes of buffers one ring may take when its size is set with
/// `ethtool -G` (each buffer is its own coherent allocation of whole pages).
const RING_MAX_BYTES: u32 = 16 << 20;

/// Buffers of `MAX_TSO_FRAME` bytes per TX ring for plain TSO sends (2 MiB):
/// what one TCP flow keeps queued in the driver (`tcp_limit_output_bytes`,
/// 1 MiB by default) fits twice.
const TSO_BUFS: u32 = 32;

/// Fewest entries a ring may be given with `ethtool -G`.
pub(crate) const MIN_SLOTS: u32 = 16;

/// Returns the buffer size and number of slots of the rings for `mtu`.
pub(crate) fn ring_geometry(mtu: u32) -> (u32, u32) {
    // Buffers are a multiple of 64 bytes (cache line, and the NIC's alignment
    // rule for ring bases applies to nothing else but keeps copies aligned).
    let buf_len = (mtu + ETH_HLEN + VLAN_HLEN).next_multiple_of(64);
    let slots = (RING_BYTES / buf_len).clamp(32, 256);
    // Round down to a power of two.
    let slots = 1u32 << (31 - slots.leading_zeros());
    (buf_len, slots)
}

/// Most entries a ring may have at `mtu` (`ethtool -g` maximum): its buffers
/// stay within `RING_MAX_BYTES` and the NIC's `MAX_RING`.
pub(crate) fn max_slots(mtu: u32) -> u32 {
    let (buf_len, _) = ring_geometry(mtu);
    // A coherent buffer takes a power-of-two number of pages.
    let slot_bytes = buf_len.next_power_of_two().max(4096);
    let slots = (RING_MAX_BYTES / slot_bytes).clamp(MIN_SLOTS, regs::MAX_RING);
    1u32 << (31 - slots.leading_zeros())
}

/// Entries of a ring at `mtu`: `asked` (set with `ethtool -G`, a power of
/// two) if it still fits the MTU's maximum, else the maximum; the MTU's
/// default without `asked`.
pub(crate) fn ring_slots(asked: Option<u32>, mtu: u32) -> u32 {
    match asked {
        Some(n) => n.min(max_slots(mtu)),
        None => ring_geometry(mtu).1,
    }
}

/// Counters of one queue pair, updated locklessly: its TX and RX queue's
/// per-queue statistics (netdev netlink `qstats-get`); `ip -s link` shows
/// the sum over the port's queue pairs, and queue pair 0's are the `rx0_*`
/// and `tx0_*` lines of `ethtool -S`. They live as long as the net_device
/// (not the rings), so none goes backwards on `ip link set down` or
/// `ethtool -L`.
pub(crate) struct Stats {
    pub(crate) rx_packets: Atomic<u64>,
    pub(crate) rx_bytes: Atomic<u64>,
    /// Frames lost because no skb could be allocated (qstats `alloc-fail`).
    pub(crate) rx_dropped: Atomic<u64>,
    pub(crate) rx_errors: Atomic<u64>,
    /// Header-queue entries of a flow the driver no longer has: the NIC
    /// wrote them before it removed the flow, NAPI read them after (a
    /// close races the traffic). Dropped; not an error.
    pub(crate) rx_hdr_stale: Atomic<u64>,
    /// Frames delivered `CHECKSUM_UNNECESSARY` (TCP, verified by the NIC).
    pub(crate) rx_csum_unnecessary: Atomic<u64>,
    /// Frames delivered `CHECKSUM_NONE`.
    pub(crate) rx_csum_none: Atomic<u64>,
    /// Of those, TCP frames the NIC found a bad checksum in (`RXF_CSUM_BAD`).
    pub(crate) rx_csum_bad: Atomic<u64>,
    pub(crate) tx_packets: Atomic<u64>,
    pub(crate) tx_bytes: Atomic<u64>,
    pub(crate) tx_dropped: Atomic<u64>,
    /// TX descriptors the NIC completed with an error status.
    pub(crate) tx_errors: Atomic<u64>,
    /// Frames posted with `TXF_CSUM_PARTIAL` (the NIC computes a checksum).
    pub(crate) tx_needs_csum: Atomic<u64>,
    /// Frames posted without.
    pub(crate) tx_csum_none: Atomic<u64>,
    /// Times the TX queue was stopped (ring full) and woken again.
    pub(crate) tx_stop: Atomic<u64>,
    pub(crate) tx_wake: Atomic<u64>,
    /// GSO skbs posted as plain TSO sends, and the frames the NIC made of
    /// them (its completions' `frames`).
    pub(crate) tx_tso: Atomic<u64>,
    pub(crate) tx_tso_frames: Atomic<u64>,
    /// Bytes of the GSO skbs posted as plain TSO sends.
    pub(crate) tx_tso_bytes: Atomic<u64>,
    /// Where the time goes (`prof_*` in `ethtool -S`, see
    /// docs/performance.md): doorbells rung, interrupts taken, NAPI polls.
    pub(crate) prof: Prof,
}

/// The driver's half of the per-event profile of the NIC path. Counts are
/// always kept (one atomic add per doorbell, interrupt or poll); the
/// durations only with the module parameter `profile=1` (two clock reads per
/// interrupt and per poll).
pub(crate) struct Prof {
    /// Clock origin of the stamps below (nanoseconds since it, 0 = none).
    epoch: Instant<Monotonic>,
    pub(crate) db_tx: Atomic<u64>,
    /// TX descriptors posted, and those posted without a doorbell of their
    /// own (`xmit_more` batching: a later one covers them).
    pub(crate) tx_descs: Atomic<u64>,
    pub(crate) db_tx_deferred: Atomic<u64>,
    pub(crate) db_rx: Atomic<u64>,
    pub(crate) db_rearm: Atomic<u64>,
    pub(crate) irq_rx: Atomic<u64>,
    pub(crate) irq_tx: Atomic<u64>,
    pub(crate) polls: Atomic<u64>,
    /// TX completions, RX completions and header entries handled by polls.
    pub(crate) poll_work: Atomic<u64>,
    /// Stamp of the first TX doorbell no TX interrupt followed yet.
    tx_db_at: Atomic<u64>,
    /// Stamp of the interrupt no poll followed yet.
    irq_at: Atomic<u64>,
    /// TX doorbell to TX interrupt: sum (ns) and count.
    pub(crate) db_to_irq_ns: Atomic<u64>,
    pub(crate) db_to_irq_n: Atomic<u64>,
    /// Interrupt to the start of the NAPI poll it scheduled.
    pub(crate) irq_to_poll_ns: Atomic<u64>,
    pub(crate) irq_to_poll_n: Atomic<u64>,
    /// Duration of polls (sum; the count is `polls` of timed polls).
    pub(crate) poll_ns: Atomic<u64>,
    pub(crate) poll_n: Atomic<u64>,
}

impl Prof {
    fn new() -> Self {
        Self {
            epoch: Instant::now(),
            db_tx: Atomic::new(0),
            tx_descs: Atomic::new(0),
            db_tx_deferred: Atomic::new(0),
            db_rx: Atomic::new(0),
            db_rearm: Atomic::new(0),
            irq_rx: Atomic::new(0),
            irq_tx: Atomic::new(0),
            polls: Atomic::new(0),
            poll_work: Atomic::new(0),
            tx_db_at: Atomic::new(0),
            irq_at: Atomic::new(0),
            db_to_irq_ns: Atomic::new(0),
            db_to_irq_n: Atomic::new(0),
            irq_to_poll_ns: Atomic::new(0),
            irq_to_poll_n: Atomic::new(0),
            poll_ns: Atomic::new(0),
            poll_n: Atomic::new(0),
        }
    }

    /// Whether durations are measured (module parameter `profile`).
    #[inline]
    pub(crate) fn timed() -> bool {
        crate::module_parameters::profile.value() != 0
    }

    /// Nanoseconds since `epoch`, at least 1 (0 means "no stamp").
    #[inline]
    pub(crate) fn stamp(&self) -> u64 {
        // CAST: a non-negative i64 fits u64; the clock is monotonic.
        ((Instant::<Monotonic>::now() - self.epoch).as_nanos().max(0) as u64).max(1)
    }

    /// A TX doorbell was rung.
    #[inline]
    fn tx_doorbell(&self) {
        bump(&self.db_tx, 1);
        if Self::timed() && self.tx_db_at.load(Relaxed) == 0 {
            self.tx_db_at.store(self.stamp(), Relaxed);
        }
    }

    /// An interrupt of the port's RX (`rx`) or TX vector (hard IRQ context).
    #[inline]
    pub(crate) fn irq(&self, rx: bool) {
        bump(if rx { &self.irq_rx } else { &self.irq_tx }, 1);
        if !Self::timed() {
            return;
        }
        let now = self.stamp();
        if !rx {
            let db = self.tx_db_at.xchg(0, Relaxed);
            if db != 0 {
                bump(&self.db_to_irq_ns, now.saturating_sub(db));
                bump(&self.db_to_irq_n, 1);
            }
        }
        if self.irq_at.load(Relaxed) == 0 {
            self.irq_at.store(now, Relaxed);
        }
    }

    /// A NAPI poll starts; returns its start stamp (0 if not timed).
    #[inline]
    fn poll_start(&self) -> u64 {
        bump(&self.polls, 1);
        if !Self::timed() {
            return 0;
        }
        let now = self.stamp();
        let at = self.irq_at.xchg(0, Relaxed);
        if at != 0 {
            bump(&self.irq_to_poll_ns, now.saturating_sub(at));
            bump(&self.irq_to_poll_n, 1);
        }
        now
    }

    /// A NAPI poll that started at `start` did `work`.
    #[inline]
    fn poll_end(&self, start: u64, work: u64) {
        bump(&self.poll_work, work);
        if start != 0 {
            bump(&self.poll_ns, self.stamp().saturating_sub(start));
            bump(&self.poll_n, 1);
        }
    }
}

impl Stats {
    fn new() -> Self {
        Self {
            rx_packets: Atomic::new(0),
            rx_bytes: Atomic::new(0),
            rx_dropped: Atomic::new(0),
            rx_errors: Atomic::new(0),
            rx_hdr_stale: Atomic::new(0),
            rx_csum_unnecessary: Atomic::new(0),
            rx_csum_none: Atomic::new(0),
            rx_csum_bad: Atomic::new(0),
            tx_packets: Atomic::new(0),
            tx_bytes: Atomic::new(0),
            tx_dropped: Atomic::new(0),
            tx_errors: Atomic::new(0),
            tx_needs_csum: Atomic::new(0),
            tx_csum_none: Atomic::new(0),
            tx_stop: Atomic::new(0),
            tx_wake: Atomic::new(0),
            tx_tso: Atomic::new(0),
            tx_tso_frames: Atomic::new(0),
            tx_tso_bytes: Atomic::new(0),
            prof: Prof::new(),
        }
    }
}

/// Adds `by` to a counter.
#[inline]
fn bump(counter: &Atomic<u64>, by: u64) {
    counter.add(by, Relaxed);
}

/// One coherent buffer per ring slot.
fn alloc_buffers(dev: &Device<Bound>, slots: u32, len: u32) -> Result<KVec<Coherent<[u8]>>> {
    // CAST: u32 -> usize is lossless on every architecture Linux supports.
    let mut bufs = KVec::with_capacity(slots as usize, GFP_KERNEL)?;
    for _ in 0..slots {
        bufs.push(
            Coherent::<u8>::zeroed_slice(dev, len as usize, GFP_KERNEL)?,
            GFP_KERNEL,
        )?;
    }
    Ok(bufs)
}

/// Returns the buffer of free-running index `index`.
#[inline]
fn buffer(bufs: &[Coherent<[u8]>], index: u32) -> Result<&Coherent<[u8]>> {
    // CAST: u32 -> usize is lossless; `bufs.len()` is a power of two.
    bufs.get(index as usize & (bufs.len() - 1)).ok_or(EINVAL)
}

/// What [`Queues::post_skb`] did with an skb.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Posted {
    /// Copied (plain or plain TSO send): the skb may be freed.
    Copy,
    /// A merge send: the skb is held until its descriptor completes.
    Merge,
    /// Not posted: dropped (counted by the caller).
    Dropped,
    /// No room: handed back to the stack.
    Busy,
}

/// Whether TX doorbells are batched over `xmit_more` (module parameter
/// `tx_batch`, read at every post; 0 rings one per descriptor, for the
/// A/B of docs/performance.md).
#[inline]
fn tx_batch() -> bool {
    crate::module_parameters::tx_batch.value() != 0
}

/// The TX queue and TX completion queue of a queue pair.
pub(crate) struct TxRing {
    pub(crate) txq: Ring<64>,
    pub(crate) txcq: Ring<16>,
    bufs: KVec<Coherent<[u8]>>,
    /// Frame length per slot, for the byte counters at completion.
    lens: KVec<u32>,
    /// The skb of a merge send per slot, held until the NIC completed the
    /// descriptor (it reads the payload until then; freeing the skb may
    /// complete the send and give the buffer back to the application).
    skbs: KVec<Option<SkBuff>>,
    buf_len: u32,
    /// Descriptors posted (free-running, = `Q_PROD` of the TX queue).
    prod: u32,
    /// Completions consumed (free-running, = `Q_CONS` of the completion queue).
    done: u32,
    /// Buffers of `MAX_TSO_FRAME` bytes for plain TSO sends (none if the NIC
    /// lacks `CAP_PLAIN_TSO`). Completions come in order, so they are used
    /// and given back in order: `tso_next - tso_done` are in flight.
    tso_bufs: KVec<Coherent<[u8]>>,
    tso_next: u32,
    tso_done: u32,
    /// Per slot: the descriptor used a TSO buffer.
    tso_used: KVec<bool>,
    /// Descriptors were posted (`Q_PROD` written) since the last `DB_TX`:
    /// `xmit_more` said more skbs follow. Only `start_xmit` sets and clears
    /// it, serialised by the stack's TX queue lock.
    db_pending: bool,
}

// Held by the NIC layer until the NIC confirmed the queues stopped.
impl NicMemory for TxRing {}

impl TxRing {
    /// A ring of `slots` entries (a power of two) with buffers for `mtu`;
    /// with `tso`, also `TSO_BUFS` buffers for plain TSO sends.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if `slots` is not a power of two or exceeds `MAX_RING`.
    /// - `ENOMEM` if the rings, the buffers or the bookkeeping cannot be allocated.
    pub(crate) fn new(
        dev: &Device<Bound>,
        block: QueuePairRegs,
        mtu: u32,
        slots: u32,
        tso: bool,
    ) -> Result<Self> {
        let (buf_len, _) = ring_geometry(mtu);
        let mut lens = KVec::new();
        // CAST: u32 -> usize is lossless on every architecture Linux supports.
        lens.resize(slots as usize, 0, GFP_KERNEL)?;
        let mut tso_used = KVec::new();
        tso_used.resize(slots as usize, false, GFP_KERNEL)?;
        let mut skbs = KVec::with_capacity(slots as usize, GFP_KERNEL)?;
        for _ in 0..slots {
            skbs.push(None, GFP_KERNEL)?;
        }
        let tso_bufs = if tso {
            alloc_buffers(dev, TSO_BUFS, regs::MAX_TSO_FRAME)?
        } else {
            KVec::new()
        };
        Ok(Self {
            txq: Ring::new(dev, slots, block.queue(PortQueue::Tx))?,
            txcq: Ring::new(dev, slots, block.queue(PortQueue::TxCompletion))?,
            bufs: alloc_buffers(dev, slots, buf_len)?,
            lens,
            skbs,
            buf_len,
            prod: 0,
            done: 0,
            tso_bufs,
            tso_next: 0,
            tso_done: 0,
            tso_used,
            db_pending: false,
        })
    }

    /// Whether a plain TSO send can be posted now (a slot and a TSO buffer).
    #[inline]
    fn tso_free(&self) -> bool {
        // CAST: u32 -> usize is lossless on every architecture Linux supports.
        (self.tso_next.wrapping_sub(self.tso_done) as usize) < self.tso_bufs.len()
    }

    /// Copies the GSO skb `skb` (TCP/IPv4, at most `MAX_TSO_FRAME` bytes)
    /// into the next TSO buffer and posts it as a plain TSO send with the
    /// skb's `gso_size`. The caller checked [`TxRing::tso_free`] and rings
    /// `DB_TX`.
    fn post_tso(&mut self, r: &Regs<'_>, skb: &SkBuff) -> Result {
        let len = skb.len();
        if len < ETH_HLEN || len > regs::MAX_TSO_FRAME || !self.tso_free() {
            return Err(EINVAL);
        }
        // CAST: u32 -> usize is lossless; `tso_bufs.len()` is a power of two.
        let buf = self
            .tso_bufs
            .get(self.tso_next as usize & (self.tso_bufs.len() - 1))
            .ok_or(EINVAL)?;
        copy_skb(skb, buf, len)?;
        let index = self.prod;
        let desc = TxDesc {
            opcode: TX_OP_PLAIN,
            flags: TXF_TSO,
            buf_len: len,
            buf_addr: buf.dma_address(),
            mss: skb.gso_size(),
            cookie: u64::from(index),
            ..Default::default()
        };
        self.txq.write(index, desc.encode())?;
        // CAST: u32 -> usize is lossless on every architecture Linux supports.
        let slot = index as usize & (self.bufs.len() - 1);
        if let Some(l) = self.lens.get_mut(slot) {
            *l = len;
        }
        if let Some(t) = self.tso_used.get_mut(slot) {
            *t = true;
        }
        self.tso_next = self.tso_next.wrapping_add(1);
        self.prod = index.wrapping_add(1);
        self.txq.set_prod(r, self.prod)?;
        Ok(())
    }

    /// Free descriptor slots.
    #[inline]
    fn free(&self) -> u32 {
        self.txq.entries() - self.prod.wrapping_sub(self.done)
    }

    /// Copies `skb` into the next slot and posts it; returns whether the NIC
    /// computes its checksum. The caller rings `DB_TX`.
    fn post(&mut self, r: &Regs<'_>, skb: &SkBuff) -> Result<bool> {
        let len = skb.len();
        if len < ETH_HLEN || len > self.buf_len {
            return Err(EINVAL); // not a frame
        }
        let index = self.prod;
        let buf = buffer(&self.bufs, index)?;
        let data = skb.data();
        // CAST: usize -> u64 is lossless on every architecture Linux supports.
        if data.len() as u64 == u64::from(len) {
            // CAST: u32 -> usize is lossless on every architecture Linux supports.
            io_project!(buf, [try: 0..len as usize]).copy_from_slice(data);
        } else {
            // Fragments (NETIF_F_SG): gathered by the copy.
            copy_skb(skb, buf, len)?;
        }
        let mut desc = TxDesc {
            opcode: TX_OP_PLAIN,
            buf_len: len,
            buf_addr: buf.dma_address(),
            cookie: u64::from(index),
            ..Default::default()
        };
        let csum = skb.ip_summed() == Checksum::Partial;
        if csum {
            let start = skb.csum_start_offset().ok_or(EINVAL)?;
            let offset = skb.csum_offset().ok_or(EINVAL)?;
            desc.flags = TXF_CSUM_PARTIAL;
            desc.csum_start = u16::try_from(start)?;
            desc.csum_offset = offset;
        }
        self.txq.write(index, desc.encode())?;
        // CAST: u32 -> usize is lossless on every architecture Linux supports.
        if let Some(l) = self.lens.get_mut(index as usize & (self.bufs.len() - 1)) {
            *l = len;
        }
        self.prod = index.wrapping_add(1);
        self.txq.set_prod(r, self.prod)?;
        Ok(csum)
    }

    /// Posts a merge send: the skb's header, copied into the slot, and its
    /// payload read by the NIC from region `mr_key` at `mr_offset` (TSO with
    /// the skb's `gso_size`). Returns the payload length. The caller rings
    /// `DB_TX` and hands the skb to [`TxRing::hold`].
    fn post_merge(
        &mut self,
        r: &Regs<'_>,
        skb: &SkBuff,
        mr_key: u64,
        mr_offset: u64,
        hdr_len: u32,
    ) -> Result<u32> {
        let pay_len = skb.len().checked_sub(hdr_len).ok_or(EINVAL)?;
        let data = skb.data();
        // CAST: u32 -> usize is lossless on every architecture Linux supports.
        if data.len() != hdr_len as usize || hdr_len > self.buf_len {
            // The payload must be wholly in the fragments, the header wholly
            // linear (TCP builds them so).
            return Err(EINVAL);
        }
        let index = self.prod;
        let buf = buffer(&self.bufs, index)?;
        // CAST: u32 -> usize is lossless on every architecture Linux supports.
        io_project!(buf, [try: 0..hdr_len as usize]).copy_from_slice(data);
        let mut desc = TxDesc {
            opcode: TX_OP_MERGE,
            buf_len: hdr_len,
            buf_addr: buf.dma_address(),
            mr_key,
            mr_offset,
            pay_len,
            cookie: u64::from(index),
            ..Default::default()
        };
        if skb.is_gso() && skb.gso_size() != 0 {
            desc.flags = TXF_TSO;
            desc.mss = skb.gso_size();
        }
        self.txq.write(index, desc.encode())?;
        // CAST: u32 -> usize is lossless on every architecture Linux supports.
        if let Some(l) = self.lens.get_mut(index as usize & (self.bufs.len() - 1)) {
            *l = skb.len();
        }
        self.prod = index.wrapping_add(1);
        self.txq.set_prod(r, self.prod)?;
        Ok(pay_len)
    }

    /// Keeps `skb` with the descriptor just posted until it completes.
    fn hold(&mut self, skb: SkBuff) {
        // CAST: u32 -> usize is lossless; `bufs.len()` is a power of two.
        let slot = self.prod.wrapping_sub(1) as usize & (self.bufs.len() - 1);
        if let Some(s) = self.skbs.get_mut(slot) {
            *s = Some(skb);
        }
    }
}

/// The RX buffer queue, RX completion queue and header queue of a queue pair.
pub(crate) struct RxRing {
    pub(crate) rxq: Ring<16>,
    pub(crate) rxcq: Ring<32>,
    /// The header queue of attached flows (`hdrq.rs`).
    pub(crate) hdrq: Ring<HDRQ_ENTRY_SIZE>,
    /// Header entries consumed (free-running, = `Q_CONS` of the header queue).
    hdr_cons: u32,
    bufs: KVec<Coherent<[u8]>>,
    buf_len: u32,
    /// Buffers posted (free-running, = `Q_PROD` of the RX buffer queue).
    posted: u32,
    /// Completions consumed (free-running, = `Q_CONS` of the completion queue).
    cons: u32,
}

// Held by the NIC layer until the NIC confirmed the queues stopped.
impl NicMemory for RxRing {}

impl RxRing {
    /// A ring of `slots` entries (a power of two) with buffers for `mtu`.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if `slots` is not a power of two or exceeds `MAX_RING`.
    /// - `ENOMEM` if the rings or the buffers cannot be allocated.
    pub(crate) fn new(
        dev: &Device<Bound>,
        block: QueuePairRegs,
        mtu: u32,
        slots: u32,
    ) -> Result<Self> {
        let (buf_len, _) = ring_geometry(mtu);
        Ok(Self {
            rxq: Ring::new(dev, slots, block.queue(PortQueue::Rx))?,
            rxcq: Ring::new(dev, slots, block.queue(PortQueue::RxCompletion))?,
            hdrq: Ring::new(dev, HDRQ_ENTRIES, block.queue(PortQueue::Header))?,
            hdr_cons: 0,
            bufs: alloc_buffers(dev, slots, buf_len)?,
            buf_len,
            posted: 0,
            cons: 0,
        })
    }

    /// Posts the buffer of RX queue index `posted` and advances it.
    fn post_one(&mut self) -> Result {
        let buf = buffer(&self.bufs, self.posted)?;
        let desc = RxBufDesc {
            addr: buf.dma_address(),
            len: self.buf_len,
            rsvd0: 0,
        };
        self.rxq.write(self.posted, desc.encode())?;
        self.posted = self.posted.wrapping_add(1);
        Ok(())
    }

    /// Posts every buffer of a freshly enabled ring and rings `DB_RX`.
    ///
    /// # Errors
    ///
    /// - `EINVAL` as [`Ring::write`] and [`Regs::set_queue32`] (never: slots and registers are in range).
    pub(crate) fn fill(&mut self, r: &Regs<'_>) -> Result {
        while self.posted.wrapping_sub(self.cons) < self.rxq.entries() {
            self.post_one()?;
        }
        self.rxq.set_prod(r, self.posted)?;
        r.doorbell(regs::DB_RX)
    }
}

/// The data path of one queue pair of a port; the poller data of its NAPI.
#[pin_data]
pub(crate) struct Queues {
    port: u32,
    /// The queue pair: also the net_device's TX and RX queue index.
    qp: u16,
    /// Ports of the NIC (the vector numbers of queue pairs 1.. depend on it).
    nports: u32,
    regs: Arc<NicRegs>,
    /// The NIC's control plane, for its flows (header queue).
    control: Arc<Control>,
    /// A zeroed page: the payload of duplicates TCP drops unread.
    zero: Arc<Page>,
    #[pin]
    pub(crate) tx: SpinLockBh<Option<TxRing>>,
    #[pin]
    pub(crate) rx: SpinLockBh<Option<RxRing>>,
    pub(crate) stats: Stats,
}

impl Queues {
    pub(crate) fn new(
        port: u32,
        qp: u16,
        nports: u32,
        regs: Arc<NicRegs>,
        control: Arc<Control>,
        zero: Arc<Page>,
    ) -> impl PinInit<Self> {
        pin_init!(Self {
            port,
            qp,
            nports,
            regs,
            control,
            zero,
            tx <- new_spinlock_bh!(None, "zeronic::tx"),
            rx <- new_spinlock_bh!(None, "zeronic::rx"),
            stats: Stats::new(),
        })
    }

    /// The queue pair's vectors: its RX vector (RX completions and header
    /// entries) and its TX vector, which for queue pairs 1.. is the same
    /// one (hardware spec §14).
    pub(crate) fn vectors(&self) -> (u32, u32) {
        let qp = u32::from(self.qp);
        (
            regs::vec_qp_rx(self.nports, self.port, qp),
            regs::vec_qp_tx(self.nports, self.port, qp),
        )
    }

    /// Masks or unmasks the queue pair's vectors (`VEC_MASK`).
    ///
    /// # Errors
    ///
    /// - `EINVAL` if a vector is beyond the table (never: probe requests
    ///   only vectors the table has).
    pub(crate) fn mask_vectors(&self, r: &Regs<'_>, masked: bool) -> Result {
        let (rx, tx) = self.vectors();
        r.set_vector32::<{ regs::VEC_MASK }>(VectorRegs::new(rx)?, u32::from(masked))?;
        if tx != rx {
            r.set_vector32::<{ regs::VEC_MASK }>(VectorRegs::new(tx)?, u32::from(masked))?;
        }
        Ok(())
    }

    /// Whether the stack may not transmit on the queue pair's TX queue.
    #[inline]
    fn stopped(&self, dev: &NetDevice) -> bool {
        dev.subqueue_stopped(self.qp).unwrap_or(true)
    }

    /// `ndo_start_xmit`: copies the frame to the next TX slot.
    ///
    /// The doorbell is rung after the TX lock is dropped: under TCG (and in
    /// a VM generally) it is an MMIO exit costing more than the rest of the
    /// post, and NAPI's `reap_tx` on another CPU would spin on the lock
    /// meanwhile. A doorbell only says "look at the queues", so one rung
    /// after another CPU posted more, or after the ring was torn down (the
    /// NIC ignores doorbells of disabled queues), is harmless.
    ///
    /// With `tx_batch` (the default) the doorbell is rung once per batch
    /// the stack hands over (`xmit_more`, patch 0033): only when BQL says so
    /// (`sent_queue`, patch 0034: the batch's last skb, or the queue
    /// stopped), and whenever the stack ends a batch early (`Busy`) or an
    /// skb is dropped while posted descriptors wait for one
    /// (`TxRing::db_pending`). No descriptor is left without a doorbell
    /// once the call that posted the last one returns with no more to come.
    pub(crate) fn xmit<'x>(&self, dev: &NetDevice, skb: XmitSkb<'x>) -> NetdevTx<'x> {
        let r = match self.regs.get() {
            Ok(r) => r,
            Err(_) => {
                // The device is gone: drop, as a disconnected link does.
                bump(&self.stats.tx_dropped, 1);
                return NetdevTx::Ok;
            }
        };
        let mut guard = self.tx.lock();
        let Some(tx) = &mut *guard else {
            // Stopping: drop, as a disconnected link does (the rings and
            // their descriptors are gone).
            bump(&self.stats.tx_dropped, 1);
            return NetdevTx::Ok;
        };
        let posted = self.post_skb(tx, &r, &skb);
        // Stop while a worst-case skb (a GSO skb, when TSO buffers exist)
        // could not be posted; completions wake the queue. BQL's
        // `sent_queue` below sees the stop and asks for the doorbell.
        if !self.stopped(dev) && (tx.free() == 0 || (!tx.tso_bufs.is_empty() && !tx.tso_free())) {
            // The queue exists: the stack called us on it.
            let _ = dev.stop_subqueue(self.qp);
            bump(&self.stats.tx_stop, 1);
        }
        let ring = match posted {
            Posted::Busy => {
                // The stack ends its batch here and sends `skb` again later.
                let ring = core::mem::take(&mut tx.db_pending);
                drop(guard);
                self.ring_tx(&r, ring);
                return NetdevTx::Busy(skb);
            }
            Posted::Dropped => {
                bump(&self.stats.tx_dropped, 1);
                core::mem::take(&mut tx.db_pending)
            }
            Posted::Copy | Posted::Merge => {
                bump(&self.stats.prof.tx_descs, 1);
                // Always accounted (BQL), whether batching is on or not.
                let now = skb.sent_queue(skb.len());
                if now || !tx_batch() {
                    tx.db_pending = false;
                    true
                } else {
                    tx.db_pending = true;
                    bump(&self.stats.prof.db_tx_deferred, 1);
                    false
                }
            }
        };
        match posted {
            Posted::Merge => {
                // Held until the NIC completed the descriptor.
                tx.hold(skb.into_skb());
                drop(guard);
            }
            Posted::Dropped => {
                drop(guard);
                drop(skb);
            }
            _ => {
                drop(guard);
                skb.consume();
            }
        }
        self.ring_tx(&r, ring);
        NetdevTx::Ok
    }

    /// Rings `DB_TX` if `ring`. A failed doorbell means the device is gone:
    /// the descriptors posted are never sent, and their skbs are freed when
    /// the ring is torn down.
    #[inline]
    fn ring_tx(&self, r: &Regs<'_>, ring: bool) {
        if ring && r.doorbell(regs::DB_TX).is_ok() {
            self.stats.prof.tx_doorbell();
        }
    }

    /// Posts `skb` to `tx` (not ringing the doorbell): a merge send by
    /// region key, a GSO skb as a plain TSO send, anything else copied.
    fn post_skb(&self, tx: &mut TxRing, r: &Regs<'_>, skb: &SkBuff) -> Posted {
        if tx.free() == 0 {
            // The queue should have been stopped; ask the stack to retry.
            return Posted::Busy;
        }
        if let Some(wr) = SEND_OPS.lookup(skb) {
            // A ZeroNIC send whose region is still registered, the skb's
            // payload all the send's: the NIC reads it by key (`flow/tx.rs`).
            // Otherwise (region released meanwhile; or bytes written before
            // the attach that TCP had not sent share the skb, see
            // `merge_params`) `features_check` kept GSO only for what is
            // copied whole, and it is copied like any frame below.
            let merge = wr
                .mr
                .valid
                .load(Relaxed)
                .then(|| merge_params(skb, wr))
                .flatten();
            if let Some((hdr_len, mr_offset, pay)) = merge {
                return match tx.post_merge(r, skb, wr.mr.key, mr_offset, hdr_len) {
                    Ok(_) => {
                        wr.count(true, u64::from(pay));
                        Posted::Merge
                    }
                    Err(_) => Posted::Dropped,
                };
            }
            wr.count(false, u64::from(skb.len()));
        }
        let csum = if skb.is_gso() && tx.tso_bufs.is_empty() {
            // `features_check` lets GSO skbs through only for registered
            // merge sends without CAP_PLAIN_TSO: this one's region went away
            // since. Dropped (TCP sends it again, then segmented).
            return Posted::Dropped;
        } else if skb.is_gso() {
            // Let through by `features_check` only for TCP/IPv4 (or IPv6 with
            // CAP_IPV6) within MAX_TSO_FRAME on a NIC with CAP_PLAIN_TSO:
            // the NIC segments.
            if !tx.tso_free() {
                // The queue stops whenever the last TSO buffer is taken;
                // only a race with `ethtool -G`/MTU change gets here.
                return Posted::Busy;
            }
            match tx.post_tso(r, skb) {
                Ok(()) => {
                    bump(&self.stats.tx_tso, 1);
                    bump(&self.stats.tx_tso_bytes, u64::from(skb.len()));
                    true
                }
                Err(_) => return Posted::Dropped,
            }
        } else {
            match tx.post(r, skb) {
                Ok(csum) => csum,
                Err(_) => return Posted::Dropped,
            }
        };
        bump(
            if csum {
                &self.stats.tx_needs_csum
            } else {
                &self.stats.tx_csum_none
            },
            1,
        );
        Posted::Copy
    }

    /// Consumes TX completions and wakes the queue when there is room;
    /// returns how many it consumed. The bytes of the descriptors completed
    /// (as `start_xmit` gave them to BQL: the skb's length) go to BQL after
    /// the TX lock is dropped: BQL's completion takes the stack's TX queue
    /// lock, which `start_xmit` holds while it takes the TX lock.
    fn reap_tx(&self, dev: &NetDevice, r: &Regs<'_>) -> Result<u32> {
        let mut guard = self.tx.lock();
        let Some(tx) = &mut *guard else {
            return Ok(0);
        };
        let prod = tx.txcq.prod(r)?;
        dma_mb(Read);
        let start = tx.done;
        // Merge sends' skbs completed in this pass, freed after the lock.
        let mut sent: KVec<SkBuff> = KVec::new();
        // Bytes completed, for BQL, whatever the status. Nothing returns
        // early once one is counted: bytes never completed would keep BQL's
        // limit taken until the ring is reset.
        let mut bql_bytes = 0u32;
        while tx.done != prod && tx.prod.wrapping_sub(tx.done) > 0 {
            let Ok(raw) = tx.txcq.read(tx.done) else {
                break;
            };
            let c = TxCompletion::decode(&raw);
            // CAST: u32 -> usize is lossless on every architecture Linux supports.
            let slot = tx.done as usize & (tx.bufs.len() - 1);
            if let Some(skb) = tx.skbs.get_mut(slot).and_then(Option::take) {
                // Without room the skb is freed here, under the lock: slower,
                // still correct.
                let _ = sent.push(skb, GFP_ATOMIC);
            }
            let len = tx.lens.get(slot).copied().unwrap_or(0);
            bql_bytes = bql_bytes.saturating_add(len);
            let tso = tx.tso_used.get(slot).copied().unwrap_or(false);
            if tso {
                tx.tso_done = tx.tso_done.wrapping_add(1);
                if let Some(t) = tx.tso_used.get_mut(slot) {
                    *t = false;
                }
                bump(&self.stats.tx_tso_frames, u64::from(c.frames));
            }
            if c.status == status::ST_OK {
                // A plain TSO send counts its frames, as the stack would
                // have counted its segments.
                bump(
                    &self.stats.tx_packets,
                    if tso { u64::from(c.frames.max(1)) } else { 1 },
                );
                bump(&self.stats.tx_bytes, u64::from(len));
            } else {
                bump(&self.stats.tx_errors, 1);
            }
            tx.done = tx.done.wrapping_add(1);
        }
        let mut res = Ok(());
        if tx.done != start {
            res = tx.txcq.set_cons(r, tx.done);
            if self.stopped(dev)
                && tx.free() >= tx.txq.entries() / 4
                && (tx.tso_bufs.is_empty() || tx.tso_free())
            {
                let _ = dev.wake_subqueue(self.qp);
                bump(&self.stats.tx_wake, 1);
            }
        }
        let reaped = tx.done.wrapping_sub(start);
        drop(guard);
        if bql_bytes != 0 {
            if let Err(e) = dev.tx_completed_queue(self.qp, reaped, bql_bytes) {
                kernel::pr_warn_once!(
                    "port {} queue {}: BQL completion of {} bytes failed: {:?}\n",
                    self.port,
                    self.qp,
                    bql_bytes,
                    e
                );
            }
        }
        // The NIC no longer reads their payload: the sends may complete.
        for skb in sent {
            skb.consume();
        }
        res.map(|()| reaped)
    }

    /// Receives up to `budget` frames and header-queue entries in the
    /// order the NIC produced them across the two queues, as far as TCP
    /// needs it: a frame the NIC sent to the normal queue after placing an
    /// earlier one of its flow (a retransmission of placed bytes goes
    /// there) must not reach TCP before that one's receipt, or TCP takes
    /// its copy and drops the placed bytes. The NIC publishes a header
    /// entry before any later normal completion, so every entry older than
    /// the completions seen at the producer index read first is visible
    /// after it: the entries go first, then the normal completions up to
    /// that index, and only once the entries are drained. Returns how many
    /// entries and completions it used.
    ///
    /// A flow moving to this queue pair from another (`qp_track.rs`) has
    /// its entries here wait until the other one handed on its earlier
    /// ones: the poll stops at the first such entry, and everything after
    /// it waits with it; the poll then reports its whole budget used, so
    /// that NAPI polls again.
    fn receive(&self, ctx: &mut NapiContext<'_>, budget: i32, r: &Regs<'_>) -> Result<i32> {
        let mut guard = self.rx.lock();
        let Some(rx) = &mut *guard else {
            return Ok(0);
        };
        let rx_prod = rx.rxcq.prod(r)?;
        let (mut done, mut waits) = self.receive_headers(ctx, rx, budget, r)?;
        if done < budget && !waits {
            let (frames, frames_wait) = self.receive_frames(ctx, rx, budget - done, r, rx_prod)?;
            done += frames;
            waits = frames_wait;
        }
        // How far this queue pair handed its entries on: what a moving
        // flow's fence waits for (`qp_track.rs`). GRO holds the last of
        // them only until the core flushes it as this poll returns.
        if let Some(snap) = self.snapshot() {
            snap.qps.consumed(u32::from(self.qp), rx.hdr_cons, rx.cons);
            if waits {
                snap.zc.flow_move_waits.add(1, Relaxed);
            }
        }
        Ok(if waits { budget } else { done })
    }

    /// The port's facts in the NIC layer: its queue pairs' service
    /// (`qp_track.rs`) and zero-copy counters.
    fn snapshot(&self) -> Option<&PortSnapshot> {
        self.control.port(self.port)
    }

    /// The port's queue pairs' service (`qp_track.rs`).
    fn track(&self) -> Option<&QpTrack> {
        self.snapshot().map(|p| &p.qps)
    }

    /// The queue pair's RX vector interrupted this CPU (hard IRQ context):
    /// attached flows whose application runs here come to this queue pair.
    pub(crate) fn rx_interrupt(&self) {
        if let Some(t) = self.track() {
            t.interrupted(u32::from(self.qp), CpuId::current().as_u32());
        }
    }

    /// Receives up to `budget` frames of those completed before `prod`;
    /// returns how many completions it used, and whether it stopped at one
    /// that must wait.
    fn receive_frames(
        &self,
        ctx: &mut NapiContext<'_>,
        rx: &mut RxRing,
        budget: i32,
        r: &Regs<'_>,
        prod: u32,
    ) -> Result<(i32, bool)> {
        dma_mb(Read);
        let mut done = 0;
        let mut waits = false;
        while done < budget && rx.cons != prod {
            let c = RxCompletion::decode(&rx.rxcq.read(rx.cons)?);
            // A frame of an attached flow the NIC handed to the normal path.
            if c.flags & RXF_FLOW != 0
                && self
                    .control
                    .flow(c.flow)
                    .is_some_and(|f| !f.may_deliver(u32::from(self.qp)))
            {
                waits = true;
                break;
            }
            self.deliver(ctx, rx, &c);
            rx.cons = rx.cons.wrapping_add(1);
            // The buffer just consumed is the one at the head of the RX queue
            // (buffers are used in ring order): give it back to the NIC.
            rx.post_one()?;
            done += 1;
        }
        if done > 0 {
            rx.rxcq.set_cons(r, rx.cons)?;
            rx.rxq.set_prod(r, rx.posted)?;
            r.doorbell(regs::DB_RX)?;
            bump(&self.stats.prof.db_rx, 1);
        }
        Ok((done, waits))
    }

    /// Delivers up to `budget` header-queue entries (`hdrq.rs`); returns how
    /// many it used, and whether it stopped at one that must wait.
    fn receive_headers(
        &self,
        ctx: &mut NapiContext<'_>,
        rx: &mut RxRing,
        budget: i32,
        r: &Regs<'_>,
    ) -> Result<(i32, bool)> {
        let prod = rx.hdrq.prod(r)?;
        dma_mb(Read);
        let mut done = 0;
        let mut waits = false;
        // Never more than the ring holds: the index is the device's word.
        while done < budget
            && rx.hdr_cons != prod
            && prod.wrapping_sub(rx.hdr_cons) <= rx.hdrq.entries()
        {
            let raw = rx.hdrq.read(rx.hdr_cons)?;
            let flow_index = u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]);
            let res = match self.control.flow(flow_index) {
                Some(flow) if !flow.may_deliver(u32::from(self.qp)) => {
                    waits = true;
                    break;
                }
                Some(flow) => flow.deliver_header(ctx, &raw, &self.zero),
                None => Err(ENOENT),
            };
            match res {
                Ok((packets, bytes)) => {
                    bump(&self.stats.rx_packets, packets);
                    bump(&self.stats.rx_bytes, bytes);
                }
                Err(e) if e == ENOENT => bump(&self.stats.rx_hdr_stale, 1),
                Err(e) => {
                    kernel::pr_warn_once!("port {}: header entry dropped: {:?}\n", self.port, e);
                    bump(&self.stats.rx_errors, 1)
                }
            }
            rx.hdr_cons = rx.hdr_cons.wrapping_add(1);
            done += 1;
        }
        if done > 0 {
            rx.hdrq.set_cons(r, rx.hdr_cons)?;
            r.doorbell(regs::DB_REARM)?;
            bump(&self.stats.prof.db_rearm, 1);
        }
        Ok((done, waits))
    }

    /// Copies one received frame into an skb and hands it to GRO.
    fn deliver(&self, ctx: &mut NapiContext<'_>, rx: &RxRing, c: &RxCompletion) {
        if c.status != status::ST_OK || c.len < ETH_HLEN || c.len > rx.buf_len {
            bump(&self.stats.rx_errors, 1);
            return;
        }
        let Ok(buf) = buffer(&rx.bufs, c.index) else {
            bump(&self.stats.rx_errors, 1);
            return;
        };
        let Ok(mut skb) = copy_frame(ctx, buf, c.len) else {
            bump(&self.stats.rx_dropped, 1);
            return;
        };
        // `ethtool -K zn0 rx off` clears RXCSUM: the stack verifies then.
        let verified = c.flags & (RXF_TCP | RXF_CSUM_OK) == RXF_TCP | RXF_CSUM_OK
            && ctx.dev().features().contains(Features::RXCSUM);
        let csum = if verified {
            RxChecksum::Unnecessary
        } else {
            RxChecksum::None
        };
        // The NIC's RSS hash (with `RSS_CTRL_HASH`), so the stack does not
        // compute its own (hardware spec §14).
        let hash = match c.rss_type {
            RSS_TYPE_TCP4 | RSS_TYPE_TCP6 | RSS_TYPE_UDP4 | RSS_TYPE_UDP6 => HashType::L4,
            RSS_TYPE_IPV4 | RSS_TYPE_IPV6 => HashType::L3,
            _ => HashType::None,
        };
        // The skb is new and ours alone: these cannot fail.
        let _ = skb.record_rx_queue(self.qp);
        if hash != HashType::None {
            let _ = skb.set_hash(c.rss_hash, hash);
        }
        if skb.set_rx_checksum(csum).is_err() || skb.eth_type_trans(ctx.dev()).is_err() {
            bump(&self.stats.rx_errors, 1);
            return;
        }
        bump(&self.stats.rx_packets, 1);
        bump(&self.stats.rx_bytes, u64::from(c.len));
        if csum == RxChecksum::Unnecessary {
            bump(&self.stats.rx_csum_unnecessary, 1);
        } else {
            bump(&self.stats.rx_csum_none, 1);
            if c.flags & RXF_CSUM_BAD != 0 {
                bump(&self.stats.rx_csum_bad, 1);
            }
        }
        ctx.gro_receive(skb);
    }
}

/// For a merge send's skb: the header length, the region offset of its
/// payload and the payload length, from its Ethernet/IPv4/TCP header; `None`
/// if the skb is not a well-formed TCP/IPv4 frame of that send, or not all
/// of its payload is the send's: TCP appends a send's first bytes to the
/// last skb of its write queue when that one is not sent yet and carries no
/// other send, so bytes written before the attach may come first (the
/// frame is then copied).
pub(crate) fn merge_params(skb: &SkBuff, wr: &SendWr) -> Option<(u32, u64, u32)> {
    // CAST: u32 -> usize is lossless on every architecture Linux supports.
    let t = parse_tcp(skb.data(), skb.len() as usize).ok()??;
    let hdr_len = u32::try_from(t.pay_off()).ok()?;
    let pay = skb.len().checked_sub(hdr_len)?;
    let mr_offset = wr.mr_offset_of(t.seq, pay)?;
    Some((hdr_len, mr_offset, pay))
}

/// Copies the first `len` bytes of `skb`, linear part and page fragments,
/// into `buf` (`skb_copy_bits()`).
fn copy_skb(skb: &SkBuff, buf: &Coherent<[u8]>, len: u32) -> Result {
    // CAST: u32 -> usize is lossless on every architecture Linux supports.
    if buf.size() < len as usize || len > skb.len() {
        return Err(EINVAL);
    }
    let n = kernel::ffi::c_int::try_from(len)?;
    // SAFETY: `skb` is a valid `sk_buff` borrowed for the call, holding at
    // least `len` bytes (checked); `buf` is valid for writing `len` bytes
    // (checked) and the device does not access it now: it is the buffer of a
    // slot whose descriptor is not posted yet (the caller posts it after this
    // copy), and nothing else writes it (the TX lock is held).
    let ret =
        unsafe { kernel::bindings::skb_copy_bits(skb.as_raw(), 0, buf.as_mut_ptr().cast(), n) };
    if ret == 0 {
        Ok(())
    } else {
        Err(EFAULT)
    }
}

/// Allocates an skb and copies `len` bytes of `buf` into it.
fn copy_frame(ctx: &mut NapiContext<'_>, buf: &Coherent<[u8]>, len: u32) -> Result<SkBuff> {
    let mut skb = ctx.alloc_skb(len)?;
    // CAST: u32 -> usize is lossless on every architecture Linux supports.
    let dst = skb.put_zeroed(len as usize)?;
    io_project!(buf, [try: 0..len as usize]).copy_to_slice(dst);
    Ok(skb)
}

impl NapiPoller for Queues {
    fn poll(q: &Self, ctx: &mut NapiContext<'_>, budget: i32) -> i32 {
        let Ok(r) = q.regs.get() else {
            // The device is gone: nothing will ever arrive again.
            ctx.complete_done(0);
            return 0;
        };
        let start = q.stats.prof.poll_start();
        let reaped = match q.reap_tx(ctx.dev(), &r) {
            Ok(n) => n,
            Err(e) => {
                kernel::pr_warn_once!("port {}: TX completion failed: {:?}\n", q.port, e);
                0
            }
        };
        let done = if budget > 0 {
            q.receive(ctx, budget, &r).unwrap_or(0)
        } else {
            0
        };
        if done < budget && ctx.complete_done(done) {
            // Entries that arrived while masked raise the interrupt now.
            let _ = q.mask_vectors(&r, false);
            let _ = r.doorbell(regs::DB_REARM);
            bump(&q.stats.prof.db_rearm, 1);
        }
        // CAST: `done` is in 0..=budget, not negative.
        q.stats
            .prof
            .poll_end(start, u64::from(reaped) + done as u64);
        done
    }
}

#[kernel::macros::kunit_tests(zeronic_ring_geometry)]
mod tests {
    use super::*;

    /// Every MTU the stack may set gets rings the NIC accepts, with buffers
    /// that hold a whole frame.
    #[test]
    fn geometry_fits_every_mtu() {
        let mut mtu = kernel::net::dev::ETH_MIN_MTU;
        while mtu <= regs::MAX_MTU {
            let (buf_len, slots) = ring_geometry(mtu);
            assert!(buf_len >= mtu + ETH_HLEN + VLAN_HLEN);
            assert_eq!(buf_len % 64, 0);
            assert!(slots.is_power_of_two());
            assert!((32..=256).contains(&slots));
            assert!(slots <= regs::MAX_RING);
            mtu += 97;
        }
    }

    /// `ethtool -G` bounds: a power of two, at least the default, within the
    /// NIC's `MAX_RING`, and a chosen size shrinks when the MTU grows.
    #[test]
    fn max_slots_bounds() {
        let mut mtu = kernel::net::dev::ETH_MIN_MTU;
        while mtu <= regs::MAX_MTU {
            let max = max_slots(mtu);
            assert!(max.is_power_of_two());
            assert!(max >= ring_geometry(mtu).1);
            assert!((MIN_SLOTS..=regs::MAX_RING).contains(&max));
            assert_eq!(ring_slots(Some(regs::MAX_RING), mtu), max);
            assert_eq!(ring_slots(None, mtu), ring_geometry(mtu).1);
            mtu += 97;
        }
        assert_eq!(max_slots(1500), 4096);
        assert_eq!(max_slots(9000), 1024);
        assert_eq!(max_slots(regs::MAX_MTU), 256);
    }

    /// Rings stay near the 4 MiB target unless the slot count hits a bound.
    #[test]
    fn geometry_bounds_memory() {
        assert_eq!(ring_geometry(1500), (1536, 256));
        assert_eq!(ring_geometry(9000), (9024, 256));
        let (buf_len, slots) = ring_geometry(regs::MAX_MTU);
        assert_eq!(slots, 64);
        assert!(buf_len * slots <= 2 * RING_BYTES + 64 * 32);
    }
}

//! ZACC, the emulated accelerator: BAR2 register map, device-memory layout,
//! command and completion layouts, status codes and statistics
//! (`docs/accel.md`).
//!
//! Self-contained like the NIC's files: it needs only `core` and the
//! `le_struct!` macro (included first, with `#[macro_use]`). Queue register
//! blocks (`ZA_REG_CMDQ`, `ZA_REG_CMDCQ`) have the NIC's block layout
//! (`regs::Q_BASE` .. `regs::Q_ERROR`, `docs/hardware.md` §2), which
//! `docs/accel.md` §4 repeats.

// ---- identity ----
/// `ZA_REG_MAGIC` value: the bytes "ZACC" in memory order.
pub const ZA_MAGIC: u32 = 0x4343_415a;
/// Major version; a driver refuses a different major.
pub const ZA_VERSION_MAJOR: u32 = 1;
/// Minor version; additions only.
pub const ZA_VERSION_MINOR: u32 = 0;
/// `ZA_REG_VERSION` value: `major << 16 | minor`.
pub const ZA_VERSION: u32 = (ZA_VERSION_MAJOR << 16) | ZA_VERSION_MINOR;

// ---- capability bits in ZA_REG_CAPS ----
/// FILL and VERIFY with the PRNG stream or an 8-byte pattern.
pub const ZA_CAP_FILL_VERIFY: u32 = 1 << 0;
/// HASH: FNV-1a 64 over a device-memory range, chainable.
pub const ZA_CAP_HASH: u32 = 1 << 1;
/// COPY between guest RAM and device memory, and within device memory.
pub const ZA_CAP_COPY: u32 = 1 << 2;
/// The aperture register: peers (the NIC) reach device memory by bus address.
pub const ZA_CAP_APERTURE: u32 = 1 << 3;
/// All capabilities of this version.
pub const ZA_CAPS: u32 = ZA_CAP_FILL_VERIFY | ZA_CAP_HASH | ZA_CAP_COPY | ZA_CAP_APERTURE;

// ---- BAR2 layout ----
/// Bytes of BAR2 holding the register file, from offset 0.
pub const ZA_REGS_SIZE: usize = 0x1_0000;
/// Offset of device memory ("HBM") in BAR2; device offset 0 is here.
pub const ZA_HBM_OFFSET: u64 = 0x20_0000;
/// Smallest BAR2 (a power of two): 2 MiB of registers and gap, 2 MiB of device memory.
pub const ZA_MIN_BAR2_SIZE: u64 = 0x40_0000;
/// Largest BAR2 the model creates (64 GiB).
pub const ZA_MAX_BAR2_SIZE: u64 = 0x10_0000_0000;

// ---- capacities ----
/// Largest ring (entries, a power of two); equal to the NIC's `MAX_RING`.
pub const ZA_MAX_RING: u32 = 4_096;
/// Page size of COPY page lists.
pub const ZA_PAGE_SIZE: u64 = 4_096;
/// Pages one COPY may list (256 MiB of 4 KiB pages).
pub const ZA_COPY_MAX_PAGES: u32 = 1 << 16;
/// Alignment the aperture base must have (device memory is 2 MiB-aligned in any BAR).
pub const ZA_APERTURE_ALIGN: u64 = 0x20_0000;
/// Bus addresses end below 2^52 (the largest x86-64 physical address width).
pub const ZA_APERTURE_LIMIT: u64 = 1 << 52;

// ---- doorbells and vectors ----
/// Doorbell vector: command queue producer index advanced or a control register changed.
pub const ZA_DB_CMD: u16 = 0;
/// Doorbell vector: command completions consumed or the interrupt unmasked.
pub const ZA_DB_REARM: u16 = 1;
/// Number of doorbell vectors the model listens on.
pub const ZA_NUM_DOORBELLS: u32 = 2;
/// MSI-X vector of command completions (the only one).
pub const ZA_VEC_CMD: u32 = 0;
/// MSI-X vectors the device raises.
pub const ZA_NUM_VECTORS: u32 = 1;

// ---- global registers (offsets in BAR2) ----
/// ro u32: `ZA_MAGIC` (at the offset of the NIC's `REG_MAGIC`).
pub const ZA_REG_MAGIC: usize = 0x000;
/// ro u32: `ZA_VERSION`.
pub const ZA_REG_VERSION: usize = 0x004;
/// ro u32: capability bits `ZA_CAP_*`.
pub const ZA_REG_CAPS: usize = 0x008;
/// ro u32: `ZA_NUM_VECTORS`.
pub const ZA_REG_NUM_VECTORS: usize = 0x00c;
/// ro u64: `ZA_HBM_OFFSET`.
pub const ZA_REG_HBM_OFFSET: usize = 0x010;
/// ro u64: bytes of device memory (BAR2 size - `ZA_HBM_OFFSET`).
pub const ZA_REG_HBM_SIZE: usize = 0x018;
/// ro u64: BAR2 size (a power of two).
pub const ZA_REG_BAR2_SIZE: usize = 0x020;
/// ro u32: `ZA_MAX_RING`.
pub const ZA_REG_MAX_RING: usize = 0x028;
/// ro u32: `ZA_COPY_MAX_PAGES`.
pub const ZA_REG_COPY_MAX_PAGES: usize = 0x02c;
/// ro u32: size of the guest RAM the model maps (MiB), 0 if not mapped yet.
pub const ZA_REG_DMA_WINDOW_MB: usize = 0x030;
/// rw u32: device control, `ZA_CTRL_*`.
pub const ZA_REG_DEV_CTRL: usize = 0x040;
/// ro u32: device status, `ZA_STATUS_*`.
pub const ZA_REG_DEV_STATUS: usize = 0x044;
/// ro u32: fatal error code (`ZA_ST_*`), 0 if none.
pub const ZA_REG_FATAL_CODE: usize = 0x048;
/// ro u32: fatal error detail (the queue's `ZA_QID_*`).
pub const ZA_REG_FATAL_INFO: usize = 0x04c;
/// ro u32: incremented by the model on every scan (liveness).
pub const ZA_REG_HEARTBEAT: usize = 0x050;
/// rw u32: scratch, untouched by the model except at reset.
pub const ZA_REG_SCRATCH: usize = 0x054;
/// rw u32: nonzero holds the completion interrupt (raised at unmask).
pub const ZA_REG_IRQ_MASK: usize = 0x058;
/// rw u64: bus address of device offset 0, latched on the enable edge.
pub const ZA_REG_APERTURE_BASE: usize = 0x060;
/// rw u32: aperture control, `ZA_APERTURE_ENABLE`.
pub const ZA_REG_APERTURE_CTRL: usize = 0x068;
/// ro u32: aperture status, `ZA_APERTURE_ACTIVE` / `ZA_APERTURE_REFUSED`.
pub const ZA_REG_APERTURE_STATUS: usize = 0x06c;
/// ro u32: why the aperture was refused (`ZA_ST_*`), 0 otherwise.
pub const ZA_REG_APERTURE_ERROR: usize = 0x070;
/// Queue block: command queue (driver -> device), NIC block layout.
pub const ZA_REG_CMDQ: usize = 0x100;
/// Queue block: command completion queue (device -> driver), NIC block layout.
pub const ZA_REG_CMDCQ: usize = 0x120;
/// ro u64 array: statistics since the last reset, index `ZA_STAT_*`.
pub const ZA_REG_STATS: usize = 0x200;
/// Statistics slots.
pub const ZA_STAT_SLOTS: usize = 32;

/// ZA_REG_DEV_CTRL: write 1 to reset; the model clears the register when done.
pub const ZA_CTRL_RESET: u32 = 1 << 0;
/// ZA_REG_DEV_STATUS: reset complete, registers valid.
pub const ZA_STATUS_READY: u32 = 1 << 0;
/// ZA_REG_DEV_STATUS: a fatal error happened; only a reset clears it.
pub const ZA_STATUS_FATAL: u32 = 1 << 1;
/// ZA_REG_DEV_STATUS: the guest RAM (DMA window) is mapped.
pub const ZA_STATUS_DMA_OK: u32 = 1 << 2;

/// ZA_REG_APERTURE_CTRL: publish device memory at `ZA_REG_APERTURE_BASE` (0 -> 1 edge).
pub const ZA_APERTURE_ENABLE: u32 = 1 << 0;
/// ZA_REG_APERTURE_STATUS: the aperture is published; peers reach device memory.
pub const ZA_APERTURE_ACTIVE: u32 = 1 << 0;
/// ZA_REG_APERTURE_STATUS: the base was refused (see `ZA_REG_APERTURE_ERROR`).
pub const ZA_APERTURE_REFUSED: u32 = 1 << 1;

/// Queue id of the command queue (`ZA_REG_FATAL_INFO`).
pub const ZA_QID_CMDQ: u32 = 8;
/// Queue id of the command completion queue.
pub const ZA_QID_CMDCQ: u32 = 9;

// ---- statistics (u64 slots at ZA_REG_STATS + 8 * index) ----
/// Commands completed with `ZA_ST_OK`.
pub const ZA_STAT_CMD_OK: usize = 0;
/// Commands completed with another status (`ZA_ST_MISMATCH` included).
pub const ZA_STAT_CMD_ERR: usize = 1;
/// Guest-RAM accesses refused (ring, page list or page outside guest RAM).
pub const ZA_STAT_DMA_ERR: usize = 2;
/// Commands refused because a device range lies (partly) past device memory.
pub const ZA_STAT_BOUNDS_ERR: usize = 3;
/// Device-memory bytes written by FILL.
pub const ZA_STAT_FILL_BYTES: usize = 4;
/// Device-memory bytes read by VERIFY.
pub const ZA_STAT_VERIFY_BYTES: usize = 5;
/// Device-memory bytes read by HASH.
pub const ZA_STAT_HASH_BYTES: usize = 6;
/// COPY host to device: bytes read from guest RAM and written to device memory.
pub const ZA_STAT_H2D_BYTES: usize = 7;
/// COPY device to host: bytes read from device memory and written to guest RAM.
pub const ZA_STAT_D2H_BYTES: usize = 8;
/// COPY device to device: bytes read and written within device memory.
pub const ZA_STAT_D2D_BYTES: usize = 9;
/// Device-memory bytes written by peers (the NIC) through the aperture.
pub const ZA_STAT_PEER_WRITE_BYTES: usize = 10;
/// Device-memory bytes read by peers through the aperture.
pub const ZA_STAT_PEER_READ_BYTES: usize = 11;
/// Peer accesses refused: they overlap the aperture but do not lie wholly inside it.
pub const ZA_STAT_PEER_ERR: usize = 12;
/// Doorbells received.
pub const ZA_STAT_DOORBELLS: usize = 13;
/// MSI-X interrupts raised.
pub const ZA_STAT_IRQS: usize = 14;
/// Resets performed (the one slot a reset does not clear).
pub const ZA_STAT_RESETS: usize = 15;
/// Aperture enables refused.
pub const ZA_STAT_APERTURE_REFUSED: usize = 16;
/// VERIFY commands that found a mismatch.
pub const ZA_STAT_VERIFY_MISMATCH: usize = 17;
/// Statistics slots in use (the rest read 0).
pub const ZA_STAT_COUNT: usize = 18;

// ---- status codes (values shared with the NIC's `ST_*` where the meaning is) ----
/// Success.
pub const ZA_ST_OK: u16 = 0;
/// Unknown opcode.
pub const ZA_ST_BAD_OPCODE: u16 = 1;
/// Malformed command: unknown flag or direction, zero length, nonzero reserved
/// field, page count or alignment wrong, aperture base misaligned or too high.
pub const ZA_ST_BAD_DESC: u16 = 2;
/// A guest-RAM address (ring, page list, page) lies (partly) outside guest RAM.
pub const ZA_ST_DMA: u16 = 3;
/// A device range lies (partly) past the end of device memory.
pub const ZA_ST_BOUNDS: u16 = 6;
/// The aperture would overlap guest RAM or another device's aperture.
pub const ZA_ST_CONFLICT: u16 = 8;
/// Queue configuration refused (base, size or alignment).
pub const ZA_ST_QUEUE_CONFIG: u16 = 15;
/// VERIFY: a byte differs from the stream; `result` = its offset in the range.
pub const ZA_ST_MISMATCH: u16 = 16;

// ---- commands ----
/// Command: no operation.
pub const ZA_CMD_NOP: u16 = 1;
/// Command: fill a device range from a stream ([`ZaCmdStream`]).
pub const ZA_CMD_FILL: u16 = 2;
/// Command: compare a device range with a stream ([`ZaCmdStream`]).
pub const ZA_CMD_VERIFY: u16 = 3;
/// Command: FNV-1a 64 of a device range ([`ZaCmdHash`]); result = the hash.
pub const ZA_CMD_HASH: u16 = 4;
/// Command: copy between guest RAM and device memory, or within it ([`ZaCmdCopy`]).
pub const ZA_CMD_COPY: u16 = 5;

/// FILL/VERIFY flag: the stream is the 8-byte `pattern` repeated, not the PRNG.
pub const ZA_STREAM_PATTERN: u16 = 1 << 0;

/// COPY direction: guest RAM (page list) to device memory.
pub const ZA_COPY_H2D: u32 = 1;
/// COPY direction: device memory to guest RAM (page list).
pub const ZA_COPY_D2H: u32 = 2;
/// COPY direction: device memory to device memory (overlap allowed).
pub const ZA_COPY_D2D: u32 = 3;

/// FNV-1a 64 offset basis: `ZaCmdHash.init` of a hash's first range.
pub const ZA_FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64 prime.
pub const ZA_FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// SplitMix64 increment (the golden-ratio constant) of the PRNG stream.
pub const ZA_PRNG_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// The PRNG stream's 64-bit word `i` for `seed`: SplitMix64's output
/// number `i` (from 0) when started at state `seed`. Stream byte `o` is
/// byte `o % 8` (little-endian) of word `o / 8`.
pub const fn za_prng_word(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(ZA_PRNG_GAMMA));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a 64 of `data` continued from `h` (`ZA_FNV_OFFSET_BASIS` to start).
pub const fn za_fnv1a(mut h: u64, data: &[u8]) -> u64 {
    let mut i = 0;
    while i < data.len() {
        h ^= data[i] as u64;
        h = h.wrapping_mul(ZA_FNV_PRIME);
        i += 1;
    }
    h
}

le_struct! {
    /// ZA_CMD_FILL / ZA_CMD_VERIFY: device range `[dev_off, dev_off + len)`
    /// against stream bytes `[stream_off, stream_off + len)`.
    pub struct ZaCmdStream(64) {
        /// ZA_CMD_FILL or ZA_CMD_VERIFY.
        pub opcode: u16,
        /// `ZA_STREAM_*`.
        pub flags: u16,
        /// Echoed.
        pub cookie: u32,
        /// First device-memory byte.
        pub dev_off: u64,
        /// Bytes (nonzero).
        pub len: u64,
        /// PRNG seed (0 with ZA_STREAM_PATTERN).
        pub seed: u64,
        /// Stream offset of the first byte.
        pub stream_off: u64,
        /// ZA_STREAM_PATTERN: the 8 bytes, little-endian; otherwise 0.
        pub pattern: u64,
        /// Reserved, 0.
        pub rsvd0: u64,
        /// Reserved, 0.
        pub rsvd1: u64,
    }
}

le_struct! {
    /// ZA_CMD_HASH: FNV-1a 64 of `[dev_off, dev_off + len)` continued from `init`.
    pub struct ZaCmdHash(64) {
        /// ZA_CMD_HASH.
        pub opcode: u16,
        /// 0.
        pub flags: u16,
        /// Echoed.
        pub cookie: u32,
        /// First device-memory byte.
        pub dev_off: u64,
        /// Bytes (nonzero).
        pub len: u64,
        /// Hash state to continue from (ZA_FNV_OFFSET_BASIS, or an earlier result).
        pub init: u64,
        /// Reserved, 0.
        pub rsvd0: u64,
        /// Reserved, 0.
        pub rsvd1: u64,
        /// Reserved, 0.
        pub rsvd2: u64,
        /// Reserved, 0.
        pub rsvd3: u64,
    }
}

le_struct! {
    /// ZA_CMD_COPY: `len` bytes between device memory at `dev_off` and a
    /// guest-RAM range given as a page list (H2D, D2H), or from device
    /// memory at `src_off` to `dev_off` (D2D).
    pub struct ZaCmdCopy(64) {
        /// ZA_CMD_COPY.
        pub opcode: u16,
        /// 0.
        pub flags: u16,
        /// Echoed.
        pub cookie: u32,
        /// `ZA_COPY_*`.
        pub dir: u32,
        /// H2D/D2H: pages in the list, ceil((first_off + len) / 4096); D2D: 0.
        pub npages: u32,
        /// Bytes (nonzero).
        pub len: u64,
        /// Device offset: destination (H2D, D2D) or source (D2H).
        pub dev_off: u64,
        /// H2D/D2H: guest-physical address of the page list (8-byte aligned); D2D: 0.
        pub page_list: u64,
        /// H2D/D2H: offset of the guest range in its first page (< 4096); D2D: 0.
        pub first_off: u32,
        /// Reserved, 0.
        pub rsvd0: u32,
        /// D2D: source device offset; H2D/D2H: 0.
        pub src_off: u64,
        /// Reserved, 0.
        pub rsvd1: u64,
    }
}

le_struct! {
    /// Command completion entry (device -> driver), 16 bytes, in command
    /// order; the NIC's `CmdCompletion` layout.
    pub struct ZaCompletion(16) {
        /// `cookie` of the command.
        pub cookie: u32,
        /// `opcode` of the command.
        pub opcode: u16,
        /// `ZA_ST_*`.
        pub status: u16,
        /// HASH: the hash. VERIFY with ZA_ST_MISMATCH: offset of the first
        /// differing byte from `dev_off`. Otherwise 0.
        pub result: u64,
    }
}

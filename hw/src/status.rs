//! Status codes of completions (TX, RX, header queue, commands), queue
//! errors and the fatal error register, and event codes.

/// Success.
pub const ST_OK: u16 = 0;
/// Unknown opcode.
pub const ST_BAD_OPCODE: u16 = 1;
/// Malformed descriptor fields (flags, lengths, alignment, reserved bits).
pub const ST_BAD_DESC: u16 = 2;
/// A DMA address lies (partly) outside guest RAM.
pub const ST_DMA: u16 = 3;
/// MR key unknown, revoked or of an older generation.
pub const ST_BAD_KEY: u16 = 4;
/// MR lacks the access right the operation needs.
pub const ST_ACCESS: u16 = 5;
/// Offset + length beyond the memory region.
pub const ST_BOUNDS: u16 = 6;
/// Table, list or queue full.
pub const ST_NO_SPACE: u16 = 7;
/// Object already exists (same 5-tuple installed).
pub const ST_EXISTS: u16 = 8;
/// Object not found (flow index not installed).
pub const ST_NOT_FOUND: u16 = 9;
/// Frame larger than the MTU or than the RX buffer.
pub const ST_TOO_BIG: u16 = 10;
/// Frame not parseable as the descriptor claims (headers, lengths).
pub const ST_MALFORMED: u16 = 11;
/// TCP checksum wrong.
pub const ST_CSUM: u16 = 12;
/// Port disabled, absent or without link.
pub const ST_PORT: u16 = 13;
/// Feature not supported by this version.
pub const ST_UNSUPPORTED: u16 = 14;
/// Queue configuration refused (base, size or alignment).
pub const ST_QUEUE_CONFIG: u16 = 15;

// ---- event queue codes ----
/// A queue was refused or failed; `info` = queue id (`qid`).
pub const EV_QUEUE_ERROR: u16 = 1;
/// The device entered the fatal state; `info` = fatal code.
pub const EV_FATAL: u16 = 2;
/// Link state changed; `info` = 1 up, 0 down.
pub const EV_LINK: u16 = 3;

// ---- queue ids (for EV_QUEUE_ERROR and REG_FATAL_INFO) ----
/// Queue kind: TX queue.
pub const QK_TXQ: u32 = 0;
/// Queue kind: TX completion queue.
pub const QK_TXCQ: u32 = 1;
/// Queue kind: RX buffer queue.
pub const QK_RXQ: u32 = 2;
/// Queue kind: RX completion queue.
pub const QK_RXCQ: u32 = 3;
/// Queue kind: header queue.
pub const QK_HDRQ: u32 = 4;
/// Queue kind: command queue.
pub const QK_CMDQ: u32 = 8;
/// Queue kind: command completion queue.
pub const QK_CMDCQ: u32 = 9;
/// Queue kind: event queue.
pub const QK_EVQ: u32 = 10;

/// Queue id: `port << 8 | kind` (port 0 for global queues).
pub const fn qid(port: u32, kind: u32) -> u32 {
    (port << 8) | kind
}

/// Queue id of a queue of queue pair `qp` of port `port`:
/// `port << 8 | qp << 4 | kind` (`qid(port, kind)` for queue pair 0).
pub const fn qp_qid(port: u32, qp: u32, kind: u32) -> u32 {
    (port << 8) | (qp << 4) | kind
}

//! Pins docs/accel.md to hw/src/accel.rs, as spec_tables.rs pins
//! docs/hardware.md: every constant and struct field offset in the spec
//! tables must equal the crate's, and every public constant of accel.rs
//! must be documented. The table parser is doc_tables/'s.

use std::collections::BTreeMap;
use zeronic_hw::accel;

#[macro_use]
mod doc_tables;
use doc_tables::*;

#[allow(clippy::unnecessary_cast)] // constants of several widths
fn code_constants() -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    consts!(m, accel:
        ZA_MAGIC,
        ZA_VERSION_MAJOR,
        ZA_VERSION_MINOR,
        ZA_VERSION,
        ZA_CAP_FILL_VERIFY,
        ZA_CAP_HASH,
        ZA_CAP_COPY,
        ZA_CAP_APERTURE,
        ZA_CAPS,
        ZA_REGS_SIZE,
        ZA_HBM_OFFSET,
        ZA_MIN_BAR2_SIZE,
        ZA_MAX_BAR2_SIZE,
        ZA_MAX_RING,
        ZA_PAGE_SIZE,
        ZA_COPY_MAX_PAGES,
        ZA_APERTURE_ALIGN,
        ZA_APERTURE_LIMIT,
        ZA_DB_CMD,
        ZA_DB_REARM,
        ZA_NUM_DOORBELLS,
        ZA_VEC_CMD,
        ZA_NUM_VECTORS,
        ZA_REG_MAGIC,
        ZA_REG_VERSION,
        ZA_REG_CAPS,
        ZA_REG_NUM_VECTORS,
        ZA_REG_HBM_OFFSET,
        ZA_REG_HBM_SIZE,
        ZA_REG_BAR2_SIZE,
        ZA_REG_MAX_RING,
        ZA_REG_COPY_MAX_PAGES,
        ZA_REG_DMA_WINDOW_MB,
        ZA_REG_DEV_CTRL,
        ZA_REG_DEV_STATUS,
        ZA_REG_FATAL_CODE,
        ZA_REG_FATAL_INFO,
        ZA_REG_HEARTBEAT,
        ZA_REG_SCRATCH,
        ZA_REG_IRQ_MASK,
        ZA_REG_APERTURE_BASE,
        ZA_REG_APERTURE_CTRL,
        ZA_REG_APERTURE_STATUS,
        ZA_REG_APERTURE_ERROR,
        ZA_REG_CMDQ,
        ZA_REG_CMDCQ,
        ZA_REG_STATS,
        ZA_STAT_SLOTS,
        ZA_CTRL_RESET,
        ZA_STATUS_READY,
        ZA_STATUS_FATAL,
        ZA_STATUS_DMA_OK,
        ZA_APERTURE_ENABLE,
        ZA_APERTURE_ACTIVE,
        ZA_APERTURE_REFUSED,
        ZA_QID_CMDQ,
        ZA_QID_CMDCQ,
        ZA_STAT_CMD_OK,
        ZA_STAT_CMD_ERR,
        ZA_STAT_DMA_ERR,
        ZA_STAT_BOUNDS_ERR,
        ZA_STAT_FILL_BYTES,
        ZA_STAT_VERIFY_BYTES,
        ZA_STAT_HASH_BYTES,
        ZA_STAT_H2D_BYTES,
        ZA_STAT_D2H_BYTES,
        ZA_STAT_D2D_BYTES,
        ZA_STAT_PEER_WRITE_BYTES,
        ZA_STAT_PEER_READ_BYTES,
        ZA_STAT_PEER_ERR,
        ZA_STAT_DOORBELLS,
        ZA_STAT_IRQS,
        ZA_STAT_RESETS,
        ZA_STAT_APERTURE_REFUSED,
        ZA_STAT_VERIFY_MISMATCH,
        ZA_STAT_COUNT,
        ZA_ST_OK,
        ZA_ST_BAD_OPCODE,
        ZA_ST_BAD_DESC,
        ZA_ST_DMA,
        ZA_ST_BOUNDS,
        ZA_ST_CONFLICT,
        ZA_ST_QUEUE_CONFIG,
        ZA_ST_MISMATCH,
        ZA_CMD_NOP,
        ZA_CMD_FILL,
        ZA_CMD_VERIFY,
        ZA_CMD_HASH,
        ZA_CMD_COPY,
        ZA_STREAM_PATTERN,
        ZA_COPY_H2D,
        ZA_COPY_D2H,
        ZA_COPY_D2D,
        ZA_FNV_OFFSET_BASIS,
        ZA_FNV_PRIME,
        ZA_PRNG_GAMMA,
    );
    m
}

fn code_layouts() -> Vec<(String, usize, Fields)> {
    vec![
        layout!(
            accel::ZaCmdStream,
            opcode,
            flags,
            cookie,
            dev_off,
            len,
            seed,
            stream_off,
            pattern,
            rsvd0,
            rsvd1
        ),
        layout!(
            accel::ZaCmdHash,
            opcode,
            flags,
            cookie,
            dev_off,
            len,
            init,
            rsvd0,
            rsvd1,
            rsvd2,
            rsvd3
        ),
        layout!(
            accel::ZaCmdCopy,
            opcode,
            flags,
            cookie,
            dir,
            npages,
            len,
            dev_off,
            page_list,
            first_off,
            rsvd0,
            src_off,
            rsvd1
        ),
        layout!(accel::ZaCompletion, cookie, opcode, status, result),
    ]
}

#[test]
fn accel_constants_match_code() {
    check_constants("accel.md", &code_constants(), &source_constants(&["accel"]));
}

#[test]
fn accel_layouts_match_code() {
    check_layouts("accel.md", code_layouts());
}

#[test]
fn magic_is_zacc_and_differs_from_the_nic() {
    assert_eq!(&accel::ZA_MAGIC.to_le_bytes(), b"ZACC");
    assert_ne!(accel::ZA_MAGIC, zeronic_hw::regs::ZN_MAGIC);
    assert_eq!(accel::ZA_REG_MAGIC, zeronic_hw::regs::REG_MAGIC);
    // The NIC driver's size check lets a ZACC through to the magic check.
    assert!(accel::ZA_MIN_BAR2_SIZE >= zeronic_hw::regs::BAR2_SIZE as u64);
    // Shared status values mean the same on both devices.
    use zeronic_hw::status::*;
    assert_eq!(accel::ZA_ST_BAD_OPCODE, ST_BAD_OPCODE);
    assert_eq!(accel::ZA_ST_BAD_DESC, ST_BAD_DESC);
    assert_eq!(accel::ZA_ST_DMA, ST_DMA);
    assert_eq!(accel::ZA_ST_BOUNDS, ST_BOUNDS);
    assert_eq!(accel::ZA_ST_QUEUE_CONFIG, ST_QUEUE_CONFIG);
}

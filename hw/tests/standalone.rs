//! Each layout file must compile as a module outside the crate (the kernel
//! module includes them with `#[path]`), so include them here the same way.
#![allow(dead_code)]

#[macro_use]
#[path = "../src/le_struct.rs"]
mod le_struct;

#[path = "../src/accel.rs"]
mod accel;
#[path = "../src/cmd.rs"]
mod cmd;
#[path = "../src/desc.rs"]
mod desc;
#[path = "../src/regs.rs"]
mod regs;
#[path = "../src/status.rs"]
mod status;

#[test]
fn standalone_modules_match_crate() {
    assert_eq!(regs::ZN_MAGIC, zeronic_hw::regs::ZN_MAGIC);
    assert_eq!(desc::TxDesc::SIZE, 64);
    assert_eq!(cmd::CmdMrReg::SIZE, 64);
    assert_eq!(status::ST_CSUM, zeronic_hw::status::ST_CSUM);
    assert_eq!(accel::ZA_MAGIC, zeronic_hw::accel::ZA_MAGIC);
    assert_eq!(accel::ZaCmdCopy::SIZE, 64);
}

#[test]
fn encode_is_little_endian_and_round_trips() {
    let d = zeronic_hw::desc::TxDesc {
        opcode: 0x0102,
        buf_len: 0x0304_0506,
        buf_addr: 0x1122_3344_5566_7788,
        cookie: 0xdead_beef,
        ..Default::default()
    };
    let b = d.encode();
    assert_eq!(&b[0..2], &[0x02, 0x01]);
    assert_eq!(&b[4..8], &[0x06, 0x05, 0x04, 0x03]);
    assert_eq!(&b[8..16], &[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
    assert_eq!(&b[40..48], &0xdead_beefu64.to_le_bytes());
    assert_eq!(zeronic_hw::desc::TxDesc::decode(&b), d);
    // Field offsets are what the spec tables say.
    assert_eq!(core::mem::offset_of!(zeronic_hw::desc::TxDesc, mr_key), 24);
    assert_eq!(
        core::mem::offset_of!(zeronic_hw::desc::HdrEntry, cursor),
        24
    );
    assert_eq!(&zeronic_hw::regs::ZN_MAGIC.to_le_bytes(), b"ZNIC");
}

//! Pins docs/hardware.md to the code: every constant and every struct
//! field offset in the spec tables must equal the crate's, and every public
//! constant of the layout files must be documented.

use std::collections::BTreeMap;
use zeronic_hw::{cmd, desc, regs, status};

/// (field name, offset, size) rows of one struct.
type Fields = Vec<(String, usize, usize)>;

fn doc() -> String {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/hardware.md");
    std::fs::read_to_string(p).expect("read docs/hardware.md")
}

fn parse_num(s: &str) -> u64 {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).expect("hex value"),
        None => s.parse().expect("decimal value"),
    }
}

/// `| `NAME` | value | ... |` rows.
fn doc_constants(doc: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in doc.lines() {
        let cols: Vec<&str> = line.split(" | ").collect();
        if cols.len() >= 3 && cols[0].starts_with("| `") && cols[0].ends_with('`') {
            let name = cols[0].trim_start_matches("| `").trim_end_matches('`');
            if name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                assert!(
                    m.insert(name.to_string(), parse_num(cols[1])).is_none(),
                    "{name} twice"
                );
            }
        }
    }
    m
}

/// `#### `Name` (N bytes)` tables of `| offset | size | `field` | ... |`.
fn doc_layouts(doc: &str) -> BTreeMap<String, (usize, Fields)> {
    let mut m = BTreeMap::new();
    let mut cur: Option<String> = None;
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("#### `") {
            let (name, rest) = h.split_once('`').expect("struct heading");
            let n = rest
                .trim()
                .trim_start_matches('(')
                .split(' ')
                .next()
                .expect("size");
            m.insert(
                name.to_string(),
                (n.parse().expect("struct size"), Vec::new()),
            );
            cur = Some(name.to_string());
            continue;
        }
        if line.starts_with("#") {
            cur = None;
        }
        let Some(c) = &cur else { continue };
        let cols: Vec<&str> = line.split(" | ").collect();
        if cols.len() >= 4 && cols[2].starts_with('`') && cols[0].starts_with("| ") {
            let off = parse_num(cols[0].trim_start_matches("| ")) as usize;
            let size = parse_num(cols[1]) as usize;
            let f = cols[2].trim_matches('`').to_string();
            m.get_mut(c).expect("struct").1.push((f, off, size));
        }
    }
    m
}

fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
    core::mem::size_of::<F>()
}

macro_rules! layout {
    ($t:ty, $($f:ident),*) => {
        (stringify!($t).rsplit("::").next().unwrap().trim().to_string(), <$t>::SIZE, vec![
            $((stringify!($f).to_string(), core::mem::offset_of!($t, $f), field_size(|x: &$t| &x.$f)),)*
        ])
    };
}

#[allow(clippy::unnecessary_cast)] // constants of several widths
fn code_constants() -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    m.insert("PCI_VENDOR_ID".to_string(), regs::PCI_VENDOR_ID as u64);
    m.insert("PCI_DEVICE_ID".to_string(), regs::PCI_DEVICE_ID as u64);
    m.insert("BAR0_INTRMASK".to_string(), regs::BAR0_INTRMASK as u64);
    m.insert("BAR0_INTRSTATUS".to_string(), regs::BAR0_INTRSTATUS as u64);
    m.insert("BAR0_IVPOSITION".to_string(), regs::BAR0_IVPOSITION as u64);
    m.insert("BAR0_DOORBELL".to_string(), regs::BAR0_DOORBELL as u64);
    m.insert("NIC_PEER_ID".to_string(), regs::NIC_PEER_ID as u64);
    m.insert("DB_CMD".to_string(), regs::DB_CMD as u64);
    m.insert("DB_TX".to_string(), regs::DB_TX as u64);
    m.insert("DB_RX".to_string(), regs::DB_RX as u64);
    m.insert("DB_REARM".to_string(), regs::DB_REARM as u64);
    m.insert("NUM_DOORBELLS".to_string(), regs::NUM_DOORBELLS as u64);
    m.insert("ZN_MAGIC".to_string(), regs::ZN_MAGIC as u64);
    m.insert(
        "ZN_VERSION_MAJOR".to_string(),
        regs::ZN_VERSION_MAJOR as u64,
    );
    m.insert(
        "ZN_VERSION_MINOR".to_string(),
        regs::ZN_VERSION_MINOR as u64,
    );
    m.insert("ZN_VERSION".to_string(), regs::ZN_VERSION as u64);
    m.insert("BAR2_SIZE".to_string(), regs::BAR2_SIZE as u64);
    m.insert("CAP_RX_SPLIT".to_string(), regs::CAP_RX_SPLIT as u64);
    m.insert("CAP_TX_MERGE".to_string(), regs::CAP_TX_MERGE as u64);
    m.insert("CAP_TSO".to_string(), regs::CAP_TSO as u64);
    m.insert("CAP_TX_CSUM".to_string(), regs::CAP_TX_CSUM as u64);
    m.insert("CAP_RX_CSUM".to_string(), regs::CAP_RX_CSUM as u64);
    m.insert("CAP_RX_COALESCE".to_string(), regs::CAP_RX_COALESCE as u64);
    m.insert("CAP_RX_RING".to_string(), regs::CAP_RX_RING as u64);
    m.insert("ZN_CAPS".to_string(), regs::ZN_CAPS as u64);
    m.insert("MAX_PORTS".to_string(), regs::MAX_PORTS as u64);
    m.insert("MAX_MTU".to_string(), regs::MAX_MTU as u64);
    m.insert("ETH_HLEN".to_string(), regs::ETH_HLEN as u64);
    m.insert("MAX_FRAME".to_string(), regs::MAX_FRAME as u64);
    m.insert("DEFAULT_MTU".to_string(), regs::DEFAULT_MTU as u64);
    m.insert("MR_CAPACITY".to_string(), regs::MR_CAPACITY as u64);
    m.insert("MR_MAX_PAGES".to_string(), regs::MR_MAX_PAGES as u64);
    m.insert("MR_PAGE_SIZE".to_string(), regs::MR_PAGE_SIZE as u64);
    m.insert("FLOW_CAPACITY".to_string(), regs::FLOW_CAPACITY as u64);
    m.insert("MS_PER_FLOW".to_string(), regs::MS_PER_FLOW as u64);
    m.insert("MAX_RING".to_string(), regs::MAX_RING as u64);
    m.insert("NUM_VECTORS".to_string(), regs::NUM_VECTORS as u64);
    m.insert("MAX_VECTORS".to_string(), regs::MAX_VECTORS as u64);
    m.insert(
        "DEFAULT_COALESCE_BYTES".to_string(),
        regs::DEFAULT_COALESCE_BYTES as u64,
    );
    m.insert("REG_MAGIC".to_string(), regs::REG_MAGIC as u64);
    m.insert("REG_VERSION".to_string(), regs::REG_VERSION as u64);
    m.insert("REG_CAPS".to_string(), regs::REG_CAPS as u64);
    m.insert("REG_NUM_PORTS".to_string(), regs::REG_NUM_PORTS as u64);
    m.insert("REG_MAX_MTU".to_string(), regs::REG_MAX_MTU as u64);
    m.insert("REG_NUM_VECTORS".to_string(), regs::REG_NUM_VECTORS as u64);
    m.insert("REG_MR_CAPACITY".to_string(), regs::REG_MR_CAPACITY as u64);
    m.insert(
        "REG_MR_MAX_PAGES".to_string(),
        regs::REG_MR_MAX_PAGES as u64,
    );
    m.insert(
        "REG_FLOW_CAPACITY".to_string(),
        regs::REG_FLOW_CAPACITY as u64,
    );
    m.insert("REG_MS_PER_FLOW".to_string(), regs::REG_MS_PER_FLOW as u64);
    m.insert("REG_MAX_RING".to_string(), regs::REG_MAX_RING as u64);
    m.insert("REG_BAR2_SIZE".to_string(), regs::REG_BAR2_SIZE as u64);
    m.insert(
        "REG_DMA_WINDOW_MB".to_string(),
        regs::REG_DMA_WINDOW_MB as u64,
    );
    m.insert("REG_DEV_CTRL".to_string(), regs::REG_DEV_CTRL as u64);
    m.insert("REG_DEV_STATUS".to_string(), regs::REG_DEV_STATUS as u64);
    m.insert("REG_FATAL_CODE".to_string(), regs::REG_FATAL_CODE as u64);
    m.insert("REG_FATAL_INFO".to_string(), regs::REG_FATAL_INFO as u64);
    m.insert("REG_HEARTBEAT".to_string(), regs::REG_HEARTBEAT as u64);
    m.insert("REG_SCRATCH".to_string(), regs::REG_SCRATCH as u64);
    m.insert("REG_GSTATS".to_string(), regs::REG_GSTATS as u64);
    m.insert("GSTAT_SLOTS".to_string(), regs::GSTAT_SLOTS as u64);
    m.insert("DEV_CTRL_RESET".to_string(), regs::DEV_CTRL_RESET as u64);
    m.insert("DEV_CTRL_ENABLE".to_string(), regs::DEV_CTRL_ENABLE as u64);
    m.insert(
        "DEV_STATUS_READY".to_string(),
        regs::DEV_STATUS_READY as u64,
    );
    m.insert(
        "DEV_STATUS_FATAL".to_string(),
        regs::DEV_STATUS_FATAL as u64,
    );
    m.insert(
        "DEV_STATUS_DMA_OK".to_string(),
        regs::DEV_STATUS_DMA_OK as u64,
    );
    m.insert(
        "DEV_STATUS_ENABLED".to_string(),
        regs::DEV_STATUS_ENABLED as u64,
    );
    m.insert("GSTAT_CMD_OK".to_string(), regs::GSTAT_CMD_OK as u64);
    m.insert("GSTAT_CMD_ERR".to_string(), regs::GSTAT_CMD_ERR as u64);
    m.insert("GSTAT_DMA_ERR".to_string(), regs::GSTAT_DMA_ERR as u64);
    m.insert("GSTAT_DOORBELLS".to_string(), regs::GSTAT_DOORBELLS as u64);
    m.insert("GSTAT_IRQS".to_string(), regs::GSTAT_IRQS as u64);
    m.insert("GSTAT_QUEUE_ERR".to_string(), regs::GSTAT_QUEUE_ERR as u64);
    m.insert("GSTAT_EVQ_DROP".to_string(), regs::GSTAT_EVQ_DROP as u64);
    m.insert("GSTAT_RESETS".to_string(), regs::GSTAT_RESETS as u64);
    m.insert("REG_CMDQ".to_string(), regs::REG_CMDQ as u64);
    m.insert("REG_CMDCQ".to_string(), regs::REG_CMDCQ as u64);
    m.insert("REG_EVQ".to_string(), regs::REG_EVQ as u64);
    m.insert(
        "QUEUE_BLOCK_SIZE".to_string(),
        regs::QUEUE_BLOCK_SIZE as u64,
    );
    m.insert("Q_BASE".to_string(), regs::Q_BASE as u64);
    m.insert("Q_SIZE".to_string(), regs::Q_SIZE as u64);
    m.insert("Q_CTRL".to_string(), regs::Q_CTRL as u64);
    m.insert("Q_PROD".to_string(), regs::Q_PROD as u64);
    m.insert("Q_CONS".to_string(), regs::Q_CONS as u64);
    m.insert("Q_STATUS".to_string(), regs::Q_STATUS as u64);
    m.insert("Q_ERROR".to_string(), regs::Q_ERROR as u64);
    m.insert("Q_CTRL_ENABLE".to_string(), regs::Q_CTRL_ENABLE as u64);
    m.insert(
        "Q_STATUS_ENABLED".to_string(),
        regs::Q_STATUS_ENABLED as u64,
    );
    m.insert("Q_STATUS_ERROR".to_string(), regs::Q_STATUS_ERROR as u64);
    m.insert("REG_VECTORS".to_string(), regs::REG_VECTORS as u64);
    m.insert("VEC_BLOCK_SIZE".to_string(), regs::VEC_BLOCK_SIZE as u64);
    m.insert("VEC_MASK".to_string(), regs::VEC_MASK as u64);
    m.insert("VEC_ITR_USECS".to_string(), regs::VEC_ITR_USECS as u64);
    m.insert("VEC_ITR_ENTRIES".to_string(), regs::VEC_ITR_ENTRIES as u64);
    m.insert("VEC_RAISED".to_string(), regs::VEC_RAISED as u64);
    m.insert("VEC_ASYNC".to_string(), regs::VEC_ASYNC as u64);
    m.insert("REG_PORTS".to_string(), regs::REG_PORTS as u64);
    m.insert("PORT_STRIDE".to_string(), regs::PORT_STRIDE as u64);
    m.insert("PORT_CTRL".to_string(), regs::PORT_CTRL as u64);
    m.insert("PORT_MTU".to_string(), regs::PORT_MTU as u64);
    m.insert("PORT_MAC_LO".to_string(), regs::PORT_MAC_LO as u64);
    m.insert("PORT_MAC_HI".to_string(), regs::PORT_MAC_HI as u64);
    m.insert(
        "PORT_COALESCE_BYTES".to_string(),
        regs::PORT_COALESCE_BYTES as u64,
    );
    m.insert("PORT_LINK".to_string(), regs::PORT_LINK as u64);
    m.insert("PORT_TXQ".to_string(), regs::PORT_TXQ as u64);
    m.insert("PORT_TXCQ".to_string(), regs::PORT_TXCQ as u64);
    m.insert("PORT_RXQ".to_string(), regs::PORT_RXQ as u64);
    m.insert("PORT_RXCQ".to_string(), regs::PORT_RXCQ as u64);
    m.insert("PORT_HDRQ".to_string(), regs::PORT_HDRQ as u64);
    m.insert("PORT_STATS".to_string(), regs::PORT_STATS as u64);
    m.insert("PSTAT_SLOTS".to_string(), regs::PSTAT_SLOTS as u64);
    m.insert(
        "PORT_CTRL_ENABLE".to_string(),
        regs::PORT_CTRL_ENABLE as u64,
    );
    m.insert("PSTAT_TX_FRAMES".to_string(), regs::PSTAT_TX_FRAMES as u64);
    m.insert("PSTAT_TX_BYTES".to_string(), regs::PSTAT_TX_BYTES as u64);
    m.insert("PSTAT_TX_ERRORS".to_string(), regs::PSTAT_TX_ERRORS as u64);
    m.insert(
        "PSTAT_TX_MERGE_BYTES".to_string(),
        regs::PSTAT_TX_MERGE_BYTES as u64,
    );
    m.insert("PSTAT_RX_FRAMES".to_string(), regs::PSTAT_RX_FRAMES as u64);
    m.insert("PSTAT_RX_BYTES".to_string(), regs::PSTAT_RX_BYTES as u64);
    m.insert("PSTAT_RX_NORMAL".to_string(), regs::PSTAT_RX_NORMAL as u64);
    m.insert("PSTAT_RX_SPLIT".to_string(), regs::PSTAT_RX_SPLIT as u64);
    m.insert(
        "PSTAT_RX_PLACED_BYTES".to_string(),
        regs::PSTAT_RX_PLACED_BYTES as u64,
    );
    m.insert(
        "PSTAT_RX_DUP_BYTES".to_string(),
        regs::PSTAT_RX_DUP_BYTES as u64,
    );
    m.insert(
        "PSTAT_RX_FALLBACK".to_string(),
        regs::PSTAT_RX_FALLBACK as u64,
    );
    m.insert(
        "PSTAT_RX_CSUM_ERR".to_string(),
        regs::PSTAT_RX_CSUM_ERR as u64,
    );
    m.insert("PSTAT_RX_NO_BUF".to_string(), regs::PSTAT_RX_NO_BUF as u64);
    m.insert(
        "PSTAT_RX_HDRQ_FULL".to_string(),
        regs::PSTAT_RX_HDRQ_FULL as u64,
    );
    m.insert(
        "PSTAT_RX_MALFORMED".to_string(),
        regs::PSTAT_RX_MALFORMED as u64,
    );
    m.insert(
        "PSTAT_RX_BUF_SMALL".to_string(),
        regs::PSTAT_RX_BUF_SMALL as u64,
    );
    m.insert(
        "PSTAT_HDRQ_ENTRIES".to_string(),
        regs::PSTAT_HDRQ_ENTRIES as u64,
    );
    m.insert(
        "PSTAT_RX_COALESCED".to_string(),
        regs::PSTAT_RX_COALESCED as u64,
    );
    m.insert(
        "PSTAT_RX_PLACE_ERR".to_string(),
        regs::PSTAT_RX_PLACE_ERR as u64,
    );
    m.insert(
        "PSTAT_TX_BAD_DESC".to_string(),
        regs::PSTAT_TX_BAD_DESC as u64,
    );
    m.insert(
        "PSTAT_TX_DMA_ERR".to_string(),
        regs::PSTAT_TX_DMA_ERR as u64,
    );
    m.insert(
        "PSTAT_TX_KEY_ERR".to_string(),
        regs::PSTAT_TX_KEY_ERR as u64,
    );
    m.insert(
        "PSTAT_TX_NO_LINK".to_string(),
        regs::PSTAT_TX_NO_LINK as u64,
    );
    m.insert(
        "PSTAT_TX_TSO_FRAMES".to_string(),
        regs::PSTAT_TX_TSO_FRAMES as u64,
    );
    m.insert(
        "PSTAT_RX_DUP_FRAMES".to_string(),
        regs::PSTAT_RX_DUP_FRAMES as u64,
    );
    m.insert(
        "PSTAT_RX_OOO_FRAMES".to_string(),
        regs::PSTAT_RX_OOO_FRAMES as u64,
    );
    m.insert("ST_OK".to_string(), status::ST_OK as u64);
    m.insert("ST_BAD_OPCODE".to_string(), status::ST_BAD_OPCODE as u64);
    m.insert("ST_BAD_DESC".to_string(), status::ST_BAD_DESC as u64);
    m.insert("ST_DMA".to_string(), status::ST_DMA as u64);
    m.insert("ST_BAD_KEY".to_string(), status::ST_BAD_KEY as u64);
    m.insert("ST_ACCESS".to_string(), status::ST_ACCESS as u64);
    m.insert("ST_BOUNDS".to_string(), status::ST_BOUNDS as u64);
    m.insert("ST_NO_SPACE".to_string(), status::ST_NO_SPACE as u64);
    m.insert("ST_EXISTS".to_string(), status::ST_EXISTS as u64);
    m.insert("ST_NOT_FOUND".to_string(), status::ST_NOT_FOUND as u64);
    m.insert("ST_TOO_BIG".to_string(), status::ST_TOO_BIG as u64);
    m.insert("ST_MALFORMED".to_string(), status::ST_MALFORMED as u64);
    m.insert("ST_CSUM".to_string(), status::ST_CSUM as u64);
    m.insert("ST_PORT".to_string(), status::ST_PORT as u64);
    m.insert("ST_UNSUPPORTED".to_string(), status::ST_UNSUPPORTED as u64);
    m.insert(
        "ST_QUEUE_CONFIG".to_string(),
        status::ST_QUEUE_CONFIG as u64,
    );
    m.insert("EV_QUEUE_ERROR".to_string(), status::EV_QUEUE_ERROR as u64);
    m.insert("EV_FATAL".to_string(), status::EV_FATAL as u64);
    m.insert("EV_LINK".to_string(), status::EV_LINK as u64);
    m.insert("QK_TXQ".to_string(), status::QK_TXQ as u64);
    m.insert("QK_TXCQ".to_string(), status::QK_TXCQ as u64);
    m.insert("QK_RXQ".to_string(), status::QK_RXQ as u64);
    m.insert("QK_RXCQ".to_string(), status::QK_RXCQ as u64);
    m.insert("QK_HDRQ".to_string(), status::QK_HDRQ as u64);
    m.insert("QK_CMDQ".to_string(), status::QK_CMDQ as u64);
    m.insert("QK_CMDCQ".to_string(), status::QK_CMDCQ as u64);
    m.insert("QK_EVQ".to_string(), status::QK_EVQ as u64);
    m.insert("TX_OP_PLAIN".to_string(), desc::TX_OP_PLAIN as u64);
    m.insert("TX_OP_MERGE".to_string(), desc::TX_OP_MERGE as u64);
    m.insert(
        "TXF_CSUM_PARTIAL".to_string(),
        desc::TXF_CSUM_PARTIAL as u64,
    );
    m.insert("TXF_TSO".to_string(), desc::TXF_TSO as u64);
    m.insert("TXF_ALL".to_string(), desc::TXF_ALL as u64);
    m.insert("RXF_TCP".to_string(), desc::RXF_TCP as u64);
    m.insert("RXF_CSUM_OK".to_string(), desc::RXF_CSUM_OK as u64);
    m.insert("RXF_FLOW".to_string(), desc::RXF_FLOW as u64);
    m.insert("RXF_CSUM_BAD".to_string(), desc::RXF_CSUM_BAD as u64);
    m.insert("HDRQ_ENTRY_SIZE".to_string(), desc::HDRQ_ENTRY_SIZE as u64);
    m.insert("HDRQ_HDR_OFFSET".to_string(), desc::HDRQ_HDR_OFFSET as u64);
    m.insert("HDRQ_HDR_MAX".to_string(), desc::HDRQ_HDR_MAX as u64);
    m.insert("HDRF_COALESCED".to_string(), desc::HDRF_COALESCED as u64);
    m.insert("HDRF_OOO".to_string(), desc::HDRF_OOO as u64);
    m.insert("HDRF_DUP".to_string(), desc::HDRF_DUP as u64);
    m.insert("HDRF_NO_PAYLOAD".to_string(), desc::HDRF_NO_PAYLOAD as u64);
    m.insert("CMD_NOP".to_string(), cmd::CMD_NOP as u64);
    m.insert("CMD_MR_REG".to_string(), cmd::CMD_MR_REG as u64);
    m.insert("CMD_MR_INVAL".to_string(), cmd::CMD_MR_INVAL as u64);
    m.insert("CMD_FLOW_INSTALL".to_string(), cmd::CMD_FLOW_INSTALL as u64);
    m.insert("CMD_FLOW_UPDATE".to_string(), cmd::CMD_FLOW_UPDATE as u64);
    m.insert("CMD_FLOW_REMOVE".to_string(), cmd::CMD_FLOW_REMOVE as u64);
    m.insert("CMD_MS_POST".to_string(), cmd::CMD_MS_POST as u64);
    m.insert(
        "MR_ACCESS_LOCAL_READ".to_string(),
        cmd::MR_ACCESS_LOCAL_READ as u64,
    );
    m.insert(
        "MR_ACCESS_LOCAL_WRITE".to_string(),
        cmd::MR_ACCESS_LOCAL_WRITE as u64,
    );
    m.insert("MR_ACCESS_ALL".to_string(), cmd::MR_ACCESS_ALL as u64);
    m.insert("FLOW_RX_SEGMENTS".to_string(), cmd::FLOW_RX_SEGMENTS as u64);
    m.insert("FLOW_RX_RING".to_string(), cmd::FLOW_RX_RING as u64);
    m.insert("FLOWU_RING_HEAD".to_string(), cmd::FLOWU_RING_HEAD as u64);
    m.insert("FLOWU_CURSOR".to_string(), cmd::FLOWU_CURSOR as u64);
    m.insert("IPPROTO_TCP".to_string(), cmd::IPPROTO_TCP as u64);
    m.insert("MS_DIR_RECV".to_string(), cmd::MS_DIR_RECV as u64);
    m.insert("MS_DIR_SEND".to_string(), cmd::MS_DIR_SEND as u64);
    m
}

fn code_layouts() -> Vec<(String, usize, Fields)> {
    vec![
        layout!(
            desc::TxDesc,
            opcode,
            flags,
            buf_len,
            buf_addr,
            csum_start,
            csum_offset,
            mss,
            rsvd0,
            mr_key,
            pay_len,
            mr_offset,
            cookie,
            rsvd1,
            rsvd2
        ),
        layout!(desc::TxCompletion, cookie, index, status, frames),
        layout!(desc::RxBufDesc, addr, len, rsvd0),
        layout!(
            desc::RxCompletion,
            index,
            len,
            status,
            flags,
            flow,
            rsvd0,
            rsvd1
        ),
        layout!(
            desc::HdrEntry,
            status,
            flags,
            flow,
            seq,
            len,
            stream_off,
            cursor,
            placed,
            nsegs,
            hdr_len,
            port,
            tcp_flags,
            rsvd0,
            rsvd1,
            rsvd2
        ),
        layout!(desc::Event, code, port, info, detail),
        layout!(cmd::CmdHeader, opcode, flags, cookie),
        layout!(
            cmd::CmdMrReg,
            opcode,
            flags,
            cookie,
            access,
            npages,
            first_off,
            rsvd0,
            length,
            page_list,
            rsvd1,
            rsvd2,
            rsvd3
        ),
        layout!(
            cmd::CmdMrInval,
            opcode,
            flags,
            cookie,
            key,
            rsvd0,
            rsvd1,
            rsvd2,
            rsvd3,
            rsvd4,
            rsvd5,
            rsvd6
        ),
        layout!(
            cmd::CmdFlow,
            opcode,
            flags,
            cookie,
            flow,
            port,
            proto,
            local_ip,
            remote_ip,
            local_port,
            remote_port,
            rx_isn,
            tx_isn,
            mode,
            rsvd0,
            ring_key,
            ring_size,
            ring_offset,
            stream_off
        ),
        layout!(
            cmd::CmdMsPost,
            opcode,
            flags,
            cookie,
            flow,
            dir,
            rsvd0,
            mr_key,
            len,
            mr_offset,
            seg_cookie,
            rsvd1,
            rsvd2,
            rsvd3
        ),
        layout!(cmd::CmdCompletion, cookie, opcode, status, result, result2),
    ]
}

/// Names declared `pub const` in the layout sources (what must be documented).
fn source_constants() -> Vec<String> {
    let mut v = Vec::new();
    for f in ["regs", "status", "desc", "cmd"] {
        let p = format!("{}/src/{f}.rs", env!("CARGO_MANIFEST_DIR"));
        let src = std::fs::read_to_string(&p).expect("read source");
        for line in src.lines() {
            let l = line.trim();
            if let Some(rest) = l.strip_prefix("pub const ") {
                if l.contains('$') || rest.starts_with("fn ") {
                    continue;
                }
                v.push(rest.split(':').next().expect("name").to_string());
            }
        }
    }
    v
}

#[test]
fn spec_constants_match_code() {
    let doc = doc_constants(&doc());
    let code = code_constants();
    for name in source_constants() {
        assert!(
            code.contains_key(&name),
            "{name}: add it to code_constants()"
        );
        assert!(
            doc.contains_key(&name),
            "{name}: not documented in docs/hardware.md"
        );
    }
    for (name, v) in &doc {
        let c = code
            .get(name)
            .unwrap_or_else(|| panic!("docs name unknown constant {name}"));
        assert_eq!(v, c, "{name}: spec says {v:#x}, code has {c:#x}");
    }
}

#[test]
fn spec_layouts_match_code() {
    let doc = doc_layouts(&doc());
    let code = code_layouts();
    assert_eq!(doc.len(), code.len(), "struct tables in the spec");
    for (name, size, fields) in code {
        let (dsize, dfields) = doc
            .get(&name)
            .unwrap_or_else(|| panic!("{name} not in spec"));
        assert_eq!(*dsize, size, "{name} size");
        assert_eq!(dfields, &fields, "{name} fields (name, offset, size)");
        let sum: usize = fields.iter().map(|f| f.2).sum();
        assert_eq!(sum, size, "{name}: fields must cover the struct");
    }
}

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

/// Inserts `module::NAME` under `"NAME"` for each listed constant.
macro_rules! consts {
    ($m:ident, $module:ident: $($name:ident),* $(,)?) => {
        $($m.insert(stringify!($name).to_string(), $module::$name as u64);)*
    };
}

#[allow(clippy::unnecessary_cast)] // constants of several widths
fn code_constants() -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    consts!(m, regs:
        PCI_VENDOR_ID,
        PCI_DEVICE_ID,
        BAR0_INTRMASK,
        BAR0_INTRSTATUS,
        BAR0_IVPOSITION,
        BAR0_DOORBELL,
        NIC_PEER_ID,
        DB_CMD,
        DB_TX,
        DB_RX,
        DB_REARM,
        NUM_DOORBELLS,
        ZN_MAGIC,
        ZN_VERSION_MAJOR,
        ZN_VERSION_MINOR,
        ZN_VERSION,
        BAR2_SIZE,
        CAP_RX_SPLIT,
        CAP_TX_MERGE,
        CAP_TSO,
        CAP_TX_CSUM,
        CAP_RX_CSUM,
        CAP_RX_COALESCE,
        CAP_RX_RING,
        CAP_PLAIN_TSO,
        ZN_CAPS,
        MAX_PORTS,
        MAX_MTU,
        ETH_HLEN,
        VLAN_HLEN,
        ETH_P_8021Q,
        MAX_FRAME,
        MAX_TSO_FRAME,
        DEFAULT_MTU,
        MR_CAPACITY,
        MR_MAX_PAGES,
        MR_MAX_EXTENTS,
        MR_PAGE_SIZE,
        FLOW_CAPACITY,
        MS_PER_FLOW,
        FLOW_MAX_OOO,
        MAX_RING,
        NUM_VECTORS,
        MAX_VECTORS,
        DEFAULT_COALESCE_BYTES,
        IPV4_MAX_TOT_LEN,
        REG_MAGIC,
        REG_VERSION,
        REG_CAPS,
        REG_NUM_PORTS,
        REG_MAX_MTU,
        REG_NUM_VECTORS,
        REG_MR_CAPACITY,
        REG_MR_MAX_PAGES,
        REG_FLOW_CAPACITY,
        REG_MS_PER_FLOW,
        REG_MAX_RING,
        REG_BAR2_SIZE,
        REG_DMA_WINDOW_MB,
        REG_MR_MAX_EXTENTS,
        REG_DEV_CTRL,
        REG_DEV_STATUS,
        REG_FATAL_CODE,
        REG_FATAL_INFO,
        REG_HEARTBEAT,
        REG_SCRATCH,
        REG_GSTATS,
        GSTAT_SLOTS,
        DEV_CTRL_RESET,
        DEV_CTRL_ENABLE,
        DEV_STATUS_READY,
        DEV_STATUS_FATAL,
        DEV_STATUS_DMA_OK,
        DEV_STATUS_ENABLED,
        GSTAT_CMD_OK,
        GSTAT_CMD_ERR,
        GSTAT_DMA_ERR,
        GSTAT_DOORBELLS,
        GSTAT_IRQS,
        GSTAT_QUEUE_ERR,
        GSTAT_EVQ_DROP,
        GSTAT_RESETS,
        REG_CMDQ,
        REG_CMDCQ,
        REG_EVQ,
        QUEUE_BLOCK_SIZE,
        Q_BASE,
        Q_SIZE,
        Q_CTRL,
        Q_PROD,
        Q_CONS,
        Q_STATUS,
        Q_ERROR,
        Q_CTRL_ENABLE,
        Q_STATUS_ENABLED,
        Q_STATUS_ERROR,
        REG_VECTORS,
        VEC_BLOCK_SIZE,
        VEC_MASK,
        VEC_ITR_USECS,
        VEC_ITR_ENTRIES,
        VEC_RAISED,
        VEC_ASYNC,
        REG_PORTS,
        PORT_STRIDE,
        PORT_CTRL,
        PORT_MTU,
        PORT_MAC_LO,
        PORT_MAC_HI,
        PORT_COALESCE_BYTES,
        PORT_LINK,
        PORT_TXQ,
        PORT_TXCQ,
        PORT_RXQ,
        PORT_RXCQ,
        PORT_HDRQ,
        PORT_STATS,
        PSTAT_SLOTS,
        PORT_CTRL_ENABLE,
        PSTAT_TX_FRAMES,
        PSTAT_TX_BYTES,
        PSTAT_TX_ERRORS,
        PSTAT_TX_MERGE_BYTES,
        PSTAT_RX_FRAMES,
        PSTAT_RX_BYTES,
        PSTAT_RX_NORMAL,
        PSTAT_RX_SPLIT,
        PSTAT_RX_PLACED_BYTES,
        PSTAT_RX_DUP_BYTES,
        PSTAT_RX_FALLBACK,
        PSTAT_RX_CSUM_ERR,
        PSTAT_RX_NO_BUF,
        PSTAT_RX_HDRQ_FULL,
        PSTAT_RX_MALFORMED,
        PSTAT_RX_BUF_SMALL,
        PSTAT_HDRQ_ENTRIES,
        PSTAT_RX_COALESCED,
        PSTAT_RX_PLACE_ERR,
        PSTAT_TX_BAD_DESC,
        PSTAT_TX_DMA_ERR,
        PSTAT_TX_KEY_ERR,
        PSTAT_TX_NO_LINK,
        PSTAT_TX_TSO_FRAMES,
        PSTAT_RX_DUP_FRAMES,
        PSTAT_RX_OOO_FRAMES,
        PSTAT_RX_OOO_FULL,
        PSTAT_RX_UNACCEPTABLE,
    );
    consts!(m, status:
        ST_OK,
        ST_BAD_OPCODE,
        ST_BAD_DESC,
        ST_DMA,
        ST_BAD_KEY,
        ST_ACCESS,
        ST_BOUNDS,
        ST_NO_SPACE,
        ST_EXISTS,
        ST_NOT_FOUND,
        ST_TOO_BIG,
        ST_MALFORMED,
        ST_CSUM,
        ST_PORT,
        ST_UNSUPPORTED,
        ST_QUEUE_CONFIG,
        EV_QUEUE_ERROR,
        EV_FATAL,
        EV_LINK,
        QK_TXQ,
        QK_TXCQ,
        QK_RXQ,
        QK_RXCQ,
        QK_HDRQ,
        QK_CMDQ,
        QK_CMDCQ,
        QK_EVQ,
    );
    consts!(m, desc:
        TX_OP_PLAIN,
        TX_OP_MERGE,
        TXF_CSUM_PARTIAL,
        TXF_TSO,
        TXF_ALL,
        RXF_TCP,
        RXF_CSUM_OK,
        RXF_FLOW,
        RXF_CSUM_BAD,
        HDRQ_ENTRY_SIZE,
        HDRQ_HDR_OFFSET,
        HDRQ_HDR_MAX,
        HDRF_COALESCED,
        HDRF_OOO,
        HDRF_DUP,
        HDRF_NO_PAYLOAD,
    );
    consts!(m, cmd:
        CMD_NOP,
        CMD_MR_REG,
        CMD_MR_INVAL,
        CMD_FLOW_INSTALL,
        CMD_FLOW_UPDATE,
        CMD_FLOW_REMOVE,
        CMD_MS_POST,
        MR_ACCESS_LOCAL_READ,
        MR_ACCESS_LOCAL_WRITE,
        MR_ACCESS_ALL,
        MR_KEY_SLOT_BITS,
        STREAM_OFF_LIMIT,
        FLOW_RX_SEGMENTS,
        FLOW_RX_RING,
        FLOWU_RING_HEAD,
        FLOWU_CURSOR,
        FLOWU_EDGE,
        FLOW_MAX_WSCALE,
        IPPROTO_TCP,
        MS_DIR_RECV,
        MS_DIR_SEND,
    );
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
            mr_offset,
            cookie,
            pay_len,
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
            ring_key,
            ring_offset,
            stream_off,
            ring_size,
            mode,
            rx_wscale
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
            mr_offset,
            seg_cookie,
            len,
            rsvd1,
            rsvd2,
            rsvd3
        ),
        layout!(cmd::CmdCompletion, cookie, opcode, status, result),
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
        for (f, off, fsize) in &fields {
            assert_eq!(off % fsize, 0, "{name}.{f}: not naturally aligned");
        }
    }
}

//! Pins docs/accel.md to hw/src/accel.rs, as spec_tables.rs pins
//! docs/hardware.md: every constant and struct field offset in the spec
//! tables must equal the crate's, and every public constant of accel.rs
//! must be documented. (The table parser is spec_tables.rs's.)

use std::collections::BTreeMap;
use zeronic_hw::accel;

/// (field name, offset, size) rows of one struct.
type Fields = Vec<(String, usize, usize)>;

fn doc() -> String {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/accel.md");
    std::fs::read_to_string(p).expect("read docs/accel.md")
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
        if line.starts_with('#') {
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

macro_rules! consts {
    ($m:ident, $module:ident: $($name:ident),* $(,)?) => {
        $($m.insert(stringify!($name).to_string(), $module::$name as u64);)*
    };
}

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

/// Names declared `pub const` in accel.rs (what must be documented).
fn source_constants() -> Vec<String> {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/src/accel.rs");
    let src = std::fs::read_to_string(p).expect("read source");
    src.lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter(|r| !r.starts_with("fn "))
        .map(|r| r.split(':').next().expect("name").to_string())
        .collect()
}

#[test]
fn accel_constants_match_code() {
    let doc = doc_constants(&doc());
    let code = code_constants();
    for name in source_constants() {
        assert!(
            code.contains_key(&name),
            "{name}: add it to code_constants()"
        );
        assert!(
            doc.contains_key(&name),
            "{name}: not documented in docs/accel.md"
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
fn accel_layouts_match_code() {
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

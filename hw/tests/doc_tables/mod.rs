//! The spec tables' parser, shared by the tests that pin a spec in
//! `docs/` to the layouts of `hw/src/`: `| `NAME` | value | ... |` rows
//! of constants, and `#### `Name` (N bytes)` tables of fields.

use std::collections::BTreeMap;

/// (field name, offset, size) rows of one struct.
pub type Fields = Vec<(String, usize, usize)>;

/// The text of `docs/NAME`.
pub fn doc(name: &str) -> String {
    let p = format!("{}/../docs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {p}: {e}"))
}

pub fn parse_num(s: &str) -> u64 {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).expect("hex value"),
        None => s.parse().expect("decimal value"),
    }
}

/// `| `NAME` | value | ... |` rows.
pub fn doc_constants(doc: &str) -> BTreeMap<String, u64> {
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
pub fn doc_layouts(doc: &str) -> BTreeMap<String, (usize, Fields)> {
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

pub fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
    core::mem::size_of::<F>()
}

#[macro_export]
macro_rules! layout {
    ($t:ty, $($f:ident),*) => {
        (stringify!($t).rsplit("::").next().unwrap().trim().to_string(), <$t>::SIZE, vec![
            $((stringify!($f).to_string(), core::mem::offset_of!($t, $f), $crate::doc_tables::field_size(|x: &$t| &x.$f)),)*
        ])
    };
}

/// Inserts `module::NAME` under `"NAME"` for each listed constant.
#[macro_export]
macro_rules! consts {
    ($m:ident, $module:ident: $($name:ident),* $(,)?) => {
        $($m.insert(stringify!($name).to_string(), $module::$name as u64);)*
    };
}

/// Names declared `pub const` at the top level (not `const fn`, not in a
/// macro, not associated constants such as a layout's `SIZE`) in the given
/// files of `hw/src/` (what the spec must document).
pub fn source_constants(files: &[&str]) -> Vec<String> {
    let mut v = Vec::new();
    for f in files {
        let p = format!("{}/src/{f}.rs", env!("CARGO_MANIFEST_DIR"));
        let src = std::fs::read_to_string(&p).expect("read source");
        for line in src.lines() {
            let l = line.trim();
            if line.starts_with(char::is_whitespace) {
                continue;
            }
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

/// Every constant of the sources is in the code's table and documented in
/// `docs/DOC`, and every documented one has the code's value.
pub fn check_constants(doc_name: &str, code: &BTreeMap<String, u64>, source: &[String]) {
    let doc = doc_constants(&doc(doc_name));
    for name in source {
        assert!(
            code.contains_key(name),
            "{name}: add it to code_constants()"
        );
        assert!(
            doc.contains_key(name),
            "{name}: not documented in docs/{doc_name}"
        );
    }
    for (name, v) in &doc {
        let c = code
            .get(name)
            .unwrap_or_else(|| panic!("docs name unknown constant {name}"));
        assert_eq!(v, c, "{name}: spec says {v:#x}, code has {c:#x}");
    }
}

/// Every layout of the code is a table of `docs/DOC` with the same size and
/// fields, its fields cover it and each is naturally aligned.
pub fn check_layouts(doc_name: &str, code: Vec<(String, usize, Fields)>) {
    let doc = doc_layouts(&doc(doc_name));
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

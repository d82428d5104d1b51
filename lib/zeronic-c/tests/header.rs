//! `include/libzeronic.h` against the library: every exported `zn_*`
//! function is declared and nothing else is, and the header compiles with
//! the structs' sizes the library uses.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn names(text: &str, after: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices(after) {
        let rest = &text[i + after.len()..];
        let n: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if n.starts_with("zn_") && rest[n.len()..].starts_with('(') {
            out.insert(n);
        }
    }
    out
}

fn dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn header_declares_exactly_the_exports() {
    let src = std::fs::read_to_string(dir().join("src/lib.rs")).unwrap();
    let hdr = std::fs::read_to_string(dir().join("include/libzeronic.h")).unwrap();
    let exported = names(&src, "extern \"C\" fn ");
    // Declarations: "type zn_name(" / "*zn_name(".
    let mut declared = names(&hdr, " ");
    declared.extend(names(&hdr, "*"));
    assert!(exported.len() >= 25, "{exported:?}");
    assert_eq!(exported, declared);
}

#[test]
fn header_compiles_and_sizes_agree() {
    let Ok(cc) = which_cc() else {
        eprintln!("no C compiler: skipped");
        return;
    };
    let tmp = std::env::temp_dir().join(format!("zn-hdr-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let c = tmp.join("t.c");
    std::fs::write(
        &c,
        "#include <libzeronic.h>\n#include <stdio.h>\nint main(void){printf(\"%zu %zu\\n\", sizeof(struct zn_lease), sizeof(struct zn_cache_stats));return 0;}\n",
    )
    .unwrap();
    let exe = tmp.join("t");
    let uapi = dir().join("../../uapi");
    let st = Command::new(cc)
        .args(["-Wall", "-Werror", "-std=c11", "-o"])
        .arg(&exe)
        .arg(&c)
        .arg(format!("-I{}", dir().join("include").display()))
        .arg(format!("-I{}", uapi.display()))
        .status()
        .unwrap();
    assert!(st.success());
    let out = Command::new(&exe).output().unwrap();
    let s = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        s.trim(),
        format!(
            "{} {}",
            size_of::<zn::cache::CLease>(),
            size_of::<zn::cache::CacheStats>()
        )
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

fn which_cc() -> Result<&'static str, ()> {
    for cc in ["cc", "gcc", "clang"] {
        if Command::new(cc).arg("--version").output().is_ok() {
            return Ok(cc);
        }
    }
    Err(())
}

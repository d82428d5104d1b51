//! Generates the bindings of `linux/zeronic.h` with bindgen (libclang).
//!
//! libclang: `LIBCLANG_PATH` if set; else the one `make setup` installs in
//! the project's venv (`$ZN_CACHE/venv/.../clang/native`, `ZN_CACHE`
//! defaulting to `~/.cache/zeronic` as in scripts/lib.sh); else clang-sys's
//! own search (`llvm-config`, `/usr/lib/llvm-*`: Debian's `libclang-dev`).

use std::env;
use std::path::{Path, PathBuf};

const HEADER: &str = "linux/zeronic.h";

/// The ioctl numbers are function-like macros (`_IOWR(...)`), which bindgen
/// cannot evaluate; the initializers of an enum are constant expressions
/// clang evaluates, so the numbers still come from the header itself.
const WRAPPER: &str = r#"
#include <linux/zeronic.h>
enum zeronic_ioc {
	ZERONIC_IOC_QUERY_NR = ZERONIC_IOC_QUERY,
	ZERONIC_IOC_MR_REG_NR = ZERONIC_IOC_MR_REG,
	ZERONIC_IOC_MR_DEREG_NR = ZERONIC_IOC_MR_DEREG,
	ZERONIC_IOC_CQ_CREATE_NR = ZERONIC_IOC_CQ_CREATE,
	ZERONIC_IOC_CQ_DESTROY_NR = ZERONIC_IOC_CQ_DESTROY,
	ZERONIC_IOC_FLOW_ATTACH_NR = ZERONIC_IOC_FLOW_ATTACH,
	ZERONIC_IOC_FLOW_DETACH_NR = ZERONIC_IOC_FLOW_DETACH,
	ZERONIC_IOC_POST_NR = ZERONIC_IOC_POST,
	ZERONIC_IOC_STREAM_CONSUME_NR = ZERONIC_IOC_STREAM_CONSUME,
	ZERONIC_IOC_FLOW_QUERY_NR = ZERONIC_IOC_FLOW_QUERY,
};
"#;

fn cache_dir() -> Option<PathBuf> {
    if let Some(c) = env::var_os("ZN_CACHE") {
        return Some(PathBuf::from(c));
    }
    if let Some(x) = env::var_os("XDG_CACHE_HOME") {
        return Some(Path::new(&x).join("zeronic"));
    }
    env::var_os("HOME").map(|h| Path::new(&h).join(".cache/zeronic"))
}

/// `$ZN_CACHE/venv/lib/python3*/site-packages/clang/native`, if it holds a
/// libclang.
fn venv_libclang() -> Option<PathBuf> {
    let lib = cache_dir()?.join("venv/lib");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&lib)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path().join("site-packages/clang/native"))
        .filter(|d| d.join("libclang.so").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    println!("cargo:rerun-if-changed={}", manifest.join(HEADER).display());
    println!("cargo:rerun-if-changed=build.rs");
    for v in ["LIBCLANG_PATH", "ZN_CACHE", "XDG_CACHE_HOME"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    if env::var_os("LIBCLANG_PATH").is_none() {
        if let Some(dir) = venv_libclang() {
            // clang-sys reads LIBCLANG_PATH when bindgen loads libclang below;
            // this build script is single-threaded.
            env::set_var("LIBCLANG_PATH", dir);
        } else {
            // Shown if loading fails below.
            eprintln!(
                "zeronic-uapi: no LIBCLANG_PATH and no libclang in the project's venv \
                 ({:?}/venv); trying the system's. 'make setup' installs it.",
                cache_dir()
            );
        }
    }

    let bindings = bindgen::Builder::default()
        .header_contents("zeronic_uapi_wrapper.h", WRAPPER)
        .clang_arg(format!("-I{}", manifest.display()))
        .allowlist_type("zeronic_.*")
        .allowlist_var("ZERONIC_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .layout_tests(true)
        .generate_comments(true)
        .use_core()
        .generate()
        .unwrap_or_else(|e| {
            panic!(
                "bindgen on {HEADER} failed: {e}\n\
                 (libclang is needed: run 'make setup', which installs it in the \
                 project's venv, install Debian's libclang-dev, or set LIBCLANG_PATH)"
            )
        });
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("zeronic.rs");
    bindings
        .write_to_file(&out)
        .unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}

//! The guest's normalisation: one module per tool whose output
//! scripts/bench-guest reads, each the typed form of an inline python3 it
//! had before (same words, same tables, same number formats: pyfmt.rs).

pub mod ab;
pub mod breakdown;
pub mod icount;
pub mod perftest;
pub mod prof;
pub mod shim_apps;
pub mod zn_perf;

use anyhow::{Context, Result};
use std::path::Path;

/// A tool's output file as text (bytes that are not UTF-8 replaced).
pub fn read(path: &Path) -> Result<String> {
    let b = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(String::from_utf8_lossy(&b).into_owned())
}

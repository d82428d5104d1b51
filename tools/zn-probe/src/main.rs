//! `zn-probe`: run inside a guest. Finds ivshmem functions (1af4:1110) under
//! /sys/bus/pci/devices, maps each one's BAR2 (`resource2`) and prints the
//! ZeroNIC identity header. Exit status 0 if a ZeroNIC was found.
//!
//! `zn-probe [--sysfs DIR] [--resource FILE]` (`--resource` reads a BAR2
//! image directly, e.g. for tests).

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use zeronic_hw::regs::*;

/// Identity header read from BAR2.
#[derive(Debug, PartialEq, Eq)]
struct Identity {
    magic: u32,
    version: u32,
    caps: u32,
    ports: u32,
    max_mtu: u32,
    vectors: u32,
    status: u32,
    dma_mb: u32,
}

impl Identity {
    fn is_zeronic(&self) -> bool {
        self.magic == ZN_MAGIC && self.version >> 16 == ZN_VERSION_MAJOR
    }
}

fn read_identity(file: &File) -> Result<Identity, String> {
    // SAFETY: a read-only shared mapping of the BAR; we only read u32s
    // with volatile loads and never create references into it.
    let map = unsafe { memmap2::MmapOptions::new().len(4096).map(file) }
        .map_err(|e| format!("mmap BAR2: {e}"))?;
    let r = |off: usize| -> u32 {
        let p = map[off..off + 4].as_ptr().cast::<u32>();
        // SAFETY: off + 4 <= 4096 (bounds-checked slice above), 4-aligned.
        u32::from_le(unsafe { p.read_volatile() })
    };
    Ok(Identity {
        magic: r(REG_MAGIC),
        version: r(REG_VERSION),
        caps: r(REG_CAPS),
        ports: r(REG_NUM_PORTS),
        max_mtu: r(REG_MAX_MTU),
        vectors: r(REG_NUM_VECTORS),
        status: r(REG_DEV_STATUS),
        dma_mb: r(REG_DMA_WINDOW_MB),
    })
}

fn open_bar(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .read(true)
        .open(path)
        .map_err(|e| format!("open {}: {e}", path.display()))
}

fn hex_attr(dir: &Path, name: &str) -> Option<u32> {
    let s = fs::read_to_string(dir.join(name)).ok()?;
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

fn report(what: &str, id: &Identity) -> bool {
    let m = id.magic.to_le_bytes();
    let text: String = m
        .iter()
        .map(|&b| if b.is_ascii_graphic() { b as char } else { '.' })
        .collect();
    println!(
        "{what}: magic={:#010x} (\"{text}\") version={}.{} caps={:#x} ports={} max_mtu={} vectors={} status={:#x} dma_window={}MiB",
        id.magic,
        id.version >> 16,
        id.version & 0xffff,
        id.caps,
        id.ports,
        id.max_mtu,
        id.vectors,
        id.status,
        id.dma_mb
    );
    let ok = id.is_zeronic();
    println!(
        "{what}: {}",
        if ok { "zeronic ok" } else { "not a ZeroNIC" }
    );
    ok
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut sysfs = PathBuf::from("/sys/bus/pci/devices");
    let mut resource: Option<PathBuf> = None;
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--sysfs", Some(v)) => sysfs = v.into(),
            ("--resource", Some(v)) => resource = Some(v.into()),
            _ => {
                eprintln!("usage: zn-probe [--sysfs DIR] [--resource FILE]");
                return ExitCode::from(2);
            }
        }
    }
    let mut found = false;
    let mut targets = Vec::new();
    if let Some(r) = resource {
        targets.push((r.display().to_string(), r));
    } else {
        let entries = match fs::read_dir(&sysfs) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("read {}: {e}", sysfs.display());
                return ExitCode::FAILURE;
            }
        };
        let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        dirs.sort();
        for d in dirs {
            if hex_attr(&d, "vendor") == Some(PCI_VENDOR_ID as u32)
                && hex_attr(&d, "device") == Some(PCI_DEVICE_ID as u32)
            {
                let name = d
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                targets.push((format!("{name} (1af4:1110)"), d.join("resource2")));
            }
        }
        if targets.is_empty() {
            eprintln!("no ivshmem device (1af4:1110) under {}", sysfs.display());
        }
    }
    for (what, path) in targets {
        match open_bar(&path).and_then(|f| read_identity(&f)) {
            Ok(id) => found |= report(&what, &id),
            Err(e) => eprintln!("{what}: {e}"),
        }
    }
    if found {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_identity_from_a_bar_image() {
        let mut img = vec![0u8; 4096];
        let mut put = |off: usize, v: u32| img[off..off + 4].copy_from_slice(&v.to_le_bytes());
        put(REG_MAGIC, ZN_MAGIC);
        put(REG_VERSION, ZN_VERSION);
        put(REG_CAPS, ZN_CAPS);
        put(REG_NUM_PORTS, 2);
        let p = std::env::temp_dir().join(format!("zn-probe-{}", std::process::id()));
        File::create(&p)
            .and_then(|mut f| f.write_all(&img))
            .expect("write image");
        let id = read_identity(&open_bar(&p).expect("open")).expect("read");
        let _ = fs::remove_file(&p);
        assert!(id.is_zeronic());
        assert_eq!((id.caps, id.ports), (ZN_CAPS, 2));
        assert!(!Identity { magic: 0, ..id }.is_zeronic());
    }
}

//! The icount part's table (OUT/icount.txt): guest instructions per byte
//! under QEMU's -icount. The check file has "spin N INSNS" and "movsb N
//! INSNS" lines (loops of known length; N may end in M, MiB), the runs file
//! "TRANSPORT SMALL_INSNS BIG_INSNS PROCSTAT_CPU_S_PER_GIB" ("-" for a
//! failed run, "None" for no CPU figure).

use crate::pyfmt::{fixed, float};
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;

fn int(w: &str) -> Result<i128> {
    w.parse()
        .with_context(|| format!("invalid literal for int(): {w:?}"))
}

/// (y1 - y0) / ((x1 - x0) * unit) of two points.
fn slope(p: &[(i128, i128)], unit: i128) -> f64 {
    let ((x0, y0), (x1, y1)) = (p[0], p[1]);
    (y1 - y0) as f64 / ((x1 - x0) * unit) as f64
}

fn f(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| fixed(x, 2))
}

pub fn table(check: &str, runs: &str, small: &str, big: &str) -> Result<String> {
    let mut spin = Vec::new();
    let mut movsb = Vec::new();
    for l in check.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let [k, n, v] = w[..] else {
            bail!("{l:?}: not CHECK N INSNS");
        };
        let n = match n.strip_suffix('M') {
            Some(m) => int(m)? << 20,
            None => int(n)?,
        };
        match k {
            "spin" => spin.push((n, int(v)?)),
            "movsb" => movsb.push((n, int(v)?)),
            _ => {}
        }
    }
    let (small, big) = (int(small)?, int(big)?);
    let joined = |p: &[(i128, i128)]| {
        p.iter()
            .map(|(_, v)| v.to_string())
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let mut s = String::new();
    let mut keys = Vec::new();
    let _ = writeln!(
        s,
        "| check | runs | instructions | per unit (slope) | expected |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|");
    if spin.len() == 2 {
        let sl = slope(&spin, 1);
        let _ = writeln!(
            s,
            "| dec/jnz loop | 10M, 110M iterations | {} | {} per iteration | 2 |",
            joined(&spin),
            fixed(sl, 4)
        );
        keys.push(format!("icount_spin_insns_per_iter={}", fixed(sl, 4)));
    }
    if movsb.len() == 2 {
        let sl = slope(&movsb, 1 << 20);
        let _ = writeln!(
            s,
            "| rep movsb, 1 MiB per copy | 16, 144 copies | {} | {} per byte | 1 if each iteration counts |",
            joined(&movsb),
            fixed(sl, 4)
        );
        keys.push(format!("icount_rep_movsb_insns_per_byte={}", fixed(sl, 4)));
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "| transport | instructions, {} MiB | instructions, {} MiB | insns/byte (slope) | insns/byte (whole {} MiB run) | insns/byte by /proc/stat busy time |",
        small >> 20,
        big >> 20,
        big >> 20
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
    let mut per: Vec<(String, Option<f64>)> = Vec::new();
    for l in runs.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let [tr, a, b, cpu] = w[..] else {
            bail!("{l:?}: not TRANSPORT SMALL BIG CPU");
        };
        let sl = if a != "-" && b != "-" {
            Some((int(b)? - int(a)?) as f64 / (big - small) as f64)
        } else {
            None
        };
        let whole = if b != "-" {
            Some(int(b)? as f64 / big as f64)
        } else {
            None
        };
        let ps = match cpu {
            "-" | "None" => None,
            c => Some(float(c).with_context(|| format!("{c:?}"))? * 1e9 / 1073741824.0),
        };
        per.retain(|(t, _)| t != tr);
        per.push((tr.to_string(), sl));
        let _ = writeln!(
            s,
            "| {tr} | {a} | {b} | {} | {} | {} |",
            f(sl),
            f(whole),
            f(ps)
        );
        if let Some(sl) = sl {
            keys.push(format!("insns_per_byte_{tr}={}", fixed(sl, 3)));
        }
        if let Some(ps) = ps {
            keys.push(format!("insns_per_byte_procstat_{tr}={}", fixed(ps, 3)));
        }
    }
    // Truthy in python: measured and not 0.
    let get = |t: &str| {
        per.iter()
            .find(|(n, _)| n == t)
            .and_then(|(_, v)| *v)
            .filter(|v| *v != 0.0)
    };
    if let (Some(z), Some(t)) = (get("zeronic"), get("tcp")) {
        keys.push(format!("insns_per_byte_zeronic_vs_tcp={}", fixed(z / t, 3)));
    }
    if let (Some(t), Some(v)) = (get("tcp"), get("veth")) {
        keys.push(format!("insns_per_byte_tcp_vs_veth={}", fixed(t / v, 3)));
    }
    let _ = writeln!(s, "{}", keys.join("\n"));
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const CHECK: &str = "\
spin 10M 21012345
spin 110M 230723456
movsb 16 17001234
movsb 144 151234567
";
    /// 8M and 72M transfers; veth's small run failed.
    pub const RUNS: &str = "\
zeronic 912345678 6123456789 4.25
tcp 1523456789 11234567890 None
veth - 9876543210 3.125
";

    #[test]
    fn as_python() {
        // bench-guest's python3 on the same files (numfmt --from=iec 8M, 72M).
        assert_eq!(
            table(CHECK, RUNS, "8388608", "75497472").unwrap(),
            include_str!("testdata/icount.txt")
        );
    }

    #[test]
    fn nothing_measured() {
        assert_eq!(
            table("", "", "8388608", "75497472").unwrap(),
            "| check | runs | instructions | per unit (slope) | expected |\n\
             |---|---|---:|---:|---:|\n\n\
             | transport | instructions, 8 MiB | instructions, 72 MiB | insns/byte (slope) | insns/byte (whole 72 MiB run) | insns/byte by /proc/stat busy time |\n\
             |---|---:|---:|---:|---:|---:|\n\n"
        );
    }
}

//! The shim part's zero-copy threshold (docs/shim.md): one socat run
//! through the LD_PRELOAD shim (`shim-run`, from both ends' ZN_SHIM_STATS
//! files) and the table of the rounds (`shim-table`, OUT/shim.txt) with
//! the crossovers as key=value lines.

use crate::pyfmt::{fixed, float, is_digits, median};
use anyhow::{bail, Context, Result};
use std::cmp::Ordering::{Greater, Less};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A ZN_SHIM_STATS file: "KEY VALUE" pairs, the numeric ones summed by key.
pub fn stats(text: &str) -> BTreeMap<String, u128> {
    let mut st = BTreeMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        for p in w.chunks_exact(2) {
            if is_digits(p[1]) {
                if let Ok(v) = p[1].parse::<u128>() {
                    *st.entry(p[0].to_string()).or_insert(0) += v;
                }
            }
        }
    }
    st
}

fn num(w: &str) -> Result<f64> {
    float(w).with_context(|| format!("could not convert string to float: {w:?}"))
}

/// One run: "MiB/s CPU-s/GiB zc_sends staged_sends". `args`: the bytes
/// sent, the wall clock before and after, /proc/stat's busy jiffies
/// (USER_HZ 100, all CPUs) before and after.
pub fn run(tx: &str, rx: &str, args: [&str; 5]) -> Result<String> {
    let (tx, rx) = (stats(tx), stats(rx));
    let n: u128 = args[0]
        .parse()
        .with_context(|| format!("{:?}: not a byte count", args[0]))?;
    let [t0, t1, bu0, bu1] = [num(args[1])?, num(args[2])?, num(args[3])?, num(args[4])?];
    match rx.get("rx_bytes") {
        Some(&r) if r == n => {}
        r => bail!(
            "received {} bytes, not {n}",
            r.map_or_else(|| "None".into(), |r| r.to_string())
        ),
    }
    if t1 == t0 || n == 0 {
        bail!("float division by zero");
    }
    let cpu = (bu1 - bu0) / 100.0;
    let n = n as f64;
    Ok(format!(
        "{} {} {} {}\n",
        fixed(n / 1048576.0 / (t1 - t0), 2),
        fixed(cpu / (n / 1073741824.0), 2),
        tx.get("tx_zc_sends").unwrap_or(&0),
        tx.get("tx_staged_sends").unwrap_or(&0)
    ))
}

/// One size's medians over the rounds.
struct Size {
    bytes: u64,
    /// zero-copy / copied MiB/s, and CPU-s/GiB.
    ratio: Option<f64>,
    cpu: Option<f64>,
    /// Sends zero-copy in the zero-copy runs.
    zc_sends: u64,
}

/// The smallest size from which zero-copy is at least as fast (`cpu`:
/// at least as cheap per GiB) at that size and every larger one; 0: none.
fn crossover(sizes: &[Size], cpu: bool) -> u64 {
    let mut c = 0;
    for s in sizes.iter().rev() {
        let v = if cpu { s.cpu } else { s.ratio };
        match v {
            // As python compared: a NaN goes on.
            Some(v)
                if s.zc_sends != 0
                    && v.partial_cmp(&1.0) != Some(if cpu { Greater } else { Less }) =>
            {
                c = s.bytes;
            }
            _ => break,
        }
    }
    c
}

/// The rounds file: "SIZE ROUND" and two runs' four words (copied, then
/// zero-copy), "-" for a failed run's.
pub fn table(text: &str, default_threshold: &str) -> Result<String> {
    let mut rows: BTreeMap<u64, Vec<Vec<&str>>> = BTreeMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let size = w
            .first()
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("{line:?}: no size"))?;
        if w.len() < 10 {
            bail!("{line:?}: not SIZE ROUND and two runs");
        }
        rows.entry(size).or_default().push(w[2..].to_vec());
    }
    let med = |rs: &[Vec<&str>], i: usize| -> Result<Option<f64>> {
        let v = rs
            .iter()
            .filter(|r| r[i] != "-")
            .map(|r| num(r[i]))
            .collect::<Result<Vec<f64>>>()?;
        Ok(median(&v))
    };
    let sum = |rs: &[Vec<&str>], i: usize| -> Result<u64> {
        rs.iter()
            .filter(|r| r[i] != "-")
            .map(|r| r[i].parse::<u64>().with_context(|| format!("{:?}", r[i])))
            .sum()
    };
    let f = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| fixed(x, 2));
    // a / b if both are there and not 0 (python's truthiness).
    let div = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if a != 0.0 && b != 0.0 => Some(a / b),
        _ => None,
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| send bytes | copied MiB/s | CPU-s/GiB | zero-copy MiB/s | CPU-s/GiB | zero-copy / copied MiB/s | CPU | sends zero-copy (copied run / zero-copy run) |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut sizes = Vec::new();
    for (&bytes, rs) in &rows {
        let (cm, cc, zm, zc) = (med(rs, 0)?, med(rs, 1)?, med(rs, 4)?, med(rs, 5)?);
        let (zs_copy, zs_zc) = (sum(rs, 2)?, sum(rs, 6)?);
        let ratio = div(zm, cm);
        let cpu = div(zc, cc);
        let _ = writeln!(
            s,
            "| {bytes} | {} | {} | {} | {} | {} | {} | {zs_copy} / {zs_zc} |",
            f(cm),
            f(cc),
            f(zm),
            f(zc),
            f(ratio),
            f(cpu)
        );
        sizes.push(Size {
            bytes,
            ratio,
            cpu,
            zc_sends: zs_zc,
        });
    }
    let _ = writeln!(s, "shim_zc_crossover_bytes={}", crossover(&sizes, false));
    let _ = writeln!(s, "shim_zc_cpu_crossover_bytes={}", crossover(&sizes, true));
    let _ = writeln!(s, "shim_zc_threshold_default_bytes={default_threshold}");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sender's ZN_SHIM_STATS (two sockets) and the receiver's.
    const TX: &str = "tx_zc_sends 1000 tx_staged_sends 24 tx_bytes 16777216 rx_bytes 0\n\
                      tx_zc_sends 24 tx_staged_sends 0 state offload\n";
    const RX: &str = "tx_zc_sends 0 tx_staged_sends 0 rx_bytes 16777216\n";

    #[test]
    fn one_run() {
        // bench-guest's python3 shim_run on the same stats.
        let args = ["16777216", "1712.125", "1715.5", "120034", "120301"];
        assert_eq!(run(TX, RX, args).unwrap(), "4.74 170.88 1024 24\n");
        let args = ["16777216", "1712.125", "1712.625", "120034", "120301"];
        assert_eq!(run(TX, RX, args).unwrap(), "32.00 170.88 1024 24\n");
        let args = ["1048576", "10", "11", "1", "201"];
        assert_eq!(
            run(TX, RX, args).unwrap_err().to_string(),
            "received 16777216 bytes, not 1048576"
        );
        assert_eq!(
            run(TX, "", args).unwrap_err().to_string(),
            "received None bytes, not 1048576"
        );
    }

    /// Two rounds of three sizes; a failed copied run at 4 KiB.
    pub const ROUNDS: &str = "\
4096 1 - - - - 5.10 40.20 1024 0
16384 1 60.00 10.50 0 1024 55.00 11.00 1024 0
262144 1 120.00 6.00 0 64 130.00 5.00 64 0
4096 2 20.00 12.00 0 4096 5.20 41.00 4096 0
16384 2 62.00 10.00 0 1024 64.00 9.50 1024 0
262144 2 118.00 6.20 0 64 131.00 5.10 64 0
";

    #[test]
    fn the_table() {
        // bench-guest's python3 on the same rounds.
        assert_eq!(
            table(ROUNDS, "262144").unwrap(),
            include_str!("testdata/shim.txt")
        );
    }
}

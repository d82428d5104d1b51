//! The ab part's table (OUT/ab.txt): the NIC's TSO and TX doorbell
//! batching before/after for Linux TCP over the ports, against veth. Its
//! runs file has a line per run, "ROUND CONFIG MiB/s CPU-s/GiB DB/MiB
//! DESCS/MiB" ("-" for a figure missing); the table prints every run, the
//! medians per configuration, and the `ab_*` key=value lines.

use crate::pyfmt::{fixed, float, median};
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One run: round, configuration, its four figures as printed.
#[derive(Debug, PartialEq)]
pub struct Run<'a> {
    pub words: Vec<&'a str>,
    pub figures: [Option<f64>; 4],
}

/// The runs of the file (lines of six words; others are skipped).
pub fn runs(text: &str) -> Result<Vec<Run<'_>>> {
    let mut out = Vec::new();
    for l in text.lines() {
        let words: Vec<&str> = l.split_whitespace().collect();
        if words.len() != 6 {
            continue;
        }
        let mut figures = [None; 4];
        for (f, w) in figures.iter_mut().zip(&words[2..]) {
            if *w != "-" {
                *f = Some(float(w).with_context(|| format!("{w:?}: not a number"))?);
            }
        }
        out.push(Run { words, figures });
    }
    Ok(out)
}

/// The configurations of the medians table: name, batching, TSO.
const CONFIGS: &[(&str, &str, &str)] = &[
    ("batch1-tsooff", "xmit_more on", "tso off"),
    ("batch1-tsoon", "xmit_more on", "tso on"),
    ("batch0-tsooff", "xmit_more off", "tso off"),
    ("batch0-tsoon", "xmit_more off", "tso on"),
    ("veth", "veth", ""),
];

fn f(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| fixed(x, 2))
}

/// a / b if both are there and b is not 0.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}

/// The table and the key=value lines.
pub fn table(text: &str) -> Result<String> {
    let runs = runs(text)?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| round | run | MiB/s | CPU-s/GiB | TX doorbells/MiB | TX descs/MiB |"
    );
    let _ = writeln!(s, "|---:|---|---:|---:|---:|---:|");
    for r in &runs {
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            r.words[0],
            r.words[1],
            r.words[2..].join(" | ")
        );
    }
    let med = |name: &str, i: usize| {
        let v: Vec<f64> = runs
            .iter()
            .filter(|r| r.words[1] == name)
            .filter_map(|r| r.figures[i])
            .collect();
        median(&v)
    };
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "| medians | MiB/s | CPU-s/GiB | TX doorbells/MiB | TX descs/MiB | descs per doorbell |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
    let mut m: BTreeMap<&str, [Option<f64>; 4]> = BTreeMap::new();
    for (name, b, t) in CONFIGS {
        let v = [0, 1, 2, 3].map(|i| med(name, i));
        m.insert(name, v);
        // Truthy in python: there and not 0.
        let per = match (v[2], v[3]) {
            (Some(d), Some(n)) if d != 0.0 && n != 0.0 => Some(n / d),
            _ => None,
        };
        let label = if t.is_empty() {
            b.to_string()
        } else {
            format!("{b}, {t}")
        };
        let cells: Vec<String> = v.iter().chain([&per]).map(|x| f(*x)).collect();
        let _ = writeln!(s, "| {label} | {} |", cells.join(" | "));
    }
    let mut kv = |k: &str, v: Option<f64>, prec: usize| {
        if let Some(v) = v {
            let _ = writeln!(s, "{k}={}", fixed(v, prec));
        }
    };
    // The TSO before/after as before (the driver's default: xmit_more on).
    let (on_off, on_on, veth) = (m["batch1-tsooff"], m["batch1-tsoon"], m["veth"]);
    kv("ab_tcp_vs_veth_tso_off", ratio(on_off[0], veth[0]), 3);
    kv("ab_tcp_vs_veth_tso_on", ratio(on_on[0], veth[0]), 3);
    kv("ab_tcp_tso_on_vs_off", ratio(on_on[0], on_off[0]), 3);
    kv(
        "ab_cpu_per_gib_tcp_tso_on_vs_off",
        ratio(on_on[1], on_off[1]),
        3,
    );
    kv(
        "ab_cpu_per_gib_tcp_tso_off_vs_veth",
        ratio(on_off[1], veth[1]),
        3,
    );
    kv(
        "ab_cpu_per_gib_tcp_tso_on_vs_veth",
        ratio(on_on[1], veth[1]),
        3,
    );
    // Doorbell batching: off against on, tso off (unqualified) and on.
    for (t, sfx) in [("tsooff", ""), ("tsoon", "_tso_on")] {
        let (off, on) = (m[&*format!("batch0-{t}")], m[&*format!("batch1-{t}")]);
        kv(
            &format!("ab_doorbells_per_mib_xmit_more_off{sfx}"),
            off[2],
            2,
        );
        kv(&format!("ab_doorbells_per_mib_xmit_more_on{sfx}"), on[2], 2);
        kv(&format!("ab_descs_per_mib_xmit_more_off{sfx}"), off[3], 2);
        kv(&format!("ab_descs_per_mib_xmit_more_on{sfx}"), on[3], 2);
        kv(
            &format!("ab_tcp_xmit_more_on_vs_off{sfx}"),
            ratio(on[0], off[0]),
            3,
        );
        kv(
            &format!("ab_cpu_per_gib_xmit_more_on_vs_off{sfx}"),
            ratio(on[1], off[1]),
            3,
        );
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two rounds of bench-guest's ab part (the second's batch0 reload
    /// failed; one veth run failed).
    pub const RUNS: &str = "\
1 batch0-tsooff 101.25 30.12 690.50 690.50
1 batch0-tsoon 180.40 18.33 120.02 121.70
1 batch1-tsooff 110.75 28.91 350.25 690.10
1 batch1-tsoon 190.10 17.20 60.01 121.40
1 veth 250.00 12.50 - -
2 batch1-tsooff 111.25 28.00 349.75 689.90
2 batch1-tsoon 195.30 16.90 59.99 121.60
2 batch0-tsooff - - - -
2 batch0-tsoon - - - -
2 veth - - - -
";

    #[test]
    fn as_python() {
        // bench-guest's python3 on the same file.
        assert_eq!(table(RUNS).unwrap(), include_str!("testdata/ab.txt"));
    }

    #[test]
    fn nothing_measured() {
        let t = table("1 batch1-tsooff - - - -\n1 veth - - - -\nnoise\n").unwrap();
        assert!(t.ends_with("| veth | - | - | - | - | - |\n"), "{t}");
        assert!(!t.contains('='), "{t}");
    }
}

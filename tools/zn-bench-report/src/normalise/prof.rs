//! The prof part's table, "Where the time goes" (OUT/prof.txt): per run
//! NAME, from OUT: NAME.json (zn-perf's client document: bytes, throughput,
//! CPU-s/GiB), NAME.eth0 / NAME.eth1 (both ports' `ethtool -S` before and
//! after the run, lines "SIDE NAME VALUE") and NAME.model (the model's
//! `prof` line over the run: it is reset before). One row per run: the
//! guest's side of the NIC path from the driver's prof_* counters (module
//! parameter profile=1 for the durations), the model's side from its
//! profile, and the difference of the two delays both sides see (the
//! guest's TX doorbell -> TX interrupt and the model's TX doorbell wake-up
//! -> TX interrupt), which is what QEMU adds: the doorbell's way from the
//! guest's MMIO write to the model's eventfd, and the interrupt's from the
//! model's eventfd into the guest's vCPU. Then key=value lines:
//! prof_<name>_<figure>=value.
//!
//! Durations are means in microseconds (the model's also p99, the upper
//! bound of its log2 bucket); counts are per MiB received.

use super::zn_perf::Doc;
use crate::pyfmt::{fixed, float, is_digits};
use anyhow::Result;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// `ethtool -S` of both ports: (side, counter) -> value.
pub fn eth(text: &str) -> BTreeMap<(String, String), i128> {
    let mut v = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 3 && is_digits(f[2]) {
            if let Ok(n) = f[2].parse() {
                v.insert((f[0].to_string(), f[1].to_string()), n);
            }
        }
    }
    v
}

/// The model's first `prof NAME key=value...` line.
pub fn model(text: &str) -> Result<BTreeMap<String, f64>> {
    let mut m = BTreeMap::new();
    if let Some(f) = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.first() == Some(&"prof"))
    {
        for w in f.iter().skip(2) {
            if let Some((k, x)) = w.split_once('=') {
                let x = float(x)
                    .ok_or_else(|| anyhow::anyhow!("could not convert string to float: {x:?}"))?;
                m.insert(k.to_string(), x);
            }
        }
    }
    Ok(m)
}

/// One run's figures, in the order of its key=value lines.
pub type Row = Vec<(&'static str, Option<f64>)>;

/// A run's row from its files' texts (None: no document, or nothing moved).
pub fn row(doc: Option<&Doc>, eth0: &str, eth1: &str, model_line: &str) -> Result<Option<Row>> {
    let Some(d) = doc else { return Ok(None) };
    let s = d.first()?.receiver();
    let mib = s.bytes as f64 / 1048576.0;
    if mib == 0.0 {
        return Ok(None);
    }
    let (e0, e1, m) = (eth(eth0), eth(eth1), model(model_line)?);
    // Both ports' counter over the run.
    let g = |k: &str| -> i128 {
        ["a", "b"]
            .iter()
            .map(|side| {
                let key = (side.to_string(), k.to_string());
                e1.get(&key).copied().unwrap_or(0) - e0.get(&key).copied().unwrap_or(0)
            })
            .sum()
    };
    let per_mib = |n: i128| Some(n as f64 / mib);
    let div = |a: i128, b: i128| Some(if b != 0 { a as f64 / b as f64 } else { 0.0 });
    let mean_us = |k: &str| {
        let n = g(&format!("{k}_n"));
        (n != 0).then(|| g(&format!("{k}_ns")) as f64 / n as f64 / 1000.0)
    };
    let mg = |k: &str| m.get(k).copied();
    let mut r: Row = vec![
        ("mib_s", Some(s.bits_per_second / 8.0 / 1048576.0)),
        ("cpu_s_per_gib", s.cpu.seconds_per_gib),
        ("frames_per_mib", per_mib(g("hw_tx_frames"))),
        // tx0_packets counts a TSO send's frames: descriptors are the rest.
        (
            "tx_descs_per_mib",
            per_mib(g("tx0_packets") - g("tx0_tso_frames") + g("tx0_tso")),
        ),
        (
            "tso_frames_per_desc",
            div(g("tx0_tso_frames"), g("tx0_tso")),
        ),
        (
            "guest_doorbells_per_mib",
            per_mib(g("prof_db_tx") + g("prof_db_rx") + g("prof_db_rearm")),
        ),
        ("tx_doorbells_per_mib", per_mib(g("prof_db_tx"))),
        (
            "model_wakeups_per_mib",
            Some(mg("wake_doorbell").unwrap_or(0.0) / mib),
        ),
        ("model_doorbells_per_wake", mg("doorbells_per_wake")),
        ("model_scan_us", mg("scan_mean_us")),
        ("model_scan_p99_us", mg("scan_p99_us")),
        ("model_tx_wake_to_irq_us", mg("tx_wake_to_irq_mean_us")),
        ("model_tx_wake_to_irq_p99_us", mg("tx_wake_to_irq_p99_us")),
        ("model_held_us", mg("entry_to_irq_mean_us")),
        ("model_held_p99_us", mg("entry_to_irq_p99_us")),
        ("model_entries_per_irq", mg("entries_per_irq")),
        ("model_tx_descs_per_scan", mg("tx_descs_per_scan")),
        ("irqs_per_mib", per_mib(g("prof_irq_rx") + g("prof_irq_tx"))),
        ("polls_per_mib", per_mib(g("prof_polls"))),
        ("work_per_poll", div(g("prof_poll_work"), g("prof_polls"))),
        ("guest_db_to_irq_us", mean_us("prof_db_to_irq")),
        ("guest_irq_to_poll_us", mean_us("prof_irq_to_poll")),
        ("guest_poll_us", mean_us("prof_poll")),
    ];
    let at = |r: &Row, k: &str| r.iter().find(|e| e.0 == k).and_then(|e| e.1);
    let q = match (
        at(&r, "guest_db_to_irq_us"),
        at(&r, "model_tx_wake_to_irq_us"),
    ) {
        (Some(a), Some(b)) => Some(a - b),
        _ => None,
    };
    r.push(("qemu_delivery_us", q));
    Ok(Some(r))
}

/// A cell: "-", or one decimal from 10 up, two below.
fn fmt(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v.abs() >= 10.0 => fixed(v, 1),
        Some(v) => fixed(v, 2),
    }
}

/// The columns: a figure, or a mean with its p99.
const COLS: &[(&str, &str, Option<&str>)] = &[
    ("MiB/s", "mib_s", None),
    ("CPU-s/GiB", "cpu_s_per_gib", None),
    ("frames/MiB", "frames_per_mib", None),
    ("TX descs/MiB", "tx_descs_per_mib", None),
    ("guest doorbells/MiB", "guest_doorbells_per_mib", None),
    ("model wake-ups/MiB", "model_wakeups_per_mib", None),
    ("doorbells/wake-up", "model_doorbells_per_wake", None),
    (
        "model scan [us] (p99)",
        "model_scan_us",
        Some("model_scan_p99_us"),
    ),
    (
        "model entry held [us] (p99)",
        "model_held_us",
        Some("model_held_p99_us"),
    ),
    (
        "model TX wake->TX irq [us] (p99)",
        "model_tx_wake_to_irq_us",
        Some("model_tx_wake_to_irq_p99_us"),
    ),
    ("guest TX doorbell->TX irq [us]", "guest_db_to_irq_us", None),
    ("QEMU delivery [us]", "qemu_delivery_us", None),
    ("irqs/MiB", "irqs_per_mib", None),
    ("entries/irq", "model_entries_per_irq", None),
    ("irq->poll [us]", "guest_irq_to_poll_us", None),
    ("poll [us]", "guest_poll_us", None),
    ("work/poll", "work_per_poll", None),
];

/// The table and key=value lines of the runs (name, row).
pub fn render(rows: &[(String, Option<Row>)]) -> String {
    let mut s = String::new();
    let heads: Vec<&str> = COLS.iter().map(|c| c.0).collect();
    let _ = writeln!(s, "| run | {} |", heads.join(" | "));
    let _ = writeln!(s, "|---|{}", "---:|".repeat(COLS.len()));
    let at = |r: &Row, k: &str| r.iter().find(|e| e.0 == k).and_then(|e| e.1);
    for (n, r) in rows {
        let Some(r) = r else {
            let _ = writeln!(s, "| {n} | failed |");
            continue;
        };
        let cells: Vec<String> = COLS
            .iter()
            .map(|(_, k, p99)| match p99 {
                Some(p) => format!("{} ({})", fmt(at(r, k)), fmt(at(r, p))),
                None => fmt(at(r, k)),
            })
            .collect();
        let _ = writeln!(s, "| {n} | {} |", cells.join(" | "));
    }
    for (n, r) in rows {
        for (k, v) in r.iter().flatten() {
            if let Some(v) = v {
                let _ = writeln!(s, "prof_{}_{k}={}", n.replace('-', "_"), fixed(*v, 3));
            }
        }
    }
    s
}

/// `prof-table OUT NAME...`.
pub fn table(out: &Path, names: &[String]) -> Result<String> {
    let text = |n: &str, ext: &str| {
        std::fs::read(out.join(format!("{n}.{ext}")))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .ok()
    };
    let mut rows = Vec::new();
    for n in names {
        // No document, or not one: a failed run.
        let doc = text(n, "json").and_then(|t| Doc::parse(&t).ok());
        let r = row(
            doc.as_ref(),
            &text(n, "eth0").unwrap_or_default(),
            &text(n, "eth1").unwrap_or_default(),
            &text(n, "model").unwrap_or_default(),
        )?;
        rows.push((n.clone(), r));
    }
    Ok(render(&rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalise::zn_perf::tests::{BULK, LAT};

    pub const ETH0: &str = "\
a tx0_packets 1000
a tx0_tso 10
a tx0_tso_frames 440
a hw_tx_frames 1200
a prof_db_tx 300
a prof_db_rx 50
a prof_db_rearm 20
a prof_irq_rx 100
a prof_irq_tx 90
a prof_polls 180
a prof_poll_work 900
a prof_db_to_irq_ns 5000000
a prof_db_to_irq_n 100
a prof_irq_to_poll_ns 300000
a prof_irq_to_poll_n 100
a prof_poll_ns 2000000
a prof_poll_n 180
b tx0_packets 500
b hw_tx_frames 600
b prof_db_rx 40
b prof_irq_rx 80
b prof_polls 90
b prof_poll_work 100
b state: up
";
    pub const ETH1: &str = "\
a tx0_packets 701000
a tx0_tso 15010
a tx0_tso_frames 660440
a hw_tx_frames 701200
a prof_db_tx 9300
a prof_db_rx 2050
a prof_db_rearm 1020
a prof_irq_rx 8100
a prof_irq_tx 7090
a prof_polls 15180
a prof_poll_work 90900
a prof_db_to_irq_ns 905000000
a prof_db_to_irq_n 9100
a prof_irq_to_poll_ns 30300000
a prof_irq_to_poll_n 15100
a prof_poll_ns 302000000
a prof_poll_n 15180
b tx0_packets 90500
b hw_tx_frames 90600
b prof_db_rx 12040
b prof_irq_rx 9080
b prof_polls 9090
b prof_poll_work 700100
";
    pub const MODEL: &str = "prof a wake_doorbell=8123 wake_timer=12 doorbells_per_wake=1.37 irqs_rx=9000 irqs_tx=7000 irqs_async=3 entries_per_irq=4.21 tx_descs_per_scan=2.50 scan_n=9000 scan_mean_us=3.4 scan_p50_us=2 scan_p99_us=16 wake_to_irq_n=9000 wake_to_irq_mean_us=40.2 wake_to_irq_p50_us=32 wake_to_irq_p99_us=256 tx_wake_to_irq_n=7000 tx_wake_to_irq_mean_us=61.7 tx_wake_to_irq_p50_us=64 tx_wake_to_irq_p99_us=512 entry_to_irq_n=30000 entry_to_irq_mean_us=12.3 entry_to_irq_p50_us=8 entry_to_irq_p99_us=128\n";

    #[test]
    fn as_python() {
        // scripts/bench-prof-table (python3, which this replaced) on the
        // same files: a run, a run without the model's line and the
        // driver's durations, a latency run (its receiver moved bytes both
        // ways), and a missing one.
        let bulk = Doc::parse(BULK).unwrap();
        let lat = Doc::parse(LAT).unwrap();
        let rows = vec![
            (
                "prof-tcp".to_string(),
                row(Some(&bulk), ETH0, ETH1, MODEL).unwrap(),
            ),
            (
                "prof-zeronic-1m".to_string(),
                row(Some(&bulk), "", "a hw_tx_frames 5\n", "").unwrap(),
            ),
            (
                "prof-lat".to_string(),
                row(Some(&lat), ETH0, ETH1, MODEL).unwrap(),
            ),
            ("prof-gone".to_string(), row(None, "", "", "").unwrap()),
        ];
        assert_eq!(render(&rows), include_str!("testdata/prof.txt"));
    }
}

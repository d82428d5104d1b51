//! The breakdown of a clean-wire bulk run (section main): bench-guest's
//! `snap` before and after the run (/proc/stat's cpu line, "irqs ALL RX TX
//! OTHER" of the zeronic vectors, the model's "port NAME k=v..." lines) and
//! the zn-perf document, as key=value words per GiB / MiB received.

use super::zn_perf::Doc;
use crate::pyfmt::repr;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// One snapshot.
#[derive(Debug, Default, PartialEq)]
pub struct Snap {
    /// /proc/stat's "cpu" jiffies: user nice system idle iowait irq
    /// softirq steal ...
    pub cpu: Vec<i128>,
    /// The zeronic vectors' interrupts: all, rx, tx, other.
    pub irqs: Vec<i128>,
    /// The model's counters per port.
    pub ports: BTreeMap<String, BTreeMap<String, i128>>,
}

fn int(w: &str) -> Result<i128> {
    w.trim()
        .parse()
        .with_context(|| format!("{w:?}: not an integer"))
}

impl Snap {
    pub fn parse(text: &str) -> Result<Self> {
        let mut s = Snap::default();
        for l in text.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.first() {
                Some(&"cpu") => s.cpu = f[1..].iter().map(|x| int(x)).collect::<Result<_>>()?,
                Some(&"irqs") => s.irqs = f[1..].iter().map(|x| int(x)).collect::<Result<_>>()?,
                Some(&"port") if f.len() > 1 => {
                    let mut c = BTreeMap::new();
                    for w in &f[2..] {
                        if let Some((k, v)) = w.split_once('=') {
                            c.insert(k.to_string(), int(v)?);
                        }
                    }
                    s.ports.insert(f[1].to_string(), c);
                }
                _ => {}
            }
        }
        Ok(s)
    }

    fn total(&self, k: &str) -> i128 {
        self.ports
            .values()
            .map(|p| p.get(k).copied().unwrap_or(0))
            .sum()
    }
}

/// The model's counters per MiB, in the order of the words.
const PORT_KEYS: &[(&str, &str)] = &[
    ("tx_frames", "frames_per_mib"),
    ("hdrq_entries", "hdrq_per_mib"),
    ("rx_coalesced", "coalesced_per_mib"),
    ("rx_normal", "rx_normal_per_mib"),
    ("rx_split", "rx_split_per_mib"),
];

/// The figures, in order; empty when the run moved nothing or the
/// snapshots have no CPU line or no busy time.
pub fn figures(a: &Snap, b: &Snap, d: &Doc) -> Result<Vec<(&'static str, f64)>> {
    let s = d.first()?.receiver();
    let mib = s.bytes as f64 / 1048576.0;
    if s.bytes == 0 || a.cpu.is_empty() || b.cpu.is_empty() {
        return Ok(Vec::new());
    }
    let dc: Vec<i128> = a.cpu.iter().zip(&b.cpu).map(|(x, y)| y - x).collect();
    if dc.len() < 7 {
        anyhow::bail!("a cpu line of {} fields", dc.len());
    }
    // The split of the busy time over the whole run (set-up included),
    // applied to zn-perf's own CPU-s/GiB (start to end of the transfer),
    // so the parts add up to it.
    let busy = (dc[0] + dc[1]) + dc[2] + dc[5] + dc[6] + dc.get(7).copied().unwrap_or(0);
    let Some(head) = s.cpu.seconds_per_gib else {
        return Ok(Vec::new());
    };
    if busy == 0 {
        return Ok(Vec::new());
    }
    let share = |j: i128| head * j as f64 / busy as f64;
    let mut out = vec![
        ("user_s_per_gib", share(dc[0] + dc[1])),
        ("sys_s_per_gib", share(dc[2])),
        ("irq_s_per_gib", share(dc[5])),
        ("softirq_s_per_gib", share(dc[6])),
    ];
    if !a.irqs.is_empty() && !b.irqs.is_empty() {
        let at = |v: &[i128], i: usize| v.get(i).copied().context("a short irqs line");
        out.push((
            "irqs_per_mib",
            (at(&b.irqs, 0)? - at(&a.irqs, 0)?) as f64 / mib,
        ));
        out.push((
            "rx_irqs_per_mib",
            (at(&b.irqs, 1)? - at(&a.irqs, 1)?) as f64 / mib,
        ));
        out.push((
            "tx_irqs_per_mib",
            (at(&b.irqs, 2)? - at(&a.irqs, 2)?) as f64 / mib,
        ));
    }
    if !a.ports.is_empty() && !b.ports.is_empty() {
        for (k, name) in PORT_KEYS {
            out.push((name, (b.total(k) - a.total(k)) as f64 / mib));
        }
    }
    Ok(out)
}

/// `breakdown`'s output: "k=v ..." and a newline, or nothing.
pub fn words(before: &Path, after: &Path, d: &Doc) -> Result<String> {
    let a = Snap::parse(&super::read(before)?)?;
    let b = Snap::parse(&super::read(after)?)?;
    let f = figures(&a, &b, d)?;
    if f.is_empty() {
        return Ok(String::new());
    }
    let w: Vec<String> = f.iter().map(|(k, v)| format!("{k}={}", repr(*v))).collect();
    Ok(w.join(" ") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalise::zn_perf::tests::{BULK, LAT};

    pub const SNAP0: &str = "cpu  10000 50 4000 80000 100 300 2000 0 0 0
irqs 1000 600 380 20
port a:0 tx_frames=100 rx_frames=90 rx_normal=80 rx_split=5 hdrq_entries=70 rx_coalesced=10
port b:0 tx_frames=90 rx_frames=100 rx_normal=85 rx_split=3 hdrq_entries=75 rx_coalesced=12
";
    pub const SNAP1: &str = "cpu  10700 52 4900 80500 101 350 2600 3 0 0
irqs 9100 5600 3380 120
port a:0 tx_frames=700123 rx_frames=90000 rx_normal=85000 rx_split=17 hdrq_entries=60070 rx_coalesced=3010
port b:0 tx_frames=90090 rx_frames=700100 rx_normal=600085 rx_split=9003 hdrq_entries=80075 rx_coalesced=400012
";

    fn run(a: &str, b: &str, doc: &str) -> String {
        let d = Doc::parse(doc).unwrap();
        let f = figures(&Snap::parse(a).unwrap(), &Snap::parse(b).unwrap(), &d).unwrap();
        let w: Vec<String> = f.iter().map(|(k, v)| format!("{k}={}", repr(*v))).collect();
        w.join(" ")
    }

    #[test]
    fn as_python() {
        // bench-guest's python3 breakdown() on the same files.
        assert_eq!(
            run(SNAP0, SNAP1, BULK),
            "user_s_per_gib=2.162400423325942 sys_s_per_gib=2.7723082350332593 \
             irq_s_per_gib=0.1540171241685144 softirq_s_per_gib=1.848205490022173 \
             irqs_per_mib=8.86214442013129 rx_irqs_per_mib=5.470459518599562 \
             tx_irqs_per_mib=3.2822757111597376 frames_per_mib=864.3577680525165 \
             hdrq_per_mib=153.17286652078775 coalesced_per_mib=440.9190371991247 \
             rx_normal_per_mib=749.3654266958424 rx_split_per_mib=9.859956236323852"
        );
    }

    #[test]
    fn partial_or_nothing() {
        // No irqs or port lines: only the CPU split.
        let (a, b) = ("cpu 1 0 1 0 0 0 0\n", "cpu 3 0 2 9 0 0 1\n");
        assert_eq!(
            run(a, b, BULK),
            "user_s_per_gib=3.47308615 sys_s_per_gib=1.736543075 irq_s_per_gib=0.0 \
             softirq_s_per_gib=1.736543075"
        );
        // No busy time, no CPU line, no CPU-s/GiB: nothing.
        assert_eq!(run(a, a, BULK), "");
        assert_eq!(run("", b, BULK), "");
        assert_eq!(run(a, b, LAT), "");
    }
}

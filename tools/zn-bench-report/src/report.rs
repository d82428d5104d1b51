//! The report of `make bench` (scripts/bench), `zn-bench-report --dir DIR`:
//! reads what scripts/bench-guest left in `DIR/guest` (`results.jsonl`, one
//! normalised measurement a line; zn-perf's sweep documents
//! `sweep-*.json`; `env.txt`) and the host's `DIR/model.txt`
//! (bench-model), prints the tables (transports; message-size sweep fitted
//! to T = L + S/B; scaling over flows and queues; loss sweep), writes `DIR/report.md` with the same tables
//! and three PNG plots (`sweep.png`, `loss.png`, `cpu.png`), and ends its
//! output with `key=value` lines (`unavailable` where a figure is missing).
//! See docs/performance.md.

use anyhow::{bail, Context, Result};
use plotters::prelude::*;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// One line of results.jsonl (record.rs writes it and documents the fields).
#[derive(Clone, Debug, Deserialize)]
struct Rec {
    section: String,
    transport: String,
    loss: f64,
    ok: bool,
    note: String,
    bits_per_second: Option<f64>,
    cpu_s_per_gib: Option<f64>,
    lat_p50_us: Option<f64>,
    lat_p99_us: Option<f64>,
    lat_p999_us: Option<f64>,
    /// The scale part's flows (zn-perf -P) and combined channels per port.
    flows: Option<f64>,
    queues: Option<f64>,
    /// The breakdown of a clean-wire zn-perf bulk run (section main).
    #[serde(flatten)]
    breakdown: BTreeMap<String, serde_json::Value>,
}

/// The breakdown columns (normalise/breakdown.rs).
const BREAKDOWN: &[(&str, &str)] = &[
    ("user_s_per_gib", "user s/GiB"),
    ("sys_s_per_gib", "sys s/GiB"),
    ("softirq_s_per_gib", "softirq s/GiB"),
    ("irq_s_per_gib", "irq s/GiB"),
    ("irqs_per_mib", "NIC irqs/MiB"),
    ("rx_irqs_per_mib", "rx irqs/MiB"),
    ("tx_irqs_per_mib", "tx irqs/MiB"),
    ("frames_per_mib", "frames/MiB"),
    ("hdrq_per_mib", "hdrq entries/MiB"),
    ("coalesced_per_mib", "coalesced/MiB"),
];

/// The rows of the main table, in order, with what each one is.
const TRANSPORTS: &[(&str, &str)] = &[
    (
        "zeronic",
        "ZeroNIC offload (zn-perf --mode offload), 64 KiB messages",
    ),
    ("zeronic-1m", "ZeroNIC offload, 1 MiB messages"),
    ("tcp", "Linux TCP over the ZeroNIC ports, 64 KiB writes"),
    (
        "zeronic-served",
        "Linux TCP on sockets attached to the ZeroNIC by setsockopt(TCP_ULP, \"zeronic\") \
         (zn-perf --mode served: plain read/write, the NIC places the payload), 64 KiB writes",
    ),
    ("tcp-zerocopy", "Linux TCP, MSG_ZEROCOPY sender"),
    ("veth", "Linux TCP over a veth pair"),
    (
        "veth-zerocopy",
        "Linux TCP over a veth pair, MSG_ZEROCOPY sender",
    ),
    ("rxe", "soft-RoCE (rdma_rxe) on the ports, perftest"),
    ("siw", "soft-iWARP (siw) on the ports, perftest"),
];
const LOSS_ROWS: &[&str] = &["zeronic", "zeronic-bbr", "tcp", "tcp-bbr", "rxe"];
const SWEEPS: &[&str] = &["zeronic", "tcp", SERVED];
/// The attached socket served by TCP (issue 34), compared with `tcp` of
/// the same run in the `served_*` keys and the served-vs-TCP sweep table.
const SERVED: &str = "zeronic-served";

fn mib(bps: f64) -> f64 {
    bps / 8.0 / (1u64 << 20) as f64
}

fn f(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.prec$}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() => Some(a / b),
        _ => None,
    }
}

/// A zn-perf sweep: per message size, the receiver's figures.
struct Sweep {
    /// (bytes, receiver's bits/s).
    points: Vec<(u64, f64)>,
    /// Bytes -> the receiver's busy CPU-s per GiB (sizes without a figure
    /// are absent).
    cpu: BTreeMap<u64, f64>,
    /// T = L + S/B: (L in µs, B in bits/s, n½ in bytes).
    fit: Option<(f64, f64, f64)>,
}

fn load_sweep(path: &Path) -> Result<Sweep> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let mut points = Vec::new();
    let mut cpu = BTreeMap::new();
    for r in doc["results"].as_array().context("no results")? {
        let size = r["msg_size"].as_u64().context("no msg_size")?;
        // The receiver's figure: the server's (the client sends).
        let side = if r["remote"]["role"] == "recv" {
            &r["remote"]
        } else {
            &r["local"]
        };
        let bps = side["bits_per_second"]
            .as_f64()
            .context("no bits_per_second")?;
        points.push((size, bps));
        if let Some(c) = side["cpu"]["seconds_per_gib"].as_f64() {
            cpu.insert(size, c);
        }
    }
    let fit = doc["fit"].as_object().and_then(|o| {
        Some((
            o.get("latency_us")?.as_f64()?,
            o.get("bits_per_second")?.as_f64()?,
            o.get("half_bandwidth_bytes")?.as_f64()?,
        ))
    });
    Ok(Sweep { points, cpu, fit })
}

/// model_vs_memcpy=, the last such line of bench-model's output.
fn model_ratio(dir: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(dir.join("model.txt")).ok()?;
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix("model_vs_memcpy="))
        .and_then(|v| v.trim().parse().ok())
}

struct Data {
    recs: Vec<Rec>,
    sweeps: BTreeMap<&'static str, Sweep>,
    env: String,
    model: Option<f64>,
}

impl Data {
    fn get(&self, section: &str, transport: &str, loss: f64) -> Option<&Rec> {
        self.recs.iter().find(|r| {
            r.section == section && r.transport == transport && (r.loss - loss).abs() < 1e-9
        })
    }
    fn ok(&self, section: &str, transport: &str, loss: f64) -> Option<&Rec> {
        self.get(section, transport, loss).filter(|r| r.ok)
    }
    fn bw(&self, transport: &str) -> Option<f64> {
        self.ok("main", transport, 0.0)?.bits_per_second
    }
    fn cpu(&self, transport: &str) -> Option<f64> {
        self.ok("main", transport, 0.0)?.cpu_s_per_gib
    }
    fn p50(&self, transport: &str) -> Option<f64> {
        self.ok("lat", transport, 0.0)?.lat_p50_us
    }
    /// The sweep fit's L (µs per message) of a transport.
    fn fit_l(&self, transport: &str) -> Option<f64> {
        self.sweeps.get(transport)?.fit.map(|f| f.0)
    }
    /// A figure of the attach part (`new`: spare rings off, `spare`: on).
    fn attach(&self, transport: &str, key: &str) -> Option<f64> {
        self.ok("attach", transport, 0.0)?
            .breakdown
            .get(key)?
            .as_f64()
    }
    fn loss_bw(&self, transport: &str, loss: f64) -> Option<f64> {
        self.ok("loss", transport, loss)?.bits_per_second
    }
    fn losses(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self
            .recs
            .iter()
            .filter(|r| r.section == "loss")
            .map(|r| r.loss)
            .collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    }
}

fn main_table(d: &Data) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| transport | MiB/s | Gbit/s | x TCP | CPU-s/GiB | x TCP | RTT p50 [us] | RTT p99 [us] | RTT p99.9 [us] | note |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for (t, _) in TRANSPORTS {
        let main = d.get("main", t, 0.0);
        let lat = d.get("lat", t, 0.0);
        let bw = d.bw(t);
        let cpu = d.cpu(t);
        let mut notes: Vec<String> = Vec::new();
        for r in [main, lat].into_iter().flatten() {
            if !r.ok {
                notes.push(r.note.clone());
            }
        }
        if main.is_none() {
            notes.push("not run".into());
        }
        let lat_ok = lat.filter(|r| r.ok);
        let _ = writeln!(
            s,
            "| {t} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            f(bw.map(mib), 1),
            f(bw.map(|b| b / 1e9), 3),
            f(ratio(bw, d.bw("tcp")), 2),
            f(cpu, 2),
            f(ratio(cpu, d.cpu("tcp")), 3),
            f(lat_ok.and_then(|r| r.lat_p50_us), 1),
            f(lat_ok.and_then(|r| r.lat_p99_us), 1),
            f(lat_ok.and_then(|r| r.lat_p999_us), 1),
            notes.join("; ")
        );
    }
    s
}

fn breakdown_table(d: &Data) -> String {
    let mut s = String::new();
    let rows: Vec<&Rec> = TRANSPORTS
        .iter()
        .filter_map(|(t, _)| d.ok("main", t, 0.0))
        .filter(|r| r.breakdown.contains_key("user_s_per_gib"))
        .collect();
    if rows.is_empty() {
        return s;
    }
    let _ = write!(s, "| transport |");
    for (_, h) in BREAKDOWN {
        let _ = write!(s, " {h} |");
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "|---|{}", "---:|".repeat(BREAKDOWN.len()));
    for r in rows {
        let _ = write!(s, "| {} |", r.transport);
        for (k, _) in BREAKDOWN {
            let v = r.breakdown.get(*k).and_then(serde_json::Value::as_f64);
            let _ = write!(s, " {} |", f(v, 2));
        }
        let _ = writeln!(s);
    }
    s
}

fn sweep_table(d: &Data) -> String {
    let mut s = String::new();
    let mut sizes: Vec<u64> = d
        .sweeps
        .values()
        .flat_map(|w| w.points.iter().map(|p| p.0))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let _ = write!(s, "| message bytes |");
    for t in d.sweeps.keys() {
        let _ = write!(s, " {t} MiB/s |");
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "|---:|{}", "---:|".repeat(d.sweeps.len()));
    for size in &sizes {
        let _ = write!(s, "| {size} |");
        for w in d.sweeps.values() {
            let v = w.points.iter().find(|p| p.0 == *size).map(|p| mib(p.1));
            let _ = write!(s, " {} |", f(v, 1));
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "| fit T = L + S/B | L [us] | B [MiB/s] | n1/2 [bytes] |");
    let _ = writeln!(s, "|---|---:|---:|---:|");
    for (t, w) in &d.sweeps {
        match w.fit {
            Some((l, b, n)) => {
                let _ = writeln!(s, "| {t} | {l:.1} | {:.1} | {n:.0} |", mib(b));
            }
            None => {
                let _ = writeln!(s, "| {t} | - | - | - |");
            }
        }
    }
    s
}

/// One message size of the served-vs-TCP sweeps: the receiver's bits/s and
/// CPU-s/GiB of each (None where a sweep lacks the size or the figure).
struct ServedSize {
    size: u64,
    tcp_bps: Option<f64>,
    served_bps: Option<f64>,
    tcp_cpu: Option<f64>,
    served_cpu: Option<f64>,
}

impl ServedSize {
    /// Throughput, served / TCP (above 1: served is faster).
    fn bw_ratio(&self) -> Option<f64> {
        ratio(self.served_bps, self.tcp_bps)
    }
    /// CPU-s per GiB, served / TCP (below 1: served costs less).
    fn cpu_ratio(&self) -> Option<f64> {
        ratio(self.served_cpu, self.tcp_cpu)
    }
}

/// Every size of the tcp and zeronic-served sweeps, in order.
fn served_sizes(d: &Data) -> Vec<ServedSize> {
    let (tcp, srv) = (d.sweeps.get("tcp"), d.sweeps.get(SERVED));
    let bps = |w: Option<&Sweep>, size: u64| {
        w.and_then(|w| w.points.iter().find(|p| p.0 == size).map(|p| p.1))
    };
    let cpu = |w: Option<&Sweep>, size: u64| w.and_then(|w| w.cpu.get(&size).copied());
    let mut sizes: Vec<u64> = [tcp, srv]
        .into_iter()
        .flatten()
        .flat_map(|w| w.points.iter().map(|p| p.0))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
        .into_iter()
        .map(|size| ServedSize {
            size,
            tcp_bps: bps(tcp, size),
            served_bps: bps(srv, size),
            tcp_cpu: cpu(tcp, size),
            served_cpu: cpu(srv, size),
        })
        .collect()
}

/// The worst served/TCP ratio over every size of the sweeps (`worst` picks
/// it: the lowest throughput ratio, the highest CPU ratio); None unless
/// every size has one.
fn served_sweep_worst(
    d: &Data,
    r: impl Fn(&ServedSize) -> Option<f64>,
    worst: fn(f64, f64) -> f64,
) -> Option<f64> {
    let v: Option<Vec<f64>> = served_sizes(d).iter().map(r).collect();
    v?.into_iter().reduce(worst)
}

/// The served-vs-TCP sweep, size by size (empty without either sweep).
fn served_sweep_table(d: &Data) -> String {
    let mut s = String::new();
    let rows = served_sizes(d);
    if rows.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "| message bytes | tcp MiB/s | served MiB/s | served/tcp | tcp CPU-s/GiB | served CPU-s/GiB | served/tcp CPU |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.size,
            f(r.tcp_bps.map(mib), 1),
            f(r.served_bps.map(mib), 1),
            f(r.bw_ratio(), 3),
            f(r.tcp_cpu, 2),
            f(r.served_cpu, 2),
            f(r.cpu_ratio(), 3)
        );
    }
    s
}

/// One (queues, flows) point of the scale part: its tcp and zeronic rows.
struct ScalePoint<'a> {
    queues: u64,
    flows: u64,
    tcp: Option<&'a Rec>,
    zeronic: Option<&'a Rec>,
}

impl ScalePoint<'_> {
    fn bw(r: Option<&Rec>) -> Option<f64> {
        r.filter(|r| r.ok)?.bits_per_second
    }
    fn cpu(r: Option<&Rec>) -> Option<f64> {
        r.filter(|r| r.ok)?.cpu_s_per_gib
    }
    /// Aggregate throughput, zeronic / tcp (above 1: the offload is faster).
    fn bw_ratio(&self) -> Option<f64> {
        ratio(Self::bw(self.zeronic), Self::bw(self.tcp))
    }
    /// CPU-s per GiB, zeronic / tcp (below 1: the offload costs less).
    fn cpu_ratio(&self) -> Option<f64> {
        ratio(Self::cpu(self.zeronic), Self::cpu(self.tcp))
    }
}

/// Every (queues, flows) point the scale part recorded, in order.
fn scale_points(d: &Data) -> Vec<ScalePoint<'_>> {
    let key = |r: &Rec| Some((r.queues? as u64, r.flows? as u64));
    let mut at: Vec<(u64, u64)> = d
        .recs
        .iter()
        .filter(|r| r.section == "scale")
        .filter_map(key)
        .collect();
    at.sort_unstable();
    at.dedup();
    let find = |t: &str, q: u64, p: u64| {
        d.recs
            .iter()
            .find(|r| r.section == "scale" && r.transport == t && key(r) == Some((q, p)))
    };
    at.into_iter()
        .map(|(queues, flows)| ScalePoint {
            queues,
            flows,
            tcp: find("tcp", queues, flows),
            zeronic: find("zeronic", queues, flows),
        })
        .collect()
}

/// The point the multiflow keys take: the largest flow count of the
/// largest queue count measured.
fn scale_top(d: &Data) -> Option<ScalePoint<'_>> {
    scale_points(d).into_iter().next_back()
}

/// "Scaling: flows x queues" (empty without scale rows).
fn scale_table(d: &Data) -> String {
    let mut s = String::new();
    let points = scale_points(d);
    if points.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "| queues | flows | tcp MiB/s | zeronic MiB/s | zeronic/tcp | tcp CPU-s/GiB | zeronic CPU-s/GiB | zeronic/tcp CPU | note |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for p in &points {
        let mut notes = Vec::new();
        for (t, r) in [("tcp", p.tcp), ("zeronic", p.zeronic)] {
            match r {
                Some(r) if !r.ok => notes.push(format!("{t}: {}", r.note)),
                None => notes.push(format!("{t}: not run")),
                _ => {}
            }
        }
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            p.queues,
            p.flows,
            f(ScalePoint::bw(p.tcp).map(mib), 1),
            f(ScalePoint::bw(p.zeronic).map(mib), 1),
            f(p.bw_ratio(), 3),
            f(ScalePoint::cpu(p.tcp), 2),
            f(ScalePoint::cpu(p.zeronic), 2),
            f(p.cpu_ratio(), 3),
            notes.join("; ")
        );
    }
    s
}

/// The attach part's rows (`new`, `spare`), what the p50s are (empty
/// without attach rows).
const ATTACH_ROWS: &[(&str, &str)] = &[
    (
        "new",
        "spare_rings=0: every attach allocates, zeroes and maps its ring",
    ),
    (
        "spare",
        "spare rings on (the default): an attach takes a closed socket's ring",
    ),
];

/// "Attaching a connection": microseconds per step, p50 (attach also p90).
fn attach_table(d: &Data) -> String {
    let mut s = String::new();
    if !d.recs.iter().any(|r| r.section == "attach") {
        return s;
    }
    let _ = writeln!(
        s,
        "| rings | connect p50 us | attach p50 us | attach p90 us | close p50 us | note |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---|");
    for (t, what) in ATTACH_ROWS {
        let note = match d.get("attach", t, 0.0) {
            Some(r) if !r.ok => format!("failed: {}", r.note),
            None => "not run".into(),
            _ => (*what).into(),
        };
        let _ = writeln!(
            s,
            "| {t} | {} | {} | {} | {} | {note} |",
            f(d.attach(t, "connect_p50_us"), 0),
            f(d.attach(t, "attach_p50_us"), 0),
            f(d.attach(t, "attach_p90_us"), 0),
            f(d.attach(t, "close_p50_us"), 0),
        );
    }
    s
}

fn loss_table(d: &Data) -> String {
    let mut s = String::new();
    let _ = write!(s, "| loss % |");
    for t in LOSS_ROWS {
        let _ = write!(s, " {t} MiB/s (x 0%) |");
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "|---:|{}", "---:|".repeat(LOSS_ROWS.len()));
    for loss in d.losses() {
        let _ = write!(
            s,
            "| {loss}{} |",
            if loss >= 5.0 { " + reorder 2%" } else { "" }
        );
        for t in LOSS_ROWS {
            let cell = match d.get("loss", t, loss) {
                Some(r) if r.ok => {
                    let bw = r.bits_per_second;
                    format!(
                        "{} ({})",
                        f(bw.map(mib), 2),
                        f(ratio(bw, d.loss_bw(t, 0.0)), 2)
                    )
                }
                Some(r) => format!("failed: {}", r.note),
                None => "-".into(),
            };
            let _ = write!(s, " {cell} |");
        }
        let _ = writeln!(s);
    }
    s
}

fn keys(d: &Data) -> Vec<(&'static str, Option<f64>)> {
    let l1 = |t: &str| ratio(d.loss_bw(t, 1.0), d.loss_bw(t, 0.0));
    vec![
        (
            "cpu_per_gib_zeronic_vs_tcp",
            ratio(d.cpu("zeronic"), d.cpu("tcp")),
        ),
        (
            "single_flow_zeronic_vs_tcp",
            ratio(d.bw("zeronic"), d.bw("tcp")),
        ),
        ("loss1_vs_loss0_throughput", l1("zeronic")),
        (
            "latency_p50_zeronic_vs_tcp",
            ratio(d.p50("zeronic"), d.p50("tcp")),
        ),
        ("model_vs_memcpy", d.model),
        ("tcp_vs_veth", ratio(d.bw("tcp"), d.bw("veth"))),
        ("zeronic_vs_veth", ratio(d.bw("zeronic"), d.bw("veth"))),
        (
            "cpu_per_gib_zerocopy_vs_tcp",
            ratio(d.cpu("tcp-zerocopy"), d.cpu("tcp")),
        ),
        ("loss1_vs_loss0_zeronic_bbr", l1("zeronic-bbr")),
        ("loss1_vs_loss0_tcp", l1("tcp")),
        ("loss1_vs_loss0_tcp_bbr", l1("tcp-bbr")),
        ("loss1_vs_loss0_rxe", l1("rxe")),
        // The attached socket served by TCP against TCP, same run.
        ("served_vs_tcp", ratio(d.bw(SERVED), d.bw("tcp"))),
        ("served_cpu_vs_tcp", ratio(d.cpu(SERVED), d.cpu("tcp"))),
        ("served_L_vs_tcp", ratio(d.fit_l(SERVED), d.fit_l("tcp"))),
        ("served_rtt_p50_vs_tcp", ratio(d.p50(SERVED), d.p50("tcp"))),
        (
            "served_sweep_min_bw_vs_tcp",
            served_sweep_worst(d, ServedSize::bw_ratio, f64::min),
        ),
        (
            "served_sweep_max_cpu_vs_tcp",
            served_sweep_worst(d, ServedSize::cpu_ratio, f64::max),
        ),
        (
            "served_placed_share",
            d.ok("main", SERVED, 0.0)
                .and_then(|r| r.breakdown.get("zc_placed_share"))
                .and_then(serde_json::Value::as_f64),
        ),
        // The scale part, at its largest flow count of its most queues.
        (
            "multiflow_zeronic_vs_tcp",
            scale_top(d).and_then(|p| p.bw_ratio()),
        ),
        (
            "multiflow_cpu_zeronic_vs_tcp",
            scale_top(d).and_then(|p| p.cpu_ratio()),
        ),
        // The attach part: an attach with spare rings against one without,
        // and against the connect it follows (p50s).
        (
            "attach_spare_vs_new",
            ratio(
                d.attach("spare", "attach_p50_us"),
                d.attach("new", "attach_p50_us"),
            ),
        ),
        (
            "attach_vs_connect",
            ratio(
                d.attach("spare", "attach_p50_us"),
                d.attach("spare", "connect_p50_us"),
            ),
        ),
    ]
}

const COLORS: &[RGBColor] = &[
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

fn plot_sweep(d: &Data, path: &Path) -> DrawResult {
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let pts: Vec<(u64, f64)> = d.sweeps.values().flat_map(|w| w.points.clone()).collect();
    if pts.is_empty() {
        return Ok(());
    }
    let lo = pts.iter().map(|p| p.0).min().unwrap_or(64) as f64;
    let hi = pts.iter().map(|p| p.0).max().unwrap_or(1 << 20) as f64;
    let ymax = pts.iter().map(|p| mib(p.1)).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption("Throughput vs message size (one flow)", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc("message size [bytes]")
        .y_desc("MiB/s")
        .x_label_formatter(&|x| format!("{}", *x as u64))
        .draw()?;
    for (i, (t, w)) in d.sweeps.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let line: Vec<(f64, f64)> = w.points.iter().map(|p| (p.0 as f64, mib(p.1))).collect();
        chart
            .draw_series(LineSeries::new(line.clone(), c.stroke_width(2)))?
            .label(format!("{t} (measured)"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart.draw_series(line.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
        if let Some((l, b, _)) = w.fit {
            // Bulk throughput of the fit: S / (L + S/B).
            let fit: Vec<(f64, f64)> = (0..=64)
                .map(|k| {
                    let s = lo * (hi / lo).powf(k as f64 / 64.0);
                    (s, mib(s * 8.0 / (l * 1e-6 + s * 8.0 / b)))
                })
                .collect();
            chart
                .draw_series(DashedLineSeries::new(fit, 6, 4, c.stroke_width(1)))?
                .label(format!("{t} fit T = L + S/B"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c));
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn plot_loss(d: &Data, path: &Path) -> DrawResult {
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let losses = d.losses();
    if losses.is_empty() {
        return Ok(());
    }
    let ymax = d
        .recs
        .iter()
        .filter(|r| r.section == "loss" && r.ok)
        .filter_map(|r| r.bits_per_second.map(mib))
        .fold(1.0, f64::max)
        * 1.15;
    let n = losses.len();
    let mut chart = ChartBuilder::on(&root)
        .caption("Throughput vs wire loss (one flow)", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.3f64..(n as f64 - 0.7), 0.0..ymax)?;
    let labels = losses.clone();
    chart
        .configure_mesh()
        .x_desc("loss % (the last with 2% reordering)")
        .y_desc("MiB/s")
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < labels.len() {
                format!("{}", labels[i as usize])
            } else {
                String::new()
            }
        })
        .draw()?;
    for (k, t) in LOSS_ROWS.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        let pts: Vec<(f64, f64)> = losses
            .iter()
            .enumerate()
            .filter_map(|(i, l)| d.loss_bw(t, *l).map(|b| (i as f64, mib(b))))
            .collect();
        if pts.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(*t)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn plot_cpu(d: &Data, path: &Path) -> DrawResult {
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let bars: Vec<(&str, f64)> = TRANSPORTS
        .iter()
        .filter_map(|(t, _)| d.cpu(t).map(|c| (*t, c)))
        .collect();
    if bars.is_empty() {
        return Ok(());
    }
    let ymax = bars.iter().map(|b| b.1).fold(1.0, f64::max) * 1.15;
    let n = bars.len();
    let names: Vec<String> = bars.iter().map(|b| b.0.to_string()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Guest CPU per GiB moved (system-wide, both ends)",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0.0..ymax)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc("CPU-seconds per GiB")
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < names.len() {
                names[i as usize].clone()
            } else {
                String::new()
            }
        })
        .draw()?;
    chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
        let x = i as f64;
        Rectangle::new(
            [(x - 0.35, 0.0), (x + 0.35, b.1)],
            COLORS[i % COLORS.len()].filled(),
        )
    }))?;
    root.present()?;
    Ok(())
}

/// The report of the run in `dir`, the plots labelled with `font`.
pub fn run(dir: &Path, font: &Path) -> Result<()> {
    let gdir = dir.join("guest");
    let res = gdir.join("results.jsonl");
    let text =
        std::fs::read_to_string(&res).with_context(|| format!("reading {}", res.display()))?;
    let mut recs = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        recs.push(
            serde_json::from_str::<Rec>(line)
                .with_context(|| format!("{}:{}: not a result", res.display(), i + 1))?,
        );
    }
    if recs.is_empty() {
        bail!("{}: no results", res.display());
    }
    let mut sweeps = BTreeMap::new();
    for t in SWEEPS {
        let ok = recs
            .iter()
            .any(|r| r.section == "sweep" && r.transport == *t && r.ok);
        if ok {
            let p = gdir.join(format!("sweep-{t}.json"));
            match load_sweep(&p) {
                Ok(s) => {
                    sweeps.insert(*t, s);
                }
                Err(e) => eprintln!("zn-bench-report: sweep {t}: {e:#}"),
            }
        }
    }
    let d = Data {
        recs,
        sweeps,
        env: std::fs::read_to_string(gdir.join("env.txt")).unwrap_or_default(),
        model: model_ratio(dir),
    };

    let main_t = main_table(&d);
    let sweep_t = sweep_table(&d);
    let served_t = served_sweep_table(&d);
    let scale_t = scale_table(&d);
    let loss_t = loss_table(&d);
    let keys = keys(&d);

    // Plots: ab_glyph draws text with a font registered from a file.
    let font_data = std::fs::read(font)
        .with_context(|| format!("reading the font {} (fonts-dejavu-core)", font.display()))?;
    plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(font_data.into_boxed_slice()),
    )
    .map_err(|_| anyhow::anyhow!("{}: not a usable font", font.display()))?;
    for (name, draw) in [
        ("sweep.png", plot_sweep as fn(&Data, &Path) -> DrawResult),
        ("loss.png", plot_loss),
        ("cpu.png", plot_cpu),
    ] {
        let p = dir.join(name);
        draw(&d, &p).map_err(|e| anyhow::anyhow!("drawing {}: {e}", p.display()))?;
    }

    let mut md = String::new();
    let _ = writeln!(md, "# ZeroNIC benchmark report (make bench)\n");
    let _ = writeln!(
        md,
        "One run, one two-port guest under QEMU; compare figures as ratios within this \
         run (docs/performance.md says why). Throughput is the receiver's; CPU-s/GiB is \
         system-wide busy CPU time of the guest (both ends share it) per GiB moved; \
         latencies are round-trip times of one 64-byte message.\n"
    );
    let _ = writeln!(md, "```text\n{}```\n", d.env);
    let _ = writeln!(md, "## Transports (one flow, clean wire)\n\n{main_t}");
    for (t, what) in TRANSPORTS {
        let _ = writeln!(md, "- `{t}`: {what}");
    }
    let _ = writeln!(md, "\n![CPU per GiB](cpu.png)\n");
    let bd = breakdown_table(&d);
    if !bd.is_empty() {
        let _ = writeln!(
            md,
            "## Where the time goes (clean-wire bulk runs)\n\nCPU time by kind from \
             /proc/stat, the NIC's interrupts and the model's counters, per GiB or MiB the \
             receiver got (over the whole zn-perf run, set-up included).\n\n{bd}"
        );
    }
    let _ = writeln!(
        md,
        "## Message-size sweep\n\n{sweep_t}\n![sweep](sweep.png)\n"
    );
    if !served_t.is_empty() {
        let _ = writeln!(
            md,
            "### Served by TCP against TCP, per size\n\nThe attached socket (`{SERVED}`) \
             over plain `tcp` of this run, the receiver's figures: throughput (above 1: \
             served is faster) and CPU-s/GiB (below 1: served costs less).\n\n{served_t}"
        );
    }
    if !scale_t.is_empty() {
        let _ = writeln!(
            md,
            "## Scaling: flows × queues\n\nzn-perf -P flows, plain (`tcp`) and offloaded \
             (`zeronic`), with both ports at the given number of combined channels; \
             aggregate throughput of all flows, and CPU-s/GiB as in the other tables.\n\n{scale_t}"
        );
    }
    let attach_t = attach_table(&d);
    if !attach_t.is_empty() {
        let _ = writeln!(
            md,
            "## Attaching a connection\n\nzn-perf attach: short connections opened, \
             attached at both ends by setsockopt(TCP_ULP, \"zeronic\") and closed; \
             microseconds per step (attach: either end).\n\n{attach_t}"
        );
    }
    let _ = writeln!(md, "## Loss sweep\n\n{loss_t}\n![loss](loss.png)\n");
    let _ = writeln!(md, "## Figures\n\n```text");
    for (k, v) in &keys {
        let _ = writeln!(
            md,
            "{k}={}",
            v.map_or_else(|| "unavailable".into(), |x| format!("{x:.3}"))
        );
    }
    let _ = writeln!(md, "```");
    let rp = dir.join("report.md");
    std::fs::write(&rp, &md).with_context(|| format!("writing {}", rp.display()))?;

    println!("== Transports (one flow, clean wire; RTT of 64-byte messages) ==");
    print!("{main_t}");
    let bd = breakdown_table(&d);
    if !bd.is_empty() {
        println!("\n== Where the time goes (clean-wire bulk runs, per GiB / MiB received) ==");
        print!("{bd}");
    }
    println!("\n== Message-size sweep (T = L + S/B) ==");
    print!("{sweep_t}");
    if !served_t.is_empty() {
        println!("\n== Served by TCP ({SERVED}) against tcp, per size ==");
        print!("{served_t}");
    }
    if !scale_t.is_empty() {
        println!("\n== Scaling: flows × queues (aggregate of all flows) ==");
        print!("{scale_t}");
    }
    if !attach_t.is_empty() {
        println!("\n== Attaching a connection (zn-perf attach, microseconds) ==");
        print!("{attach_t}");
    }
    println!("\n== Loss sweep ==");
    print!("{loss_t}");
    println!(
        "\nreport: {} (plots sweep.png loss.png cpu.png)",
        rp.display()
    );
    for (k, v) in &keys {
        println!(
            "{k}={}",
            v.map_or_else(|| "unavailable".into(), |x| format!("{x:.3}"))
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(line: &str) -> Rec {
        serde_json::from_str(line).unwrap()
    }

    fn data(lines: &[&str]) -> Data {
        Data {
            recs: lines.iter().map(|l| rec(l)).collect(),
            sweeps: BTreeMap::new(),
            env: String::new(),
            model: Some(0.7),
        }
    }

    const MAIN: &[&str] = &[
        r#"{"section":"main","transport":"zeronic","loss":0,"ok":true,"note":"","bits_per_second":4e8,"cpu_s_per_gib":10.0,"user_s_per_gib":1.5}"#,
        r#"{"section":"main","transport":"tcp","loss":0,"ok":true,"note":"","bits_per_second":1e8,"cpu_s_per_gib":50.0}"#,
        r#"{"section":"main","transport":"rxe","loss":0,"ok":false,"note":"ib_write_bw failed: x"}"#,
        r#"{"section":"lat","transport":"zeronic","loss":0,"ok":true,"note":"","lat_p50_us":300.0}"#,
        r#"{"section":"lat","transport":"tcp","loss":0,"ok":true,"note":"","lat_p50_us":200.0}"#,
        r#"{"section":"loss","transport":"zeronic","loss":0,"ok":true,"note":"","bits_per_second":4e8}"#,
        r#"{"section":"loss","transport":"zeronic","loss":1,"ok":true,"note":"","bits_per_second":1e8}"#,
        r#"{"section":"loss","transport":"tcp","loss":1,"ok":false,"note":"stalled"}"#,
    ];

    #[test]
    fn key_ratios() {
        let d = data(MAIN);
        let k: BTreeMap<_, _> = keys(&d).into_iter().collect();
        assert_eq!(k["cpu_per_gib_zeronic_vs_tcp"], Some(0.2));
        assert_eq!(k["single_flow_zeronic_vs_tcp"], Some(4.0));
        assert_eq!(k["loss1_vs_loss0_throughput"], Some(0.25));
        assert_eq!(k["latency_p50_zeronic_vs_tcp"], Some(1.5));
        assert_eq!(k["model_vs_memcpy"], Some(0.7));
        // Missing or failed figures are unavailable, never 0 or NaN.
        assert_eq!(k["tcp_vs_veth"], None);
        assert_eq!(k["loss1_vs_loss0_tcp"], None);
        assert_eq!(k["loss1_vs_loss0_rxe"], None);
    }

    #[test]
    fn failed_rows_say_why() {
        let d = data(MAIN);
        let t = main_table(&d);
        let rxe = t.lines().find(|l| l.starts_with("| rxe |")).unwrap();
        assert!(rxe.contains("ib_write_bw failed: x"), "{rxe}");
        let veth = t.lines().find(|l| l.starts_with("| veth |")).unwrap();
        assert!(veth.contains("not run"), "{veth}");
        let l = loss_table(&d);
        assert!(l.contains("failed: stalled"), "{l}");
        let b = breakdown_table(&d);
        assert!(b.contains("| zeronic | 1.50 |"), "{b}");
        assert!(!b.contains("| tcp |"), "{b}");
    }

    /// A sweep of (bytes, bits/s, CPU-s/GiB) points and a fit's L.
    fn sweep(pts: &[(u64, f64, f64)], l_us: f64) -> Sweep {
        Sweep {
            points: pts.iter().map(|p| (p.0, p.1)).collect(),
            cpu: pts.iter().map(|p| (p.0, p.2)).collect(),
            fit: Some((l_us, 1e9, l_us * 1e3)),
        }
    }

    const SERVED_RUN: &[&str] = &[
        r#"{"section":"main","transport":"tcp","loss":0,"ok":true,"note":"","bits_per_second":2e8,"cpu_s_per_gib":40.0}"#,
        r#"{"section":"main","transport":"zeronic-served","loss":0,"ok":true,"note":"","bits_per_second":3e8,"cpu_s_per_gib":20.0,"zc_placed_share":0.875}"#,
        r#"{"section":"lat","transport":"tcp","loss":0,"ok":true,"note":"","lat_p50_us":400.0}"#,
        r#"{"section":"lat","transport":"zeronic-served","loss":0,"ok":true,"note":"","lat_p50_us":300.0}"#,
    ];

    fn served_data() -> Data {
        let mut d = data(SERVED_RUN);
        d.sweeps.insert(
            "tcp",
            sweep(
                &[(64, 1e6, 100.0), (4096, 5e7, 40.0), (1 << 20, 2e8, 40.0)],
                10.0,
            ),
        );
        d.sweeps.insert(
            SERVED,
            sweep(
                &[(64, 9e5, 110.0), (4096, 1e8, 30.0), (1 << 20, 4e8, 20.0)],
                12.0,
            ),
        );
        d
    }

    #[test]
    fn served_key_ratios() {
        let d = served_data();
        let k: BTreeMap<_, _> = keys(&d).into_iter().collect();
        assert_eq!(k["served_vs_tcp"], Some(1.5));
        assert_eq!(k["served_cpu_vs_tcp"], Some(0.5));
        assert_eq!(k["served_L_vs_tcp"], Some(1.2));
        assert_eq!(k["served_rtt_p50_vs_tcp"], Some(0.75));
        // The worst size: 64 bytes, slower (0.9) and costlier (1.1).
        assert_eq!(k["served_sweep_min_bw_vs_tcp"], Some(9e5 / 1e6));
        assert_eq!(k["served_sweep_max_cpu_vs_tcp"], Some(110.0 / 100.0));
        assert_eq!(k["served_placed_share"], Some(0.875));
        // The zeronic keys are not made of the served rows.
        assert_eq!(k["single_flow_zeronic_vs_tcp"], None);
    }

    #[test]
    fn served_keys_unavailable_without_both_figures() {
        let mut d = served_data();
        // A failed served bulk run, no served latency row, no TCP fit.
        d.recs[1].ok = false;
        d.recs.remove(3);
        d.sweeps.get_mut("tcp").unwrap().fit = None;
        // A size the served sweep lacks: "at every size" cannot be said.
        d.sweeps.get_mut("tcp").unwrap().points.push((8 << 20, 2e8));
        let k: BTreeMap<_, _> = keys(&d).into_iter().collect();
        for key in [
            "served_vs_tcp",
            "served_cpu_vs_tcp",
            "served_L_vs_tcp",
            "served_rtt_p50_vs_tcp",
            "served_sweep_min_bw_vs_tcp",
            "served_sweep_max_cpu_vs_tcp",
            "served_placed_share",
        ] {
            assert_eq!(k[key], None, "{key}");
        }
    }

    #[test]
    fn served_sweep_table_per_size() {
        let d = served_data();
        let t = served_sweep_table(&d);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(rows.len(), 2 + 3, "{t}");
        // 4096 bytes: 5e7 and 1e8 bits/s are 5.96 and 11.92 MiB/s.
        assert_eq!(
            rows[3],
            "| 4096 | 6.0 | 11.9 | 2.000 | 40.00 | 30.00 | 0.750 |"
        );
        assert_eq!(
            rows[4],
            "| 1048576 | 23.8 | 47.7 | 2.000 | 40.00 | 20.00 | 0.500 |"
        );
        let mut d = d;
        d.sweeps.remove(SERVED);
        let t = served_sweep_table(&d);
        assert!(t.contains("| 64 | 0.1 | - | - | 100.00 | - | - |"), "{t}");
        d.sweeps.clear();
        assert_eq!(served_sweep_table(&d), "");
    }

    /// The attach part: spare rings off, then on.
    const ATTACH_RUN: &[&str] = &[
        r#"{"section":"attach","transport":"new","loss":0,"ok":true,"note":"","connect_p50_us":900,"attach_p50_us":12000,"attach_p90_us":15000,"close_p50_us":4000,"rounds":100}"#,
        r#"{"section":"attach","transport":"spare","loss":0,"ok":true,"note":"","connect_p50_us":1000,"attach_p50_us":3000,"attach_p90_us":5000,"close_p50_us":5000,"rounds":100}"#,
    ];

    #[test]
    fn attach_table_and_keys() {
        let d = data(ATTACH_RUN);
        let t = attach_table(&d);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(rows.len(), 4, "{t}");
        assert!(
            rows[2].starts_with("| new | 900 | 12000 | 15000 | 4000 | spare_rings=0"),
            "{t}"
        );
        assert!(
            rows[3].starts_with("| spare | 1000 | 3000 | 5000 | 5000 | spare rings on"),
            "{t}"
        );
        let k: BTreeMap<_, _> = keys(&d).into_iter().collect();
        assert_eq!(k["attach_spare_vs_new"], Some(0.25));
        assert_eq!(k["attach_vs_connect"], Some(3.0));
        // A failed run: its row says so, and no ratio uses it.
        let mut d = d;
        d.recs[0].ok = false;
        d.recs[0].note = "module reload failed".into();
        assert!(attach_table(&d).contains("| new | - | - | - | - | failed: module reload failed |"));
        let k: BTreeMap<_, _> = keys(&d).into_iter().collect();
        assert_eq!(k["attach_spare_vs_new"], None);
        assert_eq!(attach_table(&data(MAIN)), "");
    }

    /// The scale part: 1 and 2 queues, 1, 8 and 64 flows (recorded in
    /// bench-guest's order: per queue count, per flow count, tcp first).
    const SCALE_RUN: &[&str] = &[
        r#"{"section":"scale","transport":"tcp","loss":0,"ok":true,"note":"","bits_per_second":1e8,"cpu_s_per_gib":40.0,"msg_size":65536,"flows":1,"queues":1}"#,
        r#"{"section":"scale","transport":"zeronic","loss":0,"ok":true,"note":"","bits_per_second":3e8,"cpu_s_per_gib":10.0,"msg_size":65536,"flows":1,"queues":1}"#,
        r#"{"section":"scale","transport":"tcp","loss":0,"ok":true,"note":"","bits_per_second":2e8,"cpu_s_per_gib":40.0,"flows":64,"queues":1}"#,
        r#"{"section":"scale","transport":"zeronic","loss":0,"ok":false,"note":"zn-perf failed: x","flows":64,"queues":1}"#,
        r#"{"section":"scale","transport":"tcp","loss":0,"ok":true,"note":"","bits_per_second":1e8,"cpu_s_per_gib":45.0,"flows":8,"queues":2}"#,
        r#"{"section":"scale","transport":"zeronic","loss":0,"ok":true,"note":"","bits_per_second":2e8,"cpu_s_per_gib":15.0,"flows":8,"queues":2}"#,
        r#"{"section":"scale","transport":"tcp","loss":0,"ok":true,"note":"","bits_per_second":2e8,"cpu_s_per_gib":50.0,"flows":64,"queues":2}"#,
        r#"{"section":"scale","transport":"zeronic","loss":0,"ok":true,"note":"","bits_per_second":5e8,"cpu_s_per_gib":20.0,"flows":64,"queues":2}"#,
        // Not scale rows: the main tcp row has no flows or queues.
        r#"{"section":"main","transport":"tcp","loss":0,"ok":true,"note":"","bits_per_second":9e8,"cpu_s_per_gib":1.0}"#,
    ];

    #[test]
    fn scale_table_per_queues_and_flows() {
        let d = data(SCALE_RUN);
        let t = scale_table(&d);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(rows.len(), 2 + 4, "{t}");
        // In order of queues, then flows (64 after 8, as numbers).
        assert_eq!(
            rows[2],
            "| 1 | 1 | 11.9 | 35.8 | 3.000 | 40.00 | 10.00 | 0.250 |  |"
        );
        assert_eq!(
            rows[3],
            "| 1 | 64 | 23.8 | - | - | 40.00 | - | - | zeronic: zn-perf failed: x |"
        );
        assert!(
            rows[4].starts_with("| 2 | 8 | 11.9 | 23.8 | 2.000 |"),
            "{t}"
        );
        assert_eq!(
            rows[5],
            "| 2 | 64 | 23.8 | 59.6 | 2.500 | 50.00 | 20.00 | 0.400 |  |"
        );
        assert_eq!(scale_table(&data(MAIN)), "");
    }

    #[test]
    fn multiflow_keys_at_most_flows_of_most_queues() {
        let k: BTreeMap<_, _> = keys(&data(SCALE_RUN)).into_iter().collect();
        assert_eq!(k["multiflow_zeronic_vs_tcp"], Some(2.5));
        assert_eq!(k["multiflow_cpu_zeronic_vs_tcp"], Some(0.4));
        // That point's offload failed (or never ran): unavailable, not a
        // ratio of another point.
        let mut d = data(SCALE_RUN);
        d.recs[7].ok = false;
        let k: BTreeMap<_, _> = keys(&d).into_iter().collect();
        assert_eq!(k["multiflow_zeronic_vs_tcp"], None);
        assert_eq!(k["multiflow_cpu_zeronic_vs_tcp"], None);
        d.recs.remove(7);
        let t = scale_table(&d);
        assert!(
            t.contains("| 2 | 64 | 23.8 | - | - | 50.00 | - | - | zeronic: not run |"),
            "{t}"
        );
        assert_eq!(
            keys(&d).into_iter().collect::<BTreeMap<_, _>>()["multiflow_zeronic_vs_tcp"],
            None
        );
        let k: BTreeMap<_, _> = keys(&data(MAIN)).into_iter().collect();
        assert_eq!(k["multiflow_zeronic_vs_tcp"], None);
        assert_eq!(k["multiflow_cpu_zeronic_vs_tcp"], None);
    }

    #[test]
    fn sweep_of_a_zn_perf_document() {
        let dir = std::env::temp_dir().join(format!("zn-bench-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("sweep.json");
        std::fs::write(
            &p,
            r#"{"results":[
                {"msg_size":1024,"local":{"role":"send","bits_per_second":1.0,"cpu":{"seconds_per_gib":9.0}},"remote":{"role":"recv","bits_per_second":8e6,"cpu":{"seconds_per_gib":3.5}}},
                {"msg_size":2048,"local":{"role":"send","bits_per_second":1.0},"remote":{"role":"recv","bits_per_second":1.6e7}}],
              "fit":{"latency_us":1.0,"bits_per_second":2e7,"half_bandwidth_bytes":2.5,"points":2}}"#,
        )
        .unwrap();
        let s = load_sweep(&p).unwrap();
        assert_eq!(s.points, vec![(1024, 8e6), (2048, 1.6e7)]);
        // The receiver's CPU figure, where it has one.
        assert_eq!(s.cpu, BTreeMap::from([(1024, 3.5)]));
        assert_eq!(s.fit, Some((1.0, 2e7, 2.5)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! What a run reports: the result types (also the JSON shape of `--json`
//! and of the control protocol's `result` message), the human tables, the
//! latency percentiles and the fit of a size sweep.

use crate::cpu::CpuReport;
use crate::stream::Hash;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Data path of one end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// read()/write() on the socket (Linux TCP's copies).
    Plain,
    /// The socket attached to the NIC (FLOW_ATTACH): zero-copy sends and receives.
    Offload,
    /// The plain path on a socket attached by `setsockopt(SOL_TCP, TCP_ULP,
    /// "zeronic")` (docs/uapi.md, "Attaching a socket by setsockopt"): the
    /// same read()/write(), served by Linux TCP, with received payload placed
    /// by the NIC into a kernel ring that TCP's skbs reference.
    Served,
}

impl Mode {
    /// The data moves by read()/write() on the socket (plain or served).
    pub fn is_socket_io(self) -> bool {
        matches!(self, Mode::Plain | Mode::Served)
    }
}

/// Receive mode of an offloaded end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum RxKind {
    /// Posted receive segments of the message size, each completed when full.
    Message,
    /// A receive ring the application consumes (byte stream).
    Stream,
}

/// What a test measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Bandwidth,
    Latency,
}

/// What one end does in a test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Bulk sender.
    Send,
    /// Bulk receiver.
    Recv,
    /// Latency: sends a message, waits for it to come back.
    Ping,
    /// Latency: sends back what it receives.
    Echo,
    /// Bidirectional bulk (`--bidir`): sends and receives at once.
    Both,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Send => "send",
            Role::Recv => "recv",
            Role::Ping => "ping",
            Role::Echo => "echo",
            Role::Both => "both",
        }
    }
}

/// The parameters of one test, set by the client and sent to the server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TestSpec {
    pub kind: Kind,
    /// Message size: bytes per send (write() or SEND work request) and per
    /// receive (read() or receive segment).
    pub msg_size: u64,
    /// Parallel connections.
    pub flows: u32,
    /// Bytes each flow sends (bandwidth), or None for a duration.
    pub bytes: Option<u64>,
    /// Seconds the senders send (bandwidth), if not a byte count.
    pub duration: Option<f64>,
    /// A digest of every stream on both ends.
    pub verify: bool,
    /// The digest `verify` computes (older clients: XXH64).
    #[serde(default)]
    pub hash: Hash,
    /// Seed of flow i's payload is seed + i.
    pub seed: u64,
    /// The server sends (bandwidth).
    pub reverse: bool,
    /// Latency: measured round trips.
    pub iters: u64,
    /// Latency: round trips before measuring.
    pub warmup: u64,
    /// Bandwidth: every flow carries `bytes` each way at once (both ends
    /// send and receive); needs `bytes`.
    #[serde(default)]
    pub bidir: bool,
    /// With `verify` and `bytes`: flow i's stream digest (`hash` of the
    /// `bytes` bytes of seed + i), computed beforehand (`zn-perf digest`,
    /// the client's `--digests`). Senders report it as their `tx_digest`
    /// instead of hashing what they generate; receivers hash as always.
    #[serde(default)]
    pub sent_digests: Option<Vec<String>>,
}

impl TestSpec {
    /// The digest each stream gets: `hash` with `verify`, else none.
    pub fn verify_hash(&self) -> Option<Hash> {
        self.verify.then_some(self.hash)
    }
}

/// An offloaded flow's counters (`ZERONIC_IOC_FLOW_QUERY`) at the end.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub state: String,
    pub rx_placed_bytes: u64,
    pub rx_copied_bytes: u64,
    pub tx_merged_bytes: u64,
    pub tx_copied_bytes: u64,
    pub rx_stream_off: u64,
    pub tx_stream_off: u64,
    pub rx_posted: u32,
    pub tx_posted: u32,
}

/// One flow of one end.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowReport {
    pub index: u32,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    /// XXH64 of the bytes sent, in order (with --verify).
    pub tx_digest: Option<String>,
    /// XXH64 of the bytes received, in order (with --verify).
    pub rx_digest: Option<String>,
    /// Offload: the flow's counters.
    pub counters: Option<Counters>,
    /// Offload: receive completions flagged COPIED.
    pub copied_completions: u64,
    /// Plain sender with `--zerocopy`: its `MSG_ZEROCOPY` sends.
    #[serde(default)]
    pub zerocopy: Option<ZcCounters>,
}

/// A plain sender's `MSG_ZEROCOPY` sends (`--zerocopy`), from the
/// completion notifications on the socket's error queue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ZcCounters {
    /// send() calls that took bytes with `MSG_ZEROCOPY`.
    pub sends: u64,
    /// Of those, how many the kernel reported complete.
    pub completed: u64,
    /// Of the completed, how many the kernel reported it had copied after
    /// all (`SO_EE_CODE_ZEROCOPY_COPIED`: e.g. delivery to a local socket,
    /// a device without scatter-gather).
    pub copied: u64,
}

/// Latency statistics of round trips, microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub min: f64,
    pub median: f64,
    pub avg: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub stdev: f64,
}

/// The nearest-rank `p`-th percentile (0..=100) of `sorted` (ascending);
/// `None` if it is empty.
pub fn nearest_rank<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    let n = sorted.len();
    // (The epsilon keeps 99.9% of 1000 at rank 999, not 1000.)
    let r = (p * n as f64 / 100.0 - 1e-9).ceil() as usize;
    sorted.get(r.clamp(1, n.max(1)) - 1).copied()
}

impl Percentiles {
    /// Statistics of `samples` (any order; nearest-rank percentiles).
    pub fn of(samples: &mut [f64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let rank = |p: f64| nearest_rank(samples, p).unwrap_or(0.0);
        let avg = samples.iter().sum::<f64>() / n as f64;
        let var = samples.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        Self {
            min: samples[0],
            median: rank(50.0),
            avg,
            p99: rank(99.0),
            p999: rank(99.9),
            max: samples[n - 1],
            stdev: var.sqrt(),
        }
    }
}

/// Ping-pong results (the pinging end).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyReport {
    pub iterations: u64,
    pub warmup: u64,
    /// Round-trip time (send of a message to the end of its echo), µs.
    pub rtt_us: Percentiles,
}

/// What one end measured in one test.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SideResult {
    /// "client" or "server".
    pub host: String,
    pub role: Role,
    pub mode: Mode,
    /// Offload: the receive mode the flows were attached with.
    pub rx_mode: Option<RxKind>,
    /// Bytes this end moved in its direction (sent by a sender, received by
    /// a receiver, both ways for latency).
    pub bytes: u64,
    /// Messages: sends completed (sender), receive completions or reads
    /// (receiver), round trips (latency).
    pub messages: u64,
    /// From the start signal to this end's last byte (a sender's last
    /// completion, a receiver's EOF).
    pub seconds: f64,
    pub bits_per_second: f64,
    pub cpu: CpuReport,
    pub flows: Vec<FlowReport>,
    pub latency: Option<LatencyReport>,
    /// Plain sender: sends were `MSG_ZEROCOPY` (`--zerocopy`).
    #[serde(default)]
    pub zerocopy: bool,
    /// The congestion control the data sockets used (`--congestion`, or
    /// the system default `net.ipv4.tcp_congestion_control`).
    #[serde(default)]
    pub congestion: Option<String>,
}

impl SideResult {
    fn counter_sum(&self, f: impl Fn(&Counters) -> u64) -> Option<u64> {
        let mut any = false;
        let s = self
            .flows
            .iter()
            .filter_map(|fl| fl.counters.as_ref())
            .inspect(|_| any = true)
            .map(f)
            .sum();
        any.then_some(s)
    }
}

/// One message size of a test: this end and, on the client, the server's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SizeResult {
    pub msg_size: u64,
    pub local: SideResult,
    pub remote: Option<SideResult>,
    /// Client with --verify: every flow's digests agree both ways.
    pub verified: Option<bool>,
}

/// The fit of a bandwidth sweep to T = L + S/B (time per message T of
/// size S): startup latency L, asymptotic bandwidth B, and the size that
/// reaches half of B (n½ = L·B).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    pub latency_us: f64,
    pub bits_per_second: f64,
    pub half_bandwidth_bytes: f64,
    /// Points used.
    pub points: usize,
}

/// Fits T = L + S/B to (size, bits per second) points by least squares on
/// relative error (weights 1/T²), so small and large sizes count alike.
/// None with fewer than two points or a non-increasing T.
pub fn fit_sweep(points: &[(u64, f64)]) -> Option<Fit> {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|(s, bps)| *s > 0 && *bps > 0.0)
        .map(|&(s, bps)| (s as f64, s as f64 * 8.0 / bps))
        .collect();
    if pts.len() < 2 {
        return None;
    }
    let (mut sw, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, t) in &pts {
        let w = 1.0 / (t * t);
        sw += w;
        sx += w * x;
        sy += w * t;
        sxx += w * x * x;
        sxy += w * x * t;
    }
    let det = sw * sxx - sx * sx;
    if det.abs() < f64::MIN_POSITIVE {
        return None;
    }
    let slope = (sw * sxy - sx * sy) / det; // seconds per byte
    let l = (sy - slope * sx) / sw; // seconds
    if slope <= 0.0 {
        return None;
    }
    let b = 1.0 / slope; // bytes per second
    Some(Fit {
        latency_us: l * 1e6,
        bits_per_second: b * 8.0,
        half_bandwidth_bytes: (l * b).max(0.0),
        points: pts.len(),
    })
}

/// The whole output of one run of zn-perf (`--json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Document {
    pub tool: String,
    pub version: String,
    /// "client" or "server".
    pub host: String,
    pub spec: Option<TestSpec>,
    pub results: Vec<SizeResult>,
    pub fit: Option<Fit>,
    /// Client with --verify: all sizes verified.
    pub verified: Option<bool>,
}

impl Document {
    pub fn new(host: &str, spec: Option<TestSpec>) -> Self {
        Self {
            tool: "zn-perf".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            host: host.into(),
            spec,
            results: Vec::new(),
            fit: None,
            verified: None,
        }
    }
}

/// Sizes of a sweep: the powers of two from `min` to `max`.
pub fn sweep_sizes(min: u64, max: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = min.max(1).next_power_of_two();
    while s <= max {
        v.push(s);
        match s.checked_mul(2) {
            Some(n) => s = n,
            None => break,
        }
    }
    v
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |x| x.to_string())
}

fn optf(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.prec$}"))
}

/// The header of the bandwidth table.
pub fn bw_header() -> String {
    format!(
        " {:>8}  {:<6} {:<4} {:<15} {:>5} {:>12} {:>8} {:>9} {:>10} {:>10} {:>7} {:>11} {:>12} {:>10} {:>12} {:>10}",
        "#bytes",
        "side",
        "role",
        "mode",
        "flows",
        "bytes",
        "seconds",
        "BW[Gb/s]",
        "BW[MiB/s]",
        "CPU[s/GiB]",
        "CPU[%]",
        "proc[s/GiB]",
        "placed",
        "copied",
        "merged",
        "txcopied"
    )
}

fn mode_label(r: &SideResult) -> String {
    match (r.mode, r.rx_mode) {
        (Mode::Offload, Some(RxKind::Message)) => "offload/message".into(),
        (Mode::Offload, Some(RxKind::Stream)) => "offload/stream".into(),
        (Mode::Offload, None) => "offload".into(),
        (Mode::Plain, _) if r.zerocopy => "plain/zerocopy".into(),
        (Mode::Plain, _) => "plain".into(),
        (Mode::Served, _) if r.zerocopy => "served/zerocopy".into(),
        (Mode::Served, _) => "served".into(),
    }
}

/// One row of the bandwidth table.
pub fn bw_row(size: u64, side: &str, r: &SideResult) -> String {
    format!(
        " {:>8}  {:<6} {:<4} {:<15} {:>5} {:>12} {:>8.3} {:>9.3} {:>10.2} {:>10} {:>7.1} {:>11} {:>12} {:>10} {:>12} {:>10}",
        size,
        side,
        r.role.name(),
        mode_label(r),
        r.flows.len(),
        r.bytes,
        r.seconds,
        r.bits_per_second / 1e9,
        r.bytes as f64 / (1u64 << 20) as f64 / r.seconds.max(1e-9),
        optf(r.cpu.seconds_per_gib, 3),
        r.cpu.util_percent,
        optf(r.cpu.process_seconds_per_gib, 3),
        opt(r.counter_sum(|c| c.rx_placed_bytes)),
        opt(r.counter_sum(|c| c.rx_copied_bytes)),
        opt(r.counter_sum(|c| c.tx_merged_bytes)),
        opt(r.counter_sum(|c| c.tx_copied_bytes)),
    )
}

/// The header of the latency table.
pub fn lat_header() -> String {
    format!(
        " {:>8} {:>8}  {:<15} {:>10} {:>13} {:>10} {:>10} {:>12} {:>10} {:>10}",
        "#bytes",
        "#iters",
        "mode",
        "t_min[us]",
        "t_median[us]",
        "t_avg[us]",
        "t_p99[us]",
        "t_p99.9[us]",
        "t_max[us]",
        "CPU[us/tr]"
    )
}

/// One row of the latency table (the pinging end's result).
pub fn lat_row(size: u64, r: &SideResult) -> String {
    let l = r.latency.clone().unwrap_or_default();
    let p = &l.rtt_us;
    format!(
        " {:>8} {:>8}  {:<15} {:>10.1} {:>13.1} {:>10.1} {:>10.1} {:>12.1} {:>10.1} {:>10}",
        size,
        l.iterations,
        mode_label(r),
        p.min,
        p.median,
        p.avg,
        p.p99,
        p.p999,
        p.max,
        optf(r.cpu.us_per_transaction, 1)
    )
}

/// Per-flow lines: digests and counters, as `# ` comments.
pub fn flow_lines(side: &str, r: &SideResult) -> String {
    let mut s = String::new();
    for f in &r.flows {
        let _ = write!(
            s,
            "# {side} flow {}: tx {} B rx {} B",
            f.index, f.tx_bytes, f.rx_bytes
        );
        if let Some(h) = &f.tx_digest {
            let _ = write!(s, " tx_digest {h}");
        }
        if let Some(h) = &f.rx_digest {
            let _ = write!(s, " rx_digest {h}");
        }
        if let Some(c) = &f.counters {
            let _ = write!(
                s,
                " [{}: placed {} copied {} merged {} txcopied {}]",
                c.state, c.rx_placed_bytes, c.rx_copied_bytes, c.tx_merged_bytes, c.tx_copied_bytes
            );
        }
        if let Some(z) = &f.zerocopy {
            let _ = write!(
                s,
                " [MSG_ZEROCOPY: sends {} completed {} copied {}]",
                z.sends, z.completed, z.copied
            );
        }
        s.push('\n');
    }
    s
}

/// Whether the digests of `a`'s sends match `b`'s receives and the other
/// way round, flow by flow (only directions that carried bytes).
pub fn digests_match(a: &SideResult, b: &SideResult) -> Result<(), String> {
    if a.flows.len() != b.flows.len() {
        return Err(format!(
            "{} flows here, {} there",
            a.flows.len(),
            b.flows.len()
        ));
    }
    for (x, y) in a.flows.iter().zip(&b.flows) {
        for (dir, tx, rx, txb, rxb) in [
            ("->", &x.tx_digest, &y.rx_digest, x.tx_bytes, y.rx_bytes),
            ("<-", &y.tx_digest, &x.rx_digest, y.tx_bytes, x.rx_bytes),
        ] {
            if txb == 0 && rxb == 0 {
                continue;
            }
            if txb != rxb {
                return Err(format!(
                    "flow {} {dir}: {txb} bytes sent, {rxb} received",
                    x.index
                ));
            }
            match (tx, rx) {
                (Some(t), Some(r)) if t == r => {}
                (Some(t), Some(r)) => {
                    return Err(format!(
                        "flow {} {dir}: sent digest {t}, received digest {r}",
                        x.index
                    ))
                }
                _ => return Err(format!("flow {} {dir}: a digest is missing", x.index)),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(role: Role, mode: Mode) -> SideResult {
        SideResult {
            host: "client".into(),
            role,
            mode,
            rx_mode: (mode == Mode::Offload).then_some(RxKind::Stream),
            bytes: 1 << 26,
            messages: 64,
            seconds: 2.0,
            bits_per_second: (1u64 << 26) as f64 * 8.0 / 2.0,
            cpu: CpuReport::default(),
            flows: vec![FlowReport {
                index: 0,
                tx_bytes: if role == Role::Send { 1 << 26 } else { 0 },
                rx_bytes: if role == Role::Recv { 1 << 26 } else { 0 },
                tx_digest: (role == Role::Send).then(|| "ab".into()),
                rx_digest: (role == Role::Recv).then(|| "ab".into()),
                counters: (mode == Mode::Offload).then(|| Counters {
                    state: "eof".into(),
                    rx_placed_bytes: 100,
                    rx_copied_bytes: 5,
                    ..Default::default()
                }),
                copied_completions: 0,
                zerocopy: None,
            }],
            latency: None,
            zerocopy: false,
            congestion: None,
        }
    }

    #[test]
    fn percentiles_nearest_rank() {
        let mut v: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        let p = Percentiles::of(&mut v);
        assert_eq!(p.min, 1.0);
        assert_eq!(p.median, 500.0);
        assert_eq!(p.p99, 990.0);
        assert_eq!(p.p999, 999.0);
        assert_eq!(p.max, 1000.0);
        assert!((p.avg - 500.5).abs() < 1e-9);
        let mut one = vec![7.0];
        let p = Percentiles::of(&mut one);
        assert_eq!(
            (p.min, p.median, p.p99, p.p999, p.max),
            (7.0, 7.0, 7.0, 7.0, 7.0)
        );
        assert_eq!(Percentiles::of(&mut []), Percentiles::default());
    }

    #[test]
    fn fit_recovers_the_model() {
        // L = 20 µs, B = 1 GB/s: T(S) = 20e-6 + S / 1e9.
        let pts: Vec<(u64, f64)> = sweep_sizes(64, 1 << 22)
            .into_iter()
            .map(|s| {
                let t = 20e-6 + s as f64 / 1e9;
                (s, s as f64 * 8.0 / t)
            })
            .collect();
        let f = fit_sweep(&pts).unwrap();
        assert!((f.latency_us - 20.0).abs() < 1e-6, "{f:?}");
        assert!((f.bits_per_second - 8e9).abs() / 8e9 < 1e-9, "{f:?}");
        assert!((f.half_bandwidth_bytes - 20_000.0).abs() < 1e-3, "{f:?}");
        assert_eq!(f.points, pts.len());
        assert!(fit_sweep(&pts[..1]).is_none());
    }

    #[test]
    fn sweep_sizes_are_powers_of_two() {
        assert_eq!(sweep_sizes(64, 1024), vec![64, 128, 256, 512, 1024]);
        assert_eq!(sweep_sizes(100, 600), vec![128, 256, 512]);
        assert_eq!(sweep_sizes(2, 2), vec![2]);
        assert!(sweep_sizes(4096, 1024).is_empty());
    }

    #[test]
    fn json_shape() {
        let mut doc = Document::new(
            "client",
            Some(TestSpec {
                kind: Kind::Bandwidth,
                msg_size: 65536,
                flows: 1,
                bytes: Some(1 << 26),
                duration: None,
                verify: true,
                hash: Hash::Xxh64,
                seed: 1,
                reverse: false,
                iters: 0,
                warmup: 0,
                bidir: false,
                sent_digests: None,
            }),
        );
        doc.results.push(SizeResult {
            msg_size: 65536,
            local: side(Role::Send, Mode::Plain),
            remote: Some(side(Role::Recv, Mode::Offload)),
            verified: Some(true),
        });
        let v: serde_json::Value = serde_json::to_value(&doc).unwrap();
        assert_eq!(v["tool"], "zn-perf");
        assert_eq!(v["spec"]["kind"], "bandwidth");
        let r = &v["results"][0];
        assert_eq!(r["msg_size"], 65536);
        assert_eq!(r["local"]["role"], "send");
        assert_eq!(r["local"]["mode"], "plain");
        assert_eq!(r["local"]["rx_mode"], serde_json::Value::Null);
        assert_eq!(r["remote"]["mode"], "offload");
        assert_eq!(r["remote"]["rx_mode"], "stream");
        assert_eq!(r["remote"]["flows"][0]["counters"]["rx_placed_bytes"], 100);
        assert_eq!(r["local"]["flows"][0]["tx_digest"], "ab");
        assert!(r["local"]["cpu"]["seconds_per_gib"].is_null());
        assert!(r["local"]["cpu"]["util_percent"].is_number());
        // Round trip (the control protocol carries SideResult as JSON).
        let back: Document = serde_json::from_value(v).unwrap();
        assert_eq!(back, doc);
    }

    #[test]
    fn digests_compare_both_ways() {
        let a = side(Role::Send, Mode::Plain);
        let mut b = side(Role::Recv, Mode::Offload);
        assert_eq!(digests_match(&a, &b), Ok(()));
        b.flows[0].rx_digest = Some("cd".into());
        assert!(digests_match(&a, &b).unwrap_err().contains("digest"));
        b.flows[0].rx_bytes -= 1;
        assert!(digests_match(&a, &b).unwrap_err().contains("bytes"));
    }

    #[test]
    fn table_rows_line_up() {
        let h = bw_header();
        let r = bw_row(65536, "local", &side(Role::Recv, Mode::Offload));
        assert_eq!(h.len(), r.len(), "\n{h}\n{r}");
        assert!(r.contains("offload/stream"));
        let r = bw_row(65536, "remote", &side(Role::Send, Mode::Plain));
        assert_eq!(h.len(), r.len());
        let mut l = side(Role::Ping, Mode::Plain);
        l.latency = Some(LatencyReport::default());
        assert_eq!(lat_header().len(), lat_row(64, &l).len());
    }

    /// A served end says so in the JSON document (`"mode": "served"`, no
    /// receive mode) and in the table.
    #[test]
    fn served_mode_is_reported() {
        let s = side(Role::Recv, Mode::Served);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["mode"], "served");
        assert_eq!(v["rx_mode"], serde_json::Value::Null);
        let back: SideResult = serde_json::from_value(v).unwrap();
        assert_eq!(back.mode, Mode::Served);
        let r = bw_row(65536, "local", &s);
        assert_eq!(bw_header().len(), r.len());
        assert!(r.contains(" served "), "{r}");
        let mut z = side(Role::Send, Mode::Served);
        z.zerocopy = true;
        assert!(bw_row(65536, "remote", &z).contains("served/zerocopy"));
        assert!(Mode::Served.is_socket_io() && Mode::Plain.is_socket_io());
        assert!(!Mode::Offload.is_socket_io());
    }
}

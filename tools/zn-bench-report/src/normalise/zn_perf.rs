//! zn-perf's client document (`--json`, tools/zn-perf/src/report.rs): the
//! few fields the guest reads, and the words and rows made of them.

use crate::pyfmt::{fixed, repr};
use anyhow::{Context, Result};
use serde::Deserialize;
use std::path::Path;

/// The client's `--json` document.
#[derive(Debug, Deserialize)]
pub struct Doc {
    pub results: Vec<SizeResult>,
}

/// One message size: the client's end and the server's.
#[derive(Debug, Deserialize)]
pub struct SizeResult {
    pub msg_size: u64,
    pub local: Side,
    pub remote: Option<Side>,
}

/// What one end measured.
#[derive(Debug, Deserialize)]
pub struct Side {
    pub role: String,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub cpu: Cpu,
    pub latency: Option<Latency>,
}

#[derive(Debug, Deserialize)]
pub struct Cpu {
    /// Busy CPU-seconds of all CPUs per GiB moved (null if nothing moved).
    pub seconds_per_gib: Option<f64>,
}

#[derive(Debug, Deserialize)]
pub struct Latency {
    pub rtt_us: Rtt,
}

/// Round-trip percentiles, µs.
#[derive(Debug, Deserialize)]
pub struct Rtt {
    pub min: f64,
    pub median: f64,
    pub p99: f64,
    pub p999: f64,
}

impl Doc {
    pub fn parse(text: &str) -> Result<Self> {
        serde_json::from_str(text).context("not a zn-perf document")
    }

    /// The first (for the guest's runs the only) message size.
    pub fn first(&self) -> Result<&SizeResult> {
        self.results.first().context("no results")
    }
}

impl SizeResult {
    /// The receiver's end: the server's if it received (the client sent).
    pub fn receiver(&self) -> &Side {
        match &self.remote {
            Some(r) if r.role == "recv" => r,
            _ => &self.local,
        }
    }

    fn rtt(&self) -> Result<&Rtt> {
        Ok(&self.local.latency.as_ref().context("no latency")?.rtt_us)
    }
}

pub fn load(path: &Path) -> Result<Doc> {
    Doc::parse(&super::read(path)?).with_context(|| path.display().to_string())
}

/// Python's `%s` of an optional float.
fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "None".into(), repr)
}

/// A bulk run: "bits_per_second=F cpu_s_per_gib=F|None msg_size=N".
pub fn bw(d: &Doc) -> Result<String> {
    let r = d.first()?;
    let s = r.receiver();
    Ok(format!(
        "bits_per_second={} cpu_s_per_gib={} msg_size={}\n",
        repr(s.bits_per_second),
        opt(s.cpu.seconds_per_gib),
        r.msg_size
    ))
}

/// A latency run: the pinging end's round trips.
pub fn lat(d: &Doc) -> Result<String> {
    let r = d.first()?;
    let l = r.rtt()?;
    Ok(format!(
        "lat_min_us={} lat_p50_us={} lat_p99_us={} lat_p999_us={} msg_size={}\n",
        repr(l.min),
        repr(l.median),
        repr(l.p99),
        repr(l.p999),
        r.msg_size
    ))
}

/// The ab part's run: "MiB/s CPU-s/GiB bytes" of the receiver.
pub fn ab_run(d: &Doc) -> Result<String> {
    let s = d.first()?.receiver();
    let cpu = s.cpu.seconds_per_gib.context("no CPU-s/GiB")?;
    Ok(format!(
        "{} {} {}\n",
        fixed(s.bits_per_second / 8.0 / 1048576.0, 2),
        fixed(cpu, 2),
        s.bytes
    ))
}

/// The busy part's row: "| ROUND | US | min | p50 | p99 |".
pub fn busy_row(d: &Doc, round: &str, us: &str) -> Result<String> {
    let l = d.first()?.rtt()?;
    Ok(format!(
        "| {round} | {us} | {} | {} | {} |\n",
        fixed(l.min, 1),
        fixed(l.median, 1),
        fixed(l.p99, 1)
    ))
}

/// The icount part's /proc/stat figure: the receiver's CPU-s/GiB or None.
pub fn icount_cpu(d: &Doc) -> Result<String> {
    Ok(format!(
        "{}\n",
        opt(d.first()?.receiver().cpu.seconds_per_gib)
    ))
}

/// A `zn-perf attach --json` document: the p50 of its steps and the p90 of
/// the attach, in microseconds, as `key=value` words.
pub fn attach(text: &str) -> Result<String> {
    let v: serde_json::Value = serde_json::from_str(text).context("parsing zn-perf attach")?;
    let get = |step: &str, p: &str| {
        v[step][p]
            .as_u64()
            .with_context(|| format!("no {step}.{p} in zn-perf attach's document"))
    };
    Ok(format!(
        "connect_p50_us={} attach_p50_us={} attach_p90_us={} close_p50_us={} rounds={}\n",
        get("connect_us", "p50")?,
        get("attach_us", "p50")?,
        get("attach_us", "p90")?,
        get("close_us", "p50")?,
        v["rounds"]
            .as_u64()
            .context("no rounds in zn-perf attach's document")?
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A zn-perf client document of a 64 KiB bulk run (abridged: the
    /// fields report.rs's SizeResult has, most of the flows' left out).
    pub const BULK: &str = r#"{"spec":{"kind":"bandwidth","msg_size":65536,"flows":1,"bytes":null,"duration":5.0},
      "results":[{"msg_size":65536,
        "local":{"host":"client","role":"send","mode":"offload","rx_mode":null,"bytes":958398464,"messages":14624,"seconds":5.000131,"bits_per_second":1533397302.4567,
          "cpu":{"elapsed_seconds":5.01,"ncpus":2,"busy_seconds":6.1,"util_percent":60.9,"seconds_per_gib":6.834,"process_seconds":1.2,"process_seconds_per_gib":1.34,"us_per_transaction":null},
          "flows":[],"latency":null,"zerocopy":false,"congestion":"cubic"},
        "remote":{"host":"server","role":"recv","mode":"offload","rx_mode":"message","bytes":958398464,"messages":14624,"seconds":5.012,"bits_per_second":1529772381.95,
          "cpu":{"elapsed_seconds":5.02,"ncpus":2,"busy_seconds":6.2,"util_percent":61.2,"seconds_per_gib":6.9461723,"process_seconds":1.1,"process_seconds_per_gib":1.2,"us_per_transaction":null},
          "flows":[{"index":0,"tx_bytes":0,"rx_bytes":958398464,"counters":null,"copied_completions":0}],"latency":null,"zerocopy":false,"congestion":"cubic"},
        "verified":null}]}"#;

    /// A latency run (-s 64): the pinging end has the round trips.
    pub const LAT: &str = r#"{"results":[{"msg_size":64,
        "local":{"host":"client","role":"ping","mode":"plain","bytes":640000,"messages":5000,"seconds":1.9,"bits_per_second":2694736.84,
          "cpu":{"elapsed_seconds":1.9,"ncpus":2,"busy_seconds":1.5,"util_percent":40.0,"seconds_per_gib":null,"process_seconds":0.4,"process_seconds_per_gib":null,"us_per_transaction":300.1},
          "flows":[],"latency":{"iterations":5000,"warmup":100,"rtt_us":{"min":180.25,"median":301.5,"avg":320.7,"p99":950.125,"p999":1800.0,"max":2500.3,"stdev":60.2}}},
        "remote":{"host":"server","role":"echo","mode":"plain","bytes":640000,"messages":5000,"seconds":1.9,"bits_per_second":2694736.84,
          "cpu":{"elapsed_seconds":1.9,"ncpus":2,"busy_seconds":1.5,"util_percent":40.0,"seconds_per_gib":null,"process_seconds":0.4,"process_seconds_per_gib":null,"us_per_transaction":null},
          "flows":[],"latency":null}}]}"#;

    // Expected: the python3 of bench-guest (zn_bw, zn_lat, ab_run, the busy
    // row, icount_cpu) on the same documents.
    #[test]
    fn bulk_words() {
        let d = Doc::parse(BULK).unwrap();
        assert_eq!(
            bw(&d).unwrap(),
            "bits_per_second=1529772381.95 cpu_s_per_gib=6.9461723 msg_size=65536\n"
        );
        assert_eq!(ab_run(&d).unwrap(), "182.36 6.95 958398464\n");
        assert_eq!(icount_cpu(&d).unwrap(), "6.9461723\n");
    }

    #[test]
    fn latency_words() {
        let d = Doc::parse(LAT).unwrap();
        assert_eq!(
            lat(&d).unwrap(),
            "lat_min_us=180.25 lat_p50_us=301.5 lat_p99_us=950.125 lat_p999_us=1800.0 msg_size=64\n"
        );
        assert_eq!(
            busy_row(&d, "2", "50").unwrap(),
            "| 2 | 50 | 180.2 | 301.5 | 950.1 |\n"
        );
        // No receiver: the client's end; its CPU-s/GiB is null.
        assert_eq!(
            bw(&d).unwrap(),
            "bits_per_second=2694736.84 cpu_s_per_gib=None msg_size=64\n"
        );
        assert_eq!(icount_cpu(&d).unwrap(), "None\n");
        // ab_run's python failed on the null (and printed "- - -").
        assert!(ab_run(&d).is_err());
        assert!(lat(&Doc::parse(BULK).unwrap()).is_err());
    }

    #[test]
    fn attach_document_gives_its_percentiles() {
        let doc = r#"{"rounds": 3, "connect_us": {"p10": 1, "p50": 900, "p90": 3},
            "attach_us": {"p10": 4, "p50": 2500, "p90": 4100}, "close_us": {"p10": 7, "p50": 1800, "p90": 9},
            "samples": {"connect_us": [], "attach_us": [], "close_us": []}}"#;
        assert_eq!(
            attach(doc).unwrap(),
            "connect_p50_us=900 attach_p50_us=2500 attach_p90_us=4100 close_p50_us=1800 rounds=3\n"
        );
        assert!(attach(r#"{"rounds": 3}"#).is_err());
    }
}

//! The shim part's applications (OUT/shim-apps.txt): each run once without
//! and once with the LD_PRELOAD shim; the runs file has a line per run,
//! "APP SHIM(0|1) FIGURES..." or "APP SHIM fail: WHY". The figures are
//! selftests/zn_shim_lib.sh's: iperf "Gbit/s bytes CPU-s/GiB", redis
//! " dSIZE/PN:SET/GET ... cpu Ns", nginx "MiB/s wrk-requests/s CPU-s/GiB",
//! sockperf "valid avg p50 p99 sent received".

use crate::pyfmt::{fixed, float, general};
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;

/// One application's two runs, "0" and "1" (the shim), as written.
#[derive(Debug, Default)]
struct App {
    name: String,
    runs: Vec<(String, String)>,
}

impl App {
    fn get(&self, shim: &str) -> Option<&str> {
        self.runs
            .iter()
            .rev()
            .find(|(s, _)| s == shim)
            .map(|(_, r)| r.as_str())
    }

    /// The two runs' words, None for a failed (or missing) one.
    fn figs(&self) -> [Option<Vec<&str>>; 2] {
        ["0", "1"].map(|s| match self.get(s) {
            Some(r) if !r.starts_with("fail") => Some(r.split_whitespace().collect()),
            _ => None,
        })
    }
}

/// The runs file, applications in the order they first appear.
fn parse(text: &str) -> Result<Vec<App>> {
    let mut apps: Vec<App> = Vec::new();
    for line in text.lines() {
        let mut w = line.trim_start().splitn(2, char::is_whitespace);
        let (Some(app), Some(rest)) = (w.next(), w.next()) else {
            bail!("{line:?}: not APP SHIM RESULT");
        };
        let mut w = rest.trim_start().splitn(2, char::is_whitespace);
        let shim = w.next().unwrap_or_default();
        if shim.is_empty() {
            bail!("{line:?}: not APP SHIM RESULT");
        }
        let r = w.next().map(str::trim).filter(|r| !r.is_empty());
        let r = r.unwrap_or("fail: no output").to_string();
        let i = match apps.iter().position(|a| a.name == app) {
            Some(i) => i,
            None => {
                apps.push(App {
                    name: app.to_string(),
                    ..App::default()
                });
                apps.len() - 1
            }
        };
        apps[i].runs.push((shim.to_string(), r));
    }
    Ok(apps)
}

fn num(w: &Option<Vec<&str>>, i: usize) -> Result<Option<f64>> {
    let Some(w) = w else { return Ok(None) };
    let x = w
        .get(i)
        .with_context(|| format!("no figure {i} in {w:?}"))?;
    Ok(Some(
        float(x).with_context(|| format!("{x:?}: not a number"))?,
    ))
}

#[derive(Default)]
struct Table {
    rows: Vec<String>,
    keys: Vec<String>,
}

impl Table {
    fn row(&mut self, label: &str, key: &str, plain: Option<f64>, shim: Option<f64>) {
        let ratio = match (plain, shim) {
            (Some(p), Some(s)) if p != 0.0 => Some(s / p),
            _ => None,
        };
        let f = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| general(x, 4));
        self.rows.push(format!(
            "| {label} | {} | {} | {} |",
            f(plain),
            f(shim),
            ratio.map_or_else(|| "-".into(), |r| fixed(r, 3))
        ));
        if let Some(r) = ratio {
            self.keys
                .push(format!("shim_app_{key}_ratio={}", fixed(r, 3)));
        }
    }
}

/// redis-benchmark's figures: ("dSIZE/PN/SET", requests/s) in order.
fn rps(w: &Option<Vec<&str>>) -> Result<Vec<(String, String)>> {
    let mut d: Vec<(String, String)> = Vec::new();
    let mut set = |k: String, v: &str| match d.iter_mut().find(|e| e.0 == k) {
        Some(e) => e.1 = v.to_string(),
        None => d.push((k, v.to_string())),
    };
    for x in w.iter().flatten().filter(|x| x.contains(':')) {
        let p: Vec<&str> = x.split(':').collect();
        let [k, v] = p[..] else { bail!("{x:?}") };
        let q: Vec<&str> = v.split('/').collect();
        let [st, gt] = q[..] else { bail!("{x:?}") };
        set(format!("{k}/SET"), st);
        set(format!("{k}/GET"), gt);
    }
    Ok(d)
}

pub fn table(text: &str) -> Result<String> {
    let apps = parse(text)?;
    let app = |n: &str| apps.iter().find(|a| a.name == n);
    let mut t = Table::default();
    for (name, label) in [
        ("iperf", "iperf3"),
        ("iperfz", "iperf3 -Z"),
        ("iperfr", "iperf3 -R"),
    ] {
        if let Some(a) = app(name) {
            let [p, s] = a.figs();
            t.row(
                &format!("{label} Gbit/s"),
                &format!("{name}_gbps"),
                num(&p, 0)?,
                num(&s, 0)?,
            );
            t.row(
                &format!("{label} CPU-s/GiB"),
                &format!("{name}_cpu"),
                num(&p, 2)?,
                num(&s, 2)?,
            );
        }
    }
    if let Some(a) = app("redis") {
        let [p, s] = a.figs();
        let (rp, rs) = (rps(&p)?, rps(&s)?);
        let val = |d: &[(String, String)], k: &str| -> Result<Option<f64>> {
            match d.iter().find(|e| e.0 == k).map(|e| e.1.as_str()) {
                None | Some("") | Some("-") => Ok(None),
                Some(v) => Ok(Some(float(v).with_context(|| format!("{v:?}"))?)),
            }
        };
        for (k, _) in if rp.is_empty() { &rs } else { &rp } {
            let parts: Vec<&str> = k.split('/').collect();
            let (size, pl, op) = (parts[0].get(1..).unwrap_or(""), parts[1], parts[2]);
            t.row(
                &format!(
                    "redis {size} B -P {} {op} requests/s",
                    pl.get(1..).unwrap_or("")
                ),
                &format!("redis_{}_d{size}_{}", op.to_lowercase(), pl.to_lowercase()),
                val(&rp, k)?,
                val(&rs, k)?,
            );
        }
        let cpu = |w: &Option<Vec<&str>>| -> Result<Option<f64>> {
            let Some(w) = w else { return Ok(None) };
            let x = w.last().context("no redis figures")?.trim_end_matches('s');
            Ok(Some(float(x).with_context(|| format!("{x:?}"))?))
        };
        t.row(
            "redis guest CPU-s (the whole run)",
            "redis_cpu",
            cpu(&p)?,
            cpu(&s)?,
        );
    }
    if let Some(a) = app("nginx") {
        let [p, s] = a.figs();
        t.row(
            "nginx + curl 16 MiB MiB/s",
            "nginx_curl_mibs",
            num(&p, 0)?,
            num(&s, 0)?,
        );
        t.row(
            "nginx + curl CPU-s/GiB",
            "nginx_curl_cpu",
            num(&p, 2)?,
            num(&s, 2)?,
        );
        t.row(
            "nginx + wrk 4 KiB requests/s",
            "nginx_wrk_rps",
            num(&p, 1)?,
            num(&s, 1)?,
        );
    }
    for (mux, name) in [("s", "select"), ("p", "poll"), ("e", "epoll")] {
        if let Some(a) = app(&format!("sockperf-{mux}")) {
            let [p, s] = a.figs();
            for (i, what) in [(1, "avg"), (2, "p50"), (3, "p99")] {
                t.row(
                    &format!("sockperf {name} latency {what} us"),
                    &format!("sockperf_{name}_{what}"),
                    num(&p, i)?,
                    num(&s, i)?,
                );
            }
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| application, figure | without the shim | with the shim | with / without |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|");
    let _ = writeln!(out, "{}", t.rows.join("\n"));
    for a in &apps {
        for sh in ["0", "1"] {
            let r = a.get(sh);
            if r.unwrap_or("fail").starts_with("fail") {
                let why: String = r.unwrap_or("no run").chars().take(300).collect();
                let with = if sh == "1" { "with" } else { "without" };
                let _ = writeln!(out, "failed: {} {with} the shim: {why}", a.name);
            }
        }
    }
    let _ = writeln!(out, "{}", t.keys.join("\n"));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every application of the default ZN_BENCH_SHIM_APPS; iperf3 -R's
    /// shim run and sockperf epoll's plain run failed, nginx's shim run
    /// never happened.
    pub const RUNS: &str = "\
iperf 0 9.123 5702887424 2.512
iperf 1 11.87 7419723776 1.904
iperfz 0 10.05 6282018816 2.2
iperfz 1 12.5 7801405440 1.5
iperfr 0 8.75 5469372416 2.61
iperfr 1 fail: iperf3 client exited with 1:   iperf3: error - unable to connect to server
redis 0  d3/P1:12345.67/13456.78 d3/P16:98765.43/123456.79 d1024/P1:11111.11/12222.22 d1024/P16:80000.00/95000.00 d65536/P1:1234.57/2000.00 d65536/P16:/ cpu 12.3s
redis 1  d3/P1:13000.00/14000.00 d3/P16:99999.99/130000.00 d1024/P1:0/12000.00 d1024/P16:-/96000.00 d65536/P1:2469.14/4000.00 d65536/P16:3000.00/5000.00 cpu 9.8s
nginx 0 123.4 5678.9 2.3
sockperf-s 0 1000 45.123 44.000 80.500 3000 3000
sockperf-s 1 1000 40.000 39.500 70.250 3000 3000
sockperf-p 0 1000 46.000 45.000 82.000 3000 3000
sockperf-p 1 1000 41.000 40.000 71.000 3000 3000
sockperf-e 0 fail: sockperf server exited with 1:
sockperf-e 1 1000 0.0001234 39.000 69.000 3000 3000
";

    #[test]
    fn as_python() {
        // bench-guest's python3 on the same file.
        assert_eq!(table(RUNS).unwrap(), include_str!("testdata/shim-apps.txt"));
    }

    #[test]
    fn nothing() {
        let t = table("").unwrap();
        assert!(t.ends_with("|---|---:|---:|---:|\n\n\n"), "{t:?}");
        assert!(table("iperf\n").is_err());
    }
}

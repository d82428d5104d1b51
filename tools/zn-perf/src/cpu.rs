//! CPU cost of a run, system-wide, as netperf's service demand: the
//! aggregate `cpu` line of `/proc/stat` sampled before and after, busy =
//! total - idle - iowait over all CPUs (so softirq and kernel threads count,
//! which a process's own rusage misses), divided by the bytes moved. The
//! process's own share (rusage) is reported beside it.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Bytes in a GiB.
pub const GIB: f64 = (1u64 << 30) as f64;

/// Tick counters of the `cpu` line of `/proc/stat`, in USER_HZ ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ticks {
    /// user + nice + system + idle + iowait + irq + softirq + steal (guest
    /// and guest_nice are already in user and nice).
    pub total: u64,
    /// idle + iowait.
    pub idle: u64,
}

impl Ticks {
    /// Busy ticks.
    pub fn busy(&self) -> u64 {
        self.total - self.idle
    }
}

/// Parses the aggregate `cpu` line and counts the `cpuN` lines of a
/// `/proc/stat` text.
pub fn parse_proc_stat(text: &str) -> Result<(Ticks, u32)> {
    let mut agg = None;
    let mut ncpu = 0u32;
    for line in text.lines() {
        let mut f = line.split_ascii_whitespace();
        match f.next() {
            Some("cpu") => {
                let v: Vec<u64> = f
                    .map(|x| x.parse::<u64>())
                    .collect::<Result<_, _>>()
                    .with_context(|| format!("/proc/stat: bad cpu line {line:?}"))?;
                if v.len() < 4 {
                    bail!("/proc/stat: cpu line with {} fields: {line:?}", v.len());
                }
                // user nice system idle iowait irq softirq steal [guest guest_nice]
                let total: u64 = v.iter().take(8).sum();
                let idle = v[3] + v.get(4).copied().unwrap_or(0);
                agg = Some(Ticks { total, idle });
            }
            Some(name) if name.starts_with("cpu") && name[3..].parse::<u32>().is_ok() => {
                ncpu += 1;
            }
            _ => {}
        }
    }
    let agg = agg.context("/proc/stat has no aggregate cpu line")?;
    Ok((agg, ncpu.max(1)))
}

/// A point in time: wall clock, system ticks, this process's CPU time.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    at: Instant,
    ticks: Ticks,
    ncpu: u32,
    proc_secs: f64,
}

fn proc_secs() -> Result<f64> {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF).context("getrusage")?;
    let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
    Ok(tv(u.user_time()) + tv(u.system_time()))
}

fn clk_tck() -> f64 {
    use nix::unistd::{sysconf, SysconfVar};
    match sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t as f64,
        _ => 100.0,
    }
}

impl Sample {
    /// Samples now.
    pub fn now() -> Result<Self> {
        let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
        let (ticks, ncpu) = parse_proc_stat(&text)?;
        Ok(Self {
            at: Instant::now(),
            ticks,
            ncpu,
            proc_secs: proc_secs()?,
        })
    }

    /// The cost between `self` and the later `end`, for `bytes` moved and
    /// `transactions` round trips (0 when not a latency test).
    pub fn report(&self, end: &Sample, bytes: u64, transactions: u64) -> CpuReport {
        CpuReport::compute(
            end.at.duration_since(self.at).as_secs_f64(),
            end.ticks.busy().saturating_sub(self.ticks.busy()),
            end.ticks.total.saturating_sub(self.ticks.total),
            clk_tck(),
            self.ncpu,
            end.proc_secs - self.proc_secs,
            bytes,
            transactions,
        )
    }
}

/// CPU cost of one side of a run (JSON `cpu`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CpuReport {
    /// Wall-clock seconds of the measured interval.
    pub elapsed_seconds: f64,
    /// Online CPUs (`cpuN` lines of /proc/stat).
    pub ncpus: u32,
    /// CPU-seconds busy, all CPUs (total - idle - iowait).
    pub busy_seconds: f64,
    /// busy / (busy + idle) over all CPUs, in percent.
    pub util_percent: f64,
    /// Service demand: busy CPU-seconds per GiB moved (null if nothing moved).
    pub seconds_per_gib: Option<f64>,
    /// This process's user + system CPU-seconds.
    pub process_seconds: f64,
    /// The process's share per GiB.
    pub process_seconds_per_gib: Option<f64>,
    /// Latency tests: busy CPU microseconds per round trip (netperf RR).
    pub us_per_transaction: Option<f64>,
}

impl CpuReport {
    #[allow(clippy::too_many_arguments)]
    fn compute(
        elapsed: f64,
        busy_ticks: u64,
        total_ticks: u64,
        hz: f64,
        ncpus: u32,
        proc_secs: f64,
        bytes: u64,
        transactions: u64,
    ) -> Self {
        let busy = busy_ticks as f64 / hz;
        let gib = bytes as f64 / GIB;
        let per_gib = |s: f64| (bytes > 0).then(|| s / gib);
        Self {
            elapsed_seconds: elapsed,
            ncpus,
            busy_seconds: busy,
            util_percent: if total_ticks > 0 {
                100.0 * busy_ticks as f64 / total_ticks as f64
            } else {
                0.0
            },
            seconds_per_gib: per_gib(busy),
            process_seconds: proc_secs,
            process_seconds_per_gib: per_gib(proc_secs),
            us_per_transaction: (transactions > 0).then(|| busy * 1e6 / transactions as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "\
cpu  4705 150 1120 16250 520 0 33 7 11 0
cpu0 2355 75 560 8125 260 0 16 3 5 0
cpu1 2350 75 560 8125 260 0 17 4 6 0
intr 114930548 113199788 3 0 5 263 0 4 [... lots more numbers ...]
ctxt 1990473
btime 1062191376
processes 2915
procs_running 1
procs_blocked 0
softirq 183433 0 21755 12 39 1137 231 21459 2263
";

    #[test]
    fn parses_aggregate_and_counts_cpus() {
        let (t, n) = parse_proc_stat(STAT).unwrap();
        assert_eq!(n, 2);
        // user..steal; guest and guest_nice are inside user and nice.
        assert_eq!(t.total, 4705 + 150 + 1120 + 16250 + 520 + 33 + 7);
        assert_eq!(t.idle, 16250 + 520);
        assert_eq!(t.busy(), 4705 + 150 + 1120 + 33 + 7);
    }

    #[test]
    fn old_kernels_with_four_fields() {
        let (t, n) = parse_proc_stat("cpu 1 2 3 4\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!((t.total, t.idle, n), (10, 4, 1));
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_proc_stat("intr 1 2 3\n").is_err());
        assert!(parse_proc_stat("cpu 1 2 x 4\n").is_err());
        assert!(parse_proc_stat("cpu 1 2\n").is_err());
    }

    #[test]
    fn service_demand() {
        // 2 CPUs at 100 Hz for 4 s: 800 ticks, 300 busy; 2 GiB moved.
        let r = CpuReport::compute(4.0, 300, 800, 100.0, 2, 0.5, 2 << 30, 0);
        assert!((r.busy_seconds - 3.0).abs() < 1e-9);
        assert!((r.util_percent - 37.5).abs() < 1e-9);
        assert!((r.seconds_per_gib.unwrap() - 1.5).abs() < 1e-9);
        assert!((r.process_seconds_per_gib.unwrap() - 0.25).abs() < 1e-9);
        assert_eq!(r.us_per_transaction, None);
        let r = CpuReport::compute(1.0, 100, 200, 100.0, 2, 0.0, 0, 1000);
        assert_eq!(r.seconds_per_gib, None);
        assert!((r.us_per_transaction.unwrap() - 1000.0).abs() < 1e-9);
    }

    #[test]
    fn samples_this_machine() {
        let a = Sample::now().unwrap();
        let b = Sample::now().unwrap();
        let r = a.report(&b, 1 << 30, 0);
        assert!(r.ncpus >= 1);
        assert!(r.busy_seconds >= 0.0 && r.elapsed_seconds >= 0.0);
    }
}

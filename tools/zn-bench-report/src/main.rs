//! `zn-bench-report`: the report of `make bench` (scripts/bench) and the
//! normalisation of the benchmark tools' outputs (scripts/bench-guest).
//!
//! ```text
//! zn-bench-report --dir out/bench          # the report (report.rs)
//! zn-bench-report SUBCOMMAND ARGS...       # in the guest: one parser or table
//! ```
//!
//! Without a subcommand it reads what the guest left and prints the report
//! (report.rs). The subcommands are what scripts/bench-guest calls inside
//! the guest after running a tool: `record` appends one line of
//! results.jsonl (record.rs); the others read one tool's output and print
//! the `key=value` words a `record` takes, or a whole text table with its
//! `key=value` lines (normalise/). Their formats are those of the inline
//! python3 these replaced, byte for byte (pyfmt.rs); a subcommand that
//! fails prints why on stderr, without a prefix (bench-guest puts it in the
//! result's note), and exits 1. See docs/performance.md.

mod normalise;
mod pyfmt;
mod record;
mod report;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "zn-bench-report",
    version,
    about = "make bench's tables, report.md and plots; the guest's result normalisation",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// The output directory of scripts/bench (with guest/ and model.txt).
    #[arg(long, default_value = "out/bench")]
    dir: PathBuf,
    /// The TrueType font the plots are labelled with.
    #[arg(
        long,
        default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    )]
    font: PathBuf,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// One line of results.jsonl: SECTION TRANSPORT LOSS OK(0|1) NOTE RAW
    /// [KEY=VALUE...] (values numbers, or empty, None or null for null).
    Record {
        #[arg(num_args = 6.., allow_hyphen_values = true, trailing_var_arg = true)]
        args: Vec<OsString>,
    },
    /// zn-perf client document of a bulk run: bits_per_second=
    /// cpu_s_per_gib= msg_size= (the receiver's side).
    ZnBw { json: PathBuf },
    /// zn-perf client document of a latency run: lat_min_us= lat_p50_us=
    /// lat_p99_us= lat_p999_us= msg_size=.
    ZnLat { json: PathBuf },
    /// The breakdown of a clean-wire bulk run from bench-guest's snapshots
    /// before and after (/proc/stat, irqs, the model's port counters) and
    /// the zn-perf client document; nothing if there is none.
    Breakdown {
        before: PathBuf,
        after: PathBuf,
        json: PathBuf,
    },
    /// ib_write_bw's client output, the run's CPU file ("b0 t0 b1 t1 w0 w1
    /// hz") and the measured window in seconds: bits_per_second=
    /// cpu_s_per_gib= msg_size=.
    PerftestBw {
        txt: PathBuf,
        cpu: PathBuf,
        window: String,
    },
    /// ib_send_lat's client output: round-trip lat_*_us= (twice perftest's
    /// one-way figures) and msg_size=.
    PerftestLat { txt: PathBuf },
    /// zn-perf attach's document (the attach part): connect_p50_us=
    /// attach_p50_us= attach_p90_us= close_p50_us= rounds=.
    ZnAttach { json: PathBuf },
    /// The ab part's run: "MiB/s CPU-s/GiB bytes" of a zn-perf document.
    AbRun { json: PathBuf },
    /// The ab part's table and key=value lines from its runs file.
    AbTable { runs: PathBuf },
    /// The busy part's table row: ROUND US and a zn-perf latency document.
    BusyRow {
        json: PathBuf,
        round: String,
        busy_us: String,
    },
    /// The shim part's applications table (OUT/shim-apps.txt).
    ShimAppsTable { runs: PathBuf },
    /// The prof part's table, "Where the time goes" (OUT/prof.txt), of the
    /// runs NAME in OUT (NAME.json, NAME.eth0, NAME.eth1, NAME.model).
    ProfTable {
        out: PathBuf,
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// The icount part's zn-perf run: its CPU-s/GiB (or None).
    IcountCpu { json: PathBuf },
    /// The icount part's table (OUT/icount.txt): the check and runs files,
    /// the small and big transfer sizes in bytes.
    IcountTable {
        check: PathBuf,
        runs: PathBuf,
        small: String,
        big: String,
    },
}

fn guest(cmd: Cmd) -> Result<String> {
    use normalise::*;
    Ok(match cmd {
        Cmd::Record { args } => record::line(&args)?,
        Cmd::ZnBw { json } => zn_perf::bw(&zn_perf::load(&json)?)?,
        Cmd::ZnLat { json } => zn_perf::lat(&zn_perf::load(&json)?)?,
        Cmd::Breakdown {
            before,
            after,
            json,
        } => breakdown::words(&before, &after, &zn_perf::load(&json)?)?,
        Cmd::PerftestBw { txt, cpu, window } => perftest::bw(&txt, &cpu, &window)?,
        Cmd::PerftestLat { txt } => perftest::lat(&txt)?,
        Cmd::ZnAttach { json } => zn_perf::attach(&read(&json)?)?,
        Cmd::AbRun { json } => zn_perf::ab_run(&zn_perf::load(&json)?)?,
        Cmd::AbTable { runs } => ab::table(&read(&runs)?)?,
        Cmd::BusyRow {
            json,
            round,
            busy_us,
        } => zn_perf::busy_row(&zn_perf::load(&json)?, &round, &busy_us)?,
        Cmd::ShimAppsTable { runs } => shim_apps::table(&read(&runs)?)?,
        Cmd::ProfTable { out, names } => prof::table(&out, &names)?,
        Cmd::IcountCpu { json } => zn_perf::icount_cpu(&zn_perf::load(&json)?)?,
        Cmd::IcountTable {
            check,
            runs,
            small,
            big,
        } => icount::table(&read(&check)?, &read(&runs)?, &small, &big)?,
    })
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        None => match report::run(&cli.dir, &cli.font) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("zn-bench-report: error: {e:#}");
                std::process::ExitCode::FAILURE
            }
        },
        Some(cmd) => match guest(cmd) {
            Ok(out) => {
                print!("{out}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                // Unprefixed: bench-guest puts it in a result's note.
                eprintln!("{e:#}");
                std::process::ExitCode::FAILURE
            }
        },
    }
}

//! `zn-perf`: bandwidth and latency over ZeroNIC's offloaded TCP path and
//! over plain sockets, from the same binary, so that one run compares them.
//!
//! ```text
//! zn-perf server [-p PORT] [-B ADDR] [--once] [--mode plain|offload|served] [--rx message|stream] [--json]
//! zn-perf client HOST [-p PORT] [--mode ...] [--rx ...] [-P FLOWS] [-s SIZE | -a]
//!                [-t SECS | -n BYTES] [--verify [--hash xxh64|sha256]] [-R | --bidir] [--latency [-i ITERS]] [--json]
//! zn-perf query [--nic N] [--json]
//! zn-perf digest [--hash xxh64|sha256] [--seed N] [-P FLOWS] -n BYTES[,BYTES...]
//! zn-perf attach ADDR [--server-ns NS] [--client-ns NS] [-n ROUNDS] [--json]
//! ```
//!
//! Each end chooses its own data path (`--mode`, `--rx`), so an offloaded
//! end can face a plain one. `--mode served` is the plain path (read() and
//! write(), the same code) on data sockets attached to the NIC by
//! `setsockopt(SOL_TCP, TCP_ULP, "zeronic")` once they are connected or
//! accepted, before any payload moves (docs/uapi.md); a refused attach is
//! an error naming the errno, never a fallback to plain. The client
//! chooses the test and sends it to the server over a control connection (`proto.rs`). Output: a table
//! (perftest-style columns) or, with `--json`, one JSON document
//! (`report::Document`). See `tools/zn-perf/README.md`.

mod attach;
mod cpu;
mod engine;
mod icount;
mod proto;
mod report;
mod stream;
mod window;

use anyhow::{bail, ensure, Context, Result};
use clap::{Args, Parser, Subcommand};
use engine::{prepare, role_of, SideOpts};
use proto::{Ctrl, Msg, PROTO};
use report::{
    bw_header, bw_row, digests_match, fit_sweep, flow_lines, lat_header, lat_row, sweep_sizes,
    Document, Kind, Mode, RxKind, SideResult, SizeResult, TestSpec,
};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Parses a byte count: a number with an optional binary suffix (K, M, G,
/// T, optionally followed by "i" and/or "B": 64K = 64KiB = 65536).
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suf) = t.split_at(digits);
    let n: u64 = num.parse().map_err(|_| format!("not a size: {s:?}"))?;
    let suf = suf.trim().to_ascii_uppercase();
    let suf = suf.trim_end_matches('B').trim_end_matches('I');
    let shift = match suf {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("unknown size suffix in {s:?} (K, M, G, T)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size too large: {s:?}"))
}

#[derive(Parser, Debug)]
#[command(
    name = "zn-perf",
    version,
    about = "Bandwidth and latency over ZeroNIC's offloaded TCP path and over plain sockets"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Wait for clients and run the tests they ask for.
    Server(ServerArgs),
    /// Connect to a server and run a test.
    Client(ClientArgs),
    /// Print a NIC's counters (ZERONIC_IOC_QUERY): regions, pinned pages,
    /// flows in use; for checks that a run gave everything back.
    Query(QueryArgs),
    /// Print the XXH64 of generated streams ("SEED BYTES XXH64" lines),
    /// for the client's --digests: senders given them hash nothing.
    Digest(DigestArgs),
    /// Under QEMU's -icount shift=0 on one vCPU: keep the vCPU busy at
    /// SCHED_IDLE with a loop of known instructions, and answer every line
    /// of standard input with "soak_insns=N now_ns=T" (the guest's
    /// instructions are the clock's advance minus the soaker's).
    Soak,
    /// Run a known number of instructions: N iterations of dec/jnz (2 N
    /// instructions), or N string copies (--rep-movsb BYTES), to check
    /// the soak method.
    Spin(SpinArgs),
    /// Time connecting, attaching (setsockopt TCP_ULP "zeronic" at both
    /// ends) and closing short connections, in one process.
    Attach(AttachArgs),
}

#[derive(Args, Debug)]
struct AttachArgs {
    /// The listener's address (a ZeroNIC port's).
    addr: IpAddr,
    /// Network namespace (under /run/netns) of the listener.
    #[arg(long)]
    server_ns: Option<String>,
    /// Network namespace of the connecting end.
    #[arg(long)]
    client_ns: Option<String>,
    /// Connections to open, attach and close.
    #[arg(short = 'n', long, default_value_t = 100)]
    rounds: u32,
    /// One JSON object (every round's microseconds and the percentiles).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct SpinArgs {
    /// Iterations.
    #[arg(value_parser = parse_size)]
    n: u64,
    /// Copy this many bytes with one `rep movsb` per iteration instead.
    #[arg(long, value_parser = parse_size)]
    rep_movsb: Option<u64>,
}

#[derive(Args, Debug)]
struct DigestArgs {
    /// Seed of the first stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Streams: seeds seed .. seed + N - 1 (as the client's flows).
    #[arg(short = 'P', long, default_value_t = 1)]
    parallel: u32,
    /// Stream lengths (each a prefix of the same stream; suffixes K, M, G).
    #[arg(short = 'n', long, value_parser = parse_size, value_delimiter = ',', required = true)]
    bytes: Vec<u64>,
    /// The digest: xxh64 or sha256.
    #[arg(long, value_enum, default_value = "xxh64")]
    hash: stream::Hash,
}

#[derive(Args, Debug)]
struct QueryArgs {
    /// NIC index.
    #[arg(long, default_value_t = 0)]
    nic: u32,
    /// One JSON object instead of name=value words.
    #[arg(long)]
    json: bool,
}

/// Options of one end's data path.
#[derive(Args, Debug, Clone)]
struct EndArgs {
    /// This end's data path.
    #[arg(long, value_enum, default_value_t = Mode::Plain)]
    mode: Mode,
    /// Offload: receive into posted segments (message) or a ring (stream).
    #[arg(long, value_enum, default_value_t = RxKind::Message)]
    rx: RxKind,
    /// Offload, stream mode: receive ring bytes per flow (power of two).
    #[arg(long, value_parser = parse_size, default_value = "4M")]
    ring: u64,
    /// Offload: sends in flight per flow [default: enough for 4 MiB, 2..256].
    #[arg(long)]
    tx_depth: Option<u32>,
    /// Offload, message mode: receive segments posted per flow [default:
    /// enough for 4 MiB, 2..256].
    #[arg(long)]
    rx_depth: Option<u32>,
    /// Event loops (threads) the flows are spread over.
    #[arg(short = 'T', long, default_value_t = 1)]
    threads: u32,
    /// Offload: NIC index to register memory on.
    #[arg(long, default_value_t = 0)]
    nic: u32,
    /// Fail when no byte moves for this many seconds.
    #[arg(long, default_value_t = 30.0)]
    stall_timeout: f64,
    /// Offload receiver: leave the TCP window alone (by default it is
    /// clamped to a quarter of the posted receive space, at most 4 MiB, so
    /// that a clean wire finds nothing posted only if the application lags
    /// by more than the rest).
    #[arg(long)]
    no_window_clamp: bool,
    /// Plain sender: send with MSG_ZEROCOPY (SO_ZEROCOPY; completions from
    /// the socket's error queue), Linux TCP's zero-copy send.
    #[arg(long)]
    zerocopy: bool,
    /// TCP congestion control of this end's data sockets (TCP_CONGESTION,
    /// e.g. cubic, bbr) [default: the system's].
    #[arg(long, value_name = "ALGO")]
    congestion: Option<String>,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,
}

impl EndArgs {
    fn side(&self, host: &'static str) -> SideOpts {
        SideOpts {
            host,
            mode: self.mode,
            rx: self.rx,
            ring: self.ring,
            tx_depth: self.tx_depth,
            rx_depth: self.rx_depth,
            threads: self.threads,
            nic: self.nic,
            stall: Duration::from_secs_f64(self.stall_timeout),
            window_clamp: !self.no_window_clamp,
            zerocopy: self.zerocopy,
            congestion: self.congestion.clone(),
        }
    }
}

#[derive(Args, Debug)]
struct ServerArgs {
    /// Port for the control and data connections.
    #[arg(short, long, default_value_t = 5210)]
    port: u16,
    /// Address to listen on.
    #[arg(short = 'B', long, default_value = "0.0.0.0")]
    bind: IpAddr,
    /// Serve one client, then exit (non-zero if its tests failed).
    #[arg(short = '1', long)]
    once: bool,
    #[command(flatten)]
    end: EndArgs,
}

#[derive(Args, Debug)]
struct ClientArgs {
    /// The server's address.
    host: String,
    /// The server's port.
    #[arg(short, long, default_value_t = 5210)]
    port: u16,
    /// Parallel connections (flows).
    #[arg(short = 'P', long, default_value_t = 1)]
    parallel: u32,
    /// Message size: bytes per send and per receive (suffixes K, M, G).
    #[arg(short, long, value_parser = parse_size, default_value = "64K")]
    size: u64,
    /// Sweep the message size over the powers of two from --size-min to
    /// --size-max (perftest -a).
    #[arg(short = 'a', long)]
    all: bool,
    #[arg(long, value_parser = parse_size, default_value = "64")]
    size_min: u64,
    #[arg(long, value_parser = parse_size, default_value = "8M")]
    size_max: u64,
    /// Seconds each size sends [default: 10, or 2 per size with -a].
    #[arg(short = 't', long, conflicts_with = "bytes")]
    time: Option<f64>,
    /// Bytes each flow sends (suffixes K, M, G).
    #[arg(short = 'n', long, value_parser = parse_size)]
    bytes: Option<u64>,
    /// A digest of every stream on both ends; the client compares them.
    #[arg(long)]
    verify: bool,
    /// The digest --verify computes: xxh64 (fast) or sha256.
    #[arg(long, value_enum, default_value = "xxh64", requires = "verify")]
    hash: stream::Hash,
    /// With --verify and -n: a file of stream digests ("SEED BYTES DIGEST"
    /// lines of the --hash kind, as `zn-perf digest` prints) holding every flow's stream;
    /// the senders of both ends report those digests instead of hashing
    /// what they generate. The receivers still hash every byte.
    #[arg(long, requires_all = ["verify", "bytes"])]
    digests: Option<std::path::PathBuf>,
    /// Payload seed (flow i uses seed + i).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The server sends, the client receives.
    #[arg(short = 'R', long)]
    reverse: bool,
    /// Both directions at once: every flow carries -n BYTES each way.
    #[arg(long, conflicts_with_all = ["reverse", "latency", "time"])]
    bidir: bool,
    /// Ping-pong latency instead of bandwidth (one flow).
    #[arg(long)]
    latency: bool,
    /// Latency: measured round trips.
    #[arg(short = 'i', long, default_value_t = 1000)]
    iters: u64,
    /// Latency: round trips before measuring.
    #[arg(long, default_value_t = 10)]
    warmup: u64,
    #[command(flatten)]
    end: EndArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Server(a) => server(&a),
        Cmd::Client(a) => client(&a),
        Cmd::Query(a) => query(&a),
        Cmd::Digest(a) => digest(&a),
        Cmd::Soak => icount::soak().map(|()| ExitCode::SUCCESS),
        Cmd::Spin(a) => icount::spin(a.n, a.rep_movsb).map(|()| ExitCode::SUCCESS),
        Cmd::Attach(a) => attach_cmd(&a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("zn-perf: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn attach_cmd(a: &AttachArgs) -> Result<ExitCode> {
    let t = attach::run(&attach::AttachOpts {
        // An empty name is this process's own namespace.
        server_ns: a.server_ns.clone().filter(|n| !n.is_empty()),
        client_ns: a.client_ns.clone().filter(|n| !n.is_empty()),
        addr: a.addr,
        rounds: a.rounds,
    })?;
    let steps = [
        ("connect", attach::Spread::of(&t.connect_us)),
        ("attach", attach::Spread::of(&t.attach_us)),
        ("close", attach::Spread::of(&t.close_us)),
    ];
    if a.json {
        let mut v = serde_json::json!({ "rounds": a.rounds });
        for (name, spread) in &steps {
            v[format!("{name}_us")] = serde_json::to_value(spread).context("encoding a spread")?;
        }
        v["samples"] = serde_json::to_value(&t).context("encoding the samples")?;
        println!(
            "{}",
            serde_json::to_string_pretty(&v).context("encoding the JSON output")?
        );
    } else {
        println!("{:<10} {:>10} {:>10} {:>10}", "us", "p10", "p50", "p90");
        for (name, s) in &steps {
            println!("{:<10} {:>10} {:>10} {:>10}", name, s.p10, s.p50, s.p90);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_doc(doc: &Document) -> Result<()> {
    println!(
        "{}",
        serde_json::to_string_pretty(doc).context("encoding the JSON output")?
    );
    Ok(())
}

fn query(a: &QueryArgs) -> Result<ExitCode> {
    let q = engine::open_device(a.nic)?
        .query()
        .with_context(|| format!("QUERY of NIC {}", a.nic))?;
    if a.json {
        let v = serde_json::json!({
            "nic": a.nic,
            "num_nics": q.num_nics,
            "mr_capacity": q.mr_capacity,
            "mr_in_use": q.mr_in_use,
            "pinned_pages": q.pinned_pages,
            "held_pages": q.held_pages,
            "flow_capacity": q.flow_capacity,
            "flows_in_use": q.flows_in_use,
            "mr_user_in_use": q.mr_user_in_use,
            "user_locked_pages": q.user_locked_pages,
        });
        println!("{v}");
    } else {
        println!(
            "mr_in_use={} pinned_pages={} held_pages={} flows_in_use={} mr_user_in_use={} user_locked_pages={}",
            q.mr_in_use,
            q.pinned_pages,
            q.held_pages,
            q.flows_in_use,
            q.mr_user_in_use,
            q.user_locked_pages
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn digest(a: &DigestArgs) -> Result<ExitCode> {
    ensure!(a.parallel >= 1, "-P must be at least 1");
    // One stream per thread at a time: a stream's digest is sequential.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let seeds: Vec<u64> = (0..u64::from(a.parallel))
        .map(|i| a.seed.wrapping_add(i))
        .collect();
    let mut out: Vec<Vec<String>> = vec![Vec::new(); seeds.len()];
    std::thread::scope(|sc| {
        for (k, chunk) in out.chunks_mut(seeds.len().div_ceil(threads)).enumerate() {
            let first = k * seeds.len().div_ceil(threads);
            let seeds = &seeds;
            sc.spawn(move || {
                for (j, o) in chunk.iter_mut().enumerate() {
                    *o = stream::digests(seeds[first + j], &a.bytes, a.hash);
                }
            });
        }
    });
    for (seed, ds) in seeds.iter().zip(&out) {
        for (n, d) in a.bytes.iter().zip(ds) {
            println!("{seed} {n} {d}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The digests (of kind `hash`) `zn-perf digest` printed, by (seed, bytes).
fn read_digests(path: &std::path::Path, hash: stream::Hash) -> Result<HashMap<(u64, u64), String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading digests from {}", path.display()))?;
    let mut m = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        let parsed = match w[..] {
            [seed, bytes, d] if hash.is_digest(d) => seed
                .parse::<u64>()
                .ok()
                .zip(bytes.parse::<u64>().ok())
                .map(|k| (k, d.to_ascii_lowercase())),
            _ => None,
        };
        let (k, d) = parsed.with_context(|| {
            format!(
                "{} line {}: not \"SEED BYTES DIGEST\" with a {} digest ({} hex digits): {line:?}",
                path.display(),
                i + 1,
                hash.name(),
                hash.hex_len()
            )
        })?;
        m.insert(k, d);
    }
    Ok(m)
}

/// Flow i's digest (seed + i, `bytes` long) from `path`, for every flow.
fn sent_digests(
    path: &std::path::Path,
    seed: u64,
    flows: u32,
    bytes: u64,
    hash: stream::Hash,
) -> Result<Vec<String>> {
    let m = read_digests(path, hash)?;
    (0..u64::from(flows))
        .map(|i| {
            let s = seed.wrapping_add(i);
            m.get(&(s, bytes)).cloned().with_context(|| {
                format!(
                    "{} has no digest of stream seed {s}, {bytes} bytes (zn-perf digest --hash {} --seed {s} -n {bytes})",
                    path.display(),
                    hash.name()
                )
            })
        })
        .collect()
}

fn describe(spec: &TestSpec, end: &EndArgs) -> String {
    let what = match spec.kind {
        Kind::Bandwidth => "bandwidth",
        Kind::Latency => "latency (round trips)",
    };
    let mode = match end.mode {
        Mode::Plain => "plain".to_string(),
        Mode::Offload => format!("offload (rx {:?})", end.rx).to_lowercase(),
        Mode::Served => "served (TCP_ULP zeronic)".to_string(),
    };
    let amount = match (spec.kind, spec.bytes, spec.duration) {
        (Kind::Latency, _, _) => format!("{} iterations", spec.iters),
        (_, Some(b), _) => format!("{b} bytes per flow"),
        (_, _, Some(t)) => format!("{t} s"),
        _ => String::new(),
    };
    format!(
        "# zn-perf {what}: client {mode}, {} flow(s), {amount}{}{}{}",
        spec.flows,
        if spec.reverse { ", reverse" } else { "" },
        if spec.bidir { ", both ways" } else { "" },
        match (spec.verify, &spec.sent_digests) {
            (true, Some(_)) => ", verify (sent digests given)",
            (true, None) => ", verify",
            _ => "",
        }
    )
}

// ---------------------------------------------------------------- client

fn client(a: &ClientArgs) -> Result<ExitCode> {
    let latency = a.latency;
    ensure!(a.parallel >= 1, "-P must be at least 1");
    ensure!(
        !latency || a.parallel == 1,
        "--latency runs one flow (-P 1)"
    );
    ensure!(!latency || !a.reverse, "--latency has no direction (-R)");
    ensure!(
        !a.bidir || a.bytes.is_some(),
        "--bidir needs -n BYTES (each end knows where the stream it receives ends)"
    );
    ensure!(a.iters > 0 || !latency, "--iters must be positive");
    let duration = match (a.time, a.bytes) {
        (Some(t), _) => {
            ensure!(t > 0.0, "-t must be positive");
            Some(t)
        }
        (None, Some(_)) => None,
        (None, None) => Some(if a.all { 2.0 } else { 10.0 }),
    };
    let sizes = if a.all {
        sweep_sizes(a.size_min, a.size_max)
    } else {
        vec![a.size]
    };
    ensure!(
        !sizes.is_empty(),
        "no message size in {}..{}",
        a.size_min,
        a.size_max
    );
    ensure!(
        sizes.iter().all(|&s| s > 0 && s <= 1 << 30),
        "message sizes are 1..1G"
    );
    let base = TestSpec {
        kind: if latency {
            Kind::Latency
        } else {
            Kind::Bandwidth
        },
        msg_size: sizes[0],
        flows: a.parallel,
        bytes: if latency { None } else { a.bytes },
        duration: if latency { None } else { duration },
        verify: a.verify,
        hash: a.hash,
        seed: a.seed,
        reverse: a.reverse,
        iters: a.iters,
        warmup: a.warmup,
        bidir: a.bidir,
        sent_digests: match (&a.digests, a.bytes) {
            (Some(p), Some(n)) if !latency => Some(sent_digests(p, a.seed, a.parallel, n, a.hash)?),
            (Some(_), _) => bail!("--digests is for bandwidth tests with -n"),
            (None, _) => None,
        },
    };
    let addr: SocketAddr = (a.host.as_str(), a.port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {}", a.host))?
        .next()
        .with_context(|| format!("no address for {}", a.host))?;
    let mut ctrl = Ctrl::new(
        TcpStream::connect(addr).with_context(|| format!("connecting to the server at {addr}"))?,
    )?;
    ctrl.send(&Msg::Hello { proto: PROTO })?;
    match ctrl.recv("hello")? {
        Msg::Hello { proto } if proto == PROTO => {}
        m => bail!("the server answered {m:?} to hello (protocol {PROTO})"),
    }
    let opts = a.end.side("client");
    let mut doc = Document::new("client", Some(base.clone()));
    if !a.end.json {
        println!("{}", describe(&base, &a.end));
        println!("{}", if latency { lat_header() } else { bw_header() });
    }
    let mut all_ok = true;
    for &size in &sizes {
        let spec = TestSpec {
            msg_size: size,
            ..base.clone()
        };
        let (local, remote) = client_test(&mut ctrl, addr, &spec, &opts)
            .with_context(|| format!("message size {size}"))?;
        let verified = spec.verify.then(|| digests_match(&local, &remote));
        if !a.end.json {
            if latency {
                println!("{}", lat_row(size, &local));
            } else {
                println!("{}", bw_row(size, "local", &local));
                println!("{}", bw_row(size, "remote", &remote));
            }
            if spec.verify || a.parallel == 1 {
                print!("{}", flow_lines("local", &local));
                print!("{}", flow_lines("remote", &remote));
            }
            match &verified {
                Some(Ok(())) => println!("# verify: every flow's digests match"),
                Some(Err(e)) => println!("# verify: MISMATCH: {e}"),
                None => {}
            }
        }
        if let Some(Err(e)) = &verified {
            eprintln!("zn-perf: verify failed at message size {size}: {e}");
            all_ok = false;
        }
        doc.results.push(SizeResult {
            msg_size: size,
            local,
            remote: Some(remote),
            verified: verified.map(|v| v.is_ok()),
        });
    }
    let _ = ctrl.send(&Msg::Bye);
    if a.all && !latency {
        let pts: Vec<(u64, f64)> = doc
            .results
            .iter()
            .map(|r| {
                let recv = match r.local.role {
                    report::Role::Recv => &r.local,
                    _ => r.remote.as_ref().unwrap_or(&r.local),
                };
                (r.msg_size, recv.bits_per_second)
            })
            .collect();
        doc.fit = fit_sweep(&pts);
        if !a.end.json {
            match &doc.fit {
                Some(f) => println!(
                    "# fit T = L + S/B over {} sizes: L = {:.1} us, B = {:.3} Gb/s, half bandwidth at {:.0} bytes",
                    f.points,
                    f.latency_us,
                    f.bits_per_second / 1e9,
                    f.half_bandwidth_bytes
                ),
                None => println!("# fit T = L + S/B: not enough points"),
            }
        }
    }
    if a.verify {
        doc.verified = Some(all_ok);
    }
    if a.end.json {
        print_doc(&doc)?;
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn client_test(
    ctrl: &mut Ctrl,
    addr: SocketAddr,
    spec: &TestSpec,
    opts: &SideOpts,
) -> Result<(SideResult, SideResult)> {
    ctrl.send(&Msg::Test { spec: spec.clone() })?;
    match ctrl.recv("ready")? {
        Msg::Ready => {}
        m => bail!("expected ready, got {m:?}"),
    }
    let mut socks = Vec::new();
    let mut ports = Vec::new();
    for i in 0..spec.flows {
        let s =
            TcpStream::connect(addr).with_context(|| format!("data connection {i} to {addr}"))?;
        ports.push(s.local_addr().context("getsockname")?.port());
        socks.push(s);
    }
    ctrl.send(&Msg::Conns { ports })?;
    match ctrl.recv("attached")? {
        Msg::Attached => {}
        m => bail!("expected attached, got {m:?}"),
    }
    let role = role_of(spec, true);
    let prepared = match prepare(opts, spec, role, socks) {
        Ok(p) => p,
        Err(e) => {
            ctrl.send_error(&e);
            return Err(e.context("preparing the client's end"));
        }
    };
    ctrl.send(&Msg::Go)?;
    let local = prepared.run().context("client's end")?;
    let remote = match ctrl.recv("the server's result")? {
        Msg::Result { side } => *side,
        m => bail!("expected result, got {m:?}"),
    };
    Ok((local, remote))
}

// ---------------------------------------------------------------- server

fn server(a: &ServerArgs) -> Result<ExitCode> {
    let listener = TcpListener::bind((a.bind, a.port))
        .with_context(|| format!("listening on {}:{}", a.bind, a.port))?;
    eprintln!(
        "zn-perf: server listening on {} ({})",
        listener.local_addr()?,
        match a.end.mode {
            Mode::Plain => "plain".to_string(),
            Mode::Offload => format!("offload, rx {:?}", a.end.rx).to_lowercase(),
            Mode::Served => "served, TCP_ULP zeronic".to_string(),
        }
    );
    let opts = a.end.side("server");
    loop {
        let (s, peer) = listener.accept().context("accept")?;
        let mut doc = Document::new("server", None);
        let r = session(s, peer, &listener, &opts, &a.end, &mut doc);
        if a.end.json && !doc.results.is_empty() {
            print_doc(&doc)?;
        }
        if let Err(e) = &r {
            eprintln!("zn-perf: server: client {peer}: {e:#}");
        }
        if a.once {
            return Ok(if r.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
    }
}

fn session(
    s: TcpStream,
    peer: SocketAddr,
    listener: &TcpListener,
    opts: &SideOpts,
    end: &EndArgs,
    doc: &mut Document,
) -> Result<()> {
    let mut ctrl = Ctrl::new(s)?;
    match ctrl.recv("hello")? {
        Msg::Hello { proto } if proto == PROTO => ctrl.send(&Msg::Hello { proto: PROTO })?,
        m => {
            let e = anyhow::anyhow!("expected hello (protocol {PROTO}), got {m:?}");
            ctrl.send_error(&e);
            return Err(e);
        }
    }
    let mut printed_header = false;
    loop {
        let spec = match ctrl.recv_opt()? {
            None | Some(Msg::Bye) => return Ok(()),
            Some(Msg::Test { spec }) => spec,
            Some(m) => bail!("expected a test, got {m:?}"),
        };
        if !end.json && !printed_header {
            println!(
                "{}",
                if spec.kind == Kind::Latency {
                    lat_header()
                } else {
                    bw_header()
                }
            );
            printed_header = true;
        }
        doc.spec.get_or_insert_with(|| spec.clone());
        let side = match server_test(&mut ctrl, peer, listener, &spec, opts) {
            Ok(side) => side,
            Err(e) => {
                ctrl.send_error(&e);
                return Err(e.context(format!("message size {}", spec.msg_size)));
            }
        };
        ctrl.send(&Msg::Result {
            side: Box::new(side.clone()),
        })?;
        if !end.json {
            if spec.kind == Kind::Latency {
                println!("{}", lat_row(spec.msg_size, &side));
            } else {
                println!("{}", bw_row(spec.msg_size, "local", &side));
            }
            print!("{}", flow_lines("local", &side));
        }
        doc.results.push(SizeResult {
            msg_size: spec.msg_size,
            local: side,
            remote: None,
            verified: None,
        });
    }
}

/// Accepts the test's data connections: those from the client's address
/// whose ports it announced, in its flow order.
fn accept_data(
    listener: &TcpListener,
    peer: IpAddr,
    ports: &[u16],
    timeout: Duration,
) -> Result<Vec<TcpStream>> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let want: HashMap<u16, usize> = ports.iter().enumerate().map(|(i, &p)| (p, i)).collect();
    ensure!(want.len() == ports.len(), "duplicate ports in {ports:?}");
    let mut got: Vec<Option<TcpStream>> = (0..ports.len()).map(|_| None).collect();
    let mut left = ports.len();
    let until = Instant::now() + timeout;
    listener.set_nonblocking(true).context("O_NONBLOCK")?;
    let r = (|| {
        while left > 0 {
            match listener.accept() {
                Ok((s, from)) => {
                    match want.get(&from.port()) {
                        Some(&i) if from.ip() == peer && got[i].is_none() => {
                            s.set_nonblocking(false).context("O_NONBLOCK")?;
                            got[i] = Some(s);
                            left -= 1;
                        }
                        // Not this test's: closed.
                        _ => eprintln!("zn-perf: server: ignoring a connection from {from}"),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let now = Instant::now();
                    ensure!(
                        now < until,
                        "{left} of {} data connections did not arrive within {:.0} s",
                        ports.len(),
                        timeout.as_secs_f64()
                    );
                    let ms = (until - now).as_millis().min(1000) as u16;
                    let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
                    let _ = poll(&mut fds, PollTimeout::from(ms));
                }
                Err(e) => return Err(e).context("accept of a data connection"),
            }
        }
        Ok(())
    })();
    listener.set_nonblocking(false).context("O_NONBLOCK")?;
    r?;
    Ok(got.into_iter().flatten().collect())
}

fn server_test(
    ctrl: &mut Ctrl,
    peer: SocketAddr,
    listener: &TcpListener,
    spec: &TestSpec,
    opts: &SideOpts,
) -> Result<SideResult> {
    ensure!(
        spec.flows >= 1 && spec.flows <= 4096,
        "flows {}",
        spec.flows
    );
    ensure!(
        spec.msg_size > 0 && spec.msg_size <= 1 << 30,
        "message size {}",
        spec.msg_size
    );
    ensure!(
        !spec.bidir || (spec.bytes.is_some() && spec.kind == Kind::Bandwidth),
        "a bidirectional test needs a byte count"
    );
    ctrl.send(&Msg::Ready)?;
    let ports = match ctrl.recv("conns")? {
        Msg::Conns { ports } => ports,
        m => bail!("expected conns, got {m:?}"),
    };
    ensure!(
        ports.len() == spec.flows as usize,
        "{} ports for {} flows",
        ports.len(),
        spec.flows
    );
    let socks = accept_data(listener, peer.ip(), &ports, Duration::from_secs(30))?;
    let prepared =
        prepare(opts, spec, role_of(spec, false), socks).context("preparing the server's end")?;
    ctrl.send(&Msg::Attached)?;
    match ctrl.recv("go")? {
        Msg::Go => {}
        m => bail!("expected go, got {m:?}"),
    }
    prepared.run().context("server's end")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("64MB"), Ok(64 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("99999999999999T").is_err());
    }

    #[test]
    fn cli_parses() {
        let c = Cli::try_parse_from([
            "zn-perf",
            "client",
            "10.90.0.2",
            "--mode",
            "offload",
            "--rx",
            "stream",
            "-P",
            "4",
            "-s",
            "1M",
            "-n",
            "64M",
            "--verify",
            "--json",
        ])
        .unwrap();
        let Cmd::Client(a) = c.cmd else {
            panic!("not a client")
        };
        assert_eq!(a.end.mode, Mode::Offload);
        assert_eq!(a.end.rx, RxKind::Stream);
        assert_eq!((a.parallel, a.size, a.bytes), (4, 1 << 20, Some(64 << 20)));
        assert!(a.verify && a.end.json);
        assert!(Cli::try_parse_from(["zn-perf", "client", "h", "-t", "1", "-n", "1M"]).is_err());
        let c = Cli::try_parse_from(["zn-perf", "server", "-1", "--mode", "offload"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Server(ServerArgs { once: true, .. })));
    }

    #[test]
    fn cli_parses_served() {
        let c = Cli::try_parse_from([
            "zn-perf",
            "client",
            "10.90.0.2",
            "--mode",
            "served",
            "-a",
            "--size-min",
            "64",
            "--size-max",
            "8M",
            "-t",
            "1",
            "--json",
        ])
        .unwrap();
        let Cmd::Client(a) = c.cmd else {
            panic!("not a client")
        };
        assert_eq!(a.end.mode, Mode::Served);
        assert!(a.all && a.end.json);
        assert_eq!((a.size_min, a.size_max, a.time), (64, 8 << 20, Some(1.0)));
        assert_eq!(a.end.side("client").mode, Mode::Served);
        let c = Cli::try_parse_from(["zn-perf", "server", "--once", "--mode", "served"]).unwrap();
        let Cmd::Server(s) = c.cmd else {
            panic!("not a server")
        };
        assert_eq!(s.end.mode, Mode::Served);
        let c = Cli::try_parse_from([
            "zn-perf",
            "client",
            "h",
            "--mode",
            "served",
            "--latency",
            "-i",
            "100",
        ])
        .unwrap();
        let Cmd::Client(a) = c.cmd else {
            panic!("not a client")
        };
        assert!(a.latency && a.end.mode == Mode::Served);
        assert!(describe(
            &TestSpec {
                kind: Kind::Latency,
                msg_size: 64,
                flows: 1,
                bytes: None,
                duration: None,
                verify: false,
                hash: stream::Hash::Xxh64,
                seed: 1,
                reverse: false,
                iters: 100,
                warmup: 10,
                bidir: false,
                sent_digests: None,
            },
            &a.end
        )
        .contains("client served"));
        assert!(Cli::try_parse_from(["zn-perf", "client", "h", "--mode", "serve"]).is_err());
    }

    /// A whole client/server run over loopback in plain mode (what can run
    /// without the NIC): the protocol, both ends, the JSON document.
    #[test]
    fn client_server_over_loopback() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let end = EndArgs {
            mode: Mode::Plain,
            rx: RxKind::Message,
            ring: 1 << 20,
            tx_depth: None,
            rx_depth: None,
            threads: 1,
            nic: 0,
            stall_timeout: 10.0,
            no_window_clamp: false,
            zerocopy: false,
            congestion: None,
            json: true,
        };
        let srv = std::thread::spawn({
            let end = end.clone();
            move || {
                let (s, peer) = l.accept().unwrap();
                let mut doc = Document::new("server", None);
                session(s, peer, &l, &end.side("server"), &end, &mut doc).unwrap();
                doc
            }
        });
        let addr: SocketAddr = ("127.0.0.1", port)
            .to_socket_addrs()
            .unwrap()
            .next()
            .unwrap();
        let mut ctrl = Ctrl::new(TcpStream::connect(addr).unwrap()).unwrap();
        ctrl.send(&Msg::Hello { proto: PROTO }).unwrap();
        assert_eq!(ctrl.recv("hello").unwrap(), Msg::Hello { proto: PROTO });
        let spec = TestSpec {
            kind: Kind::Bandwidth,
            msg_size: 4096,
            flows: 2,
            bytes: Some(1 << 20),
            duration: None,
            verify: true,
            hash: stream::Hash::Sha256,
            seed: 3,
            reverse: true,
            iters: 0,
            warmup: 0,
            bidir: false,
            sent_digests: None,
        };
        let (local, remote) = client_test(&mut ctrl, addr, &spec, &end.side("client")).unwrap();
        ctrl.send(&Msg::Bye).unwrap();
        assert_eq!(local.role, report::Role::Recv);
        assert_eq!(remote.role, report::Role::Send);
        assert_eq!(local.bytes, 2 << 20);
        digests_match(&local, &remote).unwrap();
        let doc = srv.join().unwrap();
        assert_eq!(doc.results.len(), 1);
        assert_eq!(
            doc.results[0].local.flows[1].tx_digest,
            local.flows[1].rx_digest
        );
    }
}

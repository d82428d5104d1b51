//! `zeronic-nic`: the emulated ZeroNIC daemon and its control client.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use zeronic_nic::ctl;
use zeronic_nic::mem::Bar2;
use zeronic_nic::model::{Model, Topology};
use zeronic_nic::server::{self, GuestCfg};
use zeronic_nic::wire::Impair;

#[derive(Parser)]
#[command(version, about = "Emulated ZeroNIC behind QEMU ivshmem-doorbell")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the device model (foreground; logs to stderr, RUST_LOG=info).
    Run {
        /// Port wiring.
        #[arg(long, value_enum)]
        topology: Topology,
        /// NAME=RAMFILE[,socket=PATH], once per guest (two-port: 1, two-guest: 2).
        #[arg(long = "guest", required = true)]
        guests: Vec<String>,
        /// Directory for default guest sockets (NAME.sock).
        #[arg(long, default_value = "/tmp/zeronic")]
        sock_dir: PathBuf,
        /// Control socket.
        #[arg(long, default_value = "/tmp/zeronic/ctl.sock")]
        ctl: PathBuf,
        /// MSI-X vectors per guest; must equal QEMU's `vectors=` (>= 5).
        #[arg(long, default_value_t = 8)]
        vectors: u32,
        /// Start-time impairments, e.g. loss=1,reorder=2,dup=1,delay=100us,rate=10gbit.
        #[arg(long, default_value = "")]
        wire: String,
        /// Seed of the impairment random generators.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Send one command to a running model's control socket.
    ///
    /// Commands: `wire [from=NAME:PORT] [loss=PCT] [reorder=PCT] [dup=PCT]
    /// [delay=DUR] [rate=RATE]`; `fault fatal|freeze|thaw|status
    /// [guest=NAME]` (fatal: the device enters the fatal state as with a
    /// broken command queue, until reset; freeze: it stops doing anything
    /// until thaw; without guest=, every guest); `stats`; `help`.
    Ctl {
        /// Control socket.
        #[arg(long, default_value = "/tmp/zeronic/ctl.sock")]
        socket: PathBuf,
        /// Command words, e.g. `wire loss=5`, `fault freeze guest=a` or `stats`.
        #[arg(required = true, trailing_var_arg = true)]
        words: Vec<String>,
    },
}

fn run(
    topology: Topology,
    guests: &[String],
    sock_dir: PathBuf,
    ctl_path: PathBuf,
    vectors: u32,
    wire: &str,
    seed: u64,
) -> Result<()> {
    let cfgs = guests
        .iter()
        .map(|g| GuestCfg::parse(g, &sock_dir))
        .collect::<Result<Vec<_>>>()?;
    let (n, ports) = topology.shape();
    if cfgs.len() != n {
        bail!(
            "topology {topology:?} needs {n} --guest, got {}",
            cfgs.len()
        );
    }
    let need = 1 + 2 * ports;
    if vectors < need.max(zeronic_hw::regs::NUM_DOORBELLS) || vectors > 64 {
        bail!("--vectors {vectors}: need at least {}", need.max(4));
    }
    let mut impair = Impair::default();
    impair.apply(wire).context("--wire")?;
    let names: Vec<String> = cfgs.iter().map(|c| c.name.clone()).collect();
    let model = Arc::new(Model::new(
        topology,
        &names,
        |g| {
            Ok(Arc::new(Bar2::memfd(&format!(
                "zeronic-bar2-{}",
                names[g]
            ))?))
        },
        impair,
        seed,
    )?);
    server::start(model.clone(), &cfgs, vectors)?;
    ctl::start(model.clone(), &ctl_path)?;
    log::info!(
        "zeronic-nic running: topology {topology:?}, control {}",
        ctl_path.display()
    );
    loop {
        std::thread::park();
    }
}

fn main() -> Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match Cli::parse().cmd {
        Cmd::Run {
            topology,
            guests,
            sock_dir,
            ctl,
            vectors,
            wire,
            seed,
        } => run(topology, &guests, sock_dir, ctl, vectors, &wire, seed),
        Cmd::Ctl { socket, words } => {
            let reply = ctl::send(&socket, &words.join(" "))?;
            print!("{reply}");
            if reply.starts_with("error") {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

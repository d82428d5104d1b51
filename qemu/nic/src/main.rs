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
        /// NAME=RAMFILE[,socket=PATH][,ctl=PATH], once per guest (two-port:
        /// 1, two-guest: 2). ctl is the guest's own control socket (default
        /// <sock-dir>/NAME.ctl), for its virtio-serial control port: it acts
        /// only on that guest's device and the wire leaving its ports.
        #[arg(long = "guest", required = true)]
        guests: Vec<String>,
        /// Directory for default guest sockets (NAME.sock).
        #[arg(long, default_value = "/tmp/zeronic")]
        sock_dir: PathBuf,
        /// Control socket with rights over every guest and the whole wire.
        #[arg(long, default_value = "/tmp/zeronic/ctl.sock")]
        ctl: PathBuf,
        /// Give each guest's own control socket the rights of --ctl (any
        /// guest, any wire direction) instead of its own guest only.
        #[arg(long)]
        guest_ctl_all: bool,
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
    /// [delay=DUR] [rate=RATE]`; `fault fatal|freeze|hold|refuse-posts|thaw|status
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

/// `zeronic-nic run` options beyond the guests.
struct RunOpts {
    topology: Topology,
    sock_dir: PathBuf,
    ctl: PathBuf,
    guest_ctl_all: bool,
    vectors: u32,
    wire: String,
    seed: u64,
}

fn run(guests: &[String], o: RunOpts) -> Result<()> {
    let RunOpts {
        topology,
        sock_dir,
        ctl: ctl_path,
        guest_ctl_all,
        vectors,
        wire,
        seed,
    } = o;
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
    impair.apply(&wire).context("--wire")?;
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
    for g in &model.guests {
        zeronic_nic::model::lock(&g.dev).set_vectors(vectors);
    }
    server::start(model.clone(), &cfgs, vectors)?;
    ctl::start(model.clone(), &ctl_path, ctl::Scope::All)?;
    for (g, cfg) in cfgs.iter().enumerate() {
        let scope = if guest_ctl_all {
            ctl::Scope::All
        } else {
            ctl::Scope::Guest(g)
        };
        ctl::start(model.clone(), &cfg.ctl, scope)
            .with_context(|| format!("control socket of guest {}", cfg.name))?;
    }
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
            guest_ctl_all,
            vectors,
            wire,
            seed,
        } => run(
            &guests,
            RunOpts {
                topology,
                sock_dir,
                ctl,
                guest_ctl_all,
                vectors,
                wire,
                seed,
            },
        ),
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

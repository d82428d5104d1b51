//! `zn-perf attach`: what attaching a connection costs, against what
//! connecting it cost, measured in one process.
//!
//! Each round opens a connection from the client's network namespace to a
//! listener in the server's (the two ends of the ZeroNIC ports), times the
//! handshake (`connect()` until `accept()` returned), then each end's
//! `setsockopt(TCP_ULP, "zeronic")`, moves one byte each way over the
//! attached sockets (the connection works) and closes both. The medians
//! and percentiles say what a short connection pays for the attach; run
//! with the module's `spare_rings=0` and with its default, they say what the
//! spare rings save (docs/driver.md, "Spare rings"; `scripts/bench-guest`'s
//! `attach` part).

use crate::report::nearest_rank;
use anyhow::{ensure, Context, Result};
use nix::sched::{setns, CloneFlags};
use nix::sys::socket::{setsockopt, sockopt};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Where the ends live and how many rounds run.
pub struct AttachOpts {
    /// Network namespace (a name under /run/netns) of the listener.
    pub server_ns: Option<String>,
    /// Network namespace of the connecting end.
    pub client_ns: Option<String>,
    /// The listener's address (a ZeroNIC port's).
    pub addr: IpAddr,
    /// Rounds.
    pub rounds: u32,
}

/// Microseconds of each round's steps.
#[derive(Default, Debug, serde::Serialize)]
pub struct AttachTimes {
    /// `connect()` until `accept()` returned.
    pub connect_us: Vec<u64>,
    /// `setsockopt(TCP_ULP)` of either end (two per round).
    pub attach_us: Vec<u64>,
    /// Closing both ends (the detach: NIC flow removal, ring release).
    pub close_us: Vec<u64>,
}

/// Runs `f` in network namespace `ns` (this thread's own if `None`), then
/// comes back.
fn in_ns<T>(ns: Option<&str>, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let Some(ns) = ns else {
        return f();
    };
    let home = File::open("/proc/thread-self/ns/net").context("opening this thread's netns")?;
    let target = File::open(format!("/run/netns/{ns}"))
        .with_context(|| format!("opening network namespace {ns}"))?;
    setns(&target, CloneFlags::CLONE_NEWNET).with_context(|| format!("entering {ns}"))?;
    let r = f();
    setns(&home, CloneFlags::CLONE_NEWNET).context("coming back to this thread's netns")?;
    r
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn attach(s: &TcpStream, end: &str) -> Result<u64> {
    let t = Instant::now();
    setsockopt(s, sockopt::TcpUlp::default(), &zn::ulp::ULP_NAME.to_bytes()).map_err(|e| {
        anyhow::Error::new(e).context(format!(
            "setsockopt TCP_ULP \"zeronic\" at the {end} ({})",
            zn::ulp::refusal(e)
        ))
    })?;
    Ok(micros(t.elapsed()))
}

/// Runs the rounds.
///
/// # Errors
///
/// A namespace that cannot be entered, a connection that fails, an attach
/// refused (with what its errno means), a byte that does not cross.
pub fn run(o: &AttachOpts) -> Result<AttachTimes> {
    ensure!(o.rounds > 0, "no rounds");
    let listener = in_ns(o.server_ns.as_deref(), || {
        TcpListener::bind(SocketAddr::new(o.addr, 0))
            .with_context(|| format!("listening on {}", o.addr))
    })?;
    let to = listener.local_addr().context("the listener's address")?;
    let mut t = AttachTimes::default();
    for round in 0..o.rounds {
        let t0 = Instant::now();
        let cli = in_ns(o.client_ns.as_deref(), || {
            TcpStream::connect(to).with_context(|| format!("connecting to {to}"))
        })?;
        let (srv, _) = listener.accept().context("accepting")?;
        t.connect_us.push(micros(t0.elapsed()));
        t.attach_us.push(attach(&cli, "client")?);
        t.attach_us.push(attach(&srv, "server")?);
        let mut b = [0u8; 1];
        (&cli).write_all(&[1]).context("a byte to the server")?;
        (&srv)
            .read_exact(&mut b)
            .context("the byte at the server")?;
        (&srv).write_all(&b).context("the byte back")?;
        (&cli)
            .read_exact(&mut b)
            .context("the byte back at the client")?;
        ensure!(b[0] == 1, "round {round}: the byte came back as {}", b[0]);
        let t1 = Instant::now();
        drop(cli);
        drop(srv);
        t.close_us.push(micros(t1.elapsed()));
    }
    Ok(t)
}

/// The 10th, 50th and 90th percentiles of a step's samples, microseconds
/// (nearest rank; 0 without samples).
#[derive(Debug, PartialEq, Eq, serde::Serialize)]
pub struct Spread {
    pub p10: u64,
    pub p50: u64,
    pub p90: u64,
}

impl Spread {
    /// Of `samples`, in any order.
    pub fn of(samples: &[u64]) -> Self {
        let mut s = samples.to_vec();
        s.sort_unstable();
        let at = |p| nearest_rank(&s, p).unwrap_or(0);
        Self {
            p10: at(10.0),
            p50: at(50.0),
            p90: at(90.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_nearest_rank() {
        assert_eq!(
            Spread::of(&[5, 1, 4, 2, 3]),
            Spread {
                p10: 1,
                p50: 3,
                p90: 5
            }
        );
        assert_eq!(
            Spread::of(&[]),
            Spread {
                p10: 0,
                p50: 0,
                p90: 0
            }
        );
    }
}

//! Control channel: a unix socket taking command lines
//! (`wire loss=1 reorder=2 dup=1 delay=100us rate=10gbit`, `wire
//! from=NAME:PORT loss=5`, `stats`, `help`) and answering each with text that
//! starts with `ok` or `error:` and ends with a line holding only [`END`].
//!
//! A connection may carry many commands: QEMU keeps one open for a guest's
//! virtio-serial control port (qemu/topologies), so tests inside the guest
//! change impairments while they run. `zeronic-nic ctl` sends one and closes.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::thread;

use anyhow::{bail, Context, Result};

use crate::model::{lock, Model};
use crate::wire::Endpoint;

/// Last line of every reply, so a client on a long-lived connection knows
/// where a multi-line reply ends.
pub const END: &str = ".";

const HELP: &str = "commands:\n  wire [from=NAME:PORT] [loss=PCT] [reorder=PCT] [dup=PCT] [delay=DUR] [rate=RATE]\n  stats\n  help\n";

/// Executes one command line.
pub fn execute(model: &Model, line: &str) -> Result<String> {
    let mut words = line.split_whitespace();
    match words.next() {
        Some("wire") => {
            let mut from = None;
            let mut spec = Vec::new();
            for w in words {
                match w.strip_prefix("from=") {
                    Some(ep) => {
                        let (name, port) = ep.split_once(':').context("from=NAME:PORT")?;
                        let guest = model
                            .guests
                            .iter()
                            .position(|g| g.name == name)
                            .with_context(|| format!("no guest {name:?}"))?;
                        let port = port.parse().context("port number")?;
                        from = Some(Endpoint { guest, port });
                    }
                    None => spec.push(w),
                }
            }
            let spec = spec.join(" ");
            // Validate before touching any direction.
            crate::wire::Impair::default().apply(&spec)?;
            lock(&model.wire).set(from, |c| c.apply(&spec))?;
            Ok(format!("ok\n{}", model.stats()))
        }
        Some("stats") => Ok(format!("ok\n{}", model.stats())),
        Some("help") | None => Ok(format!("ok\n{HELP}")),
        Some(w) => bail!("unknown command {w:?}"),
    }
}

fn handle(model: &Model, s: UnixStream) -> Result<()> {
    let mut reader = BufReader::new(&s);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).context("read command")? == 0 {
            return Ok(());
        }
        if line.trim().is_empty() {
            continue;
        }
        let mut reply = match execute(model, line.trim()) {
            Ok(r) => r,
            Err(e) => format!("error: {e:#}\n"),
        };
        if !reply.ends_with('\n') {
            reply.push('\n');
        }
        reply.push_str(END);
        reply.push('\n');
        (&s).write_all(reply.as_bytes()).context("write reply")?;
    }
}

/// Serves the control socket in a thread.
pub fn start(model: Arc<Model>, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path).with_context(|| format!("bind {}", path.display()))?;
    thread::Builder::new()
        .name("ctl".into())
        .spawn(move || {
            // One thread per connection: each guest's QEMU holds one open for
            // the whole run, so serving them in turn would starve the others.
            for s in l.incoming().flatten() {
                let model = model.clone();
                let spawned = thread::Builder::new()
                    .name("ctl-conn".into())
                    .spawn(move || {
                        if let Err(e) = handle(&model, s) {
                            log::warn!("ctl: {e:#}");
                        }
                    });
                if let Err(e) = spawned {
                    log::warn!("ctl: cannot serve a connection: {e}");
                }
            }
        })
        .context("spawn ctl thread")?;
    Ok(())
}

/// Client side: sends one command and returns the reply (without the
/// [`END`] line).
pub fn send(path: &Path, line: &str) -> Result<String> {
    let mut s = UnixStream::connect(path).with_context(|| format!("connect {}", path.display()))?;
    s.write_all(format!("{line}\n").as_bytes())
        .context("send command")?;
    s.shutdown(std::net::Shutdown::Write).context("shutdown")?;
    let mut r = String::new();
    s.read_to_string(&mut r).context("read reply")?;
    match r.strip_suffix(&format!("{END}\n")) {
        Some(body) => Ok(body.to_owned()),
        None => bail!("reply not terminated by {END:?}: {r:?}"),
    }
}

//! Control channel: a unix socket taking one command line per connection
//! (`wire loss=1 reorder=2 dup=1 delay=100us rate=10gbit`, `wire
//! from=NAME:PORT loss=5`, `stats`, `help`) and answering with text that
//! starts with `ok` or `error:`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::thread;

use anyhow::{bail, Context, Result};

use crate::model::{lock, Model};
use crate::wire::Endpoint;

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
    let mut line = String::new();
    BufReader::new(&s)
        .read_line(&mut line)
        .context("read command")?;
    let reply = match execute(model, line.trim()) {
        Ok(r) => r,
        Err(e) => format!("error: {e:#}\n"),
    };
    (&s).write_all(reply.as_bytes()).context("write reply")?;
    Ok(())
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
            for s in l.incoming().flatten() {
                if let Err(e) = handle(&model, s) {
                    log::warn!("ctl: {e:#}");
                }
            }
        })
        .context("spawn ctl thread")?;
    Ok(())
}

/// Client side: sends one command and returns the reply.
pub fn send(path: &Path, line: &str) -> Result<String> {
    let mut s = UnixStream::connect(path).with_context(|| format!("connect {}", path.display()))?;
    s.write_all(format!("{line}\n").as_bytes())
        .context("send command")?;
    s.shutdown(std::net::Shutdown::Write).context("shutdown")?;
    let mut r = String::new();
    s.read_to_string(&mut r).context("read reply")?;
    Ok(r)
}

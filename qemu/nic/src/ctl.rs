//! Control channel: a unix socket taking command lines
//! (`wire loss=1 reorder=2 dup=1 delay=100us rate=10gbit`, `wire
//! from=NAME:PORT loss=5`, `fault fatal|freeze|hold|refuse-posts|thaw|status [guest=NAME]`,
//! `stats`, `help`) and answering each with text that starts with `ok` or
//! `error:` and ends with a line holding only [`END`].
//!
//! A connection may carry many commands: QEMU keeps one open for a guest's
//! virtio-serial control port (qemu/topologies), so tests inside the guest
//! change impairments while they run. `zeronic-nic ctl` sends one and closes.
//!
//! Each socket has a [`Scope`]: the host's socket acts on everything; a
//! guest's own socket (the one its virtio-serial port reaches) only on that
//! guest's device and the wire directions leaving its ports, unless the
//! model was started with `--guest-ctl-all`. Input is bounded: lines of at
//! most [`MAX_LINE`] bytes, at most [`MAX_CONNS`] connections per socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use anyhow::{bail, Context, Result};

use crate::model::{lock, Model};
use crate::wire::Endpoint;

/// Last line of every reply, so a client on a long-lived connection knows
/// where a multi-line reply ends.
pub const END: &str = ".";

/// Longest command line accepted (newline included); a longer one gets an
/// error reply and the connection is closed.
pub const MAX_LINE: usize = 1024;
/// Connections one control socket serves at once; more are answered with
/// an error and closed.
pub const MAX_CONNS: usize = 8;

/// What a control connection may act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every guest's device and every wire direction (the host's socket).
    All,
    /// Guest `g`'s device and the wire directions leaving its ports.
    Guest(usize),
}

impl Scope {
    fn allows(self, guest: usize) -> bool {
        match self {
            Scope::All => true,
            Scope::Guest(g) => g == guest,
        }
    }
}

const HELP: &str = "commands:\n  wire [from=NAME:PORT] [loss=PCT] [reorder=PCT] [dup=PCT] [delay=DUR] [rate=RATE]\n  fault fatal|freeze|hold|refuse-posts|thaw|status [guest=NAME]   (no guest=: every guest)\n  stats\n  prof [reset]   (where the model's time goes; reset clears it)\n  help\n";

/// What a `fault` command does to a guest's device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Enter the fatal state as a broken command queue does (only a reset
    /// clears it).
    Fatal,
    /// Stop serving the device: no scans, DMA or interrupts (a dead NIC).
    Freeze,
    /// Hold command execution before the next `CMD_FLOW_UPDATE` (a NIC
    /// slow to move a cursor); RX, TX and everything else go on.
    Hold,
    /// Refuse every segment post (`ST_NO_SPACE`).
    RefusePosts,
    /// Serve it again (ends a freeze, a hold and refused posts).
    Thaw,
    /// Only report the state.
    Status,
}

/// Parses the words after `fault`: the action and the guest it applies to
/// (None: every guest).
pub fn parse_fault<'a>(
    mut words: impl Iterator<Item = &'a str>,
) -> Result<(Fault, Option<&'a str>)> {
    let op = match words.next() {
        Some("fatal") => Fault::Fatal,
        Some("freeze") => Fault::Freeze,
        Some("hold") => Fault::Hold,
        Some("refuse-posts") => Fault::RefusePosts,
        Some("thaw") => Fault::Thaw,
        Some("status") => Fault::Status,
        Some(w) => bail!("unknown fault {w:?} (fatal, freeze, hold, refuse-posts, thaw, status)"),
        None => bail!("fault fatal|freeze|hold|refuse-posts|thaw|status [guest=NAME]"),
    };
    let mut guest = None;
    for w in words {
        match w.strip_prefix("guest=") {
            Some(g) if !g.is_empty() && guest.is_none() => guest = Some(g),
            Some(_) => bail!("fault: one guest=NAME"),
            None => bail!("fault: unknown argument {w:?}"),
        }
    }
    Ok((op, guest))
}

/// Guest index of `name`, if `scope` may act on it.
fn scoped_guest(model: &Model, scope: Scope, name: &str) -> Result<usize> {
    let g = model
        .guest_index(name)
        .with_context(|| format!("no guest {name:?}"))?;
    if !scope.allows(g) {
        bail!("guest {name:?} is outside this control channel's scope");
    }
    Ok(g)
}

/// Applies a fault to one guest or to all in scope; the reply has one
/// [`Model::fault_status`] line per guest concerned.
fn fault(model: &Model, scope: Scope, op: Fault, guest: Option<&str>) -> Result<String> {
    let targets: Vec<usize> = match guest {
        Some(name) => vec![scoped_guest(model, scope, name)?],
        None => (0..model.guests.len())
            .filter(|&g| scope.allows(g))
            .collect(),
    };
    if op == Fault::Fatal {
        // Posting EV_FATAL is DMA, which a frozen device does not do.
        if let Some(&g) = targets.iter().find(|&&g| lock(&model.guests[g].dev).frozen) {
            bail!("guest {} is frozen: thaw it first", model.guests[g].name);
        }
    }
    let mut s = String::from("ok\n");
    for g in targets {
        match op {
            Fault::Fatal => {
                let mut d = lock(&model.guests[g].dev);
                if d.frozen {
                    // Frozen by another connection since the check above.
                    bail!("guest {} is frozen: thaw it first", model.guests[g].name);
                }
                log::warn!("guest {}: fatal error injected", model.guests[g].name);
                d.fail_cmdq();
            }
            Fault::Freeze => model.set_frozen(g, true),
            Fault::Hold => model.set_hold_updates(g, true),
            Fault::RefusePosts => model.set_refuse_posts(g, true),
            Fault::Thaw => {
                model.set_frozen(g, false);
                model.set_hold_updates(g, false);
                model.set_refuse_posts(g, false);
            }
            Fault::Status => {}
        }
        s.push_str(&model.fault_status(g));
        s.push('\n');
    }
    Ok(s)
}

/// Executes one command line within `scope`.
pub fn execute(model: &Model, scope: Scope, line: &str) -> Result<String> {
    let mut words = line.split_whitespace();
    match words.next() {
        Some("wire") => {
            let mut from = None;
            let mut spec = Vec::new();
            for w in words {
                match w.strip_prefix("from=") {
                    Some(ep) => {
                        let (name, port) = ep.split_once(':').context("from=NAME:PORT")?;
                        let guest = scoped_guest(model, scope, name)?;
                        let port = port.parse().context("port number")?;
                        from = Some(Endpoint { guest, port });
                    }
                    None => spec.push(w),
                }
            }
            let spec = spec.join(" ");
            // Validate before touching any direction.
            crate::wire::Impair::default().apply(&spec)?;
            let pick = |e: Endpoint| match from {
                Some(f) => f == e,
                None => scope.allows(e.guest),
            };
            let n = lock(&model.wire).set(pick, |c| c.apply(&spec))?;
            match from {
                Some(e) if n == 0 => bail!("no wire direction leaves port {}", e.port),
                None if n == 0 => bail!("no wire direction within this channel's scope"),
                _ => {}
            }
            Ok(format!("ok\n{}", model.stats()))
        }
        Some("fault") => {
            let (op, guest) = parse_fault(words)?;
            fault(model, scope, op, guest)
        }
        Some("stats") => Ok(format!("ok\n{}", model.stats())),
        Some("prof") => {
            let reset = match words.next() {
                None => false,
                Some("reset") => true,
                Some(w) => bail!("prof [reset], not {w:?}"),
            };
            Ok(format!("ok\n{}", model.prof(|g| scope.allows(g), reset)))
        }
        Some("help") | None => Ok(format!("ok\n{HELP}")),
        Some(w) => bail!("unknown command {w:?}"),
    }
}

fn reply(s: &UnixStream, body: &str) -> Result<()> {
    let mut r = body.to_string();
    if !r.ends_with('\n') {
        r.push('\n');
    }
    r.push_str(END);
    r.push('\n');
    (&*s).write_all(r.as_bytes()).context("write reply")
}

/// Serves one connection: command lines until EOF, or until a line
/// longer than [`MAX_LINE`] (answered with an error, then closed).
pub fn handle(model: &Model, scope: Scope, s: &UnixStream) -> Result<()> {
    let mut reader = BufReader::new(s);
    let mut raw = Vec::new();
    loop {
        raw.clear();
        let n = (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut raw)
            .context("read command")?;
        if n == 0 {
            return Ok(());
        }
        if raw.last() != Some(&b'\n') && n == MAX_LINE {
            reply(s, &format!("error: command longer than {MAX_LINE} bytes"))?;
            bail!("command longer than {MAX_LINE} bytes: connection closed");
        }
        let Ok(line) = std::str::from_utf8(&raw) else {
            reply(s, "error: command is not UTF-8")?;
            continue;
        };
        if line.trim().is_empty() {
            continue;
        }
        let body = match execute(model, scope, line.trim()) {
            Ok(r) => r,
            Err(e) => format!("error: {e:#}\n"),
        };
        reply(s, &body)?;
    }
}

/// Answers a connection beyond [`MAX_CONNS`] with an error, without
/// waiting for it: a command already sent is discarded (at most one
/// line), so that closing does not reset the connection before the client
/// read the answer.
fn refuse(s: &UnixStream) {
    let _ = reply(s, &format!("error: more than {MAX_CONNS} connections"));
    let _ = s.shutdown(std::net::Shutdown::Write);
    if s.set_nonblocking(true).is_ok() {
        let mut sink = [0u8; MAX_LINE];
        let _ = (&*s).read(&mut sink);
    }
}

/// Serves the control socket at `path` with rights `scope` in a thread.
pub fn start(model: Arc<Model>, path: &Path, scope: Scope) -> Result<()> {
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
            let live = Arc::new(AtomicUsize::new(0));
            for s in l.incoming().flatten() {
                if live.fetch_add(1, Ordering::AcqRel) >= MAX_CONNS {
                    live.fetch_sub(1, Ordering::AcqRel);
                    refuse(&s);
                    continue;
                }
                let (model, live2) = (model.clone(), live.clone());
                let spawned = thread::Builder::new()
                    .name("ctl-conn".into())
                    .spawn(move || {
                        if let Err(e) = handle(&model, scope, &s) {
                            log::warn!("ctl: {e:#}");
                        }
                        live2.fetch_sub(1, Ordering::AcqRel);
                    });
                if let Err(e) = spawned {
                    live.fetch_sub(1, Ordering::AcqRel);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<(Fault, Option<&str>)> {
        parse_fault(line.split_whitespace())
    }

    #[test]
    fn fault_commands_parse() {
        assert_eq!(parse("fatal").unwrap(), (Fault::Fatal, None));
        assert_eq!(parse("hold").unwrap(), (Fault::Hold, None));
        assert_eq!(parse("refuse-posts").unwrap(), (Fault::RefusePosts, None));
        assert_eq!(parse("fatal guest=b").unwrap(), (Fault::Fatal, Some("b")));
        assert_eq!(parse("freeze guest=a").unwrap(), (Fault::Freeze, Some("a")));
        assert_eq!(parse("thaw").unwrap(), (Fault::Thaw, None));
        assert_eq!(parse("status guest=a").unwrap(), (Fault::Status, Some("a")));
        for bad in [
            "",
            "melt",
            "fatal guest=",
            "fatal a",
            "freeze guest=a guest=b",
            "thaw loss=5",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    fn model(topo: crate::model::Topology, names: &[&str]) -> Model {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        Model::new(
            topo,
            &names,
            |g| Ok(Arc::new(crate::mem::Bar2::memfd(&format!("ctl-test{g}"))?)),
            crate::wire::Impair::default(),
            1,
        )
        .unwrap()
    }

    #[test]
    fn fault_commands_execute() {
        use crate::model::Topology;
        let m = model(Topology::TwoGuest, &["a", "b"]);
        let execute = |m: &Model, line: &str| execute(m, Scope::All, line);
        let r = execute(&m, "fault freeze guest=b").unwrap();
        assert_eq!(r.lines().count(), 2, "{r}");
        assert!(r.starts_with("ok\nguest b: frozen=1 fatal=0 "), "{r}");
        assert!(lock(&m.guests[1].dev).frozen);
        assert!(!lock(&m.guests[0].dev).frozen);
        // A frozen device cannot post EV_FATAL: refused, nothing changes.
        let e = execute(&m, "fault fatal").unwrap_err().to_string();
        assert!(e.contains("guest b is frozen"), "{e}");
        assert!(!lock(&m.guests[0].dev).fatal());
        let r = execute(&m, "fault thaw").unwrap();
        assert!(
            r.contains("guest a: frozen=0") && r.contains("guest b: frozen=0"),
            "{r}"
        );
        let r = execute(&m, "fault fatal guest=a").unwrap();
        assert!(
            r.contains("guest a: frozen=0 fatal=1 fatal_code=2 fatal_info=0x8 "),
            "{r}"
        );
        assert!(!lock(&m.guests[1].dev).fatal());
        let r = execute(&m, "fault status").unwrap();
        assert!(
            r.contains("guest a: frozen=0 fatal=1") && r.contains("guest b: frozen=0 fatal=0"),
            "{r}"
        );
        assert!(execute(&m, "fault freeze guest=c").is_err());
        assert!(execute(&m, "fault").is_err());
        assert!(execute(&m, "help")
            .unwrap()
            .contains("fault fatal|freeze|hold|refuse-posts|thaw|status"));
    }

    #[test]
    fn a_guest_channel_reaches_only_its_own_device_and_wire() {
        use crate::model::Topology;
        let m = model(Topology::TwoGuest, &["a", "b"]);
        let a = Scope::Guest(0);
        for other in [
            "fault freeze guest=b",
            "fault fatal guest=b",
            "fault status guest=b",
            "wire from=b:0 loss=50",
        ] {
            let e = execute(&m, a, other).unwrap_err().to_string();
            assert!(
                e.contains("outside this control channel's scope"),
                "{other}: {e}"
            );
        }
        assert!(!lock(&m.guests[1].dev).frozen && !lock(&m.guests[1].dev).fatal());
        // Without guest=/from=, only what is in scope.
        let r = execute(&m, a, "fault freeze").unwrap();
        assert_eq!(r.lines().count(), 2, "{r}");
        assert!(r.contains("guest a: frozen=1"), "{r}");
        assert!(!lock(&m.guests[1].dev).frozen);
        execute(&m, a, "fault thaw guest=a").unwrap();
        let r = execute(&m, a, "wire loss=7").unwrap();
        assert!(r.contains("wire a:0->b:0 loss=7 "), "{r}");
        assert!(r.contains("wire b:0->a:0 loss=0 "), "{r}");
        assert!(
            execute(&m, a, "wire from=a:3 loss=1").is_err(),
            "no such port"
        );
        // Statistics are read-only: every channel sees them.
        assert!(execute(&m, a, "stats").unwrap().contains("port b:0 "));
        // The host's channel (or --guest-ctl-all) reaches everything.
        let r = execute(&m, Scope::All, "wire loss=3").unwrap();
        assert!(
            r.contains("a:0->b:0 loss=3 ") && r.contains("b:0->a:0 loss=3 "),
            "{r}"
        );
        let r = execute(&m, Scope::All, "fault freeze guest=b").unwrap();
        assert!(r.contains("guest b: frozen=1"), "{r}");
    }

    #[test]
    fn command_lines_are_bounded() {
        use crate::model::Topology;
        let m = model(Topology::TwoPort, &["a"]);
        let (client, server) = UnixStream::pair().unwrap();
        let serve = std::thread::spawn(move || handle(&m, Scope::All, &server));
        let mut c = &client;
        c.write_all(b"stats\n").unwrap();
        // The server may close while these are still being written.
        let _ = c.write_all(&vec![b'x'; 10 * MAX_LINE]);
        let _ = c.write_all(b"\nstats\n");
        let err = serve.join().unwrap().unwrap_err().to_string();
        assert!(err.contains("longer than"), "{err}");
        // The server closed with input unread: the replies come, then a
        // reset instead of EOF.
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = c.read(&mut buf) {
            raw.extend_from_slice(&buf[..n]);
        }
        let r = String::from_utf8(raw).unwrap();
        let replies: Vec<&str> = r.split("\n.\n").filter(|s| !s.is_empty()).collect();
        assert_eq!(replies.len(), 2, "{r}");
        assert!(replies[0].starts_with("ok\nport a:0"), "{r}");
        assert!(replies[1].starts_with("error: command longer than"), "{r}");
    }
}

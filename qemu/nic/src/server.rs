//! The daemon side of QEMU's ivshmem server protocol, one unix socket per
//! guest. On connect the client receives, as little-endian i64 messages
//! (fds by SCM_RIGHTS): protocol version 0; its peer id; -1 with the BAR2
//! shared-memory fd; for each vector, peer 0 (the NIC) with the NIC's
//! doorbell eventfd; for each vector, its own id with its interrupt eventfd.
//! A disconnect (QEMU exit, VM power-off) resets that guest's device; the
//! next connection starts from reset state.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};
use zeronic_hw::regs::{GSTAT_DOORBELLS, NUM_DOORBELLS};

use crate::irq::EventFdIrq;
use crate::mem::GuestMem;
use crate::model::{lock, Model};

/// Peer id given to every guest (each guest has its own socket and BAR2).
pub const GUEST_PEER_ID: i64 = 1;

/// One guest's configuration (`--guest NAME=RAMFILE[,socket=PATH][,ctl=PATH]`).
#[derive(Clone, Debug)]
pub struct GuestCfg {
    /// Name used in logs and statistics.
    pub name: String,
    /// The guest's RAM file (`memory-backend-file,share=on,mem-path=...`).
    pub ram: PathBuf,
    /// The ivshmem server socket QEMU's chardev connects to.
    pub socket: PathBuf,
    /// The guest's own control socket (its virtio-serial control port),
    /// scoped to this guest.
    pub ctl: PathBuf,
}

impl GuestCfg {
    /// Parses `NAME=RAMFILE[,socket=PATH][,ctl=PATH]`; the sockets default
    /// to `<sock_dir>/<NAME>.sock` and `<sock_dir>/<NAME>.ctl`.
    pub fn parse(s: &str, sock_dir: &Path) -> Result<Self> {
        let (name, rest) = s.split_once('=').with_context(|| {
            format!("--guest {s:?}: expected NAME=RAMFILE[,socket=PATH][,ctl=PATH]")
        })?;
        let mut parts = rest.split(',');
        let ram = parts.next().filter(|r| !r.is_empty());
        let Some(ram) = ram else {
            bail!("--guest {s:?}: missing RAM file");
        };
        let mut socket = sock_dir.join(format!("{name}.sock"));
        let mut ctl = sock_dir.join(format!("{name}.ctl"));
        for p in parts {
            match p.split_once('=') {
                Some(("socket", v)) => socket = PathBuf::from(v),
                Some(("ctl", v)) => ctl = PathBuf::from(v),
                _ => bail!("--guest {s:?}: unknown option {p:?}"),
            }
        }
        Ok(Self {
            name: name.to_string(),
            ram: PathBuf::from(ram),
            socket,
            ctl,
        })
    }
}

/// Doorbell eventfds of the connected guest (None while disconnected).
type Doorbells = Arc<Mutex<Option<Arc<Vec<OwnedFd>>>>>;

fn send_msg(sock: &UnixStream, v: i64, fd: Option<BorrowedFd<'_>>) -> Result<()> {
    let buf = v.to_le_bytes();
    let iov = [std::io::IoSlice::new(&buf)];
    let raw;
    let cmsg: Vec<ControlMessage> = match fd {
        Some(f) => {
            raw = [f.as_raw_fd()];
            vec![ControlMessage::ScmRights(&raw)]
        }
        None => Vec::new(),
    };
    let n = sendmsg::<UnixAddr>(sock.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None)
        .context("sendmsg to ivshmem client")?;
    if n != buf.len() {
        bail!("short sendmsg ({n} bytes)");
    }
    Ok(())
}

fn eventfds(n: u32) -> Result<Vec<OwnedFd>> {
    (0..n)
        .map(|_| {
            let e = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                .context("eventfd")?;
            Ok(OwnedFd::from(e))
        })
        .collect()
}

fn map_ram(path: &Path) -> Option<Arc<GuestMem>> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() > 0 => match GuestMem::from_file(path) {
            Ok(g) => Some(Arc::new(g)),
            Err(e) => {
                log::warn!("{e:#}");
                None
            }
        },
        _ => None,
    }
}

/// Serves one guest connection until it closes.
fn serve(
    model: &Model,
    g: usize,
    cfg: &GuestCfg,
    vectors: u32,
    db: &Doorbells,
    sock: UnixStream,
) -> Result<()> {
    let guest = &model.guests[g];
    let bar = lock(&guest.dev).bar.clone();
    let Some(shm) = bar.fd() else {
        bail!("BAR2 has no fd");
    };
    let nic_fds = eventfds(vectors.max(NUM_DOORBELLS))?;
    let irq_fds = eventfds(vectors)?;
    send_msg(&sock, 0, None)?; // protocol version
    send_msg(&sock, GUEST_PEER_ID, None)?;
    send_msg(&sock, -1, Some(shm))?;
    for fd in nic_fds.iter().take(vectors as usize) {
        send_msg(&sock, 0, Some(fd.as_fd()))?;
    }
    for fd in &irq_fds {
        send_msg(&sock, GUEST_PEER_ID, Some(fd.as_fd()))?;
    }
    let mem = map_ram(&cfg.ram);
    if mem.is_none() {
        log::warn!(
            "guest {}: RAM file {} not mapped yet; retrying on each scan",
            cfg.name,
            cfg.ram.display()
        );
    }
    lock(&guest.dev).attach(mem, Arc::new(EventFdIrq(irq_fds)));
    *lock(db) = Some(Arc::new(nic_fds));
    log::info!("guest {} connected on {}", cfg.name, cfg.socket.display());
    // QEMU never sends anything: a read returning means it went away.
    let mut b = [0u8; 64];
    let mut s = &sock;
    loop {
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::info!("guest {}: socket error {e}", cfg.name);
                break;
            }
        }
    }
    *lock(db) = None;
    lock(&guest.dev).detach();
    log::info!("guest {} disconnected; device reset", cfg.name);
    Ok(())
}

fn accept_loop(
    model: Arc<Model>,
    g: usize,
    cfg: GuestCfg,
    vectors: u32,
    db: Doorbells,
    l: UnixListener,
) {
    for conn in l.incoming() {
        match conn {
            Ok(sock) => {
                if let Err(e) = serve(&model, g, &cfg, vectors, &db, sock) {
                    log::warn!("guest {}: {e:#}", cfg.name);
                    *lock(&db) = None;
                    lock(&model.guests[g].dev).detach();
                }
            }
            Err(e) => {
                log::warn!("guest {}: accept: {e}", cfg.name);
                thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Waits for doorbells (or the periodic scan) and runs the guest's scans.
fn worker(model: Arc<Model>, g: usize, ram: PathBuf, db: Doorbells) {
    use nix::poll::{ppoll, PollFd, PollFlags};
    use nix::sys::time::TimeSpec;
    let mut next: Option<Instant> = None;
    loop {
        let fds = lock(&db).clone();
        let Some(fds) = fds else {
            thread::sleep(Duration::from_millis(10));
            continue;
        };
        // Scan at least every millisecond: a lost doorbell only delays.
        let mut wait = Duration::from_millis(1);
        if let Some(n) = next {
            wait = wait.min(n.saturating_duration_since(Instant::now()));
        }
        let mut pfds: Vec<PollFd> = fds
            .iter()
            .map(|f| PollFd::new(f.as_fd(), PollFlags::POLLIN))
            .collect();
        // ppoll: a deadline closer than a millisecond (an interrupt held by
        // moderation, a frame the wire delays) is slept to. poll(2)'s
        // millisecond timeout rounded it down to 0, and the worker spun,
        // rescanning the whole device, until it came (thousands of wake-ups
        // per second, `prof`'s wake_timer, on a host with 2 cores).
        let rung = match ppoll(&mut pfds, Some(TimeSpec::from_duration(wait)), None) {
            Ok(n) => n,
            Err(e) => {
                log::debug!("poll: {e}");
                0
            }
        };
        let woke = Instant::now();
        if rung > 0 {
            let mut b = [0u8; 8];
            let mut tx = false;
            for (i, f) in fds.iter().enumerate() {
                // Non-blocking eventfds: EAGAIN when this one did not fire.
                let fired = nix::unistd::read(f.as_fd(), &mut b).is_ok();
                tx |= fired && i == usize::from(zeronic_hw::regs::DB_TX);
            }
            // A frozen device drops its doorbells unseen (the scan after
            // the thaw finds the work they announced).
            let mut d = lock(&model.guests[g].dev);
            if !d.frozen {
                d.gstat(GSTAT_DOORBELLS, rung as u64);
                d.prof.woke(woke, rung as u64, tx);
            }
        } else {
            lock(&model.guests[g].dev).prof.wake_timer += 1;
        }
        {
            let mut d = lock(&model.guests[g].dev);
            if d.attached && d.mem.is_none() && !d.frozen {
                if let Some(m) = map_ram(&ram) {
                    log::info!(
                        "guest {}: RAM mapped ({} MiB)",
                        model.guests[g].name,
                        m.len() >> 20
                    );
                    d.set_mem(m);
                }
            }
        }
        next = model.poll(g, Instant::now());
        if rung > 0 {
            lock(&model.guests[g].dev).prof.scan.record(woke.elapsed());
        }
    }
}

/// Delivers frames the wire held back (delay, reorder, rate).
fn wire_pump(model: Arc<Model>) {
    loop {
        let next = model.pump(Instant::now());
        let wait = next.map_or(Duration::from_millis(1), |n| {
            n.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(1))
        });
        thread::sleep(wait.max(Duration::from_micros(20)));
    }
}

/// Starts listeners, workers and the wire pump; returns immediately.
pub fn start(model: Arc<Model>, guests: &[GuestCfg], vectors: u32) -> Result<()> {
    for (g, cfg) in guests.iter().enumerate() {
        if let Some(dir) = cfg.socket.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        match std::fs::remove_file(&cfg.socket) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("remove stale {}", cfg.socket.display()))
            }
        }
        let l = UnixListener::bind(&cfg.socket)
            .with_context(|| format!("bind {}", cfg.socket.display()))?;
        let db: Doorbells = Arc::new(Mutex::new(None));
        let (m, c, d) = (model.clone(), cfg.clone(), db.clone());
        thread::Builder::new()
            .name(format!("accept-{}", cfg.name))
            .spawn(move || accept_loop(m, g, c, vectors, d, l))
            .context("spawn accept thread")?;
        let (m, r) = (model.clone(), cfg.ram.clone());
        thread::Builder::new()
            .name(format!("nic-{}", cfg.name))
            .spawn(move || worker(m, g, r, db))
            .context("spawn worker thread")?;
        log::info!(
            "guest {}: ivshmem socket {} RAM {}",
            cfg.name,
            cfg.socket.display(),
            cfg.ram.display()
        );
    }
    let m = model.clone();
    thread::Builder::new()
        .name("wire".into())
        .spawn(move || wire_pump(m))
        .context("spawn wire thread")?;
    Ok(())
}

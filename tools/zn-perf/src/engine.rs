//! The data paths of one end: bulk send and receive over plain sockets or
//! offloaded flows, and ping-pong.
//!
//! **Threads.** An end runs its flows in `--threads` event loops (default
//! one), flows dealt round-robin. A plain loop waits on epoll over its
//! non-blocking sockets; an offloaded loop has one completion queue for all
//! its flows and sleeps on its eventfd. One loop per end is what iperf3
//! does and suits the 2-vCPU test guests, where both ends and the softirq
//! work share two CPUs (64 flows as 64 threads would mostly measure the
//! scheduler); a larger machine spreads flows over `-T` loops.
//!
//! **What is touched.** Without `--verify` an offloaded receiver never reads
//! the payload and an offloaded sender fills its slots once, so the CPU
//! figure is the data path's own; a plain end's read()/write() copies are
//! Linux TCP's. With `--verify` the generator and the hash run on every byte
//! (and cost CPU: measure cost without it).

use crate::cpu::Sample;
use crate::report::{
    Counters, FlowReport, Kind, LatencyReport, Mode, Percentiles, Role, RxKind, SideResult,
    TestSpec, ZcCounters,
};
use crate::stream::{Gen, StreamSum};
use crate::window::clamp_window;
use anyhow::{bail, ensure, Context, Result};
use nix::errno::Errno;
use nix::libc;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::socket::{
    getsockopt, recvmsg, send, setsockopt, sockopt, ControlMessageOwned, MsgFlags,
};
use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io::IoSliceMut;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use zn::{Buffer, Cq, Cqe, Device, Flow, Region, Wr};

/// Stream mode: ring bytes given back at least this often while a
/// large report is worked through.
const CONSUME_STEP: u64 = 4 << 20;

/// Options of this end (not sent to the peer).
#[derive(Clone, Debug)]
pub struct SideOpts {
    /// "client" or "server".
    pub host: &'static str,
    pub mode: Mode,
    pub rx: RxKind,
    /// Stream mode: receive ring bytes per flow (a power of two).
    pub ring: u64,
    /// Sends in flight per flow (offload), None: enough for 4 MiB.
    pub tx_depth: Option<u32>,
    /// Receive segments posted per flow (offload, message mode), None:
    /// enough for 4 MiB.
    pub rx_depth: Option<u32>,
    pub threads: u32,
    pub nic: u32,
    /// No progress for this long is an error.
    pub stall: Duration,
    /// Offload, bulk receiver: clamp the TCP window to a quarter of the
    /// posted receive space (segments or ring), at most `WINDOW_MAX`, so
    /// that on a clean wire a byte finds nothing posted (and is copied) only
    /// if the application lags by more than the rest.
    pub window_clamp: bool,
    /// Plain sender: send with `MSG_ZEROCOPY` (`SO_ZEROCOPY` set on the
    /// socket, completions reaped from its error queue).
    pub zerocopy: bool,
    /// TCP congestion control for the data sockets (`TCP_CONGESTION`),
    /// None: the system default.
    pub congestion: Option<String>,
}

/// Bytes a flow keeps in flight by default.
const INFLIGHT: u64 = 4 << 20;

/// Largest receive window an offloaded bulk receiver clamps to.
const WINDOW_MAX: usize = 4 << 20;

fn depth(given: Option<u32>, msg: u64) -> u32 {
    given.unwrap_or_else(|| INFLIGHT.div_ceil(msg).clamp(2, 256) as u32)
}

/// What this end does, from the test and which end it is.
pub fn role_of(spec: &TestSpec, client: bool) -> Role {
    match (spec.kind, client, spec.reverse) {
        (Kind::Latency, true, _) => Role::Ping,
        (Kind::Latency, false, _) => Role::Echo,
        (Kind::Bandwidth, _, _) if spec.bidir => Role::Both,
        (Kind::Bandwidth, c, r) if c != r => Role::Send,
        (Kind::Bandwidth, _, _) => Role::Recv,
    }
}

// ---------------------------------------------------------------- plain

// Linux uapi values libc does not carry (asm-generic/socket.h,
// linux/errqueue.h).
const SO_ZEROCOPY: libc::c_int = 60;
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// Turns `SO_ZEROCOPY` on, so that sends may pass `MSG_ZEROCOPY`.
fn set_so_zerocopy(sock: &TcpStream) -> Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: a valid socket descriptor and a c_int option value of the
    // size passed.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ZEROCOPY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error())
            .context("setsockopt SO_ZEROCOPY (needs Linux 4.14+)");
    }
    Ok(())
}

/// `--mode served`: attaches an established data socket to the NIC by
/// `setsockopt(SOL_TCP, TCP_ULP, "zeronic")`. Linux TCP keeps serving its
/// read()/write(); the NIC places received payload. A refusal is an error
/// naming the errno (there is no fallback to plain).
fn attach_served(sock: &TcpStream, flow: usize) -> Result<()> {
    setsockopt(
        sock,
        sockopt::TcpUlp::default(),
        &zn::ulp::ULP_NAME.to_bytes(),
    )
    .map_err(|e| {
        let peer = sock
            .peer_addr()
            .map_or_else(|_| "?".into(), |a| a.to_string());
        anyhow::Error::new(e).context(format!(
            "setsockopt TCP_ULP \"zeronic\" on data connection {flow} (peer {peer}){}",
            served_hint(e)
        ))
    })
}

/// What a refusal of `TCP_ULP "zeronic"` means, for the error message.
fn served_hint(e: Errno) -> String {
    match zn::ulp::refusal(e) {
        "" => String::new(),
        m => format!(": {m}"),
    }
}

/// Sets the data socket's congestion control (`TCP_CONGESTION`).
fn set_congestion(sock: &TcpStream, algo: &str) -> Result<()> {
    setsockopt(sock, sockopt::TcpCongestion, &OsString::from(algo)).with_context(|| {
        format!(
            "setsockopt TCP_CONGESTION {algo:?} (is tcp_{algo} built in or loaded? \
             see /proc/sys/net/ipv4/tcp_available_congestion_control)"
        )
    })
}

/// The congestion control a socket uses.
fn congestion_of(sock: &TcpStream) -> Option<String> {
    getsockopt(sock, sockopt::TcpCongestion)
        .ok()
        .map(|s| s.to_string_lossy().trim_end_matches('\0').to_string())
}

/// A plain sender's `MSG_ZEROCOPY` state.
#[derive(Default)]
struct Zc {
    counters: ZcCounters,
    /// Waiting for completions before going on (the optmem limit was hit,
    /// a `--verify` refill, or the end of the stream): no EPOLLOUT wanted,
    /// the error queue's EPOLLERR wakes the flow.
    waiting: bool,
}

impl Zc {
    fn all_done(&self) -> bool {
        self.counters.completed == self.counters.sends
    }

    /// Reaps the completion notifications queued on the socket's error
    /// queue; whether there were any.
    fn reap(&mut self, sock: &TcpStream, index: u32) -> Result<bool> {
        let mut any = false;
        loop {
            let mut cmsg = nix::cmsg_space!(libc::sock_extended_err, libc::sockaddr_in6);
            let mut iov: [IoSliceMut; 0] = [];
            let r = recvmsg::<()>(
                sock.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
            );
            let msg = match r {
                Ok(m) => m,
                Err(Errno::EAGAIN) => return Ok(any),
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("flow {index}: recvmsg MSG_ERRQUEUE"))
                }
            };
            for c in msg
                .cmsgs()
                .with_context(|| format!("flow {index}: error queue control message"))?
            {
                let e = match c {
                    ControlMessageOwned::Ipv4RecvErr(e, _) => e,
                    ControlMessageOwned::Ipv6RecvErr(e, _) => e,
                    _ => continue,
                };
                if e.ee_origin != SO_EE_ORIGIN_ZEROCOPY {
                    bail!(
                        "flow {index}: error queue: errno {} origin {}",
                        e.ee_errno,
                        e.ee_origin
                    );
                }
                // ee_info..=ee_data: the range of send ids completed.
                let n = u64::from(e.ee_data.wrapping_sub(e.ee_info)) + 1;
                self.counters.completed += n;
                if e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0 {
                    self.counters.copied += n;
                }
                any = true;
            }
        }
    }
}

/// A plain flow of a bulk test.
struct PlainFlow {
    index: u32,
    sock: TcpStream,
    /// Sender: the message being written.
    buf: Vec<u8>,
    /// Receiver: what read() fills.
    rbuf: Vec<u8>,
    /// Sender: the part of `buf` not written yet.
    pend: std::ops::Range<usize>,
    gen: Gen,
    /// Sender: bytes put in `buf` so far (the stream offset).
    scheduled: u64,
    tx: StreamSum,
    rx: StreamSum,
    msgs: u64,
    /// The sending half is done (written and shut down), or there is none.
    tx_done: bool,
    /// The receiving half saw EOF, or there is none.
    rx_done: bool,
    /// The epoll events the socket is registered for.
    ev: EpollFlags,
    /// Sender with `--zerocopy`.
    zc: Option<Zc>,
    /// Sender: the stream is written and the socket shut down for writing
    /// (with `--zerocopy`, `tx_done` waits for the last completion too).
    shut: bool,
}

impl PlainFlow {
    fn done(&self) -> bool {
        self.tx_done && self.rx_done
    }

    /// The epoll events the unfinished halves wait for.
    fn want(&self) -> EpollFlags {
        let mut e = EpollFlags::empty();
        if !self.tx_done && !self.zc.as_ref().is_some_and(|z| z.waiting) {
            e |= EpollFlags::EPOLLOUT;
        }
        if !self.tx_done && self.zc.is_some() {
            // Completions on the error queue raise EPOLLERR, which epoll
            // reports whatever is asked; the flow must be registered.
            e |= EpollFlags::EPOLLERR;
        }
        if !self.rx_done {
            e |= EpollFlags::EPOLLIN;
        }
        e
    }

    fn report(&self) -> FlowReport {
        FlowReport {
            index: self.index,
            tx_bytes: self.tx.bytes(),
            rx_bytes: self.rx.bytes(),
            tx_digest: self.tx.hex(),
            rx_digest: self.rx.hex(),
            counters: None,
            copied_completions: 0,
            zerocopy: self.zc.as_ref().map(|z| z.counters.clone()),
        }
    }

    /// Sender: writes until the socket is full or the stream ends.
    fn send_some(&mut self, spec: &TestSpec, deadline: Option<Instant>) -> Result<bool> {
        let mut progressed = false;
        if let Some(z) = &mut self.zc {
            progressed |= z.reap(&self.sock, self.index)?;
            z.waiting = false;
            if self.shut {
                // Written and shut down: done once every send completed.
                self.tx_done = z.all_done();
                z.waiting = !self.tx_done;
                return Ok(progressed);
            }
        }
        loop {
            if self.pend.is_empty() {
                if spec.verify && self.zc.as_ref().is_some_and(|z| !z.all_done()) {
                    // The kernel may still read the buffer being refilled.
                    if let Some(z) = &mut self.zc {
                        z.waiting = true;
                    }
                    return Ok(progressed);
                }
                let left = match spec.bytes {
                    Some(b) => b - self.scheduled,
                    None if deadline.is_some_and(|d| Instant::now() < d) => spec.msg_size,
                    None => 0,
                };
                if left == 0 {
                    self.sock
                        .shutdown(Shutdown::Write)
                        .with_context(|| format!("flow {}: shutdown", self.index))?;
                    self.shut = true;
                    self.tx_done = self.zc.as_ref().is_none_or(Zc::all_done);
                    if let Some(z) = &mut self.zc {
                        z.waiting = !self.tx_done;
                    }
                    return Ok(true);
                }
                let n = left.min(spec.msg_size) as usize;
                if spec.verify {
                    self.gen.fill(self.scheduled, &mut self.buf[..n]);
                    self.tx.update(&self.buf[..n]);
                } else {
                    self.tx.count(n as u64);
                }
                self.scheduled += n as u64;
                self.pend = 0..n;
            }
            let r = match &mut self.zc {
                None => self.sock.write(&self.buf[self.pend.clone()]),
                Some(z) => match send(
                    self.sock.as_raw_fd(),
                    &self.buf[self.pend.clone()],
                    MsgFlags::from_bits_retain(libc::MSG_ZEROCOPY) | MsgFlags::MSG_DONTWAIT,
                ) {
                    Ok(k) => {
                        z.counters.sends += 1;
                        Ok(k)
                    }
                    // Past the optmem limit (net.core.optmem_max): wait for
                    // completions to free it.
                    Err(Errno::ENOBUFS) => {
                        if !z.reap(&self.sock, self.index)? {
                            z.waiting = true;
                        }
                        Err(std::io::Error::from(ErrorKind::WouldBlock))
                    }
                    Err(e) => Err(std::io::Error::from(e)),
                },
            };
            match r {
                Ok(0) => bail!("flow {}: write returned 0", self.index),
                Ok(k) => {
                    self.pend.start += k;
                    self.msgs += 1;
                    progressed = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(progressed),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("flow {}: write after {} bytes", self.index, self.scheduled)
                    })
                }
            }
        }
    }

    /// Receiver: reads what is there (a bounded number of reads).
    fn recv_some(&mut self, verify: bool) -> Result<bool> {
        let mut progressed = false;
        for _ in 0..64 {
            match self.sock.read(&mut self.rbuf) {
                Ok(0) => {
                    self.rx_done = true;
                    return Ok(true);
                }
                Ok(k) => {
                    if verify {
                        self.rx.update(&self.rbuf[..k]);
                    } else {
                        self.rx.count(k as u64);
                    }
                    self.msgs += 1;
                    progressed = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("flow {}: read after {} bytes", self.index, self.rx.bytes())
                    })
                }
            }
        }
        Ok(progressed)
    }
}

struct PlainWorker {
    flows: Vec<PlainFlow>,
}

impl PlainWorker {
    fn run(
        &mut self,
        spec: &TestSpec,
        role: Role,
        t0: Instant,
        stall: Duration,
    ) -> Result<Instant> {
        let deadline = spec.duration.map(|d| t0 + Duration::from_secs_f64(d));
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).context("epoll_create")?;
        for (i, f) in self.flows.iter_mut().enumerate() {
            f.sock.set_nonblocking(true).context("O_NONBLOCK")?;
            f.ev = f.want();
            if !f.ev.is_empty() {
                epoll
                    .add(f.sock.as_fd(), EpollEvent::new(f.ev, i as u64))
                    .context("epoll_ctl")?;
            }
        }
        let mut events = vec![EpollEvent::empty(); self.flows.len().max(1)];
        let mut last = Instant::now();
        loop {
            let mut progressed = false;
            // Senders past their deadline finish without waiting for room.
            if deadline.is_some_and(|d| Instant::now() >= d) {
                for f in self
                    .flows
                    .iter_mut()
                    .filter(|f| !f.tx_done && f.pend.is_empty())
                {
                    progressed |= f.send_some(spec, deadline)?;
                }
            }
            if self.flows.iter().all(PlainFlow::done) {
                return Ok(Instant::now());
            }
            let n = epoll
                .wait(&mut events, EpollTimeout::from(200u16))
                .or_else(|e| {
                    if e == nix::errno::Errno::EINTR {
                        Ok(0)
                    } else {
                        Err(e)
                    }
                })
                .context("epoll_wait")?;
            for e in &events[..n] {
                let i = e.data();
                let f = &mut self.flows[i as usize];
                if !f.tx_done {
                    progressed |= f.send_some(spec, deadline)?;
                }
                if !f.rx_done {
                    progressed |= f.recv_some(spec.verify)?;
                }
                let want = f.want();
                if want != f.ev {
                    if want.is_empty() {
                        epoll.delete(f.sock.as_fd()).context("epoll_ctl DEL")?;
                    } else {
                        let mut ev = EpollEvent::new(want, i);
                        epoll
                            .modify(f.sock.as_fd(), &mut ev)
                            .context("epoll_ctl MOD")?;
                    }
                    f.ev = want;
                }
            }
            let now = Instant::now();
            if progressed {
                last = now;
            } else if now.duration_since(last) > stall {
                let state: Vec<String> = self
                    .flows
                    .iter()
                    .map(|f| {
                        format!(
                            "flow {}: sent {}{} received {}{}",
                            f.index,
                            f.tx.bytes(),
                            if f.tx_done { " (done)" } else { "" },
                            f.rx.bytes(),
                            if f.rx_done { " (done)" } else { "" }
                        )
                    })
                    .collect();
                bail!(
                    "no progress for {:.0} s ({}): {}",
                    stall.as_secs_f64(),
                    role.name(),
                    state.join("; ")
                );
            }
        }
    }
}

// ---------------------------------------------------------------- offload

/// The sending half of an offloaded flow: `depth` slots of the message size
/// in one region the NIC reads.
struct OffTx {
    region: Region,
    buf: Buffer,
    slot: usize,
    free: Vec<u32>,
    inflight: u32,
    gen: Gen,
    sum: StreamSum,
    /// Bytes posted (stream offset of the next send).
    scheduled: u64,
    acked: u64,
    /// Every send posted and completed (ACKed): the half is done. The
    /// socket is shut down for writing only after the flow is detached
    /// (see `OffWorker::finish`).
    finished: bool,
    msgs: u64,
}

/// Where an offloaded flow receives.
enum RxBuf {
    /// `nseg` segments of `seg` bytes, slot i at i * seg.
    Msg { seg: usize },
    /// A ring of `size` bytes.
    Stream { size: u64 },
}

/// Where delivered bytes go: the digest (bulk) or a carry buffer (latency).
struct RxSink {
    sum: StreamSum,
    verify: bool,
    /// Latency: delivered bytes not yet taken by `recv`.
    carry: Option<VecDeque<u8>>,
}

impl RxSink {
    fn deliver(&mut self, data: &[u8]) {
        if let Some(c) = &mut self.carry {
            c.extend(data);
        } else if self.verify {
            self.sum.update(data);
        } else {
            // Not touched: an offloaded receiver without --verify never
            // reads the payload.
            self.sum.count(data.len() as u64);
        }
    }
}

/// The receiving half of an offloaded flow.
struct OffRx {
    region: Region,
    buf: Buffer,
    kind: RxBuf,
    /// Bytes delivered in order so far.
    received: u64,
    /// Bidirectional runs: the stream's length, known in advance (the
    /// peer's FIN only comes after both ends are done, see
    /// `OffWorker::finish`); message mode posts exactly this much.
    expect: Option<u64>,
    /// Message mode: stream offset where the next posted segment starts.
    posted_end: u64,
    /// Stream mode: the ring is consumed up to here.
    consumed: u64,
    sink: RxSink,
    msgs: u64,
    copied_cqes: u64,
    /// End of the stream (the FLOW EOF event's stream_off, or a STREAM_DATA
    /// entry flagged EOF).
    eof_at: Option<u64>,
}

impl OffRx {
    fn at_eof(&self) -> bool {
        self.eof_at.is_some_and(|e| self.received >= e)
    }

    /// Everything this half waits for arrived.
    fn complete(&self) -> bool {
        self.at_eof() || self.expect.is_some_and(|e| self.received >= e)
    }

    /// Message mode: the receive segment of slot `slot` for the next part of
    /// the stream; None once the expected length is all posted.
    fn next_seg(&mut self, slot: u64) -> Option<Wr> {
        let RxBuf::Msg { seg } = self.kind else {
            return None;
        };
        let len = match self.expect {
            Some(e) => e.saturating_sub(self.posted_end).min(seg as u64) as usize,
            None => seg,
        };
        if len == 0 {
            return None;
        }
        self.posted_end += len as u64;
        Some(wr(
            zn::WR_RECV,
            slot,
            self.region.key(),
            slot * seg as u64,
            len,
        ))
    }
}

struct OffFlow {
    index: u32,
    /// The kernel's flow id.
    id: u32,
    /// The attached flow; None once detached. First of the fields that
    /// drop: an attached flow is detached before its regions and socket go
    /// (and so before its CQ, dropped later, is destroyed).
    flow: Option<Flow>,
    tx: Option<OffTx>,
    rx: Option<OffRx>,
    /// Work requests to post at the next flush.
    wrs: Vec<Wr>,
    /// Stream mode: consume up to here at the next flush.
    consume_to: Option<u64>,
    /// Reset or other flow event with an error.
    eof_without_rx: bool,
    /// The socket last: closed after the flow is detached.
    sock: TcpStream,
}

fn wr(opcode: u16, wr_id: u64, key: u64, offset: u64, len: usize) -> Wr {
    Wr {
        wr_id,
        key,
        offset,
        len: len as u32,
        opcode,
        flags: 0,
    }
}

impl Drop for OffFlow {
    fn drop(&mut self) {
        if let Some(flow) = self.flow.take() {
            // An error path: detach before the regions and the socket go.
            if let Err(e) = flow.detach() {
                eprintln!("zn-perf: flow {}: FLOW_DETACH: {e}", self.index);
            }
        }
    }
}

/// Opens `/dev/zeronic` for NIC `nic`, which must split received headers
/// from payloads and merge sends (`RX_SPLIT`, `TX_MERGE`).
pub fn open_device(nic: u32) -> Result<Arc<Device>> {
    let dev = Device::open(nic)
        .with_context(|| format!("opening NIC {nic} (is the zeronic module loaded?)"))?;
    let q = dev.query().with_context(|| format!("QUERY of NIC {nic}"))?;
    let need = zn::caps::RX_SPLIT | zn::caps::TX_MERGE;
    if q.caps & need != need {
        bail!("NIC {nic} lacks RX_SPLIT/TX_MERGE (caps {:#x})", q.caps);
    }
    Ok(dev)
}

/// Registers all of `buf` with `access` (`zn::ACCESS_*`).
fn register(dev: &Arc<Device>, buf: &Buffer, access: u32) -> Result<Region> {
    dev.register(buf, access)
        .with_context(|| format!("MR_REG of {} bytes (access {access:#x})", buf.len()))
}

/// A zeroed buffer of `len` bytes to register.
fn buffer(len: usize) -> Result<Buffer> {
    Buffer::new(len).with_context(|| format!("buffer of {len} bytes"))
}

/// Sleeps until `cq` may hold an entry or `timeout` passes: one sleep, so
/// any wake-up gives the caller's loop a turn (flushes, sends, its stall
/// and deadline checks); a signal ends the sleep as a timeout does.
///
/// Written here with the library's `arm`/`eventfd`/`clear_event` rather
/// than calling `Cq::wait_once` (the same steps): under one TCG vCPU the
/// library's call made the clean-stream case of `zc_perf.sh` run faster
/// and never close the receive window, which that case must see (its
/// `TcpExtTCPToZeroWindowAdv` floor); this form keeps zn.rs's behaviour.
fn sleep_on(cq: &Cq, timeout: Duration) -> Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    if !cq.arm() {
        return Ok(());
    }
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    let mut fds = [PollFd::new(cq.eventfd(), PollFlags::POLLIN)];
    match poll(
        &mut fds,
        PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
    ) {
        Ok(_) | Err(Errno::EINTR) => {}
        Err(e) => return Err(e).context("poll of the CQ's eventfd"),
    }
    cq.clear_event();
    Ok(())
}

impl OffFlow {
    /// Attaches `sock` and sets up its halves. Message-mode receivers post
    /// their segments at once, so nothing that arrives after the attach is
    /// copied.
    #[allow(clippy::too_many_arguments)]
    fn attach(
        dev: &Arc<Device>,
        cq: &Cq,
        opts: &SideOpts,
        spec: &TestSpec,
        index: u32,
        sock: TcpStream,
        send: bool,
        recv: bool,
    ) -> Result<Self> {
        let s = spec.msg_size as usize;
        let gen = Gen::new(spec.seed.wrapping_add(u64::from(index)));
        let tx = if send {
            let d = depth(opts.tx_depth, spec.msg_size);
            let buf = buffer(s * d as usize)?;
            if !spec.verify {
                // Filled once: the sender never touches the payload again.
                // SAFETY: nothing is posted yet.
                gen.fill(0, unsafe { buf.slice_mut(0, buf.len()) });
            }
            let region = register(dev, &buf, zn::ACCESS_READ)?;
            Some(OffTx {
                region,
                buf,
                slot: s,
                free: (0..d).rev().collect(),
                inflight: 0,
                gen,
                sum: tx_sum(spec, index)?,
                scheduled: 0,
                acked: 0,
                finished: false,
                msgs: 0,
            })
        } else {
            None
        };
        let carry = (spec.kind == Kind::Latency).then(VecDeque::new);
        let (rx, mode) = if recv {
            let (buf, kind) = match opts.rx {
                RxKind::Message => {
                    let d = depth(opts.rx_depth, spec.msg_size);
                    (buffer(s * d as usize)?, RxBuf::Msg { seg: s })
                }
                RxKind::Stream => (
                    buffer(opts.ring as usize)?,
                    RxBuf::Stream { size: opts.ring },
                ),
            };
            if opts.window_clamp && spec.kind == Kind::Bandwidth {
                // A quarter of the posted space, at most WINDOW_MAX. TCP's
                // window only bounds what is beyond the bytes TCP took in
                // order; placed bytes the application has not consumed (or
                // reposted) yet fill the posted space too. So the
                // application may lag by the rest before a byte finds
                // nothing posted.
                let clamp = (buf.len() / 4).clamp(64 << 10, WINDOW_MAX) as u32;
                clamp_window(sock.as_fd(), clamp).with_context(|| format!("flow {index}"))?;
            }
            let region = register(dev, &buf, zn::ACCESS_WRITE)?;
            let mode = match kind {
                RxBuf::Msg { .. } => zn::RxMode::Message,
                RxBuf::Stream { size } => zn::RxMode::Stream {
                    key: region.key(),
                    offset: 0,
                    size,
                },
            };
            let rx = OffRx {
                region,
                buf,
                kind,
                received: 0,
                expect: if spec.bidir { spec.bytes } else { None },
                posted_end: 0,
                consumed: 0,
                sink: RxSink {
                    sum: StreamSum::new(spec.verify_hash()),
                    verify: spec.verify,
                    carry,
                },
                msgs: 0,
                copied_cqes: 0,
                eof_at: None,
            };
            (Some(rx), mode)
        } else {
            (None, zn::RxMode::Message)
        };
        let flow = dev
            .attach(sock.as_fd(), cq, mode)
            .with_context(|| format!("flow {index}: FLOW_ATTACH ({mode:?})"))?;
        if flow.nic() != dev.nic() {
            bail!(
                "flow {index}: the socket runs on NIC {} but zn-perf registered memory on NIC {} (--nic)",
                flow.nic(),
                dev.nic()
            );
        }
        let mut f = Self {
            index,
            id: flow.id(),
            flow: Some(flow),
            tx,
            rx,
            wrs: Vec::new(),
            consume_to: None,
            eof_without_rx: false,
            sock,
        };
        if let Some(rx) = &mut f.rx {
            if let RxBuf::Msg { seg } = rx.kind {
                let n = rx.buf.len() / seg;
                for i in 0..n {
                    if let Some(w) = rx.next_seg(i as u64) {
                        f.wrs.push(w);
                    }
                }
            }
        }
        f.flush()?;
        Ok(f)
    }

    /// Bulk sender: posts sends into the free slots while the stream lasts;
    /// the half is finished once the last one completed.
    fn pump(&mut self, spec: &TestSpec, deadline: Option<Instant>) -> Result<()> {
        let Some(tx) = &mut self.tx else {
            return Ok(());
        };
        if tx.finished {
            return Ok(());
        }
        let now = Instant::now();
        let more = |scheduled: u64| match spec.bytes {
            Some(b) => scheduled < b,
            None => deadline.is_some_and(|d| now < d),
        };
        while more(tx.scheduled) {
            let Some(slot) = tx.free.pop() else {
                break;
            };
            let n = match spec.bytes {
                Some(b) => (b - tx.scheduled).min(spec.msg_size),
                None => spec.msg_size,
            } as usize;
            let off = slot as usize * tx.slot;
            if spec.verify {
                // SAFETY: the slot is free: its last send completed.
                let data = unsafe { tx.buf.slice_mut(off, n) };
                tx.gen.fill(tx.scheduled, data);
                tx.sum.update(data);
            } else {
                tx.sum.count(n as u64);
            }
            self.wrs.push(wr(
                zn::WR_SEND,
                u64::from(slot),
                tx.region.key(),
                off as u64,
                n,
            ));
            tx.scheduled += n as u64;
            tx.inflight += 1;
        }
        if !more(tx.scheduled) && tx.inflight == 0 && self.wrs.is_empty() {
            tx.finished = true;
        }
        Ok(())
    }

    /// Posts the queued work requests and consumes the ring. Requests the
    /// CQ has no entry for yet (EAGAIN) stay queued for the next flush,
    /// after completions were reaped.
    fn flush(&mut self) -> Result<()> {
        if !self.wrs.is_empty() {
            let n = self.attached()?.post(&self.wrs).with_context(|| {
                format!(
                    "flow {}: POST of {} requests (first: {:?})",
                    self.index,
                    self.wrs.len(),
                    self.wrs.first()
                )
            })?;
            self.wrs.drain(..n);
        }
        if let Some(to) = self.consume_to.take() {
            self.consume(to)?;
            if let Some(rx) = &mut self.rx {
                rx.consumed = rx.consumed.max(to);
            }
        }
        Ok(())
    }

    /// The attached flow (an error once detached).
    fn attached(&self) -> Result<&Flow> {
        self.flow
            .as_ref()
            .with_context(|| format!("flow {}: already detached", self.index))
    }

    /// `ZERONIC_IOC_STREAM_CONSUME`: ring bytes below `to` are free.
    fn consume(&self, to: u64) -> Result<()> {
        self.attached()?
            .consume(to)
            .with_context(|| format!("flow {}: STREAM_CONSUME to {to}", self.index))
    }

    /// Handles one completion of this flow.
    fn on_cqe(&mut self, c: &Cqe) -> Result<()> {
        let index = self.index;
        match c.opcode {
            zn::CQE_SEND => {
                let tx = self
                    .tx
                    .as_mut()
                    .context("SEND completion on a flow that sends nothing")?;
                ensure!(
                    c.status == 0,
                    "flow {index}: send of {} bytes (slot {}) completed with {}",
                    c.len,
                    c.wr_id,
                    errno_name(c.status)
                );
                tx.acked += u64::from(c.len);
                tx.inflight -= 1;
                tx.msgs += 1;
                tx.free.push(c.wr_id as u32);
            }
            zn::CQE_RECV => {
                let rx = self
                    .rx
                    .as_mut()
                    .context("RECV completion on a flow that receives nothing")?;
                let RxBuf::Msg { seg } = rx.kind else {
                    bail!("flow {index}: RECV completion in stream mode");
                };
                ensure!(
                    c.status == 0,
                    "flow {index}: receive segment {} completed with {} after {} bytes",
                    c.wr_id,
                    errno_name(c.status),
                    rx.received
                );
                if c.len > 0 {
                    ensure!(
                        c.stream_off == rx.received,
                        "flow {index}: receive completion at stream offset {}, expected {}",
                        c.stream_off,
                        rx.received
                    );
                }
                if c.flags & zn::CQE_F_COPIED != 0 {
                    rx.copied_cqes += 1;
                }
                let off = c.wr_id as usize * seg;
                // SAFETY: a completed segment: the NIC writes it no more
                // until it is posted again (at the next flush).
                let data = unsafe { rx.buf.slice(off, c.len as usize) };
                rx.sink.deliver(data);
                rx.received += u64::from(c.len);
                rx.msgs += 1;
                if c.flags & zn::CQE_F_EOF == 0 {
                    if let Some(w) = rx.next_seg(c.wr_id) {
                        self.wrs.push(w);
                    }
                }
            }
            zn::CQE_STREAM_DATA => {
                let rx = self
                    .rx
                    .as_mut()
                    .context("STREAM_DATA on a flow that receives nothing")?;
                let RxBuf::Stream { size } = rx.kind else {
                    bail!("flow {index}: STREAM_DATA in message mode");
                };
                ensure!(
                    c.status == 0,
                    "flow {index}: stream data with {}",
                    errno_name(c.status)
                );
                ensure!(
                    c.stream_off == rx.received,
                    "flow {index}: stream data at offset {}, expected {}",
                    c.stream_off,
                    rx.received
                );
                if c.flags & zn::CQE_F_COPIED != 0 {
                    rx.copied_cqes += 1;
                }
                let mut pos = c.stream_off;
                let end = c.stream_off + u64::from(c.len);
                while pos < end {
                    let at = pos % size;
                    let n = (end - pos).min(size - at).min(CONSUME_STEP);
                    // SAFETY: reported and not consumed: the NIC does not
                    // write these ring bytes until they are consumed below.
                    let data = unsafe { rx.buf.slice(at as usize, n as usize) };
                    rx.sink.deliver(data);
                    pos += n;
                    // One entry may report most of the ring (the driver
                    // coalesces reports): give space back as it is used, so
                    // that the NIC never finds the ring full while this end
                    // works through a large report.
                    if pos < end {
                        // (`self.attached()` would borrow all of `self`, `rx` with it.)
                        let flow = (self.flow.as_ref())
                            .with_context(|| format!("flow {index}: already detached"))?;
                        flow.consume(pos)
                            .with_context(|| format!("flow {index}: STREAM_CONSUME to {pos}"))?;
                        rx.consumed = rx.consumed.max(pos);
                    }
                }
                rx.received = end;
                if c.len > 0 {
                    rx.msgs += 1;
                }
                if c.flags & zn::CQE_F_EOF != 0 {
                    rx.eof_at = Some(end);
                }
                // Only new bytes are consumed (an empty entry flagged EOF
                // has nothing to give back).
                if end > rx.consumed {
                    self.consume_to = Some(end);
                }
            }
            zn::CQE_FLOW => {
                ensure!(
                    c.status == 0,
                    "flow {index}: the connection failed: {} (flags {:#x}, stream offset {})",
                    errno_name(c.status),
                    c.flags,
                    c.stream_off
                );
                if c.flags & zn::CQE_F_EOF != 0 {
                    match &mut self.rx {
                        Some(rx) => {
                            rx.eof_at = Some(c.stream_off);
                            if rx.received < c.stream_off && self.consume_to.is_none() {
                                if let RxBuf::Stream { .. } = rx.kind {
                                    // Stream data not reported for want of a
                                    // CQ entry: a consume reports it.
                                    self.consume_to = Some(rx.received);
                                }
                            }
                        }
                        None => self.eof_without_rx = true,
                    }
                }
                ensure!(
                    c.flags & zn::CQE_F_DETACHED == 0,
                    "flow {index}: detached while running"
                );
            }
            op => bail!("flow {index}: unknown completion opcode {op}"),
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.tx.as_ref().is_none_or(|t| t.finished) && self.rx.as_ref().is_none_or(OffRx::complete)
    }

    /// The kernel's counters of the flow.
    fn counters(&self) -> Result<Counters> {
        let q = self
            .attached()?
            .query()
            .with_context(|| format!("FLOW_QUERY of flow {}", self.id))?;
        Ok(Counters {
            state: zn::flow_state_name(q.state).into(),
            rx_placed_bytes: q.rx_placed_bytes,
            rx_copied_bytes: q.rx_copied_bytes,
            tx_merged_bytes: q.tx_merged_bytes,
            tx_copied_bytes: q.tx_copied_bytes,
            rx_stream_off: q.rx_stream_off,
            tx_stream_off: q.tx_stream_off,
            rx_posted: q.rx_posted,
            tx_posted: q.tx_posted,
        })
    }

    fn describe(&self) -> String {
        let mut s = format!(
            "flow {}: sent {} (acked {}, in flight {}) received {}{}",
            self.index,
            self.tx.as_ref().map_or(0, |t| t.scheduled),
            self.tx.as_ref().map_or(0, |t| t.acked),
            self.tx.as_ref().map_or(0, |t| t.inflight),
            self.rx.as_ref().map_or(0, |r| r.received),
            match self.rx.as_ref().and_then(|r| r.eof_at) {
                Some(e) => format!(" (EOF at {e})"),
                None => String::new(),
            }
        );
        match self.counters() {
            Ok(c) => s += &format!(
                "; kernel: state {} rx_stream_off {} placed {} copied {} merged {} txcopied {} tx_stream_off {} rx_posted {} tx_posted {}",
                c.state, c.rx_stream_off, c.rx_placed_bytes, c.rx_copied_bytes, c.tx_merged_bytes,
                c.tx_copied_bytes, c.tx_stream_off, c.rx_posted, c.tx_posted
            ),
            Err(e) => s += &format!("; FLOW_QUERY: {e:#}"),
        }
        s
    }

    /// `ZERONIC_IOC_FLOW_DETACH`, once.
    fn detach(&mut self) -> Result<()> {
        if let Some(flow) = self.flow.take() {
            flow.detach()
                .with_context(|| format!("flow {}: FLOW_DETACH of flow {}", self.index, self.id))?;
        }
        Ok(())
    }

    /// The flow's report, with its counters read before the detach.
    fn report(&self, counters: Counters) -> FlowReport {
        let (tx_bytes, tx_digest) = self
            .tx
            .as_ref()
            .map_or((0, None), |t| (t.sum.bytes(), t.sum.hex()));
        let (rx_bytes, rx_digest, copied) = self.rx.as_ref().map_or((0, None, 0), |r| {
            (r.sink.sum.bytes(), r.sink.sum.hex(), r.copied_cqes)
        });
        FlowReport {
            index: self.index,
            tx_bytes,
            tx_digest,
            rx_bytes,
            rx_digest,
            counters: Some(counters),
            copied_completions: copied,
            zerocopy: None,
        }
    }

    fn msgs(&self) -> u64 {
        self.tx.as_ref().map_or(0, |t| t.msgs) + self.rx.as_ref().map_or(0, |r| r.msgs)
    }
}

/// The end of offloaded flows whose work is done, in the order that keeps
/// TCP quiet: read the counters, FLOW_DETACH every flow, reap the CQ until
/// each flow's `DETACHED` event (an error event there, a reset, fails the
/// run), and only then shut the sockets down for writing. A socket is
/// never shut down while attached: otherwise the peer's FIN could complete
/// the close (TCP_CLOSE) while the flow is attached, which the driver
/// reports as a failed connection (ECONNRESET). Nothing is left unread (a
/// flow ends at EOF or after its known length), so closing the sockets
/// afterwards sends FINs, not resets. The caller drops the flows (regions,
/// sockets) and then the CQ.
fn finish_flows(flows: &mut [&mut OffFlow], cq: &Cq, timeout: Duration) -> Result<Vec<Counters>> {
    let mut counters = Vec::new();
    for f in flows.iter_mut() {
        counters.push(f.counters().with_context(|| format!("flow {}", f.index))?);
        f.detach()?;
    }
    let mut left: HashMap<u32, u32> = flows.iter().map(|f| (f.id, f.index)).collect();
    let until = Instant::now() + timeout;
    while !left.is_empty() {
        while let Some(c) = cq.pop() {
            let index = left.get(&c.flow).copied().unwrap_or(u32::MAX);
            match c.opcode {
                zn::CQE_FLOW => {
                    ensure!(
                        c.status == 0,
                        "flow {index}: the connection failed at the end: {} (flags {:#x}, stream offset {})",
                        errno_name(c.status),
                        c.flags,
                        c.stream_off
                    );
                    if c.flags & zn::CQE_F_DETACHED != 0 {
                        left.remove(&c.flow);
                    }
                }
                zn::CQE_SEND => ensure!(
                    c.status == 0,
                    "flow {index}: a send completed with {} after the detach",
                    errno_name(c.status)
                ),
                // Receive segments reposted before the EOF came back
                // (ECANCELED, empty), stream notifications: nothing to do.
                _ => {}
            }
        }
        if left.is_empty() {
            break;
        }
        let now = Instant::now();
        if now >= until {
            let mut v: Vec<u32> = left.values().copied().collect();
            v.sort_unstable();
            bail!(
                "no DETACHED event within {:.0} s for flows {v:?}",
                timeout.as_secs_f64()
            );
        }
        sleep_on(cq, until - now)?;
    }
    for f in flows.iter() {
        if f.tx.is_some() {
            f.sock
                .shutdown(Shutdown::Write)
                .with_context(|| format!("flow {}: shutdown after the detach", f.index))?;
        }
    }
    Ok(counters)
}

fn errno_name(status: u16) -> String {
    let e = nix::errno::Errno::from_raw(i32::from(status));
    format!("{e} ({status})")
}

/// The sum of flow `index`'s sent stream: its digest given beforehand
/// (`TestSpec::sent_digests`, bandwidth with a byte count and --verify), so
/// the sender hashes nothing, or else hashed as it is generated (with
/// --verify) or only counted.
fn tx_sum(spec: &TestSpec, index: u32) -> Result<StreamSum> {
    match (&spec.sent_digests, spec.bytes) {
        (Some(d), Some(n)) if spec.verify && spec.kind == Kind::Bandwidth => {
            let h = d
                .get(index as usize)
                .with_context(|| format!("flow {index}: no given digest ({} given)", d.len()))?;
            ensure!(
                spec.hash.is_digest(h),
                "flow {index}: given digest {h:?} is no {} ({} hex digits)",
                spec.hash.name(),
                spec.hash.hex_len()
            );
            Ok(StreamSum::given(h.to_ascii_lowercase(), n))
        }
        (Some(_), _) => bail!("given digests need a bandwidth test with --verify and -n"),
        (None, _) => Ok(StreamSum::new(spec.verify_hash())),
    }
}

/// Stream notifications a CQ has room for per flow, beyond its requests.
const STREAM_NOTES: u32 = 64;

/// CQ entries for `flows` flows: every posted request and flow event has a
/// reserved entry, stream notifications take free ones; twice that. (A
/// post that finds no free entry, EAGAIN, is retried after reaping.)
fn cq_entries(opts: &SideOpts, spec: &TestSpec, flows: usize) -> u32 {
    let rx = match opts.rx {
        RxKind::Message => depth(opts.rx_depth, spec.msg_size),
        RxKind::Stream => STREAM_NOTES,
    };
    let per = depth(opts.tx_depth, spec.msg_size) + rx + 2;
    (2 * per as usize * flows + 16).min(zn::CQ_MAX_ENTRIES as usize) as u32
}

/// One event loop's offloaded flows and their CQ.
struct OffWorker {
    /// Flows before the CQ: they are detached before it is destroyed.
    flows: Vec<OffFlow>,
    by_id: HashMap<u32, usize>,
    cq: Cq,
}

impl OffWorker {
    fn stall_error(&self, stall: Duration) -> anyhow::Error {
        let (head, tail) = self.cq.indices();
        let flows: Vec<String> = self.flows.iter().map(OffFlow::describe).collect();
        anyhow::anyhow!(
            "no completion for {:.0} s (CQ head {head} tail {tail}): {}",
            stall.as_secs_f64(),
            flows.join("; ")
        )
    }

    fn run(&mut self, spec: &TestSpec, t0: Instant, stall: Duration) -> Result<Instant> {
        let deadline = spec.duration.map(|d| t0 + Duration::from_secs_f64(d));
        let mut last = Instant::now();
        loop {
            for f in &mut self.flows {
                // Receive space goes back first: refilling send slots (and,
                // with --verify, generating and hashing them) takes time
                // during which the NIC keeps placing.
                f.flush()?;
                f.pump(spec, deadline)?;
                f.flush()?;
            }
            let mut n = 0;
            while let Some(c) = self.cq.pop() {
                n += 1;
                let i = *self
                    .by_id
                    .get(&c.flow)
                    .with_context(|| format!("completion for unknown flow {}: {c:?}", c.flow))?;
                self.flows[i].on_cqe(&c)?;
            }
            let now = Instant::now();
            // Checked whether or not completions came: entries that keep
            // coming must not keep a finished run going.
            if self.flows.iter().all(OffFlow::done) {
                return Ok(now);
            }
            if n > 0 {
                last = now;
                continue;
            }
            if now.duration_since(last) > stall {
                return Err(self.stall_error(stall));
            }
            let mut t = Duration::from_millis(200);
            if let Some(d) = deadline {
                if d > now {
                    t = t.min(d - now + Duration::from_millis(1));
                }
            }
            sleep_on(&self.cq, t)?;
        }
    }

    fn finish(mut self, stall: Duration) -> Result<(Vec<FlowReport>, u64)> {
        let msgs = self.flows.iter().map(OffFlow::msgs).sum();
        let mut refs: Vec<&mut OffFlow> = self.flows.iter_mut().collect();
        let counters = finish_flows(&mut refs, &self.cq, stall)?;
        let out = self
            .flows
            .iter()
            .zip(counters)
            .map(|(f, c)| f.report(c))
            .collect();
        // Dropped in field order: the flows (regions, sockets), then the CQ.
        Ok((out, msgs))
    }
}

// ---------------------------------------------------------------- latency

/// One connection of a ping-pong, either kind.
enum Conn {
    Plain(TcpStream),
    Off {
        flow: Box<OffFlow>,
        cq: Cq,
        stall: Duration,
    },
}

impl Conn {
    /// Offload: handles completions, waiting for at least one.
    fn step(flow: &mut OffFlow, cq: &Cq, stall: Duration) -> Result<()> {
        flow.flush()?;
        let until = Instant::now() + stall;
        loop {
            let mut n = 0;
            while let Some(c) = cq.pop() {
                ensure!(c.flow == flow.id, "completion of unknown flow {}", c.flow);
                flow.on_cqe(&c)?;
                n += 1;
            }
            if n > 0 {
                return flow.flush();
            }
            let now = Instant::now();
            if now >= until {
                bail!(
                    "no completion for {:.0} s: {}",
                    stall.as_secs_f64(),
                    flow.describe()
                );
            }
            sleep_on(cq, until - now)?;
        }
    }

    fn send(&mut self, data: &[u8]) -> Result<()> {
        match self {
            Conn::Plain(s) => s.write_all(data).context("write"),
            Conn::Off { flow, cq, stall } => {
                while flow.tx.as_ref().context("no send half")?.free.is_empty() {
                    Self::step(flow, cq, *stall)?;
                }
                let tx = flow.tx.as_mut().context("no send half")?;
                let slot = tx.free.pop().context("no free slot")?;
                let off = slot as usize * tx.slot;
                // SAFETY: the slot is free: its last send completed.
                unsafe { tx.buf.slice_mut(off, data.len()) }.copy_from_slice(data);
                tx.inflight += 1;
                tx.scheduled += data.len() as u64;
                let w = wr(
                    zn::WR_SEND,
                    u64::from(slot),
                    tx.region.key(),
                    off as u64,
                    data.len(),
                );
                flow.wrs.push(w);
                flow.flush()
            }
        }
    }

    /// Fills `out`; false on a clean EOF before its first byte.
    fn recv(&mut self, out: &mut [u8]) -> Result<bool> {
        match self {
            Conn::Plain(s) => {
                let mut got = 0;
                while got < out.len() {
                    match s.read(&mut out[got..]) {
                        Ok(0) if got == 0 => return Ok(false),
                        Ok(0) => bail!("EOF inside a message ({got} of {} bytes)", out.len()),
                        Ok(k) => got += k,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Err(e).context("read"),
                    }
                }
                Ok(true)
            }
            Conn::Off { flow, cq, stall } => loop {
                let rx = flow.rx.as_mut().context("no receive half")?;
                let eof = rx.at_eof();
                let carry = rx.sink.carry.as_mut().context("no carry")?;
                if carry.len() >= out.len() {
                    let n = out.len();
                    for (o, b) in out.iter_mut().zip(carry.drain(..n)) {
                        *o = b;
                    }
                    return Ok(true);
                }
                if eof {
                    ensure!(
                        carry.is_empty(),
                        "EOF inside a message ({} of {} bytes)",
                        carry.len(),
                        out.len()
                    );
                    return Ok(false);
                }
                Self::step(flow, cq, *stall)?;
            },
        }
    }

    /// Ends the connection's data path once this end is done: a plain end
    /// shuts its socket down for writing; an offloaded one waits for its
    /// sends in flight, reads the counters, detaches (see `finish_flows`)
    /// and then shuts down. The pinging end then waits for the echo's FIN,
    /// so that both finish cleanly: a plain one reads it (no byte may
    /// come), an offloaded (detached) one polls for it.
    fn finish(self, ping: bool) -> Result<(Option<Counters>, u64)> {
        match self {
            Conn::Plain(mut s) => {
                s.shutdown(Shutdown::Write).context("shutdown")?;
                if ping {
                    let mut b = [0u8; 1];
                    loop {
                        match s.read(&mut b) {
                            Ok(0) => break,
                            Ok(_) => bail!("data after the last echo"),
                            Err(e) if e.kind() == ErrorKind::Interrupted => {}
                            Err(e) => return Err(e).context("read of the echo's FIN"),
                        }
                    }
                }
                Ok((None, 0))
            }
            Conn::Off {
                mut flow,
                cq,
                stall,
            } => {
                while flow.tx.as_ref().is_some_and(|t| t.inflight > 0) {
                    Self::step(&mut flow, &cq, stall)?;
                }
                let copied = flow.rx.as_ref().map_or(0, |r| r.copied_cqes);
                let counters = finish_flows(&mut [&mut *flow], &cq, stall)?
                    .pop()
                    .context("no counters")?;
                if ping {
                    wait_fin(&flow.sock, stall)?;
                }
                drop(flow);
                drop(cq);
                Ok((Some(counters), copied))
            }
        }
    }
}

/// Waits until the peer's FIN arrived on a detached socket, which cannot be
/// read: poll() says readable (POLLIN: the FIN, as nothing else may come).
fn wait_fin(sock: &TcpStream, timeout: Duration) -> Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let until = Instant::now() + timeout;
    loop {
        let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
        let now = Instant::now();
        ensure!(
            now < until,
            "the peer's FIN did not come within {:.0} s",
            timeout.as_secs_f64()
        );
        let ms = (until - now).as_millis().min(1000) as u16;
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e).context("poll for the peer's FIN"),
        }
        // (revents() is None for bits nix does not know.)
        let r = fds[0].revents().unwrap_or(PollFlags::POLLIN);
        ensure!(
            !r.intersects(PollFlags::POLLERR),
            "the connection failed while waiting for the peer's FIN ({r:?})"
        );
        if r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP) {
            return Ok(());
        }
    }
}

// ---------------------------------------------------------------- an end

enum Work {
    Plain(Vec<PlainWorker>),
    Off(Vec<OffWorker>),
    Lat(Conn),
}

/// An end ready to run: connections attached, receives posted.
pub struct Prepared {
    opts: SideOpts,
    spec: TestSpec,
    role: Role,
    work: Work,
    congestion: Option<String>,
}

/// Sets up this end's flows over the connected sockets (flow i is
/// `socks[i]`): attach and post receives for offload, attach by
/// `TCP_ULP` for served (before anything else touches the sockets: no
/// payload moves before the start signal).
pub fn prepare(
    opts: &SideOpts,
    spec: &TestSpec,
    role: Role,
    socks: Vec<TcpStream>,
) -> Result<Prepared> {
    ensure!(!socks.is_empty(), "no connections");
    ensure!(spec.msg_size > 0, "message size 0");
    if opts.mode == Mode::Served {
        for (i, s) in socks.iter().enumerate() {
            attach_served(s, i)?;
        }
    }
    let latency = spec.kind == Kind::Latency;
    if latency {
        ensure!(socks.len() == 1, "latency runs over one connection");
        for s in &socks {
            s.set_nodelay(true).context("TCP_NODELAY")?;
        }
    }
    if let Some(algo) = &opts.congestion {
        for s in &socks {
            set_congestion(s, algo)?;
        }
    }
    let congestion = congestion_of(&socks[0]);
    if opts.zerocopy {
        ensure!(
            opts.mode.is_socket_io(),
            "--zerocopy is for the plain and served paths (an offloaded sender never copies)"
        );
        ensure!(!latency, "--zerocopy is for bandwidth tests");
        for s in &socks {
            set_so_zerocopy(s)?;
        }
    }
    let threads = (opts.threads.max(1) as usize).min(socks.len());
    let work = match opts.mode {
        // Served: the plain path itself, on the attached sockets.
        Mode::Plain | Mode::Served if latency => {
            Work::Lat(Conn::Plain(socks.into_iter().next().context("no socket")?))
        }
        Mode::Plain | Mode::Served => {
            let mut workers: Vec<PlainWorker> = (0..threads)
                .map(|_| PlainWorker { flows: Vec::new() })
                .collect();
            for (i, sock) in socks.into_iter().enumerate() {
                workers[i % threads].flows.push(PlainFlow {
                    index: i as u32,
                    sock,
                    buf: {
                        let n = if matches!(role, Role::Send | Role::Both) {
                            spec.msg_size as usize
                        } else {
                            0
                        };
                        let mut b = vec![0u8; n];
                        if !spec.verify {
                            Gen::new(spec.seed.wrapping_add(i as u64)).fill(0, &mut b);
                        }
                        b
                    },
                    rbuf: if matches!(role, Role::Recv | Role::Both) {
                        vec![0u8; (spec.msg_size as usize).max(64 << 10)]
                    } else {
                        Vec::new()
                    },
                    pend: 0..0,
                    gen: Gen::new(spec.seed.wrapping_add(i as u64)),
                    scheduled: 0,
                    tx: tx_sum(spec, i as u32)?,
                    rx: StreamSum::new(spec.verify_hash()),
                    msgs: 0,
                    tx_done: !matches!(role, Role::Send | Role::Both),
                    rx_done: !matches!(role, Role::Recv | Role::Both),
                    ev: EpollFlags::empty(),
                    zc: (opts.zerocopy && matches!(role, Role::Send | Role::Both))
                        .then(Zc::default),
                    shut: false,
                });
            }
            Work::Plain(workers)
        }
        Mode::Offload => {
            ensure!(
                opts.ring.is_power_of_two() && opts.ring >= 4096,
                "--ring must be a power of two of at least 4096"
            );
            let dev = open_device(opts.nic)?;
            let send = matches!(role, Role::Send | Role::Ping | Role::Echo | Role::Both);
            let recv = matches!(role, Role::Recv | Role::Ping | Role::Echo | Role::Both);
            if latency {
                let cq = dev.create_cq(cq_entries(opts, spec, 1))?;
                let sock = socks.into_iter().next().context("no socket")?;
                let flow = OffFlow::attach(&dev, &cq, opts, spec, 0, sock, send, recv)?;
                Work::Lat(Conn::Off {
                    flow: Box::new(flow),
                    cq,
                    stall: opts.stall,
                })
            } else {
                let mut per: Vec<Vec<(u32, TcpStream)>> =
                    (0..threads).map(|_| Vec::new()).collect();
                for (i, s) in socks.into_iter().enumerate() {
                    per[i % threads].push((i as u32, s));
                }
                let mut workers = Vec::new();
                for group in per {
                    let cq = dev.create_cq(cq_entries(opts, spec, group.len()))?;
                    let mut flows = Vec::new();
                    let mut by_id = HashMap::new();
                    for (i, sock) in group {
                        let f = OffFlow::attach(&dev, &cq, opts, spec, i, sock, send, recv)?;
                        by_id.insert(f.id, flows.len());
                        flows.push(f);
                    }
                    workers.push(OffWorker { flows, by_id, cq });
                }
                Work::Off(workers)
            }
        }
    };
    Ok(Prepared {
        opts: opts.clone(),
        spec: spec.clone(),
        role,
        work,
        congestion,
    })
}

impl Prepared {
    /// Runs the test from now (the start signal) and reports this end.
    pub fn run(self) -> Result<SideResult> {
        let Prepared {
            opts,
            spec,
            role,
            work,
            congestion,
        } = self;
        let start = Sample::now()?;
        let t0 = Instant::now();
        let (flows, msgs, end, latency) = match work {
            Work::Plain(workers) => {
                let outs = run_threads(workers, |mut w: PlainWorker| {
                    let end = w.run(&spec, role, t0, opts.stall)?;
                    let msgs = w.flows.iter().map(|f| f.msgs).sum();
                    Ok((w.flows.iter().map(PlainFlow::report).collect(), msgs, end))
                })?;
                merge(outs)
            }
            Work::Off(workers) => {
                let outs = run_threads(workers, |mut w: OffWorker| {
                    let end = w.run(&spec, t0, opts.stall)?;
                    let (flows, msgs) = w.finish(opts.stall)?;
                    Ok((flows, msgs, end))
                })?;
                merge(outs)
            }
            Work::Lat(conn) => {
                let (report, msgs, end, lat) = run_latency(conn, &spec, role)?;
                (vec![report], msgs, end, lat)
            }
        };
        let stop = Sample::now()?;
        let seconds = end.duration_since(t0).as_secs_f64();
        let bytes: u64 = match role {
            Role::Send => flows.iter().map(|f| f.tx_bytes).sum(),
            Role::Recv => flows.iter().map(|f| f.rx_bytes).sum(),
            Role::Ping | Role::Echo | Role::Both => {
                flows.iter().map(|f| f.tx_bytes + f.rx_bytes).sum()
            }
        };
        let transactions = latency.as_ref().map_or(0, |l| l.iterations + l.warmup);
        Ok(SideResult {
            host: opts.host.into(),
            role,
            mode: opts.mode,
            rx_mode: (opts.mode == Mode::Offload && role != Role::Send).then_some(opts.rx),
            bytes,
            messages: msgs,
            seconds,
            bits_per_second: if seconds > 0.0 {
                bytes as f64 * 8.0 / seconds
            } else {
                0.0
            },
            cpu: start.report(&stop, bytes, transactions),
            flows,
            latency,
            zerocopy: opts.zerocopy && matches!(role, Role::Send | Role::Both),
            congestion,
        })
    }
}

type WorkerOut = (Vec<FlowReport>, u64, Instant);

fn run_threads<W: Send>(
    workers: Vec<W>,
    f: impl Fn(W) -> Result<WorkerOut> + Sync,
) -> Result<Vec<WorkerOut>> {
    if workers.len() == 1 {
        let w = workers.into_iter().next().context("no worker")?;
        return Ok(vec![f(w)?]);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = workers
            .into_iter()
            .map(|w| {
                let f = &f;
                s.spawn(move || f(w))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a worker thread panicked"))?
            })
            .collect()
    })
}

fn merge(outs: Vec<WorkerOut>) -> (Vec<FlowReport>, u64, Instant, Option<LatencyReport>) {
    let end = outs.iter().map(|o| o.2).max().unwrap_or_else(Instant::now);
    let msgs = outs.iter().map(|o| o.1).sum();
    let mut flows: Vec<FlowReport> = outs.into_iter().flat_map(|o| o.0).collect();
    flows.sort_by_key(|f| f.index);
    (flows, msgs, end, None)
}

fn run_latency(
    mut conn: Conn,
    spec: &TestSpec,
    role: Role,
) -> Result<(FlowReport, u64, Instant, Option<LatencyReport>)> {
    let s = spec.msg_size as usize;
    let gen = Gen::new(spec.seed);
    let mut tx = StreamSum::new(spec.verify_hash());
    let mut rx = StreamSum::new(spec.verify_hash());
    let mut msg = vec![0u8; s];
    let mut back = vec![0u8; s];
    let mut msgs = 0u64;
    let lat = if role == Role::Ping {
        if !spec.verify {
            gen.fill(0, &mut msg);
        }
        let total = spec.warmup + spec.iters;
        let mut samples = Vec::with_capacity(spec.iters as usize);
        for i in 0..total {
            if spec.verify {
                gen.fill(i * s as u64, &mut msg);
                tx.update(&msg);
            } else {
                tx.count(s as u64);
            }
            let t = Instant::now();
            conn.send(&msg)
                .with_context(|| format!("round trip {i}: send"))?;
            if !conn
                .recv(&mut back)
                .with_context(|| format!("round trip {i}: receive"))?
            {
                bail!("round trip {i}: the peer closed the connection");
            }
            let dt = t.elapsed();
            if spec.verify {
                rx.update(&back);
                if let Some(p) = msg.iter().zip(&back).position(|(a, b)| a != b) {
                    bail!("round trip {i}: the echo differs from the message at byte {p}");
                }
            } else {
                rx.count(s as u64);
            }
            if i >= spec.warmup {
                samples.push(dt.as_secs_f64() * 1e6);
            }
            msgs += 1;
        }
        Some(LatencyReport {
            iterations: spec.iters,
            warmup: spec.warmup,
            rtt_us: Percentiles::of(&mut samples),
        })
    } else {
        while conn
            .recv(&mut msg)
            .with_context(|| format!("message {msgs}: receive"))?
        {
            if spec.verify {
                rx.update(&msg);
                tx.update(&msg);
            } else {
                rx.count(s as u64);
                tx.count(s as u64);
            }
            conn.send(&msg)
                .with_context(|| format!("message {msgs}: echo"))?;
            msgs += 1;
        }
        None
    };
    let end = Instant::now();
    let (counters, copied) = conn.finish(role == Role::Ping)?;
    Ok((
        FlowReport {
            index: 0,
            tx_bytes: tx.bytes(),
            rx_bytes: rx.bytes(),
            tx_digest: tx.hex(),
            rx_digest: rx.hex(),
            counters,
            copied_completions: copied,
            zerocopy: None,
        },
        msgs,
        end,
        lat,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Kind;
    use std::net::TcpListener;

    fn spec(kind: Kind, verify: bool) -> TestSpec {
        TestSpec {
            kind,
            msg_size: 1000,
            flows: 3,
            bytes: Some(123_457),
            duration: None,
            verify,
            hash: crate::stream::Hash::Xxh64,
            seed: 5,
            reverse: false,
            iters: 50,
            warmup: 5,
            bidir: false,
            sent_digests: None,
        }
    }

    fn opts(host: &'static str) -> SideOpts {
        SideOpts {
            host,
            mode: Mode::Plain,
            rx: RxKind::Stream,
            ring: 1 << 20,
            tx_depth: None,
            rx_depth: None,
            threads: 2,
            nic: 0,
            stall: Duration::from_secs(10),
            window_clamp: true,
            zerocopy: false,
            congestion: None,
        }
    }

    fn pairs(n: usize) -> (Vec<TcpStream>, Vec<TcpStream>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let mut c = Vec::new();
        let mut s = Vec::new();
        for _ in 0..n {
            c.push(TcpStream::connect(a).unwrap());
            s.push(l.accept().unwrap().0);
        }
        (c, s)
    }

    #[test]
    fn roles() {
        let mut s = spec(Kind::Bandwidth, false);
        assert_eq!(role_of(&s, true), Role::Send);
        assert_eq!(role_of(&s, false), Role::Recv);
        s.reverse = true;
        assert_eq!(role_of(&s, true), Role::Recv);
        assert_eq!(role_of(&s, false), Role::Send);
        s.kind = Kind::Latency;
        assert_eq!(role_of(&s, true), Role::Ping);
        assert_eq!(role_of(&s, false), Role::Echo);
    }

    #[test]
    fn depth_defaults() {
        assert_eq!(depth(None, 64 << 10), 64);
        assert_eq!(depth(None, 1), 256);
        assert_eq!(depth(None, 8 << 20), 2);
        assert_eq!(depth(Some(7), 1), 7);
    }

    /// Runs `sp` over `n` loopback connections: a receiving server thread
    /// and a sending client with options `client`; both sides' results.
    fn run_pair(sp: &TestSpec, client: &SideOpts, n: usize) -> (SideResult, SideResult) {
        let (c, s) = pairs(n);
        let recv = std::thread::spawn({
            let sp = sp.clone();
            move || {
                prepare(&opts("server"), &sp, Role::Recv, s)
                    .unwrap()
                    .run()
                    .unwrap()
            }
        });
        let sent = prepare(client, sp, Role::Send, c).unwrap().run().unwrap();
        (sent, recv.join().unwrap())
    }

    /// Plain bulk over loopback, several flows on two threads: byte counts
    /// and digests agree end to end (the digest plumbing, without a NIC).
    #[test]
    fn plain_bulk_digests_agree() {
        let sp = spec(Kind::Bandwidth, true);
        let (sent, got) = run_pair(&sp, &opts("client"), 3);
        assert_eq!(sent.bytes, 3 * 123_457);
        assert_eq!(got.bytes, 3 * 123_457);
        crate::report::digests_match(&sent, &got).unwrap();
        // Each flow has its own stream.
        assert_ne!(sent.flows[0].tx_digest, sent.flows[1].tx_digest);
        // The digest is the generator's stream.
        let mut all = vec![0u8; 123_457];
        Gen::new(6).fill(0, &mut all);
        let mut sum = StreamSum::new(Some(crate::stream::Hash::Xxh64));
        sum.update(&all);
        assert_eq!(sent.flows[1].tx_digest, sum.hex());
    }

    /// Senders given their streams' digests (`sent_digests`) hash nothing
    /// and report them; the receiver's own digests agree. A wrong given
    /// digest is a mismatch, not a pass: the receiver still hashes.
    #[test]
    fn given_digests_agree_and_a_wrong_one_is_caught() {
        let mut sp = spec(Kind::Bandwidth, true);
        sp.sent_digests = Some(
            (0..3)
                .map(|i| crate::stream::digests(5 + i, &[123_457], sp.hash)[0].clone())
                .collect(),
        );
        let run = |sp: &TestSpec| run_pair(sp, &opts("client"), 3);
        let (sent, got) = run(&sp);
        assert_eq!(got.bytes, 3 * 123_457);
        assert_eq!(
            sent.flows[2].tx_digest.as_ref(),
            Some(&sp.sent_digests.as_ref().unwrap()[2])
        );
        crate::report::digests_match(&sent, &got).unwrap();
        // Flow 1 given flow 0's digest: the receiver's hash of what flow 1
        // really carried differs.
        let mut wrong = sp.clone();
        wrong.sent_digests.as_mut().unwrap()[1] = sp.sent_digests.as_ref().unwrap()[0].clone();
        let (sent, got) = run(&wrong);
        assert!(crate::report::digests_match(&sent, &got)
            .unwrap_err()
            .contains("flow 1 ->"));
        // Fewer digests than flows, or no byte count: refused.
        let mut short = sp.clone();
        short.sent_digests.as_mut().unwrap().pop();
        assert!(tx_sum(&short, 2).is_err());
        let mut timed = sp.clone();
        timed.bytes = None;
        timed.duration = Some(1.0);
        assert!(tx_sum(&timed, 0).is_err());
    }

    /// MSG_ZEROCOPY sends (--zerocopy) with --verify: the buffer is only
    /// refilled once the kernel gave it back, so the digests agree; every
    /// send is accounted as completed, and the congestion control asked
    /// for is the one reported.
    #[test]
    fn plain_zerocopy_digests_agree() {
        let sp = spec(Kind::Bandwidth, true);
        let mut o = opts("client");
        o.zerocopy = true;
        o.congestion = Some("reno".into());
        let (sent, got) = run_pair(&sp, &o, 3);
        assert_eq!(got.bytes, 3 * 123_457);
        crate::report::digests_match(&sent, &got).unwrap();
        assert!(sent.zerocopy);
        assert_eq!(sent.congestion.as_deref(), Some("reno"));
        for f in &sent.flows {
            let z = f.zerocopy.as_ref().expect("zerocopy counters");
            assert!(z.sends > 0);
            assert_eq!(z.completed, z.sends);
            assert!(z.copied <= z.completed);
        }
        assert!(got.flows.iter().all(|f| f.zerocopy.is_none()));
    }

    /// --zerocopy is refused where it means nothing (offload, latency).
    #[test]
    fn zerocopy_only_for_plain_bandwidth() {
        let (c, _s) = pairs(1);
        let mut o = opts("client");
        o.zerocopy = true;
        let lat = spec(Kind::Latency, false);
        let e = prepare(&o, &lat, Role::Ping, c).err().expect("refused");
        assert!(format!("{e:#}").contains("bandwidth"), "{e:#}");
    }

    /// Served over loopback: never a ZeroNIC route (ENODEV where the
    /// module is loaded, ENOENT where the ULP is unknown), so the attach is
    /// refused, and the error says which call, which flow and the errno;
    /// nothing falls back to plain.
    #[test]
    fn served_refusal_names_the_errno() {
        let (c, _s) = pairs(2);
        let mut o = opts("client");
        o.mode = Mode::Served;
        let e = prepare(&o, &spec(Kind::Bandwidth, false), Role::Send, c)
            .err()
            .expect("refused");
        let m = format!("{e:#}");
        assert!(
            m.contains("setsockopt TCP_ULP \"zeronic\" on data connection 0"),
            "{m}"
        );
        assert!(m.contains("ENODEV") || m.contains("ENOENT"), "{m}");
        assert_eq!(
            served_hint(Errno::ENODEV),
            ": the route does not leave through a port of a bound ZeroNIC"
        );
        assert_eq!(served_hint(Errno::EINVAL), "");
    }

    /// Both ends send and receive at once over each flow (--bidir).
    #[test]
    fn plain_bidir_digests_agree() {
        let mut sp = spec(Kind::Bandwidth, true);
        sp.bidir = true;
        let (c, s) = pairs(3);
        assert_eq!(role_of(&sp, true), Role::Both);
        assert_eq!(role_of(&sp, false), Role::Both);
        let other = std::thread::spawn({
            let sp = sp.clone();
            move || {
                prepare(&opts("server"), &sp, Role::Both, s)
                    .unwrap()
                    .run()
                    .unwrap()
            }
        });
        let here = prepare(&opts("client"), &sp, Role::Both, c)
            .unwrap()
            .run()
            .unwrap();
        let there = other.join().unwrap();
        assert_eq!(here.bytes, 2 * 3 * 123_457);
        assert_eq!(there.bytes, 2 * 3 * 123_457);
        for f in here.flows.iter().chain(&there.flows) {
            assert_eq!((f.tx_bytes, f.rx_bytes), (123_457, 123_457));
        }
        crate::report::digests_match(&here, &there).unwrap();
        // Both directions of a flow carry the same seeded stream.
        assert_eq!(here.flows[2].tx_digest, here.flows[2].rx_digest);
    }

    #[test]
    fn plain_bulk_for_a_duration() {
        let mut sp = spec(Kind::Bandwidth, false);
        sp.bytes = None;
        sp.duration = Some(0.3);
        sp.flows = 1;
        let (c, s) = pairs(1);
        let recv = std::thread::spawn({
            let sp = sp.clone();
            move || {
                prepare(&opts("server"), &sp, Role::Recv, s)
                    .unwrap()
                    .run()
                    .unwrap()
            }
        });
        let sent = prepare(&opts("client"), &sp, Role::Send, c)
            .unwrap()
            .run()
            .unwrap();
        let got = recv.join().unwrap();
        assert!(sent.bytes > 0);
        assert_eq!(sent.bytes, got.bytes);
        assert!(
            sent.seconds >= 0.3 && sent.seconds < 5.0,
            "{}",
            sent.seconds
        );
        assert_eq!(sent.flows[0].tx_digest, None);
    }

    #[test]
    fn plain_ping_pong() {
        let sp = spec(Kind::Latency, true);
        let (c, s) = pairs(1);
        let echo = std::thread::spawn({
            let sp = sp.clone();
            move || {
                prepare(&opts("server"), &sp, Role::Echo, s)
                    .unwrap()
                    .run()
                    .unwrap()
            }
        });
        let ping = prepare(&opts("client"), &sp, Role::Ping, c)
            .unwrap()
            .run()
            .unwrap();
        let echo = echo.join().unwrap();
        let l = ping.latency.as_ref().unwrap();
        assert_eq!(l.iterations, 50);
        assert!(l.rtt_us.min > 0.0 && l.rtt_us.min <= l.rtt_us.median);
        assert!(l.rtt_us.median <= l.rtt_us.p99 && l.rtt_us.p99 <= l.rtt_us.max);
        assert_eq!(ping.flows[0].tx_bytes, 55 * 1000);
        crate::report::digests_match(&ping, &echo).unwrap();
        assert!(ping.cpu.us_per_transaction.is_some());
    }
}

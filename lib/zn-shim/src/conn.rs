//! One offloaded connection: its flow (stream-mode receive ring), its CQ
//! and eventfd, the registered staging memory small sends are copied
//! through, and the byte-stream state the data calls and the readiness
//! wrappers share.

use crate::dev;
use crate::files::{Fallback, FileWin};
use crate::pool::{Pool, Res};
use crate::state::{self, Stats};
use crate::times::{AttachTimes, Lap};
use nix::errno::Errno;
use nix::libc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::{Mutex, MutexGuard};
use zn::{Cq, Device, Flow, RxMode};

/// wr_id bit of a send copied through the staging ring (the rest is the
/// staging offset its completion frees up to).
const WR_STAGED: u64 = 1 << 63;
/// wr_id bit of a zero-copy send of a file window (`sendfile`; the rest is
/// its sequence number).
const WR_FILE: u64 = 1 << 62;

#[derive(Debug, Default)]
pub struct Inner {
    /// Stream offset up to which the ring holds bytes (reported).
    rx_end: u64,
    /// Bytes the application has read.
    rx_read: u64,
    /// Bytes given back with STREAM_CONSUME.
    rx_consumed: u64,
    /// The peer's FIN was reported (at `rx_end`).
    pub eof: bool,
    /// The connection died: errno.
    pub err: i32,
    /// Staging ring: bytes copied in (free-running) and freed by ACKs.
    tx_tail: u64,
    tx_head: u64,
    /// Sends posted and not completed.
    tx_posted: u32,
    /// Zero-copy sends completed (wr_id sequence).
    zc_done: u64,
    zc_next: u64,
    /// File sends (`sendfile`) posted and not completed, in posting order:
    /// sequence number, the window they read (kept mapped and registered
    /// until then), bytes.
    file_sends: std::collections::VecDeque<(u64, Arc<FileWin>, u64)>,
    /// Their bytes, and the next sequence number.
    file_inflight: u64,
    file_next: u64,
    /// `shutdown(SHUT_WR)` done.
    pub shut_wr: bool,
    /// Receive side changed: bytes, EOF, error (edge-triggered EPOLLIN).
    pub gen: u64,
    /// Send space came back (edge-triggered EPOLLOUT).
    pub tx_gen: u64,
    /// The eventfd's counter may be non-zero: we signalled it, or the
    /// kernel did (it found the CQ armed when adding entries).
    evt_hot: bool,
    /// We armed the CQ (since then, finding it not armed means the kernel
    /// signalled the eventfd).
    armed: bool,
    /// The flow's `DETACHED` event was reaped, with this status (0: the
    /// NIC confirmed the flow is gone).
    detached: Option<u16>,
    /// The flow's copied bytes when the first wholly placed data
    /// completion was reaped: copies of bytes that came before the NIC
    /// placed any (the flow was not in the NIC yet). `None` until then.
    setup_copied: Option<u64>,
}

#[derive(Debug)]
pub struct Conn {
    pub id: u32,
    inner: Mutex<Inner>,
    cq: Cq,
    flow: Option<Flow>,
    /// The flow's id (completions of other flows are not ours).
    flow_id: u32,
    /// Ring and staging memory (taken at the drop: pooled or released).
    res: Option<Res>,
    /// Where `res` goes back to (None: released at the drop).
    pool: Option<Arc<Pool>>,
    /// Ring and staging sizes (those of `res`).
    ring_len: usize,
    stage_len: usize,
    cq_budget: u32,
    /// Its counters were added to the process's (once: last close or exit).
    accounted: std::sync::atomic::AtomicBool,
}

// SAFETY: the CQ's consumer side (`pop`, `arm`, `clear_event`) is only used
// with `inner` locked; everything else is immutable after `attach` or is the
// flow's and regions' own thread-safe ioctls.
unsafe impl Sync for Conn {}

pub enum Io {
    Done(usize),
    Err(Errno),
}

impl Conn {
    /// Attaches `fd` (an established IPv4 TCP socket), with ring and
    /// staging memory from `pool` if it has a set. `t` gets the time each
    /// step took (for the log).
    pub fn attach(
        dev: &Arc<Device>,
        pool: Option<&Arc<Pool>>,
        fd: i32,
        id: u32,
        t: &mut AttachTimes,
    ) -> zn::Result<Self> {
        let cfg = state::config();
        let pooled = match pool {
            Some(p) => p.take(),
            None => {
                Stats::add(&state::stats().pool_misses, 1);
                None
            }
        };
        let res = match pooled {
            Some(r) => {
                t.pooled = true;
                r
            }
            None => Res::new(dev, t)?,
        };
        let mut lap = Lap::new();
        // Memory that never carried a flow goes back to the pool if the
        // attach fails.
        let give_back = |res: Res| match pool {
            Some(p) => {
                p.put(res);
            }
            None => res.release(),
        };
        let cq = match dev.create_cq(cfg.cq_entries) {
            Ok(cq) => cq,
            Err(e) => {
                give_back(res);
                return Err(e);
            }
        };
        t.cq = lap.next();
        // SAFETY: the number is only borrowed for the call.
        let sock = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let flow = dev.attach(
            sock,
            &cq,
            RxMode::Stream {
                key: res.ring_mr.key(),
                offset: 0,
                size: res.ring.len() as u64,
            },
        );
        let flow = match flow {
            Ok(f) => f,
            Err(e) => {
                // Every refusal comes before the kernel made a flow, but
                // EFAULT and EIO (the arguments not written back after
                // the flow existed, the NIC not answering): release then.
                if matches!(e.errno, Errno::EFAULT | Errno::EIO) {
                    res.release();
                } else {
                    give_back(res);
                }
                return Err(e);
            }
        };
        t.flow_attach = lap.next();
        let cq_budget = cq.entries().saturating_sub(4);
        let c = Self {
            id,
            inner: Mutex::new(Inner::default()),
            cq,
            flow_id: flow.id(),
            flow: Some(flow),
            ring_len: res.ring.len(),
            stage_len: res.stage.len(),
            res: Some(res),
            pool: pool.cloned(),
            cq_budget,
            accounted: std::sync::atomic::AtomicBool::new(false),
        };
        {
            let mut g = c.lock();
            c.refresh(&mut g);
        }
        t.refresh = lap.next();
        Ok(c)
    }

    fn res(&self) -> &Res {
        self.res
            .as_ref()
            .expect("memory while the connection lives")
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn eventfd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.cq.eventfd().as_raw_fd()
    }

    fn flow(&self) -> &Flow {
        self.flow.as_ref().expect("flow while the connection lives")
    }

    /// Reaps the CQ into `g`.
    fn process(&self, g: &mut Inner) {
        let mut any = false;
        while let Some(e) = self.cq.pop() {
            if e.flow != self.flow_id {
                // Not this connection's: the CQ is its alone, so never
                // (counted, and not acted on).
                Stats::add(&state::stats().stale_cqes, 1);
                continue;
            }
            if e.opcode == zn::CQE_SEND {
                g.tx_gen += 1;
            } else {
                any = true;
            }
            match e.opcode {
                zn::CQE_STREAM_DATA => {
                    g.rx_end = g.rx_end.max(e.stream_off + u64::from(e.len));
                    if e.flags & zn::CQE_F_COPIED != 0 {
                        Stats::add(&state::stats().rx_copied_completions, 1);
                        state::log(&format!(
                            "conn {}: copied completion: stream bytes {}..{} (first placed completion {})",
                            self.id,
                            e.stream_off,
                            e.stream_off + u64::from(e.len),
                            if g.setup_copied.is_some() { "seen" } else { "not yet" }
                        ));
                    } else if e.len > 0 && g.setup_copied.is_none() {
                        g.setup_copied = self
                            .flow
                            .as_ref()
                            .and_then(|f| f.query().ok())
                            .map(|q| q.rx_copied_bytes);
                    }
                    if e.flags & zn::CQE_F_EOF != 0 {
                        g.eof = true;
                    }
                }
                zn::CQE_SEND => {
                    g.tx_posted = g.tx_posted.saturating_sub(1);
                    if e.wr_id & WR_STAGED != 0 {
                        g.tx_head = g.tx_head.max(e.wr_id & !WR_STAGED);
                    } else if e.wr_id & WR_FILE != 0 {
                        // In posting order: this one and any before it.
                        let seq = e.wr_id & !WR_FILE;
                        while g.file_sends.front().is_some_and(|f| f.0 <= seq) {
                            if let Some((_, _, n)) = g.file_sends.pop_front() {
                                g.file_inflight -= n;
                            }
                        }
                    } else {
                        g.zc_done += 1;
                    }
                    if e.status != 0 && g.err == 0 {
                        g.err = i32::from(e.status);
                    }
                }
                zn::CQE_FLOW if e.flags & zn::CQE_F_DETACHED != 0 => {
                    // The flow's last event: its status says whether the
                    // NIC confirmed the flow is gone (EIO: it did not).
                    g.detached = Some(e.status);
                    if g.err == 0 && !g.eof {
                        g.err = libc::ECONNRESET;
                    }
                }
                zn::CQE_FLOW => {
                    if e.status != 0 && g.err == 0 {
                        g.err = i32::from(e.status);
                    }
                    if e.flags & zn::CQE_F_EOF != 0 {
                        g.eof = true;
                    }
                }
                _ => {}
            }
        }
        if any {
            g.gen += 1;
        }
    }

    pub fn readable(&self, g: &Inner) -> bool {
        g.rx_end > g.rx_read || g.eof || g.err != 0
    }

    pub fn writable(&self, g: &Inner) -> bool {
        g.err != 0
            || g.shut_wr
            || (g.tx_tail - g.tx_head < self.stage_len as u64
                && g.file_inflight < self.stage_len as u64
                && g.tx_posted < self.cq_budget)
    }

    /// Re-arms the CQ, noting a signal of the kernel since the last arm;
    /// `true` if the CQ is empty (no completion can be missed by a sleep).
    fn rearm(&self, g: &mut Inner) -> bool {
        let (was_armed, empty) = self.cq.arm_checked();
        if g.armed && !was_armed {
            g.evt_hot = true;
        }
        g.armed = true;
        empty
    }

    /// Reaps the CQ, re-arms it, and keeps the eventfd readable exactly
    /// while bytes (or EOF, an error) wait to be read: the application's
    /// own poll/epoll on it then sees level-triggered readiness. The
    /// eventfd is only written when the kernel did not signal it already,
    /// and only read when it may be signalled (one system call per batch
    /// of arrivals in the usual case: the read that empties it).
    pub fn refresh(&self, g: &mut Inner) {
        loop {
            self.process(g);
            if !self.rearm(g) {
                continue;
            }
            if self.readable(g) {
                if !g.evt_hot {
                    state::signal_eventfd(self.eventfd());
                    g.evt_hot = true;
                }
                return;
            }
            // Not readable: the eventfd must not stay readable, whether we
            // or the kernel (a send's completion) signalled it, or a
            // level-triggered wait on it would spin.
            if !g.evt_hot {
                return;
            }
            self.cq.clear_event();
            g.evt_hot = false;
            if self.rearm(g) {
                return;
            }
        }
    }

    /// Drops our own readable mark on the eventfd (a wait for something
    /// else than reading), so only new completions wake it.
    pub fn unmark(&self, g: &mut Inner) {
        self.rearm(g);
        if g.evt_hot {
            self.cq.clear_event();
            g.evt_hot = false;
        }
        if !self.rearm(g) {
            self.process(g);
            state::signal_eventfd(self.eventfd());
            g.evt_hot = true;
        }
    }

    /// Bytes waiting to be read (FIONREAD).
    pub fn pending(&self) -> usize {
        let mut g = self.lock();
        self.refresh(&mut g);
        (g.rx_end - g.rx_read) as usize
    }

    /// Sleeps until a completion may have come (or 100 ms, so a
    /// completion reaped by another thread cannot strand us). EINTR passes.
    fn sleep(&self, g: MutexGuard<'_, Inner>) -> Result<(), Errno> {
        let fd = self.eventfd();
        drop(g);
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { state::real_poll(&mut p, 1, 100) };
        if r < 0 {
            let e = Errno::last();
            if e == Errno::EINTR {
                return Err(e);
            }
        }
        Ok(())
    }

    /// `recv` into `iov`: copies out of the ring.
    ///
    /// `nonblock` says whether the socket is non-blocking; it is asked only
    /// when the call would otherwise wait (it costs a system call, and a
    /// call that finds bytes does not depend on it).
    pub fn recv(
        &self,
        iov: &[(*mut u8, usize)],
        peek: bool,
        waitall: bool,
        nonblock: &dyn Fn() -> bool,
    ) -> Io {
        let want: usize = iov.iter().map(|v| v.1).sum();
        if want == 0 {
            return Io::Done(0);
        }
        let mut got = 0usize;
        loop {
            let mut g = self.lock();
            self.refresh(&mut g);
            let avail = (g.rx_end - g.rx_read) as usize;
            if avail > 0 && !(peek && got > 0) {
                let n = avail.min(want - got);
                self.copy_out(g.rx_read, n, iov, got);
                if !peek {
                    g.rx_read += n as u64;
                    // Give the space back once an eighth of the ring is
                    // read (not on every read: a system call each; the
                    // NIC has the other seven eighths meanwhile).
                    if g.rx_read - g.rx_consumed >= (self.ring_len / 8) as u64
                        && self.flow().consume(g.rx_read).is_ok()
                    {
                        g.rx_consumed = g.rx_read;
                    }
                    self.refresh(&mut g);
                    Stats::add(&state::stats().rx_bytes, n as u64);
                }
                got += n;
                if got == want || !waitall || peek {
                    return Io::Done(got);
                }
                continue;
            }
            if got > 0 && (g.eof || g.err != 0 || nonblock()) {
                return Io::Done(got);
            }
            if g.rx_end == g.rx_read && g.err != 0 {
                return Io::Err(Errno::from_raw(g.err));
            }
            if g.eof {
                return Io::Done(0);
            }
            if nonblock() {
                return Io::Err(Errno::EAGAIN);
            }
            if let Err(e) = self.sleep(g) {
                return if got > 0 { Io::Done(got) } else { Io::Err(e) };
            }
        }
    }

    fn copy_out(&self, from: u64, n: usize, iov: &[(*mut u8, usize)], skip: usize) {
        let rs = self.ring_len;
        let mut done = 0usize;
        let mut skip = skip;
        for &(p, l) in iov {
            if skip >= l {
                skip -= l;
                continue;
            }
            let (p, l) = (p.wrapping_add(skip), l - skip);
            skip = 0;
            let mut k = 0;
            while k < l && done < n {
                let off = ((from + done as u64) % rs as u64) as usize;
                let c = (l - k).min(n - done).min(rs - off);
                // SAFETY: `off + c` is within the ring; the ring bytes
                // below `rx_end` are not written by the NIC until they are
                // consumed; the destination is the caller's buffer of `l`
                // bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(self.res().ring.as_ptr().add(off), p.add(k), c)
                };
                k += c;
                done += c;
            }
            if done == n {
                return;
            }
        }
    }

    /// `send` of `iov`: copied through staging (small, or non-blocking
    /// sockets) or zero-copy from the caller's memory (blocking, at least
    /// the threshold), completing when ACKed.
    ///
    /// `nonblock` is asked only when it matters: for a send large enough to
    /// go zero-copy, and when the staging memory is full.
    pub fn send(&self, iov: &[(*const u8, usize)], nonblock: &dyn Fn() -> bool) -> Io {
        let total: usize = iov.iter().map(|v| v.1).sum();
        if total == 0 {
            return Io::Done(0);
        }
        let cfg = state::config();
        if iov.len() == 1 && total >= cfg.zc_threshold && !nonblock() {
            if let Some(io) = self.send_zc(iov[0].0, total) {
                return io;
            }
            // Not registered (the memlock limit, the MR Table share, memory
            // the NIC cannot pin): copied through staging below.
        }
        let mut done = 0usize;
        loop {
            let mut g = self.lock();
            self.refresh(&mut g);
            if g.err != 0 || g.shut_wr {
                return if done > 0 {
                    Io::Done(done)
                } else {
                    Io::Err(Errno::EPIPE)
                };
            }
            let ss = self.stage_len as u64;
            let free = ss - (g.tx_tail - g.tx_head);
            if free > 0 && g.tx_posted < self.cq_budget {
                let off = g.tx_tail % ss;
                let n = (total - done).min(free as usize).min((ss - off) as usize);
                self.copy_in(off as usize, n, iov, done);
                let end = g.tx_tail + n as u64;
                let key = self.res().stage_mr.key();
                match self.flow().post_send(WR_STAGED | end, key, off, n as u32) {
                    Ok(true) => {
                        g.tx_tail = end;
                        g.tx_posted += 1;
                        done += n;
                        Stats::add(&state::stats().tx_bytes, n as u64);
                        Stats::add(&state::stats().tx_staged_sends, 1);
                        if done == total {
                            return Io::Done(done);
                        }
                        continue;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        if g.err == 0 {
                            g.err = e.errno as i32;
                        }
                        return if done > 0 {
                            Io::Done(done)
                        } else {
                            Io::Err(Errno::EPIPE)
                        };
                    }
                }
            }
            if nonblock() {
                return if done > 0 {
                    Io::Done(done)
                } else {
                    Io::Err(Errno::EAGAIN)
                };
            }
            self.unmark(&mut g);
            if let Err(e) = self.sleep(g) {
                return if done > 0 { Io::Done(done) } else { Io::Err(e) };
            }
        }
    }

    fn copy_in(&self, off: usize, n: usize, iov: &[(*const u8, usize)], skip: usize) {
        let mut skip = skip;
        let mut done = 0;
        for &(p, l) in iov {
            if skip >= l {
                skip -= l;
                continue;
            }
            let c = (l - skip).min(n - done);
            // SAFETY: the staging range `[off, off + n)` is ours (not
            // posted: beyond `tx_tail`); the source is the caller's buffer.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    p.add(skip),
                    self.res().stage.as_ptr().add(off + done),
                    c,
                )
            };
            skip = 0;
            done += c;
            if done == n {
                return;
            }
        }
    }

    /// `sendfile` of the file bytes `[start, start + len)`, zero-copy from
    /// the file's windows (`win(pos)`: the registered window holding file
    /// byte `pos`). Returns once the bytes are posted, not ACKed (the
    /// windows stay held until the sends complete): as many as fit, and
    /// on a blocking socket all of them, waiting for completions while
    /// the bytes in flight reach the staging size (`ZN_SHIM_STAGING`, the
    /// bound of the copied sends too). `Err(Err(_))`: nothing could be
    /// posted from the file (take the copy path).
    #[allow(clippy::type_complexity)]
    pub fn send_file(
        &self,
        start: u64,
        len: u64,
        nonblock: &dyn Fn() -> bool,
        win: &mut dyn FnMut(u64) -> Result<Arc<FileWin>, Fallback>,
    ) -> Result<usize, Result<Errno, Fallback>> {
        let mut posted = 0u64;
        let mut cur: Option<Arc<FileWin>> = None;
        let t0 = std::time::Instant::now();
        let mut stall_logged = false;
        loop {
            let pos = start + posted;
            // The window of `pos`, without the connection's lock (a miss
            // maps and registers).
            let w = match cur.take() {
                Some(w) if w.file_off <= pos && pos < w.file_off + w.len => w,
                _ => match win(pos) {
                    Ok(w) => w,
                    Err(f) if posted == 0 => return Err(Err(f)),
                    Err(_) => return Ok(posted as usize),
                },
            };
            let mut g = self.lock();
            self.refresh(&mut g);
            if g.err != 0 || g.shut_wr {
                return if posted > 0 {
                    Ok(posted as usize)
                } else {
                    Err(Ok(Errno::EPIPE))
                };
            }
            let room = (self.stage_len as u64).saturating_sub(g.file_inflight);
            if room > 0 && g.tx_posted < self.cq_budget {
                let n = (len - posted)
                    .min(room)
                    .min(w.file_off + w.len - pos)
                    .min(u64::from(u32::MAX));
                let seq = g.file_next;
                let at = w.lease.offset + (pos - w.file_off);
                match self
                    .flow()
                    .post_send(WR_FILE | seq, w.lease.key, at, n as u32)
                {
                    Ok(true) => {
                        g.file_next += 1;
                        g.file_inflight += n;
                        g.tx_posted += 1;
                        g.file_sends.push_back((seq, w.clone(), n));
                        posted += n;
                        if posted == len {
                            return Ok(posted as usize);
                        }
                        cur = Some(w);
                        continue;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        if g.err == 0 {
                            g.err = e.errno as i32;
                        }
                        return if posted > 0 {
                            Ok(posted as usize)
                        } else {
                            Err(Ok(Errno::EPIPE))
                        };
                    }
                }
            }
            cur = Some(w);
            if nonblock() {
                return if posted > 0 {
                    Ok(posted as usize)
                } else {
                    Err(Ok(Errno::EAGAIN))
                };
            }
            // A wait this long means completions stopped coming (an
            // intermittent stall, docs/shim.md "Known limits"): say once,
            // in the log, what the connection and the kernel's flow hold.
            if !stall_logged && t0.elapsed().as_secs() >= 5 {
                stall_logged = true;
                state::log(&format!(
                    "conn {}: sendfile waiting 5 s for completions: posted {posted} of {len}, \
                     file_inflight {} file_sends {} tx_posted {} cq_budget {} file_next {} \
                     oldest (seq, bytes) {:?}; the flow: {:?}",
                    self.id,
                    g.file_inflight,
                    g.file_sends.len(),
                    g.tx_posted,
                    self.cq_budget,
                    g.file_next,
                    g.file_sends.front().map(|f| (f.0, f.2)),
                    self.query()
                ));
            }
            self.unmark(&mut g);
            if let Err(e) = self.sleep(g) {
                return if posted > 0 {
                    Ok(posted as usize)
                } else {
                    Err(Ok(e))
                };
            }
        }
    }

    /// Zero-copy send of the caller's buffer through the registration
    /// cache; returns once every byte is ACKed (the buffer is the caller's
    /// again), which is why only blocking sockets take this path. A signal
    /// does not interrupt it (the NIC may still read the buffer).
    ///
    /// `None`: the buffer could not be registered (nothing was posted).
    fn send_zc(&self, p: *const u8, len: usize) -> Option<Io> {
        let cache = dev::cache()?;
        // SAFETY: the caller's buffer, read by the NIC until the sends
        // completed, which we wait for below.
        let lease = match unsafe { cache.get(p, len, zn::ACCESS_READ) } {
            Ok(l) => l,
            Err(e) => {
                Stats::add(&state::stats().tx_zc_refused, 1);
                state::log(&format!(
                    "conn {}: a {len}-byte send copied, not zero-copy: {e}",
                    self.id
                ));
                return None;
            }
        };
        const CHUNK: usize = 4 << 20;
        let mut g = self.lock();
        let mut posted = 0usize;
        let mut target = g.zc_done;
        let mut failed = None;
        while posted < len {
            if g.err != 0 || g.shut_wr {
                failed = Some(Errno::EPIPE);
                break;
            }
            let n = (len - posted).min(CHUNK);
            if g.tx_posted < self.cq_budget {
                let id = g.zc_next;
                match self
                    .flow()
                    .post_send(id, lease.key, lease.offset + posted as u64, n as u32)
                {
                    Ok(true) => {
                        g.zc_next += 1;
                        g.tx_posted += 1;
                        target += 1;
                        posted += n;
                        continue;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        failed = Some(e.errno);
                        break;
                    }
                }
            }
            self.refresh(&mut g);
            self.unmark(&mut g);
            let _ = self.sleep(g);
            g = self.lock();
        }
        // Wait for every posted byte to be ACKed (or to fail).
        loop {
            self.refresh(&mut g);
            if g.zc_done >= target {
                break;
            }
            self.unmark(&mut g);
            let _ = self.sleep(g);
            g = self.lock();
        }
        let err = g.err;
        drop(g);
        cache.put(lease);
        Stats::add(&state::stats().tx_zc_sends, 1);
        if err != 0 && posted == 0 {
            return Some(Io::Err(Errno::EPIPE));
        }
        if let Some(e) = failed {
            if posted == 0 {
                return Some(Io::Err(e));
            }
        }
        Stats::add(&state::stats().tx_bytes, posted as u64);
        Stats::add(&state::stats().tx_zc_bytes, posted as u64);
        Some(Io::Done(posted))
    }

    /// Waits (bounded) until every posted send completed: before
    /// `shutdown(SHUT_WR)` and `close()`, so the FIN follows the data and a
    /// detach drops nothing not yet handed to TCP.
    pub fn drain_sends(&self, max_ms: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(max_ms);
        let mut g = self.lock();
        loop {
            self.refresh(&mut g);
            if g.tx_posted == 0 || g.err != 0 || std::time::Instant::now() >= deadline {
                return;
            }
            self.unmark(&mut g);
            let _ = self.sleep(g);
            g = self.lock();
        }
    }

    /// Counters of the flow (for the log).
    pub fn query(&self) -> Option<zn::FlowQuery> {
        self.flow.as_ref()?.query().ok()
    }

    /// Adds the flow's receive counters to the process's and logs them,
    /// once (at the last close, or at exit for a connection still open):
    /// every byte the flow delivered was placed by the NIC or copied; the
    /// copies either during set-up (bytes that came before the NIC placed
    /// any: queued before the attach, or arriving while the NIC's flow was
    /// being installed) or later (frames the NIC handed to the normal path
    /// for lack of posted space).
    pub fn account(&self, why: &str) {
        if self.accounted.swap(true, Ordering::Relaxed) {
            return;
        }
        let Some(q) = self.query() else { return };
        let (read, setup) = {
            let g = self.lock();
            // No wholly placed completion ever: all its copies were.
            (g.rx_read, g.setup_copied.unwrap_or(q.rx_copied_bytes))
        };
        let st = state::stats();
        Stats::add(&st.rx_placed_bytes, q.rx_placed_bytes);
        Stats::add(&st.rx_copied_bytes, q.rx_copied_bytes);
        Stats::add(&st.rx_setup_copied_bytes, setup);
        Stats::add(&st.rx_delivered_bytes, q.rx_stream_off);
        Stats::add(&st.tx_merged_bytes, q.tx_merged_bytes);
        state::log(&format!(
            "conn {}: {why}: rx_delivered {} rx_placed {} rx_copied {} rx_setup_copied {} rx_read {} tx_merged {} tx_copied {}",
            self.id,
            q.rx_stream_off,
            q.rx_placed_bytes,
            q.rx_copied_bytes,
            setup,
            read,
            q.tx_merged_bytes,
            q.tx_copied_bytes
        ));
    }
}

impl Conn {
    /// After the detach: reaps the CQ until the flow's `DETACHED` event and
    /// every send's completion came (bounded), and says whether the ring
    /// and staging memory may go to another connection (`Err`: why not).
    fn settle(&self) -> Result<(), &'static str> {
        const WAIT_MS: u64 = 1000;
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(WAIT_MS);
        let mut g = self.lock();
        loop {
            self.process(&mut g);
            match g.detached {
                Some(0) if g.tx_posted == 0 => return Ok(()),
                Some(0) => {}
                Some(_) => return Err("the NIC did not confirm the flow's removal"),
                None => {}
            }
            if std::time::Instant::now() >= deadline {
                return Err(if g.detached.is_none() {
                    "no DETACHED event"
                } else {
                    "sends still posted"
                });
            }
            // Arm, re-check, sleep on the eventfd (woken by the entry).
            if self.rearm(&mut g) {
                let _ = self.sleep(g);
                g = self.lock();
            }
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        Stats::sub(&state::stats().open_conns, 1);
        // Order: the flow first (the NIC stops placing), then the memory
        // (pooled or deregistered), then the CQ (a field, dropped after
        // this).
        let mut lap = Lap::new();
        let detach = self.flow.take().map(|f| f.detach());
        let t_detach = lap.next();
        let Some(res) = self.res.take() else { return };
        let how = match &self.pool {
            None => {
                res.release();
                "deregistered"
            }
            Some(pool) => {
                let settled = match detach {
                    Some(Err(_)) => Err("FLOW_DETACH failed"),
                    _ => self.settle(),
                };
                match settled {
                    Ok(()) => {
                        if pool.put(res) {
                            "pooled"
                        } else {
                            "deregistered (pool full)"
                        }
                    }
                    Err(why) => {
                        Stats::add(&state::stats().pool_refused, 1);
                        state::log(&format!("conn {}: memory not pooled: {why}", self.id));
                        res.release();
                        "deregistered"
                    }
                }
            }
        };
        let t_rest = lap.next();
        state::log(&format!(
            "conn {}: released in {} us: detach {t_detach} then {how} in {t_rest} ({} sets pooled)",
            self.id,
            t_detach + t_rest,
            self.pool.as_ref().map_or(0, |p| p.len())
        ));
    }
}

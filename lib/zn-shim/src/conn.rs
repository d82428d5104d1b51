//! One offloaded connection: its flow (stream-mode receive ring), its CQ
//! and eventfd, the registered staging memory small sends are copied
//! through, and the byte-stream state the data calls and the readiness
//! wrappers share.

use crate::state::{self, Stats};
use nix::errno::Errno;
use nix::libc;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};
use zn::{Buffer, Cq, Device, Flow, Region, RxMode};

/// wr_id bit of a send copied through the staging ring (the rest is the
/// staging offset its completion frees up to).
const WR_STAGED: u64 = 1 << 63;

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
    ring: Buffer,
    ring_mr: Option<Region>,
    stage: Buffer,
    stage_mr: Option<Region>,
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
    /// Attaches `fd` (an established IPv4 TCP socket).
    pub fn attach(dev: &std::sync::Arc<Device>, fd: i32, id: u32) -> zn::Result<Self> {
        let cfg = state::config();
        let ring = Buffer::new(cfg.ring)?;
        let ring_mr = dev.register(&ring, zn::ACCESS_WRITE)?;
        let stage = Buffer::new(cfg.staging)?;
        let stage_mr = dev.register(&stage, zn::ACCESS_READ)?;
        let cq = dev.create_cq(cfg.cq_entries)?;
        // SAFETY: the number is only borrowed for the call.
        let sock = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let flow = dev.attach(
            sock,
            &cq,
            RxMode::Stream {
                key: ring_mr.key(),
                offset: 0,
                size: cfg.ring as u64,
            },
        )?;
        let cq_budget = cq.entries().saturating_sub(4);
        let c = Self {
            id,
            inner: Mutex::new(Inner::default()),
            cq,
            flow: Some(flow),
            ring,
            ring_mr: Some(ring_mr),
            stage,
            stage_mr: Some(stage_mr),
            cq_budget,
            accounted: std::sync::atomic::AtomicBool::new(false),
        };
        {
            let mut g = c.lock();
            c.refresh(&mut g);
        }
        Ok(c)
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
                        g.setup_copied = self.flow().query().ok().map(|q| q.rx_copied_bytes);
                    }
                    if e.flags & zn::CQE_F_EOF != 0 {
                        g.eof = true;
                    }
                }
                zn::CQE_SEND => {
                    g.tx_posted = g.tx_posted.saturating_sub(1);
                    if e.wr_id & WR_STAGED != 0 {
                        g.tx_head = g.tx_head.max(e.wr_id & !WR_STAGED);
                    } else {
                        g.zc_done += 1;
                    }
                    if e.status != 0 && g.err == 0 {
                        g.err = i32::from(e.status);
                    }
                }
                zn::CQE_FLOW => {
                    if e.status != 0 && g.err == 0 {
                        g.err = i32::from(e.status);
                    }
                    if e.flags & zn::CQE_F_EOF != 0 {
                        g.eof = true;
                    }
                    if e.flags & zn::CQE_F_DETACHED != 0 && g.err == 0 && !g.eof {
                        g.err = libc::ECONNRESET;
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
            || (g.tx_tail - g.tx_head < self.stage.len() as u64 && g.tx_posted < self.cq_budget)
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
                    if g.rx_read - g.rx_consumed >= (self.ring.len() / 8) as u64
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
        let rs = self.ring.len();
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
                unsafe { std::ptr::copy_nonoverlapping(self.ring.as_ptr().add(off), p.add(k), c) };
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
            return self.send_zc(iov[0].0, total);
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
            let ss = self.stage.len() as u64;
            let free = ss - (g.tx_tail - g.tx_head);
            if free > 0 && g.tx_posted < self.cq_budget {
                let off = g.tx_tail % ss;
                let n = (total - done).min(free as usize).min((ss - off) as usize);
                self.copy_in(off as usize, n, iov, done);
                let end = g.tx_tail + n as u64;
                let key = self.stage_mr.as_ref().map_or(0, |r| r.key());
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
                std::ptr::copy_nonoverlapping(p.add(skip), self.stage.as_ptr().add(off + done), c)
            };
            skip = 0;
            done += c;
            if done == n {
                return;
            }
        }
    }

    /// Zero-copy send of the caller's buffer through the registration
    /// cache; returns once every byte is ACKed (the buffer is the caller's
    /// again), which is why only blocking sockets take this path. A signal
    /// does not interrupt it (the NIC may still read the buffer).
    fn send_zc(&self, p: *const u8, len: usize) -> Io {
        let Some(cache) = state::cache() else {
            return Io::Err(Errno::ENOMEM);
        };
        // SAFETY: the caller's buffer, read by the NIC until the sends
        // completed, which we wait for below.
        let lease = match unsafe { cache.get(p, len, zn::ACCESS_READ) } {
            Ok(l) => l,
            Err(e) => return Io::Err(e.errno),
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
            return Io::Err(Errno::EPIPE);
        }
        if let Some(e) = failed {
            if posted == 0 {
                return Io::Err(e);
            }
        }
        Stats::add(&state::stats().tx_bytes, posted as u64);
        Stats::add(&state::stats().tx_zc_bytes, posted as u64);
        Io::Done(posted)
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
        self.flow().query().ok()
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

impl Drop for Conn {
    fn drop(&mut self) {
        // Order: the flow first (the NIC stops placing), then the regions,
        // then the CQ (fields drop in declaration order after this).
        if let Some(f) = self.flow.take() {
            let _ = f.detach();
        }
        // Sends still in TCP keep their regions busy: released with the
        // file then (MR_DEREG EBUSY), see docs/uapi.md.
        for r in [self.ring_mr.take(), self.stage_mr.take()]
            .into_iter()
            .flatten()
        {
            if let Err((Some(r), _)) = r.deregister() {
                r.forget();
            }
        }
        Stats::sub(&state::stats().open_conns, 1);
        let _ = Ordering::Relaxed;
    }
}

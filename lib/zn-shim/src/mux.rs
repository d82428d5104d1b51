//! Readiness of offloaded sockets in `poll`, `select` and `epoll`.
//!
//! An offloaded socket's bytes are in its flow's receive ring, not in the
//! kernel socket, so the kernel never reports it readable for data. Each
//! connection's CQ eventfd stands in: the kernel signals it on every
//! completion (the CQ is kept armed), and the shim keeps it readable for as
//! long as bytes, an EOF or an error wait to be read (`Conn::refresh`). The
//! wrappers put the eventfd next to the socket in the real call and report
//! the socket's events from the connection's state:
//!
//! - `poll`/`ppoll`/`select`/`pselect`: the eventfd is polled with the
//!   caller's fds; an offloaded entry's `revents` are the connection's
//!   readiness (POLLIN at data/EOF/error, POLLOUT while staging memory and
//!   CQ entries are free, POLLHUP/POLLERR from the kernel socket).
//! - `epoll`: the socket stays registered in the caller's epoll set (with
//!   a tag instead of the caller's data, and no events of its own but
//!   HUP/ERR), its eventfd is added next to it, and `epoll_wait` translates
//!   tagged events back to the caller's `data`, honouring EPOLLET (an event
//!   only when the connection changed since the last report) and
//!   EPOLLONESHOT (disabled until EPOLL_CTL_MOD). Since the eventfd is a
//!   real member of the set, nesting the epoll fd in another epoll or poll
//!   wakes it as Linux does.

use crate::conn::Conn;
use crate::fds::{self, ACTIVE};
use crate::per_proc::PerProc;
use crate::state::{self, real_fn};
use nix::errno::Errno;
use nix::libc::{self, c_int, epoll_event};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

real_fn!(fn real_ppoll = "ppoll" (f: *mut libc::pollfd, n: libc::nfds_t, t: *const libc::timespec, m: *const libc::sigset_t) -> c_int);
real_fn!(fn real_select = "select" (n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, t: *mut libc::timeval) -> c_int);
real_fn!(fn real_pselect = "pselect" (n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, t: *const libc::timespec, m: *const libc::sigset_t) -> c_int);
real_fn!(fn real_epoll_ctl = "epoll_ctl" (ep: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int);
real_fn!(fn real_epoll_wait = "epoll_wait" (ep: c_int, ev: *mut epoll_event, max: c_int, t: c_int) -> c_int);
real_fn!(fn real_epoll_pwait = "epoll_pwait" (ep: c_int, ev: *mut epoll_event, max: c_int, t: c_int, m: *const libc::sigset_t) -> c_int);

/// Tags of the shim's own members of an epoll set (never a user pointer:
/// the top byte is not canonical for user space on x86-64).
const TAG: u64 = 0x5a4e_0000_0000_0000;
const TAG_MASK: u64 = 0xffff_0000_0000_0000;
const KIND_EVT: u64 = 1 << 32;
const KIND_SOCK: u64 = 2 << 32;

/// epoll fd -> registered fd -> registration (offloaded and pending fds
/// only), per process. Lock order: `per_proc.rs`.
static EPOLLS: PerProc<HashMap<i32, HashMap<i32, Reg>>> = PerProc::new(|| {});

/// A registration of an offloaded (or pending) fd in an epoll set.
#[derive(Debug, Clone)]
pub struct Reg {
    events: u32,
    data: u64,
    conn: Option<Arc<Conn>>,
    last_gen: u64,
    last_tx_gen: u64,
    disabled: bool,
}

fn readiness(c: &Conn, want: u32) -> u32 {
    let mut g = c.lock();
    c.refresh(&mut g);
    let mut r = 0u32;
    if c.readable(&g) {
        r |= (libc::EPOLLIN | libc::EPOLLRDNORM) as u32;
    }
    if g.eof {
        r |= libc::EPOLLRDHUP as u32;
    }
    if c.writable(&g) {
        r |= (libc::EPOLLOUT | libc::EPOLLWRNORM) as u32;
    }
    if g.err != 0 {
        r |= (libc::EPOLLERR | libc::EPOLLHUP) as u32;
    }
    if g.eof && g.shut_wr {
        r |= libc::EPOLLHUP as u32;
    }
    // Waiting for something else than reading: only new completions may
    // wake the eventfd, not bytes already there.
    if want & libc::EPOLLIN as u32 == 0 && r & (libc::EPOLLOUT as u32) == 0 {
        c.unmark(&mut g);
    }
    r & (want | (libc::EPOLLERR | libc::EPOLLHUP) as u32)
}

// ---- poll / select ---------------------------------------------------------

fn remaining(deadline: Option<Instant>) -> c_int {
    match deadline {
        None => -1,
        Some(d) => d
            .saturating_duration_since(Instant::now())
            .as_millis()
            .min(c_int::MAX as u128) as c_int,
    }
}

/// `poll`/`ppoll` over any mix of fds.
///
/// # Safety
/// `f` points at `n` pollfds.
pub unsafe fn poll(
    f: *mut libc::pollfd,
    n: libc::nfds_t,
    t: c_int,
    sigmask: Option<*const libc::sigset_t>,
) -> c_int {
    let real = |f: *mut libc::pollfd, n: libc::nfds_t, t: c_int| -> c_int {
        match sigmask {
            None => {
                // SAFETY: passed on.
                unsafe { state::real_poll(f, n, t) }
            }
            Some(m) => {
                let ts = (t >= 0).then(|| libc::timespec {
                    tv_sec: (t / 1000) as i64,
                    tv_nsec: (t % 1000) as i64 * 1_000_000,
                });
                let tp = ts.as_ref().map_or(std::ptr::null(), |x| x as *const _);
                // SAFETY: passed on.
                unsafe { real_ppoll(f, n, tp, m) }
            }
        }
    };
    if ACTIVE.load(Ordering::Relaxed) == 0 || f.is_null() {
        return real(f, n, t);
    }
    // SAFETY: the caller's array.
    let fds = unsafe { std::slice::from_raw_parts_mut(f, n as usize) };
    let conns: Vec<Option<Arc<Conn>>> = fds
        .iter()
        .map(|p| crate::conn(p.fd).ok().flatten())
        .collect();
    if conns.iter().all(Option::is_none) {
        return real(f, n, t);
    }
    let deadline = (t >= 0).then(|| Instant::now() + std::time::Duration::from_millis(t as u64));
    loop {
        // Offloaded entries first, from the connections' state.
        let mut ready = 0;
        let mut arr: Vec<libc::pollfd> = Vec::with_capacity(fds.len() * 2);
        for (p, c) in fds.iter_mut().zip(&conns) {
            match c {
                Some(c) => {
                    let want =
                        p.events as u32 & (libc::POLLIN | libc::POLLOUT | libc::POLLRDHUP) as u32;
                    let r = readiness(c, want);
                    p.revents = r as i16;
                    if r != 0 {
                        ready += 1;
                    }
                    // The socket (HUP/ERR only) and its eventfd.
                    arr.push(libc::pollfd {
                        fd: p.fd,
                        events: 0,
                        revents: 0,
                    });
                    arr.push(libc::pollfd {
                        fd: c.eventfd(),
                        events: libc::POLLIN,
                        revents: 0,
                    });
                }
                None => arr.push(libc::pollfd {
                    fd: p.fd,
                    events: p.events,
                    revents: 0,
                }),
            }
        }
        let to = if ready > 0 { 0 } else { remaining(deadline) };
        let r = real(arr.as_mut_ptr(), arr.len() as libc::nfds_t, to);
        if r < 0 {
            return r;
        }
        let mut i = 0;
        let mut woke = false;
        for (p, c) in fds.iter_mut().zip(&conns) {
            match c {
                Some(c) => {
                    let hup = arr[i].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL);
                    if arr[i + 1].revents != 0 {
                        woke = true;
                        let want = p.events as u32
                            & (libc::POLLIN | libc::POLLOUT | libc::POLLRDHUP) as u32;
                        p.revents = readiness(c, want) as i16;
                    }
                    p.revents |= hup;
                    i += 2;
                }
                None => {
                    p.revents = arr[i].revents;
                    i += 1;
                }
            }
        }
        let total = fds.iter().filter(|p| p.revents != 0).count() as c_int;
        if total > 0 || !woke || remaining(deadline) == 0 {
            return total;
        }
    }
}

/// `select` through `poll` when an offloaded fd is in the sets.
///
/// # Safety
/// The caller's sets and timeout.
pub unsafe fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    t: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's sets.
    if !unsafe { any_offloaded(n, r, w, e) } {
        // SAFETY: passed on.
        return unsafe { real_select(n, r, w, e, t) };
    }
    // SAFETY: the caller's timeout or null.
    let ms = unsafe { t.as_ref() }.map_or(-1, |tv| {
        (tv.tv_sec * 1000 + tv.tv_usec / 1000).min(c_int::MAX as i64) as c_int
    });
    let start = Instant::now();
    // SAFETY: the caller's sets.
    let res = unsafe { select_via_poll(n, r, w, e, ms, None) };
    // SAFETY: the caller's timeout: Linux writes the time left.
    if let Some(tv) = unsafe { t.as_mut() } {
        let left = (ms as i64 * 1000 - start.elapsed().as_micros() as i64).max(0);
        tv.tv_sec = left / 1_000_000;
        tv.tv_usec = left % 1_000_000;
    }
    res
}

/// `pselect` through `ppoll` when an offloaded fd is in the sets.
///
/// # Safety
/// The caller's sets, timeout and mask.
pub unsafe fn pselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    ts: *const libc::timespec,
    m: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's sets.
    if !unsafe { any_offloaded(n, r, w, e) } {
        // SAFETY: passed on.
        return unsafe { real_pselect(n, r, w, e, ts, m) };
    }
    // SAFETY: the caller's timeout or null.
    let ms = unsafe { ts.as_ref() }.map_or(-1, |x| {
        (x.tv_sec * 1000 + x.tv_nsec / 1_000_000).min(c_int::MAX as i64) as c_int
    });
    // SAFETY: the caller's sets.
    unsafe { select_via_poll(n, r, w, e, ms, Some(m)) }
}

unsafe fn isset(fd: c_int, s: *mut libc::fd_set) -> bool {
    // SAFETY: a valid set or null.
    !s.is_null() && unsafe { libc::FD_ISSET(fd, s) }
}

unsafe fn any_offloaded(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
) -> bool {
    if ACTIVE.load(Ordering::Relaxed) == 0 {
        return false;
    }
    // SAFETY: the caller's sets.
    (0..n).any(|fd| unsafe { isset(fd, r) || isset(fd, w) || isset(fd, e) } && crate::conn(fd).ok().flatten().is_some())
}

unsafe fn select_via_poll(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    ms: c_int,
    m: Option<*const libc::sigset_t>,
) -> c_int {
    let mut pf = Vec::new();
    for fd in 0..n {
        let mut ev = 0;
        // SAFETY: the caller's sets.
        unsafe {
            if isset(fd, r) {
                ev |= libc::POLLIN;
            }
            if isset(fd, w) {
                ev |= libc::POLLOUT;
            }
            if isset(fd, e) {
                ev |= libc::POLLPRI;
            }
        }
        if ev != 0 {
            pf.push(libc::pollfd {
                fd,
                events: ev,
                revents: 0,
            });
        }
    }
    // SAFETY: our array.
    let res = unsafe { poll(pf.as_mut_ptr(), pf.len() as libc::nfds_t, ms, m) };
    if res < 0 {
        return res;
    }
    for s in [r, w, e] {
        if !s.is_null() {
            // SAFETY: the caller's set.
            unsafe { libc::FD_ZERO(s) };
        }
    }
    let mut count = 0;
    for p in &pf {
        if p.revents & libc::POLLNVAL != 0 {
            Errno::set_raw(libc::EBADF);
            return -1;
        }
        let rd = p.events & libc::POLLIN != 0
            && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
        let wr = p.events & libc::POLLOUT != 0 && p.revents & (libc::POLLOUT | libc::POLLERR) != 0;
        let ex = p.events & libc::POLLPRI != 0 && p.revents & libc::POLLPRI != 0;
        // SAFETY: the caller's sets.
        unsafe {
            if rd {
                libc::FD_SET(p.fd, r);
                count += 1;
            }
            if wr {
                libc::FD_SET(p.fd, w);
                count += 1;
            }
            if ex {
                libc::FD_SET(p.fd, e);
                count += 1;
            }
        }
    }
    count
}

// ---- epoll ------------------------------------------------------------------

fn tag(kind: u64, id: u32) -> u64 {
    TAG | kind | u64::from(id)
}

/// The eventfd's registration for `reg`: level-triggered only while the
/// caller wants EPOLLIN level-triggered (so unread bytes keep waking it);
/// edge-triggered otherwise (new completions only).
fn evt_events(reg: &Reg) -> u32 {
    if reg.disabled {
        return 0;
    }
    let lt_in = reg.events & libc::EPOLLET as u32 == 0 && reg.events & libc::EPOLLIN as u32 != 0;
    libc::EPOLLIN as u32 | if lt_in { 0 } else { libc::EPOLLET as u32 }
}

fn ctl(ep: c_int, op: c_int, fd: c_int, events: u32, data: u64) -> c_int {
    let mut ev = epoll_event { events, u64: data };
    // SAFETY: a valid event.
    unsafe { real_epoll_ctl(ep, op, fd, &mut ev) }
}

fn install(ep: c_int, fd: c_int, reg: &Reg, c: &Conn, op: c_int) -> c_int {
    let r = ctl(ep, op, fd, 0, tag(KIND_SOCK, c.id));
    if r != 0 {
        return r;
    }
    let ev = evt_events(reg);
    if ctl(
        ep,
        libc::EPOLL_CTL_MOD,
        c.eventfd(),
        ev,
        tag(KIND_EVT, c.id),
    ) != 0
    {
        ctl(
            ep,
            libc::EPOLL_CTL_ADD,
            c.eventfd(),
            ev,
            tag(KIND_EVT, c.id),
        );
    }
    0
}

/// `epoll_ctl`.
///
/// # Safety
/// The caller's event.
pub unsafe fn epoll_ctl(ep: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int {
    if ACTIVE.load(Ordering::Relaxed) == 0 {
        // SAFETY: passed on.
        return unsafe { real_epoll_ctl(ep, op, fd, ev) };
    }
    let (c, pending) = {
        let p = fds::lock();
        (p.fds.get(&fd).cloned(), p.pending.contains(&fd))
    };
    if c.is_none() && !pending {
        // SAFETY: passed on.
        return unsafe { real_epoll_ctl(ep, op, fd, ev) };
    }
    // SAFETY: the caller's event (may be null for DEL).
    let (events, data) = unsafe { ev.as_ref() }.map_or((0, 0), |e| (e.events, e.u64));
    let Some(c) = c else {
        // Pending connect: the kernel's registration, remembered so it can
        // be moved when the connection is offloaded.
        // SAFETY: passed on.
        let r = unsafe { real_epoll_ctl(ep, op, fd, ev) };
        if r == 0 {
            let mut p = EPOLLS.lock();
            let set = p.entry(ep).or_default();
            if op == libc::EPOLL_CTL_DEL {
                set.remove(&fd);
            } else {
                set.insert(
                    fd,
                    Reg {
                        events,
                        data,
                        conn: None,
                        last_gen: 0,
                        last_tx_gen: 0,
                        disabled: false,
                    },
                );
            }
        }
        return r;
    };
    match op {
        libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD => {
            let reg = Reg {
                events,
                data,
                conn: Some(c.clone()),
                last_gen: u64::MAX,
                last_tx_gen: u64::MAX,
                disabled: false,
            };
            // A MOD that leaves the eventfd's registration as it is needs
            // no system call (event loops such as wrk's and redis's switch
            // EPOLLOUT on and off around every write): the socket's own
            // registration is the tag with no events either way, and the
            // new events are checked from the connection's state.
            if op == libc::EPOLL_CTL_MOD {
                let mut p = EPOLLS.lock();
                if let Some(old) = p.get_mut(&ep).and_then(|s| s.get_mut(&fd)) {
                    if old.conn.as_ref().is_some_and(|x| Arc::ptr_eq(x, &c))
                        && evt_events(old) == evt_events(&reg)
                    {
                        *old = reg;
                        return 0;
                    }
                }
            }
            let r = install(ep, fd, &reg, &c, op);
            if r == 0 {
                EPOLLS.lock().entry(ep).or_default().insert(fd, reg);
            }
            r
        }
        libc::EPOLL_CTL_DEL => {
            // SAFETY: passed on.
            let r = unsafe { real_epoll_ctl(ep, op, fd, ev) };
            if r == 0 {
                let mut p = EPOLLS.lock();
                let set = p.entry(ep).or_default();
                set.remove(&fd);
                let other = set
                    .values()
                    .any(|x| x.conn.as_ref().is_some_and(|y| Arc::ptr_eq(y, &c)));
                drop(p);
                if !other {
                    ctl(ep, libc::EPOLL_CTL_DEL, c.eventfd(), 0, 0);
                }
            }
            r
        }
        // SAFETY: passed on (EINVAL).
        _ => unsafe { real_epoll_ctl(ep, op, fd, ev) },
    }
}

/// A pending fd became the offloaded connection `c`: move its
/// registrations.
pub fn attached(fd: c_int, c: &Arc<Conn>) {
    let mut p = EPOLLS.lock();
    let mut todo = Vec::new();
    for (ep, set) in p.iter_mut() {
        if let Some(reg) = set.get_mut(&fd) {
            reg.conn = Some(c.clone());
            reg.last_gen = u64::MAX;
            reg.last_tx_gen = u64::MAX;
            todo.push((*ep, reg.clone()));
        }
    }
    drop(p);
    for (ep, reg) in todo {
        install(ep, fd, &reg, c, libc::EPOLL_CTL_MOD);
    }
}

/// `fd` of connection `c` is going away: its registrations (the kernel
/// drops the socket's own when its last fd closes; the eventfd is ours).
pub fn closed(fd: c_int, c: &Arc<Conn>) {
    let mut p = EPOLLS.lock();
    let mut eps = Vec::new();
    for (ep, set) in p.iter_mut() {
        if set.remove(&fd).is_some() {
            let other = set
                .values()
                .any(|x| x.conn.as_ref().is_some_and(|y| Arc::ptr_eq(y, c)));
            if !other {
                eps.push(*ep);
            }
        }
    }
    drop(p);
    for ep in eps {
        ctl(ep, libc::EPOLL_CTL_DEL, c.eventfd(), 0, 0);
    }
}

/// A pending fd closed before it was offloaded.
pub fn closed_plain(fd: c_int) {
    let mut p = EPOLLS.lock();
    for set in p.values_mut() {
        set.remove(&fd);
    }
}

/// `epoll_wait`/`epoll_pwait`.
///
/// # Safety
/// `out` has room for `max` events.
pub unsafe fn epoll_wait(
    ep: c_int,
    out: *mut epoll_event,
    max: c_int,
    t: c_int,
    sigmask: Option<*const libc::sigset_t>,
) -> c_int {
    let real = |ev: *mut epoll_event, max: c_int, t: c_int| -> c_int {
        match sigmask {
            // SAFETY: passed on.
            None => unsafe { real_epoll_wait(ep, ev, max, t) },
            // SAFETY: passed on.
            Some(m) => unsafe { real_epoll_pwait(ep, ev, max, t, m) },
        }
    };
    let has = ACTIVE.load(Ordering::Relaxed) != 0 && EPOLLS.lock().contains_key(&ep);
    if !has || max <= 0 || out.is_null() {
        return real(out, max, t);
    }
    let deadline = (t >= 0).then(|| Instant::now() + std::time::Duration::from_millis(t as u64));
    // SAFETY: the caller's array.
    let outs = unsafe { std::slice::from_raw_parts_mut(out, max as usize) };
    loop {
        // 1. Offloaded registrations ready now.
        let regs: Vec<(c_int, Reg)> = EPOLLS
            .lock()
            .get(&ep)
            .map(|s| {
                s.iter()
                    .filter(|(_, r)| r.conn.is_some())
                    .map(|(f, r)| (*f, r.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let mut found: HashMap<c_int, u32> = HashMap::new();
        for (fd, reg) in &regs {
            if let Some(r) = check(ep, *fd, reg) {
                found.insert(*fd, r);
            }
        }
        // 2. The kernel's events (pending fds, plain fds, our tags).
        // Room for the kernel's events next to ours, so none is dropped.
        let room = (max as usize).saturating_sub(found.len()).max(1);
        let mut buf = vec![epoll_event { events: 0, u64: 0 }; room];
        let to = if found.is_empty() {
            remaining(deadline)
        } else {
            0
        };
        let n = if found.len() >= max as usize {
            0
        } else {
            real(buf.as_mut_ptr(), room as c_int, to)
        };
        if n < 0 {
            if !found.is_empty() {
                break emit(ep, outs, &found, &[]);
            }
            return n;
        }
        let mut plain = Vec::new();
        let mut woke = false;
        for e in &buf[..n as usize] {
            let d = e.u64;
            if d & TAG_MASK != TAG {
                plain.push(*e);
                continue;
            }
            let id = (d & 0xffff_ffff) as u32;
            let Some((fd, reg)) = regs
                .iter()
                .find(|(_, r)| r.conn.as_ref().is_some_and(|c| c.id == id))
            else {
                continue;
            };
            if d & KIND_SOCK != 0 {
                let hup = e.events & (libc::EPOLLHUP | libc::EPOLLERR) as u32;
                *found.entry(*fd).or_default() |= hup;
            } else {
                woke = true;
                if let Some(r) = check(ep, *fd, reg) {
                    *found.entry(*fd).or_default() |= r;
                }
            }
        }
        let cnt = emit(ep, outs, &found, &plain);
        if cnt > 0 || (!woke && n == 0) || remaining(deadline) == 0 {
            break cnt;
        }
    }
}

/// The events to report for registration `reg` now, if any; records the
/// report (edge and one-shot state).
fn check(ep: c_int, fd: c_int, reg: &Reg) -> Option<u32> {
    if reg.disabled {
        return None;
    }
    let c = reg.conn.as_ref()?;
    let r = readiness(c, reg.events);
    if r == 0 {
        return None;
    }
    let (gen, tx_gen) = {
        let g = c.lock();
        (g.gen, g.tx_gen)
    };
    let et = reg.events & libc::EPOLLET as u32 != 0;
    let mut r = r;
    if et {
        // An edge per change: new bytes (or EOF, error) for EPOLLIN, send
        // space come back for EPOLLOUT.
        let rd = (libc::EPOLLIN | libc::EPOLLRDNORM | libc::EPOLLRDHUP) as u32;
        let wr = (libc::EPOLLOUT | libc::EPOLLWRNORM) as u32;
        if gen == reg.last_gen {
            r &= !rd;
        }
        if tx_gen == reg.last_tx_gen {
            r &= !wr;
        }
        if r == 0 {
            return None;
        }
    }
    let mut p = EPOLLS.lock();
    if let Some(x) = p.get_mut(&ep).and_then(|s| s.get_mut(&fd)) {
        x.last_gen = gen;
        x.last_tx_gen = tx_gen;
        if x.events & libc::EPOLLONESHOT as u32 != 0 {
            x.disabled = true;
            let xr = x.clone();
            drop(p);
            ctl(
                ep,
                libc::EPOLL_CTL_MOD,
                c.eventfd(),
                evt_events(&xr),
                tag(KIND_EVT, c.id),
            );
        }
    }
    Some(r)
}

fn emit(
    ep: c_int,
    outs: &mut [epoll_event],
    found: &HashMap<c_int, u32>,
    plain: &[epoll_event],
) -> c_int {
    let p = EPOLLS.lock();
    let set = p.get(&ep);
    let mut k = 0;
    for (fd, ev) in found {
        if k == outs.len() {
            break;
        }
        if *ev == 0 {
            continue;
        }
        let Some(reg) = set.and_then(|s| s.get(fd)) else {
            continue;
        };
        outs[k] = epoll_event {
            events: *ev,
            u64: reg.data,
        };
        k += 1;
    }
    for e in plain {
        if k == outs.len() {
            break;
        }
        outs[k] = *e;
        k += 1;
    }
    k as c_int
}

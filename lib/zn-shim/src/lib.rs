//! `libzn_shim.so`: the `LD_PRELOAD` shim that moves the TCP connections of
//! unmodified applications onto ZeroNIC's offload (`docs/shim.md`).
//!
//! The application's file descriptor stays the real kernel socket. After a
//! `connect`/`accept`/`accept4` of an IPv4 TCP socket whose local address
//! is on a ZeroNIC port, the shim attaches it as a stream-mode flow (a
//! registered receive ring) and from then on serves the socket's data calls
//! itself: an attached socket's own `read`/`write` fail with EOPNOTSUPP
//! (`docs/uapi.md`). Readiness comes from the flow's CQ eventfd, which the
//! shim keeps readable exactly while bytes wait in the ring, and the
//! `poll`/`select`/`epoll` wrappers translate it to the socket's events.
//! Everything else passes through untouched, and every connection not
//! offloaded is counted by reason.

#![allow(clippy::missing_safety_doc)]

mod conn;
mod dev;
mod fds;
mod files;
mod mux;
mod per_proc;
mod pool;
mod sendfile;
mod state;
mod times;

use conn::{Conn, Io};
use nix::errno::Errno;
use nix::libc::{self, c_int, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t};
use state::{real_fn, Stats};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

zn::memhooks!();

real_fn!(fn real_connect = "connect" (fd: c_int, a: *const sockaddr, l: socklen_t) -> c_int);
real_fn!(fn real_accept = "accept" (fd: c_int, a: *mut sockaddr, l: *mut socklen_t) -> c_int);
real_fn!(fn real_accept4 = "accept4" (fd: c_int, a: *mut sockaddr, l: *mut socklen_t, f: c_int) -> c_int);
real_fn!(fn real_read = "read" (fd: c_int, b: *mut c_void, n: size_t) -> ssize_t);
real_fn!(fn real_readv = "readv" (fd: c_int, v: *const iovec, n: c_int) -> ssize_t);
real_fn!(fn real_writev = "writev" (fd: c_int, v: *const iovec, n: c_int) -> ssize_t);
real_fn!(fn real_recv = "recv" (fd: c_int, b: *mut c_void, n: size_t, f: c_int) -> ssize_t);
real_fn!(fn real_recvfrom = "recvfrom" (fd: c_int, b: *mut c_void, n: size_t, f: c_int, a: *mut sockaddr, l: *mut socklen_t) -> ssize_t);
real_fn!(fn real_recvmsg = "recvmsg" (fd: c_int, m: *mut msghdr, f: c_int) -> ssize_t);
real_fn!(fn real_send = "send" (fd: c_int, b: *const c_void, n: size_t, f: c_int) -> ssize_t);
real_fn!(fn real_sendto = "sendto" (fd: c_int, b: *const c_void, n: size_t, f: c_int, a: *const sockaddr, l: socklen_t) -> ssize_t);
real_fn!(fn real_sendmsg = "sendmsg" (fd: c_int, m: *const msghdr, f: c_int) -> ssize_t);
real_fn!(fn real_sendfile = "sendfile" (o: c_int, i: c_int, off: *mut libc::off_t, n: size_t) -> ssize_t);
real_fn!(fn real_close = "close" (fd: c_int) -> c_int);
real_fn!(fn real_dup = "dup" (fd: c_int) -> c_int);
real_fn!(fn real_dup2 = "dup2" (fd: c_int, to: c_int) -> c_int);
real_fn!(fn real_dup3 = "dup3" (fd: c_int, to: c_int, f: c_int) -> c_int);
real_fn!(fn real_fcntl = "fcntl" (fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int);
real_fn!(fn real_fcntl64 = "fcntl64" (fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int);
real_fn!(fn real_ioctl = "ioctl" (fd: c_int, req: libc::c_ulong, arg: libc::c_ulong) -> c_int);
real_fn!(fn real_shutdown = "shutdown" (fd: c_int, how: c_int) -> c_int);

fn set_errno(e: Errno) {
    Errno::set_raw(e as i32);
}

fn ret(io: Io, sigpipe: bool) -> ssize_t {
    match io {
        Io::Done(n) => n as ssize_t,
        Io::Err(e) => {
            if e == Errno::EPIPE && sigpipe {
                // SAFETY: raising SIGPIPE on ourselves, as the kernel would.
                unsafe { libc::raise(libc::SIGPIPE) };
            }
            set_errno(e);
            -1
        }
    }
}

pub(crate) fn nonblocking(fd: c_int, flags: c_int) -> bool {
    if flags & libc::MSG_DONTWAIT != 0 {
        return true;
    }
    // SAFETY: F_GETFL takes no argument.
    let fl = unsafe { real_fcntl(fd, libc::F_GETFL, 0) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// The connection behind `fd`, attaching a pending non-blocking connect
/// that has become established. `Err` for a connection a forked child
/// inherited (its data calls fail: the flow is the parent's).
fn conn(fd: c_int) -> Result<Option<Arc<Conn>>, Errno> {
    if fds::ACTIVE.load(Ordering::Relaxed) == 0 {
        if fds::inherited(fd) {
            Stats::add(&state::stats().inherited_use, 1);
            return Err(Errno::EOPNOTSUPP);
        }
        return Ok(None);
    }
    let (c, pending) = {
        let p = fds::lock();
        (p.fds.get(&fd).cloned(), p.pending.contains(&fd))
    };
    if c.is_some() {
        return Ok(c);
    }
    if pending && established(fd) {
        fds::lock().pending.remove(&fd);
        fds::ACTIVE.fetch_sub(1, Ordering::Relaxed);
        offload(fd);
        return Ok(fds::conn_of(fd));
    }
    if fds::inherited(fd) {
        Stats::add(&state::stats().inherited_use, 1);
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(None)
}

fn sockopt(fd: c_int, level: c_int, name: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut l = size_of::<c_int>() as socklen_t;
    // SAFETY: an int-sized option into `v`.
    let r = unsafe { libc::getsockopt(fd, level, name, (&raw mut v).cast(), &mut l) };
    (r == 0).then_some(v)
}

fn established(fd: c_int) -> bool {
    // SAFETY: zeroed tcp_info is valid.
    let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut l = size_of::<libc::tcp_info>() as socklen_t;
    // SAFETY: TCP_INFO into `ti`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut ti).cast(),
            &mut l,
        )
    };
    r == 0 && ti.tcpi_state == 1 /* TCP_ESTABLISHED */
}

fn addr_of(fd: c_int, peer: bool) -> Option<libc::sockaddr_in> {
    // SAFETY: zeroed sockaddr_in is valid.
    let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut l = size_of::<libc::sockaddr_in>() as socklen_t;
    // SAFETY: writing at most `l` bytes into `a`.
    let r = unsafe {
        if peer {
            libc::getpeername(fd, (&raw mut a).cast(), &mut l)
        } else {
            libc::getsockname(fd, (&raw mut a).cast(), &mut l)
        }
    };
    (r == 0 && a.sin_family == libc::AF_INET as libc::sa_family_t).then_some(a)
}

fn ip(a: &libc::sockaddr_in) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))
}

/// The interface index that has the IPv4 address `local`.
fn ifindex_of(local: std::net::Ipv4Addr) -> Option<u32> {
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates the list, freed below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return None;
    }
    let mut cur = ifa;
    let mut found = None;
    while !cur.is_null() {
        // SAFETY: a node of the list.
        let n = unsafe { &*cur };
        // SAFETY: ifa_addr is null or a sockaddr of its family.
        if !n.ifa_addr.is_null() && unsafe { (*n.ifa_addr).sa_family } == libc::AF_INET as u16 {
            // SAFETY: an AF_INET address.
            let a = unsafe { &*n.ifa_addr.cast::<libc::sockaddr_in>() };
            if ip(a) == local {
                // SAFETY: ifa_name is a C string.
                found = Some(unsafe { libc::if_nametoindex(n.ifa_name) });
                break;
            }
        }
        cur = n.ifa_next;
    }
    // SAFETY: the list from getifaddrs.
    unsafe { libc::freeifaddrs(ifa) };
    found.filter(|&i| i != 0)
}

/// Tries to offload the connected socket `fd`; counts why not.
fn offload(fd: c_int) {
    let t_checks = std::time::Instant::now();
    if fds::conn_of(fd).is_some() {
        return; // connect() again after a completed non-blocking connect
    }
    let cfg = state::config();
    let st = state::stats();
    let Some(ty) = sockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE) else {
        return;
    };
    let dom = sockopt(fd, libc::SOL_SOCKET, libc::SO_DOMAIN).unwrap_or(0);
    let proto = sockopt(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL).unwrap_or(0);
    if dom != libc::AF_INET && dom != libc::AF_INET6 {
        return; // Unix and other families are not network connections.
    }
    if ty != libc::SOCK_STREAM || proto != libc::IPPROTO_TCP {
        Stats::add(&st.fallback_not_tcp, 1);
        return;
    }
    if !cfg.enabled {
        Stats::add(&st.fallback_disabled, 1);
        return;
    }
    if dom != libc::AF_INET {
        Stats::add(&st.fallback_not_ipv4, 1);
        state::log(&format!("fd {fd}: not offloaded: IPv6"));
        return;
    }
    let (Some(local), Some(peer)) = (addr_of(fd, false), addr_of(fd, true)) else {
        Stats::add(&st.fallback_not_established, 1);
        return;
    };
    if ip(&peer).is_loopback() || ip(&local) == ip(&peer) {
        Stats::add(&st.fallback_loopback, 1);
        state::log(&format!("fd {fd}: not offloaded: loopback {}", ip(&peer)));
        return;
    }
    let Some(dev) = dev::device() else {
        Stats::add(&st.fallback_no_device, 1);
        return;
    };
    // Once per local address (getifaddrs is a netlink dump): the attach
    // itself refuses a route that does not leave through a port (ENODEV).
    let on_port = dev::on_port(ip(&local), || {
        ifindex_of(ip(&local)).is_some_and(|ifx| {
            dev.query()
                .map(|q| {
                    q.ports[..q.num_ports as usize]
                        .iter()
                        .any(|pt| pt.ifindex == ifx)
                })
                .unwrap_or(false)
        })
    });
    if !on_port {
        Stats::add(&st.fallback_route, 1);
        state::log(&format!(
            "fd {fd}: not offloaded: {} is not on a ZeroNIC port",
            ip(&local)
        ));
        return;
    }
    let id = {
        let mut p = fds::lock();
        p.next_id = p.next_id.wrapping_add(1).max(1);
        p.next_id
    };
    // No table's lock across the attach: it calls into libc, whose
    // wrappers take them.
    let pool = pool::of_process();
    let checks = t_checks.elapsed().as_micros();
    let t0 = std::time::Instant::now();
    let mut times = times::AttachTimes::default();
    match Conn::attach(&dev, pool.as_ref(), fd, id, &mut times) {
        Ok(c) => {
            let c = Arc::new(c);
            let mut p = fds::lock();
            p.fds.insert(fd, c.clone());
            p.by_id.insert(id, c.clone());
            drop(p);
            fds::ACTIVE.fetch_add(1, Ordering::Relaxed);
            Stats::add(&st.offloaded, 1);
            Stats::add(&st.open_conns, 1);
            state::log(&format!(
                "fd {fd}: offloaded {}:{} -> {}:{} (conn {id}, checks {checks} us, attached in {} us: {times})",
                ip(&local),
                u16::from_be(local.sin_port),
                ip(&peer),
                u16::from_be(peer.sin_port),
                t0.elapsed().as_micros()
            ));
            mux::attached(fd, &c);
        }
        Err(e) => {
            Stats::add(&st.fallback_attach_error, 1);
            state::log(&format!("fd {fd}: not offloaded: {e}"));
        }
    }
}

/// A new fd number for the same socket (dup family, F_DUPFD).
fn duped(old: c_int, new: c_int) {
    if new < 0 || fds::ACTIVE.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut p = fds::lock();
    if let Some(c) = p.fds.get(&old).cloned() {
        if let Some(prev) = p.fds.insert(new, c) {
            drop(p);
            forget_fd(new, Some(prev));
            return;
        }
        drop(p);
        fds::ACTIVE.fetch_add(1, Ordering::Relaxed);
    }
}

/// `fd` no longer names the connection (closed, or replaced by dup2).
fn forget_fd(fd: c_int, c: Option<Arc<Conn>>) {
    let Some(c) = c else { return };
    fds::ACTIVE.fetch_sub(1, Ordering::Relaxed);
    mux::closed(fd, &c);
    let last = {
        let mut p = fds::lock();
        let last = !p.fds.values().any(|x| Arc::ptr_eq(x, &c));
        if last {
            p.by_id.remove(&c.id);
        }
        last
    };
    if last {
        c.drain_sends(10_000);
        c.account("closed");
    }
    // The Conn (flow, regions, CQ) goes with its last Arc.
}

// ---- connection set-up ----------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, a: *const sockaddr, l: socklen_t) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real_connect(fd, a, l) };
    let e = Errno::last();
    if r == 0 {
        offload(fd);
    } else if e == Errno::EINPROGRESS && state::config().enabled {
        fds::lock().pending.insert(fd);
        fds::ACTIVE.fetch_add(1, Ordering::Relaxed);
    }
    set_errno(e);
    r
}

#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, a: *mut sockaddr, l: *mut socklen_t) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real_accept(fd, a, l) };
    if r >= 0 {
        offload(r);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    a: *mut sockaddr,
    l: *mut socklen_t,
    f: c_int,
) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real_accept4(fd, a, l, f) };
    if r >= 0 {
        offload(r);
    }
    r
}

// ---- receive ---------------------------------------------------------------

unsafe fn do_recv(fd: c_int, iov: &[(*mut u8, usize)], flags: c_int, c: &Conn) -> ssize_t {
    if flags & (libc::MSG_OOB | libc::MSG_ERRQUEUE) != 0 {
        Stats::add(&state::stats().unsupported_calls, 1);
        set_errno(Errno::EOPNOTSUPP);
        return -1;
    }
    let io = c.recv(
        iov,
        flags & libc::MSG_PEEK != 0,
        flags & libc::MSG_WAITALL != 0,
        &|| nonblocking(fd, flags),
    );
    ret(io, false)
}

macro_rules! offloaded_or {
    ($fd:expr, $pass:expr) => {
        match conn($fd) {
            Ok(Some(c)) => c,
            Ok(None) => return $pass,
            Err(e) => {
                set_errno(e);
                return -1;
            }
        }
    };
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t {
    // SAFETY: passed on.
    let c = offloaded_or!(fd, unsafe { real_read(fd, b, n) });
    // SAFETY: the caller's buffer.
    unsafe { do_recv(fd, &[(b.cast(), n)], 0, &c) }
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        // SAFETY: glibc's own abort path for FORTIFY.
        unsafe { libc::abort() };
    }
    // SAFETY: as read.
    unsafe { read(fd, b, n) }
}

#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, b: *mut c_void, n: size_t, f: c_int) -> ssize_t {
    // SAFETY: passed on.
    let c = offloaded_or!(fd, unsafe { real_recv(fd, b, n, f) });
    // SAFETY: the caller's buffer.
    unsafe { do_recv(fd, &[(b.cast(), n)], f, &c) }
}

#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    buflen: size_t,
    f: c_int,
) -> ssize_t {
    if n > buflen {
        // SAFETY: FORTIFY's abort.
        unsafe { libc::abort() };
    }
    // SAFETY: as recv.
    unsafe { recv(fd, b, n, f) }
}

#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    f: c_int,
    a: *mut sockaddr,
    l: *mut socklen_t,
) -> ssize_t {
    // SAFETY: passed on.
    let c = offloaded_or!(fd, unsafe { real_recvfrom(fd, b, n, f, a, l) });
    if !a.is_null() && !l.is_null() {
        // A connected TCP socket: the kernel leaves the address alone.
        // SAFETY: the caller's length word.
        unsafe { *l = 0 };
    }
    // SAFETY: the caller's buffer.
    unsafe { do_recv(fd, &[(b.cast(), n)], f, &c) }
}

#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    buflen: size_t,
    f: c_int,
    a: *mut sockaddr,
    l: *mut socklen_t,
) -> ssize_t {
    if n > buflen {
        // SAFETY: FORTIFY's abort.
        unsafe { libc::abort() };
    }
    // SAFETY: as recvfrom.
    unsafe { recvfrom(fd, b, n, f, a, l) }
}

unsafe fn iovs_mut(v: *const iovec, n: c_int) -> Vec<(*mut u8, usize)> {
    if v.is_null() || n <= 0 {
        return Vec::new();
    }
    // SAFETY: `n` iovecs (the caller's contract).
    unsafe { std::slice::from_raw_parts(v, n as usize) }
        .iter()
        .map(|x| (x.iov_base.cast::<u8>(), x.iov_len))
        .collect()
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, v: *const iovec, n: c_int) -> ssize_t {
    // SAFETY: passed on.
    let c = offloaded_or!(fd, unsafe { real_readv(fd, v, n) });
    // SAFETY: the caller's iovecs.
    let iov = unsafe { iovs_mut(v, n) };
    // SAFETY: the caller's buffers.
    unsafe { do_recv(fd, &iov, 0, &c) }
}

#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, m: *mut msghdr, f: c_int) -> ssize_t {
    // SAFETY: passed on.
    let c = offloaded_or!(fd, unsafe { real_recvmsg(fd, m, f) });
    // SAFETY: the caller's msghdr.
    let Some(mh) = (unsafe { m.as_mut() }) else {
        set_errno(Errno::EFAULT);
        return -1;
    };
    mh.msg_controllen = 0;
    mh.msg_flags = 0;
    // SAFETY: the caller's iovecs.
    let iov = unsafe { iovs_mut(mh.msg_iov, mh.msg_iovlen as c_int) };
    // SAFETY: the caller's buffers.
    unsafe { do_recv(fd, &iov, f, &c) }
}

// ---- send ------------------------------------------------------------------

unsafe fn do_send(fd: c_int, iov: &[(*const u8, usize)], flags: c_int, c: &Conn) -> ssize_t {
    if flags & libc::MSG_OOB != 0 {
        Stats::add(&state::stats().unsupported_calls, 1);
        set_errno(Errno::EOPNOTSUPP);
        return -1;
    }
    let io = c.send(iov, &|| nonblocking(fd, flags));
    ret(io, flags & libc::MSG_NOSIGNAL == 0)
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, b: *const c_void, n: size_t) -> ssize_t {
    // SAFETY: passed on.
    let c = offloaded_or!(fd, unsafe { state::real_write(fd, b, n) });
    // SAFETY: the caller's buffer.
    unsafe { do_send(fd, &[(b.cast(), n)], 0, &c) }
}

#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, b: *const c_void, n: size_t, f: c_int) -> ssize_t {
    // SAFETY: passed on.
    let c = offloaded_or!(fd, unsafe { real_send(fd, b, n, f) });
    // SAFETY: the caller's buffer.
    unsafe { do_send(fd, &[(b.cast(), n)], f, &c) }
}

#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    b: *const c_void,
    n: size_t,
    f: c_int,
    a: *const sockaddr,
    l: socklen_t,
) -> ssize_t {
    // SAFETY: passed on.
    let c = offloaded_or!(fd, unsafe { real_sendto(fd, b, n, f, a, l) });
    // SAFETY: the caller's buffer (a connected socket ignores the address).
    unsafe { do_send(fd, &[(b.cast(), n)], f, &c) }
}

unsafe fn iovs(v: *const iovec, n: c_int) -> Vec<(*const u8, usize)> {
    // SAFETY: as iovs_mut.
    unsafe { iovs_mut(v, n) }
        .into_iter()
        .map(|(p, l)| (p.cast_const(), l))
        .collect()
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, v: *const iovec, n: c_int) -> ssize_t {
    // SAFETY: passed on.
    let c = offloaded_or!(fd, unsafe { real_writev(fd, v, n) });
    // SAFETY: the caller's iovecs.
    let iov = unsafe { iovs(v, n) };
    // SAFETY: the caller's buffers.
    unsafe { do_send(fd, &iov, 0, &c) }
}

#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, m: *const msghdr, f: c_int) -> ssize_t {
    // SAFETY: passed on.
    let c = offloaded_or!(fd, unsafe { real_sendmsg(fd, m, f) });
    // SAFETY: the caller's msghdr.
    let Some(mh) = (unsafe { m.as_ref() }) else {
        set_errno(Errno::EFAULT);
        return -1;
    };
    if mh.msg_controllen != 0 {
        // Ancillary data (SCM_RIGHTS, ...) cannot ride the offload.
        Stats::add(&state::stats().unsupported_calls, 1);
        set_errno(Errno::EOPNOTSUPP);
        return -1;
    }
    // SAFETY: the caller's iovecs.
    let iov = unsafe { iovs(mh.msg_iov, mh.msg_iovlen as c_int) };
    // SAFETY: the caller's buffers.
    unsafe { do_send(fd, &iov, f, &c) }
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(o: c_int, i: c_int, off: *mut libc::off_t, n: size_t) -> ssize_t {
    // SAFETY: passed on.
    let c = offloaded_or!(o, unsafe { real_sendfile(o, i, off, n) });
    // SAFETY: the caller's arguments.
    match unsafe { sendfile::sendfile(o, i, off, n, &c, &|| nonblocking(o, 0)) } {
        Ok(k) => k as ssize_t,
        Err(e) => ret(Io::Err(e), true),
    }
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    o: c_int,
    i: c_int,
    off: *mut libc::off_t,
    n: size_t,
) -> ssize_t {
    // SAFETY: off_t is 64-bit on x86_64: the same call.
    unsafe { sendfile(o, i, off, n) }
}

// ---- descriptors -----------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if fds::ACTIVE.load(Ordering::Relaxed) != 0 {
        let (c, pending) = {
            let mut p = fds::lock();
            (p.fds.remove(&fd), p.pending.remove(&fd))
        };
        if pending {
            fds::ACTIVE.fetch_sub(1, Ordering::Relaxed);
            mux::closed_plain(fd);
        }
        forget_fd(fd, c);
    }
    // SAFETY: passed on.
    unsafe { real_close(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real_dup(fd) };
    duped(fd, r);
    r
}

fn replaced(to: c_int) {
    if fds::ACTIVE.load(Ordering::Relaxed) == 0 {
        return;
    }
    let c = fds::lock().fds.remove(&to);
    forget_fd(to, c);
}

#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, to: c_int) -> c_int {
    if fd != to {
        replaced(to);
    }
    // SAFETY: passed on.
    let r = unsafe { real_dup2(fd, to) };
    if fd != to {
        duped(fd, r);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, to: c_int, f: c_int) -> c_int {
    if fd != to {
        replaced(to);
    }
    // SAFETY: passed on.
    let r = unsafe { real_dup3(fd, to, f) };
    duped(fd, r);
    r
}

unsafe fn fcntl_common(fd: c_int, cmd: c_int, arg: libc::c_ulong, f64: bool) -> c_int {
    // SAFETY: passed on (the variadic argument as the register it came in).
    let r = unsafe {
        if f64 {
            real_fcntl64(fd, cmd, arg)
        } else {
            real_fcntl(fd, cmd, arg)
        }
    };
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        duped(fd, r);
    }
    r
}

/// `fcntl(fd, cmd, ...)`: O_NONBLOCK stays the kernel's file flag (read on
/// every data call); F_DUPFD names the connection twice.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int {
    // SAFETY: passed on.
    unsafe { fcntl_common(fd, cmd, arg, false) }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int {
    // SAFETY: passed on.
    unsafe { fcntl_common(fd, cmd, arg, true) }
}

/// `ioctl`: FIONREAD of an offloaded socket counts the ring's bytes;
/// FIONBIO sets the kernel's flag as usual.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: libc::c_ulong, arg: libc::c_ulong) -> c_int {
    if req == libc::FIONREAD && fds::ACTIVE.load(Ordering::Relaxed) != 0 {
        if let Ok(Some(c)) = conn(fd) {
            let n = c.pending().min(c_int::MAX as usize) as c_int;
            // SAFETY: FIONREAD's argument is an int pointer.
            unsafe { *(arg as *mut c_int) = n };
            return 0;
        }
    }
    // SAFETY: passed on.
    unsafe { real_ioctl(fd, req, arg) }
}

/// `shutdown`: the posted sends go out first, so the FIN follows them.
#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    if let Ok(Some(c)) = conn(fd) {
        if how == libc::SHUT_WR || how == libc::SHUT_RDWR {
            c.drain_sends(10_000);
            c.lock().shut_wr = true;
        }
    }
    // SAFETY: passed on.
    unsafe { real_shutdown(fd, how) }
}

// ---- readiness: see mux.rs --------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn poll(f: *mut libc::pollfd, n: libc::nfds_t, t: c_int) -> c_int {
    // SAFETY: the caller's array.
    unsafe { mux::poll(f, n, t, None) }
}

#[no_mangle]
pub unsafe extern "C" fn __poll_chk(
    f: *mut libc::pollfd,
    n: libc::nfds_t,
    t: c_int,
    fdslen: size_t,
) -> c_int {
    if (fdslen / size_of::<libc::pollfd>()) < n as usize {
        // SAFETY: FORTIFY's abort.
        unsafe { libc::abort() };
    }
    // SAFETY: the caller's array.
    unsafe { mux::poll(f, n, t, None) }
}

#[no_mangle]
pub unsafe extern "C" fn ppoll(
    f: *mut libc::pollfd,
    n: libc::nfds_t,
    ts: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's timespec or null.
    let t = match unsafe { ts.as_ref() } {
        None => -1,
        Some(ts) => (ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000).min(c_int::MAX as i64) as c_int,
    };
    // SAFETY: the caller's array and mask.
    unsafe { mux::poll(f, n, t, Some(sigmask)) }
}

#[no_mangle]
pub unsafe extern "C" fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    t: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's sets.
    unsafe { mux::select(n, r, w, e, t) }
}

#[no_mangle]
pub unsafe extern "C" fn pselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    ts: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's sets.
    unsafe { mux::pselect(n, r, w, e, ts, sigmask) }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    ep: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut libc::epoll_event,
) -> c_int {
    // SAFETY: the caller's event.
    unsafe { mux::epoll_ctl(ep, op, fd, ev) }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    ep: c_int,
    ev: *mut libc::epoll_event,
    max: c_int,
    t: c_int,
) -> c_int {
    // SAFETY: the caller's array.
    unsafe { mux::epoll_wait(ep, ev, max, t, None) }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    ep: c_int,
    ev: *mut libc::epoll_event,
    max: c_int,
    t: c_int,
    sigmask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's array and mask.
    unsafe { mux::epoll_wait(ep, ev, max, t, Some(sigmask)) }
}

extern "C" fn at_exit() {
    // Connections still open: their counters too.
    for c in fds::open_at_exit() {
        c.account("open at exit");
    }
    state::report();
}

static INIT: AtomicUsize = AtomicUsize::new(0);

/// Reads the configuration while the environment is the one the program
/// was started with (nginx, for one, replaces `environ` in its workers
/// before they accept a connection: a first read there would find no
/// `ZN_SHIM_*` variable), and registers the exit report (`ZN_SHIM_STATS`).
#[used]
#[link_section = ".init_array"]
static CTOR: extern "C" fn() = {
    extern "C" fn ctor() {
        if INIT.swap(1, Ordering::Relaxed) == 0 {
            state::config();
            // SAFETY: registering plain functions.
            unsafe { libc::pthread_atfork(None, None, Some(state::after_fork_child)) };
            // SAFETY: registering a plain function.
            unsafe { libc::atexit(at_exit) };
        }
    }
    ctor
};

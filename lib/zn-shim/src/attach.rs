//! Attaching one connection: `setsockopt(TCP_ULP, "zeronic")`, counted
//! and logged. The kernel decides whether the connection can be attached
//! (docs/uapi.md, "Attaching a socket by setsockopt"): the shim does not
//! look at routes or ports itself, it counts the errno it gets.
//!
//! Everything here is async-signal-safe (system calls, atomics, lines on
//! the stack): it runs inside the wrappers of `lib.rs`.

use crate::line::Line;
use crate::stats::{self, Stats};
use crate::{config, pending, real};
use nix::libc::{self, c_int, socklen_t};
use std::fmt::Write;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// How the connection came to be, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    Connect,
    Accept,
    /// At the first data call after a non-blocking connect.
    Late,
}

fn int_opt(fd: c_int, level: c_int, name: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut l = size_of::<c_int>() as socklen_t;
    // SAFETY: an int-sized option into `v`.
    let r = unsafe { real::getsockopt(fd, level, name, (&raw mut v).cast(), &mut l) };
    (r == 0).then_some(v)
}

/// Whether `fd` is a TCP socket (one system call: `SO_PROTOCOL` is 0 for
/// Unix sockets, 17 for UDP, 262 for MPTCP).
pub fn is_tcp(fd: c_int) -> bool {
    int_opt(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL) == Some(libc::IPPROTO_TCP)
}

/// TCP's state of `fd` (`TCP_ESTABLISHED` is 1, `TCP_SYN_SENT` 2).
pub fn tcp_state(fd: c_int) -> Option<u8> {
    // SAFETY: zeroed tcp_info is valid.
    let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut l = size_of::<libc::tcp_info>() as socklen_t;
    // SAFETY: TCP_INFO into `ti`, at most `l` bytes.
    let r = unsafe {
        real::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut ti).cast(),
            &mut l,
        )
    };
    (r == 0 && l >= 1).then_some(ti.tcpi_state)
}

fn sockaddr(fd: c_int, peer: bool) -> Option<SocketAddr> {
    // SAFETY: zeroed sockaddr_storage is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut l = size_of::<libc::sockaddr_storage>() as socklen_t;
    let p = (&raw mut ss).cast();
    // SAFETY: at most `l` bytes into `ss`.
    let r = unsafe {
        if peer {
            libc::getpeername(fd, p, &mut l)
        } else {
            libc::getsockname(fd, p, &mut l)
        }
    };
    if r != 0 {
        return None;
    }
    match c_int::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: an AF_INET address fills a sockaddr_in.
            let a: libc::sockaddr_in = unsafe { std::ptr::read((&raw const ss).cast()) };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::new(ip.into(), u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address fills a sockaddr_in6.
            let a: libc::sockaddr_in6 = unsafe { std::ptr::read((&raw const ss).cast()) };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::new(ip.into(), u16::from_be(a.sin6_port)))
        }
        _ => None,
    }
}

fn log(fd: c_int, how: How, what: impl FnOnce(&mut Line<320>)) {
    let Some(dest) = config::get().log.as_ref() else {
        return;
    };
    let mut l = Line::<320>::new();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let _ = write!(l, "zn-shim[{pid}]: fd {fd} ({how:?}): ");
    what(&mut l);
    l.emit(dest);
}

/// Attaches the TCP connection `fd`, established now. The caller's errno
/// is the caller's to keep (this changes it).
pub fn attach(fd: c_int, how: How) {
    let st = stats::get();
    Stats::add(&st.connections);
    if !config::get().enabled {
        Stats::add(&st.disabled);
        return;
    }
    let t0 = std::time::Instant::now();
    // SAFETY: the option value is the ULP's name, a static string.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_TCP,
            libc::TCP_ULP,
            zn::ulp::ULP_NAME.as_ptr().cast(),
            zn::ulp::ULP_NAME.to_bytes().len() as socklen_t,
        )
    };
    let us = t0.elapsed().as_micros();
    if r == 0 {
        Stats::add(&st.attached);
        if how == How::Late {
            Stats::add(&st.attached_late);
        }
        log(fd, how, |l| {
            let _ = write!(l, "attached");
            if let (Some(a), Some(b)) = (sockaddr(fd, false), sockaddr(fd, true)) {
                let _ = write!(l, " {a} -> {b}");
            }
            let _ = write!(l, " in {us} us");
        });
    } else {
        let e = nix::errno::Errno::last();
        Stats::add(st.of_errno(e as c_int));
        log(fd, how, |l| {
            let _ = write!(
                l,
                "not attached: errno {} {e:?} ({})",
                e as c_int,
                zn::ulp::refusal(e)
            );
        });
    }
}

/// After a `connect()` that returned `r` with errno `e`: attach now, or
/// mark the socket for its first data call once the connect completes.
///
/// A program that polls a non-blocking connect by calling `connect()`
/// again (hiredis does) gets 0 or `EISCONN` the second time: the mark
/// set by the first call goes, and the socket is attached there, once.
pub fn after_connect(fd: c_int, r: c_int, e: c_int) {
    if r == 0 {
        let was_pending = pending::take(fd);
        if was_pending || is_tcp(fd) {
            attach(fd, if was_pending { How::Late } else { How::Connect });
        }
    } else if e == libc::EISCONN {
        if pending::take(fd) {
            attach(fd, How::Late);
        }
    } else if (e == libc::EINPROGRESS || e == libc::EINTR) && is_tcp(fd) && !pending::mark(fd) {
        Stats::add(&stats::get().untracked);
    }
}

/// Before a data call on `fd`: if its non-blocking connect was pending,
/// attach it once established (or keep it pending while it connects).
#[inline]
pub fn settle(fd: c_int) {
    if pending::any() {
        settle_slow(fd);
    }
}

#[cold]
fn settle_slow(fd: c_int) {
    if !pending::take(fd) {
        return;
    }
    const TCP_ESTABLISHED: u8 = 1;
    const TCP_SYN_SENT: u8 = 2;
    match tcp_state(fd) {
        Some(TCP_ESTABLISHED) => attach(fd, How::Late),
        Some(TCP_SYN_SENT) => {
            pending::mark(fd);
        }
        _ => Stats::add(&stats::get().connect_failed),
    }
}

/// `fd` is closed (or replaced by `dup2`/`dup3`): a pending connect on it
/// is over.
pub fn forget(fd: c_int) {
    if pending::take(fd) {
        Stats::add(&stats::get().closed_pending);
    }
}

//! `libzn_shim.so`: the `LD_PRELOAD` shim that attaches the TCP
//! connections of unmodified applications to ZeroNIC (`docs/shim.md`).
//!
//! After a `connect`, `accept` or `accept4` that gives an established TCP
//! connection, the shim calls `setsockopt(fd, SOL_TCP, TCP_ULP,
//! "zeronic")` on it, and that is all: the attached socket serves itself
//! in the kernel (docs/uapi.md, "Attaching a socket by setsockopt"), so
//! `read`, `write`, `poll`, `epoll`, `fork`, `dup`, `SCM_RIGHTS`, signals,
//! `exit` and io_uring behave as Linux's because they are Linux's. A
//! non-blocking `connect` is attached at its first data call once
//! established (`pending.rs`); the data-call wrappers below exist only
//! for that, and cost one relaxed load while no connect is pending.
//! Nothing here takes a lock or allocates after load, so any wrapper may
//! run in a signal handler.

#![allow(clippy::missing_safety_doc)]

mod attach;
mod config;
mod line;
mod pending;
mod real;
mod stats;

use nix::libc::{
    self, c_int, c_void, iovec, mmsghdr, msghdr, size_t, sockaddr, socklen_t, ssize_t,
};

/// Runs `f` and gives the caller back the errno of the call it wraps.
fn keep_errno(f: impl FnOnce()) {
    let e = nix::errno::Errno::last_raw();
    f();
    nix::errno::Errno::set_raw(e);
}

// ---- connection set-up ----------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, a: *const sockaddr, l: socklen_t) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real::connect(fd, a, l) };
    keep_errno(|| attach::after_connect(fd, r, nix::errno::Errno::last_raw()));
    r
}

#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, a: *mut sockaddr, l: *mut socklen_t) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real::accept(fd, a, l) };
    if r >= 0 {
        keep_errno(|| {
            if attach::is_tcp(r) {
                attach::attach(r, attach::How::Accept)
            }
        });
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
    let r = unsafe { real::accept4(fd, a, l, f) };
    if r >= 0 {
        keep_errno(|| {
            if attach::is_tcp(r) {
                attach::attach(r, attach::How::Accept)
            }
        });
    }
    r
}

// ---- the first data call after a non-blocking connect ----------------------

/// Wrappers that settle a pending connect on their descriptor, then call
/// the real function with the same arguments.
macro_rules! settling {
    ($(fn $name:ident = real::$real:ident ($fd:ident: c_int $(, $a:ident: $t:ty)*) -> $r:ty;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($fd: c_int $(, $a: $t)*) -> $r {
            attach::settle($fd);
            // SAFETY: passed on.
            unsafe { real::$real($fd $(, $a)*) }
        }
    )*};
}

settling! {
    fn read = real::read (fd: c_int, b: *mut c_void, n: size_t) -> ssize_t;
    fn __read_chk = real::read_chk (fd: c_int, b: *mut c_void, n: size_t, bl: size_t) -> ssize_t;
    fn readv = real::readv (fd: c_int, v: *const iovec, n: c_int) -> ssize_t;
    fn recv = real::recv (fd: c_int, b: *mut c_void, n: size_t, f: c_int) -> ssize_t;
    fn __recv_chk = real::recv_chk (fd: c_int, b: *mut c_void, n: size_t, bl: size_t, f: c_int) -> ssize_t;
    fn recvfrom = real::recvfrom (fd: c_int, b: *mut c_void, n: size_t, f: c_int, a: *mut sockaddr, l: *mut socklen_t) -> ssize_t;
    fn __recvfrom_chk = real::recvfrom_chk (fd: c_int, b: *mut c_void, n: size_t, bl: size_t, f: c_int, a: *mut sockaddr, l: *mut socklen_t) -> ssize_t;
    fn recvmsg = real::recvmsg (fd: c_int, m: *mut msghdr, f: c_int) -> ssize_t;
    fn recvmmsg = real::recvmmsg (fd: c_int, m: *mut mmsghdr, n: libc::c_uint, f: c_int, t: *mut libc::timespec) -> c_int;
    fn write = real::write (fd: c_int, b: *const c_void, n: size_t) -> ssize_t;
    fn writev = real::writev (fd: c_int, v: *const iovec, n: c_int) -> ssize_t;
    fn send = real::send (fd: c_int, b: *const c_void, n: size_t, f: c_int) -> ssize_t;
    fn sendto = real::sendto (fd: c_int, b: *const c_void, n: size_t, f: c_int, a: *const sockaddr, l: socklen_t) -> ssize_t;
    fn sendmsg = real::sendmsg (fd: c_int, m: *const msghdr, f: c_int) -> ssize_t;
    fn sendmmsg = real::sendmmsg (fd: c_int, m: *mut mmsghdr, n: libc::c_uint, f: c_int) -> c_int;
    // The socket is sendfile's first argument.
    fn sendfile = real::sendfile (fd: c_int, i: c_int, off: *mut libc::off_t, n: size_t) -> ssize_t;
    fn sendfile64 = real::sendfile64 (fd: c_int, i: c_int, off: *mut libc::off64_t, n: size_t) -> ssize_t;
    // getsockopt(SO_ERROR) is how a non-blocking connect learns it
    // completed.
    fn getsockopt = real::getsockopt (fd: c_int, lv: c_int, nm: c_int, v: *mut c_void, l: *mut socklen_t) -> c_int;
}

// ---- descriptors that stop naming a pending connect -------------------------

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    attach::forget(fd);
    // SAFETY: passed on.
    unsafe { real::close(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, to: c_int) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real::dup2(fd, to) };
    if r >= 0 && fd != to {
        keep_errno(|| attach::forget(to));
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, to: c_int, f: c_int) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real::dup3(fd, to, f) };
    if r >= 0 {
        keep_errno(|| attach::forget(to));
    }
    r
}

// ---- load, fork, exit ---------------------------------------------------------

/// `pthread_atfork` child handler: the counters are per process.
extern "C" fn after_fork_child() {
    stats::get().reset();
}

/// Writes the counters where `ZN_SHIM_STATS` says.
extern "C" fn at_exit() {
    if let Some(dest) = config::get().stats.as_ref() {
        let mut l = line::Line::<1024>::new();
        // SAFETY: getpid has no preconditions.
        stats::get().render(unsafe { libc::getpid() }, &mut l);
        l.emit(dest);
    }
}

/// At load: reads the configuration (so no wrapper allocates it later),
/// and registers the fork handler and the exit report.
#[used]
#[link_section = ".init_array"]
static CTOR: extern "C" fn() = {
    extern "C" fn ctor() {
        config::get();
        // SAFETY: registering plain functions.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
        // SAFETY: registering a plain function.
        unsafe { libc::atexit(at_exit) };
    }
    ctor
};

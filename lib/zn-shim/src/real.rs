//! The libc functions behind the shim's wrappers, found once with
//! `dlsym(RTLD_NEXT)`. The shim calls these, never the names it exports
//! itself (a call from inside the shim to `close` would come back to the
//! shim's own `close`).

use nix::libc::{
    self, c_int, c_void, iovec, mmsghdr, msghdr, size_t, sockaddr, socklen_t, ssize_t,
};

/// Resolves the next definition of a libc function (`RTLD_NEXT`), once.
/// Lock-free and allocation-free, so a wrapper may run in a signal handler.
macro_rules! real_fn {
    ($vis:vis fn $name:ident = $sym:literal ($($a:ident: $t:ty),*) -> $r:ty) => {
        /// The real function behind the shim's wrapper.
        ///
        /// # Safety
        /// As the libc function.
        $vis unsafe fn $name($($a: $t),*) -> $r {
            static P: ::std::sync::atomic::AtomicUsize = ::std::sync::atomic::AtomicUsize::new(0);
            let mut p = P.load(::std::sync::atomic::Ordering::Relaxed);
            if p == 0 {
                // SAFETY: dlsym with a NUL-terminated name.
                p = unsafe { libc::dlsym(libc::RTLD_NEXT, concat!($sym, "\0").as_ptr().cast()) } as usize;
                if p == 0 {
                    // No libc under us: nothing sensible to call. Not
                    // reachable from input; abort rather than unwind
                    // through C.
                    // SAFETY: abort has no preconditions.
                    unsafe { libc::abort() };
                }
                P.store(p, ::std::sync::atomic::Ordering::Relaxed);
            }
            // SAFETY: the symbol's C type, as declared by libc.
            let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(p) };
            // SAFETY: the caller's contract.
            unsafe { f($($a),*) }
        }
    };
}

real_fn!(pub fn connect = "connect" (fd: c_int, a: *const sockaddr, l: socklen_t) -> c_int);
real_fn!(pub fn accept = "accept" (fd: c_int, a: *mut sockaddr, l: *mut socklen_t) -> c_int);
real_fn!(pub fn accept4 = "accept4" (fd: c_int, a: *mut sockaddr, l: *mut socklen_t, f: c_int) -> c_int);
real_fn!(pub fn getsockopt = "getsockopt" (fd: c_int, lv: c_int, n: c_int, v: *mut c_void, l: *mut socklen_t) -> c_int);
real_fn!(pub fn read = "read" (fd: c_int, b: *mut c_void, n: size_t) -> ssize_t);
real_fn!(pub fn read_chk = "__read_chk" (fd: c_int, b: *mut c_void, n: size_t, bl: size_t) -> ssize_t);
real_fn!(pub fn readv = "readv" (fd: c_int, v: *const iovec, n: c_int) -> ssize_t);
real_fn!(pub fn recv = "recv" (fd: c_int, b: *mut c_void, n: size_t, f: c_int) -> ssize_t);
real_fn!(pub fn recv_chk = "__recv_chk" (fd: c_int, b: *mut c_void, n: size_t, bl: size_t, f: c_int) -> ssize_t);
real_fn!(pub fn recvfrom = "recvfrom" (fd: c_int, b: *mut c_void, n: size_t, f: c_int, a: *mut sockaddr, l: *mut socklen_t) -> ssize_t);
real_fn!(pub fn recvfrom_chk = "__recvfrom_chk" (fd: c_int, b: *mut c_void, n: size_t, bl: size_t, f: c_int, a: *mut sockaddr, l: *mut socklen_t) -> ssize_t);
real_fn!(pub fn recvmsg = "recvmsg" (fd: c_int, m: *mut msghdr, f: c_int) -> ssize_t);
real_fn!(pub fn recvmmsg = "recvmmsg" (fd: c_int, m: *mut mmsghdr, n: libc::c_uint, f: c_int, t: *mut libc::timespec) -> c_int);
real_fn!(pub fn write = "write" (fd: c_int, b: *const c_void, n: size_t) -> ssize_t);
real_fn!(pub fn writev = "writev" (fd: c_int, v: *const iovec, n: c_int) -> ssize_t);
real_fn!(pub fn send = "send" (fd: c_int, b: *const c_void, n: size_t, f: c_int) -> ssize_t);
real_fn!(pub fn sendto = "sendto" (fd: c_int, b: *const c_void, n: size_t, f: c_int, a: *const sockaddr, l: socklen_t) -> ssize_t);
real_fn!(pub fn sendmsg = "sendmsg" (fd: c_int, m: *const msghdr, f: c_int) -> ssize_t);
real_fn!(pub fn sendmmsg = "sendmmsg" (fd: c_int, m: *mut mmsghdr, n: libc::c_uint, f: c_int) -> c_int);
real_fn!(pub fn sendfile = "sendfile" (o: c_int, i: c_int, off: *mut libc::off_t, n: size_t) -> ssize_t);
real_fn!(pub fn sendfile64 = "sendfile64" (o: c_int, i: c_int, off: *mut libc::off64_t, n: size_t) -> ssize_t);
real_fn!(pub fn close = "close" (fd: c_int) -> c_int);
real_fn!(pub fn dup2 = "dup2" (fd: c_int, to: c_int) -> c_int);
real_fn!(pub fn dup3 = "dup3" (fd: c_int, to: c_int, f: c_int) -> c_int);

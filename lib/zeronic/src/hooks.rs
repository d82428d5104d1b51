//! The memory hooks behind [`crate::memhooks!`]: each invalidates the
//! registration caches for the range it is about to change
//! ([`crate::cache::invalidate_begin`]), does the real call, and ends the
//! invalidation ([`crate::cache::invalidate_end`]). The real call is: the
//! system call itself for the memory-map calls, glibc's `__sbrk` for the
//! break, and for `free`/`realloc` the next definition in the lookup order
//! (`dlsym(RTLD_NEXT)`): the process may use another allocator than
//! glibc's (redis-server runs on jemalloc), whose blocks only its own
//! `free` may release.

use crate::cache::{any_cached, invalidate_begin, invalidate_end, Invalidation};
use nix::libc::{self, c_int, c_void, off_t, size_t};

/// Ends an invalidation the hook began, if it began one.
fn end(inv: Option<Invalidation>) {
    if let Some(inv) = inv {
        invalidate_end(inv);
    }
}

const MAP_FIXED_ANY: c_int = libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE;

extern "C" {
    fn __libc_free(p: *mut c_void);
    fn __libc_realloc(p: *mut c_void, n: size_t) -> *mut c_void;
    fn __sbrk(inc: libc::intptr_t) -> *mut c_void;
}

use std::sync::atomic::{AtomicUsize, Ordering};

/// The next definition of `name` (a NUL-terminated symbol), or `fallback`.
fn next(slot: &AtomicUsize, name: &[u8], fallback: usize) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: a NUL-terminated name; dlsym does not call free on success.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    let f = if f == 0 { fallback } else { f };
    slot.store(f, Ordering::Relaxed);
    f
}

fn next_free() -> unsafe extern "C" fn(*mut c_void) {
    static P: AtomicUsize = AtomicUsize::new(0);
    let f = next(&P, b"free\0", __libc_free as *const () as usize);
    // SAFETY: the C type of free().
    unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void)>(f) }
}

fn next_realloc() -> unsafe extern "C" fn(*mut c_void, size_t) -> *mut c_void {
    static P: AtomicUsize = AtomicUsize::new(0);
    let f = next(&P, b"realloc\0", __libc_realloc as *const () as usize);
    // SAFETY: the C type of realloc().
    unsafe {
        std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void, size_t) -> *mut c_void>(f)
    }
}

/// Resolves the next allocator's entries at load time (from the library's
/// constructor), so no `dlsym` runs inside a `free` called from an unknown
/// context later.
pub fn init() {
    let _ = next_free();
    let _ = next_realloc();
    let _ = usable_size(std::ptr::null_mut());
}

fn usable_size(p: *mut c_void) -> size_t {
    static P: AtomicUsize = AtomicUsize::new(0);
    let f = next(
        &P,
        b"malloc_usable_size\0",
        libc::malloc_usable_size as *const () as usize,
    );
    // SAFETY: the C type of malloc_usable_size(); `p` is a live block of
    // the same allocator as the free/realloc it goes to.
    unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void) -> size_t>(f)(p) }
}

/// `munmap`.
///
/// # Safety
/// As `munmap(2)`.
pub unsafe fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let inv = invalidate_begin(addr as usize, len);
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int };
    invalidate_end(inv);
    r
}

/// `mmap`/`mmap64`: a fixed mapping replaces what was there.
///
/// # Safety
/// As `mmap(2)`.
pub unsafe fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    let inv =
        (flags & MAP_FIXED_ANY == libc::MAP_FIXED).then(|| invalidate_begin(addr as usize, len));
    // SAFETY: the caller's arguments, passed on.
    let r =
        unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut c_void };
    end(inv);
    r
}

/// `mremap` (the fifth argument read only with `MREMAP_FIXED`, as the
/// kernel does).
///
/// # Safety
/// As `mremap(2)`.
pub unsafe fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let inv_old = invalidate_begin(old as usize, old_len);
    let inv_new =
        (flags & libc::MREMAP_FIXED != 0).then(|| invalidate_begin(new_addr as usize, new_len));
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe {
        libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr) as *mut c_void
    };
    end(inv_new);
    invalidate_end(inv_old);
    r
}

/// `madvise`: the advice that drops or replaces pages invalidates.
///
/// # Safety
/// As `madvise(2)`.
pub unsafe fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    let inv = matches!(
        advice,
        libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE | libc::MADV_DONTNEED_LOCKED
    )
    .then(|| invalidate_begin(addr as usize, len));
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) as c_int };
    end(inv);
    r
}

/// `sbrk`: a negative increment gives the top of the heap back.
///
/// # Safety
/// As `sbrk(2)`.
pub unsafe fn sbrk(inc: libc::intptr_t) -> *mut c_void {
    let inv = (inc < 0 && any_cached()).then(|| {
        // SAFETY: sbrk(0) only reads the break.
        let cur = unsafe { __sbrk(0) } as usize;
        invalidate_begin(cur.wrapping_sub(inc.unsigned_abs()), inc.unsigned_abs())
    });
    // SAFETY: the caller's argument, passed on to glibc's own entry.
    let r = unsafe { __sbrk(inc) };
    end(inv);
    r
}

/// `brk`, through `sbrk` (glibc's break bookkeeping stays right).
///
/// # Safety
/// As `brk(2)`.
pub unsafe fn brk(addr: *mut c_void) -> c_int {
    // SAFETY: sbrk(0) only reads the break.
    let cur = unsafe { __sbrk(0) } as isize;
    let inc = (addr as isize).wrapping_sub(cur);
    // SAFETY: the same move of the break, through the hook above.
    if unsafe { sbrk(inc) } as isize == -1 {
        -1
    } else {
        0
    }
}

/// `free`: the block may be unmapped (a large chunk) or trimmed.
///
/// # Safety
/// As `free(3)`.
pub unsafe fn free(p: *mut c_void) {
    let inv = (!p.is_null() && any_cached()).then(|| invalidate_begin(p as usize, usable_size(p)));
    // SAFETY: passed on to the allocator's own free.
    unsafe { next_free()(p) };
    end(inv);
}

/// `realloc`: the old block may move (and its memory be reused).
///
/// # Safety
/// As `realloc(3)`.
pub unsafe fn realloc(p: *mut c_void, n: size_t) -> *mut c_void {
    let inv = (!p.is_null() && any_cached()).then(|| invalidate_begin(p as usize, usable_size(p)));
    // SAFETY: passed on to the allocator's own realloc.
    let r = unsafe { next_realloc()(p, n) };
    end(inv);
    r
}

/// Defines the memory hooks as exported C symbols of the crate that invokes
/// it (a `cdylib`: `#[no_mangle]` items of a dependency are not exported
/// from it, rust-lang/rust#50007). Used by `libzeronic.so` and the shim.
#[macro_export]
macro_rules! memhooks {
    () => {
        mod zn_memhooks {
            use $crate::nix::libc::{c_int, c_void, intptr_t, off_t, size_t};
            #[used]
            #[link_section = ".init_array"]
            static ZN_MEMHOOKS_INIT: extern "C" fn() = {
                extern "C" fn init() {
                    $crate::hooks::init();
                }
                init
            };
            /// # Safety
            /// As munmap(2).
            #[no_mangle]
            pub unsafe extern "C" fn munmap(a: *mut c_void, l: size_t) -> c_int {
                // SAFETY: the caller's contract.
                unsafe { $crate::hooks::munmap(a, l) }
            }
            /// # Safety
            /// As mmap(2).
            #[no_mangle]
            pub unsafe extern "C" fn mmap(
                a: *mut c_void,
                l: size_t,
                p: c_int,
                f: c_int,
                fd: c_int,
                o: off_t,
            ) -> *mut c_void {
                // SAFETY: the caller's contract.
                unsafe { $crate::hooks::mmap(a, l, p, f, fd, o) }
            }
            /// # Safety
            /// As mmap(2).
            #[no_mangle]
            pub unsafe extern "C" fn mmap64(
                a: *mut c_void,
                l: size_t,
                p: c_int,
                f: c_int,
                fd: c_int,
                o: off_t,
            ) -> *mut c_void {
                // SAFETY: the caller's contract.
                unsafe { $crate::hooks::mmap(a, l, p, f, fd, o) }
            }
            /// # Safety
            /// As mremap(2).
            #[no_mangle]
            pub unsafe extern "C" fn mremap(
                o: *mut c_void,
                ol: size_t,
                nl: size_t,
                f: c_int,
                na: *mut c_void,
            ) -> *mut c_void {
                // SAFETY: the caller's contract.
                unsafe { $crate::hooks::mremap(o, ol, nl, f, na) }
            }
            /// # Safety
            /// As madvise(2).
            #[no_mangle]
            pub unsafe extern "C" fn madvise(a: *mut c_void, l: size_t, adv: c_int) -> c_int {
                // SAFETY: the caller's contract.
                unsafe { $crate::hooks::madvise(a, l, adv) }
            }
            /// # Safety
            /// As sbrk(2).
            #[no_mangle]
            pub unsafe extern "C" fn sbrk(i: intptr_t) -> *mut c_void {
                // SAFETY: the caller's contract.
                unsafe { $crate::hooks::sbrk(i) }
            }
            /// # Safety
            /// As brk(2).
            #[no_mangle]
            pub unsafe extern "C" fn brk(a: *mut c_void) -> c_int {
                // SAFETY: the caller's contract.
                unsafe { $crate::hooks::brk(a) }
            }
            /// # Safety
            /// As free(3).
            #[no_mangle]
            pub unsafe extern "C" fn free(p: *mut c_void) {
                // SAFETY: the caller's contract.
                unsafe { $crate::hooks::free(p) }
            }
            /// # Safety
            /// As realloc(3).
            #[no_mangle]
            pub unsafe extern "C" fn realloc(p: *mut c_void, n: size_t) -> *mut c_void {
                // SAFETY: the caller's contract.
                unsafe { $crate::hooks::realloc(p, n) }
            }
        }
    };
}

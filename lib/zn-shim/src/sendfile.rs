//! `sendfile`/`sendfile64` to an offloaded socket, zero-copy from the page
//! cache (`docs/shim.md`, "sendfile").
//!
//! Linux's own `sendfile` hands the page-cache pages of the file to TCP by
//! reference: bytes changed after the call and before their transmission
//! may go out new. Mapping the file read-only and shared, registering the
//! mapping (LOCAL_READ: `FOLL_LONGTERM` pins the page-cache pages
//! themselves) and posting zero-copy sends of it does the same. So the
//! call returns once the bytes are posted (queued), on blocking and
//! non-blocking sockets alike, as the kernel's returns once they are
//! queued; the mapping and its registration stay until the sends complete
//! (ACKed), held by the connection's list of file sends. The windows are
//! kept for the next call (`files.rs`).
//!
//! What cannot be mapped or registered (not a regular file, a file system
//! whose pages `FOLL_LONGTERM` refuses, the memlock limit) goes the copy
//! path (`pread` into a buffer, sent as `send()`), counted
//! (`sendfile_fallbacks`) and logged with the reason.

use crate::conn::{Conn, Io};
use crate::dev;
use crate::files::{self, Fallback};
use crate::state::{self, Stats};
use nix::errno::Errno;
use nix::libc;

/// `sendfile(o, i, off, n)` to the offloaded connection `c`: zero-copy
/// where the file allows, else the copy path.
///
/// # Safety
/// `off` is null or the caller's offset word.
pub unsafe fn sendfile(
    o: i32,
    i: i32,
    off: *mut libc::off_t,
    n: usize,
    c: &Conn,
    nonblock: &dyn Fn() -> bool,
) -> Result<usize, Errno> {
    // SAFETY: the caller's offset word, if any.
    let start = match unsafe { off.as_ref() } {
        Some(&o) if o < 0 => return Err(Errno::EINVAL),
        Some(&o) => o,
        // SAFETY: asking the file position.
        None => unsafe { libc::lseek(i, 0, libc::SEEK_CUR) },
    };
    let why = 'zc: {
        if start < 0 {
            break 'zc Fallback(format!("no file position: {}", Errno::last()));
        }
        // SAFETY: zeroed stat is valid; fstat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat into `st`.
        if unsafe { libc::fstat(i, &mut st) } != 0 {
            return Err(Errno::last());
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            break 'zc Fallback("not a regular file".into());
        }
        let Some(cache) = dev::cache() else {
            break 'zc Fallback("no registration cache".into());
        };
        let start = start as u64;
        let size = st.st_size.max(0) as u64;
        if n == 0 || start >= size {
            return Ok(0); // EOF (or nothing asked): as Linux
        }
        let len = (n as u64).min(size - start);
        let r = c.send_file(start, len, nonblock, &mut |pos| {
            files::window(&cache, i, &st, pos)
        });
        let sent = match r {
            Ok(k) => k,
            Err(Ok(e)) => return Err(e),
            Err(Err(f)) => break 'zc f,
        };
        let end = (start + sent as u64) as libc::off_t;
        match off.is_null() {
            // SAFETY: moving the file position past what was sent.
            true => unsafe { libc::lseek(i, end, libc::SEEK_SET) },
            // SAFETY: the caller's offset word.
            false => unsafe {
                *off = end;
                end
            },
        };
        let st = state::stats();
        Stats::add(&st.sendfile_bytes, sent as u64);
        Stats::add(&st.sendfile_zc_bytes, sent as u64);
        Stats::add(&st.tx_bytes, sent as u64);
        return Ok(sent);
    };
    Stats::add(&state::stats().sendfile_fallbacks, 1);
    state::log(&format!(
        "conn {}: sendfile from fd {i} copied, not zero-copy: {}",
        c.id, why.0
    ));
    // SAFETY: the caller's arguments.
    unsafe { copy(o, i, off, n, c) }
}

/// The copy path: the file's bytes are read into a buffer and sent like
/// `send()` (large blocking sends zero-copy from it).
///
/// # Safety
/// As [`sendfile`].
unsafe fn copy(o: i32, i: i32, off: *mut libc::off_t, n: usize, c: &Conn) -> Result<usize, Errno> {
    const CHUNK: usize = 1 << 20;
    let mut buf = vec![0u8; n.min(CHUNK)];
    let nb = || crate::nonblocking(o, 0);
    let mut done = 0usize;
    while done < n {
        let want = (n - done).min(buf.len());
        let r = if off.is_null() {
            // SAFETY: reading into our buffer.
            unsafe { libc::read(i, buf.as_mut_ptr().cast(), want) }
        } else {
            // SAFETY: reading into our buffer at the caller's offset.
            unsafe { libc::pread(i, buf.as_mut_ptr().cast(), want, *off) }
        };
        if r < 0 {
            return if done > 0 {
                Ok(done)
            } else {
                Err(Errno::last())
            };
        }
        if r == 0 {
            break;
        }
        let r = r as usize;
        let sent = match c.send(&[(buf.as_ptr(), r)], &nb) {
            Io::Done(k) => k,
            Io::Err(e) => {
                if off.is_null() {
                    // SAFETY: giving back what we read.
                    unsafe { libc::lseek(i, -(r as libc::off_t), libc::SEEK_CUR) };
                }
                return if done > 0 { Ok(done) } else { Err(e) };
            }
        };
        if off.is_null() {
            if sent < r {
                // SAFETY: giving back the unsent part.
                unsafe { libc::lseek(i, -((r - sent) as libc::off_t), libc::SEEK_CUR) };
            }
        } else {
            // SAFETY: the caller's offset word.
            unsafe { *off += sent as libc::off_t };
        }
        done += sent;
        Stats::add(&state::stats().sendfile_bytes, sent as u64);
        Stats::add(&state::stats().sendfile_copied_bytes, sent as u64);
        if sent < r {
            break;
        }
    }
    Ok(done)
}

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
//! (ACKed), held by the connection's list of file sends.
//!
//! Files are mapped in windows of [`WIN`] bytes (aligned in the file), kept
//! per process for the next call on the same file (iperf3 `-Z` sends one
//! file again and again, nginx the same files to many clients) up to
//! `ZN_SHIM_SENDFILE_CACHE` bytes, least recently used first out. A window
//! is the file's as it was: a change of the file's size, `st_mtime` or
//! `st_ctime` (a write, a truncation, a hole punched) drops its windows
//! and maps again; writes in place reach the pinned pages themselves (they
//! are the page cache's), as with Linux's sendfile. Windows are
//! `MADV_DONTFORK` (a forked child has its own `/dev/zeronic` file and
//! starts with none).
//!
//! What cannot be mapped or registered (not a regular file, a file system
//! whose pages `FOLL_LONGTERM` refuses, the memlock limit) goes the copy
//! path (`pread` into a buffer, sent as `send()`), counted
//! (`sendfile_fallbacks`) and logged with the reason.

use crate::conn::{Conn, Io};
use crate::state::{self, Stats};
use nix::errno::Errno;
use nix::libc;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use zn::cache::{Lease, RegCache};

/// Bytes of a file window (aligned in the file).
pub const WIN: u64 = 2 << 20;
const PAGE: u64 = 4096;

/// Which version of which file a window maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileId {
    fn of(st: &libc::stat) -> Self {
        Self {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }
    fn same_file(&self, o: &Self) -> bool {
        self.dev == o.dev && self.ino == o.ino
    }
}

/// A window of a file, mapped read-only and shared, and registered.
/// Unregistered and unmapped when the last holder (the cache, posted
/// sends) lets go.
#[derive(Debug)]
pub struct FileWin {
    id: FileId,
    /// File offset of the window's first byte (a multiple of [`WIN`]).
    pub file_off: u64,
    /// Bytes of the file in the window.
    pub len: u64,
    ptr: *mut libc::c_void,
    map_len: usize,
    pub lease: Lease,
    cache: Arc<RegCache>,
}

// SAFETY: the mapping is only read by the NIC; the pointer is used for
// munmap only.
unsafe impl Send for FileWin {}
// SAFETY: as above.
unsafe impl Sync for FileWin {}

impl Drop for FileWin {
    fn drop(&mut self) {
        // The lease first (no posted send uses the window any more: its
        // holders are gone), then the unmap, whose hook deregisters it.
        self.cache.put(self.lease);
        // SAFETY: the mapping made in `map`, used by nothing any more.
        unsafe { libc::munmap(self.ptr, self.map_len) };
    }
}

/// Why a file cannot go zero-copy.
pub struct Fallback(pub String);

/// The windows of one process.
#[derive(Debug, Default)]
pub struct FileCache {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Most recently used last.
    wins: Vec<Arc<FileWin>>,
    /// File systems (st_dev) whose mappings the NIC cannot register.
    refused: HashSet<u64>,
}

impl FileCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The window of the file `fd` (as `st` describes it now) holding
    /// byte `pos` (`pos < st.st_size`).
    pub fn get(
        &self,
        cache: &Arc<RegCache>,
        fd: i32,
        st: &libc::stat,
        pos: u64,
    ) -> Result<Arc<FileWin>, Fallback> {
        let id = FileId::of(st);
        let file_off = pos - pos % WIN;
        let max = state::config().sendfile_cache;
        {
            let mut g = self.lock();
            if g.refused.contains(&id.dev) {
                return Err(Fallback(format!(
                    "file system {:#x} refused registration before",
                    id.dev
                )));
            }
            // Windows of an older version of the file go.
            g.wins.retain(|w| !w.id.same_file(&id) || w.id == id);
            if let Some(i) = g
                .wins
                .iter()
                .position(|w| w.id == id && w.file_off == file_off)
            {
                let w = g.wins.remove(i);
                g.wins.push(w.clone());
                drop(g);
                Stats::add(&state::stats().sendfile_map_hits, 1);
                return Ok(w);
            }
        }
        let w = Arc::new(map(cache, fd, id, file_off)?);
        Stats::add(&state::stats().sendfile_maps, 1);
        let mut g = self.lock();
        g.wins.push(w.clone());
        // Within the bound (the newest stays, for this call).
        let mut bytes: u64 = g.wins.iter().map(|w| w.map_len as u64).sum();
        while bytes > max as u64 && g.wins.len() > 1 {
            let old = g.wins.remove(0);
            bytes -= old.map_len as u64;
        }
        if max == 0 {
            g.wins.clear();
        }
        Ok(w)
    }

    /// Registration of `dev`'s mappings was refused for good.
    fn refuse(&self, dev: u64) {
        self.lock().refused.insert(dev);
    }
}

/// Maps and registers the window of `id` at `file_off`.
fn map(cache: &Arc<RegCache>, fd: i32, id: FileId, file_off: u64) -> Result<FileWin, Fallback> {
    let size = id.size as u64;
    let len = (size - file_off).min(WIN);
    let map_len = len.div_ceil(PAGE) * PAGE;
    // SAFETY: a new shared read-only mapping of the caller's file at an
    // address of the kernel's choice.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len as usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            file_off as libc::off_t,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(Fallback(format!("mmap: {}", Errno::last())));
    }
    // SAFETY: the mapping just made.
    unsafe { libc::madvise(ptr, map_len as usize, libc::MADV_DONTFORK) };
    // SAFETY: the NIC reads the mapping while sends posted with the lease
    // run; the mapping lives until the lease is put back (FileWin's drop).
    let lease = match unsafe { cache.get(ptr.cast(), map_len as usize, zn::ACCESS_READ) } {
        Ok(l) => l,
        Err(e) => {
            // SAFETY: the mapping just made, not registered.
            unsafe { libc::munmap(ptr, map_len as usize) };
            if !matches!(e.errno, Errno::ENOMEM | Errno::ENOSPC | Errno::EAGAIN) {
                if let Some(files) = state::files() {
                    files.refuse(id.dev);
                }
            }
            return Err(Fallback(format!("registration of the file's pages: {e}")));
        }
    };
    Ok(FileWin {
        id,
        file_off,
        len,
        ptr,
        map_len: map_len as usize,
        lease,
        cache: cache.clone(),
    })
}

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
        let (Some(files), Some(cache)) = (state::files(), state::cache()) else {
            break 'zc Fallback("no registration cache".into());
        };
        let start = start as u64;
        let size = st.st_size.max(0) as u64;
        if n == 0 || start >= size {
            return Ok(0); // EOF (or nothing asked): as Linux
        }
        let len = (n as u64).min(size - start);
        let r = c.send_file(start, len, nonblock, &mut |pos| {
            files.get(&cache, i, &st, pos)
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

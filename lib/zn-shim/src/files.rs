//! The file windows `sendfile` sends from (`sendfile.rs`): mapped
//! read-only and shared, and registered.
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

use crate::per_proc::PerProc;
use crate::state::{self, Stats};
use nix::errno::Errno;
use nix::libc;
use std::collections::HashSet;
use std::sync::Arc;
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
struct Wins {
    /// Most recently used last.
    wins: Vec<Arc<FileWin>>,
    /// File systems (st_dev) whose mappings the NIC cannot register.
    refused: HashSet<u64>,
}

static WINS: PerProc<Wins> = PerProc::new(|| {});

/// The window of the file `fd` (as `st` describes it now) holding
/// byte `pos` (`pos < st.st_size`).
pub fn window(
    cache: &Arc<RegCache>,
    fd: i32,
    st: &libc::stat,
    pos: u64,
) -> Result<Arc<FileWin>, Fallback> {
    let id = FileId::of(st);
    let file_off = pos - pos % WIN;
    let max = state::config().sendfile_cache;
    {
        let mut g = WINS.lock();
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
    let mut g = WINS.lock();
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
fn refuse(dev: u64) {
    WINS.lock().refused.insert(dev);
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
                refuse(id.dev);
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

//! State shared by every process of a run: an anonymous `MAP_SHARED`
//! mapping made before the first fork, so workers, their forked children
//! and the racer all count into it and see each other's keys. Only atomics,
//! so forked children may use it.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use anyhow::{Context, Result};
use nix::sys::mman::{mmap_anonymous, MapFlags, ProtFlags};

use crate::errnos::CALLS;

/// Messages printed per run at most; the counts are complete anyway.
pub const PRINT_LIMIT: u64 = 60;

/// Keys handed out recently (by anyone), so a call can name another file's
/// key, and a new key can be checked against earlier ones.
pub const KEYBOARD: usize = 1024;
/// errno values counted individually (Linux's are below 134).
pub const ERRNOS: usize = 134;

/// Maps a zeroed `T` for this process and every process it forks, for the
/// rest of the run (never unmapped); `what` names it in the error.
///
/// # Safety
///
/// All-zero bytes must be a valid `T`, and `T` must be safe to use from
/// several processes at once through the same memory (atomics only).
pub unsafe fn map_zeroed<T>(what: &str) -> Result<&'static T> {
    let len = NonZeroUsize::new(size_of::<T>()).context("a zero-sized mapping")?;
    // SAFETY: a fresh anonymous mapping: no existing memory is affected.
    let p = unsafe {
        mmap_anonymous(
            None,
            len,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
        )
    }
    .with_context(|| format!("mmap of {what}"))?;
    // SAFETY: the mapping is zero-filled, page-aligned and large enough,
    // all-zero bytes are a valid `T` (the caller's promise), and it is never
    // unmapped, so the reference lives as long as the process.
    Ok(unsafe { &*p.as_ptr().cast::<T>() })
}

/// Everything the processes of a run count together.
#[repr(C)]
pub struct Shared {
    /// Keys of successful registrations, a ring (`key_next` is the count).
    pub keys: [AtomicU64; KEYBOARD],
    /// The NIC of each key in `keys`.
    pub key_nics: [AtomicU32; KEYBOARD],
    /// Keys published so far.
    pub key_next: AtomicU64,
    /// Calls made, by [`crate::errnos::Call`].
    pub calls: [AtomicU64; CALLS],
    /// Results by call and errno (0: success).
    pub results: [[AtomicU64; ERRNOS]; CALLS],
    /// Results with an errno the header does not document for the call.
    pub undocumented: AtomicU64,
    /// Results that contradict what the call's arguments determine (an
    /// exact errno, a failure, the fields of a successful QUERY, a key).
    pub inconsistent: AtomicU64,
    /// Forked children that exited other than as planned.
    pub child_failures: AtomicU64,
    /// Forked children (short-lived callers) and the ones killed mid-call.
    pub children: AtomicU64,
    /// Children killed with SIGKILL while registering.
    pub children_killed: AtomicU64,
    /// Files passed over SCM_RIGHTS, sent and received.
    pub fds_sent: AtomicU64,
    /// See `fds_sent`.
    pub fds_received: AtomicU64,
    /// Completed unbind/bind cycles of the racer.
    pub rebinds: AtomicU64,
    /// MTU changes that took effect.
    pub mtu_changes: AtomicU64,
    /// Ports brought down and up again.
    pub link_flips: AtomicU64,
    /// Workers whose VmPin did not come back to its value at start.
    pub vmpin_bad: AtomicU64,
    /// Workers that checked their VmPin.
    pub vmpin_checked: AtomicU64,
    /// Messages printed so far (printing stops after a limit).
    pub printed: AtomicU64,
}

impl Shared {
    /// Maps a zeroed `Shared` for this process and every process it forks.
    pub fn new() -> Result<&'static Shared> {
        // SAFETY: `Shared` is atomics only, valid all zero.
        unsafe { map_zeroed("the shared counters") }
    }

    /// Publishes a key handed out by the NIC.
    pub fn publish_key(&self, key: u64, nic: u32) {
        let i = (self.key_next.fetch_add(1, Relaxed) as usize) % KEYBOARD;
        self.key_nics[i].store(nic, Relaxed);
        self.keys[i].store(key, Relaxed);
    }

    /// A recently published key (0 if none yet) and its NIC.
    pub fn some_key(&self, r: u64) -> (u64, u32) {
        let n = (self.key_next.load(Relaxed) as usize).min(KEYBOARD);
        if n == 0 {
            return (0, 0);
        }
        let i = (r as usize) % n;
        (self.keys[i].load(Relaxed), self.key_nics[i].load(Relaxed))
    }

    /// Whether `key` is among the published ones.
    pub fn key_seen(&self, key: u64) -> bool {
        let n = (self.key_next.load(Relaxed) as usize).min(KEYBOARD);
        self.keys[..n].iter().any(|k| k.load(Relaxed) == key)
    }

    /// Counts one result of `call`: `errno` 0 for success.
    pub fn count(&self, call: usize, errno: i32) {
        self.calls[call].fetch_add(1, Relaxed);
        let e = usize::try_from(errno).unwrap_or(ERRNOS - 1).min(ERRNOS - 1);
        self.results[call][e].fetch_add(1, Relaxed);
    }

    /// Whether a message may still be printed (at most [`PRINT_LIMIT`] of
    /// them in a run, all processes together).
    pub fn may_print(&self) -> bool {
        self.printed.fetch_add(1, Relaxed) < PRINT_LIMIT
    }
}

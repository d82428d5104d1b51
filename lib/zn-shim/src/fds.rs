//! The process's offloaded file descriptors: fd -> connection (dup'd fds
//! share one), and the non-blocking connects not yet established.

use crate::conn::Conn;
use crate::per_proc::PerProc;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, MutexGuard};

#[derive(Default)]
pub struct Fds {
    /// fd -> connection.
    pub fds: HashMap<i32, Arc<Conn>>,
    /// Connections by id (epoll tags).
    pub by_id: HashMap<u32, Arc<Conn>>,
    /// Non-blocking connects in progress: attach once established.
    pub pending: HashSet<i32>,
    pub next_id: u32,
}

/// A forked child's table is empty: the parent's fds stay plain sockets
/// whose data calls fail (counted as inherited_use).
static FDS: PerProc<Fds> = PerProc::new(|| ACTIVE.store(0, Ordering::Relaxed));

/// Offloaded or pending fds in this process: the wrappers' fast path.
pub static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// The table. Its lock is the innermost of the shim (`per_proc.rs`).
pub fn lock() -> MutexGuard<'static, Fds> {
    FDS.lock()
}

pub fn conn_of(fd: i32) -> Option<Arc<Conn>> {
    if ACTIVE.load(Ordering::Relaxed) == 0 {
        return None;
    }
    lock().fds.get(&fd).cloned()
}

/// Whether `fd` was an offloaded connection of the parent (in a child).
pub fn inherited(fd: i32) -> bool {
    FDS.inherited().is_some_and(|m| {
        m.try_lock()
            .map(|g| g.fds.contains_key(&fd))
            .unwrap_or(false)
    })
}

/// The connections still open, at exit (none if another thread holds the
/// lock: exit must not hang).
pub fn open_at_exit() -> Vec<Arc<Conn>> {
    FDS.current()
        .and_then(|m| m.try_lock().ok().map(|g| g.fds.values().cloned().collect()))
        .unwrap_or_default()
}

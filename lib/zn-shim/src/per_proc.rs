//! A table that belongs to one process. After `fork()` the child starts
//! over with an empty one: what the parent's named (flows, regions, the
//! `/dev/zeronic` file's objects) is the parent's. The parent's copy is
//! leaked, never freed nor used: its lock may be held by a thread that
//! does not exist in the child. Each subsystem keeps its table in one.
//!
//! Lock order: a table's lock is held briefly and no other table's is
//! taken under it, but one: a log line written to a file
//! (`ZN_SHIM_LOG=path`) goes through the shim's own `write` and `close`,
//! which take the fd table's lock (`fds.rs`). So that one is the
//! innermost: nothing logs, writes or closes an fd while holding it. The
//! device table's lock and a connection's (`Conn::lock`) may be held
//! while logging: both come before it, never after.

use crate::state;
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The process that last made or renewed a table (0: none yet).
static SEEN: AtomicI32 = AtomicI32::new(0);

pub struct PerProc<T> {
    /// The process `cur` belongs to.
    pid: AtomicI32,
    cur: AtomicPtr<Mutex<T>>,
    /// The parent's table as a forked child inherited it.
    old: AtomicPtr<Mutex<T>>,
    /// Run in a forked child when its table replaces the parent's.
    on_fork: fn(),
}

impl<T: Default> PerProc<T> {
    pub const fn new(on_fork: fn()) -> Self {
        Self {
            pid: AtomicI32::new(0),
            cur: AtomicPtr::new(std::ptr::null_mut()),
            old: AtomicPtr::new(std::ptr::null_mut()),
            on_fork,
        }
    }

    /// This process's table; a new one in a forked child.
    pub fn get(&'static self) -> &'static Mutex<T> {
        let me = state::pid();
        let p = self.cur.load(Ordering::Acquire);
        if !p.is_null() && self.pid.load(Ordering::Acquire) == me {
            // SAFETY: published below, never freed (leaked on purpose).
            return unsafe { &*p };
        }
        // The registration caches are process-wide (the memory hooks'):
        // a forked child forgets the parent's regions once, at its first
        // use of any table, before it can register its own.
        let prev = SEEN.swap(me, Ordering::AcqRel);
        if prev != 0 && prev != me {
            zn::cache::forget_all_after_fork();
        }
        let fresh = Box::into_raw(Box::new(Mutex::new(T::default())));
        match self
            .cur
            .compare_exchange(p, fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                self.pid.store(me, Ordering::Release);
                if !p.is_null() {
                    // A forked child: the old table is leaked.
                    (self.on_fork)();
                    self.old.store(p, Ordering::Release);
                }
                // SAFETY: just published.
                unsafe { &*fresh }
            }
            Err(cur) => {
                // SAFETY: `fresh` was never shared.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: published by the winner.
                unsafe { &*cur }
            }
        }
    }

    pub fn lock(&'static self) -> MutexGuard<'static, T> {
        self.get().lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This process's table if it made one (none made here: at exit).
    pub fn current(&self) -> Option<&Mutex<T>> {
        let p = self.cur.load(Ordering::Acquire);
        if p.is_null() || self.pid.load(Ordering::Acquire) != state::pid() {
            return None;
        }
        // SAFETY: published by get(), never freed.
        Some(unsafe { &*p })
    }

    /// The parent's table as a forked child inherited it (read it with
    /// try_lock: its lock may be held by a thread not copied here).
    pub fn inherited(&self) -> Option<&Mutex<T>> {
        let p = self.old.load(Ordering::Acquire);
        // SAFETY: leaked, never freed.
        (!p.is_null()).then(|| unsafe { &*p })
    }
}

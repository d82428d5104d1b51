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

/// One process's table: the pid is part of the allocation, so a thread
/// that sees the pointer sees whose table it is (a pid kept beside the
/// pointer could be read between the two stores, and a second thread
/// would then take a first use for a fork and replace the new table).
struct Table<T> {
    pid: i32,
    table: Mutex<T>,
}

pub struct PerProc<T> {
    cur: AtomicPtr<Table<T>>,
    /// The parent's table as a forked child inherited it.
    old: AtomicPtr<Table<T>>,
    /// Run in a forked child when its table replaces the parent's.
    on_fork: fn(),
}

impl<T: Default> PerProc<T> {
    pub const fn new(on_fork: fn()) -> Self {
        Self {
            cur: AtomicPtr::new(std::ptr::null_mut()),
            old: AtomicPtr::new(std::ptr::null_mut()),
            on_fork,
        }
    }

    /// This process's table; a new one in a forked child.
    pub fn get(&'static self) -> &'static Mutex<T> {
        let me = state::pid();
        let mut p = self.cur.load(Ordering::Acquire);
        loop {
            // SAFETY: published below, never freed (leaked on purpose).
            if let Some(t) = unsafe { p.as_ref() } {
                if t.pid == me {
                    return &t.table;
                }
            }
            // The registration caches are process-wide (the memory hooks'):
            // a forked child forgets the parent's regions once, at its
            // first use of any table, before it can register its own.
            let prev = SEEN.swap(me, Ordering::AcqRel);
            if prev != 0 && prev != me {
                zn::cache::forget_all_after_fork();
            }
            let fresh = Box::into_raw(Box::new(Table {
                pid: me,
                table: Mutex::new(T::default()),
            }));
            match self
                .cur
                .compare_exchange(p, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if !p.is_null() {
                        // A forked child: the old table is leaked.
                        (self.on_fork)();
                        self.old.store(p, Ordering::Release);
                    }
                    // SAFETY: just published, never freed.
                    return unsafe { &(*fresh).table };
                }
                Err(cur) => {
                    // Another thread of this process published first.
                    // SAFETY: `fresh` was never shared.
                    drop(unsafe { Box::from_raw(fresh) });
                    p = cur;
                }
            }
        }
    }

    pub fn lock(&'static self) -> MutexGuard<'static, T> {
        self.get().lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This process's table if it made one (none made here: at exit).
    pub fn current(&self) -> Option<&Mutex<T>> {
        // SAFETY: published by get(), never freed.
        let t = unsafe { self.cur.load(Ordering::Acquire).as_ref() }?;
        (t.pid == state::pid()).then_some(&t.table)
    }

    /// The parent's table as a forked child inherited it (read it with
    /// try_lock: its lock may be held by a thread not copied here).
    pub fn inherited(&self) -> Option<&Mutex<T>> {
        // SAFETY: leaked, never freed.
        unsafe { self.old.load(Ordering::Acquire).as_ref() }.map(|t| &t.table)
    }
}

#[cfg(test)]
mod tests {
    use super::PerProc;
    use std::sync::Barrier;

    /// Threads of one process that use a table for the first time at once
    /// all get the same table: none takes another's first use for a fork.
    #[test]
    fn first_use_from_many_threads_makes_one_table() {
        for _ in 0..200 {
            let table: &'static PerProc<Vec<usize>> =
                Box::leak(Box::new(PerProc::new(|| panic!("no fork happened"))));
            let start = Barrier::new(8);
            std::thread::scope(|s| {
                for i in 0..8 {
                    let start = &start;
                    s.spawn(move || {
                        start.wait();
                        table.lock().push(i);
                    });
                }
            });
            assert_eq!(table.lock().len(), 8);
            assert!(table.inherited().is_none());
        }
    }
}

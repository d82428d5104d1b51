// SPDX-License-Identifier: GPL-2.0

//! Charges of kernel memory that a process maps to the user's locked memory.
//!
//! A completion queue is kernel pages the application maps; they cannot be
//! reclaimed or swapped, like pinned pages. They are charged as registrations
//! charge their pins (`kernel::mm::pin`) and as perf charges its ring
//! buffers: to the `locked_vm` of the creating task's real user, limited by
//! `RLIMIT_MEMLOCK` unless the task has `CAP_IPC_LOCK`. A [`LockedCharge`]
//! holds the charge (and a reference to the user) until it is dropped, in
//! any context, whoever holds it by then.
//!
//! The kernel crate has this accounting only inside `PinnedPages`, for user
//! pages; this file is the driver's one wrapper of the C helpers it uses.

use core::ptr::NonNull;

use kernel::{
    bindings,
    page::PAGE_SHIFT,
    prelude::*,
    sync::atomic::{
        Atomic,
        Relaxed, //
    },
};

/// Pages charged to a user's `locked_vm`, uncharged when dropped.
///
/// # Invariants
///
/// If `user` is `Some`, it is a `user_struct` this object holds a reference
/// on (`get_uid()`), and `npages` pages are charged to its `locked_vm`. If it
/// is `None`, nothing is charged (the creator had `CAP_IPC_LOCK`).
pub(crate) struct LockedCharge {
    user: Option<NonNull<bindings::user_struct>>,
    npages: isize,
}

// SAFETY: A `user_struct` reference may be used and dropped on any thread
// (`free_uid()` takes its lock with interrupts off), and the counter is atomic.
unsafe impl Send for LockedCharge {}
// SAFETY: `&LockedCharge` gives no access to anything.
unsafe impl Sync for LockedCharge {}

impl LockedCharge {
    /// The `locked_vm` counter of `user`.
    ///
    /// # Safety
    ///
    /// `user` must be a valid `user_struct` that stays valid for `'a`.
    unsafe fn counter<'a>(user: NonNull<bindings::user_struct>) -> &'a Atomic<isize> {
        // SAFETY: `user` is valid by the caller's guarantee.
        let counter = unsafe { bindings::user_locked_vm(user.as_ptr()) };
        // SAFETY: `atomic_long_t` is a `long` only ever accessed atomically,
        // the layout and discipline of `Atomic<isize>`; it lives as long as
        // the `user_struct`, which the caller keeps valid for `'a`.
        unsafe { Atomic::from_ptr(counter.cast()) }
    }

    /// Charges `npages` pages to the current task's real user.
    ///
    /// # Errors
    ///
    /// `ENOMEM` if the user's `locked_vm` would exceed the task's
    /// `RLIMIT_MEMLOCK` (and the task lacks `CAP_IPC_LOCK`); nothing is
    /// charged then. Reaching the limit exactly is allowed, as for pins.
    pub(crate) fn new(npages: usize) -> Result<Self> {
        let npages = isize::try_from(npages).map_err(|_| ENOMEM)?;
        // SAFETY: `capable()` checks the current task's credentials, always valid.
        if unsafe { bindings::capable(bindings::CAP_IPC_LOCK as c_int) } {
            // INVARIANT: nothing charged, no user held.
            return Ok(Self { user: None, npages });
        }
        // SAFETY: Reading the current task's credentials is always valid; the
        // helper returns `get_uid(current_user())`, a new reference.
        let user = NonNull::new(unsafe { bindings::get_current_user() }).ok_or(ENOMEM)?;
        // SAFETY: `rlimit()` reads the current task's limits, always valid.
        let limit = unsafe { bindings::rlimit(bindings::RLIMIT_MEMLOCK) } >> PAGE_SHIFT;
        let limit = isize::try_from(limit).unwrap_or(isize::MAX);
        // SAFETY: We hold a reference on `user` until the returned object or
        // this function gives it back, after the last use of `counter`.
        let counter = unsafe { Self::counter(user) };
        // As `PinnedPages::pin` and `__io_account_mem()`: never above the
        // limit, even transiently.
        let mut cur = counter.load(Relaxed);
        loop {
            let Some(new) = cur.checked_add(npages).filter(|&n| n <= limit) else {
                // SAFETY: The reference taken above, not stored anywhere.
                unsafe { bindings::free_uid(user.as_ptr()) };
                return Err(ENOMEM);
            };
            match counter.cmpxchg(cur, new, Relaxed) {
                Ok(_) => break,
                Err(seen) => cur = seen,
            }
        }
        // INVARIANT: the reference taken above, and `npages` charged.
        Ok(Self {
            user: Some(user),
            npages,
        })
    }
}

impl Drop for LockedCharge {
    fn drop(&mut self) {
        if let Some(user) = self.user {
            // SAFETY: By the type invariant we hold a reference on `user`,
            // given back only below.
            unsafe { Self::counter(user) }.fetch_sub(self.npages, Relaxed);
            // SAFETY: By the type invariant we hold this reference; given back here.
            unsafe { bindings::free_uid(user.as_ptr()) };
        }
    }
}

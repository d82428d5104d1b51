//! The sockets whose non-blocking `connect()` is still in progress: they
//! are attached at their first data call once established (`lib.rs`).
//!
//! A bitmap of atomics, not a locked table: the wrappers that consult it
//! may run in a signal handler that interrupted another wrapper, and a
//! lock there could deadlock (the old shim's failure). The bitmap covers
//! every descriptor the kernel can hand out under the default
//! `fs.nr_open` (2^20); a descriptor beyond it is not tracked (counted).
//! It lives in `.bss`: only the pages of descriptors used are touched.
//!
//! After `fork()` the child's copy matches its copy of the descriptor
//! table; whichever process makes the first data call attaches the socket
//! (the other's attach finds it attached: `EEXIST`, counted).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const MAX_FD: usize = 1 << 20;
static BITS: [AtomicU64; MAX_FD / 64] = [const { AtomicU64::new(0) }; MAX_FD / 64];
/// How many bits are set: the wrappers' fast path is this one load.
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn slot(fd: i32) -> Option<(&'static AtomicU64, u64)> {
    let fd = usize::try_from(fd).ok().filter(|&f| f < MAX_FD)?;
    Some((&BITS[fd / 64], 1 << (fd % 64)))
}

/// Whether any connect is pending (one relaxed load).
pub fn any() -> bool {
    COUNT.load(Ordering::Relaxed) != 0
}

/// Marks `fd` pending; false if it is beyond the bitmap.
pub fn mark(fd: i32) -> bool {
    let Some((w, bit)) = slot(fd) else {
        return false;
    };
    if w.fetch_or(bit, Ordering::AcqRel) & bit == 0 {
        COUNT.fetch_add(1, Ordering::Relaxed);
    }
    true
}

/// Clears `fd`'s mark; whether it was set. Of two threads taking the same
/// descriptor, exactly one gets `true`.
pub fn take(fd: i32) -> bool {
    if !any() {
        return false;
    }
    let Some((w, bit)) = slot(fd) else {
        return false;
    };
    let was = w.fetch_and(!bit, Ordering::AcqRel) & bit != 0;
    if was {
        COUNT.fetch_sub(1, Ordering::Relaxed);
    }
    was
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mark_take_count() {
        assert!(mark(5));
        assert!(mark(5));
        assert!(mark(70));
        assert!(any());
        assert!(take(5));
        assert!(!take(5));
        assert!(take(70));
        assert!(!mark(-1));
        assert!(!mark(1 << 20));
        assert!(!take(1 << 20));
    }

    #[test]
    fn one_taker_of_many() {
        // Descriptors of their own (tests run in parallel threads).
        for round in 0..200 {
            let fd = 1000 + round;
            assert!(mark(fd));
            let won: usize = std::thread::scope(|s| {
                let hs: Vec<_> = (0..8).map(|_| s.spawn(|| take(fd) as usize)).collect();
                hs.into_iter().map(|h| h.join().unwrap()).sum()
            });
            assert_eq!(won, 1);
        }
    }
}

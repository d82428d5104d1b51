//! The per-process pool of connection memory: a released connection's
//! registered receive ring and staging memory, kept for the next attach
//! instead of being deregistered and unmapped (`docs/shim.md`, "The
//! connection pool").
//!
//! An attach that finds a set here skips the mmap, the population of 2 MiB
//! of pages and the two `MR_REG` calls, which are nine tenths of an
//! attach's time in a TCG guest (measured, `docs/shim.md`). A set goes back
//! only once it is certain no one but the shim will touch it again
//! (`Conn`'s drop checks it):
//!
//! - the old flow is detached **and the NIC confirmed it**: the shim reaped
//!   the flow's `DETACHED` event with status 0 from the flow's own CQ
//!   (the driver posts it only after the NIC acknowledged the flow's
//!   removal, and says `EIO` if it did not), so neither the NIC nor the
//!   kernel's copying path writes into the ring any more;
//! - every send posted from the staging memory completed (reaped): TCP
//!   holds none of its pages, so no retransmission reads bytes a later
//!   connection put there.
//!
//! Otherwise the set is released as before (its regions deregistered, or
//! left to the file while the kernel still uses them). The ring keeps the
//! old connection's bytes: a new connection reads only the stream bytes
//! its own flow reported (`rx_read` .. `rx_end`, which start at 0 again),
//! and its flow writes each of them before reporting it, so none of the
//! old bytes can be read (`selftests/zn_shim.sh`'s pool case checks it).
//! The CQ is not pooled: creating one costs about 2% of an attach, and its
//! eventfd sits in the application's epoll sets, which only closing it
//! empties for certain.
//!
//! The pool belongs to the process's `/dev/zeronic` file (the regions are
//! that file's): a forked child starts with its own file and an empty pool
//! (the pool's table is per process, `per_proc.rs`), and the pages of the
//! parent's buffers are not even mapped in the child (`MADV_DONTFORK`). At
//! most `ZN_SHIM_POOL` sets are kept; the rest are released at once.

use crate::per_proc::PerProc;
use crate::state::{self, Stats};
use crate::times::{AttachTimes, Lap};
use std::sync::{Arc, Mutex};
use zn::{Buffer, Device, Region};

/// A connection's registered memory: the receive ring the NIC places into
/// and the staging memory copied sends go out of.
#[derive(Debug)]
pub struct Res {
    pub ring: Buffer,
    pub ring_mr: Region,
    pub stage: Buffer,
    pub stage_mr: Region,
}

impl Res {
    /// New memory, registered (the timings go to `t`).
    pub fn new(dev: &Arc<Device>, t: &mut AttachTimes) -> zn::Result<Self> {
        let cfg = state::config();
        let mut lap = Lap::new();
        let ring = Buffer::new(cfg.ring)?;
        t.ring_alloc = lap.next();
        let ring_mr = dev.register(&ring, zn::ACCESS_WRITE)?;
        t.ring_reg = lap.next();
        let stage = Buffer::new(cfg.staging)?;
        t.stage_alloc = lap.next();
        let stage_mr = dev.register(&stage, zn::ACCESS_READ)?;
        t.stage_reg = lap.next();
        Ok(Self {
            ring,
            ring_mr,
            stage,
            stage_mr,
        })
    }

    /// Deregisters the regions (one the kernel still uses, MR_DEREG EBUSY,
    /// is left to the file: released when it closes), then unmaps.
    pub fn release(self) {
        for r in [self.ring_mr, self.stage_mr] {
            if let Err((Some(r), _)) = r.deregister() {
                r.forget();
            }
        }
        // The buffers are unmapped as they drop (after the MR_DEREGs).
    }
}

/// The pool of one process (one `/dev/zeronic` file).
#[derive(Debug)]
pub struct Pool {
    /// The process whose file registered the sets.
    pid: i32,
    /// At most this many sets kept.
    max: usize,
    sets: Mutex<Vec<Res>>,
}

impl Pool {
    pub fn new(max: usize) -> Self {
        Self {
            pid: state::pid(),
            max,
            sets: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Res>> {
        self.sets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A pooled set, counted as a hit, or `None` (a miss).
    pub fn take(&self) -> Option<Res> {
        let st = state::stats();
        let r = if self.pid == state::pid() {
            self.lock().pop()
        } else {
            None
        };
        Stats::add(
            if r.is_some() {
                &st.pool_hits
            } else {
                &st.pool_misses
            },
            1,
        );
        r
    }

    /// Keeps `r` for the next attach, or releases it if the pool is full.
    /// The caller has made sure nothing but the shim uses it any more.
    pub fn put(&self, r: Res) -> bool {
        if self.pid != state::pid() {
            // Never reached (a child never drops its parent's connections),
            // and unsound to release: the regions are the parent's and the
            // buffers are not mapped here (MADV_DONTFORK).
            std::mem::forget(r);
            return false;
        }
        let mut g = self.lock();
        if g.len() < self.max {
            g.push(r);
            drop(g);
            Stats::add(&state::stats().pool_returned, 1);
            return true;
        }
        drop(g);
        Stats::add(&state::stats().pool_full, 1);
        r.release();
        false
    }

    /// Sets kept now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

static POOL: PerProc<Option<Arc<Pool>>> = PerProc::new(|| {});

/// The process's pool, made at the first call (`None`: `ZN_SHIM_POOL=0`).
pub fn of_process() -> Option<Arc<Pool>> {
    let mut g = POOL.lock();
    if g.is_none() {
        let n = state::config().pool;
        *g = (n > 0).then(|| Arc::new(Pool::new(n)));
    }
    g.clone()
}

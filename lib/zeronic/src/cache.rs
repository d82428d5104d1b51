//! A registration cache that is never stale.
//!
//! [`RegCache::get`] returns a registered region covering an address range,
//! registering the range's pages on a miss and reusing the region on a hit,
//! so repeated sends from the same buffer pin once. A region pins the
//! *pages* that were mapped when it was registered (`docs/uapi.md`): after
//! `munmap` + `mmap` at the same address, `mremap`, `madvise(DONTNEED)`, a
//! shrinking `brk` or `free()` of the block, the address names other pages
//! and the cached region must not be used again.
//!
//! **Mechanism: userspace memory hooks, as UCX's libucm.** The libraries
//! that interpose on the process's calls (`libzeronic.so`, the C library,
//! and `libzn_shim.so`, the `LD_PRELOAD` shim) define `munmap`, `mmap`
//! (`MAP_FIXED`), `mremap`, `madvise`, `brk`, `sbrk`, `shmdt`, `free` and
//! `realloc`, and call [`invalidate_range`] with the range about to change
//! *before* the real call runs. [`invalidate_range`] marks every cached
//! region overlapping it stale in every cache of the process: a stale region
//! is never returned again, and it is deregistered at once, or, if a posted
//! send still uses it (its lease not yet [`RegCache::put`] back), when that
//! lease comes back. `fork()` empties every cache in the child (the child's
//! pages are copies; the regions are the parent's, through the shared
//! file): [`forget_all_after_fork`].
//!
//! What the hooks cannot see (and `docs/shim.md` lists): raw `syscall()`
//! unmapping, glibc-internal calls that bypass the PLT other than through
//! `free`/`realloc` (malloc's own `munmap` of a freed chunk happens inside
//! `free`, which is hooked), and statically linked code. A kernel
//! `mmu_interval_notifier` on each region would close these; that is a
//! module change (proposed in `docs/shim.md`).

use crate::{Device, Region, Result};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The registration step of a cache: `MR_REG` and `MR_DEREG` on a
/// [`Device`], or a fake in the unit tests (which race invalidations
/// against a registration in progress).
pub(crate) trait Registrar: Clone + Send + Sync + 'static {
    /// A registered region.
    type Region: Send + std::fmt::Debug + 'static;
    /// Registers `[addr, addr + len)` with `access`.
    ///
    /// # Safety
    /// As [`Device::register_raw`].
    unsafe fn register(&self, addr: *const u8, len: usize, access: u32) -> Result<Self::Region>;
    /// The region's key.
    fn key(r: &Self::Region) -> u64;
    /// The region's `ACCESS_*`.
    fn access(r: &Self::Region) -> u32;
    /// The region's first address and length.
    fn span(r: &Self::Region) -> (usize, usize);
    /// Deregisters the region (if posted work still uses it, forgets it:
    /// it is released with the file).
    fn release(r: Self::Region);
    /// Forgets the region without deregistering it (a forked child).
    fn forget(r: Self::Region);
}

impl Registrar for Arc<Device> {
    type Region = Region;
    unsafe fn register(&self, addr: *const u8, len: usize, access: u32) -> Result<Region> {
        // SAFETY: the caller's contract.
        unsafe { self.register_raw(addr, len, access) }
    }
    fn key(r: &Region) -> u64 {
        r.key()
    }
    fn access(r: &Region) -> u32 {
        r.access()
    }
    fn span(r: &Region) -> (usize, usize) {
        (r.addr(), r.len())
    }
    fn release(r: Region) {
        if let Err((Some(r), _)) = r.deregister() {
            // EBUSY: posted work still uses it although its lease came back
            // (the caller gave it back early). Released with the file.
            r.forget();
        }
    }
    fn forget(r: Region) {
        r.forget();
    }
}

/// Counters of a cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct CacheStats {
    /// `get` calls answered from the cache.
    pub hits: u64,
    /// `get` calls that registered.
    pub misses: u64,
    /// Regions made stale by the memory hooks.
    pub invalidations: u64,
    /// Regions deregistered to stay within the entry bound.
    pub evictions: u64,
    /// Regions registered now.
    pub entries: u64,
    /// Bytes they cover.
    pub bytes: u64,
}

#[derive(Debug)]
struct Entry<G> {
    region: Option<G>,
    start: usize,
    end: usize,
    leases: u32,
    stale: bool,
    last_use: u64,
}

#[derive(Debug)]
struct Inner<R: Registrar> {
    reg: R,
    entries: Vec<Entry<R::Region>>,
    max_entries: usize,
    clock: u64,
    stats: CacheStats,
}

/// A lease on a cached region: `key` and the `offset` of the asked address
/// in it. Give it back with [`RegCache::put`] once the work using it
/// completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The region's key.
    pub key: u64,
    /// Offset of the asked address in the region.
    pub offset: u64,
    /// Start of the region (identifies the lease for `put`).
    pub start: usize,
}

/// A [`Lease`] as the C ABI passes it (`struct zn_lease`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct CLease {
    /// The region's key.
    pub key: u64,
    /// Offset of the asked address in the region.
    pub offset: u64,
    /// Start of the region.
    pub start: u64,
}

/// The registration cache of one [`Device`]. Thread safe.
#[derive(Debug)]
pub struct RegCache {
    core: Cache<Arc<Device>>,
}

/// A registration cache over any [`Registrar`].
#[derive(Debug)]
pub(crate) struct Cache<R: Registrar> {
    inner: Arc<Mutex<Inner<R>>>,
}

/// What the hooks do to a cache, whatever its [`Registrar`].
trait Hooked: Send + Sync {
    /// Marks the regions overlapping `[addr, end)` stale (`try_lock`).
    fn invalidate(&self, addr: usize, end: usize);
    /// Forgets every region (`try_lock`; a forked child).
    fn forget_all(&self);
}

/// Every live cache of the process, for the hooks.
static CACHES: Mutex<Vec<Weak<dyn Hooked>>> = Mutex::new(Vec::new());
/// Entries registered in all caches: the hooks' fast path when zero.
static LIVE_ENTRIES: AtomicUsize = AtomicUsize::new(0);
static ATFORK: std::sync::Once = std::sync::Once::new();
static IN_FORK_CHILD: AtomicBool = AtomicBool::new(false);
/// `ZN_CACHE_NOHOOKS=1` (read when a cache is created): the hooks do not
/// invalidate. Only for showing that the tests can fail; never set it.
static HOOKS_OFF: AtomicBool = AtomicBool::new(false);

const PAGE: usize = 4096;

extern "C" fn atfork_child() {
    IN_FORK_CHILD.store(true, Ordering::Relaxed);
    forget_all_after_fork();
    IN_FORK_CHILD.store(false, Ordering::Relaxed);
}

impl RegCache {
    /// A cache of at most `max_entries` regions (at least 1) on `dev`.
    pub fn new(dev: Arc<Device>, max_entries: usize) -> Self {
        Self {
            core: Cache::new(dev, max_entries),
        }
    }

    /// A region with `access` covering `[addr, addr + len)`: a cached one,
    /// or a new registration of the range's whole pages (of the exact range
    /// if the whole pages cannot be registered). Counts as a lease.
    ///
    /// # Safety
    /// As [`Device::register_raw`]: the memory may be read (and with
    /// `ACCESS_WRITE` written) by the NIC while work posted with the lease
    /// runs.
    pub unsafe fn get(&self, addr: *const u8, len: usize, access: u32) -> Result<Lease> {
        // SAFETY: the caller's contract.
        unsafe { self.core.get(addr, len, access) }
    }

    /// Gives a lease back; a region made stale meanwhile is deregistered
    /// now that nothing uses it.
    pub fn put(&self, lease: Lease) {
        self.core.put(lease)
    }

    /// The cache's counters.
    pub fn stats(&self) -> CacheStats {
        self.core.stats()
    }

    /// Deregisters every region without leases.
    pub fn flush(&self) {
        self.core.flush()
    }
}

impl<R: Registrar> Cache<R> {
    /// A cache of at most `max_entries` regions (at least 1) on `reg`.
    pub(crate) fn new(reg: R, max_entries: usize) -> Self {
        ATFORK.call_once(|| {
            // SAFETY: registering a handler that only touches this module's
            // statics; no other handler is involved.
            unsafe { nix::libc::pthread_atfork(None, None, Some(atfork_child)) };
        });
        if std::env::var_os("ZN_CACHE_NOHOOKS").is_some_and(|v| v == "1") {
            HOOKS_OFF.store(true, Ordering::Relaxed);
        }
        let inner = Arc::new(Mutex::new(Inner {
            reg,
            entries: Vec::new(),
            max_entries: max_entries.max(1),
            clock: 0,
            stats: CacheStats::default(),
        }));
        let hooked: Arc<dyn Hooked> = inner.clone();
        lock(&CACHES).push(Arc::downgrade(&hooked));
        Self { inner }
    }

    /// [`RegCache::get`].
    ///
    /// # Safety
    /// As [`RegCache::get`].
    pub(crate) unsafe fn get(&self, addr: *const u8, len: usize, access: u32) -> Result<Lease> {
        let a = addr as usize;
        let e = a.saturating_add(len.max(1));
        let mut g = lock(&self.inner);
        g.clock += 1;
        let now = g.clock;
        if let Some(ent) = g.entries.iter_mut().find(|x| {
            !x.stale
                && x.start <= a
                && e <= x.end
                && x.region
                    .as_ref()
                    .is_some_and(|r| R::access(r) & access == access)
        }) {
            ent.leases += 1;
            ent.last_use = now;
            let lease = Lease {
                key: ent.region.as_ref().map_or(0, R::key),
                offset: (a - ent.start) as u64,
                start: ent.start,
            };
            g.stats.hits += 1;
            return Ok(lease);
        }
        // Make room: the least recently used region without leases.
        while g.entries.len() >= g.max_entries {
            let victim = g
                .entries
                .iter()
                .enumerate()
                .filter(|(_, x)| x.leases == 0)
                .min_by_key(|(_, x)| x.last_use)
                .map(|(i, _)| i);
            let Some(i) = victim else { break };
            let ent = g.entries.swap_remove(i);
            g.stats.evictions += 1;
            release::<R>(ent);
        }
        let (ps, pe) = (a & !(PAGE - 1), e.div_ceil(PAGE) * PAGE);
        let reg = g.reg.clone();
        // SAFETY: the caller's contract.
        let region = match unsafe { reg.register(ps as *const u8, pe - ps, access) } {
            Ok(r) => r,
            // Whole pages reach into something unmapped or read-only.
            // SAFETY: the caller's contract.
            Err(_) => unsafe { reg.register(addr, e - a, access) }?,
        };
        let (start, rlen) = R::span(&region);
        let end = start + rlen;
        g.stats.misses += 1;
        LIVE_ENTRIES.fetch_add(1, Ordering::Relaxed);
        let lease = Lease {
            key: R::key(&region),
            offset: (a - start) as u64,
            start,
        };
        g.entries.push(Entry {
            region: Some(region),
            start,
            end,
            leases: 1,
            stale: false,
            last_use: now,
        });
        Ok(lease)
    }

    /// [`RegCache::put`].
    pub(crate) fn put(&self, lease: Lease) {
        let mut g = lock(&self.inner);
        let Some(i) = g.entries.iter().position(|x| {
            x.start == lease.start && x.region.as_ref().map(R::key) == Some(lease.key)
        }) else {
            return;
        };
        let ent = &mut g.entries[i];
        ent.leases = ent.leases.saturating_sub(1);
        if ent.stale && ent.leases == 0 {
            let ent = g.entries.swap_remove(i);
            release::<R>(ent);
        }
    }

    /// [`RegCache::stats`].
    pub(crate) fn stats(&self) -> CacheStats {
        let g = lock(&self.inner);
        let mut s = g.stats;
        s.entries = g.entries.len() as u64;
        s.bytes = g.entries.iter().map(|x| (x.end - x.start) as u64).sum();
        s
    }

    /// [`RegCache::flush`].
    pub(crate) fn flush(&self) {
        let mut g = lock(&self.inner);
        let (keep, drop_): (Vec<_>, Vec<_>) = std::mem::take(&mut g.entries)
            .into_iter()
            .partition(|x| x.leases > 0);
        g.entries = keep;
        for e in drop_ {
            release::<R>(e);
        }
    }
}

impl<R: Registrar> Drop for Cache<R> {
    fn drop(&mut self) {
        self.flush();
        let me: Arc<dyn Hooked> = self.inner.clone();
        let me = Arc::downgrade(&me);
        lock(&CACHES).retain(|w| w.strong_count() > 0 && !Weak::ptr_eq(w, &me));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn release<R: Registrar>(mut e: Entry<R::Region>) {
    LIVE_ENTRIES.fetch_sub(1, Ordering::Relaxed);
    if let Some(r) = e.region.take() {
        R::release(r);
    }
}

/// An invalidation in progress: [`invalidate_begin`] before the real call,
/// [`invalidate_end`] after it.
#[derive(Debug)]
#[must_use = "end the invalidation with invalidate_end() after the real call"]
pub struct Invalidation {
    _private: (),
}

/// The memory hooks' entry before the real call changes
/// `[addr, addr + len)`: as [`invalidate_range`].
pub fn invalidate_begin(addr: usize, len: usize) -> Invalidation {
    invalidate_range(addr, len);
    Invalidation { _private: () }
}

/// The memory hooks' exit after the real call (it returned).
pub fn invalidate_end(inv: Invalidation) {
    let _ = inv;
}

/// The memory hooks' entry: `[addr, addr + len)` is about to be unmapped,
/// remapped or have its pages replaced. Every cached region overlapping it
/// becomes stale (never returned again) and is deregistered now, or when
/// its last lease comes back. Cheap when no cache holds anything.
pub fn invalidate_range(addr: usize, len: usize) {
    if LIVE_ENTRIES.load(Ordering::Relaxed) == 0
        || len == 0
        || IN_FORK_CHILD.load(Ordering::Relaxed)
        || HOOKS_OFF.load(Ordering::Relaxed)
    {
        return;
    }
    // The work below allocates and frees: the `free` hook must not recurse
    // into it (an unbounded recursion otherwise), nor may a hook that runs
    // while this thread already invalidates.
    thread_local! {
        static BUSY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if BUSY.with(|b| b.replace(true)) {
        return;
    }
    invalidate_locked(addr, len);
    BUSY.with(|b| b.set(false));
}

fn invalidate_locked(addr: usize, len: usize) {
    let end = addr.saturating_add(len);
    // A hook may run while this thread holds a cache's lock (a region's
    // memory unmapped by the cache's own code never overlaps a cached
    // range, but `try_lock` keeps that from deadlocking regardless).
    let caches: Vec<Arc<dyn Hooked>> = match CACHES.try_lock() {
        Ok(g) => g.iter().filter_map(Weak::upgrade).collect(),
        Err(_) => return,
    };
    for c in caches {
        c.invalidate(addr, end);
    }
}

impl<R: Registrar> Hooked for Mutex<Inner<R>> {
    fn invalidate(&self, addr: usize, end: usize) {
        let Ok(mut g) = self.try_lock() else { return };
        let mut i = 0;
        while i < g.entries.len() {
            let x = &mut g.entries[i];
            if !x.stale && x.start < end && addr < x.end {
                x.stale = true;
                g.stats.invalidations += 1;
                if g.entries[i].leases == 0 {
                    let ent = g.entries.swap_remove(i);
                    release::<R>(ent);
                    continue;
                }
            }
            i += 1;
        }
    }

    fn forget_all(&self) {
        let Ok(mut g) = self.try_lock() else { return };
        for mut e in std::mem::take(&mut g.entries) {
            LIVE_ENTRIES.fetch_sub(1, Ordering::Relaxed);
            if let Some(r) = e.region.take() {
                R::forget(r);
            }
        }
    }
}

/// In a `fork()` child: forget every cached region without deregistering
/// (the file is shared with the parent, whose regions they are; the child's
/// pages are copies). Registered with `pthread_atfork` by the first cache.
pub fn forget_all_after_fork() {
    let caches: Vec<Arc<dyn Hooked>> = match CACHES.try_lock() {
        Ok(g) => g.iter().filter_map(Weak::upgrade).collect(),
        Err(_) => return,
    };
    for c in caches {
        c.forget_all();
    }
}

/// Whether any cache of the process holds a region (the hooks' fast path).
pub fn any_cached() -> bool {
    LIVE_ENTRIES.load(Ordering::Relaxed) != 0
}

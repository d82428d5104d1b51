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
//! `realloc`, and call [`invalidate_begin`] with the range about to change
//! *before* the real call runs and [`invalidate_end`] after it. That marks
//! every cached region overlapping it stale in every cache of the process,
//! through a lock-free log no invalidation is lost from (see "The
//! invalidation log" below): a stale region
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
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    /// Every record of the invalidation log below this ticket has been
    /// applied to `entries` (the first record not yet written, if any).
    applied: u64,
    /// `LOG_LOST` when last applied.
    lost_seen: u64,
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
    /// Applies the invalidation log (`try_lock`).
    fn apply(&self);
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
            applied: LOG_HEAD.load(Ordering::SeqCst),
            lost_seen: LOG_LOST.load(Ordering::SeqCst),
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
        g.apply_log();
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
        let reg = g.reg.clone();
        // MR_REG runs without the lock (hooks never wait for it anyway).
        // The registration in flight counts as an entry, so the hooks'
        // fast path (`any_cached`) does not skip the invalidations it
        // must see.
        LIVE_ENTRIES.fetch_add(1, Ordering::SeqCst);
        drop(g);
        let (ps, pe) = (a & !(PAGE - 1), e.div_ceil(PAGE) * PAGE);
        let mut attempt = 1;
        loop {
            // Invalidations that end from here on are checked below.
            let t0 = LOG_HEAD.load(Ordering::SeqCst);
            let lost0 = LOG_LOST.load(Ordering::SeqCst);
            // SAFETY: the caller's contract.
            let region = match unsafe { reg.register(ps as *const u8, pe - ps, access) } {
                Ok(r) => Ok(r),
                // Whole pages reach into something unmapped or read-only.
                // SAFETY: the caller's contract.
                Err(_) => unsafe { reg.register(addr, e - a, access) },
            };
            let region = match region {
                Ok(r) => r,
                Err(err) => {
                    LIVE_ENTRIES.fetch_sub(1, Ordering::SeqCst);
                    return Err(err);
                }
            };
            let (start, rlen) = R::span(&region);
            let end = start + rlen;
            let mut g = lock(&self.inner);
            // The pages pinned may be the ones an invalidation racing with
            // MR_REG is replacing: one still in progress (its real call may
            // have run after the pin), or one that ended after `t0`. The
            // order matters: an invalidation publishes its end in the log
            // before it leaves the in-progress table. Checked under the
            // lock: records another thread applied since `t0` are not
            // applied again below.
            let raced = active_overlaps(start, end)
                || LOG_LOST.load(Ordering::SeqCst) != lost0
                || log_overlaps(t0, start, end);
            g.evict();
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
                stale: raced,
                last_use: now,
            });
            // Records not yet applied (written or not) now cover the new
            // entry as well as the others.
            g.apply_log();
            // Leased, so still there (`apply_log` removes only unleased).
            let Some(idx) = g.entries.iter().rposition(|x| {
                x.start == start && x.region.as_ref().map(R::key) == Some(lease.key)
            }) else {
                return Ok(lease);
            };
            if !g.entries[idx].stale {
                g.stats.misses += 1;
                return Ok(lease);
            }
            if attempt == MAX_ATTEMPTS {
                // Invalidations kept racing: the caller gets a lease of its
                // own, never handed out again and deregistered at `put`.
                g.stats.misses += 1;
                return Ok(lease);
            }
            // Register again: the range holds its new pages by now (or is
            // being replaced still).
            let ent = g.entries.swap_remove(idx);
            drop(g);
            LIVE_ENTRIES.fetch_add(1, Ordering::SeqCst);
            release::<R>(ent);
            attempt += 1;
        }
    }

    /// [`RegCache::put`].
    pub(crate) fn put(&self, lease: Lease) {
        let mut g = lock(&self.inner);
        g.apply_log();
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
        let mut g = lock(&self.inner);
        g.apply_log();
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

impl<R: Registrar> Inner<R> {
    /// Deregisters least recently used regions without leases until a new
    /// one fits.
    fn evict(&mut self) {
        while self.entries.len() >= self.max_entries {
            let victim = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, x)| x.leases == 0)
                .min_by_key(|(_, x)| x.last_use)
                .map(|(i, _)| i);
            let Some(i) = victim else { break };
            let ent = self.entries.swap_remove(i);
            self.stats.evictions += 1;
            release::<R>(ent);
        }
    }

    /// Marks the regions overlapping `[addr, end)` stale (every region if
    /// `addr > end`), deregistering those without leases.
    fn mark_stale(&mut self, addr: usize, end: usize) {
        let mut i = 0;
        while i < self.entries.len() {
            let x = &mut self.entries[i];
            if !x.stale && (addr > end || (x.start < end && addr < x.end)) {
                x.stale = true;
                self.stats.invalidations += 1;
                if self.entries[i].leases == 0 {
                    let ent = self.entries.swap_remove(i);
                    release::<R>(ent);
                    continue;
                }
            }
            i += 1;
        }
    }

    /// Applies the invalidation log's records from `applied` on. A record
    /// overwritten before it was applied, or one a hook could not write
    /// (`LOG_LOST`), makes every region stale: the range is not known.
    fn apply_log(&mut self) {
        const ALL: (usize, usize) = (usize::MAX, 0);
        let lost = LOG_LOST.load(Ordering::SeqCst);
        let head = LOG_HEAD.load(Ordering::SeqCst);
        if lost != self.lost_seen {
            self.lost_seen = lost;
            self.mark_stale(ALL.0, ALL.1);
        }
        let mut from = self.applied;
        if head - from > LOG_LEN as u64 {
            self.mark_stale(ALL.0, ALL.1);
            from = head - LOG_LEN as u64;
        }
        let mut first_unwritten = None;
        for t in from..head {
            match log_read(t) {
                Rec::Range(a, b) => self.mark_stale(a, b),
                Rec::Gone => self.mark_stale(ALL.0, ALL.1),
                // Its hook is between taking the ticket and writing the
                // record: applied by a later call, to the regions then.
                Rec::Unwritten => {
                    first_unwritten.get_or_insert(t);
                }
            }
        }
        self.applied = first_unwritten.unwrap_or(head);
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
    LIVE_ENTRIES.fetch_sub(1, Ordering::SeqCst);
    if let Some(r) = e.region.take() {
        R::release(r);
    }
}

// The invalidation log.
//
// A hook never takes a cache's lock to invalidate (it may run inside the
// cache's own code, in a signal handler, or while another thread registers
// under that lock): it writes the range into a lock-free log, and every
// cache applies the log's new records under its own lock before it answers
// a `get`, a `put` or `stats`, so no invalidation is ever skipped. A hook
// writes the range twice: before the real call (regions cached then go
// stale before the range can hold other pages) and after it (a
// registration in flight may have pinned the old pages just before the
// real call). In between, the range is in the table of invalidations in
// progress, which a registration checks once MR_REG returned: if it raced
// with one, it is not cached (`Cache::get`). Everything is atomics on
// static arrays: no allocation, no lock, no wait, so it is safe in a signal
// handler and inside any code of the process.

/// Records the log keeps; a cache that fell further behind invalidates all.
const LOG_LEN: usize = 256;
/// Invalidations in progress with a known range; more are counted in
/// `ACTIVE_UNKNOWN` (as "everything").
const ACTIVE_LEN: usize = 64;
/// Registrations of one `get` that raced with an invalidation of their
/// range before the last one is handed out uncached.
const MAX_ATTEMPTS: u32 = 3;

/// A log record: `seq` is `ticket << 1` while the hook writes it,
/// `ticket << 1 | 1` once written (a seqlock; 0: never used).
struct LogSlot {
    seq: AtomicU64,
    start: AtomicUsize,
    end: AtomicUsize,
}

/// An invalidation in progress: `state` is `gen << 2 | kind` (kind 0 free,
/// 1 being claimed, 2 in progress over `[start, end)`).
struct ActiveSlot {
    state: AtomicU64,
    start: AtomicUsize,
    end: AtomicUsize,
}

static LOG: [LogSlot; LOG_LEN] = [const {
    LogSlot {
        seq: AtomicU64::new(0),
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
    }
}; LOG_LEN];
/// The next record's ticket (tickets start at 1).
static LOG_HEAD: AtomicU64 = AtomicU64::new(1);
/// Records a hook could not write (its slot was being written by a hook
/// that a signal interrupted): every cache goes stale once.
static LOG_LOST: AtomicU64 = AtomicU64::new(0);
static ACTIVE: [ActiveSlot; ACTIVE_LEN] = [const {
    ActiveSlot {
        state: AtomicU64::new(0),
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
    }
}; ACTIVE_LEN];
/// Invalidations in progress without a slot in `ACTIVE`.
static ACTIVE_UNKNOWN: AtomicUsize = AtomicUsize::new(0);

enum Rec {
    Range(usize, usize),
    /// Overwritten by a later record.
    Gone,
    /// Ticket taken, record not written yet.
    Unwritten,
}

fn log_push(start: usize, end: usize) {
    let t = LOG_HEAD.fetch_add(1, Ordering::SeqCst);
    let slot = &LOG[(t % LOG_LEN as u64) as usize];
    let mut cur = slot.seq.load(Ordering::SeqCst);
    loop {
        if cur >> 1 > t {
            // A later record has the slot: readers see this one as gone.
            return;
        }
        if cur != 0 && cur & 1 == 0 {
            // A hook interrupted while writing this slot (by the signal
            // handler this may be): never wait for it.
            LOG_LOST.fetch_add(1, Ordering::SeqCst);
            return;
        }
        match slot
            .seq
            .compare_exchange(cur, t << 1, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => break,
            Err(now) => cur = now,
        }
    }
    slot.start.store(start, Ordering::Relaxed);
    slot.end.store(end, Ordering::Relaxed);
    slot.seq.store(t << 1 | 1, Ordering::SeqCst);
}

fn log_read(t: u64) -> Rec {
    let slot = &LOG[(t % LOG_LEN as u64) as usize];
    let s1 = slot.seq.load(Ordering::SeqCst);
    if s1 >> 1 > t {
        return Rec::Gone;
    }
    if s1 != (t << 1 | 1) {
        return Rec::Unwritten;
    }
    let (a, b) = (
        slot.start.load(Ordering::Relaxed),
        slot.end.load(Ordering::Relaxed),
    );
    fence(Ordering::Acquire);
    if slot.seq.load(Ordering::Relaxed) != s1 {
        return Rec::Gone;
    }
    Rec::Range(a, b)
}

/// Whether a record from ticket `t0` on overlaps `[start, end)` or cannot
/// be read (overwritten). Unwritten ones are left to `apply_log`.
fn log_overlaps(t0: u64, start: usize, end: usize) -> bool {
    let head = LOG_HEAD.load(Ordering::SeqCst);
    if head.saturating_sub(t0) > LOG_LEN as u64 {
        return true;
    }
    (t0..head).any(|t| match log_read(t) {
        Rec::Range(a, b) => a < end && start < b,
        Rec::Gone => true,
        Rec::Unwritten => false,
    })
}

/// Whether an invalidation in progress overlaps `[start, end)`.
fn active_overlaps(start: usize, end: usize) -> bool {
    if ACTIVE_UNKNOWN.load(Ordering::SeqCst) != 0 {
        return true;
    }
    ACTIVE.iter().any(|slot| {
        let s1 = slot.state.load(Ordering::SeqCst);
        if s1 & 3 != 2 {
            // Free, or claimed by an invalidation whose real call has not
            // run yet (its first record will reach the new entry).
            return false;
        }
        let (a, b) = (
            slot.start.load(Ordering::Relaxed),
            slot.end.load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        // Changed: that invalidation ended, and its second record is in
        // the log already.
        slot.state.load(Ordering::Relaxed) == s1 && a < end && start < b
    })
}

/// An invalidation in progress: [`invalidate_begin`] before the real call,
/// [`invalidate_end`] after it.
#[derive(Debug)]
#[must_use = "end the invalidation with invalidate_end() after the real call"]
pub struct Invalidation {
    /// `[start, end)`, or `None` if nothing was recorded.
    range: Option<(usize, usize)>,
    /// Its slot in `ACTIVE`, or `None` if counted in `ACTIVE_UNKNOWN`.
    slot: Option<usize>,
}

/// The memory hooks' entry before the real call changes
/// `[addr, addr + len)`: every cached region overlapping it becomes stale
/// (never returned again) and is deregistered now, or when its last lease
/// comes back, and no registration overlapping it is cached until
/// [`invalidate_end`]. Never blocks, allocates or takes a lock it could
/// wait for: safe from any code, including the cache's own and signal
/// handlers.
pub fn invalidate_begin(addr: usize, len: usize) -> Invalidation {
    if len == 0 || IN_FORK_CHILD.load(Ordering::Relaxed) || HOOKS_OFF.load(Ordering::Relaxed) {
        return Invalidation {
            range: None,
            slot: None,
        };
    }
    let end = addr.saturating_add(len);
    let slot = ACTIVE.iter().position(|s| {
        let cur = s.state.load(Ordering::SeqCst);
        cur & 3 == 0
            && s.state
                .compare_exchange(cur, cur | 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    });
    match slot {
        Some(i) => {
            let s = &ACTIVE[i];
            s.start.store(addr, Ordering::Relaxed);
            s.end.store(end, Ordering::Relaxed);
            let cur = s.state.load(Ordering::Relaxed);
            s.state.store(cur & !3 | 2, Ordering::SeqCst);
        }
        None => {
            ACTIVE_UNKNOWN.fetch_add(1, Ordering::SeqCst);
        }
    }
    log_push(addr, end);
    apply_now();
    Invalidation {
        range: Some((addr, end)),
        slot,
    }
}

/// The memory hooks' exit once the real call returned. Makes no system
/// call (the caller's `errno` stays).
pub fn invalidate_end(inv: Invalidation) {
    let Some((addr, end)) = inv.range else { return };
    // The second record first, then leave the table: a registration that
    // no longer sees this invalidation in progress sees the record.
    log_push(addr, end);
    match inv.slot {
        Some(i) => {
            let s = &ACTIVE[i];
            let cur = s.state.load(Ordering::Relaxed);
            s.state
                .store((cur >> 2).wrapping_add(1) << 2, Ordering::SeqCst);
        }
        None => {
            ACTIVE_UNKNOWN.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Invalidates `[addr, addr + len)` in one step, for a caller without a
/// real call to bracket (the hooks use [`invalidate_begin`] and
/// [`invalidate_end`] around theirs). A registration racing with the
/// change of the range is only caught if this runs after the change, too.
pub fn invalidate_range(addr: usize, len: usize) {
    invalidate_end(invalidate_begin(addr, len));
}

/// Applies the log to every cache whose lock is free, so stale regions are
/// deregistered at once (the others apply it at their next use).
fn apply_now() {
    if LIVE_ENTRIES.load(Ordering::SeqCst) == 0 {
        return;
    }
    // Deregistering frees memory: the `free` hook must not recurse into
    // this (it only logs then), nor may a hook that runs while this thread
    // already applies.
    thread_local! {
        static BUSY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if BUSY.with(|b| b.replace(true)) {
        return;
    }
    if let Ok(caches) = CACHES.try_lock() {
        for c in caches.iter().filter_map(Weak::upgrade) {
            c.apply();
        }
    }
    BUSY.with(|b| b.set(false));
}

impl<R: Registrar> Hooked for Mutex<Inner<R>> {
    fn apply(&self) {
        if let Ok(mut g) = self.try_lock() {
            g.apply_log();
        }
    }

    fn forget_all(&self) {
        let Ok(mut g) = self.try_lock() else { return };
        for mut e in std::mem::take(&mut g.entries) {
            LIVE_ENTRIES.fetch_sub(1, Ordering::SeqCst);
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
    // Invalidations in progress were other threads', which the child has
    // not: none is in progress.
    for s in &ACTIVE {
        let cur = s.state.load(Ordering::Relaxed);
        if cur & 3 != 0 {
            s.state
                .store((cur >> 2).wrapping_add(1) << 2, Ordering::SeqCst);
        }
    }
    ACTIVE_UNKNOWN.store(0, Ordering::SeqCst);
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
    LIVE_ENTRIES.load(Ordering::SeqCst) != 0
}

#[cfg(test)]
mod tests;

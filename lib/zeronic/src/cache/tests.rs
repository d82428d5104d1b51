//! The cache against a fake registrar whose registration can be paused
//! between its steps, so invalidations can be raced against a `get()` in
//! progress (issue 32, finding 13). The fake's "memory" is a generation
//! number per page: replacing a range (`munmap` + `mmap`) bumps it, and a
//! registration records the generations it pinned, so a lease is stale
//! exactly when its region pinned an older generation than the address
//! holds now.

use super::*;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// The hooks' state is the process's: one cache test at a time.
static SERIAL: Mutex<()> = Mutex::new(());
/// Each test's fake addresses are its own (no real memory behind them).
static NEXT_BASE: AtomicU64 = AtomicU64::new(0x7e00_0000_0000);

fn base(len: usize) -> usize {
    NEXT_BASE.fetch_add((len + (1 << 20)) as u64, Ordering::Relaxed) as usize
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    BeforePin,
    AfterPin,
}

type Hook = Box<dyn FnMut(Phase) + Send>;
type OnRelease = Box<dyn FnMut(u64) + Send>;

#[derive(Default)]
struct Mem {
    gen: HashMap<usize, u64>,
    next_key: u64,
    pinned: HashMap<u64, Vec<(usize, u64)>>,
}

#[derive(Default)]
struct FakeInner {
    mem: Mutex<Mem>,
    hook: Mutex<Option<Hook>>,
    on_release: Mutex<Option<OnRelease>>,
}

#[derive(Clone, Default)]
struct Fake(Arc<FakeInner>);

impl std::fmt::Debug for Fake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fake")
    }
}

#[derive(Debug)]
struct FakeRegion {
    fake: Fake,
    key: u64,
    addr: usize,
    len: usize,
    access: u32,
}

fn pages(addr: usize, len: usize) -> impl Iterator<Item = usize> {
    (addr & !(PAGE - 1)..addr + len).step_by(PAGE)
}

impl Fake {
    fn call_hook(&self, p: Phase) {
        let h = self.0.hook.lock().unwrap().take();
        if let Some(mut h) = h {
            h(p);
            let mut slot = self.0.hook.lock().unwrap();
            if slot.is_none() {
                *slot = Some(h);
            }
        }
    }

    fn set_hook(&self, h: impl FnMut(Phase) + Send + 'static) {
        *self.0.hook.lock().unwrap() = Some(Box::new(h));
    }

    /// The mapping of `[addr, addr + len)` changes (the real call).
    fn remap(&self, addr: usize, len: usize) {
        let mut m = self.0.mem.lock().unwrap();
        for p in pages(addr, len) {
            *m.gen.entry(p).or_default() += 1;
        }
    }

    /// `munmap` + `mmap` at the same address, as the hooks do it.
    fn replace(&self, addr: usize, len: usize) {
        let inv = invalidate_begin(addr, len);
        self.remap(addr, len);
        invalidate_end(inv);
    }

    fn gens(&self, addr: usize, len: usize) -> Vec<u64> {
        let m = self.0.mem.lock().unwrap();
        pages(addr, len)
            .map(|p| m.gen.get(&p).copied().unwrap_or(0))
            .collect()
    }

    /// The generations the lease's region pinned for `[addr, addr + len)`.
    fn pinned(&self, l: &Lease, addr: usize, len: usize) -> Vec<u64> {
        let m = self.0.mem.lock().unwrap();
        let pin = &m.pinned[&l.key];
        pages(addr, len)
            .map(|p| pin.iter().find(|x| x.0 == p).expect("page in region").1)
            .collect()
    }

    fn fresh(&self, l: &Lease, addr: usize, len: usize) -> bool {
        self.pinned(l, addr, len) == self.gens(addr, len)
    }

    fn live(&self) -> usize {
        self.0.mem.lock().unwrap().pinned.len()
    }
}

impl Registrar for Fake {
    type Region = FakeRegion;
    unsafe fn register(&self, addr: *const u8, len: usize, access: u32) -> Result<FakeRegion> {
        self.call_hook(Phase::BeforePin);
        let key = {
            let mut m = self.0.mem.lock().unwrap();
            m.next_key += 1;
            let key = m.next_key;
            let pin = pages(addr as usize, len)
                .map(|p| (p, m.gen.get(&p).copied().unwrap_or(0)))
                .collect();
            m.pinned.insert(key, pin);
            key
        };
        self.call_hook(Phase::AfterPin);
        Ok(FakeRegion {
            fake: self.clone(),
            key,
            addr: addr as usize,
            len,
            access,
        })
    }
    fn key(r: &FakeRegion) -> u64 {
        r.key
    }
    fn access(r: &FakeRegion) -> u32 {
        r.access
    }
    fn span(r: &FakeRegion) -> (usize, usize) {
        (r.addr, r.len)
    }
    fn release(r: FakeRegion) {
        let cb = r.fake.0.on_release.lock().unwrap().take();
        if let Some(mut cb) = cb {
            cb(r.key);
        }
        r.fake.0.mem.lock().unwrap().pinned.remove(&r.key);
    }
    fn forget(r: FakeRegion) {
        Self::release(r)
    }
}

fn get(c: &Cache<Fake>, addr: usize, len: usize) -> Lease {
    // SAFETY: the fake registrar touches no memory.
    unsafe { c.get(addr as *const u8, len, ACCESS_READ_FOR_TESTS) }.expect("fake get")
}

const ACCESS_READ_FOR_TESTS: u32 = crate::ACCESS_READ;

/// The finding's case: a thread registers Y (the cache's lock held across
/// MR_REG before the fix) while another replaces X, which is cached; the
/// invalidation of X must not be lost.
#[test]
fn invalidation_during_another_registration_is_not_lost() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let fake = Fake::default();
    let c = Arc::new(Cache::new(fake.clone(), 16));
    let x = base(2 * PAGE);
    let y = x + (1 << 19);
    let l = get(&c, x, PAGE);
    c.put(l);
    let (ready_tx, ready_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let mut first = true;
    fake.set_hook(move |p| {
        if first && p == Phase::BeforePin {
            first = false;
            ready_tx.send(()).unwrap();
            let _ = go_rx.recv_timeout(Duration::from_secs(10));
        }
    });
    let c2 = c.clone();
    let a = thread::spawn(move || {
        let l = get(&c2, y, PAGE);
        c2.put(l);
    });
    ready_rx.recv().unwrap();
    fake.replace(x, PAGE);
    go_tx.send(()).unwrap();
    a.join().unwrap();
    let l = get(&c, x, PAGE);
    assert!(
        fake.fresh(&l, x, PAGE),
        "get(X) after X was replaced returned the old pages (pinned {:?}, now {:?})",
        fake.pinned(&l, x, PAGE),
        fake.gens(x, PAGE)
    );
    c.put(l);
    drop(c);
    assert_eq!(fake.live(), 0, "regions leaked");
}

/// A hook that runs inside the cache's own code (a `free` while the cache
/// deregisters a region under its lock) must not deadlock nor be lost.
#[test]
fn invalidation_from_inside_the_cache_is_not_lost() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let fake = Fake::default();
    let c = Cache::new(fake.clone(), 2);
    let a = base(4 * PAGE);
    let (x, b) = (a + PAGE, a + 2 * PAGE);
    for r in [a, x] {
        let l = get(&c, r, PAGE);
        c.put(l);
    }
    let f2 = fake.clone();
    *fake.0.on_release.lock().unwrap() = Some(Box::new(move |_| f2.replace(x, PAGE)));
    // Evicts A (least recently used): its MR_DEREG "frees" X's memory.
    let l = get(&c, b, PAGE);
    c.put(l);
    assert!(fake.0.on_release.lock().unwrap().is_none(), "A not evicted");
    let l = get(&c, x, PAGE);
    assert!(
        fake.fresh(&l, x, PAGE),
        "get(X) after X was replaced from inside the cache returned the old pages"
    );
    c.put(l);
    // And from inside a registration (MR_REG's own allocations).
    let f2 = fake.clone();
    let mut first = true;
    fake.set_hook(move |p| {
        if first && p == Phase::AfterPin {
            first = false;
            f2.replace(x, PAGE);
        }
    });
    let l = get(&c, x + 16, 8);
    assert_eq!(l.offset, 16);
    c.put(l);
    let l = get(&c, x, PAGE);
    assert!(
        fake.fresh(&l, x, PAGE),
        "get(X) after X was replaced during a registration returned the old pages"
    );
    c.put(l);
    drop(c);
    assert_eq!(fake.live(), 0, "regions leaked");
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    Begin,
    Remap,
    End,
}

/// Every placement of an invalidation's three steps (hook entry, the real
/// call, hook exit) around the steps of a `get()` of the same range (before
/// it, inside MR_REG before and after the pin, after it), with and without
/// the range cached before, plus a probe `get()` from another thread right
/// after the real call. Neither the probe nor any later `get()` may return
/// the old pages, and `get()`s that start after the real call never do.
#[test]
fn every_interleaving_of_an_invalidation_with_a_get() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut failures = Vec::new();
    let mut runs = 0;
    for cached in [false, true] {
        for b in 0..4 {
            for r in b..4 {
                for e in r..4 {
                    runs += 1;
                    if let Err(f) = interleaving(cached, [b, r, e]) {
                        failures.push(format!("cached={cached} begin@{b} remap@{r} end@{e}: {f}"));
                    }
                }
            }
        }
    }
    assert_eq!(runs, 40);
    assert!(
        failures.is_empty(),
        "{} of {runs} interleavings failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Positions: 0 before the get, 1 in MR_REG before the pin, 2 after it,
/// 3 after the get returned. The invalidation's steps and the probe run on
/// an actor thread; the get waits for each (bounded: a step that blocks is
/// a failure).
fn interleaving(cached: bool, at: [usize; 3]) -> std::result::Result<(), String> {
    let fake = Fake::default();
    let c = Arc::new(Cache::new(fake.clone(), 8));
    let x = base(2 * PAGE);
    let len = 2 * PAGE;
    if cached {
        let l = get(&c, x, len);
        c.put(l);
    }
    let (cmd_tx, cmd_rx) = mpsc::channel::<Ev>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let (fake2, c2) = (fake.clone(), c.clone());
    let actor = thread::spawn(move || -> std::result::Result<(), String> {
        let mut inv = None;
        let mut res = Ok(());
        for ev in cmd_rx {
            match ev {
                Ev::Begin => inv = Some(invalidate_begin(x, len)),
                Ev::Remap => {
                    fake2.remap(x, len);
                    // The probe: a get that starts after the real call.
                    let l = get(&c2, x, len);
                    if !fake2.fresh(&l, x, len) && res.is_ok() {
                        res = Err("the probe get after the real call got the old pages".into());
                    }
                    c2.put(l);
                }
                Ev::End => invalidate_end(inv.take().expect("begun")),
            }
            let _ = done_tx.send(());
        }
        res
    });
    let blocked = Arc::new(Mutex::new(Vec::new()));
    let run = {
        let blocked = blocked.clone();
        let mut ran = [false; 4];
        move |pos: usize| {
            if std::mem::replace(&mut ran[pos], true) {
                return;
            }
            for (i, ev) in [Ev::Begin, Ev::Remap, Ev::End].into_iter().enumerate() {
                if at[i] == pos {
                    cmd_tx.send(ev).unwrap();
                    if done_rx.recv_timeout(Duration::from_secs(2)).is_err() {
                        blocked
                            .lock()
                            .unwrap()
                            .push(format!("{ev:?}@{pos} blocked"));
                        // Blocked behind this get (waiting would
                        // deadlock): a failure; the step finishes later.
                    }
                }
            }
        }
    };
    let run = Arc::new(Mutex::new(run));
    run.lock().unwrap()(0);
    let me = thread::current().id();
    let mut calls = 0;
    let run2 = run.clone();
    fake.set_hook(move |p| {
        if thread::current().id() != me {
            return;
        }
        calls += 1;
        match (calls, p) {
            (1, Phase::BeforePin) => run2.lock().unwrap()(1),
            (2, Phase::AfterPin) => run2.lock().unwrap()(2),
            _ => {}
        }
    });
    let started_after_remap = at[1] == 0;
    let l = get(&c, x, len);
    let mut errs = Vec::new();
    // The hook did not run if the get was a hit: positions 1 and 2 then
    // happen right after it.
    run.lock().unwrap()(1);
    run.lock().unwrap()(2);
    if started_after_remap && !fake.fresh(&l, x, len) {
        errs.push("a get that started after the real call got the old pages".to_string());
    }
    c.put(l);
    run.lock().unwrap()(3);
    // The hook holds the actor's channel: drop both so the actor ends.
    *fake.0.hook.lock().unwrap() = None;
    drop(run);
    if let Err(e) = actor.join().unwrap() {
        errs.push(e);
    }
    for _ in 0..2 {
        let l = get(&c, x, len);
        if !fake.fresh(&l, x, len) {
            errs.push(format!(
                "a later get returned the old pages (pinned {:?}, now {:?})",
                fake.pinned(&l, x, len),
                fake.gens(x, len)
            ));
        }
        c.put(l);
    }
    errs.extend(blocked.lock().unwrap().drain(..));
    drop(c);
    if fake.live() != 0 {
        errs.push(format!("{} regions leaked", fake.live()));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

/// Threads get and put leases on a few buffers while others replace them:
/// a lease never pins pages older than those its buffer held when its
/// `get()` began, and nothing leaks.
#[test]
fn concurrent_gets_never_see_pages_replaced_before_the_call() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let fake = Fake::default();
    let c = Arc::new(Cache::new(fake.clone(), 4));
    const BUFS: usize = 8;
    let x = base(BUFS * 4 * PAGE);
    let buf = move |i: usize| x + i * 4 * PAGE;
    let stop = Arc::new(AtomicBool::new(false));
    let gets = Arc::new(AtomicU64::new(0));
    let replaces = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for t in 0..3u64 {
        let (c, fake, stop, gets) = (c.clone(), fake.clone(), stop.clone(), gets.clone());
        threads.push(thread::spawn(move || -> Vec<String> {
            let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ t;
            let mut bad = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let i = (seed % BUFS as u64) as usize;
                let len = PAGE * (1 + (seed >> 8) as usize % 2);
                let before = fake.gens(buf(i), len);
                let l = get(&c, buf(i), len);
                let got = fake.pinned(&l, buf(i), len);
                if got.iter().zip(&before).any(|(g, b)| g < b) && bad.len() < 5 {
                    bad.push(format!(
                        "buffer {i}: pinned {got:?}, held {before:?} at the call"
                    ));
                }
                c.put(l);
                gets.fetch_add(1, Ordering::Relaxed);
            }
            bad
        }));
    }
    for t in 0..2u64 {
        let (fake, stop, replaces) = (fake.clone(), stop.clone(), replaces.clone());
        threads.push(thread::spawn(move || {
            let mut i = t as usize;
            while !stop.load(Ordering::Relaxed) {
                i = (i * 5 + 3) % BUFS;
                fake.replace(buf(i), PAGE * (1 + i % 2));
                replaces.fetch_add(1, Ordering::Relaxed);
                thread::yield_now();
            }
            Vec::new()
        }));
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1500) {
        thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let bad: Vec<String> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    eprintln!(
        "{} gets, {} replacements, {:?}",
        gets.load(Ordering::Relaxed),
        replaces.load(Ordering::Relaxed),
        c.stats()
    );
    assert!(bad.is_empty(), "stale leases:\n{}", bad.join("\n"));
    // After the last replacement, every buffer is fresh.
    for i in 0..BUFS {
        let l = get(&c, buf(i), PAGE);
        assert!(fake.fresh(&l, buf(i), PAGE), "buffer {i} stale at the end");
        c.put(l);
    }
    drop(c);
    assert_eq!(fake.live(), 0, "regions leaked");
}

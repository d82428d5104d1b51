//! What every part of the shim shares, and which names none of them:
//! the configuration (environment), the counters, the log, and the real
//! libc functions. Each subsystem keeps its own table (`per_proc.rs`).

use nix::libc::{self, c_int};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Tunables, from the environment at the first use (`docs/shim.md`).
#[derive(Debug, Clone)]
pub struct Config {
    /// `ZN_SHIM=0`: pass everything through.
    pub enabled: bool,
    /// `ZN_SHIM_LOG=1`: a line on stderr per offloaded connection and per
    /// fallback; `ZN_SHIM_LOG=path` appends them to that file.
    pub log: Option<String>,
    /// `ZN_SHIM_STATS=path`: the counters at exit (`-`: stderr).
    pub stats: Option<String>,
    /// `ZN_SHIM_ZC_THRESHOLD` (bytes, default 256 KiB): blocking sends of
    /// at least this many bytes go zero-copy from the caller's memory.
    /// The default is `make bench`'s sweep (docs/shim.md): a zero-copy
    /// send returns once ACKed, so below about 256 KiB it moved half the
    /// bytes per second of a copied one for no less CPU; from 256 KiB on
    /// it cost about 0.7x the CPU per GiB at about the same rate.
    pub zc_threshold: usize,
    /// `ZN_SHIM_RING` (bytes, power of two, default 1 MiB): receive ring.
    pub ring: usize,
    /// `ZN_SHIM_STAGING` (bytes, default 1 MiB): send staging memory.
    pub staging: usize,
    /// `ZN_SHIM_CQ` (entries, default 1024).
    pub cq_entries: u32,
    /// `ZN_SHIM_NIC` (default 0).
    pub nic: u32,
    /// `ZN_SHIM_SENDFILE_CACHE` (bytes, default 16 MiB): file windows
    /// `sendfile` keeps mapped and registered for the next call
    /// (`sendfile.rs`).
    pub sendfile_cache: usize,
    /// `ZN_SHIM_POOL` (connections, default 4; 0: no pool): how many
    /// released connections' ring and staging memory the process keeps
    /// registered for its next attaches (`pool.rs`).
    pub pool: usize,
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| {
            let v = v.trim();
            let (n, m) = match v.as_bytes().last() {
                Some(b'k' | b'K') => (&v[..v.len() - 1], 1 << 10),
                Some(b'm' | b'M') => (&v[..v.len() - 1], 1 << 20),
                _ => (v, 1),
            };
            n.parse::<usize>().ok().map(|x| x * m)
        })
        .unwrap_or(default)
}

pub fn config() -> &'static Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| {
        let ring = env_num("ZN_SHIM_RING", 1 << 20)
            .clamp(4096, 1 << 30)
            .next_power_of_two();
        Config {
            enabled: std::env::var("ZN_SHIM").map_or(true, |v| v != "0"),
            log: std::env::var("ZN_SHIM_LOG")
                .ok()
                .filter(|v| !v.is_empty() && v != "0"),
            stats: std::env::var("ZN_SHIM_STATS")
                .ok()
                .filter(|v| !v.is_empty()),
            zc_threshold: env_num("ZN_SHIM_ZC_THRESHOLD", 256 << 10).max(1),
            ring,
            staging: env_num("ZN_SHIM_STAGING", 1 << 20).max(4096),
            cq_entries: env_num("ZN_SHIM_CQ", 1024) as u32,
            nic: env_num("ZN_SHIM_NIC", 0) as u32,
            pool: env_num("ZN_SHIM_POOL", 4),
            sendfile_cache: env_num("ZN_SHIM_SENDFILE_CACHE", 16 << 20),
        }
    })
}

/// Declares the counters once: the struct, the order and names of the
/// exit report, and the reset of a forked child.
macro_rules! counters {
    ($($(#[$m:meta])* $field:ident = $name:literal,)*) => {
        /// Per-process counters (`ZN_SHIM_STATS`); a forked child starts
        /// from zero (its parent reports its own).
        #[derive(Debug, Default)]
        pub struct Stats {
            $($(#[$m])* pub $field: AtomicU64,)*
        }

        impl Stats {
            fn all(&self) -> Vec<(&'static str, &AtomicU64)> {
                vec![$(($name, &self.$field)),*]
            }
        }
    };
}

counters! {
    offloaded = "offloaded",
    /// Offloaded connections not yet closed.
    open_conns = "open",
    fallback_disabled = "fallback disabled",
    fallback_not_tcp = "not_tcp",
    fallback_not_ipv4 = "not_ipv4",
    fallback_loopback = "loopback",
    fallback_no_device = "no_device",
    fallback_route = "route",
    fallback_attach_error = "attach_error",
    fallback_not_established = "not_established",
    inherited_use = "inherited_use",
    unsupported_calls = "unsupported",
    /// Bytes the application read, and sent.
    rx_bytes = "rx_bytes",
    tx_bytes = "tx_bytes",
    tx_staged_sends = "tx_staged_sends",
    tx_zc_sends = "tx_zc_sends",
    tx_zc_bytes = "tx_zc_bytes",
    /// Sends that would have gone zero-copy but whose buffer could not be
    /// registered (memlock limit, MR Table share): copied instead.
    tx_zc_refused = "tx_zc_refused",
    /// Bytes sent by `sendfile`: all, zero-copy from the file's pages, and
    /// copied through a buffer; calls that took the copy path; file
    /// windows mapped and registered, and reused.
    sendfile_bytes = "sendfile_bytes",
    sendfile_zc_bytes = "sendfile_zc_bytes",
    sendfile_copied_bytes = "sendfile_copied_bytes",
    sendfile_fallbacks = "sendfile_fallbacks",
    sendfile_maps = "sendfile_maps",
    sendfile_map_hits = "sendfile_map_hits",
    rx_copied_completions = "rx_copied_completions",
    /// The flows' own counters (FLOW_QUERY), added when a connection
    /// closes (or at exit): bytes delivered in order, placed by the NIC,
    /// copied (all, and those copied during set-up, before the NIC placed
    /// any byte of the flow), and sent bytes the NIC read from the
    /// registered memory.
    rx_delivered_bytes = "rx_delivered_bytes",
    rx_placed_bytes = "rx_placed_bytes",
    rx_copied_bytes = "rx_copied_bytes",
    rx_setup_copied_bytes = "rx_setup_copied_bytes",
    tx_merged_bytes = "tx_merged_bytes",
    /// Attaches that took ring and staging memory from the pool, and
    /// those that allocated and registered it.
    pool_hits = "pool_hits",
    pool_misses = "pool_misses",
    /// Released connections whose memory went back to the pool; was
    /// released because the pool was full (or `ZN_SHIM_POOL=0`); was not
    /// safe to reuse (no confirmed `DETACHED`, sends still posted).
    pool_returned = "pool_returned",
    pool_full = "pool_full",
    pool_refused = "pool_refused",
    /// Completions of another flow on a connection's CQ (never expected).
    stale_cqes = "stale_cqes",
}

impl Stats {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
    pub fn sub(c: &AtomicU64, n: u64) {
        c.fetch_sub(n, Ordering::Relaxed);
    }
    pub fn render(&self) -> String {
        let mut s = format!("zn-shim pid {}:", pid());
        for (name, c) in self.all() {
            s += &format!(" {name} {}", c.load(Ordering::Relaxed));
        }
        s
    }
    /// A forked child's counters start from zero.
    pub fn reset(&self) {
        for (_, c) in self.all() {
            c.store(0, Ordering::Relaxed);
        }
    }
}

pub fn stats() -> &'static Stats {
    static S: OnceLock<Stats> = OnceLock::new();
    S.get_or_init(Stats::default)
}

pub fn pid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

pub fn log(msg: &str) {
    let Some(dest) = config().log.as_deref() else {
        return;
    };
    let line = format!("zn-shim[{}]: {msg}\n", pid());
    emit(dest, dest == "1" || dest == "-", &line);
}

/// Writes `line` to stderr (through the real `write`, never the shim's),
/// or appends it to the file `dest`; errors are dropped (diagnostics only).
fn emit(dest: &str, to_stderr: bool, line: &str) {
    if to_stderr {
        // SAFETY: writing a buffer to stderr.
        unsafe { real_write(2, line.as_ptr().cast(), line.len()) };
    } else if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dest)
    {
        use std::io::Write;
        let _ = f.write_all(line.as_bytes());
    }
}

pub fn signal_eventfd(fd: c_int) {
    let one: u64 = 1;
    // SAFETY: an 8-byte write to an eventfd we own.
    unsafe { real_write(fd, (&raw const one).cast(), 8) };
}

/// Resolves the next definition of a libc function (`RTLD_NEXT`), once.
macro_rules! real_fn {
    ($vis:vis fn $name:ident = $sym:literal ($($a:ident: $t:ty),*) -> $r:ty) => {
        /// The real function behind the shim's wrapper.
        ///
        /// # Safety
        /// As the libc function.
        $vis unsafe fn $name($($a: $t),*) -> $r {
            static P: ::std::sync::atomic::AtomicUsize = ::std::sync::atomic::AtomicUsize::new(0);
            let mut p = P.load(::std::sync::atomic::Ordering::Relaxed);
            if p == 0 {
                // SAFETY: dlsym with a NUL-terminated name.
                p = unsafe { libc::dlsym(libc::RTLD_NEXT, concat!($sym, "\0").as_ptr().cast()) } as usize;
                P.store(p, ::std::sync::atomic::Ordering::Relaxed);
            }
            assert!(p != 0, concat!("zn-shim: no ", $sym));
            // SAFETY: the symbol's C type, as declared by libc.
            let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(p) };
            // SAFETY: the caller's contract.
            unsafe { f($($a),*) }
        }
    };
}
pub(crate) use real_fn;

real_fn!(pub fn real_write = "write" (fd: c_int, b: *const libc::c_void, n: usize) -> isize);
real_fn!(pub fn real_poll = "poll" (f: *mut libc::pollfd, n: libc::nfds_t, t: c_int) -> c_int);

/// `pthread_atfork` child handler: the counters are per process.
pub extern "C" fn after_fork_child() {
    stats().reset();
}

/// Writes the counters where `ZN_SHIM_STATS` says (at exit).
pub fn report() {
    if let Some(dest) = config().stats.as_deref() {
        let line = format!("{}\n", stats().render());
        emit(dest, dest == "-", &line);
    }
}

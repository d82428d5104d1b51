//! The shim's per-process counters (`ZN_SHIM_STATS`, `docs/shim.md`,
//! "Counters"): TCP connections seen, attached, and each refusal by the
//! errno the kernel gave it.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Declares the counters once: the struct, and the names and order of
/// the exit report.
macro_rules! counters {
    ($($(#[$m:meta])* $field:ident = $name:literal,)*) => {
        #[derive(Debug)]
        pub struct Stats {
            $($(#[$m])* pub $field: AtomicU64,)*
        }

        impl Stats {
            pub const fn new() -> Self {
                Stats { $($field: AtomicU64::new(0),)* }
            }

            fn all(&self) -> [(&'static str, &AtomicU64); [$($name),*].len()] {
                [$(($name, &self.$field)),*]
            }
        }
    };
}

counters! {
    /// Established TCP connections the shim saw (connect, accept, accept4).
    connections = "connections",
    /// Of those, attached (`TCP_ULP` "zeronic" accepted).
    attached = "attached",
    /// Attached at the first data call after a non-blocking connect.
    attached_late = "attached_late",
    /// `ZN_SHIM=0`.
    disabled = "disabled",
    /// Refusals, by errno (docs/uapi.md's table): ENODEV, not over a
    /// ZeroNIC port (loopback among them).
    not_zeronic = "not_zeronic",
    /// EAFNOSUPPORT: an IPv6 connection on a NIC without IPv6.
    ipv6 = "ipv6",
    /// ENOTCONN: no longer established when attached.
    not_established = "not_established",
    /// EEXIST: a ULP is there already (a forked twin attached it first).
    has_ulp = "has_ulp",
    /// EOPNOTSUPP: `tcp-data-split` off, MD5/AO, repair, IPsec, sockmap.
    unsupported = "unsupported",
    /// ENOMEM: the ring is beyond `RLIMIT_MEMLOCK`.
    memlock = "memlock",
    /// ENOSPC: the MR or Flow Table (or the user's share) is full.
    table_full = "table_full",
    /// EIO: the NIC did not complete or refused.
    nic_error = "nic_error",
    /// ENOENT: no "zeronic" ULP (the driver is not loaded).
    no_driver = "no_driver",
    /// Any other errno.
    other_error = "other_error",
    /// Non-blocking connects found failed at the first data call.
    connect_failed = "connect_failed",
    /// Non-blocking connects closed before any data call.
    closed_pending = "closed_pending",
    /// Non-blocking connects on a descriptor beyond the pending bitmap.
    untracked = "untracked",
}

impl Stats {
    pub fn add(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// "zn-shim pid P: NAME VALUE ..." (the format `selftests/zn_shim.sh`
    /// and `zn-bench-report` read).
    pub fn render<const N: usize>(&self, pid: i32, l: &mut crate::line::Line<N>) {
        let _ = write!(l, "zn-shim pid {pid}:");
        for (name, c) in self.all() {
            let _ = write!(l, " {name} {}", c.load(Ordering::Relaxed));
        }
    }

    /// A forked child counts its own from zero.
    pub fn reset(&self) {
        for (_, c) in self.all() {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// The counter of a refused attach's errno.
    pub fn of_errno(&self, e: i32) -> &AtomicU64 {
        use nix::libc;
        match e {
            libc::ENODEV => &self.not_zeronic,
            libc::EAFNOSUPPORT => &self.ipv6,
            libc::ENOTCONN => &self.not_established,
            libc::EEXIST => &self.has_ulp,
            libc::EOPNOTSUPP => &self.unsupported,
            libc::ENOMEM => &self.memlock,
            libc::ENOSPC => &self.table_full,
            libc::EIO => &self.nic_error,
            libc::ENOENT => &self.no_driver,
            _ => &self.other_error,
        }
    }
}

pub fn get() -> &'static Stats {
    static S: Stats = Stats::new();
    &S
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::line::Line;
    use nix::libc;

    #[test]
    fn render_names_every_counter_in_order() {
        let s = Stats::new();
        Stats::add(&s.attached);
        Stats::add(s.of_errno(libc::ENODEV));
        Stats::add(s.of_errno(libc::EBADF));
        let mut l = Line::<1024>::new();
        s.render(7, &mut l);
        let t = std::str::from_utf8(l.as_bytes()).unwrap();
        assert!(t.starts_with(
            "zn-shim pid 7: connections 0 attached 1 attached_late 0 disabled 0 not_zeronic 1 "
        ));
        assert!(t.contains(" other_error 1 "));
        assert!(t.ends_with(" untracked 0"));
        s.reset();
        let mut l = Line::<1024>::new();
        s.render(7, &mut l);
        assert!(!std::str::from_utf8(l.as_bytes()).unwrap().contains(" 1"));
    }
}

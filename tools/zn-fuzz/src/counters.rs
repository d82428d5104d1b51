//! The counters the final oracle compares with their values at the start:
//! the NIC's (QUERY), the kernel's own count of outstanding `FOLL_PIN`
//! pins (`/proc/vmstat`), a process's `VmPin`, and a user's locked pages.

use std::fs;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, pipe, ForkResult, Gid, Uid};

/// NIC 0's counters that must come back (QUERY).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicCounters {
    /// `mr_in_use`.
    pub mr_in_use: u32,
    /// `pinned_pages`.
    pub pinned_pages: u64,
    /// `held_pages`.
    pub held_pages: u64,
    /// `mr_user_in_use` of the calling user.
    pub mr_user_in_use: u32,
    /// `user_locked_pages` of the calling user.
    pub user_locked_pages: u64,
    /// `flows_in_use`.
    pub flows_in_use: u32,
}

/// QUERY of NIC 0 through a new file.
pub fn nic_counters() -> Result<(NicCounters, zeronic_uapi::Query)> {
    let q = zeronic::Device::open(0)
        .and_then(|d| d.query())
        .context("ZERONIC_IOC_QUERY of NIC 0")?;
    Ok((
        NicCounters {
            mr_in_use: q.mr_in_use,
            pinned_pages: q.pinned_pages,
            held_pages: q.held_pages,
            mr_user_in_use: q.mr_user_in_use,
            user_locked_pages: q.user_locked_pages,
            flows_in_use: q.flows_in_use,
        },
        q,
    ))
}

/// NIC 0's counters as seen by user `uid` (a child that becomes it), for
/// its `mr_user_in_use` and `user_locked_pages`.
pub fn nic_counters_as(uid: u32) -> Result<NicCounters> {
    let (r, w) = pipe().context("pipe")?;
    // SAFETY: called before any thread exists in this process (main, at the
    // start and after all workers ended); the child leaves with _exit.
    match unsafe { fork() }.context("fork")? {
        ForkResult::Child => {
            drop(r);
            let code = (|| -> Result<()> {
                nix::unistd::setgroups(&[])?;
                nix::unistd::setgid(Gid::from_raw(uid))?;
                nix::unistd::setuid(Uid::from_raw(uid))?;
                let (c, _) = nic_counters()?;
                let line = format!(
                    "{} {} {} {} {} {}\n",
                    c.mr_in_use,
                    c.pinned_pages,
                    c.held_pages,
                    c.mr_user_in_use,
                    c.user_locked_pages,
                    c.flows_in_use
                );
                nix::unistd::write(&w, line.as_bytes())?;
                Ok(())
            })()
            .map_or(1, |_| 0);
            // SAFETY: ends the child without the parent's exit handlers.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            drop(w);
            let mut out = String::new();
            std::io::Read::read_to_string(&mut fs::File::from(r), &mut out).context("read")?;
            let st = waitpid(child, None).context("waitpid")?;
            if st != WaitStatus::Exited(child, 0) {
                bail!("QUERY as uid {uid} failed ({st:?})");
            }
            let v: Vec<u64> = out
                .split_whitespace()
                .filter_map(|s| s.parse().ok())
                .collect();
            if v.len() != 6 {
                bail!("QUERY as uid {uid}: '{out}'");
            }
            Ok(NicCounters {
                mr_in_use: v[0] as u32,
                pinned_pages: v[1],
                held_pages: v[2],
                mr_user_in_use: v[3] as u32,
                user_locked_pages: v[4],
                flows_in_use: v[5] as u32,
            })
        }
    }
}

/// Outstanding `FOLL_PIN` pins of the whole kernel, `nr_foll_pin_acquired`
/// minus `nr_foll_pin_released`, after folding the per-CPU deltas
/// (`vm.stat_refresh`, root only; without it the counters lag by about a
/// second, which [`pins_back_to`] and [`pins_at_rest`] wait out).
pub fn pins_outstanding() -> Result<i64> {
    let _ = fs::write("/proc/sys/vm/stat_refresh", "1");
    let s = fs::read_to_string("/proc/vmstat").context("read /proc/vmstat")?;
    let get = |name: &str| -> Result<i64> {
        s.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .with_context(|| format!("no {name} in /proc/vmstat"))
    };
    Ok(get("nr_foll_pin_acquired ")? - get("nr_foll_pin_released ")?)
}

/// Polls `read` until it returns `want` or `secs` pass; the last value.
pub fn settle<T: PartialEq + Copy>(
    secs: u64,
    want: T,
    mut read: impl FnMut() -> Result<T>,
) -> Result<T> {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = read()?;
        if v == want || Instant::now() >= end {
            return Ok(v);
        }
        sleep(Duration::from_millis(200));
    }
}

/// The outstanding pins at rest: the least of readings over 2 s. Other I/O
/// in the guest (9p's zero-copy requests) pins pages for moments; those
/// come and go, so the least reading is what stays.
pub fn pins_at_rest() -> Result<i64> {
    let mut least = pins_outstanding()?;
    for _ in 0..10 {
        sleep(Duration::from_millis(200));
        least = least.min(pins_outstanding()?);
    }
    Ok(least)
}

/// Waits up to `secs` for the outstanding pins to come down to `base`;
/// the last reading. A leak keeps them above it; other I/O only adds
/// pins for moments.
pub fn pins_back_to(secs: u64, base: i64) -> Result<i64> {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = pins_outstanding()?;
        if v <= base || Instant::now() >= end {
            return Ok(v);
        }
        sleep(Duration::from_millis(200));
    }
}

/// `VmPin` of this process in kB.
pub fn vm_pin_kb() -> Result<u64> {
    let s = fs::read_to_string("/proc/self/status").context("read /proc/self/status")?;
    s.lines()
        .find_map(|l| {
            l.strip_prefix("VmPin:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .context("no VmPin in /proc/self/status")
}

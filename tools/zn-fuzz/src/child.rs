//! Forked callers: a child of a fuzzing thread that uses the files it
//! inherited (registering regions that outlive it in the shared file,
//! deregistering the parent's keys), either for a few calls or in a loop of
//! large registrations until the parent kills it with SIGKILL.
//!
//! The child of a multi-threaded process may not allocate or take locks
//! (another thread may have held them at the fork): everything it needs is
//! in a [`Plan`] made before the fork, its messages are formatted on the
//! stack, and it ends with `_exit`.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use anyhow::{bail, Result};
use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};
use zeronic_uapi::{
    MrDereg, MrReg, Query, ACCESS_LOCAL_READ, ACCESS_LOCAL_WRITE, IOC_MR_DEREG, IOC_MR_REG,
    IOC_QUERY,
};

use crate::errnos::{self, Call, ErrnoName};
use crate::ioc::raw_ioctl;
use crate::mem::Mem;
use crate::rng::Rng;
use crate::shared::Shared;

/// What a forked caller does, decided before the fork.
pub struct Plan {
    /// Inherited `/dev/zeronic` descriptors (-1: none).
    pub fds: [i32; 4],
    /// Keys of the parent: (key, nic, descriptor it was registered through).
    pub keys: [(u64, u32, i32); 4],
    /// The parent's mappings (the child has copies).
    pub mem: Mem,
    /// The child's random stream.
    pub seed: u64,
    /// Counters.
    pub shared: &'static Shared,
    /// Register large regions until killed, instead of a few calls.
    pub loop_until_killed: bool,
}

/// A message buffer on the stack.
struct StackBuf {
    buf: [u8; 400],
    len: usize,
}

impl std::fmt::Write for StackBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Counts a result in the child and reports an undocumented errno; false
/// if it was one.
fn check(shared: &Shared, call: Call, fd: i32, res: Result<i32, Errno>, a: u64, b: u64) -> bool {
    let errno = match res {
        Ok(_) => 0,
        Err(e) => e as i32,
    };
    shared.count(call as usize, errno);
    let bad = match res {
        Err(e) => !errnos::allowed(call, e),
        Ok(r) => r != 0,
    };
    if bad {
        shared.undocumented.fetch_add(1, Relaxed);
        if shared.may_print() {
            let mut m = StackBuf {
                buf: [0; 400],
                len: 0,
            };
            let _ = match res {
                Err(e) => writeln!(
                    m,
                    "zn-fuzz: VIOLATION [forked caller] {} on fd {fd} ({a:#x}, {b:#x}) failed with undocumented {}",
                    call.name(),
                    e.name()
                ),
                Ok(r) => writeln!(m, "zn-fuzz: VIOLATION [forked caller] {} on fd {fd} returned {r}", call.name()),
            };
            // SAFETY: writes our stack buffer to stdout; async-signal-safe.
            unsafe { libc::write(1, m.buf.as_ptr().cast(), m.len) };
        }
    }
    !bad
}

fn reg(fd: i32, addr: u64, length: u64, access: u32) -> (Result<i32, Errno>, u64) {
    let mut r = MrReg {
        addr,
        length,
        nic: 0,
        access,
        key: 0,
    };
    let res = raw_ioctl(fd, IOC_MR_REG, (&raw mut r) as u64);
    (res, r.key)
}

fn dereg(fd: i32, key: u64, nic: u32) -> Result<i32, Errno> {
    let d = MrDereg {
        key,
        nic,
        reserved: 0,
    };
    raw_ioctl(fd, IOC_MR_DEREG, (&raw const d) as u64)
}

/// The child's work; its exit status.
fn child_main(p: &Plan) -> i32 {
    let mut rng = Rng::new(p.seed);
    let fds: &[i32] = {
        let n = p.fds.iter().take_while(|&&f| f >= 0).count();
        &p.fds[..n]
    };
    let m = &p.mem;
    let mut ok = true;
    if p.loop_until_killed {
        // Large registrations on inherited files until the parent's SIGKILL
        // lands, in the middle of one of them or between.
        loop {
            let fd = *rng.pick(fds);
            let len = rng.range(1 << 20, m.rw.len);
            // Violations are counted in `shared` (the exit status is SIGKILL's).
            let (res, key) = reg(fd, m.rw.addr, len, ACCESS_LOCAL_READ | ACCESS_LOCAL_WRITE);
            check(p.shared, Call::MrReg, fd, res, m.rw.addr, len);
            if res.is_ok() && rng.chance(1, 2) {
                check(p.shared, Call::MrDereg, fd, dereg(fd, key, 0), key, 0);
            }
        }
    }
    for _ in 0..rng.range(4, 24) {
        let fd = *rng.pick(fds);
        match rng.below(3) {
            0 => {
                let region = if rng.chance(1, 2) { m.rw } else { m.shm };
                let off = rng.below(region.len - 1);
                let len = rng.range(1, (region.len - off).min(8 * m.ps));
                let access = *rng.pick(&[ACCESS_LOCAL_READ, ACCESS_LOCAL_WRITE, 3]);
                let (res, key) = reg(fd, region.addr + off, len, access);
                ok &= check(p.shared, Call::MrReg, fd, res, region.addr + off, len);
                // Half of them stay: regions of the file, not of this process.
                if res.is_ok() && rng.chance(1, 2) {
                    ok &= check(p.shared, Call::MrDereg, fd, dereg(fd, key, 0), key, 0);
                }
            }
            1 => {
                let (key, nic, kfd) = *rng.pick(&p.keys);
                let fd = if kfd >= 0 && rng.chance(3, 4) {
                    kfd
                } else {
                    fd
                };
                ok &= check(
                    p.shared,
                    Call::MrDereg,
                    fd,
                    dereg(fd, key, nic),
                    key,
                    u64::from(nic),
                );
            }
            _ => {
                let mut q = Query::default();
                let res = raw_ioctl(fd, IOC_QUERY, (&raw mut q) as u64);
                ok &= check(p.shared, Call::Query, fd, res, 0, 0);
            }
        }
    }
    if ok {
        0
    } else {
        1
    }
}

/// Forks a caller following `plan`; kills it after `delay_ms` if it loops.
/// Fails if the child did not end as planned.
pub fn run(plan: &Plan, delay_ms: u64) -> Result<()> {
    // SAFETY: the child only runs `child_main`, which neither allocates nor
    // takes locks, and leaves with `_exit`.
    match unsafe { fork() } {
        Err(e) => bail!("fork: {e}"),
        Ok(ForkResult::Child) => {
            let code = child_main(plan);
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(code) }
        }
        Ok(ForkResult::Parent { child }) => {
            if plan.loop_until_killed {
                std::thread::sleep(Duration::from_millis(delay_ms));
                kill(child, Signal::SIGKILL).map_err(|e| anyhow::anyhow!("kill: {e}"))?;
            }
            let st = loop {
                match waitpid(child, None) {
                    Err(Errno::EINTR) => continue,
                    r => break r,
                }
            };
            match st {
                Ok(WaitStatus::Exited(_, 0)) if !plan.loop_until_killed => Ok(()),
                Ok(WaitStatus::Signaled(_, Signal::SIGKILL, _)) if plan.loop_until_killed => Ok(()),
                Ok(WaitStatus::Exited(_, 1)) => {
                    bail!("a call returned an undocumented errno (above)")
                }
                other => bail!("child ended with {other:?}"),
            }
        }
    }
}

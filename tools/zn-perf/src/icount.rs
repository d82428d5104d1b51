//! Counting guest instructions under QEMU's `-icount shift=0`.
//!
//! With `-icount shift=0` the guest's virtual clock advances by exactly one
//! nanosecond per executed guest instruction while a vCPU runs, and (with
//! `sleep=on`) by host time while every vCPU is halted. On a 1-vCPU guest
//! that never halts, the guest's `CLOCK_MONOTONIC` therefore counts every
//! instruction it executes, in any context (user, kernel, interrupts,
//! softirqs). `zn-perf soak` keeps the vCPU from halting: a thread at
//! `SCHED_IDLE` (the scheduler runs it only when nothing else is runnable)
//! spins in chunks of exactly [`INSNS_PER_CHUNK`] instructions and counts
//! them. The instructions of everything else between two readings are the
//! clock's advance minus the soaker's: what `scripts/bench-guest`'s
//! `icount` part divides by the bytes a transfer moved
//! (docs/performance.md, "Guest instructions per byte").
//!
//! `zn-perf spin` runs a loop of a known number of instructions (and,
//! with `--rep-movsb`, string copies) to check the method.

use anyhow::{bail, ensure, Result};
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicU64, Ordering};

/// Iterations of the soaker's inner `dec`/`jnz` loop per chunk.
const INNER: u32 = 5000;

/// Instructions of one soaker chunk: `mov`, `INNER` times `dec` + `jnz`,
/// `add`, `jmp`.
pub const INSNS_PER_CHUNK: u64 = 2 * INNER as u64 + 3;

/// Chunks the soaker completed. Written only by the soaker's `add` (a
/// plain 8-byte read-modify-write of an aligned word, which x86 performs
/// as one access), read atomically by the reporting thread.
static CHUNKS: AtomicU64 = AtomicU64::new(0);

/// Spins for ever, adding 1 to `*counter` every [`INSNS_PER_CHUNK`]
/// instructions.
#[cfg(target_arch = "x86_64")]
fn spin_forever(counter: *mut u64) -> ! {
    // SAFETY: The loop touches only `ecx` (never returns, so no caller
    // state is clobbered that matters) and the 8 bytes at `counter`, which
    // points to `CHUNKS`, a static that lives for ever and is aligned; the
    // other thread only reads it atomically, and an aligned 8-byte `add` is
    // one memory access on x86-64.
    unsafe {
        std::arch::asm!(
            "2:",
            "mov ecx, {inner}",
            "3:",
            "dec ecx",
            "jnz 3b",
            "add qword ptr [rdx], 1",
            "jmp 2b",
            inner = const INNER,
            in("rdx") counter,
            options(noreturn, nostack),
        )
    }
}

/// Puts the calling thread at `SCHED_IDLE`.
fn sched_idle() -> Result<()> {
    let param = nix::libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid `sched_param`; pid 0 is the calling
    // thread.
    let rc = unsafe { nix::libc::sched_setscheduler(0, nix::libc::SCHED_IDLE, &param) };
    ensure!(
        rc == 0,
        "sched_setscheduler(SCHED_IDLE): {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

/// `CLOCK_MONOTONIC` in nanoseconds.
fn now_ns() -> Result<u64> {
    let mut t = nix::libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid `timespec` to write.
    let rc = unsafe { nix::libc::clock_gettime(nix::libc::CLOCK_MONOTONIC, &mut t) };
    ensure!(
        rc == 0,
        "clock_gettime: {}",
        std::io::Error::last_os_error()
    );
    Ok(u64::try_from(t.tv_sec)? * 1_000_000_000 + u64::try_from(t.tv_nsec)?)
}

/// `zn-perf soak`: starts the soaker, then answers every line on standard
/// input with `soak_insns=N now_ns=T` (the soaker's instructions so far and
/// the monotonic clock, read together); exits at end of input.
pub fn soak() -> Result<()> {
    #[cfg(not(target_arch = "x86_64"))]
    bail!("zn-perf soak: only on x86-64");
    #[cfg(target_arch = "x86_64")]
    {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = sched_idle();
            let ok = r.is_ok();
            let _ = tx.send(r);
            if ok {
                spin_forever(CHUNKS.as_ptr());
            }
        });
        rx.recv()??;
        let stdin = std::io::stdin();
        let mut out = std::io::stdout().lock();
        for line in stdin.lock().lines() {
            line?;
            let chunks = CHUNKS.load(Ordering::Relaxed);
            let now = now_ns()?;
            writeln!(
                out,
                "soak_insns={} now_ns={}",
                chunks * INSNS_PER_CHUNK,
                now
            )?;
            out.flush()?;
        }
        Ok(())
    }
}

/// `zn-perf spin N`: `N` iterations of `dec`/`jnz` (2 N instructions and a
/// few); with `rep_movsb`, `N` copies of `rep_movsb` bytes with one
/// `rep movsb` each instead.
pub fn spin(n: u64, rep_movsb: Option<u64>) -> Result<()> {
    #[cfg(not(target_arch = "x86_64"))]
    bail!("zn-perf spin: only on x86-64");
    #[cfg(target_arch = "x86_64")]
    {
        match rep_movsb {
            None => {
                // SAFETY: Touches only `rcx`, declared clobbered.
                unsafe {
                    std::arch::asm!(
                        "test rcx, rcx",
                        "jz 3f",
                        "2:",
                        "dec rcx",
                        "jnz 2b",
                        "3:",
                        inout("rcx") n => _,
                        options(nomem, nostack),
                    )
                }
            }
            Some(len) => {
                let len = usize::try_from(len)?;
                if len == 0 {
                    bail!("--rep-movsb needs a length");
                }
                let src = vec![1u8; len];
                let mut dst = vec![0u8; len];
                for _ in 0..n {
                    // SAFETY: `src` and `dst` are distinct allocations of
                    // `len` bytes each; the direction flag is clear (the
                    // ABI guarantees it at the asm boundary).
                    unsafe {
                        std::arch::asm!(
                            "rep movsb",
                            inout("rcx") len => _,
                            inout("rsi") src.as_ptr() => _,
                            inout("rdi") dst.as_mut_ptr() => _,
                            options(nostack),
                        )
                    }
                }
                std::hint::black_box(&dst);
            }
        }
        Ok(())
    }
}

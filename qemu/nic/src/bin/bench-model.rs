//! Model benchmark: payload throughput of sender DMA-read -> TX merge (TSO,
//! checksums) -> wire -> RX split (checksum verify, placement) beside
//! single-thread memcpy bandwidth measured in the same run.
//!
//! Prints `model_vs_memcpy=<ratio>` for 64 KiB segments as the last line:
//! the best of interleaved rounds of each, measured in the same run.
//! Beside each wall-clock rate it prints the rate per second of the
//! thread's CPU time (`model_vs_memcpy_cpu=`), which time spent
//! descheduled on a loaded host does not dilute.

#[allow(dead_code, clippy::all)]
#[path = "../../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use clap::Parser;
use common::*;
use zeronic_hw::cmd::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::ST_OK;
use zeronic_nic::mem::GuestMem;
use zeronic_nic::model::Topology;
use zeronic_nic::wire::Impair;

/// A payload rate: GB per second of wall-clock time and per second of the
/// thread's CPU time.
#[derive(Clone, Copy, Default)]
struct Rate {
    wall: f64,
    cpu: f64,
}

impl Rate {
    fn best(self, o: Rate) -> Rate {
        Rate {
            wall: self.wall.max(o.wall),
            cpu: self.cpu.max(o.cpu),
        }
    }
}

/// Wall-clock and thread CPU time from `start` on.
struct Clock {
    wall: Instant,
    cpu: Duration,
}

fn thread_cpu() -> Result<Duration> {
    use nix::time::{clock_gettime, ClockId};
    let t = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)?;
    Ok(Duration::from(t))
}

impl Clock {
    fn start() -> Result<Self> {
        Ok(Self {
            wall: Instant::now(),
            cpu: thread_cpu()?,
        })
    }

    /// The rate of `bytes` moved since `start`.
    fn rate(&self, bytes: u64) -> Result<Rate> {
        let wall = self.wall.elapsed().as_secs_f64();
        let cpu = (thread_cpu()? - self.cpu).as_secs_f64();
        Ok(Rate {
            wall: bytes as f64 / wall / 1e9,
            cpu: bytes as f64 / cpu / 1e9,
        })
    }
}

#[derive(Parser)]
#[command(about = "Benchmark the ZeroNIC model data path against memcpy")]
struct Args {
    /// MiB of payload per segment size.
    #[arg(long, default_value_t = 2048)]
    mib: u64,
    /// MiB of the sender's buffer and the receiver's ring (> caches).
    #[arg(long, default_value_t = 128)]
    buf_mib: u64,
    /// TSO segment size (bytes of TCP payload per frame).
    #[arg(long, default_value_t = 32_768)]
    mss: u16,
    /// Segment sizes to measure (64 KiB is the acceptance point).
    #[arg(long, value_delimiter = ',', default_value = "4096,16384,65536,262144")]
    seg: Vec<u32>,
    /// Interleaved memcpy / 64 KiB model rounds behind `model_vs_memcpy`.
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// Instead of the model: these copy routines alone, in calls of
    /// `--mss` bytes over the same buffers, best of `--rounds` each.
    #[arg(long, value_delimiter = ',')]
    kernels: Vec<Kernel>,
}

/// A copy routine measured alone over the bench's buffers.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Kernel {
    /// The C library's memcpy (the reference of `model_vs_memcpy`).
    Memcpy,
    /// `csum::copy_sum`: copy + checksum, cache-allocating stores.
    CopySum,
    /// `csum::copy_sum_stream`: copy + checksum, streaming stores (placement).
    CopySumStream,
    /// `csum::copy_stream`: copy, streaming stores.
    CopyStream,
    /// `csum::sum_raw`: checksum only (a verify pass).
    Sum,
}

fn memcpy_gbps(buf: usize, total: u64) -> Result<Rate> {
    kernel_gbps(Kernel::Memcpy, buf, total, 65_536)
}

/// Runs `k` over `total` bytes in `chunk`-byte calls, source and
/// destination `buf` bytes each (larger than the caches).
fn kernel_gbps(k: Kernel, buf: usize, total: u64, chunk: usize) -> Result<Rate> {
    use zeronic_nic::csum::{copy_stream, copy_sum, copy_sum_stream, fold, sum_raw};
    ensure!(chunk > 0 && chunk <= buf, "chunk of 1..={buf} bytes");
    let buf = buf / chunk * chunk;
    let src = GuestMem::anon(buf)?;
    let dst = GuestMem::anon(buf)?;
    let (s, d) = (src.check(0, buf as u64)?, dst.check(0, buf as u64)?);
    // SAFETY: both mappings are `buf` bytes long and distinct.
    unsafe {
        std::ptr::write_bytes(s, 1, buf);
        std::ptr::write_bytes(d, 2, buf);
    }
    let t = Clock::start()?;
    let (mut done, mut acc) = (0u64, 0u64);
    while done < total {
        let mut off = 0;
        while off < buf {
            // SAFETY: off + chunk <= buf (buf is a multiple of chunk).
            let (dp, sp) = unsafe { (d.add(off), s.add(off).cast_const()) };
            // SAFETY: dp and sp are valid for chunk bytes, distinct mappings.
            let sum = unsafe {
                match k {
                    Kernel::Memcpy => {
                        std::ptr::copy_nonoverlapping(sp, dp, chunk);
                        0
                    }
                    Kernel::CopySum => copy_sum(dp, sp, chunk),
                    Kernel::CopySumStream => copy_sum_stream(dp, sp, chunk),
                    Kernel::CopyStream => {
                        copy_stream(dp, sp, chunk);
                        0
                    }
                    Kernel::Sum => sum_raw(sp, chunk),
                }
            };
            acc = acc.wrapping_add(fold(sum) as u64);
            off += chunk;
        }
        done += buf as u64;
    }
    std::hint::black_box(acc);
    t.rate(done)
}

fn model_gbps(args: &Args, seg: u32) -> Result<Rate> {
    let buf = args.buf_mib << 20;
    let ram = (buf + (64 << 20)) as usize;
    let mut tb = Tb::with_opts(Topology::TwoGuest, Impair::default(), ram, MAX_MTU);
    let sbase = tb.drv[0].alloc(buf);
    tb.drv[0].mem.write(sbase, &vec![0x5au8; buf as usize])?;
    let skey = tb
        .reg_mr(0, sbase, buf, MR_ACCESS_LOCAL_READ)
        .map_err(|s| anyhow::anyhow!("sender MR: status {s}"))?;
    let rbase = tb.drv[1].alloc(buf);
    // Fault the receiver's pages in before timing (a booted guest's RAM is).
    tb.drv[1].mem.write(rbase, &vec![0u8; buf as usize])?;
    let rkey = tb
        .reg_mr(1, rbase, buf, MR_ACCESS_LOCAL_WRITE)
        .map_err(|s| anyhow::anyhow!("receiver MR: status {s}"))?;
    let mut fl = flow_b(0, 1);
    fl.mode = FLOW_RX_RING;
    fl.ring_key = rkey;
    fl.ring_size = buf as u32;
    let flow = tb
        .install(1, fl)
        .map_err(|s| anyhow::anyhow!("flow: status {s}"))?;
    // One header slot per TX ring entry: a slot is reused only after its
    // descriptor completed.
    let ha = tb.drv[0].alloc(256 * 256);
    let mut ndesc = 0u64;
    let total = args.mib << 20;
    let (mut sent, mut cursor, mut head) = (0u64, 0u64, 0u64);
    let mut outstanding = 0u32; // TX descriptors not yet completed (ring: 256)
    let t = Clock::start()?;
    while cursor < total {
        // Keep the TX queue full (the ring window is the flow control).
        let mut k = 0;
        while sent < total && sent + seg as u64 <= head + buf && outstanding < 256 && k < 128 {
            let hdr = tcp_hdr(
                A_IP,
                B_IP,
                4000,
                5001,
                1u32.wrapping_add(sent as u32),
                1,
                0x10,
            );
            let slot = ha + (ndesc % 256) * 256;
            ndesc += 1;
            tb.drv[0].tx_merge(0, &hdr, slot, skey, sent % buf, seg, args.mss);
            sent += seg as u64;
            outstanding += 1;
            k += 1;
        }
        tb.step();
        for c in tb.drv[0].reap_tx(0) {
            ensure!(c.status == ST_OK, "TX status {}", c.status);
            outstanding -= 1;
        }
        for (e, _) in tb.drv[1].reap_hdr(0) {
            cursor = cursor.max(e.cursor);
        }
        ensure!(
            tb.drv[1].pstat(0, PSTAT_RX_FALLBACK) == 0,
            "fallback in bench"
        );
        if cursor - head >= buf / 2 {
            head = cursor;
            let c = CmdFlow {
                opcode: CMD_FLOW_UPDATE,
                flags: FLOWU_RING_HEAD,
                flow,
                stream_off: head,
                ..Default::default()
            };
            ensure!(tb.cmd(1, c.encode()).status == ST_OK, "ring head update");
        }
    }
    let rate = t.rate(total)?;
    ensure!(
        tb.drv[1].pstat(0, PSTAT_RX_PLACED_BYTES) == total,
        "placed bytes mismatch"
    );
    Ok(rate)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let buf = (args.buf_mib << 20) as usize;
    if !args.kernels.is_empty() {
        let mut best = vec![Rate::default(); args.kernels.len()];
        for _ in 0..args.rounds.max(1) {
            for (b, &k) in best.iter_mut().zip(&args.kernels) {
                *b = b.best(kernel_gbps(k, buf, args.mib << 20, args.mss as usize)?);
            }
        }
        for (b, k) in best.iter().zip(&args.kernels) {
            println!(
                "kernel {k:?} ({} B calls): {:.2} GB/s ({:.2} GB/s per CPU-second)",
                args.mss, b.wall, b.cpu
            );
        }
        return Ok(());
    }
    let mc = memcpy_gbps(buf, args.mib << 20)?;
    println!(
        "memcpy single-thread: {:.2} GB/s (buffer {} MiB; {:.2} GB/s per CPU-second)",
        mc.wall, args.buf_mib, mc.cpu
    );
    for &seg in &args.seg {
        let g = model_gbps(&args, seg)?;
        println!(
            "model segment {:>6} B (TSO mss {}): {:.2} GB/s payload, {:.2}x memcpy \
             (per CPU-second {:.2} GB/s, {:.2}x)",
            seg,
            (args.mss as u32).min(seg),
            g.wall,
            g.wall / mc.wall,
            g.cpu,
            g.cpu / mc.cpu
        );
    }
    // The ratio: memcpy and the 64 KiB model run interleaved, best of each
    // over the rounds, so a burst of load from elsewhere on the machine
    // (the other core is often busy) does not decide it.
    let (mut best_mc, mut best_model) = (mc, Rate::default());
    for round in 1..=args.rounds {
        let m = memcpy_gbps(buf, args.mib << 20)?;
        let g = model_gbps(&args, 65_536)?;
        println!(
            "round {round}: memcpy {:.2} GB/s, model 64 KiB {:.2} GB/s \
             (per CPU-second {:.2}, {:.2})",
            m.wall, g.wall, m.cpu, g.cpu
        );
        best_mc = best_mc.best(m);
        best_model = best_model.best(g);
    }
    println!(
        "best of {} rounds: memcpy {:.2} GB/s, model 64 KiB {:.2} GB/s \
         (per CPU-second {:.2}, {:.2})",
        args.rounds, best_mc.wall, best_model.wall, best_mc.cpu, best_model.cpu
    );
    println!("model_vs_memcpy_cpu={:.3}", best_model.cpu / best_mc.cpu);
    println!("model_vs_memcpy={:.3}", best_model.wall / best_mc.wall);
    Ok(())
}

//! Model benchmark: payload throughput of sender DMA-read -> TX merge (TSO,
//! checksums) -> wire -> RX split (checksum verify, placement) beside
//! single-thread memcpy bandwidth measured in the same run.
//!
//! Prints `model_vs_memcpy=<ratio>` for 64 KiB segments as the last line:
//! the best of interleaved rounds of each, measured in the same run.

#[allow(dead_code, clippy::all)]
#[path = "../../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use anyhow::{ensure, Result};
use clap::Parser;
use common::*;
use zeronic_hw::cmd::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::ST_OK;
use zeronic_nic::mem::GuestMem;
use zeronic_nic::model::Topology;
use zeronic_nic::wire::Impair;

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
}

fn memcpy_gbps(buf: usize, total: u64) -> Result<f64> {
    let src = GuestMem::anon(buf)?;
    let dst = GuestMem::anon(buf)?;
    let chunk = 65_536usize;
    let (s, d) = (src.check(0, buf as u64)?, dst.check(0, buf as u64)?);
    // SAFETY: both mappings are `buf` bytes long and distinct.
    unsafe {
        std::ptr::write_bytes(s, 1, buf);
        std::ptr::write_bytes(d, 2, buf);
    }
    let t = Instant::now();
    let mut done = 0u64;
    while done < total {
        let mut off = 0;
        while off < buf {
            // SAFETY: off + chunk <= buf (buf is a multiple of chunk).
            unsafe { std::ptr::copy_nonoverlapping(s.add(off), d.add(off), chunk) };
            off += chunk;
        }
        done += buf as u64;
    }
    Ok(done as f64 / t.elapsed().as_secs_f64() / 1e9)
}

fn model_gbps(args: &Args, seg: u32) -> Result<f64> {
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
    let t = Instant::now();
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
    let secs = t.elapsed().as_secs_f64();
    ensure!(
        tb.drv[1].pstat(0, PSTAT_RX_PLACED_BYTES) == total,
        "placed bytes mismatch"
    );
    Ok(total as f64 / secs / 1e9)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let buf = (args.buf_mib << 20) as usize;
    let mc = memcpy_gbps(buf, args.mib << 20)?;
    println!(
        "memcpy single-thread: {mc:.2} GB/s (buffer {} MiB)",
        args.buf_mib
    );
    for &seg in &args.seg {
        let g = model_gbps(&args, seg)?;
        println!(
            "model segment {:>6} B (TSO mss {}): {g:.2} GB/s payload, {:.2}x memcpy",
            seg,
            (args.mss as u32).min(seg),
            g / mc
        );
    }
    // The ratio: memcpy and the 64 KiB model run interleaved, best of each
    // over the rounds, so a burst of load from elsewhere on the machine
    // (the other core is often busy) does not decide it.
    let (mut best_mc, mut best_model) = (mc, 0.0f64);
    for round in 1..=args.rounds {
        let m = memcpy_gbps(buf, args.mib << 20)?;
        let g = model_gbps(&args, 65_536)?;
        println!("round {round}: memcpy {m:.2} GB/s, model 64 KiB {g:.2} GB/s");
        best_mc = best_mc.max(m);
        best_model = best_model.max(g);
    }
    println!(
        "best of {} rounds: memcpy {best_mc:.2} GB/s, model 64 KiB {best_model:.2} GB/s",
        args.rounds
    );
    println!("model_vs_memcpy={:.3}", best_model / best_mc);
    Ok(())
}

//! A test driver for ZACC: brings the device up and drives it through its
//! registers and rings in in-memory "guest RAM", as `zacc.ko` will.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Instant;

use zeronic_hw::accel::*;
use zeronic_hw::regs::{Q_BASE, Q_CONS, Q_CTRL, Q_CTRL_ENABLE, Q_PROD, Q_SIZE, Q_STATUS};
use zeronic_nic::accel::Accel;
use zeronic_nic::irq::CountIrq;
use zeronic_nic::mem::GuestMem;

/// Guest RAM of the tests.
pub const RAM: usize = 4 << 20;
/// BAR2 of the tests: 6 MiB of device memory.
pub const BAR: u64 = 8 << 20;
/// Device memory of the tests.
pub const HBM: u64 = BAR - ZA_HBM_OFFSET;
/// Command ring entries.
pub const NCMD: u32 = 64;
/// Where the command ring sits in guest RAM.
pub const CMDQ_BASE: u64 = 0x1000;
/// Where the completion ring sits.
pub const CMDCQ_BASE: u64 = 0x3000;
/// Where page lists go.
pub const LISTS: u64 = 0x10_0000;
/// Data pages for COPY start here.
pub const POOL: u64 = 0x20_0000;

pub struct Za {
    pub dev: Accel,
    pub mem: Arc<GuestMem>,
    pub irq: Arc<CountIrq>,
    pub prod: u32,
    pub cons: u32,
    cookie: u32,
}

impl Za {
    pub fn new() -> Za {
        Self::with_sizes(RAM, BAR)
    }

    pub fn with_sizes(ram: usize, bar: u64) -> Za {
        let mut dev = Accel::new("zacc-test", bar).expect("accel");
        let mem = Arc::new(GuestMem::anon(ram).expect("anon"));
        let irq = Arc::new(CountIrq::default());
        dev.attach(Some(mem.clone()), irq.clone());
        let mut z = Za {
            dev,
            mem,
            irq,
            prod: 0,
            cons: 0,
            cookie: 0,
        };
        z.bring_up();
        z
    }

    pub fn step(&mut self) {
        self.dev.scan(Instant::now());
    }

    pub fn r32(&self, off: usize) -> u32 {
        self.dev.bar.r32(off)
    }

    pub fn w32(&self, off: usize, v: u32) {
        self.dev.bar.w32(off, v)
    }

    pub fn stat(&self, i: usize) -> u64 {
        self.dev.bar.r64(ZA_REG_STATS + 8 * i)
    }

    pub fn reset(&mut self) {
        self.w32(ZA_REG_DEV_CTRL, ZA_CTRL_RESET);
        self.step();
        assert_eq!(self.r32(ZA_REG_DEV_CTRL), 0, "reset completes");
    }

    pub fn bring_up(&mut self) {
        assert_eq!(self.r32(ZA_REG_MAGIC), ZA_MAGIC);
        assert_eq!(self.r32(ZA_REG_VERSION) >> 16, ZA_VERSION_MAJOR);
        self.reset();
        let b = &self.dev.bar;
        for (reg, base) in [(ZA_REG_CMDQ, CMDQ_BASE), (ZA_REG_CMDCQ, CMDCQ_BASE)] {
            b.w64(reg + Q_BASE, base);
            b.w32(reg + Q_SIZE, NCMD);
            b.w32(reg + Q_PROD, 0);
            b.w32(reg + Q_CONS, 0);
            b.w32(reg + Q_CTRL, Q_CTRL_ENABLE);
        }
        self.prod = 0;
        self.cons = 0;
        self.step();
        assert_eq!(self.r32(ZA_REG_CMDQ + Q_STATUS), 1);
        assert_eq!(self.r32(ZA_REG_CMDCQ + Q_STATUS), 1);
    }

    /// Posts a command (cookie set) without running the device.
    pub fn push(&mut self, mut c: [u8; 64]) -> u32 {
        self.cookie += 1;
        c[4..8].copy_from_slice(&self.cookie.to_le_bytes());
        let slot = CMDQ_BASE + (self.prod % NCMD) as u64 * 64;
        self.mem.write(slot, &c).unwrap();
        self.prod = self.prod.wrapping_add(1);
        self.dev.bar.w32(ZA_REG_CMDQ + Q_PROD, self.prod);
        self.cookie
    }

    /// Takes the next completion, if any.
    pub fn reap(&mut self) -> Option<ZaCompletion> {
        let prod = self.r32(ZA_REG_CMDCQ + Q_PROD);
        if prod == self.cons {
            return None;
        }
        let slot = CMDCQ_BASE + (self.cons % NCMD) as u64 * 16;
        let c = ZaCompletion::decode(&self.mem.read_array::<16>(slot).unwrap());
        self.cons = self.cons.wrapping_add(1);
        self.w32(ZA_REG_CMDCQ + Q_CONS, self.cons);
        Some(c)
    }

    /// Runs one command; its completion.
    pub fn cmd(&mut self, c: [u8; 64]) -> ZaCompletion {
        let cookie = self.push(c);
        self.step();
        let done = self.reap().expect("completion");
        assert_eq!(done.cookie, cookie);
        assert_eq!(done.opcode, u16::from_le_bytes([c[0], c[1]]));
        done
    }

    /// Writes a page list at `LISTS`; its address.
    pub fn list(&self, pages: &[u64]) -> u64 {
        let b: Vec<u8> = pages.iter().flat_map(|p| p.to_le_bytes()).collect();
        self.mem.write(LISTS, &b).unwrap();
        LISTS
    }

    pub fn hbm(&self, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.dev.hbm.read(off, &mut v).unwrap();
        v
    }

    pub fn ram(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mem.read(addr, &mut v).unwrap();
        v
    }
}

pub fn fill(dev_off: u64, len: u64, seed: u64, stream_off: u64) -> [u8; 64] {
    seeded(ZA_CMD_FILL, dev_off, len, seed, stream_off)
}

pub fn verify(dev_off: u64, len: u64, seed: u64, stream_off: u64) -> [u8; 64] {
    seeded(ZA_CMD_VERIFY, dev_off, len, seed, stream_off)
}

/// A FILL or VERIFY (`op`) of the seeded stream.
fn seeded(op: u16, dev_off: u64, len: u64, seed: u64, stream_off: u64) -> [u8; 64] {
    ZaCmdStream {
        opcode: op,
        dev_off,
        len,
        seed,
        stream_off,
        ..Default::default()
    }
    .encode()
}

pub fn pattern(op: u16, dev_off: u64, len: u64, pattern: u64, stream_off: u64) -> [u8; 64] {
    ZaCmdStream {
        opcode: op,
        flags: ZA_STREAM_PATTERN,
        dev_off,
        len,
        pattern,
        stream_off,
        ..Default::default()
    }
    .encode()
}

pub fn hash(dev_off: u64, len: u64, init: u64) -> [u8; 64] {
    ZaCmdHash {
        opcode: ZA_CMD_HASH,
        dev_off,
        len,
        init,
        ..Default::default()
    }
    .encode()
}

pub fn copy_host(
    dir: u32,
    dev_off: u64,
    len: u64,
    list: u64,
    npages: u32,
    first_off: u32,
) -> [u8; 64] {
    ZaCmdCopy {
        opcode: ZA_CMD_COPY,
        dir,
        npages,
        len,
        dev_off,
        page_list: list,
        first_off,
        ..Default::default()
    }
    .encode()
}

pub fn d2d(src_off: u64, dev_off: u64, len: u64) -> [u8; 64] {
    ZaCmdCopy {
        opcode: ZA_CMD_COPY,
        dir: ZA_COPY_D2D,
        len,
        dev_off,
        src_off,
        ..Default::default()
    }
    .encode()
}

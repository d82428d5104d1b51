//! ZACC's command engine: FILL, VERIFY, HASH and COPY against device
//! memory and guest RAM (`docs/accel.md` §6, §7).
//!
//! Every field of a command is guest input. A command is checked whole
//! before it writes anything: fields, then device ranges (`ZA_ST_BOUNDS`),
//! then guest RAM (`ZA_ST_DMA`; a COPY's page list is read once into host
//! memory and every page checked there, so the guest cannot change it
//! between the check and the copy). All arithmetic on guest numbers is
//! checked, so no command can panic, wrap or reach outside device memory
//! or guest RAM.

use zeronic_hw::accel::*;

use super::counters::Counters;
use super::hbm::{raw_copy, Hbm};
use super::stream::{fnv1a, Stream};
use crate::mem::GuestMem;

/// Bytes FILL, VERIFY and HASH handle per step (a host buffer).
const CHUNK: usize = 64 * 1024;

/// A command's completion: `status` and `result`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// `ZA_ST_*`.
    pub status: u16,
    /// The completion's `result`.
    pub result: u64,
}

impl Outcome {
    fn ok(result: u64) -> Self {
        Self {
            status: ZA_ST_OK,
            result,
        }
    }
}

impl From<u16> for Outcome {
    fn from(status: u16) -> Self {
        Self { status, result: 0 }
    }
}

/// What a command runs against.
pub struct Engine<'a> {
    /// Device memory.
    pub hbm: &'a Hbm,
    /// Guest RAM.
    pub ram: &'a GuestMem,
    /// The device's counters.
    pub counters: &'a Counters,
}

impl Engine<'_> {
    /// Executes the 64-byte command `b`.
    pub fn execute(&self, b: &[u8; 64]) -> Outcome {
        let op = u16::from_le_bytes([b[0], b[1]]);
        let r = match op {
            ZA_CMD_NOP => {
                if b[2..4] != [0, 0] || b[8..].iter().any(|&x| x != 0) {
                    Err(ZA_ST_BAD_DESC.into())
                } else {
                    Ok(0)
                }
            }
            ZA_CMD_FILL => self.fill(&ZaCmdStream::decode(b)),
            ZA_CMD_VERIFY => self.verify(&ZaCmdStream::decode(b)),
            ZA_CMD_HASH => self.hash(&ZaCmdHash::decode(b)),
            ZA_CMD_COPY => self.copy(&ZaCmdCopy::decode(b)),
            _ => Err(ZA_ST_BAD_OPCODE.into()),
        };
        match r {
            Ok(v) => Outcome::ok(v),
            Err(o) => o,
        }
    }

    /// A device range `[off, off + len)`: nonzero and inside device memory.
    fn dev_range(&self, off: u64, len: u64) -> Result<(), Outcome> {
        if len == 0 {
            return Err(ZA_ST_BAD_DESC.into());
        }
        if self.hbm.check(off, len).is_err() {
            self.counters.add(ZA_STAT_BOUNDS_ERR, 1);
            return Err(ZA_ST_BOUNDS.into());
        }
        Ok(())
    }

    fn stream_of(&self, c: &ZaCmdStream) -> Result<Stream, Outcome> {
        if c.flags & !ZA_STREAM_PATTERN != 0 || c.rsvd0 != 0 || c.rsvd1 != 0 {
            return Err(ZA_ST_BAD_DESC.into());
        }
        let s = if c.flags & ZA_STREAM_PATTERN != 0 {
            if c.seed != 0 {
                return Err(ZA_ST_BAD_DESC.into());
            }
            Stream::Pattern(c.pattern)
        } else {
            if c.pattern != 0 {
                return Err(ZA_ST_BAD_DESC.into());
            }
            Stream::Prng(c.seed)
        };
        if c.len == 0 || c.stream_off.checked_add(c.len).is_none() {
            return Err(ZA_ST_BAD_DESC.into());
        }
        self.dev_range(c.dev_off, c.len)?;
        Ok(s)
    }

    fn fill(&self, c: &ZaCmdStream) -> Result<u64, Outcome> {
        let s = self.stream_of(c)?;
        let mut buf = vec![0u8; CHUNK.min(c.len as usize)];
        let mut done = 0u64;
        while done < c.len {
            let n = (c.len - done).min(CHUNK as u64) as usize;
            s.generate(c.stream_off + done, &mut buf[..n]);
            // Checked above: [dev_off, dev_off + len) is inside.
            self.hbm
                .write(c.dev_off + done, &buf[..n])
                .map_err(|_| Outcome::from(ZA_ST_BOUNDS))?;
            done += n as u64;
        }
        self.counters.add(ZA_STAT_FILL_BYTES, c.len);
        Ok(0)
    }

    fn verify(&self, c: &ZaCmdStream) -> Result<u64, Outcome> {
        let s = self.stream_of(c)?;
        let n0 = CHUNK.min(c.len as usize);
        let (mut have, mut want) = (vec![0u8; n0], vec![0u8; n0]);
        let mut done = 0u64;
        while done < c.len {
            let n = (c.len - done).min(CHUNK as u64) as usize;
            self.hbm
                .read(c.dev_off + done, &mut have[..n])
                .map_err(|_| Outcome::from(ZA_ST_BOUNDS))?;
            s.generate(c.stream_off + done, &mut want[..n]);
            self.counters.add(ZA_STAT_VERIFY_BYTES, n as u64);
            if let Some(i) = (0..n).find(|&i| have[i] != want[i]) {
                self.counters.add(ZA_STAT_VERIFY_MISMATCH, 1);
                return Err(Outcome {
                    status: ZA_ST_MISMATCH,
                    result: done + i as u64,
                });
            }
            done += n as u64;
        }
        Ok(0)
    }

    fn hash(&self, c: &ZaCmdHash) -> Result<u64, Outcome> {
        if c.flags != 0 || c.rsvd0 != 0 || c.rsvd1 != 0 || c.rsvd2 != 0 || c.rsvd3 != 0 {
            return Err(ZA_ST_BAD_DESC.into());
        }
        self.dev_range(c.dev_off, c.len)?;
        let mut buf = vec![0u8; CHUNK.min(c.len as usize)];
        let (mut h, mut done) = (c.init, 0u64);
        while done < c.len {
            let n = (c.len - done).min(CHUNK as u64) as usize;
            self.hbm
                .read(c.dev_off + done, &mut buf[..n])
                .map_err(|_| Outcome::from(ZA_ST_BOUNDS))?;
            h = fnv1a(h, &buf[..n]);
            done += n as u64;
        }
        self.counters.add(ZA_STAT_HASH_BYTES, c.len);
        Ok(h)
    }

    fn copy(&self, c: &ZaCmdCopy) -> Result<u64, Outcome> {
        if c.flags != 0 || c.rsvd0 != 0 || c.rsvd1 != 0 || c.len == 0 {
            return Err(ZA_ST_BAD_DESC.into());
        }
        match c.dir {
            ZA_COPY_D2D => {
                if c.npages != 0 || c.page_list != 0 || c.first_off != 0 {
                    return Err(ZA_ST_BAD_DESC.into());
                }
                self.dev_range(c.src_off, c.len)?;
                self.dev_range(c.dev_off, c.len)?;
                self.hbm
                    .copy_within(c.src_off, c.dev_off, c.len)
                    .map_err(|_| Outcome::from(ZA_ST_BOUNDS))?;
                self.counters.add(ZA_STAT_D2D_BYTES, c.len);
                Ok(0)
            }
            ZA_COPY_H2D | ZA_COPY_D2H => self.copy_host(c),
            _ => Err(ZA_ST_BAD_DESC.into()),
        }
    }

    /// H2D / D2H through a page list.
    fn copy_host(&self, c: &ZaCmdCopy) -> Result<u64, Outcome> {
        let bad = || Outcome::from(ZA_ST_BAD_DESC);
        if c.src_off != 0 || u64::from(c.first_off) >= ZA_PAGE_SIZE || c.page_list % 8 != 0 {
            return Err(bad());
        }
        let span = u64::from(c.first_off).checked_add(c.len).ok_or_else(bad)?;
        let need = span.div_ceil(ZA_PAGE_SIZE);
        if need != u64::from(c.npages) || c.npages > ZA_COPY_MAX_PAGES {
            return Err(bad());
        }
        self.dev_range(c.dev_off, c.len)?;
        let dma = |ok: bool| {
            if ok {
                Ok(())
            } else {
                self.counters.add(ZA_STAT_DMA_ERR, 1);
                Err(Outcome::from(ZA_ST_DMA))
            }
        };
        // The list, read once (at most 512 KiB).
        let mut list = vec![0u8; c.npages as usize * 8];
        dma(self.ram.read(c.page_list, &mut list).is_ok())?;
        let pages: Vec<u64> = list
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
            .collect();
        if pages.iter().any(|p| p % ZA_PAGE_SIZE != 0) {
            return Err(bad());
        }
        dma(pages
            .iter()
            .all(|&p| self.ram.check(p, ZA_PAGE_SIZE).is_ok()))?;
        // Everything is checked: copy page by page.
        let mut done = 0u64;
        let mut in_page = u64::from(c.first_off);
        for &page in &pages {
            let n = (ZA_PAGE_SIZE - in_page).min(c.len - done);
            let host = self.ram.check(page + in_page, n).map_err(|_| bad())?;
            let dev = self.hbm.check(c.dev_off + done, n).map_err(|_| bad())?;
            let (src, dst) = if c.dir == ZA_COPY_H2D {
                (host, dev)
            } else {
                (dev, host)
            };
            // SAFETY: both pointers come from bounds checks of `n` bytes of
            // mappings this engine borrows for the whole call.
            unsafe { raw_copy(src, dst, n as usize) };
            done += n;
            in_page = 0;
        }
        let stat = if c.dir == ZA_COPY_H2D {
            ZA_STAT_H2D_BYTES
        } else {
            ZA_STAT_D2H_BYTES
        };
        self.counters.add(stat, c.len);
        Ok(0)
    }
}

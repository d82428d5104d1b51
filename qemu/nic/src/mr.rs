//! MR Table: registered memory regions, their page lists (merged into
//! physically contiguous extents) and access rights. Keys carry a per-slot
//! generation so a revoked key never matches a later registration.

use zeronic_hw::cmd::{MR_ACCESS_ALL, MR_ACCESS_LOCAL_READ};
use zeronic_hw::regs::{MR_CAPACITY, MR_MAX_PAGES, MR_PAGE_SIZE};
use zeronic_hw::status::*;

use crate::mem::GuestMem;

/// One region: `len` bytes starting `first_off` into its page list.
struct Region {
    access: u32,
    len: u64,
    first_off: u64,
    /// (page-space offset, guest-physical address, length), contiguous runs.
    ext: Vec<(u64, u64, u64)>,
}

/// The MR Table.
pub struct MrTable {
    slots: Vec<Option<Region>>,
    gens: Vec<u16>,
}

impl Default for MrTable {
    fn default() -> Self {
        Self::new()
    }
}

impl MrTable {
    /// An empty table; generations start at random so keys differ across resets.
    pub fn new() -> Self {
        let n = MR_CAPACITY as usize;
        Self {
            slots: (0..n).map(|_| None).collect(),
            gens: (0..n).map(|_| fastrand::u16(..)).collect(),
        }
    }

    fn slot(key: u32) -> usize {
        (key & 0xffff) as usize
    }

    /// Registered regions.
    pub fn used(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Registers a region from a guest page list; returns the key.
    pub fn register(
        &mut self,
        mem: &GuestMem,
        access: u32,
        npages: u32,
        first_off: u32,
        length: u64,
        page_list: u64,
    ) -> Result<u32, u16> {
        if access == 0 || access & !MR_ACCESS_ALL != 0 || length == 0 || npages == 0 {
            return Err(ST_BAD_DESC);
        }
        if npages > MR_MAX_PAGES || first_off as u64 >= MR_PAGE_SIZE || page_list % 8 != 0 {
            return Err(ST_BAD_DESC);
        }
        let span = first_off as u64 + length;
        if span > npages as u64 * MR_PAGE_SIZE || span <= (npages as u64 - 1) * MR_PAGE_SIZE {
            return Err(ST_BAD_DESC);
        }
        let idx = self
            .slots
            .iter()
            .position(|s| s.is_none())
            .ok_or(ST_NO_SPACE)?;
        let mut list = vec![0u8; npages as usize * 8];
        mem.read(page_list, &mut list).map_err(|_| ST_DMA)?;
        let mut ext: Vec<(u64, u64, u64)> = Vec::new();
        for (i, ch) in list.chunks_exact(8).enumerate() {
            let pa = u64::from_le_bytes([ch[0], ch[1], ch[2], ch[3], ch[4], ch[5], ch[6], ch[7]]);
            if pa % MR_PAGE_SIZE != 0 {
                return Err(ST_BAD_DESC);
            }
            mem.check(pa, MR_PAGE_SIZE).map_err(|_| ST_DMA)?;
            let ps = i as u64 * MR_PAGE_SIZE;
            match ext.last_mut() {
                Some(last) if last.1 + last.2 == pa => last.2 += MR_PAGE_SIZE,
                _ => ext.push((ps, pa, MR_PAGE_SIZE)),
            }
        }
        let mut g = self.gens[idx].wrapping_add(1);
        if g == 0 {
            g = 1;
        }
        self.gens[idx] = g;
        self.slots[idx] = Some(Region {
            access,
            len: length,
            first_off: first_off as u64,
            ext,
        });
        Ok(((g as u32) << 16) | idx as u32)
    }

    fn region(&self, key: u32) -> Result<&Region, u16> {
        let idx = Self::slot(key);
        match self.slots.get(idx) {
            Some(Some(r)) if self.gens[idx] as u32 == key >> 16 => Ok(r),
            _ => Err(ST_BAD_KEY),
        }
    }

    /// Revokes `key`. The caller serialises this with all DMA of the guest,
    /// so when it returns no DMA through the key can happen any more.
    pub fn invalidate(&mut self, key: u32) -> Result<(), u16> {
        self.region(key)?;
        self.slots[Self::slot(key)] = None;
        Ok(())
    }

    /// True if `key` is currently valid.
    pub fn valid(&self, key: u32) -> bool {
        self.region(key).is_ok()
    }

    /// Checks rights and bounds without translating.
    pub fn check(&self, key: u32, need: u32, off: u64, len: u64) -> Result<(), u16> {
        let r = self.region(key)?;
        if r.access & need != need {
            return Err(ST_ACCESS);
        }
        match off.checked_add(len) {
            Some(end) if end <= r.len => Ok(()),
            _ => Err(ST_BOUNDS),
        }
    }

    /// Translates `[off, off + len)` of region `key` into guest-physical
    /// extents appended to `out`, checking rights and bounds.
    pub fn translate(
        &self,
        key: u32,
        need: u32,
        off: u64,
        len: u64,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), u16> {
        self.check(key, need, off, len)?;
        let r = self.region(key)?;
        let mut ps = r.first_off + off;
        let mut left = len;
        let mut i = match r.ext.binary_search_by(|e| e.0.cmp(&ps)) {
            Ok(i) => i,
            Err(i) => i.saturating_sub(1),
        };
        while left > 0 {
            let Some(&(start, pa, elen)) = r.ext.get(i) else {
                return Err(ST_BOUNDS);
            };
            let skip = ps - start;
            let n = left.min(elen - skip);
            match out.last_mut() {
                Some(last) if last.0 + last.1 == pa + skip => last.1 += n,
                _ => out.push((pa + skip, n)),
            }
            ps += n;
            left -= n;
            i += 1;
        }
        Ok(())
    }
}

/// Rights needed to read payload for TX.
pub const NEED_TX: u32 = MR_ACCESS_LOCAL_READ;

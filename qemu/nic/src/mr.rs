//! MR Table: registered memory regions, their page lists (merged into
//! physically contiguous extents) and access rights. Keys are 64-bit: the
//! slot in bits 0..16 and a 48-bit generation from [`KeyGen`] above, so a
//! revoked key never matches a later registration (see `keygen.rs`).
//!
//! Host memory is bounded: all regions together hold at most
//! `MR_MAX_EXTENTS` extents (24 bytes each), whatever page lists the guest
//! sends (aliased, scattered or huge).

use zeronic_hw::cmd::{MR_ACCESS_ALL, MR_ACCESS_LOCAL_READ, MR_KEY_SLOT_BITS};
use zeronic_hw::regs::{MR_CAPACITY, MR_MAX_EXTENTS, MR_MAX_PAGES, MR_PAGE_SIZE};
use zeronic_hw::status::*;

use crate::keygen::KeyGen;
use crate::mem::GuestMem;

/// Page-list entries read from guest RAM per DMA (bounds the temporary copy).
const LIST_CHUNK: usize = 512;

/// A physically contiguous run of a region's pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Extent {
    /// Offset of its first byte in the region's page space.
    start: u64,
    /// Guest-physical address of that byte.
    addr: u64,
    /// Bytes (a multiple of the page size).
    len: u64,
}

/// One region: `len` bytes starting `first_off` into its page list.
struct Region {
    access: u32,
    len: u64,
    first_off: u64,
    /// Contiguous runs in page-space order, covering the whole page list.
    ext: Vec<Extent>,
}

/// The MR Table.
pub struct MrTable {
    slots: Vec<Option<Region>>,
    /// Generation of each slot's current (or last) registration.
    gens: Vec<u64>,
    keygen: KeyGen,
    /// Extents held by all regions.
    extents: usize,
}

impl Default for MrTable {
    fn default() -> Self {
        Self::new()
    }
}

/// What a CMD_MR_REG asks for.
#[derive(Clone, Copy, Debug)]
pub struct RegRequest {
    /// `MR_ACCESS_*`.
    pub access: u32,
    /// Pages in the list.
    pub npages: u32,
    /// Offset of the region in its first page.
    pub first_off: u32,
    /// Region bytes.
    pub length: u64,
    /// Guest-physical address of the page list.
    pub page_list: u64,
}

impl MrTable {
    /// An empty table with a fresh key secret (every reset).
    pub fn new() -> Self {
        Self::with_keygen(KeyGen::from_os_rng())
    }

    /// An empty table drawing generations from `keygen`.
    pub fn with_keygen(keygen: KeyGen) -> Self {
        let n = MR_CAPACITY as usize;
        Self {
            slots: (0..n).map(|_| None).collect(),
            gens: vec![0; n],
            keygen,
            extents: 0,
        }
    }

    fn slot(key: u64) -> usize {
        (key & ((1 << MR_KEY_SLOT_BITS) - 1)) as usize
    }

    /// Registered regions.
    pub fn used(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Extents held by all regions (bounded by `MR_MAX_EXTENTS`).
    pub fn extents(&self) -> usize {
        self.extents
    }

    /// Registers a region from a guest page list; returns the key. `Err`
    /// carries the status; nothing changes then.
    pub fn register(&mut self, mem: &GuestMem, req: &RegRequest) -> Result<u64, u16> {
        let RegRequest {
            access,
            npages,
            first_off,
            length,
            page_list,
        } = *req;
        if access == 0 || access & !MR_ACCESS_ALL != 0 || length == 0 || npages == 0 {
            return Err(ST_BAD_DESC);
        }
        if npages > MR_MAX_PAGES || first_off as u64 >= MR_PAGE_SIZE || page_list % 8 != 0 {
            return Err(ST_BAD_DESC);
        }
        // The pages must cover first_off + length exactly (no page spare).
        let span = (first_off as u64).checked_add(length).ok_or(ST_BAD_DESC)?;
        if span.div_ceil(MR_PAGE_SIZE) != npages as u64 {
            return Err(ST_BAD_DESC);
        }
        let idx = self
            .slots
            .iter()
            .position(|s| s.is_none())
            .ok_or(ST_NO_SPACE)?;
        let room = MR_MAX_EXTENTS as usize - self.extents;
        let ext = read_extents(mem, page_list, npages, room)?;
        let gen = self.keygen.next_gen().ok_or(ST_NO_SPACE)?;
        self.extents += ext.len();
        self.gens[idx] = gen;
        self.slots[idx] = Some(Region {
            access,
            len: length,
            first_off: first_off as u64,
            ext,
        });
        Ok((gen << MR_KEY_SLOT_BITS) | idx as u64)
    }

    fn region(&self, key: u64) -> Result<&Region, u16> {
        let idx = Self::slot(key);
        match self.slots.get(idx) {
            Some(Some(r)) if self.gens[idx] == key >> MR_KEY_SLOT_BITS => Ok(r),
            _ => Err(ST_BAD_KEY),
        }
    }

    /// Revokes `key`. The caller serialises this with all DMA of the guest,
    /// so when it returns no DMA through the key can happen any more.
    pub fn invalidate(&mut self, key: u64) -> Result<(), u16> {
        let n = self.region(key)?.ext.len();
        self.slots[Self::slot(key)] = None;
        self.extents -= n;
        Ok(())
    }

    /// True if `key` is currently valid.
    pub fn valid(&self, key: u64) -> bool {
        self.region(key).is_ok()
    }

    /// Checks rights and bounds without translating.
    pub fn check(&self, key: u64, need: u32, off: u64, len: u64) -> Result<(), u16> {
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
    /// extents appended to `out`, checking rights and bounds. Every address
    /// returned lies inside the region's registered pages.
    pub fn translate(
        &self,
        key: u64,
        need: u32,
        off: u64,
        len: u64,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), u16> {
        self.check(key, need, off, len)?;
        let r = self.region(key)?;
        // off + len <= r.len and first_off + r.len fits the page space, so
        // no sum below can wrap.
        let mut ps = r.first_off + off;
        let mut left = len;
        let mut i = r.ext.partition_point(|e| e.start <= ps).saturating_sub(1);
        while left > 0 {
            let Some(e) = r.ext.get(i) else {
                return Err(ST_BOUNDS);
            };
            let Some(skip) = ps.checked_sub(e.start).filter(|&s| s < e.len) else {
                return Err(ST_BOUNDS);
            };
            let n = left.min(e.len - skip);
            let pa = e.addr + skip;
            match out.last_mut() {
                Some(last) if last.0 + last.1 == pa => last.1 += n,
                _ => out.push((pa, n)),
            }
            ps += n;
            left -= n;
            i += 1;
        }
        Ok(())
    }
}

/// Reads and validates a page list of `npages` entries at `list`, merging
/// contiguous pages; fails with `ST_NO_SPACE` as soon as it needs more than
/// `room` extents.
fn read_extents(mem: &GuestMem, list: u64, npages: u32, room: usize) -> Result<Vec<Extent>, u16> {
    let total = npages as usize;
    mem.check(list, total as u64 * 8).map_err(|_| ST_DMA)?;
    let mut ext: Vec<Extent> = Vec::new();
    let mut buf = vec![0u8; LIST_CHUNK * 8];
    let mut done = 0usize;
    while done < total {
        let n = LIST_CHUNK.min(total - done);
        mem.read(list + done as u64 * 8, &mut buf[..n * 8])
            .map_err(|_| ST_DMA)?;
        for (j, ch) in buf[..n * 8].chunks_exact(8).enumerate() {
            let pa = u64::from_le_bytes(ch.try_into().expect("8-byte chunk"));
            if pa % MR_PAGE_SIZE != 0 {
                return Err(ST_BAD_DESC);
            }
            mem.check(pa, MR_PAGE_SIZE).map_err(|_| ST_DMA)?;
            let start = (done + j) as u64 * MR_PAGE_SIZE;
            match ext.last_mut() {
                // pa + MR_PAGE_SIZE <= RAM size: no wrap.
                Some(last) if last.addr + last.len == pa => last.len += MR_PAGE_SIZE,
                _ => {
                    if ext.len() == room {
                        return Err(ST_NO_SPACE);
                    }
                    ext.push(Extent {
                        start,
                        addr: pa,
                        len: MR_PAGE_SIZE,
                    });
                }
            }
        }
        done += n;
    }
    ext.shrink_to_fit();
    Ok(ext)
}

/// Rights needed to read payload for TX.
pub const NEED_TX: u32 = MR_ACCESS_LOCAL_READ;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translation_stays_inside_the_registered_pages() {
        // A wrapping first_off + length used to pass the page-count check
        // and translate offsets far beyond the registered page.
        let mem = GuestMem::anon(1 << 20).unwrap();
        mem.write(0x1000, &0x4000u64.to_le_bytes()).unwrap();
        let mut t = MrTable::new();
        let req = RegRequest {
            access: MR_ACCESS_ALL,
            npages: 1,
            first_off: 16,
            // 16 + length wraps to 10: one page, if unchecked.
            length: u64::MAX - 5,
            page_list: 0x1000,
        };
        assert_eq!(t.register(&mem, &req), Err(ST_BAD_DESC));
        let key = t
            .register(&mem, &RegRequest { length: 100, ..req })
            .unwrap();
        let mut out = Vec::new();
        assert_eq!(t.translate(key, 1, 0, 100, &mut out), Ok(()));
        assert_eq!(out, vec![(0x4010, 100)]);
        assert_eq!(t.translate(key, 1, 50, 51, &mut out), Err(ST_BOUNDS));
        assert_eq!(t.extents(), 1);
        t.invalidate(key).unwrap();
        assert_eq!((t.extents(), t.used()), (0, 0));
    }
}

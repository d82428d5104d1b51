//! A guest's DMA address space as a bus master sees it: guest RAM at
//! `[0, ram_len)` plus the published apertures of the guest's accelerators
//! (`docs/accel.md` §5). This is the interface the NIC's placement and TX
//! merge units will resolve MR extents through once the NIC gains peer DMA
//! (hardware.md 2.2, not yet); today only ZACC's tests use it.
//!
//! An access resolves into exactly one region. One that straddles two
//! regions, touches a withdrawn aperture or lies in no region is refused
//! (a PCIe Unsupported Request), and nothing is read or written.

use std::sync::{Arc, RwLockReadGuard};

use zeronic_hw::accel::{ZA_STAT_PEER_READ_BYTES, ZA_STAT_PEER_WRITE_BYTES};

use super::aperture::{Hit, PeerMap};
use super::hbm::raw_copy;
use crate::mem::{DmaError, GuestMem};

/// Where an access landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Guest RAM.
    Ram,
    /// The device memory of the `PeerMap`'s aperture with this index.
    Peer(usize),
}

/// Direction of an access (what the peer's counters record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// The bus master reads.
    Read,
    /// The bus master writes.
    Write,
}

/// A resolved access: `len` bytes at a host pointer, valid while the span
/// lives (it holds the aperture open, so a withdrawal waits for it).
pub struct Span<'a> {
    ptr: *mut u8,
    len: usize,
    target: Target,
    _hold: Option<RwLockReadGuard<'a, Option<u64>>>,
}

impl Span<'_> {
    /// Host pointer of the first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length access.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where it landed.
    pub fn target(&self) -> Target {
        self.target
    }
}

/// A bus address space a bus master DMAs through.
pub trait DmaSpace: Send + Sync {
    /// Resolves `[addr, addr + len)` for an access in direction `dir`. A
    /// peer access is counted (`ZA_STAT_PEER_*_BYTES`) here: the caller
    /// performs it while holding the span.
    fn resolve(&self, addr: u64, len: u64, dir: Dir) -> Result<Span<'_>, DmaError>;

    /// DMA read into `buf`.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<Target, DmaError> {
        let s = self.resolve(addr, buf.len() as u64, Dir::Read)?;
        // SAFETY: the span covers buf.len() mapped bytes and holds its
        // region open until it drops, after the copy.
        unsafe { raw_copy(s.ptr(), buf.as_mut_ptr(), buf.len()) };
        Ok(s.target())
    }

    /// DMA write of `data`.
    fn write(&self, addr: u64, data: &[u8]) -> Result<Target, DmaError> {
        let s = self.resolve(addr, data.len() as u64, Dir::Write)?;
        // SAFETY: the span covers data.len() mapped bytes and holds its
        // region open until it drops, after the copy.
        unsafe { raw_copy(data.as_ptr(), s.ptr(), data.len()) };
        Ok(s.target())
    }
}

/// One guest's space: its RAM and its accelerators' apertures.
pub struct GuestDma {
    /// Guest RAM, bus address = offset.
    pub ram: Arc<GuestMem>,
    /// The guest's apertures.
    pub peers: Arc<PeerMap>,
}

impl DmaSpace for GuestDma {
    fn resolve(&self, addr: u64, len: u64, dir: Dir) -> Result<Span<'_>, DmaError> {
        let err = DmaError { addr, len };
        let n = usize::try_from(len).map_err(|_| err)?;
        if let Ok(ptr) = self.ram.check(addr, len) {
            return Ok(Span {
                ptr,
                len: n,
                target: Target::Ram,
                _hold: None,
            });
        }
        for (i, ap) in self.peers.apertures().iter().enumerate() {
            match ap.hit(addr, len) {
                Hit::Inside(off, hold) => {
                    let ptr = ap.hbm().check(off, len).map_err(|_| err)?;
                    let stat = match dir {
                        Dir::Read => ZA_STAT_PEER_READ_BYTES,
                        Dir::Write => ZA_STAT_PEER_WRITE_BYTES,
                    };
                    ap.counters().add(stat, len);
                    return Ok(Span {
                        ptr,
                        len: n,
                        target: Target::Peer(i),
                        _hold: Some(hold),
                    });
                }
                Hit::Partial => return Err(err),
                Hit::Miss => {}
            }
        }
        Err(err)
    }
}

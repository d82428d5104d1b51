//! Frames on the emulated wire and the Ethernet II / IPv4 / IPv6 / TCP parsing the
//! RX Split Unit needs. Frame bytes are hostile input: parsing only returns
//! errors, never panics.

use std::sync::Arc;

use crate::csum::{copy_sum, sum_raw, Csum};
use crate::mem::{DmaError, GuestMem};

/// Bytes of a frame after its `head`.
pub enum Tail {
    /// Nothing beyond `head`.
    None,
    /// Payload still in the sender's guest RAM: (guest-physical, length)
    /// extents, read at delivery (the one copy of the data path).
    Guest {
        /// The sender's RAM (kept mapped while the frame lives).
        mem: Arc<GuestMem>,
        /// Extents in order.
        ext: Vec<(u64, u64)>,
    },
}

/// A TCP checksum the TX Merge Unit has not inserted yet: it is computed
/// while the payload streams out of the sender's RAM (at placement, in the
/// same pass as the copy; or when the wire copies the frame).
#[derive(Clone, Copy, Debug)]
pub struct PendingCsum {
    /// Offset of the checksum field in `head` (currently zero).
    pub field: usize,
    /// Sum of the pseudo-header and the TCP header (field zero).
    pub partial: Csum,
}

/// A frame: `head` followed by `tail`.
pub struct Frame {
    /// Leading bytes (a whole plain frame, or the headers of a merged one).
    pub head: Vec<u8>,
    /// Remaining bytes.
    pub tail: Tail,
    /// TCP checksum still to insert (merged frames with a payload).
    pub csum: Option<PendingCsum>,
}

impl Frame {
    /// A frame held entirely in host memory.
    pub fn owned(bytes: Vec<u8>) -> Self {
        Self {
            head: bytes,
            tail: Tail::None,
            csum: None,
        }
    }

    /// Inserts a pending checksum (one read pass over the tail).
    pub fn finalize(&mut self) -> Result<(), DmaError> {
        let Some(pc) = self.csum.take() else {
            return Ok(());
        };
        let mut c = pc.partial;
        let start = self.head.len();
        self.for_pieces(start, self.len() - start, |p, n| {
            // SAFETY: for_pieces hands out ranges valid for the call.
            c.add_sum(unsafe { sum_raw(p, n) }, n)
        })?;
        self.set_csum(pc.field, c.finish());
        Ok(())
    }

    /// Writes a checksum field value into `head`.
    pub fn set_csum(&mut self, field: usize, v: u16) {
        if let Some(b) = self.head.get_mut(field..field + 2) {
            b.copy_from_slice(&v.to_le_bytes());
        }
    }

    /// Total length.
    pub fn len(&self) -> usize {
        self.head.len() + self.tail_len()
    }

    /// True if the frame has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn tail_len(&self) -> usize {
        match &self.tail {
            Tail::None => 0,
            Tail::Guest { ext, .. } => ext.iter().map(|e| e.1 as usize).sum(),
        }
    }

    /// Copies the tail into `head` (the wire must own frames it holds
    /// back), inserting a pending checksum in the same pass.
    pub fn make_owned(&mut self) -> Result<(), DmaError> {
        let mut c = self.csum.map(|pc| pc.partial).unwrap_or_default();
        if let Tail::Guest { mem, ext } = &self.tail {
            for &(a, l) in ext {
                let src = mem.check(a, l)?;
                let start = self.head.len();
                self.head.resize(start + l as usize, 0);
                // SAFETY: src..src+l is inside the guest mapping (checked);
                // the destination was just sized to hold l bytes.
                let s = unsafe { copy_sum(self.head[start..].as_mut_ptr(), src, l as usize) };
                c.add_sum(s, l as usize);
            }
        }
        self.tail = Tail::None;
        if let Some(pc) = self.csum.take() {
            self.set_csum(pc.field, c.finish());
        }
        Ok(())
    }

    /// A second reference to the same bytes (tail still in guest RAM).
    pub fn share(&self) -> Self {
        let tail = match &self.tail {
            Tail::None => Tail::None,
            Tail::Guest { mem, ext } => Tail::Guest {
                mem: mem.clone(),
                ext: ext.clone(),
            },
        };
        Self {
            head: self.head.clone(),
            tail,
            csum: self.csum,
        }
    }

    /// Calls `f(ptr, len)` for the host pieces covering `[off, off + len)`;
    /// stops at the end of the frame. Pointers are valid during the call.
    pub fn for_pieces(
        &self,
        mut off: usize,
        mut len: usize,
        mut f: impl FnMut(*const u8, usize),
    ) -> Result<(), DmaError> {
        if off < self.head.len() {
            let n = len.min(self.head.len() - off);
            f(self.head[off..].as_ptr(), n);
            off += n;
            len -= n;
        }
        if len == 0 {
            return Ok(());
        }
        let mut pos = self.head.len();
        if let Tail::Guest { mem, ext } = &self.tail {
            for &(a, l) in ext {
                let l = l as usize;
                if off < pos + l && len > 0 {
                    let skip = off - pos;
                    let n = len.min(l - skip);
                    let p = mem.check(a + skip as u64, n as u64)?;
                    f(p, n);
                    off += n;
                    len -= n;
                }
                pos += l;
            }
        }
        Ok(())
    }
}

pub use zeronic_hw::net::{
    ipv6_next_header, is_ipv6_ext_header, parse_tcp, ParseError, Tcp, ECN_CE, ETH_HLEN, ETH_P_IPV4,
    ETH_P_IPV6, IPV6_HLEN, TCP_ACK, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN,
};

/// Largest frame a port with `mtu` carries: MTU + Ethernet header, plus
/// one 802.1Q tag when the frame's EtherType (bytes 12..14) is 0x8100.
pub fn max_frame_len(mtu: u32, head: &[u8]) -> usize {
    use zeronic_hw::regs::{ETH_P_8021Q, VLAN_HLEN};
    let tagged = head.get(12..14) == Some(&ETH_P_8021Q.to_be_bytes()[..]);
    mtu as usize + ETH_HLEN + if tagged { VLAN_HLEN as usize } else { 0 }
}

/// True for an untagged IPv6 frame whose next header is an extension
/// header (§15: the normal path, `PSTAT_RX_V6_EXTHDR`).
pub fn ipv6_ext_frame(head: &[u8]) -> bool {
    ipv6_next_header(head).is_some_and(is_ipv6_ext_header)
}

/// Recomputes the IPv4 header checksum in place (`ip` = the IPv4 header).
pub fn set_ipv4_csum(ip: &mut [u8]) {
    let c = zeronic_hw::net::ipv4_header_checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
}

//! Internet checksum (RFC 1071), computed over little-endian 16-bit words
//! (byte-order independence lets us sum native words and store the result
//! with `to_le_bytes`), with a fused copy+checksum for the data path.

/// Unfolded sum of `len` bytes at `p`, as little-endian 16-bit words.
/// Uses AVX2 when the CPU has it (4x the SSE2 rate on cached data).
///
/// # Safety
/// `p..p+len` must be readable for the duration of the call.
pub unsafe fn sum_raw(p: *const u8, len: usize) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present; the caller guarantees the range.
        return unsafe { sum_avx2(p, len) };
    }
    // SAFETY: the caller guarantees the range.
    unsafe { sum_body(p, len) }
}

/// `sum_body` compiled with AVX2 enabled.
///
/// # Safety
/// The CPU must support AVX2; `p..p+len` readable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_avx2(p: *const u8, len: usize) -> u64 {
    // SAFETY: forwarded caller guarantees.
    unsafe { sum_body(p, len) }
}

/// The portable summing loop (inlined into each feature variant).
///
/// # Safety
/// `p..p+len` must be readable for the duration of the call.
#[inline(always)]
unsafe fn sum_body(p: *const u8, len: usize) -> u64 {
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    let mut i = 0;
    while i + 32 <= len {
        // SAFETY: i + 32 <= len, inside the caller's readable range.
        let (w0, w1, w2, w3) = unsafe {
            (
                p.add(i).cast::<u64>().read_unaligned(),
                p.add(i + 8).cast::<u64>().read_unaligned(),
                p.add(i + 16).cast::<u64>().read_unaligned(),
                p.add(i + 24).cast::<u64>().read_unaligned(),
            )
        };
        // Split into 32-bit halves so no carry is lost (2^31 rounds fit).
        a += (w0 & 0xffff_ffff) + (w0 >> 32);
        b += (w1 & 0xffff_ffff) + (w1 >> 32);
        c += (w2 & 0xffff_ffff) + (w2 >> 32);
        d += (w3 & 0xffff_ffff) + (w3 >> 32);
        i += 32;
    }
    let mut tail = [0u8; 32];
    // SAFETY: the remaining len - i (< 32) bytes are readable.
    unsafe { std::ptr::copy_nonoverlapping(p.add(i), tail.as_mut_ptr(), len - i) };
    for ch in tail.chunks_exact(8) {
        let w = u64::from_le_bytes([ch[0], ch[1], ch[2], ch[3], ch[4], ch[5], ch[6], ch[7]]);
        a += (w & 0xffff_ffff) + (w >> 32);
    }
    let s = (a as u128) + (b as u128) + (c as u128) + (d as u128);
    fold128(s)
}

fn fold128(s: u128) -> u64 {
    let mut s = (s & 0xffff_ffff_ffff_ffff) + (s >> 64);
    s = (s & 0xffff_ffff_ffff_ffff) + (s >> 64);
    s as u64
}

/// Folds an unfolded sum to 16 bits (little-endian word value).
pub fn fold(s: u64) -> u16 {
    let mut s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// Unfolded sum of a host slice.
pub fn sum(data: &[u8]) -> u64 {
    // SAFETY: a slice is readable over its whole length.
    unsafe { sum_raw(data.as_ptr(), data.len()) }
}

/// Copies `len` bytes and returns the unfolded sum of them, in one pass
/// where the CPU allows (AVX2: load, store, accumulate per 32 bytes).
/// Overlapping ranges (a hostile guest) give unspecified bytes, never UB
/// beyond the ranges.
///
/// # Safety
/// `src..src+len` readable and `dst..dst+len` writable during the call.
pub unsafe fn copy_sum(dst: *mut u8, src: *const u8, len: usize) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present; the caller guarantees the ranges.
        return unsafe { copy_sum_avx2(dst, src, len) };
    }
    // SAFETY: the caller guarantees the ranges.
    unsafe { copy_sum_chunked(dst, src, len) }
}

/// Portable fallback: copy a chunk, then sum it while it is in cache.
///
/// # Safety
/// As `copy_sum`.
unsafe fn copy_sum_chunked(dst: *mut u8, src: *const u8, len: usize) -> u64 {
    const CHUNK: usize = 8192;
    let mut s: u128 = 0;
    let mut off = 0;
    while off < len {
        let n = CHUNK.min(len - off);
        // SAFETY: off + n <= len; ranges valid per the caller.
        unsafe {
            std::ptr::copy(src.add(off), dst.add(off), n);
            s += sum_raw(dst.add(off), n) as u128;
        }
        off += n;
    }
    fold128(s)
}

/// Fused AVX2 copy + sum.
///
/// # Safety
/// The CPU must support AVX2; ranges as `copy_sum`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn copy_sum_avx2(dst: *mut u8, src: *const u8, len: usize) -> u64 {
    use std::arch::x86_64::*;
    let mask = _mm256_set1_epi64x(0xffff_ffff);
    let mut a0 = _mm256_setzero_si256();
    let mut a1 = _mm256_setzero_si256();
    let mut i = 0;
    while i + 64 <= len {
        // SAFETY: i + 64 <= len: both 32-byte accesses are in range;
        // unaligned loads/stores have no alignment requirement.
        unsafe {
            let v0 = _mm256_loadu_si256(src.add(i).cast());
            let v1 = _mm256_loadu_si256(src.add(i + 32).cast());
            _mm256_storeu_si256(dst.add(i).cast(), v0);
            _mm256_storeu_si256(dst.add(i + 32).cast(), v1);
            a0 = _mm256_add_epi64(a0, _mm256_and_si256(v0, mask));
            a0 = _mm256_add_epi64(a0, _mm256_srli_epi64(v0, 32));
            a1 = _mm256_add_epi64(a1, _mm256_and_si256(v1, mask));
            a1 = _mm256_add_epi64(a1, _mm256_srli_epi64(v1, 32));
        }
        i += 64;
    }
    let mut lanes = [0u64; 8];
    // SAFETY: `lanes` holds 64 bytes.
    unsafe {
        _mm256_storeu_si256(lanes.as_mut_ptr().cast(), a0);
        _mm256_storeu_si256(lanes.as_mut_ptr().add(4).cast(), a1);
    }
    let mut s: u128 = lanes.iter().map(|&l| l as u128).sum();
    // SAFETY: the tail i..len is in range for both.
    s += unsafe { copy_sum_chunked(dst.add(i), src.add(i), len - i) } as u128;
    fold128(s)
}

/// An Internet checksum accumulated over pieces of arbitrary parity.
#[derive(Clone, Copy, Debug, Default)]
pub struct Csum {
    acc: u64,
    odd: bool,
}

impl Csum {
    /// Adds the unfolded sum `s` of a piece of `len` bytes.
    pub fn add_sum(&mut self, s: u64, len: usize) {
        let mut f = fold(s);
        if self.odd {
            f = f.swap_bytes();
        }
        self.acc += f as u64;
        if len % 2 == 1 {
            self.odd = !self.odd;
        }
    }

    /// Adds a host slice.
    pub fn add(&mut self, data: &[u8]) {
        self.add_sum(sum(data), data.len());
    }

    /// The folded (not complemented) sum; 0xffff means "all ones".
    pub fn folded(&self) -> u16 {
        fold(self.acc)
    }

    /// The checksum field value: store with `to_le_bytes`.
    pub fn finish(&self) -> u16 {
        !self.folded()
    }
}

/// Sum of the IPv4 TCP pseudo-header for `tcp_len` bytes of segment.
pub fn pseudo_v4(src: [u8; 4], dst: [u8; 4], tcp_len: u16) -> Csum {
    let mut c = Csum::default();
    let l = tcp_len.to_be_bytes();
    c.add(&[
        src[0], src[1], src[2], src[3], dst[0], dst[1], dst[2], dst[3], 0, 6, l[0], l[1],
    ]);
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Textbook big-endian RFC 1071 sum for comparison.
    fn reference(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for ch in data.chunks(2) {
            let w = if ch.len() == 2 {
                u16::from_be_bytes([ch[0], ch[1]])
            } else {
                u16::from_be_bytes([ch[0], 0])
            };
            s += w as u32;
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    proptest! {
        #[test]
        fn matches_reference(data in proptest::collection::vec(any::<u8>(), 0..3000), split in 0usize..3000) {
            let mut c = Csum::default();
            let k = split.min(data.len());
            c.add(&data[..k]);
            c.add(&data[k..]);
            prop_assert_eq!(c.finish().to_le_bytes(), reference(&data).to_be_bytes());
        }

        #[test]
        fn copy_sum_copies_and_sums(data in proptest::collection::vec(any::<u8>(), 0..20000)) {
            let mut dst = vec![0u8; data.len()];
            // SAFETY: both buffers hold data.len() bytes.
            let s = unsafe { copy_sum(dst.as_mut_ptr(), data.as_ptr(), data.len()) };
            prop_assert_eq!(&dst, &data);
            prop_assert_eq!(fold(s), fold(sum(&data)));
        }
    }
}

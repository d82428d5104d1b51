//! Internet checksum (RFC 1071), computed over little-endian 16-bit words
//! (byte-order independence lets us sum native words and store the result
//! with `to_le_bytes`), with a fused copy+checksum for the data path.

/// Unfolded sum of `len` bytes at `p`, as little-endian 16-bit words.
/// Uses AVX2 intrinsics when the CPU has it (on cached data about 3x the
/// auto-vectorized loop it replaced).
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

/// The unfolded sum with explicit AVX2 accumulation: four independent
/// accumulators, each 64-bit lane adding both 32-bit halves of its lane of
/// every 32-byte load (the portable loop keeps one u64 per word instead).
///
/// # Safety
/// The CPU must support AVX2; `p..p+len` readable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_avx2(p: *const u8, len: usize) -> u64 {
    use std::arch::x86_64::*;
    let mask = _mm256_set1_epi64x(0xffff_ffff);
    let mut acc = [_mm256_setzero_si256(); 4];
    let mut i = 0;
    // Each lane gains < 2^33 per load: no carry is lost below 2^31 loads.
    while i + 128 <= len {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: i + 32k + 32 <= i + 128 <= len, inside the caller's
            // readable range; unaligned loads have no requirement.
            let v = unsafe { _mm256_loadu_si256(p.add(i + 32 * k).cast()) };
            *a = _mm256_add_epi64(*a, _mm256_and_si256(v, mask));
            *a = _mm256_add_epi64(*a, _mm256_srli_epi64(v, 32));
        }
        i += 128;
    }
    while i + 32 <= len {
        // SAFETY: i + 32 <= len, as above.
        let v = unsafe { _mm256_loadu_si256(p.add(i).cast()) };
        acc[0] = _mm256_add_epi64(acc[0], _mm256_and_si256(v, mask));
        acc[0] = _mm256_add_epi64(acc[0], _mm256_srli_epi64(v, 32));
        i += 32;
    }
    let mut lanes = [0u64; 16];
    for (k, a) in acc.iter().enumerate() {
        // SAFETY: `lanes` holds 16 u64, k * 4 + 4 <= 16.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().add(4 * k).cast(), *a) };
    }
    let mut s: u128 = lanes.iter().map(|&l| l as u128).sum();
    // SAFETY: the remaining len - i (< 32) bytes are readable; i is even.
    s += unsafe { sum_body(p.add(i), len - i) } as u128;
    fold128(s)
}

/// The portable summing loop.
///
/// # Safety
/// `p..p+len` must be readable for the duration of the call.
#[inline(always)]
unsafe fn sum_body(p: *const u8, len: usize) -> u64 {
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    let mut i = 0;
    // Each accumulator gains < 2^33 per step, so none wraps below 2^31
    // steps (64 GiB): wrapping adds (no overflow-check branch in the loop,
    // which the package's release profile would otherwise keep) are exact.
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
        a = a.wrapping_add((w0 & 0xffff_ffff).wrapping_add(w0 >> 32));
        b = b.wrapping_add((w1 & 0xffff_ffff).wrapping_add(w1 >> 32));
        c = c.wrapping_add((w2 & 0xffff_ffff).wrapping_add(w2 >> 32));
        d = d.wrapping_add((w3 & 0xffff_ffff).wrapping_add(w3 >> 32));
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
    if i + 32 <= len {
        // SAFETY: i + 32 <= len, as above.
        unsafe {
            let v = _mm256_loadu_si256(src.add(i).cast());
            _mm256_storeu_si256(dst.add(i).cast(), v);
            a0 = _mm256_add_epi64(a0, _mm256_and_si256(v, mask));
            a0 = _mm256_add_epi64(a0, _mm256_srli_epi64(v, 32));
        }
        i += 32;
    }
    let mut lanes = [0u64; 8];
    // SAFETY: `lanes` holds 64 bytes.
    unsafe {
        _mm256_storeu_si256(lanes.as_mut_ptr().cast(), a0);
        _mm256_storeu_si256(lanes.as_mut_ptr().add(4).cast(), a1);
    }
    let mut s: u128 = lanes.iter().map(|&l| l as u128).sum();
    // The last len - i < 32 bytes: copied, then summed where they landed
    // (what was written is what is summed). i is even.
    // SAFETY: the tail i..len is in range for both; `copy` tolerates
    // overlap.
    unsafe {
        std::ptr::copy(src.add(i), dst.add(i), len - i);
        s += sum_body(dst.add(i), len - i) as u128;
    }
    fold128(s)
}

/// Copies shorter than this keep cache-allocating stores. Measured with
/// `bench-model` (payload per CPU-second, frames of one size): 4 KiB
/// frames placed faster with ordinary stores (5.2 against 4.4 GB/s; the
/// write-back of cached lines overlaps the per-frame work, streaming
/// stores stall on it), 8 KiB broke even, 16 KiB and 32 KiB frames gained
/// 14% and 20-25% with streaming stores.
pub const STREAM_MIN: usize = 6144;

/// As [`copy_sum`], for a copy into guest RAM (DMA placement): from
/// [`STREAM_MIN`] bytes on, on CPUs with AVX2, with non-temporal stores
/// for the 32-byte aligned body, as a NIC's DMA write goes to memory
/// rather than into a CPU's private cache. Such a store needs no read for
/// ownership of the destination line, so a copy that misses the caches
/// moves two bytes over the memory bus per payload byte instead of three.
/// Ends with a store fence: the bytes are globally visible before any
/// later store (such as the completion or header-queue entry that
/// reports them).
///
/// # Safety
/// As [`copy_sum`].
pub unsafe fn copy_sum_stream(dst: *mut u8, src: *const u8, len: usize) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if len >= STREAM_MIN && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present; the caller guarantees the ranges.
        return unsafe { stream_avx2::<true>(dst, src, len) };
    }
    // SAFETY: the caller guarantees the ranges.
    unsafe { copy_sum(dst, src, len) }
}

/// [`copy_sum_stream`] without the sum (a copy of bytes already verified).
///
/// # Safety
/// As [`copy_sum`].
pub unsafe fn copy_stream(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if len >= STREAM_MIN && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present; the caller guarantees the ranges.
        unsafe { stream_avx2::<false>(dst, src, len) };
        return;
    }
    // SAFETY: the caller guarantees the ranges; `copy` tolerates overlap.
    unsafe { std::ptr::copy(src, dst, len) }
}

/// Streaming copy (and with `SUM`, the unfolded sum; 0 otherwise): the
/// unaligned head up to a 32-byte boundary of `dst` and the tail below 64
/// bytes with ordinary stores, the body with non-temporal ones.
///
/// # Safety
/// The CPU must support AVX2; ranges as [`copy_sum`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn stream_avx2<const SUM: bool>(dst: *mut u8, src: *const u8, len: usize) -> u64 {
    use std::arch::x86_64::*;
    let h = dst.align_offset(32).min(len);
    let body = (len - h) & !63;
    let rest = len - h - body;
    let head = if SUM {
        // SAFETY: 0..h is inside both ranges (h <= len); AVX2 present.
        unsafe { copy_sum_avx2(dst, src, h) }
    } else {
        // SAFETY: as above; `copy` tolerates overlap.
        unsafe { std::ptr::copy(src, dst, h) };
        0
    };
    // SAFETY: h <= len: at most one past the end of each range.
    let (d, s) = unsafe { (dst.add(h), src.add(h)) };
    let mask = _mm256_set1_epi64x(0xffff_ffff);
    let mut a0 = _mm256_setzero_si256();
    let mut a1 = _mm256_setzero_si256();
    let mut i = 0;
    while i < body {
        // SAFETY: h + i + 64 <= h + body <= len, inside both ranges;
        // d + i is 32-byte aligned (d is, i is a multiple of 64) as the
        // streaming store requires; unaligned loads have no requirement.
        let (v0, v1) = unsafe {
            let v0 = _mm256_loadu_si256(s.add(i).cast());
            let v1 = _mm256_loadu_si256(s.add(i + 32).cast());
            _mm256_stream_si256(d.add(i).cast(), v0);
            _mm256_stream_si256(d.add(i + 32).cast(), v1);
            (v0, v1)
        };
        if SUM {
            // Each 64-bit lane gains < 2^33 per step: no carry is lost
            // below 2^31 steps (128 GiB).
            a0 = _mm256_add_epi64(a0, _mm256_and_si256(v0, mask));
            a0 = _mm256_add_epi64(a0, _mm256_srli_epi64(v0, 32));
            a1 = _mm256_add_epi64(a1, _mm256_and_si256(v1, mask));
            a1 = _mm256_add_epi64(a1, _mm256_srli_epi64(v1, 32));
        }
        i += 64;
    }
    // Order the weakly-ordered streaming stores before any later store.
    _mm_sfence();
    if !SUM {
        // SAFETY: h + body + rest == len: the tail of both ranges.
        unsafe { std::ptr::copy(s.add(body), d.add(body), rest) };
        return 0;
    }
    let mut lanes = [0u64; 8];
    // SAFETY: `lanes` holds 64 bytes.
    unsafe {
        _mm256_storeu_si256(lanes.as_mut_ptr().cast(), a0);
        _mm256_storeu_si256(lanes.as_mut_ptr().add(4).cast(), a1);
    }
    let mut t: u128 = lanes.iter().map(|&l| l as u128).sum();
    // SAFETY: h + body + rest == len: the tail of both ranges.
    t += unsafe { copy_sum_avx2(d.add(body), s.add(body), rest) } as u128;
    // The body's words start at offset h: an odd head shifts them by a
    // byte, which swaps the bytes of their folded sum (RFC 1071 2(B)).
    let t = fold128(t);
    let t = if h % 2 == 1 {
        fold(t).swap_bytes() as u64
    } else {
        t
    };
    fold128(head as u128 + t as u128)
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

/// The TCP pseudo-header sum of an IPv6 packet (RFC 8200 8.1: source,
/// destination, 32-bit upper-layer length, three zero bytes, next header).
pub fn pseudo_v6(src: [u8; 16], dst: [u8; 16], tcp_len: u32) -> Csum {
    let mut c = Csum::default();
    c.add(&src);
    c.add(&dst);
    let l = tcp_len.to_be_bytes();
    c.add(&[l[0], l[1], l[2], l[3], 0, 0, 0, 6]);
    c
}

/// The TCP pseudo-header sum of packet `t` with a TCP segment (header +
/// payload) of `tcp_len` bytes, for its family.
pub fn pseudo_tcp(t: &zeronic_hw::net::Tcp, tcp_len: usize) -> Csum {
    use zeronic_hw::net::v4_of_mapped;
    if t.v6 {
        // CAST: a TCP segment is below 2^32 bytes (frames are < 64 KiB).
        pseudo_v6(t.src, t.dst, tcp_len as u32)
    } else {
        // CAST: an IPv4 TCP segment fits the 16-bit total length.
        pseudo_v4(v4_of_mapped(t.src), v4_of_mapped(t.dst), tcp_len as u16)
    }
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

    /// Ok if the unfolded sum `s` gives the reference checksum of `data`.
    fn is_reference(data: &[u8], s: u64) -> Result<(), (u16, u16)> {
        let (got, want) = (
            u16::from_be_bytes((!fold(s)).to_le_bytes()),
            reference(data),
        );
        if got == want {
            Ok(())
        } else {
            Err((got, want))
        }
    }

    /// Every misalignment of the destination (odd heads shift the body's
    /// words by a byte) at lengths around `STREAM_MIN` and a 64-byte body,
    /// on all-ones data (the most carries) and on a byte ramp.
    #[test]
    fn stream_heads_and_tails() {
        let lens = [
            0,
            1,
            63,
            64,
            65,
            STREAM_MIN - 1,
            STREAM_MIN,
            STREAM_MIN + 1,
            4095,
            65_537,
        ];
        for fill in [0xffu8, 0] {
            let src: Vec<u8> = (0..70_000u32)
                .map(|i| {
                    if fill == 0xff {
                        0xff
                    } else {
                        (i * 7 + 3) as u8
                    }
                })
                .collect();
            for &n in &lens {
                for doff in 0..40 {
                    let mut dst = vec![0u8; n + 40];
                    // SAFETY: dst holds doff + n bytes; src at least n.
                    let s =
                        unsafe { copy_sum_stream(dst[doff..].as_mut_ptr(), src[1..].as_ptr(), n) };
                    assert_eq!(&dst[doff..doff + n], &src[1..=n], "len {n} off {doff}");
                    assert_eq!(is_reference(&src[1..=n], s), Ok(()), "len {n} off {doff}");
                }
            }
        }
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

        /// The fast sum, the portable loop and the textbook reference
        /// agree at any start offset (alignment) and length, and on
        /// carry-heavy data (bytes biased to 0xff).
        #[test]
        fn sum_matches_reference(
            data in proptest::collection::vec(prop_oneof![Just(0xffu8), any::<u8>()], 0..5000),
            off in 0usize..64,
        ) {
            let d = &data[off.min(data.len())..];
            // SAFETY: d is a slice, readable over its length.
            let portable = unsafe { sum_body(d.as_ptr(), d.len()) };
            prop_assert_eq!(is_reference(d, sum(d)), Ok(()));
            prop_assert_eq!(is_reference(d, portable), Ok(()));
        }

        /// The streaming copies (and the cache-allocating ones) copy
        /// exactly the range and sum it, for any alignment of source and
        /// destination (odd heads included) and lengths around
        /// `STREAM_MIN`, on carry-heavy data too.
        #[test]
        fn copies_match_reference(
            data in proptest::collection::vec(prop_oneof![Just(0xffu8), any::<u8>()], 0..12000),
            soff in 0usize..64,
            doff in 0usize..64,
        ) {
            let src = &data[soff.min(data.len())..];
            let n = src.len();
            type CopyFn = unsafe fn(*mut u8, *const u8, usize) -> u64;
            let plain: CopyFn = |d, s, n| {
                // SAFETY: forwarded from the caller below.
                unsafe { copy_stream(d, s, n) };
                0
            };
            let routines: [(&str, CopyFn, bool); 4] = [
                ("copy_sum", copy_sum, true),
                ("copy_sum_chunked", copy_sum_chunked, true),
                ("copy_sum_stream", copy_sum_stream, true),
                ("copy_stream", plain, false),
            ];
            for (name, f, sums) in routines {
                // Guard bytes on both sides catch a write outside the range.
                let mut dst = vec![0xa5u8; doff + n + 64];
                // SAFETY: dst holds doff + n bytes and more; src n bytes.
                let s = unsafe { f(dst[doff..].as_mut_ptr(), src.as_ptr(), n) };
                prop_assert!(dst[..doff].iter().all(|&b| b == 0xa5), "{} wrote before", name);
                prop_assert!(dst[doff + n..].iter().all(|&b| b == 0xa5), "{} wrote after", name);
                prop_assert_eq!(&dst[doff..doff + n], src, "{} copy", name);
                if sums {
                    prop_assert_eq!(is_reference(src, s), Ok(()), "{} sum", name);
                }
            }
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

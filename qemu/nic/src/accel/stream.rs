//! The byte streams FILL writes and VERIFY compares against, and the hash
//! HASH computes (`docs/accel.md` §6). The definitions are `zeronic_hw`'s
//! (`za_prng_word`, `za_fnv1a`); this file generates them a chunk at a time.

use zeronic_hw::accel::{za_fnv1a, za_prng_word};

/// A stream: stream byte `o` is byte `o % 8` (little-endian) of word `o / 8`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// SplitMix64 started at this seed (`za_prng_word`).
    Prng(u64),
    /// The same 8 bytes repeated (`ZA_STREAM_PATTERN`).
    Pattern(u64),
}

impl Stream {
    /// Word `i` of the stream.
    pub fn word(&self, i: u64) -> u64 {
        match *self {
            Stream::Prng(seed) => za_prng_word(seed, i),
            Stream::Pattern(p) => p,
        }
    }

    /// Writes stream bytes `[off, off + out.len())` into `out`. Offsets
    /// wrap at 2^64 (the engine refuses ranges that would).
    pub fn generate(&self, off: u64, out: &mut [u8]) {
        let mut o = off;
        let mut i = 0;
        while i < out.len() {
            let w = self.word(o / 8).to_le_bytes();
            let k = (o % 8) as usize;
            let n = (8 - k).min(out.len() - i);
            out[i..i + n].copy_from_slice(&w[k..k + n]);
            i += n;
            o = o.wrapping_add(n as u64);
        }
    }
}

/// FNV-1a 64 of `data` continued from `h`.
pub fn fnv1a(h: u64, data: &[u8]) -> u64 {
    za_fnv1a(h, data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zeronic_hw::accel::ZA_FNV_OFFSET_BASIS;

    #[test]
    fn prng_is_splitmix64() {
        // SplitMix64 from state 0: the reference sequence's first outputs.
        let s = Stream::Prng(0);
        assert_eq!(s.word(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(s.word(1), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(s.word(2), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn generate_at_any_offset_agrees() {
        let s = Stream::Prng(0x1234_5678);
        let mut whole = vec![0u8; 1000];
        s.generate(3, &mut whole);
        for start in [0usize, 1, 5, 8, 13, 500] {
            let mut part = vec![0u8; 1000 - start];
            s.generate(3 + start as u64, &mut part);
            assert_eq!(&part[..], &whole[start..]);
        }
        let p = Stream::Pattern(0x0807_0605_0403_0201);
        let mut b = [0u8; 10];
        p.generate(6, &mut b);
        assert_eq!(b, [7, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn fnv1a_reference_values_and_chaining() {
        assert_eq!(fnv1a(ZA_FNV_OFFSET_BASIS, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(ZA_FNV_OFFSET_BASIS, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(ZA_FNV_OFFSET_BASIS, b"foobar"), 0x8594_4171_f739_67e8);
        let h = fnv1a(ZA_FNV_OFFSET_BASIS, b"foo");
        assert_eq!(fnv1a(h, b"bar"), 0x8594_4171_f739_67e8);
    }
}

//! The payload: a deterministic byte stream and the digests of what was sent
//! and what arrived.
//!
//! Word `i` (bytes `8i..8i+8`, little-endian) of the stream of seed `s` is
//! `(s * 2^40 + i) * STEP` (mod 2^64, `STEP` odd): a counter-mode stream,
//! so any offset can be produced without the bytes before it (a sender
//! refilling a slot at stream offset `o` does not replay the stream), and
//! since multiplying by an odd number is a bijection, every 8-byte word of
//! every stream (of fewer than 2^40 words, seeds below 2^24) is different
//! from every other: a byte out of place (dropped, duplicated, reordered, a
//! page placed at the wrong offset or from another flow) changes the
//! digest of the stream. Consecutive words differ by `STEP`, so filling is
//! one addition per 8 bytes: under TCG the generator it replaced
//! (splitmix64 of the counter, two multiplications and three shifts per
//! word) was 7% of the guest's busy time in `zc_perf.sh`.
//!
//! Since the stream is a function of (seed, length), so is its digest:
//! [`digests`] computes it beforehand (`zn-perf digest`), and a sender given
//! it ([`StreamSum::given`]) reports it instead of hashing what it generates.
//! A receiver always hashes every byte it got.
//!
//! The digest is XXH64 by default (the checksum zstd frames carry): a
//! corrupted, dropped or misplaced byte changes it but for a chance of
//! 2^-64, and no one forges these streams. SHA-256 (`--hash sha256`) is
//! there for whoever wants a cryptographic digest of the stream; it ran at
//! 116 MB/s in a TCG guest against XXH64's 2.5 GB/s (with it, a third of
//! `zc_perf.sh`'s guest CPU time went to hashing).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use xxhash_rust::xxh64::Xxh64;

/// The digest of a stream (`--hash`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Hash {
    /// XXH64, 16 hex digits.
    #[default]
    Xxh64,
    /// SHA-256, 64 hex digits.
    Sha256,
}

impl Hash {
    /// The name `--hash` takes (and the JSON spec carries).
    pub fn name(self) -> &'static str {
        match self {
            Hash::Xxh64 => "xxh64",
            Hash::Sha256 => "sha256",
        }
    }

    /// Hex digits of a printed digest.
    pub fn hex_len(self) -> usize {
        match self {
            Hash::Xxh64 => 16,
            Hash::Sha256 => 64,
        }
    }

    /// Whether `h` has the shape of a printed digest of this kind (any case).
    pub fn is_digest(self, h: &str) -> bool {
        h.len() == self.hex_len() && h.bytes().all(|b| b.is_ascii_hexdigit())
    }
}

/// A running digest of either kind.
#[derive(Clone)]
enum Hasher {
    Xxh64(Xxh64),
    Sha256(Sha256),
}

impl Hasher {
    fn new(hash: Hash) -> Self {
        match hash {
            Hash::Xxh64 => Hasher::Xxh64(Xxh64::new(0)),
            Hash::Sha256 => Hasher::Sha256(Sha256::new()),
        }
    }

    fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Xxh64(h) => h.update(data),
            Hasher::Sha256(h) => h.update(data),
        }
    }

    /// The digest of what was fed so far, as printed (lower-case hex).
    fn hex(&self) -> String {
        match self {
            Hasher::Xxh64(h) => format!("{:016x}", h.digest()),
            Hasher::Sha256(h) => h
                .clone()
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        }
    }
}

/// The words' step: odd (so `i -> i * STEP` is a bijection), with set bits
/// spread over all eight bytes (so every byte of a word changes from one word
/// to the next).
const STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// The payload generator of one flow.
#[derive(Clone, Copy, Debug)]
pub struct Gen {
    /// `seed * 2^40`: the counter of the stream's first word.
    base: u64,
}

impl Gen {
    /// The generator of seed `seed` (each flow gets its own).
    pub fn new(seed: u64) -> Self {
        Self { base: seed << 40 }
    }

    fn word(&self, i: u64) -> u64 {
        self.base.wrapping_add(i).wrapping_mul(STEP)
    }

    /// Fills `buf` with the stream's bytes `[off, off + buf.len())`.
    pub fn fill(&self, off: u64, buf: &mut [u8]) {
        let mut pos = off;
        let mut rest = buf;
        // Up to the next 8-byte boundary of the stream.
        let head = ((8 - pos % 8) % 8) as usize;
        if head > 0 {
            let n = head.min(rest.len());
            let w = self.word(pos / 8).to_le_bytes();
            let at = (pos % 8) as usize;
            rest[..n].copy_from_slice(&w[at..at + n]);
            rest = &mut rest[n..];
            pos += n as u64;
        }
        let mut chunks = rest.chunks_exact_mut(8);
        let mut w = self.word(pos / 8);
        for c in &mut chunks {
            c.copy_from_slice(&w.to_le_bytes());
            w = w.wrapping_add(STEP);
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let n = tail.len();
            tail.copy_from_slice(&w.to_le_bytes()[..n]);
        }
    }

    /// Byte `off` of the stream.
    #[cfg(test)]
    pub fn byte(&self, off: u64) -> u8 {
        self.word(off / 8).to_le_bytes()[(off % 8) as usize]
    }
}

/// The digest of the first `len` bytes of the stream of seed `seed`, for
/// each `len` of `lens` (one pass over the longest), in the order given.
pub fn digests(seed: u64, lens: &[u64], hash: Hash) -> Vec<String> {
    const CHUNK: u64 = 1 << 20;
    let g = Gen::new(seed);
    let mut ends: Vec<u64> = lens.to_vec();
    ends.sort_unstable();
    ends.dedup();
    let mut at = std::collections::HashMap::new();
    let mut sum = Hasher::new(hash);
    let mut buf = vec![0u8; CHUNK as usize];
    let mut off = 0u64;
    for &end in &ends {
        while off < end {
            let n = (end - off).min(CHUNK) as usize;
            g.fill(off, &mut buf[..n]);
            sum.update(&buf[..n]);
            off += n as u64;
        }
        at.insert(end, sum.hex());
    }
    lens.iter().map(|l| at[l].clone()).collect()
}

/// A running count and, with `--verify`, the digest of one direction of a
/// flow, fed in stream order; or, for a sender given its stream's digest
/// beforehand, that digest once exactly the stream's length was counted.
#[derive(Clone, Default)]
pub struct StreamSum {
    bytes: u64,
    sum: Option<Hasher>,
    /// The digest of the whole stream and its length ([`StreamSum::given`]).
    given: Option<(String, u64)>,
}

// By hand: the hasher's state has no `Debug`; its digest so far stands for it.
impl std::fmt::Debug for StreamSum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSum")
            .field("bytes", &self.bytes)
            .field("sum", &self.sum.as_ref().map(Hasher::hex))
            .field("given", &self.given)
            .finish()
    }
}

impl StreamSum {
    /// Counting only (None), or counting and hashing.
    pub fn new(hash: Option<Hash>) -> Self {
        Self {
            bytes: 0,
            sum: hash.map(Hasher::new),
            given: None,
        }
    }

    /// A sender's sum that hashes nothing: `hex()` is `digest`, the
    /// digest of the `len` bytes of the stream it generates ([`digests`]),
    /// if exactly `len` bytes were fed, and None otherwise (a digest that
    /// matches no receiver's).
    pub fn given(digest: String, len: u64) -> Self {
        Self {
            bytes: 0,
            sum: None,
            given: Some((digest, len)),
        }
    }

    /// The next bytes of the stream.
    pub fn update(&mut self, data: &[u8]) {
        self.bytes += data.len() as u64;
        if let Some(h) = &mut self.sum {
            h.update(data);
        }
    }

    /// Bytes counted so far (hashed or not).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Adds bytes that are counted but not hashed (runs without --verify
    /// that never look at the payload).
    pub fn count(&mut self, n: u64) {
        debug_assert!(self.sum.is_none() && self.given.is_none());
        self.bytes += n;
    }

    /// The hex digest of everything fed (None without --verify, or for a
    /// direction that carried nothing); for a given digest, that one if the
    /// whole stream was fed.
    pub fn hex(&self) -> Option<String> {
        if self.bytes == 0 {
            return None;
        }
        if let Some((d, len)) = &self.given {
            return (self.bytes == *len).then(|| d.clone());
        }
        self.sum.as_ref().map(Hasher::hex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_any_offset_matches_bytewise() {
        let g = Gen::new(42);
        let mut whole = vec![0u8; 1000];
        g.fill(0, &mut whole);
        for (i, b) in whole.iter().enumerate() {
            assert_eq!(*b, g.byte(i as u64));
        }
        // Every start and length, including unaligned ones shorter than a word.
        for start in 0..20u64 {
            for len in 0..30usize {
                let mut part = vec![0xAAu8; len];
                g.fill(start, &mut part);
                assert_eq!(part[..], whole[start as usize..start as usize + len]);
            }
        }
    }

    #[test]
    fn not_periodic_and_seeded() {
        let mut a = vec![0u8; 1 << 16];
        Gen::new(1).fill(0, &mut a);
        let mut b = vec![0u8; 1 << 16];
        Gen::new(2).fill(0, &mut b);
        assert_ne!(a, b);
        // No two 8-byte words of a 64 KiB stretch are equal (not memset, not
        // a short period).
        let mut words: Vec<&[u8]> = a.chunks(8).collect();
        words.sort();
        words.dedup();
        assert_eq!(words.len(), a.len() / 8);
        // Nor does any word of one flow's stream appear in another's.
        words.extend(b.chunks(8));
        words.sort();
        words.dedup();
        assert_eq!(words.len(), (a.len() + b.len()) / 8);
        // Roughly uniform bytes.
        let zeros = a.iter().filter(|&&x| x == 0).count();
        assert!(zeros > 100 && zeros < 400, "{zeros}");
    }

    #[test]
    fn digest_is_chunking_invariant() {
        let g = Gen::new(7);
        let mut data = vec![0u8; 100_000];
        g.fill(0, &mut data);
        let mut one = StreamSum::new(Some(Hash::Xxh64));
        one.update(&data);
        let mut many = StreamSum::new(Some(Hash::Xxh64));
        let mut off = 0;
        for n in [1usize, 7, 4096, 13, 65536].iter().cycle() {
            if off == data.len() {
                break;
            }
            let end = (off + n).min(data.len());
            many.update(&data[off..end]);
            off = end;
        }
        assert_eq!(one.hex(), many.hex());
        assert_eq!(one.bytes(), 100_000);
        // XXH64's published value for "abc" (seed 0); nothing for an
        // empty direction.
        let mut abc = StreamSum::new(Some(Hash::Xxh64));
        abc.update(b"abc");
        assert_eq!(abc.hex().unwrap(), "44bc2cf5ad770999");
        assert_eq!(StreamSum::new(Some(Hash::Xxh64)).hex(), None);
    }

    #[test]
    fn one_byte_out_of_place_changes_the_digest() {
        let g = Gen::new(9);
        let mut data = vec![0u8; 10_000];
        g.fill(0, &mut data);
        let mut good = StreamSum::new(Some(Hash::Xxh64));
        good.update(&data);
        // Swap two adjacent bytes.
        let mut swapped = data.clone();
        swapped.swap(5000, 5001);
        let mut s = StreamSum::new(Some(Hash::Xxh64));
        s.update(&swapped);
        assert_ne!(good.hex(), s.hex());
        // A byte dropped and another appended.
        let mut shifted = data.clone();
        shifted.remove(123);
        shifted.push(0);
        let mut s = StreamSum::new(Some(Hash::Xxh64));
        s.update(&shifted);
        assert_ne!(good.hex(), s.hex());
        // A 4 KiB page placed at the next page's offset.
        let mut moved = data.clone();
        moved.copy_within(0..4096, 4096);
        let mut s = StreamSum::new(Some(Hash::Xxh64));
        s.update(&moved);
        assert_ne!(good.hex(), s.hex());
    }

    #[test]
    fn digests_of_prefixes_match_hashing() {
        let g = Gen::new(11);
        let mut data = vec![0u8; 3 << 20];
        g.fill(0, &mut data);
        let lens = [3 << 20, 5, (1 << 20) + 3, 5];
        for hash in [Hash::Xxh64, Hash::Sha256] {
            let d = digests(11, &lens, hash);
            for (l, h) in lens.iter().zip(&d) {
                let mut s = StreamSum::new(Some(hash));
                s.update(&data[..*l as usize]);
                assert_eq!(s.hex().as_ref(), Some(h), "{hash:?} {l}");
                assert!(hash.is_digest(h), "{h}");
            }
            assert_ne!(d[0], digests(12, &[3 << 20], hash)[0]);
        }
    }

    #[test]
    fn sha256_of_abc_and_chunking() {
        // FIPS 180-2's example; the digest does not depend on how the
        // stream was cut into reads.
        let mut abc = StreamSum::new(Some(Hash::Sha256));
        abc.update(b"a");
        abc.update(b"bc");
        assert_eq!(
            abc.hex().unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(!Hash::Xxh64.is_digest(&abc.hex().unwrap()));
        // The names messages print are the ones --hash and the spec take.
        for h in [Hash::Xxh64, Hash::Sha256] {
            use clap::ValueEnum;
            assert_eq!(Hash::from_str(h.name(), false), Ok(h));
            assert_eq!(
                serde_json::to_string(&h).unwrap(),
                format!("\"{}\"", h.name())
            );
        }
        assert!(!Hash::Sha256.is_digest("44bc2cf5ad770999"));
    }

    #[test]
    fn given_digest_only_for_the_whole_stream() {
        let d = digests(4, &[1000], Hash::Xxh64)[0].clone();
        let mut s = StreamSum::given(d.clone(), 1000);
        assert_eq!(s.hex(), None);
        s.update(&[0u8; 600]);
        assert_eq!(s.hex(), None);
        s.update(&[0u8; 400]);
        assert_eq!(s.hex(), Some(d.clone()));
        assert_eq!(s.bytes(), 1000);
        s.update(&[0u8; 1]);
        assert_eq!(s.hex(), None);
    }

    #[test]
    fn counting_only() {
        let mut s = StreamSum::new(None);
        s.update(b"abc");
        s.count(5);
        assert_eq!(s.bytes(), 8);
        assert_eq!(s.hex(), None);
    }
}

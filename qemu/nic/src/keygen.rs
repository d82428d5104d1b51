//! MR key generations: a keyed pseudo-random permutation of a per-device
//! 48-bit registration counter.
//!
//! The counter starts at 0 at every reset and advances once per successful
//! registration; generation = `permute(counter)`, skipping the one counter
//! value whose image is 0 (so a key is never 0). A permutation of a counter
//! that never wraps cannot repeat, so no key repeats between two resets for
//! 2^48 - 1 registrations (about 8.9 years at 10^6 registrations/s); after
//! that registration fails with `ST_NO_SPACE` until the next reset.
//!
//! The permutation is an 8-round balanced Feistel network over two 24-bit
//! halves whose round function is SipHash-2-4 keyed with a 128-bit secret
//! drawn from the OS random number generator at every reset. A Feistel
//! network is a permutation whatever its round function; with a PRF as
//! round function, 4 rounds already make it a strong pseudo-random
//! permutation (Luby-Rackoff), so keys seen by a guest say nothing usable
//! about later keys without the secret.

use siphasher::sip::SipHasher24;

/// Bits of a generation.
pub const GEN_BITS: u32 = 48;
/// Number of generations (and of counter values).
pub const GEN_SPACE: u64 = 1 << GEN_BITS;

const HALF_BITS: u32 = GEN_BITS / 2;
const HALF_MASK: u64 = (1 << HALF_BITS) - 1;
const ROUNDS: u8 = 8;

/// The generation source of one device, valid until its next reset.
#[derive(Clone, Debug)]
pub struct KeyGen {
    prf: SipHasher24,
    /// Next counter value to permute (< GEN_SPACE while not exhausted).
    counter: u64,
}

impl KeyGen {
    /// A fresh generator with a secret from the OS random number generator.
    ///
    /// # Panics
    /// If the OS cannot supply random bytes (`getrandom(2)` failing on
    /// Linux >= 3.17 means a broken system; keys must not become guessable).
    pub fn from_os_rng() -> Self {
        let mut secret = [0u8; 16];
        getrandom::fill(&mut secret).expect("OS random number generator for MR key secrets");
        let k0 = u64::from_le_bytes(secret[..8].try_into().expect("8 bytes"));
        let k1 = u64::from_le_bytes(secret[8..].try_into().expect("8 bytes"));
        Self::with_secret(k0, k1, 0)
    }

    /// A generator with a given secret whose counter starts at `counter`
    /// (tests: reproducible keys, counter exhaustion).
    pub fn with_secret(k0: u64, k1: u64, counter: u64) -> Self {
        Self {
            prf: SipHasher24::new_with_keys(k0, k1),
            counter,
        }
    }

    fn round(&self, r: u8, half: u64) -> u64 {
        let mut b = [0u8; 4];
        b[0] = r;
        b[1..].copy_from_slice(&half.to_le_bytes()[..3]);
        self.prf.hash(&b) & HALF_MASK
    }

    /// The keyed permutation of `[0, 2^48)`.
    pub fn permute(&self, x: u64) -> u64 {
        let (mut l, mut r) = ((x >> HALF_BITS) & HALF_MASK, x & HALF_MASK);
        for i in 0..ROUNDS {
            (l, r) = (r, l ^ self.round(i, r));
        }
        (l << HALF_BITS) | r
    }

    /// The inverse of [`KeyGen::permute`].
    pub fn invert(&self, y: u64) -> u64 {
        let (mut l, mut r) = ((y >> HALF_BITS) & HALF_MASK, y & HALF_MASK);
        for i in (0..ROUNDS).rev() {
            (l, r) = (r ^ self.round(i, l), l);
        }
        (l << HALF_BITS) | r
    }

    /// Counter value the next registration will use.
    pub fn counter(&self) -> u64 {
        self.counter
    }

    /// The next nonzero generation, advancing the counter; None once all
    /// 2^48 counter values are used.
    pub fn next_gen(&mut self) -> Option<u64> {
        while self.counter < GEN_SPACE {
            let g = self.permute(self.counter);
            self.counter += 1;
            if g != 0 {
                return Some(g);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    #[test]
    fn permutation_of_a_small_range_has_no_collision() {
        let g = KeyGen::with_secret(1, 2, 0);
        let mut seen = HashSet::new();
        for x in 0..200_000u64 {
            let y = g.permute(x);
            assert!(y < GEN_SPACE);
            assert!(seen.insert(y), "collision at {x}");
        }
    }

    #[test]
    fn zero_generation_is_skipped() {
        let g = KeyGen::with_secret(7, 9, 0);
        let z = g.invert(0);
        assert_eq!(g.permute(z), 0);
        let mut k = KeyGen::with_secret(7, 9, z);
        let next = k.next_gen().unwrap();
        assert_eq!(next, g.permute(z + 1));
        assert_ne!(next, 0);
        assert_eq!(k.counter(), z + 2);
    }

    #[test]
    fn exhausted_counter_gives_no_generation() {
        let mut k = KeyGen::with_secret(3, 4, GEN_SPACE - 1);
        if k.permute(GEN_SPACE - 1) != 0 {
            assert!(k.next_gen().is_some());
        }
        assert_eq!(k.next_gen(), None);
        assert_eq!(k.next_gen(), None);
    }

    #[test]
    fn secrets_differ_per_generator() {
        let a = KeyGen::from_os_rng();
        let b = KeyGen::from_os_rng();
        let same = (0..64).filter(|&x| a.permute(x) == b.permute(x)).count();
        assert!(same < 2, "two OS secrets gave the same permutation");
    }

    proptest! {
        #[test]
        fn invert_undoes_permute(k0: u64, k1: u64, x in 0..GEN_SPACE) {
            let g = KeyGen::with_secret(k0, k1, 0);
            prop_assert_eq!(g.invert(g.permute(x)), x);
        }
    }
}

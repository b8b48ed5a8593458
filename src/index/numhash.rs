//! A fast hasher for the maps keyed by session numbers and seqs on the append and recovery
//! paths (the index batch's runs and squashing, the committer's pending events, the registry).
//!
//! The keys are integers the store assigns (session numbers, seqs), never text a caller
//! chooses, so the DoS resistance of the standard SipHash buys nothing there and costs about
//! a hundred instructions per lookup. This is the multiply-rotate hash of `rustc-hash`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` keyed by store-assigned integers.
pub(crate) type NumMap<K, V> = HashMap<K, V, BuildHasherDefault<NumHasher>>;

/// The hasher of [`NumMap`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct NumHasher {
    hash: u64,
}

const K: u64 = 0xf135_7aea_2e62_a9c5;

impl NumHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = self.hash.wrapping_add(word).wrapping_mul(K);
    }
}

impl Hasher for NumHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // The table takes its bucket from the low bits and its tag from the top seven.
        self.hash.rotate_left(26)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_spread_and_round_trip() {
        let mut m: NumMap<(u64, u64), u64> = NumMap::default();
        for s in 0..50u64 {
            for q in 0..200u64 {
                m.insert((s, q), s * 1000 + q);
            }
        }
        assert_eq!(m.len(), 10_000);
        assert_eq!(m.get(&(7, 123)), Some(&7123));
        assert_eq!(m.remove(&(49, 199)), Some(49199));
        assert_eq!(m.get(&(49, 199)), None);
    }
}

//! A fast, non-cryptographic hasher for integer keys (addresses, ids).
//!
//! Keys here come from the file, so in principle an adversary could craft
//! collisions; the cost is bounded by the input size (quadratic in the
//! worst case on one bucket) and no secret is involved, which is acceptable
//! for a reader whose inputs are the user's own dumps. SipHash would cost
//! 2-3× more on the replay's hot maps.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-fold per word (as in foldhash): the 128-bit product's halves
/// are xored, so high bits reach the low bits that pick a bucket. Plain
/// FxHash leaves 512-aligned addresses with nine zero low bits.
#[derive(Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        let m = ((self.hash ^ word) as u128).wrapping_mul(SEED as u128);
        self.hash = (m as u64) ^ ((m >> 64) as u64);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            self.add(u64::from_le_bytes(a));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut a = [0u8; 8];
            a[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(a));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
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
        self.hash
    }
}

pub type FxBuild = BuildHasherDefault<FxHasher>;
pub type FxHashMap<K, V> = HashMap<K, V, FxBuild>;
pub type FxHashSet<K> = HashSet<K, FxBuild>;

/// The hash of a sequence of words (for content keys built on the fly).
#[inline]
pub fn hash_u64s(words: impl Iterator<Item = u64>) -> u64 {
    let mut h = FxHasher::default();
    let mut n = 0u64;
    for w in words {
        h.add(w);
        n += 1;
    }
    h.add(n);
    h.hash
}

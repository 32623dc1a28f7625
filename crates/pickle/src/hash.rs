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

/// The hash of a sequence of words (for content keys built on the fly),
/// each item of `items` read as a word by `word`.
///
/// Four independent lanes: one lane's multiply waits for the previous one,
/// so a single chain costs a multiply's latency per word, and the frames
/// lists hashed here are tens of words each, a million times in a big file.
#[inline]
pub fn hash_words<T>(items: &[T], word: impl Fn(&T) -> u64) -> u64 {
    let mut lanes = [
        FxHasher { hash: 0 },
        FxHasher { hash: 1 },
        FxHasher { hash: 2 },
        FxHasher { hash: 3 },
    ];
    let mut quads = items.chunks_exact(4);
    for q in &mut quads {
        lanes[0].add(word(&q[0]));
        lanes[1].add(word(&q[1]));
        lanes[2].add(word(&q[2]));
        lanes[3].add(word(&q[3]));
    }
    for (lane, w) in lanes.iter_mut().zip(quads.remainder()) {
        lane.add(word(w));
    }
    let mut h = FxHasher::default();
    for lane in lanes {
        h.add(lane.hash);
    }
    h.add(items.len() as u64);
    h.hash
}

#[cfg(test)]
mod tests {
    use super::hash_words;

    #[test]
    fn order_length_and_content_change_the_hash() {
        let id = |w: &u64| *w;
        let base: Vec<u64> = (1..=9).collect();
        let h = hash_words(&base, id);
        assert_eq!(h, hash_words(&base.clone(), id));
        let mut swapped = base.clone();
        swapped.swap(0, 4); // same lane
        assert_ne!(h, hash_words(&swapped, id));
        let mut swapped = base.clone();
        swapped.swap(0, 1); // different lanes
        assert_ne!(h, hash_words(&swapped, id));
        assert_ne!(h, hash_words(&base[..8], id));
        let mut padded = base.clone();
        padded.push(0);
        assert_ne!(h, hash_words(&padded, id));
        assert_ne!(hash_words::<u64>(&[], id), hash_words(&[0], id));
    }
}

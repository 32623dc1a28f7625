//! The simulated model (a GPT-style decoder trained with AdamW), sized so
//! that a given number of iterations produces about a given number of trace
//! entries, and the small deterministic random generator behind every
//! choice.

/// SplitMix64: tiny, fast and good enough for picking sizes and delays.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x6a09_e667_f3bc_c909)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `lo..hi` (`lo < hi`).
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }

    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// Shapes of the model and of its batches.
#[derive(Clone, Debug)]
pub(crate) struct Model {
    /// Transformer blocks.
    pub blocks: u32,
    /// Micro-batches per optimizer step (gradient accumulation).
    pub micro: u32,
    pub batch: u64,
    /// Longest sequence; each micro-batch is padded to a length between
    /// three quarters of it and it.
    pub seq: u64,
    pub d: u64,
    pub heads: u64,
    pub vocab: u64,
    /// Bytes per activation element (2 under autocast, 4 otherwise).
    pub elem: u64,
}

/// Approximate entries per block and micro-batch (20 forward tensors, 14
/// backward temporaries, 12 gradients; three entries per tensor), per
/// micro-batch outside the blocks, and per parameter and step.
const PER_BLOCK: u64 = 138;
const PER_MICRO: u64 = 48;
const PER_PARAM: u64 = 5;
/// Activation budget of one micro-batch, all blocks together.
const ACTIVATION_BUDGET: u64 = 20 << 30;

impl Model {
    /// Sizes a model whose `iterations` steps take about `entries` entries.
    pub(crate) fn for_entries(entries: u64, iterations: u32, rng: &mut Rng) -> Model {
        let per_iter = (entries / iterations as u64).max(1);
        let blocks = (per_iter / 900).clamp(1, 48);
        let params = Model::param_count(blocks as u32) as u64;
        let per_micro = PER_BLOCK * blocks + PER_MICRO;
        let micro = per_iter
            .saturating_sub(PER_PARAM * params)
            .div_ceil(per_micro)
            .max(1);
        let d = rng.pick(&[512, 768, 1024]);
        let elem = rng.pick(&[2, 4]);
        let mut model = Model {
            blocks: blocks as u32,
            micro: micro.min(u32::MAX as u64) as u32,
            batch: 1,
            seq: 128,
            d,
            heads: d / 64,
            vocab: rng.pick(&[50257, 32000, 50304]),
            elem,
        };
        // The largest batch shape whose activations fit the budget.
        let shapes = [
            (8, 1024),
            (4, 1024),
            (8, 512),
            (4, 512),
            (2, 512),
            (4, 256),
            (2, 256),
            (1, 256),
            (1, 128),
        ];
        let start = rng.below(3) as usize;
        for &(batch, seq) in &shapes[start..] {
            (model.batch, model.seq) = (batch, seq);
            if model.activation_bytes(seq) * blocks <= ACTIVATION_BUDGET {
                break;
            }
        }
        model
    }

    /// Parameters: token and position embeddings, 12 per block, final norm.
    pub(crate) fn param_count(blocks: u32) -> usize {
        2 + 12 * blocks as usize + 2
    }

    /// Parameter sizes in bytes (fp32), in allocation order.
    pub(crate) fn param_sizes(&self) -> Vec<u64> {
        let (d, f) = (self.d * 4, self.d * 16);
        let mut out = vec![self.vocab * d, self.seq * d];
        for _ in 0..self.blocks {
            out.extend([
                d,
                d,
                3 * d * self.d,
                3 * d,
                d * self.d,
                d,
                d,
                d,
                f * self.d,
                f,
                f * self.d,
                d,
            ]);
        }
        out.extend([d, d]);
        out
    }

    /// Bytes one block keeps for backward at sequence length `seq`.
    pub(crate) fn activation_bytes(&self, seq: u64) -> u64 {
        let bsd = self.batch * seq * self.d * self.elem;
        let bss = self.batch * self.heads * seq * seq * self.elem;
        3 * bss + bss / self.elem + 16 * bsd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_in_range() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            let x = a.range(10, 20);
            assert_eq!(x, b.range(10, 20));
            assert!((10..20).contains(&x));
        }
    }

    #[test]
    fn models_scale_with_entries() {
        let small = Model::for_entries(2_000, 10, &mut Rng::new(1));
        assert_eq!((small.blocks, small.micro), (1, 1));
        let big = Model::for_entries(1_000_000, 10, &mut Rng::new(1));
        assert_eq!(big.blocks, 48);
        assert!(big.micro >= 10, "{big:?}");
        assert!(big.activation_bytes(big.seq) * 48 <= ACTIVATION_BUDGET);
        assert_eq!(big.param_sizes().len(), Model::param_count(48));
    }
}

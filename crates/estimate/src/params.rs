//! Parameter counts: from the architecture (with a breakdown), from a
//! number people write (`1.5e9`, `1.5B`, `350M`), and the shapes behind
//! them (for Adafactor's factored states and LoRA adapters).

use serde::Serialize;

use crate::config::{MlpKind, ModelConfig};

/// Where the parameters of a model are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ParamBreakdown {
    /// Token embeddings: vocab × hidden.
    pub embeddings: u64,
    /// Learned position embeddings: positions × hidden (0 with RoPE etc.).
    pub position_embeddings: u64,
    /// All layers' attention projections q, k, v, o with their biases.
    pub attention: u64,
    /// All layers' MLP projections with their biases.
    pub mlp: u64,
    /// All layers' norms and the final norm.
    pub norms: u64,
    /// The output projection (0 when tied to the embeddings).
    pub lm_head: u64,
    /// One transformer layer: attention + MLP + its norms.
    pub per_layer: u64,
    /// Everything.
    pub total: u64,
}

/// One kind of weight tensor: `count` tensors of `rows` × `cols`
/// (`rows` = 1 for vectors: biases and norm weights).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub rows: u64,
    pub cols: u64,
    pub count: u64,
}

impl Shape {
    fn matrix(rows: u64, cols: u64, count: u64) -> Self {
        Shape { rows, cols, count }
    }
    fn vector(len: u64, count: u64) -> Self {
        Shape {
            rows: 1,
            cols: len,
            count,
        }
    }
    /// Parameters in all `count` tensors.
    pub fn params(&self) -> u64 {
        self.rows * self.cols * self.count
    }
}

/// The weight tensors of one transformer layer's attention: q (h → heads·d),
/// k and v (h → kv_heads·d), o (heads·d → h), and the biases the config has.
fn attention_shapes(c: &ModelConfig) -> Vec<Shape> {
    let (h, q, kv) = (c.hidden_size, c.q_dim(), c.kv_dim());
    let mut s = vec![
        Shape::matrix(h, q, 1),
        Shape::matrix(h, kv, 2),
        Shape::matrix(q, h, 1),
    ];
    if c.qkv_bias {
        s.push(Shape::vector(q, 1));
        s.push(Shape::vector(kv, 2));
    }
    if c.o_bias {
        s.push(Shape::vector(h, 1));
    }
    s
}

/// One layer's MLP: gated (gate and up h → ff, down ff → h) or standard
/// (up and down), with biases when the config has them.
fn mlp_shapes(c: &ModelConfig) -> Vec<Shape> {
    let (h, ff) = (c.hidden_size, c.intermediate_size);
    let ups = match c.mlp {
        MlpKind::Gated => 2,
        MlpKind::Standard => 1,
    };
    let mut s = vec![Shape::matrix(h, ff, ups), Shape::matrix(ff, h, 1)];
    if c.mlp_bias {
        s.push(Shape::vector(ff, ups));
        s.push(Shape::vector(h, 1));
    }
    s
}

/// Every weight tensor of the model, grouped by kind (per-layer kinds with
/// `count` multiplied by the layer count).
pub fn shapes(c: &ModelConfig) -> Vec<Shape> {
    let (h, l) = (c.hidden_size, c.num_layers);
    let mut s = vec![Shape::matrix(c.vocab_size, h, 1)];
    if c.learned_positions {
        s.push(Shape::matrix(c.max_positions.unwrap_or(0), h, 1));
    }
    for x in attention_shapes(c).into_iter().chain(mlp_shapes(c)) {
        s.push(Shape {
            count: x.count * l,
            ..x
        });
    }
    // Two norms per layer (before attention and before the MLP), one final.
    s.push(Shape::vector(h, c.norm.vectors() * (2 * l + 1)));
    if !c.tie_word_embeddings {
        s.push(Shape::matrix(h, c.vocab_size, 1));
    }
    s
}

/// Count the parameters of `c`, by part.
pub fn count_params(c: &ModelConfig) -> ParamBreakdown {
    let h = c.hidden_size;
    let l = c.num_layers;
    let sum = |v: Vec<Shape>| v.iter().map(Shape::params).sum::<u64>();
    let attention_layer = sum(attention_shapes(c));
    let mlp_layer = sum(mlp_shapes(c));
    let norms_layer = 2 * c.norm.vectors() * h;
    let embeddings = c.vocab_size * h;
    let position_embeddings = if c.learned_positions {
        c.max_positions.unwrap_or(0) * h
    } else {
        0
    };
    let lm_head = if c.tie_word_embeddings {
        0
    } else {
        c.vocab_size * h
    };
    let per_layer = attention_layer + mlp_layer + norms_layer;
    let norms = norms_layer * l + c.norm.vectors() * h;
    let total = embeddings + position_embeddings + per_layer * l + c.norm.vectors() * h + lm_head;
    debug_assert_eq!(total, sum(shapes(c)));
    ParamBreakdown {
        embeddings,
        position_embeddings,
        attention: attention_layer * l,
        mlp: mlp_layer * l,
        norms,
        lm_head,
        per_layer,
        total,
    }
}

/// The LoRA adapters on q, k, v and o of every layer at rank `r`: for a
/// matrix `in` → `out`, A is r × in and B is out × r, r·(in + out)
/// parameters.
pub fn lora_shapes(c: &ModelConfig, r: u64) -> Vec<Shape> {
    let (h, q, kv, l) = (c.hidden_size, c.q_dim(), c.kv_dim(), c.num_layers);
    let mut s = Vec::new();
    for (inp, out, n) in [(h, q, 1), (h, kv, 2), (q, h, 1)] {
        s.push(Shape::matrix(r, inp, n * l));
        s.push(Shape::matrix(out, r, n * l));
    }
    s
}

/// Trainable parameters of LoRA at rank `r` on q, k, v, o.
pub fn lora_params(c: &ModelConfig, r: u64) -> u64 {
    lora_shapes(c, r).iter().map(Shape::params).sum()
}

/// Values Adafactor keeps for these tensors: rows + cols for each matrix
/// (the factored second moment), the full size for each vector (no
/// first moment, as in Adafactor's default `beta1 = None`).
pub fn adafactor_values(shapes: &[Shape]) -> u64 {
    shapes
        .iter()
        .map(|s| {
            if s.rows == 1 || s.cols == 1 {
                s.rows * s.cols * s.count
            } else {
                (s.rows + s.cols) * s.count
            }
        })
        .sum()
}

/// Parse a parameter count: `124439808`, `1.5e9`, `1.5B`, `350M`, `7b`,
/// `120K`, `1T`, `1_000_000` (suffixes are decimal: K = 1e3, M = 1e6,
/// B or G = 1e9, T = 1e12).
pub fn parse_param_count(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let err = || {
        format!("expected a parameter count such as 1.5e9, 1.5B, 350M or 124439808, found {s:?}")
    };
    let (num, mult) = match t.char_indices().last() {
        Some((i, ch)) if ch.is_ascii_alphabetic() && !t[..i].ends_with(['e', 'E']) => {
            let mult = match ch.to_ascii_lowercase() {
                'k' => 1e3,
                'm' => 1e6,
                'b' | 'g' => 1e9,
                't' => 1e12,
                _ => return Err(err()),
            };
            (&t[..i], mult)
        }
        _ => (t.as_str(), 1.0),
    };
    let v: f64 = num.trim().parse().map_err(|_| err())?;
    let n = v * mult;
    if !n.is_finite() || !(1.0..=1e16).contains(&n) {
        return Err(format!("parameter count out of range: {s:?}"));
    }
    Ok(n.round() as u64)
}

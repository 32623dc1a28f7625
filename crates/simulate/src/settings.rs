//! The allocator's settings (`PYTORCH_CUDA_ALLOC_CONF`) and the size
//! arithmetic that depends on them, as in `c10/cuda/CUDACachingAllocator.cpp`
//! (`round_size`, `get_allocation_size`) and `c10/core/AllocatorConfig.cpp`.

use serde::Serialize;

// The allocator's sizes, written once for every crate.
pub use vramscope_gpus::allocator::{
    LARGE_BUFFER, MIB, MIN_BLOCK, MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE,
};

/// Settings of the caching allocator. `Default` is PyTorch's default.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settings {
    /// `max_split_size_mb`, in bytes; `None`: unlimited (the default).
    pub max_split_size: Option<u64>,
    /// `max_non_split_rounding_mb`, in bytes (default 20 MiB): how much
    /// bigger than the request an oversize block may be and still be used.
    pub max_non_split_rounding: u64,
    /// `roundup_power2_divisions` per size bucket (1 MiB·2^i, 16 buckets);
    /// 0 or 1: no power-of-two rounding.
    pub roundup_divisions: [u32; 16],
    /// `garbage_collection_threshold` (0: off).
    pub garbage_collection_threshold: f64,
    /// `expandable_segments`.
    pub expandable_segments: bool,
    /// `torch.cuda.set_per_process_memory_fraction(f)`, which is not an
    /// allocator setting but decides whether `garbage_collection_threshold`
    /// does anything: written `per_process_memory_fraction:f` here.
    pub memory_fraction: Option<f64>,
    /// `kLargeBuffer` / `large_segment_size_mb`: segment size for requests
    /// between 1 and 10 MiB (default 20 MiB).
    pub large_segment_size: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_split_size: None,
            max_non_split_rounding: 20 * MIB,
            roundup_divisions: [0; 16],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            memory_fraction: None,
            large_segment_size: LARGE_BUFFER,
        }
    }
}

/// A setting that could not be read.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[error("allocator setting {key:?}: {message}")]
pub struct SettingError {
    pub key: String,
    pub message: String,
}

impl Settings {
    /// The settings a snapshot was recorded with (`allocator_settings`), the
    /// raw `PYTORCH_CUDA_ALLOC_CONF` string first and the parsed fields over it.
    pub fn from_recorded(m: &serde_json::Map<String, serde_json::Value>) -> Settings {
        let mut s = Settings::default();
        if let Some(raw) = m.get("PYTORCH_CUDA_ALLOC_CONF").and_then(|v| v.as_str()) {
            let _ = s.apply(raw);
        }
        if let Some(v) = m.get("max_split_size").and_then(|v| v.as_i64()) {
            s.max_split_size = (v > 0).then_some(v as u64);
        }
        if let Some(v) = m
            .get("garbage_collection_threshold")
            .and_then(|v| v.as_f64())
        {
            s.garbage_collection_threshold = v;
        }
        if let Some(v) = m.get("expandable_segments").and_then(|v| v.as_bool()) {
            s.expandable_segments = v;
        }
        if let Some(t) = m
            .get("roundup_power2_divisions")
            .and_then(|v| v.as_object())
        {
            // Keyed by the bucket's size in MiB: "1", "2", ..., "32768".
            for (k, v) in t {
                if let (Ok(mb), Some(d)) = (k.parse::<u64>(), v.as_u64()) {
                    if mb.is_power_of_two() && mb.trailing_zeros() < 16 {
                        s.roundup_divisions[mb.trailing_zeros() as usize] = d as u32;
                    }
                }
            }
        }
        s
    }

    /// Apply `key:value,key:value` (the `PYTORCH_CUDA_ALLOC_CONF` syntax).
    pub fn apply(&mut self, conf: &str) -> Result<(), SettingError> {
        for item in conf.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item.split_once(':').ok_or_else(|| SettingError {
                key: item.into(),
                message: "expected key:value".into(),
            })?;
            let err = |m: &str| SettingError {
                key: key.into(),
                message: format!("{m}, found {value:?}"),
            };
            let mb = || {
                value
                    .trim()
                    .parse::<f64>()
                    .map_err(|_| err("expected a number of MiB"))
            };
            match key.trim() {
                "max_split_size_mb" => {
                    let v = mb()?;
                    // PyTorch raises values below 20 MB to its minimum.
                    self.max_split_size = Some(((v.max(20.0)) * MIB as f64) as u64);
                }
                "max_non_split_rounding_mb" => {
                    self.max_non_split_rounding = (mb()? * MIB as f64) as u64
                }
                "large_segment_size_mb" => self.large_segment_size = (mb()? * MIB as f64) as u64,
                "garbage_collection_threshold" => {
                    let v: f64 = value
                        .trim()
                        .parse()
                        .map_err(|_| err("expected a fraction"))?;
                    if !(0.0..1.0).contains(&v) || v == 0.0 {
                        return Err(err("expected a fraction between 0 and 1"));
                    }
                    self.garbage_collection_threshold = v;
                }
                "per_process_memory_fraction" => {
                    let v: f64 = value
                        .trim()
                        .parse()
                        .map_err(|_| err("expected a fraction"))?;
                    if !(v > 0.0 && v <= 1.0) {
                        return Err(err("expected a fraction above 0, at most 1"));
                    }
                    self.memory_fraction = Some(v);
                }
                "expandable_segments" => {
                    self.expandable_segments = match value.trim() {
                        "True" | "true" | "1" => true,
                        "False" | "false" | "0" => false,
                        _ => return Err(err("expected True or False")),
                    }
                }
                "roundup_power2_divisions" => self.apply_divisions(value).map_err(|m| err(&m))?,
                // Settings that do not change what is reserved.
                "backend"
                | "pinned_num_register_threads"
                | "release_lock_on_cudamalloc"
                | "pinned_use_cuda_host_register" => {}
                other => {
                    return Err(SettingError {
                        key: other.into(),
                        message: "not a caching allocator setting this model knows".into(),
                    })
                }
            }
        }
        Ok(())
    }

    /// `roundup_power2_divisions:4` (every bucket) or `[256:1,512:2,>:4]`.
    fn apply_divisions(&mut self, value: &str) -> Result<(), String> {
        let v = value.trim();
        if let Ok(d) = v.parse::<u32>() {
            self.roundup_divisions = [d; 16];
            return Ok(());
        }
        let inner = v
            .strip_prefix('[')
            .and_then(|x| x.strip_suffix(']'))
            .ok_or("expected a number or [size:divisions,...]")?;
        let mut last = 0usize;
        for part in inner.split(';').flat_map(|p| p.split(',')) {
            let (k, d) = part.split_once(':').ok_or("expected size:divisions")?;
            let d: u32 = d.trim().parse().map_err(|_| "divisions must be a number")?;
            if k.trim() == ">" {
                for x in &mut self.roundup_divisions[last..] {
                    *x = d;
                }
            } else {
                let mb: u64 = k
                    .trim()
                    .parse()
                    .map_err(|_| "size must be a number of MiB")?;
                let i = (63 - mb.max(1).leading_zeros()) as usize;
                let i = i.min(15);
                self.roundup_divisions[i] = d;
                last = i + 1;
            }
        }
        Ok(())
    }

    /// `round_size`: the block size a request of `size` bytes gets.
    pub fn round_size(&self, size: u64) -> u64 {
        if size < MIN_BLOCK {
            return MIN_BLOCK;
        }
        // roundup_power2_divisions(size): the bucket of floor(log2(size)) - 20.
        let log = 63 - size.leading_zeros() as i64;
        let bucket = (log - 20).clamp(0, 15) as usize;
        let divisions = self.roundup_divisions[bucket] as u64;
        if divisions > 1 && size > MIN_BLOCK * divisions {
            roundup_power2_next_division(size, divisions)
        } else {
            size.div_ceil(MIN_BLOCK) * MIN_BLOCK
        }
    }

    /// `get_allocation_size`: the segment a new block of `size` bytes needs.
    pub fn allocation_size(&self, size: u64) -> u64 {
        if size <= SMALL_SIZE {
            SMALL_BUFFER
        } else if size < MIN_LARGE_ALLOC {
            self.large_segment_size
        } else {
            size.div_ceil(ROUND_LARGE) * ROUND_LARGE
        }
    }

    /// The pool a rounded request uses.
    pub fn is_small(&self, size: u64) -> bool {
        vramscope_gpus::allocator::is_small(size)
    }
}

/// `roundup_power2_next_division`: powers of two stay; others round up to
/// the next of `divisions` equal steps between two powers of two.
fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = (floor / divisions).max(1);
    size.div_ceil(step) * step
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_and_segment_sizes() {
        let s = Settings::default();
        assert_eq!(s.round_size(1), 512);
        assert_eq!(s.round_size(513), 1024);
        assert_eq!(s.round_size(MIB + 1), MIB + 512);
        assert_eq!(s.allocation_size(512), 2 * MIB);
        assert_eq!(s.allocation_size(MIB + 512), 20 * MIB);
        assert_eq!(s.allocation_size(10 * MIB), 10 * MIB);
        assert_eq!(s.allocation_size(10 * MIB + 1), 12 * MIB);
        let mut p = Settings::default();
        p.apply("roundup_power2_divisions:4").expect("valid");
        // 1.2 GiB lies between 1 and 2 GiB: steps of 256 MiB.
        assert_eq!(p.round_size(1229 * MIB), 1280 * MIB);
        assert_eq!(p.round_size(1024 * MIB), 1024 * MIB);
        p.apply("max_split_size_mb:128,expandable_segments:True")
            .expect("valid");
        assert_eq!(p.max_split_size, Some(128 * MIB));
        assert!(p.expandable_segments);
        assert!(p.apply("bogus:1").is_err());
        assert!(p.apply("garbage_collection_threshold:1.5").is_err());
    }
}

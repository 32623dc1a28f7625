//! GPUs by name: the memory PyTorch can have on one, for `--gpu`.
//!
//! `torch.cuda.get_device_properties(0).total_memory` as measured on the
//! project's GPUs (tests/fixtures/gpu), and for other names the memory in
//! the name ("A100-40GB") as that many GiB less the share the measured H100
//! 80GB keeps for itself (79.18 of 80 GiB). The same table as the Python
//! estimate's (`python/vramscope/_cuda_trace.py`, `MEASURED_TOTAL`).

use crate::fit::DEFAULT_OUTSIDE;

/// Measured totals, bytes.
const MEASURED_TOTAL: [(&str, u64); 2] = [("H100-80GB", 85_017_493_504), ("H200", 150_109_880_320)];

/// What a named GPU gives PyTorch.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuMemory {
    /// The device's total memory, bytes.
    pub total: u64,
    /// What the caching allocator can have: the total less the memory the
    /// process holds outside it (the CUDA context, [`DEFAULT_OUTSIDE`]).
    pub capacity: u64,
    /// Where the total comes from, in a few words.
    pub source: String,
}

/// The memory of the GPU `name` (`"H100-80GB"`, `"NVIDIA H200"`,
/// `"A100-40GB"`), or why the name gives none.
pub fn gpu_memory(name: &str) -> Result<GpuMemory, String> {
    let key = name
        .to_uppercase()
        .replace([' ', '_'], "-")
        .replace("NVIDIA-", "");
    let key = key.trim_matches('-');
    let measured = MEASURED_TOTAL.iter().find(|(n, _)| {
        key == *n || (*n == "H100-80GB" && (key == "H100" || key == "H100-80GB-HBM3"))
    });
    let (total, source) = if let Some((n, t)) = measured {
        (*t, format!("measured on an {n}"))
    } else {
        let gb = key
            .split(|c: char| !c.is_ascii_alphanumeric())
            .find_map(|part| part.strip_suffix("GB").and_then(|d| d.parse::<u64>().ok()))
            .ok_or_else(|| {
                format!("the name {name:?} gives no memory size: use --capacity, or a name with one (A100-40GB)")
            })?;
        let h100 = MEASURED_TOTAL[0].1 as f64 / (80u64 << 30) as f64;
        (
            ((gb << 30) as f64 * h100) as u64,
            format!("{gb} GiB from the name, less what the H100 80GB keeps"),
        )
    };
    Ok(GpuMemory {
        total,
        capacity: total.saturating_sub(DEFAULT_OUTSIDE),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_give_the_measured_or_the_named_memory() {
        let h100 = gpu_memory("NVIDIA H100 80GB HBM3").unwrap();
        assert_eq!(h100.total, 85_017_493_504);
        assert_eq!(h100.capacity, 85_017_493_504 - (768 << 20));
        assert_eq!(gpu_memory("h200").unwrap().total, 150_109_880_320);
        // 40 GiB scaled by the H100's share: 42.5 GB.
        let a100 = gpu_memory("A100-40GB").unwrap();
        assert_eq!(a100.total, 42_508_746_752);
        assert!(gpu_memory("RTX").unwrap_err().contains("--capacity"));
    }
}

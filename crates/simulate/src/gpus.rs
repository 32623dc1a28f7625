//! GPUs by name: the memory PyTorch can have on one, for `--gpu`.
//!
//! The figures are `vramscope_gpus`' (the one table of GPUs, read by the
//! estimate in Python too); here they become what the caching allocator
//! can have: the total less what the process holds outside it.

use crate::fit::DEFAULT_OUTSIDE;

/// What a named GPU gives PyTorch.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuMemory {
    /// The device's total memory, bytes (`total_memory`).
    pub total: u64,
    /// What the caching allocator can have: the total less the memory the
    /// process holds outside it (the CUDA context, [`DEFAULT_OUTSIDE`]).
    pub capacity: u64,
    /// Where the total comes from, in a few words.
    pub source: String,
}

/// The memory of the GPU `name` (`"NVIDIA H100 80GB HBM3"` as
/// `torch.cuda.get_device_name()` gives it, or a short name such as
/// `"H100-80GB"`), or why the name gives none.
pub fn gpu_memory(name: &str) -> Result<GpuMemory, String> {
    let gpu = vramscope_gpus::find(name).map_err(|e| e.to_string())?;
    let total = gpu.memory().map_err(|e| e.to_string())?;
    Ok(GpuMemory {
        total,
        capacity: total.saturating_sub(DEFAULT_OUTSIDE),
        source: gpu.total_from(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_give_the_tables_memory_less_the_context() {
        let h100 = gpu_memory("NVIDIA H100 80GB HBM3").unwrap();
        assert_eq!(h100.total, 85_017_493_504);
        assert_eq!(h100.capacity, 85_017_493_504 - (768 << 20));
        assert_eq!(gpu_memory("h200").unwrap().total, 150_109_880_320);
        assert_eq!(gpu_memory("A100-40GB").unwrap().total, 42_298_834_944);
        // A family name, an unknown one: each says what to pass instead.
        assert!(gpu_memory("A100").unwrap_err().contains("--capacity"));
        assert!(gpu_memory("RTX").unwrap_err().contains("--capacity"));
    }
}

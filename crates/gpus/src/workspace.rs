//! The workspaces cuBLAS and cuBLASLt take from the caching allocator, as
//! `aten/src/ATen/cuda/CublasHandlePool.cpp` sizes them: what the
//! categories name as workspace in a recording and what the CUDA estimate
//! adds at a phase's first matmul (through `vramscope._native.workspace_sizes`).
//!
//! ```
//! use vramscope_gpus::workspace::{cublas_sizes, cublaslt_size, parse_workspace_config};
//!
//! assert_eq!(cublas_sizes(Some((9, 0)), None), vec![32 << 20]);       // Hopper
//! assert_eq!(cublas_sizes(Some((8, 0)), None), vec![8_519_680]);      // 4096 KiB × 2 + 16 KiB × 8
//! assert_eq!(cublas_sizes(None, Some(":4096:8")), vec![32 << 20]);    // CUBLAS_WORKSPACE_CONFIG
//! assert_eq!(parse_workspace_config(":16:8:4096:2"), Some(8_519_680));
//! assert_eq!(cublaslt_size(None), 1 << 20);
//! assert_eq!(cublaslt_size(Some("2048")), 2 << 20);                   // CUBLASLT_WORKSPACE_SIZE, KiB
//! ```

/// cuBLAS's default workspace on Hopper and Blackwell (compute capability 9+).
pub const CUBLAS_HOPPER: u64 = 32 << 20;
/// cuBLAS's default workspace on every other GPU (`4096 KiB × 2 + 16 KiB × 8`).
pub const CUBLAS_OTHER: u64 = 8_519_680;
/// cuBLASLt's default workspace (`CUBLASLT_WORKSPACE_SIZE`, 1024 KiB).
pub const CUBLASLT_DEFAULT: u64 = 1 << 20;

/// `CUBLAS_WORKSPACE_CONFIG` as `parseChosenWorkspaceSize` reads it: every
/// `:SIZE:COUNT` pair (SIZE in KiB) adds SIZE × COUNT; `None` when no pair
/// parses.
pub fn parse_workspace_config(v: &str) -> Option<u64> {
    let nums: Vec<&str> = v.split(':').collect();
    let mut total = 0u64;
    let mut found = false;
    let mut i = 1;
    while i + 1 < nums.len() {
        if let (Ok(size), Ok(count)) = (nums[i].parse::<u64>(), nums[i + 1].parse::<u64>()) {
            total = total.saturating_add(size.saturating_mul(1024).saturating_mul(count));
            found = true;
            i += 2;
        } else {
            i += 1;
        }
    }
    (found && total > 0).then_some(total)
}

/// The sizes cuBLAS's workspace can have: the configured one when
/// `CUBLAS_WORKSPACE_CONFIG` parses, else the default for the compute
/// capability, else (capability unknown) both defaults.
pub fn cublas_sizes(capability: Option<(u32, u32)>, config: Option<&str>) -> Vec<u64> {
    match (config.and_then(parse_workspace_config), capability) {
        (Some(n), _) => vec![n],
        (None, Some((major, _))) if major >= 9 => vec![CUBLAS_HOPPER],
        (None, Some(_)) => vec![CUBLAS_OTHER],
        (None, None) => vec![CUBLAS_HOPPER, CUBLAS_OTHER],
    }
}

/// cuBLASLt's workspace: `CUBLASLT_WORKSPACE_SIZE` (KiB) when set, else 1 MiB.
pub fn cublaslt_size(config: Option<&str>) -> u64 {
    config
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(CUBLASLT_DEFAULT, |kib| kib << 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_config_as_pytorch_reads_it() {
        assert_eq!(parse_workspace_config(":4096:8"), Some(32 << 20));
        assert_eq!(parse_workspace_config(":4096:2:16:8"), Some(8_519_680));
        assert_eq!(parse_workspace_config(":1024:2"), Some(2 << 20));
        assert_eq!(parse_workspace_config("nonsense"), None);
        assert_eq!(
            cublas_sizes(None, Some("nonsense")),
            vec![CUBLAS_HOPPER, CUBLAS_OTHER]
        );
        assert_eq!(cublaslt_size(Some(" 512 ")), 512 << 10);
        assert_eq!(cublaslt_size(Some("x")), CUBLASLT_DEFAULT);
    }
}

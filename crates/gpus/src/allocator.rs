//! The sizes PyTorch's CUDA caching allocator works in
//! (`c10/cuda/CUDACachingAllocator.cpp`), written once: the allocator
//! model replays with them, the analyses recognise its segments by them,
//! the readers lay out the blocks they build with them, and the Python
//! estimate asks for them through the native module
//! (`vramscope._native.allocator_facts()`).
//!
//! The settings that change some of them (`PYTORCH_CUDA_ALLOC_CONF`'s
//! `roundup_power2_divisions`, `large_segment_size_mb`) live with the model
//! (`vramscope_simulate::settings`); these are the defaults it starts from.
//!
//! ```
//! use vramscope_gpus::allocator::{block_size, is_small, segment_size, MIB};
//!
//! assert_eq!(block_size(1), 512);                 // kMinBlockSize
//! assert_eq!(block_size(1000), 1024);
//! assert!(is_small(MIB) && !is_small(MIB + 1));   // kSmallSize: "<=", 1 MiB
//! assert_eq!(segment_size(4096), 2 * MIB);        // kSmallBuffer
//! assert_eq!(segment_size(3 * MIB), 20 * MIB);    // kLargeBuffer
//! assert_eq!(segment_size(11 * MIB), 12 * MIB);   // kRoundLarge
//! ```

pub const MIB: u64 = 1 << 20;
/// `kMinBlockSize`: every block is a multiple of 512 bytes.
pub const MIN_BLOCK: u64 = 512;
/// `kSmallSize`: requests up to and including 1 MiB use the small pool.
pub const SMALL_SIZE: u64 = MIB;
/// `kSmallBuffer`: small-pool segments are 2 MiB.
pub const SMALL_BUFFER: u64 = 2 * MIB;
/// `kLargeBuffer`: requests between 1 and 10 MiB get a 20 MiB segment
/// (`large_segment_size_mb` changes it).
pub const LARGE_BUFFER: u64 = 20 * MIB;
/// `kMinLargeAlloc`: requests from 10 MiB get a segment of their own size.
pub const MIN_LARGE_ALLOC: u64 = 10 * MIB;
/// `kRoundLarge`: such segments are rounded up to 2 MiB.
pub const ROUND_LARGE: u64 = 2 * MIB;
/// Device allocations (`cudaMalloc`, the pages an expandable segment maps)
/// come in 2 MiB granules: what laying segments out by address rounds to.
pub const GRANULE: u64 = 2 * MIB;

/// The block a request of `size` bytes gets with the default settings
/// (`round_size` without `roundup_power2_divisions`).
pub fn block_size(size: u64) -> u64 {
    size.max(1).div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK)
}

/// Whether a (rounded) request of `size` bytes is served from the small pool.
pub fn is_small(size: u64) -> bool {
    size <= SMALL_SIZE
}

/// The segment a new block of `size` bytes needs with the default settings
/// (`get_allocation_size`).
pub fn segment_size(size: u64) -> u64 {
    if is_small(size) {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_segments_follow_the_allocator() {
        assert_eq!(block_size(0), 512);
        assert_eq!(block_size(512), 512);
        assert_eq!(block_size(513), 1024);
        assert_eq!(segment_size(SMALL_SIZE), SMALL_BUFFER);
        assert_eq!(segment_size(SMALL_SIZE + 512), LARGE_BUFFER);
        assert_eq!(segment_size(MIN_LARGE_ALLOC - 512), LARGE_BUFFER);
        assert_eq!(segment_size(MIN_LARGE_ALLOC), MIN_LARGE_ALLOC);
        assert_eq!(segment_size(MIN_LARGE_ALLOC + 1), 12 * MIB);
    }
}

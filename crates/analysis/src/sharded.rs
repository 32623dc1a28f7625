//! Whether the program already shards its model or its optimizer state,
//! read from the frames of its stacks.
//!
//! pytorch/examples' FSDP2 example (`fully_shard` on every layer and the
//! root) was told to shard "the optimizer state over 2 ranks (ZeRO-1)"
//! with `ZeroRedundancyOptimizer`, and FSDP2 was tried on it again: its
//! state is its parameters' shards already. The frames that say so are
//! those of the allocations each library makes: FSDP2's all-gather buffers
//! (`torch/distributed/fsdp/_fully_shard/`), FSDP1's flat parameters
//! (`torch/distributed/fsdp/`), `ZeroRedundancyOptimizer`'s step
//! (`torch/distributed/optim/zero_redundancy_optimizer.py`), DeepSpeed's
//! ZeRO (`deepspeed/runtime/zero/`, stage 3's `partition_parameters.py`
//! and `stage3.py`).

use serde::Serialize;
use vramscope_snapshot::{FrameId, Snapshot};

/// What the program shards, and with what.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Sharded {
    /// `FSDP2's fully_shard`, `FSDP1's FullyShardedDataParallel`,
    /// `ZeroRedundancyOptimizer`, `DeepSpeed's ZeRO-3`, `DeepSpeed's ZeRO`.
    pub by: &'static str,
    /// Whether its parameters (and with them their gradients) are sharded.
    pub parameters: bool,
}

/// `None` where no frame of the recording is one of a sharding library's.
pub fn already_sharded(snap: &Snapshot) -> Option<Sharded> {
    let mut found: Option<Sharded> = None;
    for i in 0..snap.frames.len() {
        let f = snap.frames.get(FrameId(i as u32));
        let file = snap.str(f.filename).replace('\\', "/");
        let hit = if file.contains("torch/distributed/fsdp/_fully_shard/") {
            Some(Sharded {
                by: "FSDP2's fully_shard",
                parameters: true,
            })
        } else if file.contains("torch/distributed/fsdp/") {
            Some(Sharded {
                by: "FSDP1's FullyShardedDataParallel",
                parameters: true,
            })
        } else if file.contains("deepspeed/runtime/zero/partition_parameters.py")
            || file.contains("deepspeed/runtime/zero/stage3.py")
        {
            Some(Sharded {
                by: "DeepSpeed's ZeRO-3",
                parameters: true,
            })
        } else if file.contains("deepspeed/runtime/zero/") {
            Some(Sharded {
                by: "DeepSpeed's ZeRO",
                parameters: false,
            })
        } else if file.contains("torch/distributed/optim/zero_redundancy_optimizer.py") {
            Some(Sharded {
                by: "ZeroRedundancyOptimizer",
                parameters: false,
            })
        } else {
            None
        };
        // Parameters sharded is the stronger answer: kept once found.
        match (&found, hit) {
            (_, None) => {}
            (Some(s), Some(_)) if s.parameters => {}
            (_, Some(h)) => found = Some(h),
        }
    }
    found
}

"""What the recorders write alike: a live CPU block as a segment of its
own, the way PyTorch's snapshot lays out a segment (the CPU caches
nothing: each block is its own malloc)."""

from __future__ import annotations

from typing import Any, Dict

# ``kSmallSize``: the CUDA caching allocator serves requests up to and
# including 1 MiB from the small pool. Written here as well as in
# ``vramscope_gpus::allocator`` because the recorder runs without the native
# module (pure Python); a test checks the two agree.
SMALL_SIZE = 1 << 20


def cpu_segment(block: Dict[str, Any]) -> Dict[str, Any]:
    """One live CPU block as a segment of its own (a malloc, nothing cached)."""
    addr, size, frames = block["addr"], block["size"], block.get("frames", [])
    return {
        "device": 0,
        "address": addr,
        "total_size": size,
        "allocated_size": size,
        "active_size": size,
        "requested_size": size,
        "stream": 0,
        "segment_type": "small" if size <= SMALL_SIZE else "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": frames,
        "blocks": [
            {
                "address": addr,
                "size": size,
                "requested_size": size,
                "state": "active_allocated",
                "frames": frames,
            }
        ],
    }

"""What one live publication costs on CUDA, with a 100k-entry allocator
history, on a machine without a GPU (PyTorch's CUDA functions mocked).

PyTorch 2.10+'s ``memory_snapshot(mempool_id=None, include_traces=True)``
turns the whole allocator history into Python objects, every stack included,
unless ``include_traces=False``: on an H200 inside a 100k-entry recording
that took 167 ms against 0.46 ms (tests/fixtures/gpu/README.md), and
``vramscope.record(live=True)`` published every state that way (127 ms). The
mock builds the same Python objects PyTorch would (100k entries of 12
frames, 2,000 live blocks), so the two calls cost here what building them
costs in Python, and the state is taken the way the watcher takes it.

    python bench/bench_live_cuda.py [--entries 100000] [--blocks 2000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from vramscope._recording.recorders import cuda as _cuda  # noqa: E402


def fake_snapshot(entries: int, blocks: int):
    frames = [{"filename": f"/x/lib{i}.py", "line": i, "name": f"f{i}"} for i in range(12)]
    segs = [{"blocks": [{"state": "active_allocated", "address": i, "size": 4096, "requested_size": 4096, "frames": frames} for i in range(blocks)]}]

    def memory_snapshot(mempool_id=None, include_traces=True):
        if include_traces:
            # What PyTorch converts for the history: one dict per entry, each with its stack.
            _ = [{"action": "alloc", "addr": i, "size": 512, "stream": 0, "time_us": i, "frames": [dict(f) for f in frames]} for i in range(entries)]
        return segs

    return memory_snapshot


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--blocks", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    snap = fake_snapshot(a.entries, a.blocks)
    mod = SimpleNamespace(memory=SimpleNamespace(memory_snapshot=snap), is_initialized=lambda: True)

    def blocks_now(traceless: bool) -> float:
        t0 = time.perf_counter()
        segs = _cuda.segments_without_history(mod.memory.memory_snapshot) if traceless else mod.memory.memory_snapshot()
        n = sum(1 for s in segs for b in s["blocks"] if b["state"] == "active_allocated")
        assert n == a.blocks
        return time.perf_counter() - t0

    before = [blocks_now(False) for _ in range(a.repeats)]
    after = [blocks_now(True) for _ in range(a.repeats)]
    b, f = statistics.median(before), statistics.median(after)
    print(f"blocks from memory_snapshot(), {a.entries:,}-entry history, {a.blocks:,} live blocks (median of {a.repeats}):")
    print(f"  with the history (before):    {b * 1e3:8.2f} ms")
    print(f"  include_traces=False (now):   {f * 1e3:8.2f} ms   ({b / f:.0f}x less)")


if __name__ == "__main__":
    main()

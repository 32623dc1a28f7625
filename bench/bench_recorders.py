"""Cost of recording on CPU, dispatcher against profiler: training step time
of the small CNN and Transformer (python/tests/scripts/models.py) without
recording, recording with ``backend="dispatch"`` and with
``backend="profiler"``, in alternating rounds so drift cancels; then the cost
of a dump of a 100k-entry dispatch recording, which goes on recording.

    .venv/bin/python bench/bench_recorders.py [--steps 100] [--rounds 4] [--threads 1] [--batch 8]

Prints the median step time of each configuration and its ratio to the
unrecorded one, the dump's time, and the entries recorded after it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python" / "tests" / "scripts"))
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402

import models  # noqa: E402
from models import build, train_step  # noqa: E402

vr = importlib.import_module("vramscope.record")


def median_step(model, opt, batch, steps: int) -> float:
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        train_step(model, opt, batch)
        times.append(time.perf_counter() - t)
        vr.step()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=models.BATCH)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    models.BATCH = a.batch
    tmp = Path(tempfile.mkdtemp(prefix="bench-recorders-"))
    print(f"torch {torch.__version__}, {a.threads} thread(s), batch {a.batch}, {a.steps} steps x {a.rounds} rounds")
    for kind in ("cnn", "transformer"):
        model, opt, batch = build(kind)
        median_step(model, opt, batch, 20)  # warm-up
        results = {"none": [], "dispatch": [], "profiler": []}
        names = list(results)
        for r in range(a.rounds):
            order = names if r % 2 == 0 else names[::-1]
            for backend in order:
                if backend == "none":
                    results[backend].append(median_step(model, opt, batch, a.steps))
                    continue
                rec = vr.start(tmp / f"{kind}-{backend}.pickle", backend=backend, max_entries=100_000)
                try:
                    results[backend].append(median_step(model, opt, batch, a.steps))
                finally:
                    rec._end(pending=False, write=False)
        base = statistics.median(results["none"])
        line = f"{kind:12s} none {base * 1e3:7.3f} ms/step"
        for backend in ("dispatch", "profiler"):
            m = statistics.median(results[backend])
            line += f"   {backend} {m * 1e3:7.3f} ms ({m / base:.2f}x)"
        print(line)

    # A dump of 100k entries in the middle of a recording.
    model, opt, batch = build("transformer")
    path = tmp / "dump.pickle"
    rec = vr.start(path, backend="dispatch", max_entries=100_000)
    try:
        backend = rec._session.backend
        steps = 0
        while True:
            train_step(model, opt, batch)
            vr.step()
            steps += 1
            if steps % 10 == 0 and len(backend.entries()) >= 100_000:
                break
        t = time.perf_counter()
        vr.dump(path)
        dump_s = time.perf_counter() - t
        entries = backend.entries()
        n_allocs_before = sum(1 for e in entries if e["action"] == "alloc")
        stamp = time.time_ns() // 1000
        train_step(model, opt, batch)
        after = sum(1 for e in backend.entries() if e["action"] == "alloc" and e["time_us"] >= stamp)
    finally:
        rec._end(pending=False, write=False)
    size = os.path.getsize(path)
    print(f"dump of {len(entries):,} entries ({steps} steps, {n_allocs_before:,} allocs in the ring): {dump_s:.3f} s, {size / 2**20:.1f} MiB; "
          f"the step after it recorded {after} allocations (still recording: {after > 0})")


if __name__ == "__main__":
    main()

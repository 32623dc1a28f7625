"""Cost of recording on CPU, per backend: training step time of the small
CNN and Transformer (python/tests/scripts/models.py) without recording and
recording with ``backend="allocator"`` (the CPU default on Linux),
``"dispatch"`` and ``"profiler"``, in alternating rounds so drift cancels;
then the cost of a dump of a 100k-entry recording of each of the first two,
which goes on recording, and of a dump on the profiler's recorder (it ends
a profiler window and starts the next).

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
        results = {"none": [], "allocator": [], "dispatch": [], "profiler": []}
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
        for backend in ("allocator", "dispatch", "profiler"):
            m = statistics.median(results[backend])
            line += f"   {backend} {m * 1e3:7.3f} ms ({m / base:.2f}x)"
        print(line)

    for backend in ("allocator", "dispatch"):
        dump_cost(tmp, backend)
    profiler_dump_cost(tmp)


def entries_of(rec) -> list:
    """The trace entries a dump would write now."""
    trace = rec._session.backend.snapshot()["device_traces"][0]
    # The CPU allocator recorder's trace is native (written without a
    # Python object per entry): made into dicts only here.
    return trace.entries() if hasattr(trace, "entries") else trace


def dump_cost(tmp: Path, backend_name: str) -> None:
    """A dump of 100k entries in the middle of a recording."""
    model, opt, batch = build("transformer")
    path = tmp / f"dump-{backend_name}.pickle"
    rec = vr.start(path, backend=backend_name, max_entries=100_000)
    try:
        backend = rec._session.backend
        steps = 0
        while True:
            train_step(model, opt, batch)
            vr.step()
            steps += 1
            if steps % 10 == 0 and len(entries_of(rec)) >= 100_000:
                break
        t = time.perf_counter()
        vr.dump(path)
        dump_s = time.perf_counter() - t
        stamp = time.time_ns() // 1000
        train_step(model, opt, batch)
        after = sum(1 for e in entries_of(rec) if e["action"] == "alloc" and e["time_us"] >= stamp)
        entries = len(entries_of(rec))
    finally:
        rec._end(pending=False, write=False)
    del backend
    size = os.path.getsize(path)
    print(f"{backend_name:10s} dump of {entries:,} entries ({steps} steps): {dump_s:.3f} s, {size / 2**20:.1f} MiB; "
          f"the step after it recorded {after} allocations (still recording: {after > 0})")


def profiler_dump_cost(tmp: Path, dumps: int = 3, steps: int = 10) -> None:
    """A dump on the profiler's recorder ends a window and starts the next:
    its cost grows with what the window's Python tracer saw (the tagger's
    walk over Python's objects, run inside the window, once made every dump
    of this program seconds longer). The median of ``dumps`` dumps, each
    after ``steps`` steps, and the unrecorded steps' time for scale."""
    import torch.optim.swa_utils  # noqa: F401 - torch.optim imports it; an EMA class is always looked for

    model, opt, batch = build("transformer")
    t = time.perf_counter()
    for _ in range(steps):
        train_step(model, opt, batch)
    plain = time.perf_counter() - t
    path = tmp / "dump-profiler.pickle"
    rec = vr.start(path, backend="profiler")
    times = []
    try:
        for _ in range(dumps):
            for _ in range(steps):
                train_step(model, opt, batch)
                vr.step()
            t = time.perf_counter()
            vr.dump(path)
            times.append(time.perf_counter() - t)
    finally:
        rec._end(pending=False, write=False)
    print(f"profiler   dump after {steps} steps ({plain:.3f} s unrecorded): median {statistics.median(times):.3f} s of {dumps}")


if __name__ == "__main__":
    main()

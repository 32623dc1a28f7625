"""What a long CPU recording costs to keep and to write: the zoo's 4-layer
Hugging Face Llama trains under ``vramscope.record(backend="allocator")``
with the default history for ``--seconds``; then the snapshot is written
twice, one right after the other (each copies the events kept then):

1. as ``vramscope.record`` writes it: one trace entry per event, streamed by
   the native writer (``_files.write_atomic``);
2. the baseline: PyTorch's form (``segment_alloc`` + ``alloc``;
   ``free_requested`` + ``free_completed`` + ``segment_free``) as Python
   dicts, ``pickle.dump``-ed: what a recorder that builds the trace in
   Python writes.

For each: the time, the file's size, the memory the write added to the
program (its peak RSS, reset through ``/proc/self/clear_refs``), and the
time of ``vramscope summary --json`` on the file.

    .venv/bin/python bench/bench_cpu_history.py [--seconds 60]
"""

from __future__ import annotations

import argparse
import importlib
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python" / "tests" / "scripts"))
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402

import zoo  # noqa: E402

import vramscope  # noqa: E402
from vramscope import _native
from vramscope._recording import files as _files  # noqa: E402


def peak_rss_reset() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def pytorch_form(trace):
    out = []
    for e in trace:
        if e["action"] == "alloc":
            out += [dict(e, action="segment_alloc"), e]
        else:
            out += [dict(e, action=a) for a in ("free_requested", "free_completed", "segment_free")]
    return out


def measure(write, path: Path):
    peak_rss_reset()
    before = rss()
    t = time.perf_counter()
    write(path)
    took = time.perf_counter() - t
    added = peak_rss() - before
    t = time.perf_counter()
    subprocess.run([str(REPO / "target" / "release" / "vramscope"), "summary", str(path), "--json"], check=True, capture_output=True)
    summary = time.perf_counter() - t
    return took, path.stat().st_size, added, summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    args = ap.parse_args()
    torch.manual_seed(0)
    case = zoo.llama()
    model, (x,), (y,) = case.model, case.inputs, case.targets
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    out = Path(tempfile.mkdtemp(prefix="vramscope-bench-"))
    steps = 0
    start = time.perf_counter()
    with vramscope.record(out / "end.pickle", backend="allocator"):
        while time.perf_counter() - start < args.seconds:
            loss = case.loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            vramscope.step()
            steps += 1
        elapsed = time.perf_counter() - start
        backend = importlib.import_module("vramscope.record")._active.backend
        seen = _native.cpu_allocator_mark()
        print(f"{steps} steps in {elapsed:.1f} s: {seen:,} events ({seen / elapsed:,.0f}/s), the history keeps {backend.max_entries:,}")

        def native(p: Path) -> None:
            _files.write_atomic(str(p), backend.snapshot())

        def baseline(p: Path) -> None:
            snap = backend.snapshot()
            base = dict(snap, device_traces=[pytorch_form(snap["device_traces"][0].entries())])
            with open(p, "wb") as f:
                pickle.dump(base, f, protocol=pickle.DEFAULT_PROTOCOL)

        figures = [("native, one entry per event", measure(native, out / "native.pickle"))]
        figures.append(("pickle.dump, PyTorch form", measure(baseline, out / "python.pickle")))
    print(f"{'':28} {'write':>8} {'file':>10} {'added RSS':>10} {'summary':>8}")
    for name, (took, size, added, summary) in figures:
        print(f"{name:28} {took:7.2f}s {size / 2**20:8.1f}MiB {added / 2**20:8.0f}MiB {summary:7.2f}s")
    (_, n), (_, b) = figures
    print(f"baseline / native: write {b[0] / n[0]:.1f}x, file {b[1] / n[1]:.1f}x, summary {b[3] / n[3]:.1f}x")
    for p in out.iterdir():
        p.unlink()
    os.rmdir(out)


if __name__ == "__main__":
    main()

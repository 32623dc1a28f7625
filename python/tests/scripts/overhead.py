"""Cost of recording on the CPU path: training step time of the small CNN
with and without ``vramscope.record``.

Usage: ``python overhead.py [--steps 60] [--warmup 5] [--model cnn|transformer] [--every N]``

Prints the median step time without recording (measured before and after,
to expose drift), with recording, their ratio, the mean while recording
(which, unlike the median, includes periodic dumps), and the one-time costs:
the start and the dump at the end (the profiler's memory analysis, the
conversion and the pickle).
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from models import build, train_step  # noqa: E402

vr = importlib.import_module("vramscope.record")


def step_times(n: int, one_step: Callable[[], None]) -> List[float]:
    """Wall time of ``n`` calls, in seconds."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        one_step()
        out.append(time.perf_counter() - t)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=60, help="measured steps per phase (default 60)")
    p.add_argument("--warmup", type=int, default=5, help="unmeasured steps first (default 5)")
    p.add_argument("--model", choices=["cnn", "transformer"], default="cnn")
    p.add_argument("--every", type=int, default=0, help="periodic dump every N steps while recording (default 0: off)")
    a = p.parse_args()
    if torch.cuda.is_available():
        print("note: CUDA is available, so this measures the CUDA recorder, not the profiler path")

    model, opt, batch = build(a.model)

    def one_step() -> None:
        train_step(model, opt, batch)
        vr.step()  # a no-op when not recording: the same loop in both phases

    step_times(a.warmup, one_step)
    before = statistics.median(step_times(a.steps, one_step))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "overhead.pickle")
        t = time.perf_counter()
        rec = vr.start(out, every=a.every)
        started = time.perf_counter() - t
        step_times(a.warmup, one_step)
        times = step_times(a.steps, one_step)
        recorded, mean = statistics.median(times), statistics.fmean(times)
        t = time.perf_counter()
        rec.__exit__(None, None, None)
        dumped = time.perf_counter() - t
        size = os.path.getsize(out)
    after = statistics.median(step_times(a.steps, one_step))
    base = (before + after) / 2

    print(f"model {a.model}, batch 8, torch {torch.__version__}, {torch.get_num_threads()} threads, {a.steps} steps per phase")
    print(f"median step without recording: {before * 1e3:.2f} ms before, {after * 1e3:.2f} ms after")
    print(f"median step while recording:   {recorded * 1e3:.2f} ms" + (f" (dump every {a.every} steps)" if a.every else ""))
    print(f"ratio recorded / unrecorded:   {recorded / base:.2f}x (mean while recording {mean * 1e3:.2f} ms, {mean / base:.2f}x)")
    print(f"start {started:.2f} s, dump at the end {dumped:.2f} s for {a.warmup + a.steps} steps ({size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

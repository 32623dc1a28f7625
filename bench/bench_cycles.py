"""Overhead of the reference-cycle watcher on a training loop without cycles.

Runs the same CPU training loop (a 3-layer MLP, Adam, batch 64) with and
without ``vramscope.cycles.watch(device="any")``, alternating, and prints the
median time per run, the slowdown and the collections seen. The target is a
slowdown under 2%.

    python bench/bench_cycles.py [--steps 400] [--repeats 10]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from vramscope import cycles

OUT = Path(__file__).resolve().parent / "out"


def make():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    return model, opt, x, y


def run(steps: int, garbage: int = 0) -> tuple:
    model, opt, x, y = make()
    gen = [s["collections"] for s in gc.get_stats()]
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        for _ in range(garbage):  # cyclic garbage without tensors
            d: dict = {}
            d["self"] = d
    dt = time.perf_counter() - t0
    collections = sum(s["collections"] for s in gc.get_stats()) - sum(gen)
    return dt, collections


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--garbage", type=int, default=0, help="cyclic non-tensor objects made per step (collections with garbage)")
    a = ap.parse_args()
    torch.set_num_threads(1)  # steadier timings on a small machine
    run(50)  # warm-up
    off, on, coll = [], [], []

    def with_watcher() -> float:
        w = cycles.Watcher(device="any", html=False, warn=False, summary_at_exit=False).start()
        try:
            dt, c = run(a.steps, a.garbage)
        finally:
            w.stop()
        coll.append(c)
        return dt

    # Alternate the order (ABBA) so that drifts of the machine cancel out.
    for i in range(a.repeats):
        if i % 2 == 0:
            off.append(run(a.steps, a.garbage)[0])
            on.append(with_watcher())
        else:
            on.append(with_watcher())
            off.append(run(a.steps, a.garbage)[0])
    m_off, m_on = statistics.median(off), statistics.median(on)
    slowdown = (m_on / m_off - 1) * 100
    res = {
        "steps": a.steps,
        "garbage_per_step": a.garbage,
        "repeats": a.repeats,
        "median_s_without": round(m_off, 4),
        "median_s_with": round(m_on, 4),
        "slowdown_percent": round(slowdown, 2),
        "collections_per_run": statistics.median(coll),
        "target_percent": 2.0,
    }
    print(f"training loop, {a.steps} steps, {a.garbage} cyclic non-tensor objects per step, median of {a.repeats}:")
    print(f"  without watcher {m_off:.3f} s   with watcher {m_on:.3f} s   slowdown {slowdown:+.2f}% (target < 2%)")
    print(f"  garbage collections during a run: {res['collections_per_run']}")
    OUT.mkdir(exist_ok=True)
    (OUT / f"cycles_bench_g{a.garbage}.json").write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()

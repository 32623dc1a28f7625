"""Overhead of publishing the live state (``record(live=True)``) and of
``dump_at`` polling, on a CPU training loop.

Runs the same loop (a 4-layer MLP, Adam, batch 256: a few ms per step)
recorded three ways, alternating, in one process: ``record()``,
``record(live=True)`` with a viewer connected and reading every state, and
``record(dump_at=<far above>)`` (polling every 50 ms, never dumping). Prints
the median seconds per step of each, the slowdowns against plain recording
and what one publication cost (``publish_us``). The target: under 1% of
step time.

    python bench/bench_live.py [--steps 300] [--repeats 7] [--interval 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch
from torch import nn

import vramscope
from vramscope._recording.live import registry_dir

OUT = Path(__file__).resolve().parent / "out"


def make():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    return model, torch.optim.Adam(model.parameters()), torch.randn(256, 512), torch.randint(0, 10, (256,))


def train(model, opt, x, y, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        vramscope.step()
    return (time.perf_counter() - t0) / steps


class Viewer(threading.Thread):
    """Connects to this process's live socket and reads every state."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        entry = json.loads(Path(registry_dir(), f"{os.getpid()}.json").read_text())
        host, port = entry["address"].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.sendall(json.dumps({"token": entry["token"]}).encode() + b"\n")
        self.states = 0
        self.publish_us: list = []

    def run(self) -> None:
        for line in self.sock.makefile():
            st = json.loads(line)
            self.states += 1
            self.publish_us.append(st["publish_us"])


def paired(a: list, b: list) -> dict:
    r = sorted((x / y - 1) * 100 for x, y in zip(a, b))
    return {"median": round(statistics.median(r), 2), "min": round(r[0], 2), "max": round(r[-1], 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--interval", type=float, default=0.5)
    args = ap.parse_args()
    os.environ.setdefault("VRAMSCOPE_LIVE_DIR", tempfile.mkdtemp(prefix="vramscope-live-bench-"))
    model, opt, x, y = make()
    tmp = tempfile.mkdtemp(prefix="vramscope-bench-live-")
    train(model, opt, x, y, 20)  # warm up (Adam's state, the allocator's caches)
    times = {"record": [], "live": [], "dump_at": []}
    publish_us: list = []
    states = 0
    for _ in range(args.repeats):
        for kind in times:
            opts = {"live": True, "live_interval": args.interval} if kind == "live" else {"dump_at": "1000GiB"} if kind == "dump_at" else {}
            with vramscope.record(os.path.join(tmp, f"{kind}.pickle"), max_entries=20_000, **opts):
                viewer = None
                if kind == "live":
                    viewer = Viewer()
                    viewer.start()
                times[kind].append(train(model, opt, x, y, args.steps))
                if viewer is not None:
                    time.sleep(0.05)
                    states += viewer.states
                    publish_us += viewer.publish_us
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "steps": args.steps,
        "repeats": args.repeats,
        "interval_s": args.interval,
        "step_ms": {k: round(v * 1e3, 3) for k, v in med.items()},
        # Each repeat runs the three one after the other: the ratio within a
        # repeat cancels the machine's drift; their median and range.
        "live_slowdown_pct": paired(times["live"], times["record"]),
        "dump_at_slowdown_pct": paired(times["dump_at"], times["record"]),
        "states_read": states,
        "publish_us_median": statistics.median(publish_us) if publish_us else None,
        "publish_cost_pct_of_interval": round(statistics.median(publish_us) / (args.interval * 1e6) * 100, 3) if publish_us else None,
    }
    print(json.dumps(result, indent=2))
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_live.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""`vramscope summary`, `leaks` and `report` against `pickle.load`, on
snapshots of the shapes users have, not one file.

A benchmark that only has files of one shape cannot see an analysis that is
fast on that shape alone (a scan per block is quick when blocks live for a
few events and slow when they live for the whole trace). Each shape below is
generated once into ``bench/out/shapes/`` (kept between runs):

* ``training``: the synthetic GPT training run (``vramscope synth``):
  iteration marks, Python stacks, short-lived activations.
* ``cpp_stacks``: the same run with C++ and Python stacks (40 to 70 frames).
* ``window``: the ring buffer wrapped: the last half of a longer run, blocks
  from before the window alive without an ``alloc``.
* ``random_long``: no iteration marks, 300 allocation sites with 25-frame
  Python stacks, blocks that live long and are freed at random (what an
  inference server or a data pipeline records).
* ``devices_streams``: four devices, four streams each, random lifetimes.
* ``oom_middle``: random lifetimes with an out-of-memory error half-way that
  the program caught and went on from.
* ``10M`` (``--big``): the training run with 10,000,000 entries.

Every tool runs as a whole process (interpreter or binary start-up
included); each round runs every tool once, in a rotated order, so that a
machine busy for a moment slows all of them alike. The table gives medians
and each tool's speed as a multiple of ``pickle.load`` on the same file.

    .venv/bin/python bench/bench_shapes.py                     # 1,000,000 entries, 3 rounds
    .venv/bin/python bench/bench_shapes.py --only random_long --repeat 7
    .venv/bin/python bench/bench_shapes.py --big --json bench/out/shapes.json
    .venv/bin/python bench/bench_shapes.py --bin /tmp/old/vramscope   # an earlier build

Standard library only. Exit status 1 when a tool fails on a file.
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_summary  # noqa: E402  (one way to measure a child process)

REPO = Path(__file__).resolve().parent.parent
BIN = REPO / "target" / "release" / "vramscope"
OUT = REPO / "bench" / "out" / "shapes"

SHAPES = ("training", "cpp_stacks", "window", "random_long", "devices_streams", "oom_middle")
TOOLS = ("pickle.load", "summary", "leaks", "report")
GOAL = 8.0  # summary at least this many times faster than pickle.load


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Shapes the synthetic training run does not have, written with pickle as
# PyTorch's _dump_snapshot does (one frames list per site, shared).
# --------------------------------------------------------------------------


def _site_frames(sites: int, depth: int) -> list:
    """`sites` Python stacks of `depth` frames: the user's script at the
    bottom, library frames above it, the allocating op innermost."""
    libs = [
        "/usr/lib/python3.12/site-packages/torch/nn/modules/module.py",
        "/usr/lib/python3.12/site-packages/torch/nn/functional.py",
        "/usr/lib/python3.12/site-packages/transformers/models/llama/modeling_llama.py",
        "/usr/lib/python3.12/site-packages/torch/utils/data/dataloader.py",
        "/usr/lib/python3.12/site-packages/vllm/worker/model_runner.py",
    ]
    out = []
    for s in range(sites):
        frames = []
        for d in range(depth):
            if d == depth - 1:
                frames.append({"filename": "serve.py", "line": 10 + s % 40, "name": "<module>"})
            elif d >= depth - 3:
                frames.append({"filename": "serve.py", "line": 100 + 7 * s + d, "name": f"handle_{s % 23}"})
            else:
                lib = libs[(s + d) % len(libs)]
                frames.append({"filename": lib, "line": 40 + (31 * s + 17 * d) % 1900, "name": f"fn_{(s * 3 + d) % 97}"})
        out.append(frames)
    return out


def random_trace_snapshot(entries: int, seed: int, devices: int = 1, streams: int = 1,
                          oom_at: float | None = None, sites: int = 300, depth: int = 25,
                          live_target: int = 6000) -> dict:
    """Blocks allocated from `sites` places and freed at random: a block's
    life is as likely to span the whole trace as a few events. No iteration
    marks, no segment events (a warm cache)."""
    rng = random.Random(seed)
    frames = _site_frames(sites, depth)
    site_size = [max(512, int(2 ** rng.uniform(9, 26))) for _ in range(sites)]
    stream_ids = [0] + [94_000_000_000_000 + 4096 * k for k in range(1, streams)]
    traces = []
    segments = []
    per_device = max(1, entries // devices)
    for dev in range(devices):
        trace = []
        live: list = []  # (addr, size, site, stream)
        addr = 0x7F00_0000_0000 + dev * 0x0100_0000_0000
        t = 1_700_000_000_000_000
        oom_index = int(per_device * oom_at) if oom_at is not None else -1
        while len(trace) < per_device:
            t += rng.randint(1, 40)
            if len(trace) >= oom_index >= 0:
                oom_index = -1
                trace.append({"action": "oom", "addr": 3 << 30, "size": 12 << 30, "stream": 0,
                              "time_us": t, "frames": frames[rng.randrange(sites)]})
                continue
            # Allocation is likelier while fewer than the target are alive,
            # so the live count hovers there and lives are long and random.
            if not live or rng.random() < live_target / (live_target + len(live)):
                s = rng.randrange(sites)
                size = site_size[s]
                rounded = (size + 511) // 512 * 512
                st = stream_ids[rng.randrange(streams)]
                # PyTorch writes a new frames list per allocator call (of
                # shared frame dicts): a site's lists are equal, not one.
                trace.append({"action": "alloc", "addr": addr, "size": size, "stream": st,
                              "time_us": t, "frames": list(frames[s])})
                live.append((addr, size, s, st))
                addr += rounded
            else:
                k = rng.randrange(len(live))
                live[k], live[-1] = live[-1], live[k]
                a, size, s, st = live.pop()
                call = list(frames[s])  # a free's two entries share one list
                for action in ("free_requested", "free_completed"):
                    trace.append({"action": action, "addr": a, "size": size, "stream": st,
                                  "time_us": t, "frames": call})
        traces.append(trace)
        for a, size, s, st in live:
            rounded = (size + 511) // 512 * 512
            segments.append({
                "device": dev, "address": a, "total_size": rounded, "allocated_size": rounded,
                "active_size": rounded, "requested_size": size, "stream": st,
                "segment_type": "small" if rounded <= 1 << 20 else "large",
                "segment_pool_id": (0, 0), "is_expandable": False, "frames": frames[s],
                "blocks": [{"address": a, "size": rounded, "requested_size": size,
                            "state": "active_allocated", "frames": frames[s]}],
            })
    return {"segments": segments, "device_traces": traces}


def generate(shape: str, entries: int, binary: Path) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{shape}_{entries}.pickle"
    if path.exists():
        return path
    log(f"generating {path.name}")
    tmp = path.with_suffix(".tmp")
    synth = {
        "training": [],
        "cpp_stacks": ["--stacks", "cpp"],
        "window": ["--window", str(entries)],
        "10M": [],
    }
    if shape in synth:
        n = entries * 2 if shape == "window" else entries
        cmd = [str(binary), "synth", "--entries", str(n), "--out", str(tmp), *synth[shape]]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    else:
        kw = {
            "random_long": {},
            "devices_streams": {"devices": 4, "streams": 4},
            "oom_middle": {"oom_at": 0.5},
        }[shape]
        snap = random_trace_snapshot(entries, seed=7, **kw)
        with open(tmp, "wb") as f:
            pickle.dump(snap, f, protocol=4)
    tmp.replace(path)
    return path


# --------------------------------------------------------------------------
# Measuring whole processes.
# --------------------------------------------------------------------------


def command(tool: str, path: Path, binary: Path, python: str, scratch: Path) -> list:
    if tool == "pickle.load":
        code = "import pickle,sys\nwith open(sys.argv[1],'rb') as f: pickle.load(f)"
        return [python, "-c", code, str(path)]
    if tool == "report":
        return [str(binary), "report", str(path), "-o", str(scratch / "report.html")]
    return [str(binary), tool, str(path), "--json"]


def measure_once(cmd: list) -> tuple:
    """Wall seconds and peak RSS (MiB) of one child process
    (`bench_summary.measure_once`, which resets this process's RSS
    high-water mark first)."""
    r = bench_summary.measure_once(cmd)
    if r["exit"] not in (0, 1):  # 1: leaks/oom findings reported by exit status
        raise RuntimeError(f"{' '.join(cmd)} exited {r['exit']}:\n{r['stderr'][-2000:]}")
    return r["wall_s"], r["rss_kib"] / 1024


def bench_shape(path: Path, binary: Path, python: str, repeat: int, tools: tuple) -> dict:
    with open(path, "rb") as f:  # page cache warm for every tool alike
        while f.read(1 << 24):
            pass
    times = {t: [] for t in tools}
    rss = {t: 0.0 for t in tools}
    with tempfile.TemporaryDirectory() as d:
        for r in range(repeat):
            order = tools[r % len(tools):] + tools[:r % len(tools)]
            for tool in order:
                wall, mib = measure_once(command(tool, path, binary, python, Path(d)))
                times[tool].append(wall)
                rss[tool] = max(rss[tool], mib)
    return {
        "file": path.name,
        "mb": path.stat().st_size / 1e6,
        "median_s": {t: statistics.median(v) for t, v in times.items()},
        "all_s": times,
        "peak_rss_mib": rss,
    }


def table(results: list, tools: tuple) -> str:
    base = "pickle.load"
    head = ["shape", "file MB"] + [f"{t} s" for t in tools] + [f"{t} vs pickle" for t in tools if t != base]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        m = r["median_s"]
        cells = [r["shape"], f"{r['mb']:.0f}"] + [f"{m[t]:.2f}" for t in tools]
        cells += [f"{m[base] / m[t]:.1f}x" for t in tools if t != base]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", help="comma-separated shapes (default: all but 10M)")
    ap.add_argument("--big", action="store_true", help="also the 10,000,000-entry training run")
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, from {', '.join(TOOLS)}")
    ap.add_argument("--bin", type=Path, default=BIN, help="the vramscope binary to measure")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()

    if not args.bin.exists():
        log(f"{args.bin} is missing: run `cargo build --release` first")
        return 2
    shapes = args.only.split(",") if args.only else list(SHAPES) + (["10M"] if args.big else [])
    tools = tuple(t for t in args.tools.split(",") if t)
    if "pickle.load" not in tools:
        tools = ("pickle.load",) + tools
    venv = REPO / ".venv" / "bin" / "python"
    python = str(venv) if venv.exists() else sys.executable
    results = []
    failed = False
    for shape in shapes:
        entries = 10_000_000 if shape == "10M" else args.entries
        path = generate(shape, entries, args.bin)
        log(f"{shape}: {path.stat().st_size / 1e6:.0f} MB, {args.repeat} rounds")
        try:
            r = bench_shape(path, args.bin, python, args.repeat, tools)
        except RuntimeError as e:
            log(str(e))
            failed = True
            continue
        r["shape"] = shape
        results.append(r)
        m = r["median_s"]
        log("  " + ", ".join(f"{t} {m[t]:.2f} s" for t in tools))
    print(table(results, tools))
    slow = [r["shape"] for r in results
            if "summary" in r["median_s"] and r["median_s"]["pickle.load"] / r["median_s"]["summary"] < GOAL]
    if slow:
        print(f"\nsummary under {GOAL:.0f}x pickle.load on: {', '.join(slow)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"entries": args.entries, "repeat": args.repeat,
                                         "results": results}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

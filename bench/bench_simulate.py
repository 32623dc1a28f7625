"""Speed of the allocator model: ``vramscope simulate`` on a 1M-entry
synthetic trace (made with ``vramscope synth`` if missing), the recorded
settings alone, the sweep (the recorded settings and 8 others, one thread
each) and a program change, against ``vramscope summary`` of the same file
(what loading alone costs); then the same on a trace recorded with
expandable segments. Wall time, CPU time over wall time
(how many cores the sweep kept busy) and peak memory, best of N runs.

    python bench/bench_simulate.py [--entries 1000000] [--runs 3] [--binary target/release/vramscope]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def measure(cmd: list) -> tuple:
    """(wall s, cpu s, peak RSS MiB) of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--binary", default=str(REPO / "target" / "release" / "vramscope"))
    a = ap.parse_args()
    for extra in ([], ["--expandable-segments"]):
        tag = "-expandable" if extra else ""
        path = Path(tempfile.gettempdir()) / f"vramscope-bench-simulate-{a.entries}{tag}.pickle"
        if not path.exists():
            subprocess.run([a.binary, "synth", "-o", str(path), "--entries", str(a.entries), *extra],
                           check=True, stdout=subprocess.DEVNULL)
        print(f"{path.name}: {path.stat().st_size / 2**20:.1f} MiB, {a.entries:,} entries, {os.cpu_count()} cores")
        rows = {
            "summary (load only)": [a.binary, "summary", str(path), "-q", "--json"],
            "simulate (recorded)": [a.binary, "simulate", str(path), "-q", "--json"],
            "simulate --sweep (1+8)": [a.binary, "simulate", str(path), "-q", "--json", "--sweep"],
            "simulate --scale": [a.binary, "simulate", str(path), "-q", "--json", "--scale", "model.py=0.5"],
        }
        base = None
        for name, cmd in rows.items():
            best = min((measure(cmd) for _ in range(a.runs)), key=lambda r: r[0])
            wall, cpu, rss = best
            base = base or wall
            print(f"  {name:24s} {wall:6.3f} s wall  {cpu / wall:4.2f} cores busy  {rss:7.1f} MiB peak RSS"
                  f"  ({wall / base:.2f}x load, +{wall - base:.3f} s)")


if __name__ == "__main__":
    main()

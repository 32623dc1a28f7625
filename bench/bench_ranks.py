"""Reading many rank files: ``vramscope ranks`` over N synthetic rank files
of M entries each (made with ``vramscope synth`` if missing, rank 3 with a
leak), against ``vramscope summary`` of one of them. Prints wall time, CPU
time over wall time and peak RSS, and the two targets: ranks takes at most
N x (one summary) / cores x 1.3, and its peak RSS is at most 3 x one
summary's.

    python bench/bench_ranks.py [--files 16] [--entries 1000000] [--runs 2] [--binary target/release/vramscope]
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
    """(wall s, cpu s, peak RSS MiB) of one run of ``cmd`` in a fresh process group."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) not in (0, 3):
        raise SystemExit(f"{cmd} failed")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--binary", default=str(REPO / "target" / "release" / "vramscope"))
    a = ap.parse_args()
    root = Path(tempfile.gettempdir()) / f"vramscope-bench-ranks-{a.files}x{a.entries}"
    for rank in range(a.files):
        f = root / f"iteration_10" / f"rank{rank}_memory_snapshot.pickle"
        if not f.exists():
            f.parent.mkdir(parents=True, exist_ok=True)
            extra = ["--leak", "128MiB"] if rank == 3 else []
            subprocess.run([a.binary, "synth", "-o", str(f), "--entries", str(a.entries), "--seed", "5", *extra],
                           check=True, stdout=subprocess.DEVNULL)
    cores = os.cpu_count() or 1
    one = root / "iteration_10" / "rank0_memory_snapshot.pickle"
    print(f"{a.files} files of {a.entries:,} entries ({one.stat().st_size / 2**20:.0f} MiB each), {cores} cores")
    s_wall, s_cpu, s_rss = min((measure([a.binary, "summary", str(one), "-q", "--json"]) for _ in range(a.runs)))
    r_wall, r_cpu, r_rss = min((measure([a.binary, "ranks", str(root), "-q", "--json"]) for _ in range(a.runs)))
    print(f"  summary, one file      {s_wall:6.2f} s wall  {s_cpu / s_wall:4.2f} cores busy  {s_rss:7.1f} MiB peak RSS")
    print(f"  ranks, {a.files} files       {r_wall:6.2f} s wall  {r_cpu / r_wall:4.2f} cores busy  {r_rss:7.1f} MiB peak RSS")
    limit = a.files * s_wall / cores * 1.3
    print(f"  time: {r_wall:.2f} s vs target {limit:.2f} s (N x summary / cores x 1.3): {'ok' if r_wall <= limit else 'OVER'}")
    print(f"  memory: {r_rss / s_rss:.2f}x one summary's (target <= 3x): {'ok' if r_rss <= 3 * s_rss else 'OVER'}")
    html = root / "ranks.html"
    h_wall, _, h_rss = measure([a.binary, "ranks", str(root), "-q", "--html", str(html)])
    print(f"  ranks --html            {h_wall:6.2f} s wall  {h_rss:7.1f} MiB peak RSS  page {html.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()

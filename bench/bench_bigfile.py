#!/usr/bin/env python3
"""Big files in bounded memory: `vramscope summary`, `leaks` and `report` on
one large synthetic snapshot (10M entries by default, 1.4 GB), each as a
whole process, with its wall time and peak RSS beside the file's size.

The targets are the ones a user with a big dump needs: no command's peak
RSS above the file's size (RSS / file <= 1), and the report in 15 s or less.
`--bin OLD` runs an earlier build first, on the same file in the same run,
so before and after are measured on the same machine at the same moment.

Peak RSS is the child's ru_maxrss from os.wait4 (bench_summary.py's helpers:
the bench's own high-water mark is reset before each spawn). Each command
runs --repeat times on a warm page cache; the table shows the median wall
time and the largest peak RSS. Every output is checked (untimed, once): the
summary's JSON names the file's peak, and the report is a complete page.

Standard library only. From the repository root:

    python3 bench/bench_bigfile.py                          # 10M entries, Python stacks
    python3 bench/bench_bigfile.py --entries 1000000 --bin /tmp/vramscope.old
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_summary as bs  # noqa: E402  (shared helpers: build, RSS measurement, synth files)

REPORT_TARGET_S = 15.0
RSS_TARGET = 1.0  # peak RSS / file size


def commands(binary: Path, snap: Path, html: Path) -> dict[str, list[str]]:
    return {
        "summary": [str(binary), "summary", str(snap), "-q", "--json"],
        "leaks": [str(binary), "leaks", str(snap), "-q", "--json"],
        "report": [str(binary), "report", str(snap), "-q", "-o", str(html)],
    }


def check(binary: Path, snap: Path, html: Path) -> None:
    """Untimed: the outputs are real (the summary has a peak, the page ends)."""
    r = subprocess.run([str(binary), "summary", str(snap), "-q", "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench: {binary} summary failed (exit {r.returncode}): {bs.tail(r.stderr)}")
    doc = json.loads(r.stdout)
    devices = doc.get("devices") or []
    if not devices or not (devices[0].get("peak") or {}).get("allocated_bytes"):
        sys.exit(f"bench: {binary} summary has no peak for device 0")
    r = subprocess.run([str(binary), "report", str(snap), "-q", "-o", str(html)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench: {binary} report failed (exit {r.returncode}): {bs.tail(r.stderr)}")
    with open(html, "rb") as f:
        f.seek(max(0, html.stat().st_size - 64))
        if b"</html>" not in f.read():
            sys.exit(f"bench: {html} is not a complete page")


def run_build(label: str, binary: Path, snap: Path, repeat: int, tmp: Path) -> dict:
    html = tmp / f"{label}.html"
    bs.log(f"{label}: checking outputs of {binary}")
    check(binary, snap, html)
    out = {}
    for name, cmd in commands(binary, snap, html).items():
        bs.warm_cache(snap)
        m = bs.measure(cmd, repeat)
        if not m["ok"]:
            sys.exit(f"bench: {' '.join(cmd)} failed (exit {m['exit']}): {m['stderr_tail']}")
        out[name] = m
        bs.log(f"  {name}: {m['wall_s_median']:.2f} s, peak RSS {m['peak_rss_kib_max'] / 1024:.0f} MiB")
    out["html_bytes"] = html.stat().st_size
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=10_000_000, help="trace entries (default 10000000)")
    ap.add_argument("--stacks", default="python", choices=("python", "cpp"), help="synth stacks (default python)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per command (default 1)")
    ap.add_argument("--bin", type=Path, metavar="OLD", help="an earlier vramscope build, measured first")
    ap.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the release binary first")
    a = ap.parse_args()
    bs.ensure_binary(a.rebuild)
    snap = bs.generate(a.entries, a.stacks)
    size = snap.stat().st_size
    builds = []
    if a.bin is not None:
        if not a.bin.is_file():
            ap.error(f"--bin: not a file: {a.bin}")
        builds.append(("before", a.bin.resolve()))
    builds.append(("after", bs.BIN))
    results = {}
    with tempfile.TemporaryDirectory(prefix="vramscope-bigfile-") as tmp:
        for label, binary in builds:
            results[label] = run_build(label, binary, snap, a.repeat, Path(tmp))

    print(f"\n{snap.name}: {a.entries:,} entries, {size / 1e6:.1f} MB; "
          f"targets: peak RSS <= file size, report <= {REPORT_TARGET_S:g} s")
    print("| command | build | wall s | peak RSS MB | RSS / file | target met |")
    print("|---|---|---:|---:|---:|---|")
    failed = []
    for label, _ in builds:
        for name in ("summary", "leaks", "report"):
            m = results[label][name]
            rss = m["peak_rss_kib_max"] * 1024
            ratio = rss / size
            ok = ratio <= RSS_TARGET and (name != "report" or m["wall_s_median"] <= REPORT_TARGET_S)
            if label == "after" and not ok:
                failed.append(name)
            print(f"| {name} | {label} | {m['wall_s_median']:.2f} | {rss / 1e6:.0f} | {ratio:.2f} | "
                  f"{'yes' if ok else 'no'} |")
    if a.json:
        a.json.write_text(json.dumps({"file": str(snap), "file_bytes": size, "entries": a.entries,
                                      "results": results}, indent=2, default=str))
    if failed:
        print(f"\ntargets not met by: {', '.join(failed)}")


if __name__ == "__main__":
    main()

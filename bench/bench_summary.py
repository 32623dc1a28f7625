#!/usr/bin/env python3
"""Benchmark `vramscope summary` against CPython's pickle.load and PyTorch's
own `python -m torch.cuda._memory_viz stats` on the same snapshot files.

Each tool runs in its own child process; wall time is measured around the
child's whole life (including interpreter start-up and, for _memory_viz,
`import torch`), and peak RSS is the child's ru_maxrss from os.wait4.
Every tool runs --repeat times; the table shows the median wall time and the
maximum peak RSS over the runs.

Standard library only. Usual invocation from the repository root:

    .venv/bin/python bench/bench_summary.py                       # synth, 1,000,000 entries
    .venv/bin/python bench/bench_summary.py --entries 100000,1000000 --json bench/out/results.json
    .venv/bin/python bench/bench_summary.py --files tests/fixtures/real/magma27_cs336_windows.pickle.gz
    .venv/bin/python bench/bench_summary.py --entries 1000000,10000000 --stacks python,cpp --skip _memory_viz

Beside the whole-process figures, vramscope's own stages (load, summary;
``VRAMSCOPE_TIMING=1``) are read from one more run of each configuration,
so a stage that got slower shows even where the total hides it.
"""

from __future__ import annotations

import argparse
import json
import re
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = REPO / "target" / "release" / "vramscope"
OUT_DIR = REPO / "bench" / "out"

TOOLS = ("vramscope", "vramscope-nocat", "pickle.load", "_memory_viz")
TOOL_LABELS = {
    "vramscope": "vramscope summary --json",
    "vramscope-nocat": "vramscope summary --json --no-categories",
    "pickle.load": "CPython pickle.load",
    "_memory_viz": "torch _memory_viz stats",
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def venv_python() -> str:
    p = REPO / ".venv" / "bin" / "python"
    if p.exists() and os.access(p, os.X_OK):
        return str(p)
    return sys.executable


def run_capture(cmd: list[str]) -> str | None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    return r.stdout.strip()


def machine_info(python: str) -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) / (1024 * 1024), 1)
                    break
    except OSError:
        pass
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:
        nproc = os.cpu_count()
    return {
        "nproc": nproc,
        "cpu": cpu,
        "mem_gib": mem_gib,
        "os": platform.platform(),
        "python": run_capture([python, "-c", "import sys; print(sys.version.split()[0])"]),
        "torch": run_capture([python, "-c", "import torch; print(torch.__version__)"]),
        "vramscope": vramscope_version(),
    }


def vramscope_version() -> str | None:
    v = run_capture([str(BIN), "--version"]) if BIN.exists() else None
    return v.removeprefix("vramscope").strip() or None if v else None


def ensure_binary(force: bool) -> None:
    if BIN.exists() and not force:
        return
    cmd = ["cargo", "build", "--release", "-p", "vramscope"]
    log(f"building: {' '.join(cmd)}")
    r = subprocess.run(cmd, cwd=REPO)
    if r.returncode != 0 or not BIN.exists():
        sys.exit(f"bench: '{' '.join(cmd)}' failed (exit {r.returncode})")


def generate(entries: int, stacks: str = "python") -> Path:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / (f"synth_{entries}.pickle" if stacks == "python" else f"synth_{entries}_{stacks}.pickle")
    if out.exists() and out.stat().st_size > 0:
        log(f"using existing {out.relative_to(REPO)}")
        return out
    cmd = [str(BIN), "synth", "--entries", str(entries), "--stacks", stacks,
           "--seed", "1", "-o", str(out)]
    log(f"generating: {' '.join(cmd)}")
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0 or not out.exists():
        out.unlink(missing_ok=True)
        log(tail(r.stderr))
        sys.exit(f"bench: snapshot generation failed (exit {r.returncode})")
    log(f"  {out.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s")
    return out


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def warm_cache(path: Path) -> None:
    """Read the file once (like `cat FILE > /dev/null`) so every tool sees a warm page cache.

    Uses a small reused buffer so this process's own peak RSS does not grow
    (see reset_peak_rss)."""
    buf = bytearray(1 << 18)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def reset_peak_rss() -> None:
    """Reset this process's RSS high-water mark to its current RSS.

    Linux carries the high-water mark of the spawning process's memory into
    the child's ru_maxrss at exec, so every figure has a floor of roughly this
    process's peak RSS. Resetting it before each spawn keeps that floor at the
    bench's current (small) RSS; the floor itself is measured with `true` and
    printed with the results."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def measure_once(cmd: list[str]) -> dict:
    """Run cmd as a child with stdout discarded; return wall seconds, peak RSS, exit code."""
    reset_peak_rss()
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, cwd=REPO)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code  # already reaped by wait4
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    rss_kib = ru.ru_maxrss if sys.platform != "darwin" else ru.ru_maxrss // 1024
    return {"wall_s": wall, "rss_kib": rss_kib, "exit": code, "stderr": stderr}


def measure(cmd: list[str], repeat: int) -> dict:
    walls, rss = [], []
    for _ in range(repeat):
        m = measure_once(cmd)
        if m["exit"] != 0:
            return {"ok": False, "exit": m["exit"], "stderr_tail": tail(m["stderr"]),
                    "cmd": cmd}
        walls.append(m["wall_s"])
        rss.append(m["rss_kib"])
    return {
        "ok": True,
        "cmd": cmd,
        "wall_s_median": statistics.median(walls),
        "wall_s_all": walls,
        "peak_rss_kib_max": max(rss),
        "peak_rss_kib_all": rss,
    }


TIMING = re.compile(r"timing: load ([0-9.]+)(ms|s|µs) .*summary ([0-9.]+)(ms|s|µs)")
SPLIT = re.compile(r"parse ([0-9.]+)(ms|s|µs), decode ([0-9.]+)(ms|s|µs)")


def stages(cmd: list[str]) -> dict | None:
    """vramscope's own stage times (ms) from one run with VRAMSCOPE_TIMING=1."""
    env = dict(os.environ, VRAMSCOPE_TIMING="1")
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    m = TIMING.search(r.stderr or "")
    if r.returncode != 0 or not m:
        return None
    scale = {"s": 1e3, "ms": 1.0, "µs": 1e-3}
    out = {"load_ms": float(m.group(1)) * scale[m.group(2)],
           "summary_ms": float(m.group(3)) * scale[m.group(4)]}
    # The load's two parts: the pickle's parse, then its decoding into columns.
    split = SPLIT.search(r.stderr or "")
    if split:
        out["parse_ms"] = float(split.group(1)) * scale[split.group(2)]
        out["decode_ms"] = float(split.group(3)) * scale[split.group(4)]
    return out


def bench_file(path: Path, python: str, repeat: int, have_torch: bool, skip: tuple = ()) -> dict:
    size = path.stat().st_size
    log(f"\n{path}  ({size / 1e6:.1f} MB)")
    warm_cache(path)
    cmds = {
        "vramscope": [str(BIN), "summary", str(path), "--json"],
        "vramscope-nocat": [str(BIN), "summary", str(path), "--json", "--no-categories"],
        "pickle.load": [python, "-c",
                        "import pickle,sys; pickle.load(open(sys.argv[1],'rb'))", str(path)],
        "_memory_viz": [python, "-m", "torch.cuda._memory_viz", "stats", str(path)],
    }
    result = {"file": str(path), "name": path.name, "size_bytes": size, "tools": {}}
    for tool in TOOLS:
        if tool == "_memory_viz" and not have_torch:
            result["tools"][tool] = {"ok": False, "skipped": "torch not installed"}
            continue
        if tool in skip:
            result["tools"][tool] = {"ok": False, "skipped": "--skip"}
            continue
        log(f"  {TOOL_LABELS[tool]} x{repeat} ...")
        r = measure(cmds[tool], repeat)
        if tool == "vramscope" and r["ok"]:
            problem = check_json_output(cmds[tool])
            if problem:
                r = {"ok": False, "exit": 0, "error": f"failed ({problem})",
                     "stderr_tail": "", "cmd": cmds[tool]}
        if r["ok"] and tool.startswith("vramscope"):
            r["stages"] = stages(cmds[tool])
        if r["ok"]:
            log(f"    median {r['wall_s_median']:.3f} s, peak RSS {r['peak_rss_kib_max'] / 1024:.1f} MB")
        else:
            log(f"    {failure_text(r)}; stderr tail:")
            log("      " + (r["stderr_tail"] or "(empty)").replace("\n", "\n      "))
        result["tools"][tool] = r
    return result


def check_json_output(cmd: list[str]) -> str | None:
    """Run cmd once more (untimed) and check that stdout is one JSON document."""
    with tempfile.TemporaryFile() as out:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out,
                           stderr=subprocess.DEVNULL, cwd=REPO)
        if r.returncode != 0:
            return f"exit {r.returncode} on the check run"
        out.seek(0)
        data = out.read()
    if not data.strip():
        return "no output"
    try:
        json.loads(data)
    except ValueError:
        return "output is not JSON"
    return None


def failure_text(r: dict) -> str:
    return r.get("error") or f"failed (exit {r['exit']})"


def fmt_wall(r: dict) -> str:
    if r.get("skipped"):
        return "skipped"
    return f"{r['wall_s_median']:.3f}" if r["ok"] else failure_text(r)


def fmt_rss(r: dict) -> str:
    if r.get("skipped"):
        return "skipped"
    return f"{r['peak_rss_kib_max'] / 1024:.1f}" if r["ok"] else failure_text(r)


def ratio(a: float | None, b: float | None, suffix: str = "x") -> str:
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}{suffix}"


def markdown(results: list[dict], machine: dict, repeat: int) -> str:
    lines = []
    lines.append(f"Machine: {machine['nproc']} cores, {machine['cpu']}"
                 + (f", {machine['mem_gib']} GiB RAM" if machine.get("mem_gib") else ""))
    lines.append(f"Python {machine.get('python') or '?'}, torch {machine.get('torch') or 'not installed'}, "
                 f"vramscope {machine.get('vramscope') or '?'}; {repeat} runs each, median wall, max peak RSS")
    if machine.get("rss_floor_kib") is not None:
        lines.append(f"RSS floor of the method (peak RSS reported for `true`): "
                     f"{machine['rss_floor_kib'] / 1024:.1f} MB; figures near it are upper bounds")
    lines.append("")
    head = ["file", "size MB"]
    for tool in TOOLS:
        head += [f"{TOOL_LABELS[tool]} wall s", f"{TOOL_LABELS[tool]} RSS MB"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for res in results:
        row = [res["name"], f"{res['size_bytes'] / 1e6:.1f}"]
        for tool in TOOLS:
            r = res["tools"][tool]
            row += [fmt_wall(r), fmt_rss(r)]
        lines.append("| " + " | ".join(row) + " |")

    lines.append("")
    head = ["file", "_memory_viz stats / vramscope (time)", "pickle.load / vramscope (time; target >= 8x)",
            "vramscope RSS / pickle.load RSS", "vramscope RSS / file size"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for res in results:
        t = res["tools"]

        def wall(tool):
            return t[tool]["wall_s_median"] if t[tool].get("ok") else None

        def rss(tool):
            return t[tool]["peak_rss_kib_max"] * 1024 if t[tool].get("ok") else None

        row = [
            res["name"],
            ratio(wall("_memory_viz"), wall("vramscope")),
            ratio(wall("pickle.load"), wall("vramscope")),
            ratio(rss("vramscope"), rss("pickle.load")),
            ratio(rss("vramscope"), res["size_bytes"]),
        ]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append("vramscope's stages (one run each with VRAMSCOPE_TIMING=1), in ms; the load is the parse then the decode:")
    lines.append("")
    lines.append("| file | load | parse | decode | summary | load, --no-categories | summary, --no-categories |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for res in results:
        t = res["tools"]
        cat = t["vramscope"].get("stages") or {}
        nocat = t["vramscope-nocat"].get("stages") or {}
        cells = [cat.get("load_ms"), cat.get("parse_ms"), cat.get("decode_ms"), cat.get("summary_ms"),
                 nocat.get("load_ms"), nocat.get("summary_ms")]
        lines.append("| " + " | ".join([res["name"]] + ["n/a" if c is None else f"{c:.0f}" for c in cells]) + " |")
    lines.append("")
    lines.append("Labelling what the memory is (category inference) adds, per file:")
    for res in results:
        t = res["tools"]
        cat = t["vramscope"].get("stages") or {}
        nocat = t["vramscope-nocat"].get("stages") or {}
        if cat and nocat:
            d = cat["summary_ms"] - nocat["summary_ms"]
            lines.append(f"- {res['name']}: {d:+.0f} ms in the summary stage")
    return "\n".join(lines)


def parse_entries(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().replace("_", "")
        if part:
            n = int(part)
            if n <= 0:
                raise argparse.ArgumentTypeError("entries must be positive")
            out.append(n)
    if not out:
        raise argparse.ArgumentTypeError("no sizes given")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=parse_entries, default=[1_000_000],
                    help="comma-separated synthetic snapshot sizes (default: 1000000)")
    ap.add_argument("--stacks", default="python",
                    help="comma-separated stack kinds of the synthetic snapshots: python, cpp (default: python)")
    ap.add_argument("--skip", default="", help="comma-separated tools to leave out, e.g. _memory_viz")
    ap.add_argument("--files", nargs="+", type=Path, metavar="FILE",
                    help="benchmark these snapshot files instead of generating synthetic ones")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool (default: 3)")
    ap.add_argument("--json", type=Path, metavar="OUT.json", help="also save the figures as JSON")
    ap.add_argument("--bin", type=Path, metavar="VRAMSCOPE",
                    help="the vramscope binary to measure (default: target/release/vramscope), e.g. an earlier build")
    ap.add_argument("--rebuild", action="store_true",
                    help="run `cargo build --release -p vramscope` even if the binary exists")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    python = venv_python()
    global BIN
    if args.bin is not None:
        if not args.bin.is_file():
            ap.error(f"--bin: not a file: {args.bin}")
        BIN = args.bin.resolve()
    else:
        ensure_binary(args.rebuild)

    if args.files:
        files = []
        for f in args.files:
            if not f.is_file():
                ap.error(f"not a file: {f}")
            files.append(f.resolve())
    else:
        kinds = [k.strip() for k in args.stacks.split(",") if k.strip()]
        if not kinds or any(k not in ("python", "cpp") for k in kinds):
            ap.error("--stacks: python and/or cpp")
        files = [generate(n, k) for n in args.entries for k in kinds]

    have_torch = run_capture([python, "-c", "import importlib.util, sys; "
                              "sys.exit(importlib.util.find_spec('torch') is None)"]) is not None
    if not have_torch:
        log(f"note: torch is not importable with {python}; skipping _memory_viz stats "
            "(run scripts/setup-venv.sh to install it)")

    machine = machine_info(python)
    true_bin = shutil.which("true")
    floor = measure_once([true_bin]) if true_bin else None
    machine["rss_floor_kib"] = floor["rss_kib"] if floor and floor["exit"] == 0 else None
    skip = tuple(t.strip() for t in args.skip.split(",") if t.strip())
    unknown = [t for t in skip if t not in TOOLS]
    if unknown:
        ap.error(f"--skip: unknown tool(s) {', '.join(unknown)}; the tools are {', '.join(TOOLS)}")
    results = [bench_file(f, python, args.repeat, have_torch, skip) for f in files]

    print()
    print(markdown(results, machine, args.repeat))

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "repeat": args.repeat, "python": python,
                       "results": results}, f, indent=2)
            f.write("\n")
        log(f"\nwrote {args.json}")

    failed = [(r["name"], t) for r in results for t, v in r["tools"].items()
              if not v.get("ok") and not v.get("skipped")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

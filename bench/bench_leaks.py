#!/usr/bin/env python3
"""Benchmark `vramscope leaks`, `vramscope check` and `vramscope diff` on a
pair of synthetic snapshots: one clean, one that leaks a fixed amount per
iteration from one user site (`train.py:74 in accumulate_history`).

Each command runs in its own child process; wall time covers the child's
whole life and peak RSS is the child's ru_maxrss from os.wait4 (the helpers
of bench_summary.py). Every command runs --repeat times on a warm page cache;
the table shows the median wall time and the maximum peak RSS. Before timing,
each output is checked once (untimed): the leaking site must be the first
leak finding of the leaking snapshot, the clean snapshot must have none,
`check --no-leaks` must pass on the clean one and fail (exit 3) on the
leaking one, and the diff must list the leaked tensors among what grew.

Standard library only. Usual invocation from the repository root:

    python3 bench/bench_leaks.py                         # 1,000,000 entries, 50 iterations, 64MiB/iter
    python3 bench/bench_leaks.py --entries 100000 --repeat 5 --json /tmp/leaks.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_summary as bs  # noqa: E402  (shared helpers: build, RSS measurement, machine info)

REPO, BIN, OUT_DIR = bs.REPO, bs.BIN, bs.OUT_DIR
log, tail = bs.log, bs.tail

LEAK_SITE = "train.py:74 in accumulate_history"
TARGET_S = 2.0


def human_entries(n: int) -> str:
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def generate(kind: str, entries: int, iterations: int, leak: str, seed: int) -> tuple[Path, list[str]]:
    """A cached synthetic snapshot in bench/out: `clean` or `leak`."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    tag = f"leak{leak}" if kind == "leak" else "clean"
    out = OUT_DIR / f"leaks_{tag}_{entries}_it{iterations}_s{seed}.pickle"
    cmd = [str(BIN), "synth", "--entries", str(entries), "--stacks", "python",
           "--seed", str(seed), "--iterations", str(iterations)]
    if kind == "leak":
        cmd += ["--leak", leak]
    if out.exists() and out.stat().st_size > 0:
        log(f"using existing {out.relative_to(REPO)}")
        return out, cmd + ["-o", str(out)]
    tmp = out.with_suffix(".pickle.tmp")
    cmd_tmp = cmd + ["-o", str(tmp)]
    log(f"generating: {' '.join(cmd + ['-o', str(out)])}")
    t0 = time.perf_counter()
    r = subprocess.run(cmd_tmp, cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        log(tail(r.stderr))
        sys.exit(f"bench: snapshot generation failed (exit {r.returncode})")
    tmp.replace(out)
    log(f"  {out.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s")
    return out, cmd + ["-o", str(out)]


def measure(cmd: list[str], repeat: int, ok_exits: tuple[int, ...]) -> dict:
    """Like bench_summary.measure, but an exit code in ok_exits is a success
    (`check` exits 3 when a limit is exceeded, which is what it is asked to find)."""
    walls, rss, exits = [], [], []
    for _ in range(repeat):
        m = bs.measure_once(cmd)
        if m["exit"] not in ok_exits:
            return {"ok": False, "exit": m["exit"], "stderr_tail": tail(m["stderr"]), "cmd": cmd}
        walls.append(m["wall_s"])
        rss.append(m["rss_kib"])
        exits.append(m["exit"])
    return {
        "ok": True,
        "cmd": cmd,
        "exit": exits[0],
        "wall_s_median": statistics.median(walls),
        "wall_s_all": walls,
        "peak_rss_kib_max": max(rss),
        "peak_rss_kib_all": rss,
    }


def run_json(cmd: list[str]) -> tuple[int, object | None, str]:
    """Run cmd once (untimed); return its exit code, its stdout as JSON (or None) and stderr."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=REPO)
        out.seek(0)
        err.seek(0)
        data, stderr = out.read(), err.read().decode("utf-8", "replace")
    try:
        return r.returncode, json.loads(data), stderr
    except ValueError:
        return r.returncode, None, stderr


def leak_findings(report: dict) -> list[dict]:
    return [f for f in report.get("findings", []) if f.get("severity") == "leak"]


def validate(clean: Path, leak: Path, leak_bytes: int | None) -> list[dict]:
    """Check once, untimed, that every benchmarked command gives the right answer."""
    checks = []

    def add(name: str, ok: bool, detail: str) -> None:
        checks.append({"check": name, "ok": ok, "detail": detail})
        log(f"  {'ok  ' if ok else 'FAIL'} {name}: {detail}")

    log("\nchecking the outputs (untimed)")
    code, rep, err = run_json([str(BIN), "leaks", str(leak), "--json", "-q"])
    if code != 0 or not isinstance(rep, dict):
        add("leaks finds the leak", False, f"exit {code}, output {'not JSON' if rep is None else 'unexpected'}; {tail(err, 3)}")
    else:
        lf = leak_findings(rep)
        first = lf[0] if lf else None
        site = first["sites"][0]["site"] if first and first.get("sites") else None
        ok = bool(site and site.endswith(LEAK_SITE))
        detail = (f"first leak finding: {first['kind']} at {site}, "
                  f"{first['bytes_per_iteration'] / 2**20:.2f} MiB/iter over {len(rep['iterations'])} "
                  f"iterations ({rep['iteration_source']['kind']}); {len(lf)} leak finding(s), "
                  f"{len(rep['findings'])} in all") if first else "no leak finding"
        if ok and leak_bytes is not None:
            # The site's own growth, not the noisier total: it must be the leak per iteration.
            got = first["sites"][0]["bytes_per_iteration"]
            if abs(got - leak_bytes) > 0.01 * leak_bytes:
                ok = False
                detail += f"; expected {leak_bytes / 2**20:.2f} MiB/iter"
        add("leaks finds the leak", ok and rep.get("leaks_found") is True, detail)

    code, rep, err = run_json([str(BIN), "leaks", str(clean), "--json", "-q"])
    if code != 0 or not isinstance(rep, dict):
        add("leaks: clean has none", False, f"exit {code}; {tail(err, 3)}")
    else:
        lf = leak_findings(rep)
        add("leaks: clean has none", not lf and rep.get("leaks_found") is False,
            f"{len(lf)} leak finding(s), {len(rep['findings'])} in all "
            f"({', '.join(f['kind'] + '/' + f['severity'] for f in rep['findings']) or 'none'}), "
            f"{len(rep['iterations'])} iterations")

    for f, want in ((clean, 0), (leak, 3)):
        code, rep, err = run_json([str(BIN), "check", str(f), "--no-leaks", "--max-peak", "100GiB", "--json", "-q"])
        ok = code == want and isinstance(rep, dict) and rep.get("passed") is (want == 0)
        add(f"check exit {want} on {'clean' if want == 0 else 'leak'}", ok,
            f"exit {code}, passed={rep.get('passed') if isinstance(rep, dict) else '?'}"
            + ("" if code in (0, 3) else f"; {tail(err, 3)}"))

    code, rep, err = run_json([str(BIN), "diff", str(clean), str(leak), "--json", "-q"])
    grown = (rep.get("grown") or []) if isinstance(rep, dict) else []
    rank = next((i for i, g in enumerate(grown) if g["site"].endswith(LEAK_SITE)), None)
    if code != 0 or rank is None:
        add("diff: leak site grew", False, f"exit {code}, {LEAK_SITE} not in `grown`; {tail(err, 3)}")
    else:
        # The end of each trace cuts an iteration at a different point, so
        # activations differ too; the leaked tensors are the ones that are
        # only in the leaking run, all of the leak's size.
        g = grown[rank]
        sizes_ok = leak_bytes is None or all(s["size"] == leak_bytes for s in g["sizes"])
        add("diff: leak site grew", sizes_ok,
            f"exit {code}, {g['site']} is #{rank + 1} of {len(grown)} grown stacks: "
            f"{g['bytes'] / 2**20:.0f} MiB in {g['count']} blocks of "
            + ", ".join(f"{s['size'] / 2**20:g} MiB" for s in g["sizes"]))
    return checks


def fmt_row(r: dict, target: float) -> list[str]:
    if not r["ok"]:
        return [f"failed (exit {r['exit']})", "", "", ""]
    w = r["wall_s_median"]
    # The target is that of the leak analysis, which `check --no-leaks` runs too.
    vs = f"{w / target:.2f}x" if r["command"] in ("leaks", "check") else "—"
    return [f"{w:.3f}", f"{r['peak_rss_kib_max'] / 1024:.1f}", str(r["exit"]), vs]


def markdown(results: list[dict], machine: dict, repeat: int, target: float) -> str:
    lines = [f"Machine: {machine['nproc']} cores, {machine['cpu']}"
             + (f", {machine['mem_gib']} GiB RAM" if machine.get("mem_gib") else ""),
             f"vramscope {machine.get('vramscope') or '?'}; {repeat} runs each on a warm page cache, "
             f"median wall, max peak RSS"]
    if machine.get("rss_floor_kib") is not None:
        lines.append(f"RSS floor of the method (peak RSS reported for `true`): "
                     f"{machine['rss_floor_kib'] / 1024:.1f} MB")
    lines.append("")
    head = ["command", "snapshot", "wall s", "peak RSS MB", "exit", f"wall / {target:g} s target"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---", "---"] + ["---:"] * (len(head) - 2)) + "|")
    for r in results:
        lines.append("| " + " | ".join([f"`{r['label']}`", r["files"]] + fmt_row(r, target)) + " |")
    return "\n".join(lines)


def parse_size(text: str) -> int | None:
    """Bytes of a size such as 64MiB (the units `vramscope synth --leak` takes), or None."""
    units = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2,
             "g": 1024**3, "gib": 1024**3, "kb": 1000, "mb": 1000**2, "gb": 1000**3}
    t = text.strip()
    i = len(t) - len(t.lstrip("0123456789._"))
    try:
        return int(float(t[:i].replace("_", "")) * units[t[i:].strip().lower()])
    except (ValueError, KeyError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000, help="trace entries (default: 1000000)")
    ap.add_argument("--iterations", type=int, default=50, help="synth iterations (default: 50)")
    ap.add_argument("--leak", default="64MiB", help="leak per iteration of the leaking snapshot (default: 64MiB)")
    ap.add_argument("--seed", type=int, default=1, help="synth seed (default: 1)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per command (default: 3)")
    ap.add_argument("--target", type=float, default=TARGET_S,
                    help=f"target wall seconds for `leaks` (default: {TARGET_S:g})")
    ap.add_argument("--json", type=Path, default=OUT_DIR / "leaks_bench.json", metavar="OUT.json",
                    help="where to write all figures (default: bench/out/leaks_bench.json)")
    ap.add_argument("--rebuild", action="store_true",
                    help="run `cargo build --release -p vramscope` even if the binary exists")
    args = ap.parse_args()
    if args.repeat < 1 or args.entries < 1 or args.iterations < 1:
        ap.error("--repeat, --entries and --iterations must be at least 1")

    bs.ensure_binary(args.rebuild)
    clean, clean_cmd = generate("clean", args.entries, args.iterations, args.leak, args.seed)
    leak, leak_cmd = generate("leak", args.entries, args.iterations, args.leak, args.seed)
    for f in (clean, leak):
        bs.warm_cache(f)

    checks = validate(clean, leak, parse_size(args.leak))

    n = human_entries(args.entries)
    jobs = [
        ("leaks", "clean", "vramscope leaks FILE --json", [str(BIN), "leaks", str(clean), "--json"], (0,)),
        ("leaks", "leak", "vramscope leaks FILE --json", [str(BIN), "leaks", str(leak), "--json"], (0,)),
        ("check", "clean", "vramscope check FILE --no-leaks --max-peak 100GiB",
         [str(BIN), "check", str(clean), "--no-leaks", "--max-peak", "100GiB"], (0,)),
        ("check", "leak", "vramscope check FILE --no-leaks --max-peak 100GiB",
         [str(BIN), "check", str(leak), "--no-leaks", "--max-peak", "100GiB"], (3,)),
        ("diff", "clean leak", "vramscope diff CLEAN LEAK", [str(BIN), "diff", str(clean), str(leak)], (0,)),
    ]
    machine = bs.machine_info(sys.executable)
    true_bin = shutil.which("true")
    floor = bs.measure_once([true_bin]) if true_bin else None
    machine["rss_floor_kib"] = floor["rss_kib"] if floor and floor["exit"] == 0 else None

    results = []
    for command, which, label, cmd, ok_exits in jobs:
        for f in (clean, leak):
            bs.warm_cache(f)
        log(f"\n{label}  [{which}] x{args.repeat} ...")
        r = measure(cmd, args.repeat, ok_exits)
        if r["ok"]:
            log(f"  median {r['wall_s_median']:.3f} s, peak RSS {r['peak_rss_kib_max'] / 1024:.1f} MB")
        else:
            log(f"  failed (exit {r['exit']}); stderr tail:\n    "
                + (r["stderr_tail"] or "(empty)").replace("\n", "\n    "))
        r.update({"command": command, "label": label, "files": which})
        results.append(r)

    headline = []
    for r in results:
        if r["command"] in ("leaks", "check") and r["ok"]:
            w = r["wall_s_median"]
            headline.append(f"{r['command']} {n} ({r['files']}): {w:.2f} s = {w / args.target:.2f}x "
                            f"the {args.target:g} s target")

    print()
    print(f"{n}-entry synthetic snapshots, {args.iterations} iterations requested: "
          f"clean {clean.stat().st_size / 1e6:.1f} MB, leaking {args.leak}/iter "
          f"{leak.stat().st_size / 1e6:.1f} MB")
    print()
    print(markdown(results, machine, args.repeat, args.target))
    print()
    for line in headline:
        print(line)
    bad = [c for c in checks if not c["ok"]]
    print(f"output checks: {len(checks) - len(bad)}/{len(checks)} passed"
          + "".join(f"\n  FAIL {c['check']}: {c['detail']}" for c in bad))

    args.json.parent.mkdir(parents=True, exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({
            "machine": machine,
            "repeat": args.repeat,
            "target_s": args.target,
            "entries": args.entries,
            "iterations": args.iterations,
            "leak_per_iteration": args.leak,
            "files": {
                "clean": {"path": str(clean), "size_bytes": clean.stat().st_size, "generated_by": clean_cmd},
                "leak": {"path": str(leak), "size_bytes": leak.stat().st_size, "generated_by": leak_cmd},
            },
            "output_checks": checks,
            "results": results,
            "headline": headline,
        }, f, indent=2)
        f.write("\n")
    log(f"\nwrote {args.json}")
    return 1 if bad or any(not r["ok"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark the HTML report: `vramscope report` against PyTorch's
`python -m torch.cuda._memory_viz trace_plot`, and the report page itself
in headless Chromium.

For each snapshot (synthetic, 1,000,000 entries by default):

1. `vramscope report FILE -o bench/out/report_NAME.html`: wall time and the
   child's peak RSS (ru_maxrss from os.wait4), --repeat runs (median wall,
   max RSS);
2. `.venv/bin/python -m torch.cuda._memory_viz trace_plot FILE -o
   bench/out/trace_plot_NAME.html`: wall time and peak RSS, once, killed after
   --trace-plot-timeout seconds ("timed out"). Its page loads MemoryViz.js
   from cdn.jsdelivr.net, so it cannot be opened offline and only its
   generation is measured;
3. output sizes against the input file;
4. `node tests/browser/perf.mjs --html REPORT`: in headless Chromium
   ($CHROMIUM or /usr/bin/chromium) the time until `vramscope.ready` (first
   complete paint), `metrics.firstPaintMs`, median and max of --iterations
   `vramscope.zoomBy(0.8)` and `panBy(0.1)` render times, JS heap and the
   summed RSS/PSS of the Chromium processes, and whether the page is usable
   (Peak button, hover tooltip, tabs).

Prints a Markdown table and the ratios, and with --json writes every figure.
Standard library only (plus node and Chromium for step 4). From the
repository root:

    .venv/bin/python bench/bench_report.py                        # 1,000,000 entries
    .venv/bin/python bench/bench_report.py --entries 1000000,5000000
    .venv/bin/python bench/bench_report.py --files tests/fixtures/real/magma27_cs336_windows.pickle.gz --no-trace-plot
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = REPO / "target" / "release" / "vramscope"
OUT_DIR = REPO / "bench" / "out"
BROWSER_DIR = REPO / "tests" / "browser"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def venv_python() -> str:
    p = REPO / ".venv" / "bin" / "python"
    if p.exists() and os.access(p, os.X_OK):
        return str(p)
    return sys.executable


def run_capture(cmd: list[str], timeout: float = 120) -> str | None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def machine_info(python: str, chromium: str) -> dict:
    cpu, mem_gib = "unknown", None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
        with open("/proc/meminfo") as f:
            kib = next((int(l.split()[1]) for l in f if l.startswith("MemTotal:")), None)
            mem_gib = round(kib / (1024 * 1024), 1) if kib else None
    except OSError:
        pass
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:
        nproc = os.cpu_count()
    v = run_capture([str(BIN), "--version"]) if BIN.exists() else None
    chromium_v = run_capture([chromium, "--version"])
    return {
        "nproc": nproc, "cpu": cpu, "mem_gib": mem_gib, "os": platform.platform(),
        "python": run_capture([python, "-c", "import sys; print(sys.version.split()[0])"]),
        "torch": run_capture([python, "-c", "import torch; print(torch.__version__)"]),
        "vramscope": v.removeprefix("vramscope").strip() if v else None,
        "node": run_capture(["node", "--version"]),
        "chromium": chromium_v.splitlines()[0] if chromium_v else None,
    }


def ensure_binary(force: bool) -> None:
    if BIN.exists() and not force:
        return
    cmd = ["cargo", "build", "--release", "-p", "vramscope"]
    log(f"building: {' '.join(cmd)}")
    r = subprocess.run(cmd, cwd=REPO)
    if r.returncode != 0 or not BIN.exists():
        sys.exit(f"bench: '{' '.join(cmd)}' failed (exit {r.returncode})")


def ensure_node_modules() -> bool:
    if (BROWSER_DIR / "node_modules" / "playwright-core" / "package.json").exists():
        return True
    cmd = ["npm", "ci", "--prefix", str(BROWSER_DIR), "--no-audit", "--no-fund"]
    log(f"installing: {' '.join(cmd)}")
    try:
        return subprocess.run(cmd, cwd=REPO).returncode == 0
    except OSError as e:
        log(f"bench: {e}")
        return False


def generate(entries: int) -> Path:
    """Same files as bench_summary.py (bench/out/synth_N.pickle), reused when present."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"synth_{entries}.pickle"
    if out.exists() and out.stat().st_size > 0:
        log(f"using existing {out.relative_to(REPO)}")
        return out
    cmd = [str(BIN), "synth", "--entries", str(entries), "--stacks", "python", "--seed", "1", "-o", str(out)]
    log(f"generating: {' '.join(cmd)}")
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0 or not out.exists():
        out.unlink(missing_ok=True)
        log(tail(r.stderr))
        sys.exit(f"bench: snapshot generation failed (exit {r.returncode})")
    log(f"  {out.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s")
    return out


def warm_cache(path: Path) -> None:
    buf = bytearray(1 << 18)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def reset_peak_rss() -> None:
    """Reset this process's RSS high-water mark, which Linux carries into a child's ru_maxrss at exec."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def measure_once(cmd: list[str], timeout: float | None) -> dict:
    """Run cmd (stdout discarded); wall seconds, peak RSS (KiB), exit code, or timed_out."""
    reset_peak_rss()
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                cwd=REPO, start_new_session=True)
        timed_out = False
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if timeout is not None and time.perf_counter() - t0 > timeout:
                timed_out = True
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                _, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    rss_kib = ru.ru_maxrss if sys.platform != "darwin" else ru.ru_maxrss // 1024
    return {"wall_s": wall, "rss_kib": rss_kib, "exit": proc.returncode, "timed_out": timed_out,
            "stderr_tail": tail(stderr)}


def measure(cmd: list[str], repeat: int, timeout: float | None) -> dict:
    runs = []
    for _ in range(repeat):
        m = measure_once(cmd, timeout)
        runs.append(m)
        if m["timed_out"] or m["exit"] != 0:
            return {"ok": False, "cmd": cmd, "timed_out": m["timed_out"], "exit": m["exit"],
                    "wall_s": m["wall_s"], "stderr_tail": m["stderr_tail"]}
    walls = [r["wall_s"] for r in runs]
    return {"ok": True, "cmd": cmd, "wall_s_median": statistics.median(walls), "wall_s_all": walls,
            "peak_rss_kib_max": max(r["rss_kib"] for r in runs)}


def browser_figures(html: Path, iterations: int, timeout: float, chromium: str) -> dict:
    shot = html.with_suffix(".png")
    cmd = ["node", str(BROWSER_DIR / "perf.mjs"), "--html", str(html), "--iterations", str(iterations),
           "--timeout", str(int(timeout)), "--screenshot", str(shot)]
    env = dict(os.environ, CHROMIUM=chromium)
    log(f"  browser: {' '.join(cmd)}")
    try:
        r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout + 120, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": f"timed out after {timeout + 120:.0f} s"}
    except OSError as e:
        return {"ok": False, "why": str(e)}
    if r.returncode != 0:
        return {"ok": False, "why": tail(r.stderr, 6) or f"exit {r.returncode}"}
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["ok"] = True
    out["screenshot"] = str(shot)
    return out


def bench_file(path: Path, args, python: str, chromium: str, have_torch: bool, browser_ok: bool) -> dict:
    name = path.name.split(".")[0]
    res: dict = {"file": str(path), "input_bytes": path.stat().st_size}
    warm_cache(path)

    report = OUT_DIR / f"report_{name}.html"
    log(f"{path.name}: vramscope report ({args.repeat} run(s))")
    res["report"] = measure([str(BIN), "report", str(path), "-o", str(report), "--quiet"], args.repeat, None)
    if res["report"]["ok"]:
        res["report"]["out_bytes"] = report.stat().st_size

    if args.no_trace_plot:
        res["trace_plot"] = {"ok": False, "skipped": "--no-trace-plot"}
    elif not have_torch:
        res["trace_plot"] = {"ok": False, "skipped": f"torch not importable by {python}"}
    else:
        tp = OUT_DIR / f"trace_plot_{name}.html"
        tp.unlink(missing_ok=True)
        log(f"{path.name}: torch _memory_viz trace_plot (timeout {args.trace_plot_timeout:.0f} s)")
        res["trace_plot"] = measure([python, "-m", "torch.cuda._memory_viz", "trace_plot", str(path), "-o", str(tp)],
                                    1, args.trace_plot_timeout)
        if res["trace_plot"]["ok"] and tp.exists():
            res["trace_plot"]["out_bytes"] = tp.stat().st_size

    if args.no_browser:
        res["browser"] = {"ok": False, "why": "--no-browser"}
    elif not browser_ok:
        res["browser"] = {"ok": False, "why": "no Chromium, node or tests/browser/node_modules"}
    elif not res["report"]["ok"]:
        res["browser"] = {"ok": False, "why": "no report"}
    else:
        log(f"{path.name}: report in headless Chromium")
        res["browser"] = browser_figures(report, args.iterations, args.browser_timeout, chromium)
    return res


# ---------- output ----------
def mb(n) -> str:
    return "–" if n is None else f"{n / 1e6:,.1f} MB"


def mib(n) -> str:
    return "–" if n is None else f"{n / (1 << 20):,.0f} MiB"


def secs(s) -> str:
    return "–" if s is None else (f"{s:.2f} s" if s < 100 else f"{s:.0f} s")


def ms(x) -> str:
    return "–" if x is None else (f"{x:.1f} ms" if x < 100 else f"{x:,.0f} ms")


def tool_time(m: dict) -> str:
    if m.get("skipped"):
        return f"skipped ({m['skipped']})"
    if m.get("timed_out"):
        return f"timed out after {m['wall_s']:.0f} s"
    if not m.get("ok"):
        return f"failed (exit {m.get('exit')})"
    return secs(m["wall_s_median"])


def rows_for(r: dict) -> list[tuple[str, str]]:
    rep, tp, br = r["report"], r["trace_plot"], r["browser"]
    inp = r["input_bytes"]
    rows = [("input file", mb(inp))]
    if br.get("ok"):
        rows.append(("trace entries (device 0)", f"{br['events']:,}"))
    rows += [
        ("`vramscope report` wall time", tool_time(rep)),
        ("`vramscope report` peak RSS", mib(rep["peak_rss_kib_max"] * 1024) if rep.get("ok") else "–"),
        ("report size (× input)", f"{mb(rep['out_bytes'])} ({rep['out_bytes'] / inp:.3f}×)" if rep.get("out_bytes") else "–"),
        ("`_memory_viz trace_plot` wall time", tool_time(tp)),
        ("`_memory_viz trace_plot` peak RSS", mib(tp["peak_rss_kib_max"] * 1024) if tp.get("ok") else "–"),
        ("trace_plot size (× input)", f"{mb(tp['out_bytes'])} ({tp['out_bytes'] / inp:.3f}×)" if tp.get("out_bytes") else "–"),
    ]
    if br.get("ok"):
        m, mem, base = br["metrics"], br["memory"], br["memoryBaseline"]
        u = br.get("usable", {})
        rows += [
            ("browser: open → `vramscope.ready` (node clock)", ms(br["readyWallMs"])),
            ("browser: ready / first frame on screen (page clock)", f"{ms(br['readyPageMs'])} / {ms(br['paintedPageMs'])}"),
            ("browser: `metrics.loadMs` / `firstPaintMs`", f"{ms(m['loadMs'])} / {ms(m['firstPaintMs'])}"),
            (f"browser: `zoomBy(0.8)` ×{len(br['zoomMs']['runs'])} median / max", f"{ms(br['zoomMs']['median'])} / {ms(br['zoomMs']['max'])}"),
            (f"browser: `panBy(0.1)` ×{len(br['panMs']['runs'])} median / max", f"{ms(br['panMs']['median'])} / {ms(br['panMs']['max'])}"),
            ("browser: JS heap used (typed arrays not included)", mib(mem["jsHeapUsedBytes"])),
            ("browser: Chromium PSS sum after load (empty page)", f"{mib(mem['afterLoad']['pssBytes'])} ({mib(base['pssBytes'])})"),
            ("browser: Chromium RSS sum after load / peak while loading (empty page)",
             f"{mib(mem['afterLoad']['rssBytes'])} / {mib(mem['peakWhileLoading']['rssBytes'])} ({mib(base['rssBytes'])})"),
            ("browser: usable (Peak, hover tooltip, tabs)",
             f"peak {'ok' if u.get('peak') else 'NO'}, tooltip {'ok' if u.get('tooltip') else 'NO'} ({ms(u.get('hoverMs'))}), "
             f"tabs {', '.join(f'{k} {ms(v)}' for k, v in u.get('tabsMs', {}).items())}"),
        ]
        errs = br["errors"]
        if errs["console"] or errs["page"] or errs["requests"]:
            rows.append(("browser: errors / requests", f"{len(errs['console']) + len(errs['page'])} / {len(errs['requests'])}"))
    else:
        rows.append(("browser", f"not measured: {br.get('why')}"))
    return rows


def print_markdown(results: list[dict], machine: dict) -> None:
    names = [Path(r["file"]).name for r in results]
    table = [rows_for(r) for r in results]
    print(f"\nMachine: {machine['nproc']} cores ({machine['cpu']}), {machine['mem_gib']} GiB; "
          f"vramscope {machine['vramscope']}, torch {machine['torch']}, node {machine['node']}, {machine['chromium']}\n")
    print("| | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    labels = []
    for rows in table:
        for k, _ in rows:
            if k not in labels:
                labels.append(k)
    for k in labels:
        cells = [dict(rows).get(k, "–") for rows in table]
        print(f"| {k} | " + " | ".join(cells) + " |")
    print("\nRatios:")
    for n, r in zip(names, results):
        rep, tp = r["report"], r["trace_plot"]
        parts = []
        if rep.get("ok") and tp.get("ok"):
            parts.append(f"trace_plot / vramscope report time = {tp['wall_s_median'] / rep['wall_s_median']:.1f}×")
        elif rep.get("ok") and tp.get("timed_out"):
            parts.append(f"trace_plot / vramscope report time > {tp['wall_s'] / rep['wall_s_median']:.0f}× (timed out)")
        if rep.get("out_bytes"):
            parts.append(f"report size / input size = {rep['out_bytes'] / r['input_bytes']:.3f}")
        if tp.get("out_bytes"):
            parts.append(f"trace_plot size / input size = {tp['out_bytes'] / r['input_bytes']:.3f}")
        if rep.get("out_bytes") and tp.get("out_bytes"):
            parts.append(f"trace_plot size / report size = {tp['out_bytes'] / rep['out_bytes']:.1f}×")
        print(f"- {n}: " + "; ".join(parts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", default="1000000", help="comma-separated synthetic sizes (default 1000000)")
    ap.add_argument("--files", nargs="*", type=Path, help="measure these snapshot files instead")
    ap.add_argument("--repeat", type=int, default=1, help="runs of vramscope report (default 1)")
    ap.add_argument("--trace-plot-timeout", type=float, default=900, help="seconds (default 900)")
    ap.add_argument("--no-trace-plot", action="store_true", help="skip PyTorch's trace_plot")
    ap.add_argument("--no-browser", action="store_true", help="skip the Chromium part")
    ap.add_argument("--browser-timeout", type=float, default=600, help="seconds to wait for the page (default 600)")
    ap.add_argument("--iterations", type=int, default=10, help="zoomBy / panBy calls (default 10)")
    ap.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the release binary first")
    args = ap.parse_args()

    ensure_binary(args.rebuild)
    python = venv_python()
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    machine = machine_info(python, chromium)
    have_torch = machine["torch"] is not None
    browser_ok = False
    if not args.no_browser:
        if not Path(chromium).exists():
            log(f"bench: no Chromium at {chromium}; browser figures skipped")
        elif machine["node"] is None:
            log("bench: node not found; browser figures skipped")
        else:
            browser_ok = ensure_node_modules()

    files = args.files or [generate(int(n)) for n in args.entries.split(",") if n.strip()]
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    results = [bench_file(Path(f).resolve(), args, python, chromium, have_torch, browser_ok) for f in files]
    print_markdown(results, machine)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": machine, "results": results}, indent=2))
        log(f"wrote {args.json}")


if __name__ == "__main__":
    main()

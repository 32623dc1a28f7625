"""The estimate against real CPU runs on the zoo: one table, architecture by style.

    python bench/zoo_table.py                       # every architecture and style
    python bench/zoo_table.py --archs llama,unet --styles fp32,bf16
    python bench/zoo_table.py --json zoo.json       # the figures, for docs/estimate.md

Each cell runs ``zoo.STEPS`` iterations for real on the CPU (the peak of
c10's allocator, the model and its batch there from the start) and asks
``vramscope.estimate(device="cpu")`` for the same iterations
(python/tests/scripts/zoo.py says how each architecture and style is
built). Compiled cells take 20-40 s each (Inductor compiles C++).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "tests" / "scripts"))


def main() -> None:
    import zoo

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archs", default=",".join(zoo.ARCHS), help="comma-separated (default: all)")
    ap.add_argument("--styles", default=",".join(zoo.STYLES), help="comma-separated (default: all)")
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    rows = []
    print("| architecture | style | real peak (CPU) | estimate | error | notes |")
    print("|---|---|---:|---:|---:|---|")
    for arch in a.archs.split(","):
        for style in a.styles.split(","):
            started = time.perf_counter()
            try:
                real = zoo.real_peak(arch, style)
            except RuntimeError as e:
                # The step cannot run on this CPU (an LSTM under the CPU's
                # autocast without oneDNN's bfloat16): the estimate's note says so.
                est = zoo.estimated(arch, style)
                rows.append({"arch": arch, "style": style, "real": None, "estimate": est.peak_bytes, "error": None, "notes": est.notes, "raised": str(e).splitlines()[0]})
                print(f"| {arch} | {style} | raises: {str(e).splitlines()[0][:60]} | {est.peak_bytes:,} | | {'; '.join(est.notes)} |", flush=True)
                continue
            est = zoo.estimated(arch, style)
            err = est.peak_bytes / real - 1
            notes = "; ".join(est.notes)
            rows.append({"arch": arch, "style": style, "real": real, "estimate": est.peak_bytes, "error": err, "notes": est.notes, "seconds": round(time.perf_counter() - started, 1)})
            print(f"| {arch} | {style} | {real:,} | {est.peak_bytes:,} | {err:+.2%} | {notes} |", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"torch": __import__("torch").__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

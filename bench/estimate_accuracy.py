"""vramscope.estimate against every peak a GPU measured for the project
(tests/fixtures/gpu): prints the Markdown table of docs/estimate.md.

    python bench/estimate_accuracy.py            # the table, on stdout

Each row: the program and GPU that measured it, PyTorch's peak allocated and
reserved (memory_stats), and what the estimate traced on this machine's CPU
says (device="cuda", the meta device, no GPU). Rows whose run ran out of
memory have no peak to compare: the verdict for an 80 GiB H100 is shown.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "tests" / "fixtures" / "gpu"
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(GPU / "programs"))
os.environ.setdefault("GOUT", tempfile.mkdtemp())

import torch  # noqa: E402

import vramscope  # noqa: E402
from common import GPT, loss_fn  # noqa: E402  (the GPT every GPU program trains)


def est(batch: int, variant: str = "default", gpu: str | None = None):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    x = torch.empty(batch, 512, dtype=torch.long, device="meta")
    options = {"fused": True} if variant == "fused" else {}
    cast = torch.bfloat16 if variant == "bf16" else None
    with sdpa_kernel(SDPBackend.MATH) if variant == "math" else torch.enable_grad():
        return vramscope.estimate(GPT(), (x,), torch.optim.AdamW, loss_fn=loss_fn, targets=(x,), steps=2, device="cuda", gpu=gpu, autocast=cast, **options)


def pct(a: int, b: int) -> str:
    return f"{a / b - 1:+.2%}"


def main() -> None:
    rows = []
    run = json.loads((GPU / "estimate_run.json").read_text())
    e = est(16)
    rows.append(("estimate_run.py", "H200", "16, AdamW foreach", run["real_peak"], None, e))
    truth = json.loads((GPU / "estimate_truth_h100.json").read_text())
    names = {"default": "AdamW foreach", "fused": "AdamW fused=True", "bf16": "bf16 autocast", "math": "SDPA math backend"}
    for r in truth["variants_batch16"]:
        rows.append(("estimate_truth.py", "H100", f"16, {names[r['variant']]}", r["peak_allocated"], r["peak_reserved"], est(16, r["variant"])))
    for name in ("estimate_trace_b64_default", "estimate_trace_b256_default", "estimate_trace_b16_bf16"):
        t = json.loads((GPU / f"{name}.json").read_text())
        v = t["variant"]
        rows.append(("estimate_trace.py", "H200", f"{t['batch']}, {names[v]}", t["stats"]["allocated_bytes.all.peak"], t["stats"]["reserved_bytes.all.peak"], est(t["batch"], v)))
    print("| program | GPU | batch × 512, variant | peak allocated (GPU) | estimate | peak reserved (GPU) | estimate |")
    print("|---|---|---|---:|---:|---:|---:|")
    for prog, gpu, what, alloc, res, e in rows:
        r_cells = f"{res:,} | {e.peak_reserved_bytes:,} ({pct(e.peak_reserved_bytes, res)})" if res else "— | —"
        print(f"| `{prog}` | {gpu} | {what} | {alloc:,} | {e.peak_bytes:,} ({pct(e.peak_bytes, alloc)}) | {r_cells} |")
    print()
    print("| batch (H100 80GB, `estimate_truth.py all`) | the GPU | peak reserved (GPU) | estimate | verdict |")
    print("|---:|---|---:|---:|---|")
    for r in sorted(truth["bisection"], key=lambda r: r["batch"]):
        e = est(r["batch"], gpu="H100-80GB")
        real = f"{r['peak_reserved']:,}" if r["fit"] else "(ran out)"
        print(f"| {r['batch']} | {'fits' if r['fit'] else 'out of memory'} | {real} | {e.peak_reserved_bytes:,} | {e.fit['verdict'].replace('_', ' ')} |")
    started = time.perf_counter()
    x = torch.empty(16, 512, dtype=torch.long, device="meta")
    m = vramscope.estimate(GPT(), (x,), torch.optim.AdamW, loss_fn=loss_fn, targets=(x,), steps=2, device="cuda", max_batch_for="H100-80GB").max_batch
    print()
    print(f"Largest batch for an H100 80GB: the GPU ran {truth['max_batch']} and ran out at {truth['first_oom_batch']}; "
          f"the estimate: {m['sentence']} ({len(m['tried'])} traces, {time.perf_counter() - started:.1f} s on this CPU).")


if __name__ == "__main__":
    main()

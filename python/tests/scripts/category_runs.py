"""Training runs recorded on CPU with the Memory Profiler's labels, to check
what vramscope infers against them.

    python category_runs.py OUT_DIR [--iterations 4]

writes ``cnn_sgd.pickle`` (small CNN, SGD with momentum),
``transformer_adamw.pickle`` (small Transformer encoder, AdamW) and
``mlp_adam.pickle`` (MLP, Adam), each recorded by ``vramscope.record`` (the
profiler path on CPU, whose snapshot carries the profiler's categories);
with ``--only zoo_<arch>_<style>``, a cell of ``zoo.py`` (its model, batch
and loop, 3 iterations) recorded the same way, or with ``--backend
allocator`` by the allocator recorder (no profiler labels: the recorder's
tags are then the reference).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models  # noqa: E402
import zoo  # noqa: E402

import vramscope  # noqa: E402


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


RUNS = {
    "cnn_sgd": (models.SmallCNN, (8, 3, 32, 32), lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9)),
    "transformer_adamw": (models.SmallTransformer, (8, 32, 64), lambda ps: torch.optim.AdamW(ps, lr=1e-3)),
    "mlp_adam": (mlp, (1024, 256), lambda ps: torch.optim.Adam(ps, lr=1e-3)),
}


def record(name: str, out: Path, iterations: int) -> Path:
    build, shape, make_opt = RUNS[name]
    torch.manual_seed(0)
    model = build()
    opt = make_opt(model.parameters())
    path = out / f"{name}.pickle"
    with vramscope.record(path, backend="profiler"):  # the Memory Profiler labels every allocation
        for _ in range(iterations):
            x, y = torch.randn(*shape), torch.randint(0, 10, (shape[0],))
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            vramscope.step()
    return path


def record_zoo(arch: str, style: str, out: Path, steps: int = 3, backend: str = "profiler") -> Path:
    """A zoo cell recorded through the profiler: the model, its inputs and
    targets made before the recording starts, as a training script has
    them before its loop."""
    if style == "compiled":
        torch._dynamo.reset()
    case, model = zoo.prepared(arch, style)
    model.train(style != "inference")
    path = out / f"zoo_{arch}_{style}.pickle"
    with vramscope.record(path, backend=backend):
        zoo.train(case, model, style, steps=steps)
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--only", default=None)
    ap.add_argument("--backend", default="profiler", help="for zoo cells: profiler (labelled) or allocator (as a GPU recording reads)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.only and a.only.startswith("zoo_"):
        arch, style = a.only[len("zoo_"):].split("_", 1)
        print(record_zoo(arch, style, a.out, backend=a.backend))
        return
    for name in RUNS:
        if a.only and a.only != name:
            continue
        print(record(name, a.out, a.iterations))


if __name__ == "__main__":
    main()

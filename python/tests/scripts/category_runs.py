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


def record_zoo(arch: str, style: str, out: Path, steps: int = 3, backend: str = "profiler", micro: int = 1) -> Path:
    """A zoo cell recorded through the profiler: the model, its inputs and
    targets made before the recording starts, as a training script has
    them before its loop. ``micro`` > 1: the batch cut into that many
    micro-batches, gradients accumulated (what the advice's half-batch row
    predicts), written as ``zoo_<arch>_<style>_micro<N>.pickle``."""
    if style == "compiled":
        torch._dynamo.reset()
    case, model = zoo.prepared(arch, style)
    model.train(style != "inference")
    path = out / (f"zoo_{arch}_{style}.pickle" if micro == 1 else f"zoo_{arch}_{style}_micro{micro}.pickle")
    with vramscope.record(path, backend=backend):
        if micro == 1:
            zoo.train(case, model, style, steps=steps)
        else:
            (x,), (y,) = case.inputs, case.targets
            opt = torch.optim.AdamW(model.parameters(), lr=zoo.LR)
            for _ in range(steps):
                opt.zero_grad(set_to_none=True)
                for xc, yc in zip(x.chunk(micro), y.chunk(micro)):
                    out_ = model(xc)
                    loss = case.loss_fn(out_, yc) / micro
                    del out_
                    loss.backward()
                    del loss
                opt.step()
    return path


# Training styles of the small Transformer, recorded as a GPU user records
# them: after a warm-up step, so that parameters, optimizer state (and the
# gradients zero_grad keeps) are there before the trace.
STYLES = ("accumulate", "fused", "single_tensor", "two_optimizers", "set_to_none_false")


def record_style(style: str, out: Path, steps: int = 3) -> Path:
    """One style; writes ``<style>.pickle`` and ``<style>.json`` (bytes of
    parameters, gradients and optimizer state the program holds at the end)."""
    import json

    torch.manual_seed(0)
    model = models.SmallTransformer()
    params = list(model.parameters())
    if style == "fused":
        opts = [torch.optim.AdamW(params, lr=1e-3, fused=True)]
    elif style == "single_tensor":
        opts = [torch.optim.AdamW(params, lr=1e-3, foreach=False)]
    elif style == "two_optimizers":
        half = len(params) // 2
        opts = [torch.optim.SGD(params[:half], lr=1e-2, momentum=0.9), torch.optim.AdamW(params[half:], lr=1e-3)]
    else:
        opts = [torch.optim.AdamW(params, lr=1e-3)]
    micro = 2 if style == "accumulate" else 1
    x, y = torch.randn(8, 32, 64), torch.randint(0, 10, (8,))

    def step() -> None:
        for o in opts:
            o.zero_grad(set_to_none=style != "set_to_none_false")
        for _ in range(micro):
            loss = nn.functional.cross_entropy(model(x), y) / micro
            loss.backward()
            del loss
        for o in opts:
            o.step()

    step()
    path = out / f"{style}.pickle"
    with vramscope.record(path, backend="allocator"):
        for _ in range(steps):
            step()
            vramscope.step()

    def nbytes(ts: list) -> int:
        return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in ts}.values())

    truth = {
        "parameter": nbytes(params),
        "gradient": nbytes([p.grad for p in params if p.grad is not None]),
        # Tensors of the optimizers' state on the device: on the CPU the
        # step counters are among them (4 bytes each).
        "optimizer_state": nbytes([v for o in opts for st in o.state.values() for v in st.values() if v.dim() > 0]),
    }
    (out / f"{style}.json").write_text(json.dumps(truth))
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--only", default=None)
    ap.add_argument("--backend", default="profiler", help="for zoo cells: profiler (labelled) or allocator (as a GPU recording reads)")
    ap.add_argument("--micro", type=int, default=1, help="for zoo cells: micro-batches a step, gradients accumulated")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.only in STYLES:
        print(record_style(a.only, a.out))
        return
    if a.only and a.only.startswith("zoo_"):
        arch, style = a.only[len("zoo_"):].split("_", 1)
        print(record_zoo(arch, style, a.out, backend=a.backend, micro=a.micro))
        return
    for name in RUNS:
        if a.only and a.only != name:
            continue
        print(record(name, a.out, a.iterations))


if __name__ == "__main__":
    main()

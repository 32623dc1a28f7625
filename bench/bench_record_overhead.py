"""What vramscope's own Python work costs a short, CPU-bound training step.

On CUDA, ``vramscope.record`` is PyTorch's allocator history plus vramscope's
Python: global module and optimizer hooks (the Tagger: parameters, gradients,
optimizer state, the batch, and the ``phase=`` allocation metadata around the
forward and the optimizer step) and ``vramscope.step()`` at the end of each
iteration. The history is PyTorch's cost; this measures the rest, on the CPU,
on the GPT of ``tests/fixtures/gpu/programs/common.py`` made small
(d=32, 6 layers, batch 2 x 16 tokens: 53 module calls a step), in
alternating rounds so drift cancels:

* ``none``: no hooks;
* ``hooks``: two no-op global module hooks and two optimizer hooks, the floor
  for any recorder that sees module calls (PyTorch's slow call path);
* ``tagger``: vramscope's hooks as on the CPU (no metadata);
* ``tagger+meta``: as on CUDA: the ``phase=`` metadata set and restored
  through functions that cost what PyTorch's do (a C call each);
* ``record``: ``vramscope.record(backend="allocator")`` with
  ``vramscope.step()`` each iteration, beside ``allocator``: the same
  recorder with vramscope's hooks and step work left out.

    .venv/bin/python bench/bench_record_overhead.py [--steps 200] [--rounds 6]

Prints each configuration's median step time, its cost over the one below it
per step and per module call.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "gpu" / "programs"))
# The GPU programs' model, made small below; its module makes $GOUT on import.
os.environ.setdefault("GOUT", tempfile.mkdtemp(prefix="vramscope-bench-"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import vramscope  # noqa: E402
from common import GPT as _GPT, VOCAB, noop_hooks, train_step  # noqa: E402
from vramscope._annotate import hooks as _hooks  # noqa: E402
from vramscope._annotate.tags import Tagger  # noqa: E402


def GPT():
    """common.py's GPT, small: d=32, 6 layers, 2 heads (53 module calls a step)."""
    return _GPT(d=32, layers=6, heads=2, maxlen=64)

class _Meta:
    """Stand-ins for ``torch.cuda.memory._set_memory_metadata`` /
    ``_get_memory_metadata``: one C call each (``str`` methods)."""

    def __init__(self) -> None:
        self.value = ""

    def set(self, s: str) -> None:
        self.value = str(s)

    def get(self) -> str:
        return str(self.value)


@contextlib.contextmanager
def tagger(meta: bool):
    t = Tagger(cuda=False)
    if meta:
        m = _Meta()
        t._set_meta, t._get_meta = m.set, m.get
    t.install()
    try:
        yield
    finally:
        t.uninstall()


@contextlib.contextmanager
def recording(path: str, hooks: bool):
    if hooks:
        with vramscope.record(path, backend="allocator"):
            yield True
        return
    # The same recorder without vramscope's hooks and step work.
    with vramscope.record(path, backend="allocator"):
        _hooks.deactivate(_hooks._active)
        yield False


def median_step(model, opt, batches, steps: int, stepping: bool) -> float:
    times = []
    for i in range(steps):
        x, y = batches[i % len(batches)]
        t = time.perf_counter()
        train_step(model, opt, x, y)
        if stepping:
            vramscope.step()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def module_calls(model, batch) -> int:
    n = [0]

    def count(m, a):
        n[0] += 1

    from torch.nn.modules import module as nn_module

    h = nn_module.register_module_forward_pre_hook(count)
    try:
        model(batch)
    finally:
        h.remove()
    return n[0]


def per_call_costs(reps: int = 2000) -> None:
    """Cost per module call, from the forward of 200 ``nn.Identity`` (no
    tensor work), the best of 7 timings: no hooks, no-op global hooks,
    vramscope's hooks; and per optimizer step, the Tagger's work at a step
    of the GPT's AdamW (78 parameters) with new gradients (``set_to_none``)
    and with the same ones."""
    import timeit

    chain = nn.Sequential(*[nn.Identity() for _ in range(200)])
    x = torch.zeros(1)
    calls = 201

    def fwd():
        with torch.no_grad():
            chain(x)

    def best(ctx) -> float:
        with ctx:
            return min(timeit.repeat(fwd, number=reps // 10, repeat=7)) / (reps // 10)

    t_none = best(contextlib.nullcontext())
    t_hooks = best(noop_hooks())
    t_tag = best(tagger(True))
    print(f"per module call: PyTorch's hook path {(t_hooks - t_none) / calls * 1e9:6.0f} ns, "
          f"vramscope's hooks {(t_tag - t_none) / calls * 1e9:6.0f} ns "
          f"({(t_tag - t_hooks) / calls * 1e9:.0f} ns of vramscope's own)")
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    params = list(model.parameters())
    t = Tagger(cuda=False)
    t._tag_optimizer(opt, everything=True)
    t._optimizers.add(opt)
    t._stepped.add(opt)
    for p in params:
        p.grad = torch.zeros_like(p)

    def same():
        t._step_pre(opt, (), {})
        t._step_post(opt, (), {})

    def new():
        for p in params:
            p.grad = torch.zeros_like(p)
        same()

    def grads_only():
        for p in params:
            p.grad = torch.zeros_like(p)

    n = 200
    t_same = min(timeit.repeat(same, number=n, repeat=5)) / n
    t_new = (min(timeit.repeat(new, number=n, repeat=5)) - min(timeit.repeat(grads_only, number=n, repeat=5))) / n
    print(f"per optimizer step ({len(params)} parameters): {t_same * 1e6:6.1f} µs with the same gradients, "
          f"{t_new * 1e6:6.1f} µs with new ones")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    torch.set_num_threads(1)
    per_call_costs()
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, VOCAB, (2, 16), generator=g), torch.randint(0, VOCAB, (2, 16), generator=g))
               for _ in range(8)]
    calls = module_calls(model, batches[0][0])
    tmp = tempfile.mkdtemp(prefix="vramscope-bench-")
    path = os.path.join(tmp, "r.pickle")
    configs = {
        "none": lambda: contextlib.nullcontext(False),
        "hooks": noop_hooks,
        "tagger": lambda: tagger(False),
        "tagger+meta": lambda: tagger(True),
        "allocator": lambda: recording(path, False),
        "record": lambda: recording(path, True),
    }
    median_step(model, opt, batches, 20, False)  # warm-up
    times = {k: [] for k in configs}
    for r in range(a.rounds):
        order = list(configs) if r % 2 == 0 else list(reversed(configs))
        for k in order:
            with configs[k]() as stepping:
                times[k].append(median_step(model, opt, batches, a.steps, bool(stepping)))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"CPU, torch {torch.__version__}, 1 thread; {calls} module calls a step; "
          f"median of {a.rounds} rounds x {a.steps} steps")
    print(f"{'configuration':14s} {'ms/step':>9s} {'over':>12s} {'µs/step':>9s} {'µs/call':>8s} {'ratio':>7s}")
    base = {"hooks": "none", "tagger": "none", "tagger+meta": "none", "record": "allocator"}
    for k, v in med.items():
        b = base.get(k)
        if b is None:
            print(f"{k:14s} {v * 1e3:9.3f}")
            continue
        d = v - med[b]
        print(f"{k:14s} {v * 1e3:9.3f} {b:>12s} {d * 1e6:9.1f} {d * 1e6 / calls:8.2f} {v / med[b]:7.3f}")


if __name__ == "__main__":
    main()

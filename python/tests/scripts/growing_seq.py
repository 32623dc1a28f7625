"""A causal language model whose sequence length doubles every step, trained
on the CPU under ``vramscope.record(backend="allocator", cpu_limit=...)``:
the limit stands for a device's memory, so the run fails part way as it
would on a GPU of that size.

    python growing_seq.py VARIANT OUT [LIMIT]

VARIANT ``baseline`` is the program as written; ``checkpoint`` runs every
layer under ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``
(what ``vramscope advise`` offers). LIMIT is bytes or ``"60MiB"``
(default ``LIMIT`` below). Prints the step it failed at (``oom at step N``)
or ``completed``; either way the recording is written to OUT.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import advise_runs  # noqa: E402

import vramscope  # noqa: E402

STEPS = 6
FIRST = 32  # tokens at the first step; doubled each step up to FIRST * 2**(STEPS-1)
BATCH = 8
LIMIT = "120MiB"


def lengths():
    return [FIRST * 2**k for k in range(STEPS)]


def main(variant: str, out: str, limit: str = LIMIT) -> None:
    torch.manual_seed(0)
    model, x, y, loss_fn = advise_runs.transformer(BATCH, seq=lengths()[-1])
    tokens = torch.randint(0, 2000, (BATCH, lengths()[-1] + 1))
    if variant == "checkpoint":
        model.checkpointing = len(model.blocks.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    step = 0
    try:
        with vramscope.record(out, backend="allocator", cpu_limit=limit):
            for step, n in enumerate(lengths(), 1):
                x, y = tokens[:, :n], tokens[:, 1 : n + 1]
                out_ = model(x)
                loss = loss_fn(out_, y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                vramscope.step()
        print("completed")
    except RuntimeError as err:
        if "DefaultCPUAllocator" not in str(err):
            raise
        print(f"oom at step {step}")


if __name__ == "__main__":
    main(*sys.argv[1:4])

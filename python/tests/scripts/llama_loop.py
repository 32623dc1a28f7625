"""The zoo's Llama (4 layers, Hugging Face) trained for a few AdamW steps
under ``vramscope.record`` on the CPU, each step's logits kept in a list
(a leak): the recording behind tests/fixtures/recorded/llama_kept_logits.

    python python/tests/scripts/llama_loop.py OUT [STEPS]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import zoo  # noqa: E402

import vramscope  # noqa: E402


def main(out: str, steps: int = 4) -> None:
    torch.manual_seed(0)
    case = zoo.llama()
    model, (x,), (y,) = case.model, case.inputs, case.targets
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    logits = []
    with vramscope.record(out, backend="allocator"):
        for _ in range(steps):
            out_ = model(x)
            loss = case.loss_fn(out_, y)
            loss.backward()
            logits.append(out_.logits)
            opt.step()
            opt.zero_grad()
            vramscope.step()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4)

"""Training loops with the classic memory bugs planted, and a clean control.

Run as ``python leaky_loops.py VARIANT OUT.pickle [--iters N]``; the loop is
recorded by vramscope's own recorder (the CPU path without a GPU), one
``vramscope.step()`` per iteration. Variants:

* ``clean``: zero_grad(set_to_none=True) before the forward pass.
* ``zero_grad_late``: zero_grad() after the forward pass, right before
  backward: the previous iteration's gradients are alive during the forward.
* ``zero_grad_keep``: zero_grad(set_to_none=False) after the optimizer step:
  gradients stay allocated through every forward pass.
* ``loss_sum``: a running validation loss summed with ``total_loss += loss``
  on a batch that is never backpropagated, so every iteration's graph (and
  the activations it saved) stays alive.
* ``append``: the model appends its hidden features to a list in forward.
* ``cycle``: two ``Node`` objects referencing each other, each holding a
  tensor; only Python's cycle collector frees them.
* ``generator_cycle``: an object keeps a generator that reads it
  (``self.it = self._batches()``), with ``gc.collect()`` every 4 iterations:
  the collector breaks that loop by closing the generator, and frees the
  tensor by reference counting inside the collection, counting it in no
  ``collected``.
* ``tensor_hook``: each iteration's output gets a gradient hook that refers
  to the output itself (``out.register_hook(lambda g: ... out ...)``): on a
  tensor made by an operation PyTorch keeps the hook where Python's collector
  cannot follow it, and the output is never freed.
"""

from __future__ import annotations

import argparse
import gc
from typing import Iterator, List, Optional

import torch
from torch import nn

import vramscope

VARIANTS = ("clean", "zero_grad_late", "zero_grad_keep", "loss_sum", "append", "cycle", "generator_cycle", "tensor_hook")


class MLP(nn.Module):
    """Three linear layers; with ``keep=True`` forward stores its hidden features."""

    def __init__(self, keep: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(256, 1024)
        self.fc2 = nn.Linear(1024, 1024)
        self.fc3 = nn.Linear(1024, 10)
        self.keep = keep
        self.features: List[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        h = torch.relu(self.fc2(h))
        if self.keep:
            self.features.append(h)  # the bug: keeps h and its graph alive
        return self.fc3(h)


class Node:
    """A node of a doubly linked structure that holds a tensor."""

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value
        self.other: Optional["Node"] = None


def link(a: torch.Tensor, b: torch.Tensor) -> Node:
    """Two nodes that reference each other: a reference cycle."""
    x, y = Node(a), Node(b)
    x.other, y.other = y, x
    return x


class Batches:
    """Holds a tensor and a generator over itself: a loop through the
    generator's frame (its local ``self``)."""

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value
        self.it = self._batches()
        next(self.it)

    def _batches(self) -> Iterator[torch.Tensor]:
        while True:
            yield self.value


def forward_with_probe(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = model(x)
    out.register_hook(lambda g: g * (out.detach().norm() > 0))  # the bug: the hook keeps `out`
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("variant", choices=VARIANTS)
    ap.add_argument("out")
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = MLP(keep=args.variant == "append")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(2048, 256), torch.randint(0, 10, (2048,))
    xv = torch.randn(2048, 256)
    total_loss: torch.Tensor | float = 0.0
    with vramscope.record(args.out):
        for step in range(args.iters):
            if args.variant not in ("zero_grad_late", "zero_grad_keep"):
                opt.zero_grad(set_to_none=True)
            out = forward_with_probe(model, x) if args.variant == "tensor_hook" else model(x)
            loss = nn.functional.cross_entropy(out, y)
            if args.variant == "cycle":
                link(out * 2, out.detach() * 3)
            if args.variant == "generator_cycle":
                Batches(out.detach() * 2)
            if args.variant == "zero_grad_late":
                opt.zero_grad()
            loss.backward()
            opt.step()
            if args.variant == "zero_grad_keep":
                opt.zero_grad(set_to_none=False)
            if args.variant == "loss_sum":
                val_loss = nn.functional.cross_entropy(model(xv), y)
                total_loss += val_loss  # the bug: keeps the graph of every iteration
            else:
                total_loss += loss.item()
            if args.variant == "generator_cycle" and step % 4 == 3:
                gc.collect()
            vramscope.step()
    print(float(total_loss.detach() if isinstance(total_loss, torch.Tensor) else total_loss))


if __name__ == "__main__":
    main()

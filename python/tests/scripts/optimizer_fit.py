"""A small regression fitted with the optimizer named on the command line,
the way pytorch/examples' time_sequence_prediction fits its sine waves with
L-BFGS: the whole data set in one batch, ``optimizer.step(closure)``.

``python -m vramscope run -q --no-report -o OUT optimizer_fit.py OPTIMIZER
[STEPS] [HISTORY] [MAX_ITER]`` records it. ``OPTIMIZER`` is ``lbfgs``
(``HISTORY`` is its ``history_size``, 100 by default as in PyTorch;
``MAX_ITER`` its evaluations per step, 20 by default), ``adadelta`` (as
pytorch/examples' MNIST trains), ``sgd`` (momentum 0.9), ``sgd_nesterov``,
``adam`` or ``adam_amsgrad``. An L-BFGS step evaluates the closure up to
20 times, and each evaluation after the first stores a pair of vectors the
size of all parameters: its history grows for 100 evaluations (5 steps),
then stays. ``vramscope.step()`` marks each step.
"""

from __future__ import annotations

import sys

import torch
import torch.nn as nn

import vramscope


def make_optimizer(name: str, params, history: int, max_iter: int):
    if name == "lbfgs":
        return torch.optim.LBFGS(params, lr=0.5, history_size=history, max_iter=max_iter)
    if name == "adadelta":
        return torch.optim.Adadelta(params, lr=1.0)
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    if name == "sgd_nesterov":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, nesterov=True)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    if name == "adam_amsgrad":
        return torch.optim.Adam(params, lr=1e-3, amsgrad=True)
    raise SystemExit(f"unknown optimizer {name!r}")


def model_and_data():
    """The model, its inputs and targets (also what ``estimate`` is given
    in the tests)."""
    torch.manual_seed(0)
    # 64 → 256 → 256 → 1, fp64 as the sine-wave example: 82,689 parameters
    # (661,512 bytes), so each L-BFGS pair is 1.26 MiB.
    model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1)).double()
    x = torch.randn(512, 64, dtype=torch.float64)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    return model, x, y


def main(name: str, steps: int, history: int, max_iter: int) -> None:
    model, x, y = model_and_data()
    loss_fn = nn.MSELoss()
    optimizer = make_optimizer(name, model.parameters(), history, max_iter)
    for _ in range(steps):
        def closure():
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            return loss

        optimizer.step(closure)
        vramscope.step()


if __name__ == "__main__":
    main(
        sys.argv[1],
        int(sys.argv[2]) if len(sys.argv) > 2 else 8,
        int(sys.argv[3]) if len(sys.argv) > 3 else 100,
        int(sys.argv[4]) if len(sys.argv) > 4 else 20,
    )

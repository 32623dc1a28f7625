"""A training script the way most are written: the loop at module level, no
function around it, and a holdout check that keeps every iteration's graph
(``self.total = self.total + ...`` on a tensor that requires grad).

Run as ``python module_loop.py OUT.pickle [BACKEND]``; the tests read the
line numbers below from this file, by the markers in the comments.
"""

import sys

import torch
from torch import nn

import vramscope


class Validator:
    """Scores the model on a held-out batch after every step."""

    def __init__(self, net: nn.Module, x: torch.Tensor) -> None:
        self.net, self.x = net, x
        self.total: torch.Tensor | float = 0.0

    def validate(self) -> None:
        self.total = self.total + self.net(self.x).pow(2).mean()  # marker: validate


torch.manual_seed(0)
net = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
x, y = torch.randn(512, 256), torch.randint(0, 10, (512,))
validator = Validator(net, torch.randn(512, 256))
backend = sys.argv[2] if len(sys.argv) > 2 else None
with vramscope.record(sys.argv[1], backend=backend):
    for step in range(10):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(net(x), y)  # marker: forward
        loss.backward()  # marker: backward
        opt.step()
        validator.validate()
        vramscope.step()

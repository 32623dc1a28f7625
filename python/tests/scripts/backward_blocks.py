"""A stack of three MLP blocks (``nn.ModuleList``) trained for three SGD
steps with momentum under ``vramscope.record`` on the CPU, ``zero_grad``
first in each step: the peak is the first optimizer step's, where every
block's gradients (made in backward, with only ``loss.backward()`` on their
stacks) are alive. The recording behind
tests/fixtures/recorded/backward_blocks.pickle.gz.

    python python/tests/scripts/backward_blocks.py OUT
"""

from __future__ import annotations

import sys

import torch
from torch import nn

import vramscope


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(256, 1024), nn.Linear(1024, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(x)))


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x


def main(out: str) -> None:
    torch.manual_seed(0)
    model = Stack()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 256)
    with vramscope.record(out, backend="allocator"):
        for _ in range(3):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            vramscope.step()


if __name__ == "__main__":
    main(sys.argv[1])

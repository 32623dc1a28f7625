"""The small real models the recorder tests and the overhead script train.

Kept apart from the tests so that subprocess scripts and ``overhead.py`` train
exactly the same thing.
"""

from __future__ import annotations

from typing import Callable, Tuple

import torch
from torch import nn

BATCH = 8


class SmallCNN(nn.Module):
    """Three conv layers on 32x32 RGB images, 10 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class SmallTransformer(nn.Module):
    """``nn.TransformerEncoder``: d_model 64, 4 heads, 2 layers, on sequences
    of 32 vectors, mean-pooled into 10 classes."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(1))


def build(kind: str) -> Tuple[nn.Module, torch.optim.Optimizer, Callable[[], Tuple[torch.Tensor, torch.Tensor]]]:
    """Model, Adam optimizer and a batch factory for ``"cnn"`` or ``"transformer"``."""
    torch.manual_seed(0)
    if kind == "cnn":
        model: nn.Module = SmallCNN()
        shape: Tuple[int, ...] = (BATCH, 3, 32, 32)
    elif kind == "transformer":
        model = SmallTransformer()
        shape = (BATCH, 32, 64)
    else:
        raise ValueError(kind)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def batch() -> Tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(*shape), torch.randint(0, 10, (BATCH,))

    return model, opt, batch


def train_step(model: nn.Module, opt: torch.optim.Optimizer, batch: Callable[[], Tuple[torch.Tensor, torch.Tensor]]) -> float:
    """One forward/backward/update on a fresh batch; returns the loss."""
    x, y = batch()
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.detach())

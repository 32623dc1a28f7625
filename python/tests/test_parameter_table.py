"""The recorder's table of the model's parameters (``vramscope.parameters``):
each module's own parameters, summed over a repeated block's copies, and
those that train. What FSDP's rule gathers by block where part of the model
is frozen (LoRA's base model: crates/advise/tests/frozen.rs), which the
gradients alone cannot tell."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import vramscope  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_recording")


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 32)
        self.adapter = nn.Linear(32, 4, bias=False)

    def forward(self, x):
        return x + self.proj(x) + self.adapter(x).sum(-1, keepdim=True)


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 32)
        self.layers = nn.ModuleList(Block() for _ in range(3))
        self.out = nn.Linear(32, 100, bias=False)
        self.out.weight = self.embed.weight  # tied: one tensor, two modules

    def forward(self, ids):
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h)
        return self.out(h)


def test_the_table_counts_each_parameter_once_by_owner_and_what_trains(tmp_path: Path) -> None:
    model = Tied()
    for name, p in model.named_parameters():
        p.requires_grad_("adapter" in name)  # only the adapters train
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    out = tmp_path / "run.pickle"
    with vramscope.record(str(out), backend="allocator"):
        for _ in range(2):
            model(torch.randint(0, 100, (4, 8))).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    with open(out, "rb") as f:
        table = {r["path"]: r for r in pickle.load(f)["vramscope"]["parameters"]}
    # The tied weight once, for the embedding (the first owner); the output
    # layer owns nothing else.
    assert sorted(table) == ["embed", "layers[*].adapter", "layers[*].proj"], sorted(table)
    assert table["embed"] == {"path": "embed", "copies": 1, "tensors": 1, "bytes": 100 * 32 * 4, "trainable_bytes": 0}
    proj = table["layers[*].proj"]
    assert (proj["copies"], proj["tensors"], proj["bytes"], proj["trainable_bytes"]) == (3, 6, 3 * (32 * 32 + 32) * 4, 0)
    adapter = table["layers[*].adapter"]
    assert (adapter["copies"], adapter["bytes"], adapter["trainable_bytes"]) == (3, 3 * 4 * 32 * 4, 3 * 4 * 32 * 4)

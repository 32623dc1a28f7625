"""A model trained with an exponential moving average of its weights, as
each library keeps one, recorded on the CPU (the allocator recorder):

    python ema_runs.py OUT_DIR [KIND ...]

KIND: ``diffusers`` (``EMAModel``, ``foreach=True``: its update holds a
difference of every parameter), ``timm`` (``ModelEmaV3``, the EMA model
evaluated at the end, as timm's train script does), ``swa``
(``AveragedModel`` with ``get_ema_multi_avg_fn``, built inside the
recording after the first step), ``swa_before`` (the same built before the
recording starts), ``by_hand`` (``copy.deepcopy(model)`` updated with
``torch._foreach_lerp_``: no library's code), ``none``, or ``timm_bn``
(``ModelEmaV3`` of the MLP with batch norm layers: buffers the EMA's deep
copy holds too); all of them without a KIND. Writes ``OUT_DIR/KIND.pickle``
for each and prints the MLP's parameter bytes (the last KIND's).
"""

from __future__ import annotations

import copy
import os
import sys

import torch
from torch import nn

import vramscope


KINDS = ("diffusers", "timm", "swa", "swa_before", "by_hand", "timm_bn", "none")


def build(kind: str) -> nn.Module:
    if kind.endswith("_bn"):
        return nn.Sequential(
            nn.Linear(256, 1024), nn.BatchNorm1d(1024), nn.GELU(), nn.Linear(1024, 1024), nn.BatchNorm1d(1024), nn.GELU(), nn.Linear(1024, 10)
        )
    return nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 10))


def main(kind: str, out: str) -> int:
    torch.manual_seed(0)
    model = build(kind)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))

    def make():
        if kind == "diffusers":
            from diffusers.training_utils import EMAModel

            return EMAModel(model.parameters(), foreach=True)
        if kind.startswith("timm"):
            from timm.utils import ModelEmaV3

            return ModelEmaV3(model, decay=0.999)
        if kind.startswith("swa"):
            from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

            return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
        if kind == "by_hand":
            return copy.deepcopy(model).requires_grad_(False)
        return None

    def update(ema, step: int) -> None:
        if kind == "diffusers":
            ema.step(model.parameters())
        elif kind.startswith("timm"):
            ema.update(model, step=step)
        elif kind.startswith("swa"):
            ema.update_parameters(model)
        elif kind == "by_hand":
            with torch.no_grad():
                torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1e-3)

    ema = make() if kind == "swa_before" else None
    with vramscope.record(out, backend="allocator"):
        if kind not in ("swa", "swa_before"):
            ema = make()
        for step in range(4):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if ema is None:  # AveragedModel made after the first step
                ema = make()
            update(ema, step)
            vramscope.step()
        if kind.startswith("timm"):
            with torch.no_grad():
                ema.module(x)  # evaluated with the EMA's weights
    return sum(p.numel() * p.element_size() for p in model.parameters())


if __name__ == "__main__":
    out_dir = sys.argv[1]
    for kind in sys.argv[2:] or KINDS:
        param_bytes = main(kind, os.path.join(out_dir, f"{kind}.pickle"))
    print(param_bytes)

"""A model loaded from a checkpoint, then run for inference: the pattern
whose peak is the load, the checkpoint's copy of every weight alive beside
the model's until ``load_state_dict`` returns (on a GPU,
``torch.load(path, map_location="cuda")``).

``python load_checkpoint.py save PATH``: writes the checkpoint (a 4-layer
MLP of 1,024 × 1,024 weights, 16 MiB).
``python load_checkpoint.py infer PATH [copy|mmap]``: builds the model,
loads it (``copy``: ``torch.load`` then ``load_state_dict``; ``mmap``:
``torch.load(..., mmap=True)`` and ``load_state_dict(..., assign=True)``,
the checkpoint's file mapped, no second copy made), then 3 forward passes
of a batch of 64 under ``torch.no_grad()``, one ``vramscope.step()``
each."""

import sys

import torch


def build() -> torch.nn.Module:
    return torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)])


if __name__ == "__main__":
    what, path = sys.argv[1], sys.argv[2]
    if what == "save":
        torch.manual_seed(0)
        torch.save(build().state_dict(), path)
        sys.exit(0)
    import vramscope

    mode = sys.argv[3] if len(sys.argv) > 3 else "copy"
    model = build()
    if mode == "mmap":
        state = torch.load(path, mmap=True)
        model.load_state_dict(state, assign=True)
    else:
        state = torch.load(path)
        model.load_state_dict(state)
    del state
    model.eval()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(64, 1024)).sum().item()
            vramscope.step()

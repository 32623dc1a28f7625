"""Training in spawned child processes, as PyTorch's DDP tutorial starts
its ranks (``torch.multiprocessing.spawn``, no ``RANK`` in the
environment) and pytorch/examples' Hogwild its workers: the parent trains
nothing. ``python spawned_ranks.py N`` trains a small MLP for 3 steps in
each of N children; the parent allocates one small tensor.
``python spawned_ranks.py N idle``: the children only make a tensor, as a
data loader's workers do."""

import sys

import torch
import torch.multiprocessing as mp


def train(rank: int, idle: bool) -> None:
    if idle:
        torch.ones(1024).sum()
        return
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        model(torch.randn(32, 64)).sum().backward()
        opt.step()


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    x = torch.ones(16)
    mp.spawn(train, args=(sys.argv[2:] == ["idle"],), nprocs=n, join=True)
    print("done", float(x.sum()))

"""An MLP trained with ``zero_grad(set_to_none=False)``: the first backward's
gradients are zeroed in place and kept for the whole run, 5 steps of SGD
with momentum on the CPU.

    python -m vramscope run -q --no-report -o keep_grads.pickle keep_grads.py

The recording is ``tests/fixtures/recorded/keep_grads_mlp.pickle.gz``.
"""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for _ in range(5):
    opt.zero_grad(set_to_none=False)
    model(torch.randn(64, 256)).square().mean().backward()
    opt.step()

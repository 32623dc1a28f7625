"""One model, two optimizers stepping one after the other after each
backward (an encoder with AdamW, a decoder with SGD and momentum, as a
program tuning two parts at their own rates does), ``zero_grad()`` called
after the forward as pytorch/examples' ImageNet script calls it: the last
step's gradients held through each forward. 4 iterations on the CPU.

    python -m vramscope run -o two.pickle two_optimizers.py [fixed]

``fixed``: each optimizer's ``zero_grad(set_to_none=True)`` right after its
own ``step()``, as `leaks` advises for several optimizers. The recordings
are ``tests/fixtures/recorded/two_optimizers.pickle.gz`` and
``two_optimizers_fixed.pickle.gz``.
"""
import sys

import torch
import torch.nn as nn

torch.manual_seed(0)
FIXED = sys.argv[1:] == ["fixed"]
encoder = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU())
decoder = nn.Sequential(nn.Linear(1024, 2048), nn.GELU(), nn.Linear(2048, 256))
opt_enc = torch.optim.AdamW(encoder.parameters(), lr=1e-3)
opt_dec = torch.optim.SGD(decoder.parameters(), lr=1e-2, momentum=0.9)
for _ in range(4):
    x = torch.randn(1024, 256)
    out = decoder(encoder(x))
    loss = (out - x).pow(2).mean()
    if not FIXED:
        opt_enc.zero_grad()
        opt_dec.zero_grad()
    loss.backward()
    opt_enc.step()
    if FIXED:
        opt_enc.zero_grad(set_to_none=True)
    opt_dec.step()
    if FIXED:
        opt_dec.zero_grad(set_to_none=True)

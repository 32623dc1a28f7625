"""A detection fine-tune as torchvision's reference scripts run it (its
``engine.py``: the forward, then ``zero_grad()``, then backward): Faster
R-CNN with a MobileNetV3 backbone, images of varying sizes, SGD with
momentum, 4 iterations on the CPU.

    python -m vramscope run -o detection.pickle detection_zero_grad.py [fixed]

``fixed``: ``zero_grad()`` at the top of the loop instead. The recording
without it is ``tests/fixtures/recorded/detection_zero_grad_late.pickle.gz``.
"""
import random
import sys
import torch
import torchvision
from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn

torch.manual_seed(0)
random.seed(0)
model = fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=5)
model.train()
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)


def batch(n=4):
    imgs, targets = [], []
    for _ in range(n):
        h, w = random.choice([(240, 320), (320, 320), (300, 400), (360, 480)])
        imgs.append(torch.rand(3, h, w))
        k = random.randint(1, 6)
        xy = torch.rand(k, 2) * torch.tensor([w * 0.6, h * 0.6])
        wh = torch.rand(k, 2) * 60 + 10
        targets.append({"boxes": torch.cat([xy, xy + wh], 1), "labels": torch.randint(1, 5, (k,))})
    return imgs, targets


FIXED = sys.argv[1:] == ["fixed"]
for it in range(4):
    imgs, targets = batch()
    if FIXED:
        opt.zero_grad()
    losses = model(imgs, targets)
    loss = sum(losses.values())
    if not FIXED:
        opt.zero_grad()
    loss.backward()
    opt.step()
    print(it, float(loss))

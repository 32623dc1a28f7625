"""Semantic segmentation as torchvision's reference trains it
(``references/segmentation/train.py``): DeepLabV3 with a MobileNetV3-Large
backbone (no weights, 21 classes) and its auxiliary head, the loss of both
heads (``out`` + 0.5 × ``aux``), SGD with momentum over three parameter
groups, ``zero_grad()`` between the forward and ``backward()``, 4 images of
160×160 per step, 5 steps on the CPU.

    python -m vramscope run -o segmentation.pickle segmentation.py [checkpoint]

``checkpoint``: the change ``vramscope advise`` offers for it, made: every
layer of the seven inverted-residual blocks it names run under
``torch.utils.checkpoint`` (each block's ``Sequential`` reached with
``model.get_submodule``: the backbone is torchvision's
``IntermediateLayerGetter``, a ``ModuleDict`` whose keys are "1", "2", …).
The recordings are ``tests/fixtures/recorded/segmentation_deeplabv3.pickle.gz``
and ``segmentation_deeplabv3_checkpointed.pickle.gz``.
"""
import sys
import types

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large

# The blocks `vramscope advise` names for this program.
CHECKPOINTED = ("backbone.1.block", "backbone.2.block", "backbone.3.block", "backbone.7.block", "backbone.8.block", "backbone.9.block", "backbone.10.block")

torch.manual_seed(0)
model = deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21, aux_loss=True)
model.train()
if sys.argv[1:] == ["checkpoint"]:

    def checkpointed(self, h):
        for block in self:
            h = checkpoint(block, h, use_reentrant=False)
        return h

    for name in CHECKPOINTED:
        seq = model.get_submodule(name)
        seq.forward = types.MethodType(checkpointed, seq)

params = [
    {"params": [p for p in model.backbone.parameters() if p.requires_grad]},
    {"params": [p for p in model.classifier.parameters() if p.requires_grad]},
    {"params": [p for p in model.aux_classifier.parameters() if p.requires_grad], "lr": 0.02},
]
opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)


def criterion(inputs, target):
    losses = {name: F.cross_entropy(x, target, ignore_index=255) for name, x in inputs.items()}
    if len(losses) == 1:
        return losses["out"]
    return losses["out"] + 0.5 * losses["aux"]


for step in range(5):
    image = torch.randn(4, 3, 160, 160)
    target = torch.randint(0, 21, (4, 160, 160))
    output = model(image)
    loss = criterion(output, target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.3f}")

"""A Lightning module trained with automatic optimization, whose
``zero_grad`` Lightning runs inside the optimizer's closure, after
``training_step``: the last step's gradients (24.09 MiB here) are held
through every forward. ``fixed`` moves it as ``vramscope advise``'s
``zero_grad_first`` row says: ``optimizer_zero_grad`` does nothing and
``on_train_batch_start`` zeroes (``python/tests/test_zero_grad.py``).

``python -m vramscope run -q --no-report -o OUT lightning_zero_grad.py [fixed]``
"""

import sys
import torch, torch.nn as nn, torch.nn.functional as F
import lightning as L

FIXED = len(sys.argv) > 1 and sys.argv[1] == "fixed"

class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    if FIXED:
        def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
            pass  # zeroed before training_step instead

        def on_train_batch_start(self, batch, batch_idx):
            self.optimizers().zero_grad(set_to_none=True)

torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(256 * 6, 1024), torch.randint(0, 10, (256 * 6,)))
trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Classifier(), torch.utils.data.DataLoader(data, batch_size=256))

"""A Hugging Face Trainer and a Lightning Trainer that evaluate on batches
larger than they train on, so that the run peaks in evaluation.

``python framework_eval.py hf|lightning EVAL_BATCH`` (under ``vramscope
run``): GPT-2 (2 layers) trained on batches of 4 for 8 steps, evaluated
every 4 steps on 128 sequences; a Lightning MLP trained on batches of 16
for two epochs of 8 steps, validated (sanity check included) on 4,096
samples. The evaluation sets do not depend on EVAL_BATCH, so two runs
differ only by the evaluation batch.
"""

from __future__ import annotations

import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


def hf(eval_batch: int) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class Data(torch.utils.data.Dataset):
        def __init__(self, n: int) -> None:
            self.n = n

        def __len__(self) -> int:
            return self.n

        def __getitem__(self, i: int):
            g = torch.Generator().manual_seed(i)
            ids = torch.randint(0, 512, (64,), generator=g)
            return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=512, n_positions=64))
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=4, per_device_eval_batch_size=eval_batch,
            num_train_epochs=1, report_to=[], save_strategy="no", logging_steps=100, use_cpu=True,
            disable_tqdm=True, eval_strategy="steps", eval_steps=4,
        )
        Trainer(model=model, args=args, train_dataset=Data(4 * 8), eval_dataset=Data(128)).train()


def lightning(eval_batch: int) -> None:
    import lightning as L

    class Classifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", F.cross_entropy(self.net(x), y))

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    train = torch.utils.data.TensorDataset(torch.randn(16 * 8, 64), torch.randint(0, 10, (16 * 8,)))
    val = torch.utils.data.TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Classifier(), torch.utils.data.DataLoader(train, batch_size=16),
                torch.utils.data.DataLoader(val, batch_size=eval_batch))


if __name__ == "__main__":
    {"hf": hf, "lightning": lightning}[sys.argv[1]](int(sys.argv[2]))

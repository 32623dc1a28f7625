"""A language model trained, saved, loaded back and evaluated, the way
pytorch/examples' word_language_model does it: no optimizer (the
parameters updated by hand), ``model.zero_grad()`` at the top of each step,
a validation pass after the epoch, then the saved model loaded with
``torch.load`` and a test pass under ``torch.no_grad()``.

``python -m vramscope run -q --no-report -o OUT reload_eval.py`` records
it. The loaded model's parameters come from ``torch.load``'s unpickling,
which the CPU recorder sees without a stack: they are not gradients (the
leak finder took them for the previous step's, held through the test
pass's forwards), and the last step's gradients, alive through the
validation pass, are not kept from one step to the next.
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch
import torch.nn as nn


class LSTMModel(nn.Module):
    def __init__(self, ntoken: int = 2000, ninp: int = 64, nhid: int = 64, nlayers: int = 2):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nlayers, self.nhid = nlayers, nhid

    def forward(self, x, hidden):
        output, hidden = self.rnn(self.encoder(x), hidden)
        return torch.log_softmax(self.decoder(output), dim=-1), hidden

    def init_hidden(self, bsz: int):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def batches(data: torch.Tensor, bptt: int = 35):
    for i in range(0, data.size(0) - 1, bptt):
        n = min(bptt, data.size(0) - 1 - i)
        yield data[i : i + n], data[i + 1 : i + 1 + n].reshape(-1)


def evaluate(model: LSTMModel, data: torch.Tensor, criterion) -> float:
    model.eval()
    total = 0.0
    hidden = model.init_hidden(data.size(1))
    with torch.no_grad():
        for x, y in batches(data):
            output, hidden = model(x, hidden)
            total += len(x) * criterion(output.view(-1, output.size(-1)), y).item()
    return total / len(data)


def main(save: str) -> None:
    torch.manual_seed(0)
    train_data = torch.randint(0, 2000, (35 * 8 + 1, 20))
    val_data = torch.randint(0, 2000, (35 * 4 + 1, 10))
    model = LSTMModel()
    criterion = nn.NLLLoss()
    lr = 20.0
    model.train()
    hidden = model.init_hidden(20)
    for x, y in batches(train_data):
        model.zero_grad()
        hidden = tuple(h.detach() for h in hidden)
        output, hidden = model(x, hidden)
        loss = criterion(output.view(-1, output.size(-1)), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
    evaluate(model, val_data, criterion)
    with open(save, "wb") as f:
        torch.save(model, f)
    with open(save, "rb") as f:
        model = torch.load(f, weights_only=False)
    print(f"test loss {evaluate(model, val_data, criterion):.3f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.mkdtemp(), "model.pt"))

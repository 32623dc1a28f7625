"""Everyday training programs, written as their libraries' users write them,
each in a correct form and with the classic leaks planted.

Run as ``python corpus.py PROGRAM FORM`` (under ``vramscope run``): the
programs never call vramscope themselves, as the programs a new user brings
do not. ``FORMS`` lists each program's forms; ``clean`` is correct. Every
planted line carries ``# PLANTED`` (``# PLANTED: FORM`` where a program
plants several) so that the tests can find the line the finding must name. Sizes are small so that a run takes seconds on a CPU.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
STEPS = 6

# Program -> form -> (leak kind, variable that holds it): what the tests
# expect. Kinds: "growth" (one site kept), "retained_graph" (a kept graph),
# "growing_tensor" (one tensor made again larger every iteration).
FORMS: Dict[str, Dict[str, Any]] = {
    "vision": {"clean": None, "loss_kept": ("growth", "losses")},
    "nanogpt": {"clean": None, "metric_graph": ("retained_graph", "running")},
    "hf_loop": {"clean": None, "outputs_kept": ("growth", "all_logits")},
    "hf_trainer": {"clean": None},
    "lightning": {"clean": None, "outputs_kept": ("growth", "model")},
    "accelerate": {"clean": None, "traceback_kept": ("growth", "errors")},
    "gan": {"clean": None, "module_cache": ("growth", "G")},
    "grad_accum": {"clean": None, "loss_kept": ("growth", "history")},
    "amp": {"clean": None, "outputs_kept": ("growth", "preds")},
    "eval": {"clean": None, "metric_graph": ("retained_graph", "total")},
    "rnn": {"clean": None, "hidden_carried": ("retained_graph", "h")},
    "metrics": {"clean": None, "cat_on_device": ("growing_tensor", "preds")},
    "seq_lm": {"clean": None, "dynamic_pad": None, "curriculum": None, "hook_per_step": ("growth", "feats")},
    "generation": {"clean": None},
    "keepers": {"clean": None, "closure": ("growth", "callbacks"), "per_class": ("growth", "per_class")},
}

# Warnings that are true of correct code because of the framework's own
# order, expected in every form of the program: Lightning's automatic
# optimization runs zero_grad inside the optimizer's closure, after
# training_step, so the previous gradients live through each forward pass
# (the fix is Lightning's optimizer_zero_grad hook).
FRAMEWORK_WARNINGS: Dict[str, str] = {"lightning": "held_gradients"}


def vision(form: str) -> None:
    import torchvision

    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = torch.utils.data.TensorDataset(torch.randn(96, 3, 32, 32), torch.randint(0, 10, (96,)))
    loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=True)
    losses: List[Any] = []
    for x, y in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if form == "loss_kept":
            losses.append(loss)  # PLANTED
        else:
            losses.append(loss.item())
    print("vision", sum(float(v) for v in losses) / len(losses))


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 256, d: int = 64, layers: int = 2, ctx: int = 32) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, 4) for _ in range(layers))
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        for b in self.blocks:
            x = b(x, mask)
        logits = self.head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def nanogpt(form: str) -> None:
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = torch.randint(0, 256, (4096,))
    running: Any = 0.0
    for it in range(STEPS):
        ix = torch.randint(0, len(data) - 33, (8,))
        x = torch.stack([data[i : i + 32] for i in ix])
        y = torch.stack([data[i + 1 : i + 33] for i in ix])
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)  # as nanoGPT's train.py: right after the step
        # Evaluate on a held-out batch every iteration (nanoGPT's
        # estimate_loss runs under torch.no_grad()).
        if form == "metric_graph":
            val = model(x.flip(0), y.flip(0))
            running = running + val  # PLANTED
        else:
            with torch.no_grad():
                val = model(x.flip(0), y.flip(0))
            running += val.item()
    print("nanogpt", float(running) / STEPS)


def _tiny_gpt2() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=512, n_positions=64)
    return GPT2LMHeadModel(cfg)


def hf_loop(form: str) -> None:
    model = _tiny_gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    all_logits: List[Any] = []
    model.train()
    for step in range(STEPS):
        ids = torch.randint(0, 512, (4, 32))
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        if form == "outputs_kept":
            all_logits.append(out.logits)  # PLANTED
        else:
            all_logits.append(out.logits.argmax(-1).tolist())
    print("hf_loop", len(all_logits))


def hf_trainer(form: str) -> None:
    import tempfile

    from transformers import Trainer, TrainingArguments

    class Data(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4 * STEPS

        def __getitem__(self, i: int) -> Dict[str, torch.Tensor]:
            g = torch.Generator().manual_seed(i)
            ids = torch.randint(0, 512, (32,), generator=g)
            return {"input_ids": ids, "labels": ids}

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=4, num_train_epochs=1, report_to=[],
            save_strategy="no", logging_steps=100, use_cpu=True, disable_tqdm=True,
        )
        Trainer(model=_tiny_gpt2(), args=args, train_dataset=Data()).train()
    print("hf_trainer done")


def lightning(form: str) -> None:
    import lightning as L

    class Classifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
            self.step_outputs: List[Any] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = F.cross_entropy(self.net(x), y)
            if form == "outputs_kept":
                self.step_outputs.append(loss)  # PLANTED
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(16 * STEPS, 64), torch.randint(0, 10, (16 * STEPS,)))
    model = Classifier()
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=16))
    print("lightning", len(model.step_outputs))


def accelerate(form: str) -> None:
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.utils.data.TensorDataset(torch.randn(16 * STEPS, 64), torch.randint(0, 10, (16 * STEPS,)))
    model, opt, loader = acc.prepare(model, opt, torch.utils.data.DataLoader(data, batch_size=16))
    errors: List[Exception] = []

    def checked_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = model(x)
        if form == "traceback_kept":
            raise FloatingPointError("loss check failed")
        return F.cross_entropy(logits, y)

    for x, y in loader:
        opt.zero_grad()
        try:
            loss = checked_loss(x, y)
        except FloatingPointError as err:
            errors.append(err)  # PLANTED
            continue
        acc.backward(loss)
        opt.step()
    print("accelerate", len(errors))


def gan(form: str) -> None:
    class Generator(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 64))
            self.cache: Dict[int, torch.Tensor] = {}

        def forward(self, z: torch.Tensor, step: int = -1) -> torch.Tensor:
            out = self.net(z)
            if form == "module_cache":
                self.cache[step] = out  # PLANTED
            return out

    G = Generator()
    D = nn.Sequential(nn.Linear(64, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1))
    opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()
    for step in range(STEPS):
        real = torch.randn(32, 64)
        fake = G(torch.randn(32, 16), step)
        opt_d.zero_grad()
        d_loss = bce(D(real), torch.ones(32, 1)) + bce(D(fake.detach()), torch.zeros(32, 1))
        d_loss.backward()
        opt_d.step()
        g_loss = bce(D(fake), torch.ones(32, 1))
        g_loss.backward()
        opt_g.step()
        # The generator's gradients freed after its own step: zeroed before
        # its next backward instead (`opt_g.zero_grad()` above it), they
        # are kept through the next loop's discriminator step, where this
        # run peaks 17,920 B higher (`leaks`' `held_gradients`, measured).
        opt_g.zero_grad(set_to_none=True)
    print("gan", float(g_loss))


def grad_accum(form: str) -> None:
    model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    history: List[Any] = []
    accum = 4
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        for micro in range(accum):
            x, y = torch.randn(16, 128), torch.randint(0, 10, (16,))
            loss = F.cross_entropy(model(x), y) / accum
            loss.backward()
            if form == "loss_kept":
                history.append(loss)  # PLANTED
            else:
                history.append(loss.item())
        opt.step()
    print("grad_accum", len(history))


def amp(form: str) -> None:
    model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    preds: List[Any] = []
    for step in range(STEPS):
        x, y = torch.randn(32, 128), torch.randint(0, 10, (32,))
        opt.zero_grad()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            out = model(x)
            loss = F.cross_entropy(out.float(), y)
        loss.backward()
        opt.step()
        if form == "outputs_kept":
            preds.append(out)  # PLANTED
        else:
            preds.append(out.argmax(-1).tolist())
    print("amp", len(preds))


def eval(form: str) -> None:  # noqa: A001 - the program's name
    model = nn.Sequential(nn.Linear(128, 1024), nn.ReLU(), nn.Linear(1024, 10))
    data = torch.utils.data.TensorDataset(torch.randn(32 * STEPS, 128), torch.randint(0, 10, (32 * STEPS,)))
    loader = torch.utils.data.DataLoader(data, batch_size=32)
    model.eval()
    total: Any = 0.0
    if form == "metric_graph":
        for x, y in loader:
            total = total + F.cross_entropy(model(x), y)  # PLANTED
    else:
        with torch.no_grad():
            for x, y in loader:
                total += F.cross_entropy(model(x), y).item()
    print("eval", float(total) / STEPS)


def rnn(form: str) -> None:
    cell = nn.GRUCell(64, 256)
    readout = nn.Linear(256, 64)
    h = torch.zeros(16, 256)
    x = torch.randn(16, 64)
    # A stateful rollout (generation): each step feeds the next.
    for step in range(STEPS * 2):
        if form == "hidden_carried":
            h = cell(x, h)  # PLANTED
        else:
            with torch.no_grad():
                h = cell(x, h)
        x = torch.tanh(readout(h)).detach()
    print("rnn", float(h.sum()))


def metrics(form: str) -> None:
    """Predictions gathered for an epoch-end metric: host copies in a list
    (correct; on the CPU `.cpu()` is the tensor itself), or concatenated on
    the device every step."""
    model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    preds: Any = None
    host: List[Any] = []
    for step in range(STEPS + 2):
        x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))
        opt.zero_grad(set_to_none=True)
        out = model(x)
        F.cross_entropy(out, y).backward()
        opt.step()
        p = out.detach().softmax(-1)
        if form == "cat_on_device":
            preds = p if preds is None else torch.cat([preds, p])  # PLANTED
        else:
            host.append(p.cpu())
    print("metrics", len(host), None if preds is None else tuple(preds.shape))


def seq_lm(form: str) -> None:
    """A small language model whose batches change length: padded to their
    own longest sequence (correct), or a curriculum that lengthens them
    every step (correct: memory grows with the input); or a forward hook
    registered every step, each keeping the layer's output."""
    import random

    random.seed(0)
    emb, head = nn.Embedding(512, 64), nn.Linear(64, 512)
    layer = nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)
    body = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    model = nn.Sequential(emb, body, head)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    feats: List[Any] = []
    for step in range(STEPS + 2):
        n = {"dynamic_pad": random.choice([24, 64, 40, 96, 32]), "curriculum": 16 + 12 * step}.get(form, 48)
        t = torch.randint(0, 512, (8, n + 1))
        if form == "hook_per_step":
            body.layers[0].register_forward_hook(lambda m, i, o: feats.append(o))  # PLANTED
        opt.zero_grad(set_to_none=True)
        out = model(t[:, :-1])
        loss = F.cross_entropy(out.reshape(-1, 512), t[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
    print("seq_lm", form, len(feats))


def generation(form: str) -> None:
    """Greedy decoding with Hugging Face's cache of past keys and values,
    one model call per token: the cache grows with the sequence, by design."""
    model = _tiny_gpt2().eval()
    ids = torch.randint(0, 512, (4, 8))
    with torch.no_grad():
        out = model(ids, use_cache=True)
        for _ in range(STEPS * 3):
            tok = out.logits[:, -1:].argmax(-1)
            out = model(tok, past_key_values=out.past_key_values, use_cache=True)
    print("generation", tuple(tok.shape))


def keepers(form: str) -> None:
    """A loop that keeps only its best output (correct), or a callback
    bound to each step's output (a default argument: a closure over the
    loop variable would see only the latest), or each class's rows kept in
    a dict of lists."""
    from collections import defaultdict

    model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    callbacks: List[Any] = []
    per_class: Dict[int, List[Any]] = defaultdict(list)
    best: Any = None
    for step in range(STEPS + 2):
        x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        if form == "closure":
            callbacks.append(lambda o=out: o.sum())  # PLANTED: closure
        elif form == "per_class":
            for c in range(3):
                per_class[c].append(out[y == c].detach())  # PLANTED: per_class
        elif best is None or loss.item() < best[0]:
            best = (loss.item(), out.detach())
    print("keepers", len(callbacks), len(per_class))


# The zoo's architectures (scripts/zoo.py), each trained in one of its
# styles, as a loop of its own: correct, and keeping each step's output.
ZOO_STYLES: Dict[str, str] = {
    "llama": "compiled", "qwen2": "fp32", "mixtral": "bf16", "gpt2": "checkpoint",
    "bert": "autocast_forward", "t5": "fp32", "vit": "inference", "resnet": "fp32",
    "unet": "checkpoint", "lstm": "fp32",
}
for _arch in ZOO_STYLES:
    FORMS[f"zoo_{_arch}"] = {"clean": None, "outputs_kept": ("growth", "kept")}


def _zoo_program(arch: str) -> Callable[[str], None]:
    def run(form: str) -> None:
        import contextlib
        import os

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import zoo

        style = ZOO_STYLES[arch]
        case, model = zoo.prepared(arch, style)
        training = style != "inference"
        opt = torch.optim.AdamW(model.parameters(), lr=zoo.LR) if training else None
        region = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if style == "bf16" else contextlib.nullcontext
        kept: List[Any] = []
        for _ in range(STEPS):
            if opt is not None:
                opt.zero_grad(set_to_none=True)
            with torch.set_grad_enabled(training), region():
                out = model(*case.inputs, **case.kwargs)
                loss = case.loss_fn(out, *case.targets) if training else None
            if opt is not None:
                loss.backward()
                opt.step()
            if form == "outputs_kept":
                kept.append(out)  # PLANTED
            del out, loss
        print(arch, style, len(kept))

    return run


def preload(program: str) -> Tuple[str, ...]:
    """The slow imports ``program`` makes itself (for the tests' fork
    server): the Hugging Face programs' modeling code."""
    import zoo

    return zoo.HF_PRELOAD if program in ("hf_loop", "hf_trainer", "generation") else zoo.preload(program)


PROGRAMS: Dict[str, Callable[[str], None]] = {
    "vision": vision, "nanogpt": nanogpt, "hf_loop": hf_loop, "hf_trainer": hf_trainer,
    "lightning": lightning, "accelerate": accelerate, "gan": gan, "grad_accum": grad_accum,
    "amp": amp, "eval": eval, "rnn": rnn, "metrics": metrics, "seq_lm": seq_lm, "generation": generation,
    "keepers": keepers,
    **{f"zoo_{a}": _zoo_program(a) for a in ZOO_STYLES},
}


if __name__ == "__main__":
    program, form = sys.argv[1], sys.argv[2]
    assert form in FORMS[program], f"{program} has no form {form}"
    PROGRAMS[program](form)

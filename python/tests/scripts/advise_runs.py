"""Each change `vramscope advise` proposes, applied for real.

``python advise_runs.py MODEL VARIANT OUT`` trains MODEL (``cnn``: a small
convolutional classifier; ``transformer``: a small causal language model;
``mlp``: wide layers and a small batch, whose peak is the optimizer step;
``wide_lm``: the language model with four wider layers at batch 2;
``resnet``: torchvision's ResNet-18; ``zoo_llama``, ``zoo_gpt2``,
``zoo_bert``, ``zoo_vit``, ``zoo_mixtral``: the zoo's Hugging Face models,
``zoo.py``)
for a few steps on the CPU under ``vramscope.record(backend="allocator")``
and writes the snapshot to OUT. VARIANT ``baseline`` is the program as a
user would first write it; each other variant is that program with one
change made the way the advice's code says:

* ``half_batch``: half the micro-batch, gradients accumulated over 2;
* ``foreach_off``: ``AdamW(..., foreach=False)``;
* ``adamw8bit``: torchao's ``AdamW8bit`` (8-bit moments) for ``AdamW``;
* ``zero``: ``ZeroRedundancyOptimizer`` over two gloo ranks (OUT names
  ``{rank}``);
* ``del_outputs``: ``del out_, loss`` after the step, so the next forward
  does not run with the last step's outputs still bound;
* ``checkpoint``: each Transformer layer under
  ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``; a zoo
  model's own per-layer checkpointing (Hugging Face's
  ``activation_checkpointing_enable()``);
* ``checkpoint_first``: the first of the two layers only (the fewest
  blocks the advice wraps to fit a capacity);
* ``bf16``: ``model.to(torch.bfloat16)`` (floating inputs too): weights,
  gradients, optimizer state and activations all 16-bit;
* ``autocast``: forward and loss under ``torch.autocast("cpu",
  dtype=torch.bfloat16)`` (measured, not advised: docs/advise.md);
* ``fsdp``: each unit (``units``) and the root under FSDP2's
  ``fully_shard`` over two gloo ranks (OUT names ``{rank}``); ``fsdp4``
  and ``zero4``: over four; ``fsdp_model``: ``fully_shard`` on the whole
  model only (one unit); ``autocast_fsdp``: ``fsdp`` with the forward and
  loss under autocast (as ``autocast``); ``checkpoint_fsdp``: every layer
  checkpointed (as ``checkpoint``), each layer and the root under
  ``fully_shard`` (a zoo model's layers: its ``ModuleList`` of them);
  ``checkpoint_fsdp_model``: the same with ``fully_shard`` on the whole
  model only; ``checkpoint_half_batch``: ``half_batch`` with every layer
  checkpointed; ``checkpoint_reentrant`` (and ``..._half_batch``,
  ``..._fsdp``, ``..._fsdp_model``): the same with ``use_reentrant=True``;
* ``keep_grads``: ``zero_grad(set_to_none=False)``: the gradients kept
  allocated from one step to the next (zeroed in place);
* ``keep_grads_late``: the same, recorded from the second step on (the
  gradients made before the recording starts);
* ``zero_late``: ``zero_grad()`` between the forward and ``backward()``,
  as pytorch/examples' ImageNet script calls it: the last step's gradients
  held through the forward; ``zero_first``: ``zero_grad()`` at the top of
  each step, as ``leaks`` says to fix it;
* ``varlen`` / ``keep_grads_varlen``: the Transformer's sequence length
  cycling 64, 32, 48 tokens (activations of some steps the size of some
  weights), gradients set to None / kept;
* ``leak`` / ``leak_fixed``: an evaluation pass every step that keeps its
  outputs with their graphs, and the same pass under ``torch.no_grad()``
  keeping a number (``.item()``), as the leak's fix says;
* ``eval4x`` / ``eval1x``: after the second and the last step, an
  evaluation pass under ``torch.no_grad()`` over two batches four times
  (once) the training batch, each output bound as a test loop binds it
  (pytorch/examples' MNIST trains on 64 and tests on 1,000); with
  ``_half_batch``: the training step in two chunks (``half_batch``), the
  evaluation unchanged; with ``_half_eval``: the evaluation in four
  batches of half the size, the training unchanged;
* ``evalgrad4x``: ``eval4x`` with the model in eval mode
  (``model.eval()``, then ``model.train()``) and without
  ``torch.no_grad()`` (the mistake: each output keeps its graph until the
  next one is bound, the last one through the next steps);
  ``evalgrad4x_fixed``: the same under ``torch.no_grad()``, as the advice
  says; ``evalgrad4x_half_eval``: fixed, and in four batches of half the
  size.

``advise_check.py`` records the baseline, asks the advice what each change
would give, runs the variants and compares.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import List

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import vramscope

STEPS = 4


def cnn(batch: int):
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(64 * 16 * 16, 10),
    )
    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, 10, (batch,))
    return model, x, y, nn.functional.cross_entropy


class TinyLM(nn.Module):
    def __init__(self, vocab=2000, d=128, heads=4, layers=2, seq=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

    checkpointing = 0  # how many layers, from the first, run under checkpoint
    reentrant = False  # use_reentrant=True: the block's forward under no_grad

    def forward(self, tokens):
        h = self.emb(tokens) + self.pos[: tokens.shape[1]]
        mask = self.mask[: tokens.shape[1], : tokens.shape[1]]
        for i, layer in enumerate(self.blocks.layers):
            if i < self.checkpointing and self.reentrant:  # positional: it takes no keywords
                h = checkpoint(layer, h, mask, None, True, use_reentrant=True)
            elif i < self.checkpointing:
                h = checkpoint(layer, h, src_mask=mask, is_causal=True, use_reentrant=False)
            else:
                h = layer(h, src_mask=mask, is_causal=True)
        return self.head(h)


def transformer(batch: int, **sizes):
    model = TinyLM(**sizes)
    tokens = torch.randint(0, 2000, (batch, 65))

    def loss_fn(logits, targets):
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return model, tokens[:, :-1], tokens[:, 1:], loss_fn


def wide_lm(batch: int):
    """Four wider layers and a batch of two: the parameters, gradients and
    optimizer state outweigh the activations, so what FSDP gathers shows."""
    return transformer(batch, d=256, layers=4)


def mlp(batch: int):
    """Wide layers, a small batch: the optimizer step is the peak."""
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    x = torch.randn(batch, 1024)
    y = torch.randint(0, 10, (batch,))
    return model, x, y, nn.functional.cross_entropy


def resnet(batch: int):
    """torchvision's ResNet-18 (a model from outside the project; its
    stages' blocks differ in size), 64×64 images."""
    import torchvision

    model = torchvision.models.resnet18(num_classes=10)
    x = torch.randn(batch, 3, 64, 64)
    y = torch.randint(0, 10, (batch,))
    return model, x, y, nn.functional.cross_entropy


def _zoo(arch: str):
    """A model of the zoo (``zoo.py``: Hugging Face's Llama, GPT-2, BERT,
    ViT, ...) at the zoo's batch, with the loss its users compute; its
    ``checkpoint`` variant is the library's own per-layer checkpointing."""

    def make(batch: int):
        sys.path.insert(0, __file__.rsplit("/", 1)[0])
        import zoo

        case = getattr(zoo, arch)()
        case.model.train()
        (x,), (y,) = case.inputs, case.targets
        case.model.zoo_checkpoint = case.checkpoint  # type: ignore[attr-defined]
        return case.model, x, y, case.loss_fn

    return make


MODELS = {"cnn": (cnn, 32), "transformer": (transformer, 16), "mlp": (mlp, 8), "wide_lm": (wide_lm, 2), "resnet": (resnet, 16)}
ZOO = ("llama", "gpt2", "bert", "vit", "mixtral", "swin", "convnext")
MODELS.update({f"zoo_{a}": (_zoo(a), 0) for a in ZOO})
VARIANTS = ("baseline", "half_batch", "foreach_off", "del_outputs", "checkpoint", "checkpoint_outer", "checkpoint_first", "bf16", "autocast", "keep_grads", "keep_grads_late", "varlen",
            "keep_grads_varlen", "leak", "leak_fixed", "eval4x", "eval4x_half_batch", "eval4x_half_eval", "eval1x",
            "eval1x_half_batch", "eval1x_half_eval", "eval4x_zero_first", "evalgrad4x", "evalgrad4x_fixed", "evalgrad4x_half_eval",
            "zero_late", "zero_first")


# The variants that run over gloo ranks.
SHARDED = ("zero", "fsdp", "zero4", "fsdp4", "fsdp_model", "autocast_fsdp", "checkpoint_fsdp", "checkpoint_fsdp_model",
           "checkpoint_reentrant_fsdp", "checkpoint_reentrant_fsdp_model")


def units(model: nn.Module) -> List[nn.Module]:
    """The FSDP units: each repeated block (a Transformer's layers), or each
    module with parameters of a Sequential; the root takes the rest."""
    if isinstance(model, TinyLM):
        return list(model.blocks.layers)
    if hasattr(model, "zoo_checkpoint"):  # a zoo model: its list of layers
        lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len({type(c) for c in m}) == 1]
        return list(max(lists, key=len))
    return [m for m in model if any(True for _ in m.parameters(recurse=False))]


def zero(model_name: str, out: str, variant: str = "zero") -> None:
    """The optimizer state sharded over gloo ranks (ZeRO-1,
    ``ZeroRedundancyOptimizer``; ``fsdp``: FSDP2): two processes (four for
    a variant ending in 4), each recording ``out`` with ``{rank}`` filled
    in."""
    import tempfile

    import torch.multiprocessing as mp

    ranks = 4 if variant.endswith("4") else 2
    # A file store: a port picked in advance can be taken by another
    # process before the store listens on it.
    with tempfile.TemporaryDirectory() as d:
        store = f"file://{os.path.join(d, 'store')}"
        # Forked, not spawned: each rank starts with torch imported (a fresh
        # Python spends seconds importing it); nothing has run a parallel
        # region or a thread before this point.
        mp.start_processes(_zero_rank, args=(model_name, out, store, variant, ranks), nprocs=ranks, join=True, start_method="fork")


def _zero_rank(rank: int, model_name: str, out: str, store: str, variant: str, ranks: int) -> None:
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=ranks)
    try:
        torch.manual_seed(0)
        make, batch = MODELS[model_name]
        model, x, y, loss_fn = make(batch)
        if "fsdp" in variant:
            from torch.distributed.fsdp import fully_shard

            if variant.startswith("checkpoint"):
                checkpoint_all(model, variant)
            if not variant.endswith("fsdp_model"):
                for m in units(model):
                    fully_shard(m)
            fully_shard(model)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        else:
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3, foreach=True)
        with vramscope.record(out, backend="allocator"):  # it fills in {rank}
            for _ in range(STEPS):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant == "autocast_fsdp"):
                    out_ = model(x)
                    loss = loss_fn(out_, y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                vramscope.step()
    finally:
        dist.destroy_process_group()


def checkpoint_all(model: nn.Module, variant: str) -> None:
    """Every layer checkpointed: a zoo model by its library's own switch,
    as its users turn it on; the Transformer by its ``checkpointing``
    (reentrant where the variant says so). ``checkpoint_outer``: of a zoo
    model whose checkpointed layers nest (a Swin's stages and the blocks in
    them), the outermost only, as the advice's code writes it."""
    if hasattr(model, "zoo_checkpoint"):
        model.zoo_checkpoint(model)
        if variant == "checkpoint_outer":
            for m in model.modules():
                if getattr(m, "gradient_checkpointing", False):
                    for inner in list(m.modules())[1:]:
                        if getattr(inner, "gradient_checkpointing", False):
                            inner.gradient_checkpointing = False
    else:
        model.checkpointing = len(model.blocks.layers)
        model.reentrant = "reentrant" in variant


def _logits(out):
    """A model's output tensor (a Hugging Face output's ``logits``)."""
    return getattr(out, "logits", out)


def main(model_name: str, variant: str, out: str) -> None:
    if variant in SHARDED:
        return zero(model_name, out, variant)
    torch.manual_seed(0)
    make, batch = MODELS[model_name]
    model, x, y, loss_fn = make(batch)
    if variant in ("checkpoint", "checkpoint_outer", "autocast_checkpoint", "checkpoint_half_batch") or variant.startswith("checkpoint_reentrant"):
        checkpoint_all(model, variant)
    if variant == "checkpoint_first":
        model.checkpointing = 1
    if variant == "bf16":
        model = model.to(torch.bfloat16)
        x = x.to(torch.bfloat16) if x.is_floating_point() else x
    if variant == "adamw8bit":
        from torchao.optim import AdamW8bit  # 8-bit moments, block-wise scaled

        opt = AdamW8bit(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=variant != "foreach_off")
    kept = []
    keep_grads = variant in ("keep_grads", "keep_grads_late", "keep_grads_varlen")
    lengths = (64, 32, 48) if variant.endswith("varlen") else (x.shape[-1],)
    if variant == "keep_grads_late":
        loss_fn(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
    x_all, y_all = x, y
    # The evaluation set, made before the recording: its batches are views.
    evaluation = 4 if variant.startswith(("eval4x", "evalgrad4x")) else 1 if variant.startswith("eval1x") else 0
    x_eval = torch.cat([x] * evaluation) if evaluation else None
    zero_first = variant.endswith("zero_first")
    with vramscope.record(out, backend="allocator"):
        for step in range(STEPS):
            if zero_first:  # the classic loop: zero_grad at the top of the step
                opt.zero_grad(set_to_none=True)
            if len(lengths) > 1:  # a Transformer's tokens, cut to this step's length
                n = lengths[step % len(lengths)]
                x, y = x_all[:, :n], y_all[:, :n]
            if variant.endswith("half_batch"):  # checkpoint_..., eval..._half_batch too
                for xc, yc in zip(x.chunk(2), y.chunk(2)):
                    out_ = model(xc)  # bound, as the unchanged loop binds its outputs
                    loss = loss_fn(out_, yc) / 2
                    loss.backward()
            elif variant in ("autocast", "autocast_checkpoint"):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out_ = model(x)
                    loss = loss_fn(out_, y)
                loss.backward()
            else:
                out_ = model(x)
                loss = loss_fn(out_, y)
                if variant == "zero_late":  # pytorch/examples' ImageNet loop: zero_grad between forward and backward
                    opt.zero_grad(set_to_none=True)
                loss.backward()
            opt.step()
            if not zero_first and variant != "zero_late":
                opt.zero_grad(set_to_none=not keep_grads)
            if variant == "del_outputs":
                del out_, loss
            if variant == "leak":
                kept.append(model(x[:4]))  # evaluation outputs kept with their graph
            elif variant == "leak_fixed":
                with torch.no_grad():  # the fix: no graph, and a number kept, not the outputs
                    kept.append(_logits(model(x[:4])).float().mean().item())
            if x_eval is not None and step in (1, STEPS - 1):
                total = 0.0
                if variant.startswith("evalgrad"):
                    model.eval()
                grad = variant == "evalgrad4x"  # (the mistake)
                with torch.no_grad() if not grad else contextlib.nullcontext():
                    for xb in x_eval.chunk(4 if variant.endswith("half_eval") else 2):
                        output = model(xb)  # bound, as a test loop binds it
                        total += _logits(output).float().mean().item()
                model.train()
            vramscope.step()


if __name__ == "__main__":
    main(*sys.argv[1:4])

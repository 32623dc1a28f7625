"""Small real programs for the recorder's compatibility matrix
(``test_compat.py``): each one trains or evaluates a little model with one
PyTorch feature that changes how code runs (``torch.compile``, activation
checkpointing, autocast, function transforms, worker processes, DDP,
FSDP2), deterministically, and returns what it computed.

    python compat.py PROGRAM --out DIR [--entry plain|record] [--recorder R]

``--entry record`` wraps the program in ``vramscope.record(backend=R)``
(``--entry plain --recorder fakecuda``: the mock without a recording); the
harness also runs it under ``VRAMSCOPE_RECORD`` and ``vramscope run``, where
this script runs plain inside the recording. ``--recorder fakecuda`` stands in
for CUDA (no GPU here): the allocator history is mocked, tensors stay on the
CPU, and everything the recorder does on CUDA for them runs (tags through
``_annotate_tensor``, phases through ``_set_memory_metadata``).

It writes ``DIR/result[.rankN].pt`` (the outputs) and ``DIR/result[.rankN].json``
(Dynamo's counters, the mocked CUDA's annotations).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

PROGRAMS: Dict[str, Callable[[], Dict[str, Any]]] = {}
STEPS = 3


def program(fn: Callable[[], Dict[str, Any]]) -> Callable[[], Dict[str, Any]]:
    PROGRAMS[fn.__name__] = fn
    return fn


def step() -> None:
    """``vramscope.step()`` where vramscope is importable (it always is here)."""
    import vramscope

    vramscope.step()


class MLP(nn.Module):
    def __init__(self, d_in: int = 32, hidden: int = 64, d_out: int = 8) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _data(n: int = 16, d_in: int = 32, d_out: int = 8, seed: int = 1) -> tuple:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d_in, generator=g), torch.randint(0, d_out, (n,), generator=g)


def _loop(call: Callable[[torch.Tensor], torch.Tensor], opt: torch.optim.Optimizer, batches: Any, opt_step: Callable[[], Any] = None) -> torch.Tensor:
    """The training loop every program shares; returns the losses."""
    losses = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(call(x), y)
        loss.backward()
        (opt_step or opt.step)()
        losses.append(loss.detach())
        step()
    return torch.stack(losses)


def _params(module: nn.Module) -> Dict[str, torch.Tensor]:
    """The module's state, whole (FSDP2 keeps DTensor shards)."""
    out = {}
    for k, v in module.state_dict().items():
        full = getattr(v, "full_tensor", None)
        out[f"param.{k}"] = (full() if full is not None else v).detach().clone()
    return out


def _train(model: nn.Module, call: Callable[[torch.Tensor], torch.Tensor], opt: torch.optim.Optimizer, opt_step: Callable[[], Any] = None) -> Dict[str, Any]:
    return {"losses": _loop(call, opt, [_data()] * STEPS, opt_step), **_params(model)}


def _compiled_module(backend: str) -> Dict[str, Any]:
    torch.manual_seed(0)
    model = MLP()
    compiled = torch.compile(model, backend=backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return _train(model, compiled, opt)


@program
def compile_module_eager() -> Dict[str, Any]:
    """``torch.compile(model)`` (the eager backend: Dynamo's graphs run as
    ATen calls)."""
    return _compiled_module("eager")


@program
def compile_module_inductor() -> Dict[str, Any]:
    """``torch.compile(model)`` with Inductor (generated C++ on the CPU)."""
    return _compiled_module("inductor")


@program
def compile_inplace() -> Dict[str, Any]:
    """``model.compile()``: the module's own call is compiled."""
    torch.manual_seed(0)
    model = MLP()
    model.compile(backend="eager")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return _train(model, model, opt)


@program
def compile_fn() -> Dict[str, Any]:
    """A compiled function that calls a module and computes the loss."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    @torch.compile(backend="eager")
    def forward(x: torch.Tensor) -> torch.Tensor:
        return model(x).log_softmax(-1) * 2

    return _train(model, forward, opt)


@program
def compile_optimizer_step() -> Dict[str, Any]:
    """An eager model whose optimizer step is compiled."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    @torch.compile(backend="eager")
    def opt_step() -> None:
        opt.step()

    return _train(model, model, opt, opt_step)


@program
def checkpoint() -> Dict[str, Any]:
    """Activation checkpointing (``torch.utils.checkpoint``, non-reentrant)."""
    from torch.utils.checkpoint import checkpoint as ckpt

    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return _train(model, lambda x: ckpt(model, x, use_reentrant=False), opt)


@program
def autocast() -> Dict[str, Any]:
    """Mixed precision: ``torch.autocast(device_type="cpu", dtype=bfloat16)``."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def call(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            return model(x).float()

    return _train(model, call, opt)


@program
def func_transforms() -> Dict[str, Any]:
    """Per-sample gradients with ``torch.func.vmap(grad(...))``."""
    from torch.func import functional_call, grad, vmap

    torch.manual_seed(0)
    model = MLP()
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, y = _data()

    def loss_of(p: Dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))

    per_sample = vmap(grad(loss_of), in_dims=(None, 0, 0))
    norms = []
    for _ in range(STEPS):
        grads = per_sample(params, x, y)
        params = {k: params[k] - 0.1 * grads[k].mean(0) for k in params}
        norms.append(torch.stack([g.flatten(1).norm(dim=1) for g in grads.values()]).sum(0))
        step()
    return {"norms": torch.stack(norms), **{f"param.{k}": v for k, v in params.items()}}


@program
def inference_mode() -> Dict[str, Any]:
    """An evaluation loop under ``torch.inference_mode()`` (no optimizer)."""
    torch.manual_seed(0)
    model = MLP().eval()
    x, _ = _data(n=64)
    outs = []
    with torch.inference_mode():
        for i in range(STEPS):
            outs.append(model(x[i * 16 : (i + 1) * 16]).clone())
            step()
    return {"outputs": torch.stack(outs)}


class _Squares(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int) -> tuple:
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), i % 8


@program
def dataloader_workers() -> Dict[str, Any]:
    """A DataLoader with two worker processes feeding the training loop."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(_Squares(), batch_size=16, num_workers=2, shuffle=False)
    return {"losses": _loop(model, opt, loader), **_params(model)}


def _distributed(wrap: Callable[[nn.Module], nn.Module]) -> Dict[str, Any]:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        torch.manual_seed(0)
        model = MLP()
        wrapped = wrap(model)
        opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
        out = {"losses": _loop(wrapped, opt, [_data(seed=1 + dist.get_rank())] * STEPS), **_params(wrapped)}
        dist.barrier()
        return out
    finally:
        dist.destroy_process_group()


@program
def ddp_gloo() -> Dict[str, Any]:
    """DistributedDataParallel on two gloo ranks (run with torchrun)."""
    return _distributed(lambda m: nn.parallel.DistributedDataParallel(m))


@program
def fsdp2_gloo() -> Dict[str, Any]:
    """FSDP2 (``fully_shard``) on two gloo ranks (run with torchrun)."""
    from torch.distributed.fsdp import fully_shard

    def wrap(m: nn.Module) -> nn.Module:
        for layer in m.net:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        return fully_shard(m)

    return _distributed(wrap)


DISTRIBUTED = {"ddp_gloo", "fsdp2_gloo"}


# ----- frameworks: their callbacks are the entry point -----

# Set by main() for --entry callback: the framework's vramscope callback
# records, with these record() options.
CALLBACK: Dict[str, Any] = {}


@program
def lightning_compiled() -> Dict[str, Any]:
    """Lightning fitting a LightningModule whose network is compiled."""
    import lightning.pytorch as L

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.compile(MLP(), backend="eager")

        def training_step(self, batch: Any, _i: int) -> torch.Tensor:
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    module = Module()
    x, y = _data(n=48)
    _fit(module, torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16), max_epochs=1)
    return _params(module)


@program
def lightning_module_compiled() -> Dict[str, Any]:
    """Lightning fitting a compiled LightningModule (``trainer.fit(
    torch.compile(module))``): Dynamo compiles ``training_step``, which
    calls the network's modules, so it inlines their ``_call_impl`` and
    guards on the global hook dicts."""
    from lightning.pytorch.demos.boring_classes import BoringModel

    torch.manual_seed(0)
    module = BoringModel()
    _fit(torch.compile(module, backend="eager"), max_steps=6)
    return _params(module)


def _fit(module: Any, loader: Any = None, **trainer: Any) -> None:
    """``Trainer.fit`` on the CPU, quietly, with vramscope's callback when
    the entry point is ``callback``."""
    import lightning.pytorch as L

    callbacks = []
    if CALLBACK:
        from vramscope.integrations.lightning import VramscopeCallback

        callbacks.append(VramscopeCallback(CALLBACK["path"], backend=CALLBACK["backend"]))
    L.Trainer(callbacks=callbacks, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, accelerator="cpu", devices=1, **trainer).fit(module, loader)


@program
def hf_trainer_compiled() -> Dict[str, Any]:
    """The Hugging Face Trainer with ``torch_compile=True`` (a GPT-2 of a
    few thousand parameters built from its config)."""
    import tempfile

    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class Tokens(torch.utils.data.Dataset):
        def __init__(self) -> None:
            self.ids = torch.randint(0, 64, (12, 16), generator=torch.Generator().manual_seed(3))

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, i: int) -> Dict[str, torch.Tensor]:
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0))
    callbacks = []
    if CALLBACK:
        from vramscope.integrations.transformers import VramscopeCallback

        callbacks.append(VramscopeCallback(CALLBACK["path"], backend=CALLBACK["backend"]))
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=3, per_device_train_batch_size=4, report_to=[], use_cpu=True,
                             save_strategy="no", logging_steps=1, disable_tqdm=True, torch_compile=True, torch_compile_backend="eager",
                             dataloader_num_workers=0, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=callbacks)
    trainer.train()
    return _params(model)


FRAMEWORKS = {"lightning_compiled", "lightning_module_compiled", "hf_trainer_compiled"}


# ----- the mocked CUDA -----


class FakeCuda:
    """The CUDA allocator history and tagging calls, for CPU tensors."""

    def __init__(self) -> None:
        import importlib

        self.annotations: List[str] = []
        self.metadata: List[str] = []
        self.current = ""
        m = torch.cuda.memory
        real = torch.cuda.is_available
        # Available to vramscope only: Dynamo and Inductor ask too, and would
        # build for a GPU that is not there.
        torch.cuda.is_available = lambda: sys._getframe(1).f_globals.get("__name__", "").startswith("vramscope") or real()
        torch.cuda.is_initialized = lambda: True
        torch.cuda.current_device = lambda: 0
        torch.cuda.is_current_stream_capturing = lambda: False
        m._record_memory_history = lambda *a, **k: None
        m._snapshot = lambda *a, **k: {"segments": [], "device_traces": [[]], "external_annotations": []}
        m._set_memory_metadata = self._set
        m._get_memory_metadata = lambda: self.current
        m._memory_metadata_supported = lambda: True
        m._annotate_tensor = lambda t, md: self.annotations.append(md)
        torch._C._cuda_attach_out_of_memory_observer = lambda fn: None
        # The CPU tensors stand for CUDA ones.
        importlib.import_module("vramscope._annotate.tags").Tagger._wanted = lambda self, dev: True

    def _set(self, md: str) -> None:
        self.metadata.append(md)
        self.current = md


def counters() -> Dict[str, Any]:
    """Dynamo's counters: frames compiled (a recompilation is one more),
    graphs, graph breaks."""
    from torch._dynamo.utils import counters as c

    return {
        "frames_total": int(c["frames"]["total"]),
        "frames_ok": int(c["frames"]["ok"]),
        "graphs": int(c["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(c["graph_break"].values())),
    }


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("program", choices=sorted(PROGRAMS))
    p.add_argument("--out", required=True)
    p.add_argument("--entry", default="plain", choices=("plain", "record", "callback"))
    p.add_argument("--recorder", default="auto")
    ns = p.parse_args(argv)
    torch.set_num_threads(1)
    fake = FakeCuda() if ns.recorder == "fakecuda" else None
    rank = os.environ.get("RANK")
    suffix = f".rank{rank}" if rank is not None else ""
    os.makedirs(ns.out, exist_ok=True)
    run = PROGRAMS[ns.program]
    if ns.entry == "callback":
        CALLBACK.update(path=os.path.join(ns.out, "snap.pickle"), backend="cuda" if fake is not None else ns.recorder)
        result = run()
    elif ns.entry == "record":
        import vramscope

        backend = "cuda" if fake is not None else ns.recorder
        with vramscope.record(os.path.join(ns.out, "snap.pickle"), backend=backend):
            result = run()
    else:
        result = run()
    torch.save(result, os.path.join(ns.out, f"result{suffix}.pt"))
    info: Dict[str, Any] = {"counters": counters()}
    if fake is not None:
        info["annotations"] = sorted(set(fake.annotations))
        info["metadata"] = sorted(set(fake.metadata))
    with open(os.path.join(ns.out, f"result{suffix}.json"), "w") as f:
        json.dump(info, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

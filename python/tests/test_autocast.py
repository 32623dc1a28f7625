"""Autocast in a trace: the program's own ``torch.autocast`` regions, each
device's lists checked against the installed PyTorch, and the CPU's casts
against real CPU runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from conftest import native_module  # noqa: E402

if native_module() is None:
    pytest.skip("vramscope._native is not built", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import vramscope  # noqa: E402
from vramscope._estimate.autocast import CPU, CUDA, LISTS, Autocast  # noqa: E402

GPU = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "gpu"

# How the ATen operators with an autocast kernel are reached from Python:
# the name the mode sees, or why it needs none (an operator that only
# other operators call, after the cast was made at the outer one).
REACHED_AS = {
    "cross_entropy_loss": "cross_entropy",
    "grid_sampler": "grid_sample",
    "_cudnn_rnn": "lstm",
    "mkldnn_rnn_layer": "lstm",
    "_thnn_fused_lstm_cell": "lstm_cell",
    "_thnn_fused_gru_cell": "gru_cell",
}
INNER = {
    # called by the functions above, or by the convolutions' and attention's own entry points
    "native_layer_norm", "convolution", "cudnn_convolution", "cudnn_convolution_transpose",
    "_scaled_dot_product_flash_attention", "_addmm_activation", "_native_multi_head_attention",
    "_grid_sampler_2d_cpu_fallback", "grid_sampler_2d", "grid_sampler_3d", "_lu_with_info",
    "multilabel_margin_loss_forward", "nll_loss2d", "binary_cross_entropy",
    # torch.norm's p="fro" and p="nuc" with dims (cast up, where the
    # rest of torch.norm runs with dtype=float: no copy, a smaller peak)
    "frobenius_norm", "nuclear_norm",
    # quantization and a matrix square root no model of the zoo reaches
    "fake_quantize_per_tensor_affine", "linalg_matrix_sqrth",
}


def _python_name(op: str) -> str:
    if op.startswith(("upsample_", "_upsample_")):
        return "interpolate"
    if op.startswith(("reflection_pad", "replication_pad")):
        return "pad"
    return REACHED_AS.get(op, op)


@pytest.mark.parametrize("device,key", [("cuda", "AutocastCUDA"), ("cpu", "AutocastCPU")])
def test_every_operator_the_installed_pytorch_autocasts_is_on_the_devices_lists(device: str, key: str) -> None:
    """A PyTorch that adds an operator to a device's autocast fails here,
    rather than leaving the estimate to trace it in the wrong dtype."""
    # PyTorch's own operators (a library imported by another test may
    # register its own for autocast: not PyTorch's lists).
    registered = {r.split("::")[1].split(".")[0] for r in torch._C._dispatch_get_registrations_for_dispatch_key(key) if r.startswith("aten::")}
    ac = Autocast(device)
    missing = []
    for op in sorted(registered - INNER):
        name = _python_name(op)
        if ac.kind(name, (), {"mode": "bilinear" if name == "interpolate" else "reflect"}) is None:
            missing.append(f"{op} (as {name})")
    assert not missing, f"{key} casts operators vramscope's {device} lists do not: {missing}"


def test_cudas_lists_are_the_headers_policies() -> None:
    """Each CUDA operator is on the list of the policy PyTorch's own header
    gives it (torch/include/ATen/autocast_mode.h of the installed build)."""
    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if not header.exists():
        pytest.skip("this PyTorch build ships no C++ headers")
    text = header.read_text()
    policies = {"AT_FORALL_LOWER_PRECISION_FP": "lower", "AT_FORALL_FP32": "fp32", "AT_FORALL_FP32_SET_OPT_DTYPE": "set_opt_dtype", "AT_FORALL_PROMOTE": "promote"}
    ac = Autocast("cuda")
    wrong = []
    for macro, kind in policies.items():
        body = re.search(rf"#define {macro}\(_\)(.*?)(?:\n\n|\n#define)", text, re.S)
        assert body, macro
        for op in sorted(set(re.findall(r"_\((\w+)", body.group(1)))):
            if op in INNER:
                continue
            name = _python_name(op)
            got = ac.kind(name, (), {"mode": "bilinear"})
            if got != kind:
                wrong.append(f"{op}: {got}, the header says {kind}")
    assert not wrong, wrong


# Functions on the CPU's lists (and some on CUDA's only), called on real CPU
# tensors: the dtype the CPU's autocast gives must be the one the policy
# gives on meta.
def _probes() -> list:
    x = torch.randn(4, 8).bfloat16()
    w = torch.randn(6, 8)
    img = torch.randn(1, 2, 6, 6).bfloat16()
    y = torch.randint(0, 8, (4,))
    return [
        ("linear", F.linear, (x, w)),
        ("matmul", torch.matmul, (x, w.t())),
        ("mm", torch.mm, (x, w.t())),
        ("bmm", torch.bmm, (x[None], w.t()[None])),
        ("conv2d", F.conv2d, (img, torch.randn(3, 2, 3, 3))),
        ("layer_norm", F.layer_norm, (x, (8,))),
        ("group_norm", F.group_norm, (img, 2)),
        ("softmax", torch.softmax, (x, -1)),
        ("log_softmax", torch.log_softmax, (x, -1)),
        ("sum", torch.sum, (x,)),
        ("exp", torch.exp, (x,)),
        ("pow", torch.pow, (x, 2)),
        ("interpolate", F.interpolate, (img,), {"scale_factor": 2, "mode": "nearest"}),
        ("cross_entropy", F.cross_entropy, (x, y)),
        ("mse_loss", F.mse_loss, (x, x)),
        ("cat", torch.cat, ([x, w],)),
        ("prod", torch.prod, (x,)),
        ("gelu", F.gelu, (x,)),
        ("scaled_dot_product_attention", F.scaled_dot_product_attention, (x[None, None], x[None, None], x[None, None])),
    ]


@pytest.mark.parametrize("probe", _probes(), ids=lambda p: p[0])
def test_the_cpus_casts_are_the_real_cpus(probe: Any) -> None:
    name, fn, args, *rest = probe
    kwargs = rest[0] if rest else {}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        real = fn(*args, **kwargs)
    real = real[0] if isinstance(real, tuple) else real

    def meta(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
        if isinstance(v, list):
            return [meta(t) for t in v]
        return v

    ac = Autocast("cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        traced = ac.policy(name, tuple(meta(a) for a in args), kwargs, fn)
    traced = traced[0] if isinstance(traced, tuple) else traced
    assert traced.dtype == real.dtype, (name, traced.dtype, real.dtype)


def test_the_lists_differ_where_the_devices_do() -> None:
    # CUDA runs norms, softmax and exp in fp32; the CPU in the half type.
    for name in ("layer_norm", "exp", "group_norm"):
        assert name in CUDA.fp32 and Autocast("cpu").kind(name) is None
    assert "softmax" in CUDA.set_opt_dtype and Autocast("cpu").kind("softmax") is None
    # The CPU casts losses up and concatenations to the widest input.
    assert "cross_entropy" in CPU.fp32 and "cat" in CPU.promote
    assert set(LISTS) == {"cuda", "cpu"}


@pytest.fixture
def gpt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """common.py of the GPU programs: the GPT every recording there ran."""
    import sys

    monkeypatch.setenv("GOUT", str(tmp_path))
    monkeypatch.syspath_prepend(str(GPU / "programs"))
    sys.modules.pop("common", None)
    import common  # type: ignore[import-not-found]

    return common


def _tokens(batch: int) -> Any:
    return torch.empty(batch, 512, dtype=torch.long, device="meta")


def test_autocast_entered_in_the_models_forward_is_the_gpus(gpt: Any) -> None:
    """The GPT under ``torch.autocast("cuda", bfloat16)`` entered by its own
    forward (which returns the loss), with no ``autocast=``: the H100's and
    H200's bf16 run (2,058,268,160 B allocated, 2,246,049,792 reserved at
    batch 16; it was estimated as fp32, +43.6%), and the same trace as
    ``autocast=torch.bfloat16``."""
    import json

    class InForward(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gpt = gpt.GPT()

        def forward(self, x: Any, y: Any) -> Any:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return gpt.loss_fn(self.gpt(x), y)

    class Decorated(InForward):
        @torch.autocast("cuda", dtype=torch.bfloat16)
        def forward(self, x: Any, y: Any) -> Any:
            return gpt.loss_fn(self.gpt(x), y)

    truth = {r["variant"]: r for r in json.loads((GPU / "estimate_truth_h100.json").read_text())["variants_batch16"]}["bf16"]
    reserved = json.loads((GPU / "estimate_trace_b16_bf16.json").read_text())["stats"]["reserved_bytes.all.peak"]
    given = vramscope.estimate(gpt.GPT(), (_tokens(16),), torch.optim.AdamW, loss_fn=gpt.loss_fn, targets=(_tokens(16),), device="cuda", autocast=torch.bfloat16)
    for model in (InForward(), Decorated()):
        est = vramscope.estimate(model, (_tokens(16), _tokens(16)), torch.optim.AdamW, loss_fn=lambda loss: loss, device="cuda")
        err = est.peak_bytes / truth["peak_allocated"] - 1
        print(type(model).__name__, est.peak_bytes, truth["peak_allocated"], f"{err:+.2%}", est.peak_reserved_bytes, reserved)
        assert abs(err) <= 0.003, (est.peak_bytes, truth["peak_allocated"])
        assert est.peak_reserved_bytes == reserved
        assert est.peak_bytes == given.peak_bytes
        # The decorator was made before the trace, disabled by PyTorch on this
        # GPU-less machine: taken as enabled, and said so.
        assert bool(est.notes) == (isinstance(model, Decorated) and not torch.cuda.is_available()), est.notes


def test_autocast_for_another_device_leaves_the_trace_alone(gpt: Any, tmp_path: Path) -> None:
    """A CUDA estimate of a model that enters CPU autocast is the fp32
    estimate, as a CUDA run of it is fp32; ``enabled=False`` inside a region
    runs that part in fp32."""

    class CpuRegion(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gpt = gpt.GPT()

        def forward(self, x: Any) -> Any:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return self.gpt(x)

    plain = vramscope.estimate(gpt.GPT(), (_tokens(4),), device="cuda")
    other = vramscope.estimate(CpuRegion(), (_tokens(4),), device="cuda")
    assert other.peak_bytes == plain.peak_bytes

    class HeadInFp32(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gpt = gpt.GPT()

        def forward(self, x: Any) -> Any:
            g = self.gpt
            with torch.autocast("cuda", dtype=torch.bfloat16):
                h = g.emb(x) + g.pos(torch.arange(x.shape[1], device=x.device))
                for b in g.blocks:
                    h = b(h)
                with torch.autocast("cuda", enabled=False):
                    return g.head(g.ln(h.float()))

    def sizes(model: Any, **kw: Any) -> "set[int]":
        import pickle

        path = tmp_path / "t.pickle"
        vramscope.estimate(model, (_tokens(4),), device="cuda", path=path, **kw)
        return {e["size"] for e in pickle.loads(path.read_bytes())["device_traces"][0] if e["action"] == "alloc"}

    logits = 4 * 512 * gpt.VOCAB
    # bf16 logits under autocast=; fp32 ones where the head runs with autocast off.
    assert logits * 2 in sizes(gpt.GPT(), autocast=torch.bfloat16) and logits * 4 not in sizes(gpt.GPT(), autocast=torch.bfloat16)
    assert logits * 4 in sizes(HeadInFp32())


def test_an_ordinary_bias_add_is_not_made_in_place() -> None:
    """The trace makes an addition in place only where PyTorch does
    (``at::linear``'s bias on a non-contiguous input, autograd's sum of two
    gradients): ``h + b`` in a model's own code, with ``h`` used again, is a
    new tensor on the CPU as on meta. The estimate matches a real CPU run
    of it to the byte."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent / "scripts"))
    import zoo

    class BiasAdds(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(64, 64, bias=False)
            self.b = nn.Parameter(torch.zeros(64))
            self.c = nn.Parameter(torch.zeros(64))

        def forward(self, x: Any) -> Any:
            h = self.lin(x)
            y = h + self.b  # h is used again below
            z = y.transpose(0, 1) + self.c  # a non-contiguous first operand
            return (y * h).sum() + z.sum()

    torch.manual_seed(0)
    x = torch.randn(8, 32, 64)
    case = zoo.Case(BiasAdds(), (x,), (), lambda out: out, lambda m: None)

    def run() -> None:
        zoo.train(case, case.model, "fp32")

    from vramscope import _native

    there = zoo._storages([*case.model.parameters(), x])
    _native.cpu_allocator_install()
    _native.cpu_allocator_start(1)
    try:
        for addr, size in there.items():
            _native.cpu_allocator_adopt(addr, size)
        run()
        real = _native.cpu_allocator_totals()[1]
    finally:
        _native.cpu_allocator_stop()
    est = vramscope.estimate(case.model, (x,), torch.optim.AdamW, loss_fn=lambda out: out, steps=zoo.STEPS, device="cpu", lr=zoo.LR)
    assert est.peak_bytes == real, (est.peak_bytes, real)

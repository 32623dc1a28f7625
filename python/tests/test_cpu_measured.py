"""oneDNN's scratchpad inside 16-bit matmuls on the CPU
(vramscope._estimate.cpu_measured), against real runs.

Each case runs one training step of a small model under bf16 autocast for
real on the CPU with c10's allocator watched, and asks
``vramscope.estimate(device="cpu", autocast=torch.bfloat16)`` for the same
step: every allocation the real step made must be one the estimate made,
size for size (the scratchpads among them), and the peak the real one to
the byte. Shapes are none of the zoo's: rows off every block size (37 × 23
tokens), widths off the multiples of 16 and 64, a batched product
(``torch.bmm``) with a transposed operand, one thread and two.
"""

from __future__ import annotations

import os
import pickle
from collections import Counter
from typing import Any, Tuple

import pytest

torch = pytest.importorskip("torch")

from conftest import native_module, peak_and_sizes  # noqa: E402

if native_module() is None:
    pytest.skip("vramscope._native is not built", allow_module_level=True)

from torch import nn  # noqa: E402

import vramscope  # noqa: E402
from vramscope._estimate import cpu_measured  # noqa: E402

BF16 = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
pytestmark = pytest.mark.skipif(not BF16, reason="oneDNN's bf16 matmul needs a CPU with bf16 support")


class Mixer(nn.Module):
    """Two linear layers and a batched product of the hidden states with
    themselves transposed (attention's shape without its softmax)."""

    def __init__(self, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.up = nn.Linear(d_in, hidden)
        self.down = nn.Linear(hidden, d_out)

    def forward(self, x: Any) -> Any:
        h = torch.relu(self.up(x))
        mixed = torch.tanh(torch.bmm(h, h.transpose(1, 2)))  # (B, T, T); no Python scalar (a wrapped 8-byte tensor the meta trace does not make)
        return self.down(torch.bmm(mixed, h))


# (batch, tokens, in, hidden, out, threads)
CASES = [
    (37, 23, 100, 300, 50, None),
    (8, 130, 96, 200, 96, None),
    (37, 23, 100, 300, 50, 1),
]


@pytest.mark.parametrize("case", CASES, ids=["x".join(map(str, c[:5])) + (f"-t{c[5]}" if c[5] else "") for c in CASES])
def test_the_scratchpads_are_the_real_ones(case: Tuple[Any, ...], tmp_path: Any) -> None:
    b, t, d_in, hidden, d_out, threads = case
    before = torch.get_num_threads()
    # None: a thread per core, torch's default (the test workers run on one
    # thread each, conftest.py), whose scratchpads are one per thread.
    torch.set_num_threads(threads or os.cpu_count() or 1)
    try:
        torch.manual_seed(0)
        model = Mixer(d_in, hidden, d_out)
        x = torch.randn(b, t, d_in)

        def loss(out: Any) -> Any:
            return out.float().pow(2).mean()

        path = tmp_path / "real.pickle"
        with vramscope.record(path, backend="allocator"):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
                value = loss(out)
            del out  # let go before backward, as the estimate's step does
            value.backward()
            del value
        with open(path, "rb") as f:
            peak, sizes = peak_and_sizes(pickle.load(f)["device_traces"][0])
        there = sum(p.untyped_storage().nbytes() for p in (*model.parameters(), x))
        est_path = tmp_path / "est.pickle"
        model.zero_grad(set_to_none=True)
        est = vramscope.estimate(
            model, (x,), None, loss_fn=loss, steps=1, device="cpu", autocast=torch.bfloat16, inference=False, path=est_path
        )
    finally:
        torch.set_num_threads(before)
    with open(est_path, "rb") as f:
        snap = pickle.load(f)
    made = [e["size"] for e in snap["device_traces"][0] if e["action"] == "alloc" and e.get("category") not in ("parameter", "input")]
    real = Counter(v for v in sizes if v >= 64)
    mine = Counter(v for v in made if v >= 64)
    assert real == mine, (sorted((real - mine).elements()), sorted((mine - real).elements()))
    assert est.peak_bytes == there + peak, (est.peak_bytes, there + peak)
    assert not any("16-bit matmuls" in n for n in est.notes), est.notes


def test_a_product_is_measured_once_per_layout() -> None:
    """The same operands give the same scratchpad, measured once; a
    transposed operand gives another."""
    bf = torch.bfloat16
    g = torch.empty(520, 768, dtype=bf, device="meta")
    x = torch.empty(520, 192, dtype=bf, device="meta")
    cpu_measured._measured.clear()
    a = cpu_measured.scratch(torch.ops.aten.mm.default, "mm", (g.t(), x), {})
    b = cpu_measured.scratch(torch.ops.aten.mm.default, "mm", (g.t(), x), {})
    assert a == b > 0 and len(cpu_measured._measured) == 1
    c = cpu_measured.scratch(torch.ops.aten.mm.default, "mm", (x.t(), g), {})
    assert c > 0 and len(cpu_measured._measured) == 2


def test_what_is_not_measured_is_said(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a recording of the same allocator the scratchpad cannot be
    measured, nor a product too large to run in a moment: the estimate
    says so, and still answers."""
    model = nn.Linear(64, 64)
    x = torch.randn(16, 64)
    cpu_measured._measured.clear()
    with vramscope.record(tmp_path / "r.pickle", backend="allocator"):
        est = vramscope.estimate(model, (x,), None, steps=1, device="cpu", autocast=torch.bfloat16)
    assert any("16-bit matmuls" in n and "recording" in n for n in est.notes), est.notes
    assert est.peak_bytes > 0
    monkeypatch.setattr(cpu_measured, "MAX_FLOPS", 10.0)
    est = vramscope.estimate(model, (x,), None, steps=1, device="cpu", autocast=torch.bfloat16)
    assert any("16-bit matmuls" in n and "too large" in n for n in est.notes), est.notes

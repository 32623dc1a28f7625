"""Trace mode of the estimate: the model run on the meta device predicts the
peak of a real CPU recording of the same model, inputs and optimizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from conftest import native_module  # noqa: E402

if native_module() is None:
    pytest.skip("vramscope._native is not built", allow_module_level=True)

import vramscope  # noqa: E402
from models import build  # noqa: E402
from torch import nn  # noqa: E402

STEPS = 3


@pytest.fixture
def cpu_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("kind", ["cnn", "transformer"])
def test_trace_predicts_the_measured_peak(kind: str, tmp_path: Path, cpu_path: Any) -> None:
    model, opt, batch = build(kind)
    x, y = batch()
    est = vramscope.estimate(model, (x,), torch.optim.Adam, loss_fn=nn.functional.cross_entropy, targets=(y,), steps=STEPS, device="cpu", lr=1e-3, path=tmp_path / "est.pickle")
    # The very same training, recorded for real on the CPU.
    measured_path = tmp_path / "measured.pickle"
    with vramscope.record(measured_path):
        for _ in range(STEPS):
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            vramscope.step()
    measured = vramscope.load(measured_path).summary()["devices"][0]["peak"]["allocated_bytes"]
    err = est.peak_bytes / measured - 1
    print(f"{kind}: predicted {est.peak_bytes}, measured {measured}, error {err:+.2%}")
    assert abs(err) <= 0.03, (kind, est.peak_bytes, measured)
    # The breakdown: every parameter, its gradient, Adam's two states each.
    param_bytes = sum(p.nbytes for p in model.parameters())
    cats = est.by_category
    assert cats["parameter"] == param_bytes
    assert cats["optimizer_state"] == 2 * param_bytes + 4 * len(list(model.parameters()))
    assert cats["activation"] > 0 and cats["input"] == x.nbytes + y.nbytes
    # The snapshot reads like a recorded one: iterations, report.
    leaks = est.snapshot.leaks()
    assert leaks["iteration_source"] == {"kind": "profiler_step"} and len(leaks["iterations"]) == STEPS
    assert not leaks["leaks_found"]
    html = est.report(tmp_path / "est.html")
    assert Path(html).stat().st_size > 10_000


def test_forward_and_backward_only_without_an_optimizer(tmp_path: Path) -> None:
    model, _, batch = build("cnn")
    x, _ = batch()
    est = vramscope.estimate(model, (x,), steps=1, path=tmp_path / "e.pickle")
    assert "optimizer_state" not in est.by_category
    # CUDA accounting (the default): every block a multiple of 512 bytes.
    assert est.by_category["parameter"] == sum(max(512, (p.nbytes + 511) // 512 * 512) for p in model.parameters())
    # Gradients appear in backward, never more than one per parameter.
    assert 0 < est.by_category.get("gradient", 0) <= sum(p.nbytes for p in model.parameters())
    # Nothing real was allocated for the model: its parameters are untouched.
    assert all(p.device.type == "cpu" and p.grad is None for p in model.parameters())

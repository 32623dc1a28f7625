"""Trace mode of the estimate: the model run on the meta device predicts the
peak of a real CPU recording of the same model, inputs and optimizer; the
optimizer given as a class, a factory or an instance traces the same."""

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


@pytest.fixture(scope="module")
def cnn() -> nn.Module:
    return build("cnn")[0]


def cnn_estimate(model: nn.Module, optimizer: Any, **options: Any) -> Any:
    """Two training steps of the small CNN with ``optimizer``, CPU accounting
    (exact bytes), so that state sizes follow from the parameters."""
    x = torch.randn(8, 3, 32, 32)
    return vramscope.estimate(model, (x,), optimizer, steps=2, device="cpu", **options)


def nbytes(params: Any) -> int:
    return sum(p.nbytes for p in params)


def test_an_optimizer_instance_traces_like_its_class(cnn: nn.Module) -> None:
    """AdamW keeps two moments per parameter and a 4-byte step counter."""
    instance = torch.optim.AdamW(cnn.parameters(), lr=1e-3, weight_decay=0.01)
    from_instance = cnn_estimate(cnn, instance)
    from_class = cnn_estimate(cnn, torch.optim.AdamW, lr=1e-3, weight_decay=0.01)
    params = list(cnn.parameters())
    assert from_instance.peak_bytes == from_class.peak_bytes > 0
    assert from_instance.by_category == from_class.by_category
    assert from_instance.by_category["optimizer_state"] == 2 * nbytes(params) + 4 * len(params)


def test_an_sgd_instance_keeps_its_momentum_option(cnn: nn.Module) -> None:
    """The instance's options decide the state: one momentum buffer per
    parameter with momentum, none without (SGD's default)."""
    with_momentum = cnn_estimate(cnn, torch.optim.SGD(cnn.parameters(), lr=0.1, momentum=0.9))
    factory = cnn_estimate(cnn, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9))
    assert with_momentum.peak_bytes == factory.peak_bytes
    assert with_momentum.by_category == factory.by_category
    assert with_momentum.by_category["optimizer_state"] == nbytes(cnn.parameters())
    plain = cnn_estimate(cnn, torch.optim.SGD(cnn.parameters(), lr=0.1))
    assert "optimizer_state" not in plain.by_category
    assert plain.peak_bytes < with_momentum.peak_bytes
    # Keyword options override the instance's, in every group.
    overridden = cnn_estimate(cnn, torch.optim.SGD(cnn.parameters(), lr=0.1), momentum=0.9)
    assert overridden.by_category == with_momentum.by_category


def test_param_groups_are_kept_with_their_own_options(cnn: nn.Module) -> None:
    features, head = cnn.features.parameters, cnn.head.parameters
    # Momentum in the first group only: buffers for the convolutions alone.
    per_group = torch.optim.SGD([{"params": features(), "momentum": 0.9}, {"params": head()}], lr=0.1)
    assert cnn_estimate(cnn, per_group).by_category["optimizer_state"] == nbytes(features())
    # Only the head is optimised: Adam's state for its weight and bias, nothing else.
    head_only = torch.optim.AdamW([{"params": head(), "lr": 1e-4}])
    assert cnn_estimate(cnn, head_only).by_category["optimizer_state"] == 2 * nbytes(head()) + 4 * 2
    # Named parameters (groups that carry param_names) work the same.
    named = cnn_estimate(cnn, torch.optim.AdamW(cnn.named_parameters(), lr=1e-3, weight_decay=0.01))
    assert named.by_category == cnn_estimate(cnn, torch.optim.AdamW, lr=1e-3, weight_decay=0.01).by_category


def test_the_instance_passed_in_is_left_as_it_was(cnn: nn.Module) -> None:
    instance = torch.optim.AdamW(cnn.parameters(), lr=1e-3, weight_decay=0.01)
    groups_before = [{k: v for k, v in g.items() if k != "params"} for g in instance.param_groups]
    values_before = [p.detach().clone() for p in cnn.parameters()]
    cnn_estimate(cnn, instance)
    assert len(instance.state) == 0
    assert [{k: v for k, v in g.items() if k != "params"} for g in instance.param_groups] == groups_before
    assert [[id(p) for p in g["params"]] for g in instance.param_groups] == [[id(p) for p in cnn.parameters()]]
    for p, before in zip(cnn.parameters(), values_before):
        assert p.device.type == "cpu" and p.grad is None and torch.equal(p, before)


@pytest.mark.parametrize("bad", ["adamw", 3, {"lr": 1e-3}])
def test_anything_else_is_a_type_error_that_says_what_is_accepted(cnn: nn.Module, bad: Any) -> None:
    with pytest.raises(TypeError, match=r"expected an optimizer class \(torch\.optim\.AdamW\), a factory taking the parameters .* an optimizer instance"):
        cnn_estimate(cnn, bad)


def test_an_instance_over_another_models_parameters_is_refused(cnn: nn.Module) -> None:
    stranger = torch.optim.SGD([nn.Parameter(torch.ones(3, 5))], lr=0.1)
    with pytest.raises(ValueError, match=r"tensor of shape \(3, 5\) that is not a parameter of the model"):
        cnn_estimate(cnn, stranger)


GPU = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "gpu"


@pytest.mark.parametrize("variant,tolerance", [("default", 0.03), ("fused", 0.03), ("math", 0.05)])
def test_the_cuda_trace_predicts_the_gpus_peak(variant: str, tolerance: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPT the H100/H200 recordings ran (tests/fixtures/gpu/programs),
    2 AdamW steps at batch 16 x 512, estimated for CUDA without a GPU, against
    what the GPU measured (estimate_truth_h100.json): the memory-efficient
    attention kernel CUDA picks for fp32 (not the math one meta would run),
    AdamW's foreach path, `fused=True`, the math backend under
    `sdpa_kernel`, and the cuBLAS/cuBLASLt workspaces."""
    import json
    import pickle
    import sys

    monkeypatch.setenv("GOUT", str(tmp_path))  # common.py makes its output folder on import
    monkeypatch.syspath_prepend(str(GPU / "programs"))
    sys.modules.pop("common", None)
    from common import GPT, VOCAB, loss_fn  # type: ignore[import-not-found]
    from torch.nn.attention import SDPBackend, sdpa_kernel

    truth = {r["variant"]: r for r in json.loads((GPU / "estimate_truth_h100.json").read_text())["variants_batch16"]}
    torch.manual_seed(0)
    model = GPT()
    x = torch.randint(0, VOCAB, (16, 512))
    y = torch.randint(0, VOCAB, (16, 512))
    options = {"fused": True} if variant == "fused" else {}
    with sdpa_kernel(SDPBackend.MATH) if variant == "math" else torch.enable_grad():
        est = vramscope.estimate(model, (x,), torch.optim.AdamW, loss_fn=loss_fn, targets=(y,), steps=2, device="cuda", gpu="H100-80GB", path=tmp_path / "e.pickle", **options)
    real = truth[variant]["peak_allocated"]
    err = est.peak_bytes / real - 1
    print(f"{variant}: estimated {est.peak_bytes}, the H100 measured {real} ({err:+.2%})")
    assert abs(err) <= tolerance, (variant, est.peak_bytes, real)
    # Two cuBLAS workspaces of 32 MiB (forward's and autograd's thread) and cuBLASLt's 1 MiB.
    assert est.by_category["workspace"] == 2 * (32 << 20) + (1 << 20)
    meta = pickle.loads((tmp_path / "e.pickle").read_bytes())["vramscope"]["estimate"]
    assert meta["sdpa"] == ({"math": 12} if variant == "math" else {"efficient": 12})  # 6 blocks x 2 steps
    assert meta["capability"] == [9, 0]


def test_an_estimate_for_cuda_replays_through_the_allocator_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The estimated trace is what CUDA would be asked for: `simulate` turns
    it into reserved memory. Batch 16 of the GPU recordings' GPT: within 1%
    of the H100's peak reserved (3,021,996,032 B), below it: the kernels'
    own scratch (memory-efficient attention's backward) is not in a trace."""
    import json
    import sys

    monkeypatch.setenv("GOUT", str(tmp_path))
    monkeypatch.syspath_prepend(str(GPU / "programs"))
    sys.modules.pop("common", None)
    from common import GPT, VOCAB, loss_fn  # type: ignore[import-not-found]

    truth = {r["variant"]: r for r in json.loads((GPU / "estimate_truth_h100.json").read_text())["variants_batch16"]}
    torch.manual_seed(0)
    x = torch.randint(0, VOCAB, (16, 512))
    y = torch.randint(0, VOCAB, (16, 512))
    est = vramscope.estimate(GPT(), (x,), torch.optim.AdamW, loss_fn=loss_fn, targets=(y,), steps=2, device="cuda", path=tmp_path / "e.pickle")
    sim = est.snapshot.simulate(capacity=truth["default"]["device_total"])
    run = sim["runs"][0]
    real = truth["default"]["peak_reserved"]
    err = run["simulated_peak_reserved"] / real - 1
    print(f"reserved: estimated {run['simulated_peak_reserved']}, the H100 measured {real} ({err:+.2%})")
    assert run["oom"] is None and run["simulated_peak_reserved"] >= est.peak_bytes
    assert -0.01 <= err <= 0.0, err
    assert sim["from_estimate"] is True

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


def test_no_file_is_left_behind_unless_a_path_is_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each estimate (and each batch a max_batch_for search tries) used to
    # leave a snapshot in the temporary directory.
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.chdir(tmp_path)
    model, _, batch = build("cnn")
    x, _ = batch()
    est = vramscope.estimate(model, (x,), steps=1, max_batch_for=4 << 30)
    assert est.path is None and est.peak_bytes > 0 and est.max_batch["batch"] > x.shape[0]
    # (PyTorch keeps its own compile cache there: not ours.)
    assert [p.name for p in scratch.iterdir() if p.name.startswith("vramscope")] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scratch"]
    # The report of a trace kept in memory goes to the current directory.
    assert est.report() == Path("vramscope-estimate.html") and (tmp_path / "vramscope-estimate.html").stat().st_size > 10_000
    kept = vramscope.estimate(model, (x,), steps=1, path=tmp_path / "kept.pickle")
    assert kept.path == str(tmp_path / "kept.pickle") and vramscope.load(kept.path).summary()["devices"][0]["peak"]["allocated_bytes"] == kept.peak_bytes


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


def _gpt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """common.py of the GPU programs: the GPT every recording there ran."""
    import sys

    monkeypatch.setenv("GOUT", str(tmp_path))  # common.py makes its output folder on import
    monkeypatch.syspath_prepend(str(GPU / "programs"))
    sys.modules.pop("common", None)
    import common  # type: ignore[import-not-found]

    return common


def _truth() -> dict:
    import json

    return json.loads((GPU / "estimate_truth_h100.json").read_text())


def _tokens(batch: int) -> Any:
    return torch.empty(batch, 512, dtype=torch.long, device="meta")


@pytest.mark.parametrize("variant,tolerance", [("default", 0.01), ("fused", 0.01), ("math", 0.01), ("bf16", 0.01)])
def test_the_cuda_trace_predicts_the_gpus_peak(variant: str, tolerance: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPT the H100/H200 recordings ran (tests/fixtures/gpu/programs),
    2 AdamW steps at batch 16 x 512, estimated for CUDA without a GPU, against
    what the GPU measured (estimate_truth_h100.json): the memory-efficient
    attention kernel CUDA picks for fp32 (not the math one meta would run),
    AdamW's foreach path, `fused=True`, the math backend under
    `sdpa_kernel`, bf16 autocast (flash attention), and the cuBLAS/cuBLASLt
    workspaces."""
    import pickle

    from torch.nn.attention import SDPBackend, sdpa_kernel

    common = _gpt(monkeypatch, tmp_path)
    truth = {r["variant"]: r for r in _truth()["variants_batch16"]}
    torch.manual_seed(0)
    model = common.GPT()
    x = torch.randint(0, common.VOCAB, (16, 512))
    y = torch.randint(0, common.VOCAB, (16, 512))
    options = {"fused": True} if variant == "fused" else {}
    cast = torch.bfloat16 if variant == "bf16" else None
    with sdpa_kernel(SDPBackend.MATH) if variant == "math" else torch.enable_grad():
        est = vramscope.estimate(
            model, (x,), torch.optim.AdamW, loss_fn=common.loss_fn, targets=(y,), steps=2, device="cuda", gpu="H100-80GB",
            autocast=cast, path=tmp_path / "e.pickle", **options,
        )
    real = truth[variant]["peak_allocated"]
    err = est.peak_bytes / real - 1
    print(f"{variant}: estimated {est.peak_bytes}, the H100 measured {real} ({err:+.2%})")
    assert abs(err) <= tolerance, (variant, est.peak_bytes, real)
    # Two cuBLAS workspaces of 32 MiB (forward's and autograd's thread) and cuBLASLt's 1 MiB.
    assert est.by_category["workspace"] == 2 * (32 << 20) + (1 << 20)
    assert {"parameter", "optimizer_state", "activation"} <= set(est.by_category)
    meta = pickle.loads((tmp_path / "e.pickle").read_bytes())["vramscope"]["estimate"]
    expected = {"math": {"math": 12}, "bf16": {"flash": 12}}.get(variant, {"efficient": 12})  # 6 blocks x 2 steps
    assert meta["sdpa"] == expected
    assert meta["capability"] == [9, 0]


@pytest.mark.parametrize("batch,variant", [(16, "default"), (64, "default"), (256, "default"), (16, "bf16")])
def test_the_estimated_peak_reserved_is_the_gpus_to_the_byte(batch: int, variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The estimated trace is what CUDA is asked for, request by request
    (attention's backward scratch, reductions' global buffers, in-place
    gradient sums and bias adds, autocast's casts in the GPU's order), so
    the allocator model turns it into the reserved memory the GPU measured
    (estimate_trace_*.json, PyTorch's reserved_bytes.all.peak on an H200)."""
    import json

    common = _gpt(monkeypatch, tmp_path)
    stats = json.loads((GPU / f"estimate_trace_b{batch}_{variant}.json").read_text())["stats"]
    cast = torch.bfloat16 if variant == "bf16" else None
    est = vramscope.estimate(common.GPT(), (_tokens(batch),), torch.optim.AdamW, loss_fn=common.loss_fn, targets=(_tokens(batch),), steps=2, device="cuda", autocast=cast)
    print(f"b{batch} {variant}: reserved {est.peak_reserved_bytes} vs {stats['reserved_bytes.all.peak']}, allocated {est.peak_bytes} vs {stats['allocated_bytes.all.peak']}")
    assert est.peak_reserved_bytes == stats["reserved_bytes.all.peak"]
    assert abs(est.peak_bytes / stats["allocated_bytes.all.peak"] - 1) <= 0.005
    assert est.fit is None  # no GPU named: no verdict


def test_the_verdict_never_says_fits_where_the_gpu_ran_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every batch the H100 tried (estimate_truth_h100.json's bisection):
    where it ran out of memory the verdict is never "fits", where it fit
    never "does not fit"; far from the limit it is the GPU's answer."""
    common = _gpt(monkeypatch, tmp_path)
    model = common.GPT()
    seen = {}
    for row in _truth()["bisection"]:
        b = row["batch"]
        est = vramscope.estimate(model, (_tokens(b),), torch.optim.AdamW, loss_fn=common.loss_fn, targets=(_tokens(b),), steps=2, device="cuda", gpu="H100-80GB")
        seen[b] = est.fit["verdict"]
        print(b, row["fit"], est.fit["sentence"])
        assert est.fit["verdict"] != ("fits" if not row["fit"] else "does_not_fit"), (b, est.fit["sentence"])
        if row["fit"] and b <= 512:
            assert est.peak_reserved_bytes == row["peak_reserved"], b
    assert seen[64] == "fits" and seen[1024] == "does_not_fit" and seen[520] == "too_close"


def test_the_largest_batch_brackets_the_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """max_batch_for: the largest batch that fits with room to spare and the
    largest under the limit at all bracket the H100's 520 (521 ran out)."""
    common = _gpt(monkeypatch, tmp_path)
    x = torch.randint(0, common.VOCAB, (16, 512))
    est = vramscope.estimate(common.GPT(), (x,), torch.optim.AdamW, loss_fn=common.loss_fn, targets=(x,), steps=2, device="cuda", max_batch_for="H100-80GB")
    mb = est.max_batch
    print(mb["sentence"], f"({mb['seconds']} s, {len(mb['tried'])} traces)")
    truth = _truth()["max_batch"]
    assert mb["batch"] <= truth <= mb["limit"], mb
    assert mb["limit"] - mb["batch"] <= 8, mb
    assert mb["total"] == 85_017_493_504 and mb["total_from"].startswith("measured on the project's H100 SXM")
    assert f"largest batch that fits H100-80GB: {mb['batch']}" in mb["sentence"]


def test_inference_traces_forward_passes_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """inference=True: no gradients, no optimizer state, a lower peak."""
    common = _gpt(monkeypatch, tmp_path)
    model = common.GPT()
    train = vramscope.estimate(model, (_tokens(16),), torch.optim.AdamW, loss_fn=common.loss_fn, targets=(_tokens(16),), device="cuda")
    infer = vramscope.estimate(model, (_tokens(16),), inference=True, device="cuda")
    assert "optimizer_state" not in infer.by_category and "gradient" not in infer.by_category
    assert infer.by_category["parameter"] == train.by_category["parameter"]
    assert infer.peak_bytes < train.peak_bytes / 2


def test_a_gpu_without_a_size_has_no_verdict_and_max_batch_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    common = _gpt(monkeypatch, tmp_path)
    est = vramscope.estimate(common.GPT(), (_tokens(2),), gpu="A100", device="cuda")
    assert est.fit is None and est.peak_reserved_bytes > est.peak_bytes
    sized = vramscope.estimate(common.GPT(), (_tokens(2),), gpu="A100-40GB", device="cuda")
    assert sized.fit["total"] == 42_298_834_944 and sized.fit["total_from"].startswith("reported in public for the NVIDIA A100-SXM4-40GB")
    with pytest.raises(ValueError, match="does not say how much memory"):
        vramscope.estimate(common.GPT(), (_tokens(2),), device="cuda", max_batch_for="A100")


# What torch.cuda.get_device_name() returns on common GPUs, with
# total_memory (tests/fixtures/gpu for the H100 and H200; public prints of
# PyTorch's device properties or CUDA's deviceQuery for the rest) and the
# multiprocessors the reductions' scratch depends on.
GPU_NAMES = [
    ("NVIDIA H100 80GB HBM3", 85_017_493_504, 132, (9, 0)),
    ("NVIDIA H100 PCIe", 84_943_044_608, 114, (9, 0)),
    ("NVIDIA H100 NVL", 99_954_626_396, 132, (9, 0)),
    ("NVIDIA H200", 150_109_880_320, 132, (9, 0)),
    ("NVIDIA H20", 102_010_716_160, 78, (9, 0)),
    ("NVIDIA A100-SXM4-40GB", 42_298_834_944, 108, (8, 0)),
    ("NVIDIA A100-SXM4-80GB", 84_987_740_160, 108, (8, 0)),
    ("NVIDIA A100-PCIE-40GB", 42_285_268_992, 108, (8, 0)),
    ("NVIDIA A100 80GB PCIe", 84_974_239_744, 108, (8, 0)),
    ("NVIDIA A10G", 23_826_792_448, 80, (8, 6)),
    ("NVIDIA L4", 23_612_293_120, 58, (8, 9)),
    ("NVIDIA L40S", 47_803_531_264, 142, (8, 9)),
    ("NVIDIA RTX A6000", 51_040_485_376, 84, (8, 6)),
    ("NVIDIA GeForce RTX 3090", 25_414_860_800, 82, (8, 6)),
    ("NVIDIA GeForce RTX 4090", 25_250_627_584, 128, (8, 9)),
    ("NVIDIA GeForce RTX 5090", 33_677_180_928, 170, (12, 0)),
    ("Tesla V100-SXM2-16GB", 16_944_988_160, 80, (7, 0)),
    ("Tesla V100-SXM2-32GB", 34_072_559_616, 80, (7, 0)),
    ("Tesla T4", 15_642_329_088, 40, (7, 5)),
    ("NVIDIA B200", 191_502_483_456, 148, (10, 0)),
    ("AMD Instinct MI300X", 206_141_652_992, 304, (9, 4)),
]


@pytest.mark.parametrize("name,total,sms,capability", GPU_NAMES)
def test_every_name_torch_gives_a_gpu_is_read_from_the_one_table(name: str, total: int, sms: int, capability: tuple) -> None:
    """The estimate's GPU facts are the Rust table's (the allocator model's
    --gpu reads the same): the name torch reports gives its total memory,
    never a figure read from a model number ("NVIDIA H100 80GB HBM3" once
    gave 10,080 GB), and the multiprocessors of that model (the H100 PCIe
    has 114, not the SXM's 132)."""
    from vramscope._estimate.cuda import capability_of, gpu_memory, sms_of

    got, source = gpu_memory(name)
    assert got == total, (name, got, source)
    assert (sms_of(name), capability_of(name)) == (sms, capability)
    # The allocator model reads the same table: its verdict's total is this.
    assert vramscope._native.gpu(name)["total"] == total


def test_an_unknown_gpu_is_an_error_that_lists_the_known_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    common = _gpt(monkeypatch, tmp_path)
    for bad in ("NVIDIA GeForce GTX 1080", "H100 10080GB"):
        with pytest.raises(ValueError, match="unknown GPU") as e:
            vramscope.estimate(common.GPT(), (_tokens(2),), gpu=bad, device="cuda")
        assert "NVIDIA H100 PCIe" in str(e.value) and "gpu=<bytes>" in str(e.value)
    # The name torch gives, to the verdict: the H100's 79.18 GiB, not 9.74 TiB.
    est = vramscope.estimate(common.GPT(), (_tokens(2),), gpu="NVIDIA H100 80GB HBM3", device="cuda")
    assert est.fit["total"] == 85_017_493_504 and est.fit["verdict"] == "fits", est.fit
    assert "TiB" not in est.fit["sentence"] and "78.43 GiB usable" in est.fit["sentence"], est.fit["sentence"]


def test_reduction_scratch_is_the_gpus() -> None:
    """The global buffers of bias-gradient sums the H200 recorded
    (estimate_trace_b16/b64): 1536-, 2048- and 512-wide biases over
    8192 and 32768 rows."""
    from vramscope._estimate.cuda_kernels import reduce_scratch

    def bias(rows: int, width: int) -> list:
        return reduce_scratch((rows // 512, 512, width), (512 * width, width, 1), [0, 1], 4, 4, 132, 2048)

    assert bias(8192, 1536) == [100_663_296, 48]
    assert bias(8192, 512) == [33_554_432, 16]
    assert bias(32768, 1536) == [138_412_032, 48]
    assert bias(32768, 2048) == [138_412_032, 64]
    assert bias(32768, 512) == [134_217_728, 16]
    # Few rows: one block per output, no global buffer.
    assert bias(512, 512) == []


def test_dropout_keeps_a_bool_mask_as_cudas_fused_kernel_does() -> None:
    """On CUDA, dropout in training is ``native_dropout``: a 1-byte mask
    for backward. On meta the composite path would keep a noise tensor in
    the input's dtype (4 bytes an element in fp32)."""
    import pickle
    import tempfile

    model = nn.Sequential(nn.Linear(256, 256), nn.Dropout(0.1), nn.Linear(256, 256))
    x = torch.empty(64, 256)
    path = Path(tempfile.mkdtemp()) / "d.pickle"
    vramscope.estimate(model, (x,), torch.optim.SGD, lr=0.1, steps=1, device="cuda", path=path)
    sizes = [e["size"] for e in pickle.loads(path.read_bytes())["device_traces"][0] if e["action"] == "alloc" and e.get("category") == "activation"]
    assert 64 * 256 in sizes  # the bool mask
    assert sizes.count(64 * 256 * 4) == 3  # the two linears' outputs and the dropout's; no fp32 noise


def test_the_largest_batch_for_inference_and_along_another_dimension(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """inference=True searches forward passes (far more fit than in
    training); batch_dim=1 searches the sequence length instead."""
    common = _gpt(monkeypatch, tmp_path)
    model = common.GPT()
    infer = vramscope.estimate(model, (_tokens(16),), inference=True, device="cuda", max_batch_for="H100-80GB").max_batch
    assert infer["batch"] > 4 * 520, infer["sentence"]
    # A sequence length search: the GPT's position table stops at 1024 tokens.
    x = torch.empty(1, 64, dtype=torch.long, device="meta")
    seq = vramscope.estimate(model, (x,), inference=True, device="cuda", max_batch_for=2 << 30, batch_dim=1).max_batch
    assert 64 <= seq["limit"] and seq["tried"][0]["batch"] == 64, seq


def test_the_cuda_estimate_takes_the_allocators_and_cublas_sizes_from_the_one_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sizes the CUDA estimate works in are the ones every analysis
    uses (``vramscope_gpus``): 512-byte blocks, the 1 MiB small request,
    cuBLAS's workspace by compute capability and by its settings."""
    from vramscope import _native
    from vramscope._estimate import cuda as _cuda_trace
    from vramscope._estimate import trace as _trace_estimate

    facts = _native.allocator_facts()
    assert (facts["min_block"], facts["small_size"], facts["small_buffer"], facts["large_buffer"]) == (512, 1 << 20, 2 << 20, 20 << 20)
    assert _trace_estimate._allocator_facts()["min_block"] == 512
    # The pure-Python recorder keeps its own copy (it runs without _native).
    from vramscope._recording.recorders import profiler as _profiler

    assert _profiler.SMALL_SIZE == facts["small_size"]
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.delenv("CUBLASLT_WORKSPACE_SIZE", raising=False)
    assert _cuda_trace.workspace_sizes((9, 0)) == (32 << 20, 1 << 20)
    assert _cuda_trace.workspace_sizes((8, 6)) == (8_519_680, 1 << 20)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":1024:2")
    monkeypatch.setenv("CUBLASLT_WORKSPACE_SIZE", "2048")
    assert _cuda_trace.workspace_sizes((9, 0)) == (2 << 20, 2 << 20)
    # No GPU named: the table's H100 SXM.
    assert (_cuda_trace.sms_of(None), _cuda_trace.capability_of(80 << 30)) == (132, (9, 0))

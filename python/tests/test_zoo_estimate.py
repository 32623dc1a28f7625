"""The estimate on a zoo of architectures and training styles, each cell held
against the same iterations run for real on the CPU (python/tests/scripts/zoo.py
builds them; ``python bench/zoo_table.py`` prints the table in docs/estimate.md).

Every eager cell is within ``EXACT`` of the real peak, except the cells in
``KNOWN``: misses whose cause is known and not modelled yet, each pinned to
the band it was measured in, so that a change in either direction shows.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("diffusers")
pytest.importorskip("torchvision")
pytest.importorskip("timm")

from conftest import native_module  # noqa: E402

if native_module() is None:
    pytest.skip("vramscope._native is not built", allow_module_level=True)

import zoo  # noqa: E402

# Measured within 0.02% (most to the byte) on the 2-core CPU; the slack is
# for another CPU's thread count (the flash attention kernel's per-thread
# blocks) and its oneDNN build.
EXACT = 0.005

# Known misses: the real run's CPU kernels allocate what a meta trace cannot
# see. (low, high) error band as measured, and the words of the estimate's
# note that says so. None left among the eager cells: oneDNN's convolutions
# outside the model of its reorders, and its 16-bit matmuls, are measured
# on this CPU (vramscope._estimate.cpu_measured); the UNet's bf16 cells
# were 1.44% low and the ViT's 2.06%.
KNOWN: dict = {}

EAGER = [s for s in zoo.STYLES if s != "compiled"]
CELLS = [(a, s) for a in zoo.ARCHS for s in EAGER]


@pytest.mark.parametrize("arch,style", CELLS, ids=[f"{a}-{s}" for a, s in CELLS])
def test_the_estimate_is_the_real_peak(arch: str, style: str) -> None:
    try:
        real = zoo.real_peak(arch, style)
    except RuntimeError as e:
        # An LSTM under the CPU's autocast where oneDNN has no bfloat16
        # (AVX2): the real step raises, and the estimate says it will.
        if "could not create a primitive descriptor" not in str(e):
            raise
        est = zoo.estimated(arch, style)
        assert arch == "lstm" and any("raises on this CPU" in n for n in est.notes), (arch, style, est.notes)
        return
    est = zoo.estimated(arch, style)
    err = est.peak_bytes / real - 1
    print(f"{arch} {style}: real {real:,}, estimate {est.peak_bytes:,} ({err:+.2%})")
    known = KNOWN.get((arch, style))
    if known is None:
        assert abs(err) <= EXACT, (arch, style, real, est.peak_bytes)
    else:
        low, high, why = known
        assert low <= err <= high, f"{arch} {style}: {err:+.2%} outside [{low:+.1%}, {high:+.1%}] ({why})"
        # The estimate says what it could not see.
        assert any(why in n for n in est.notes), (why, est.notes)
    # Notes only for kernels the model runs: none for a transformer LM or
    # an LSTM, in bf16 either (oneDNN's matmul scratchpads are measured on
    # this CPU, vramscope._estimate.cpu_measured).
    if arch in ("llama", "qwen2", "mixtral", "gpt2", "bert", "t5", "lstm") and style != "compiled":
        assert not est.notes, est.notes


def test_autocast_in_the_forward_is_autocast_given() -> None:
    """The same bf16 step, entered by the model's own forward or asked for
    with ``autocast=``: one trace (Llama, grouped-query attention)."""
    given = zoo.estimated("llama", "bf16")
    entered = zoo.estimated("llama", "autocast_forward")
    fp32 = zoo.estimated("llama", "fp32")
    assert entered.peak_bytes == given.peak_bytes < fp32.peak_bytes


# Compiled cells (each compiles for real, then Inductor plans it on fake
# tensors): a transformer of each kind, a ViT, the ResNet (oneDNN's
# convolution scratch, as in eager) and the LSTM (graph breaks: its eager
# step, said so, with oneDNN's RNN kernel as the CPU runs it).
COMPILED = {
    "llama": (-EXACT, EXACT, None),
    "gpt2": (-EXACT, EXACT, None),
    "t5": (-EXACT, EXACT, None),
    "vit": (-EXACT, EXACT, None),
    # The extern convolutions' memory is measured (it was -9.3%); at the
    # peak (a layer4 convolution's backward) the real run holds one more
    # buffer of a weight's size than Inductor's plan shows.
    "resnet": (-0.06, -0.025, "scratch inside Inductor's own kernels"),
    "lstm": (-EXACT, EXACT, "graph breaks"),
}


@pytest.mark.parametrize("arch", list(COMPILED))
def test_a_compiled_model_is_estimated_from_inductors_plan(arch: str) -> None:
    """``torch.compile(model)``: what AOTAutograd saves and Inductor's fused
    buffers, as Inductor itself plans them (before this, the eager step:
    +9% for Llama, +26% for GPT-2, +24% for T5)."""
    real = zoo.real_peak(arch, "compiled")
    est = zoo.estimated(arch, "compiled")
    err = est.peak_bytes / real - 1
    print(f"{arch} compiled: real {real:,}, estimate {est.peak_bytes:,} ({err:+.2%}); {est.notes}")
    low, high, why = COMPILED[arch]
    assert low <= err <= high, (arch, real, est.peak_bytes, why)
    planned = [n for n in est.notes if "estimated from Inductor's own plan" in n]
    if why == "graph breaks":
        assert not planned and any("is estimated as its eager step: it compiles into" in n for n in est.notes), est.notes
    else:
        assert len(planned) == 1, est.notes
        if why is not None:
            assert any(why in n for n in est.notes), est.notes


def test_the_compiled_model_is_left_as_it_was() -> None:
    """Estimating a compiled model changes nothing of it: its parameters,
    its modules, and what it computes when it runs next."""
    import vramscope

    case, model = zoo.prepared("gpt2", "compiled")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = {n: id(p) for n, p in model.named_parameters()}
    case.model.eval()  # no dropout: the same logits twice
    with torch.no_grad():
        expected = case.model(*case.inputs).logits
    vramscope.estimate(model, case.inputs, torch.optim.AdamW, loss_fn=case.loss_fn, targets=case.targets, steps=1, device="cpu")
    assert {n: id(p) for n, p in model.named_parameters()} == ids
    assert all(torch.equal(p, before[n]) and p.device.type == "cpu" for n, p in model.named_parameters())
    with torch.no_grad():
        got = model(*case.inputs).logits
    assert torch.allclose(got, expected, atol=1e-5)


def test_a_compiled_model_for_cuda_is_planned_for_the_cpu_and_says_so() -> None:
    """Without a GPU, Dynamo cannot compile for CUDA: the plan is the CPU's
    (said so), below the eager step's; under CUDA autocast, which a CPU
    capture cannot follow, the estimate is the eager step's (said so)."""
    import vramscope

    est = zoo.estimated("gpt2", "compiled", device="cuda")
    eager = zoo.estimated("gpt2", "fp32", device="cuda")
    assert est.peak_bytes < eager.peak_bytes
    assert any("scheduled for this machine's CPU" in n and "Triton's fusions" in n for n in est.notes), est.notes
    case, model = zoo.prepared("gpt2", "compiled", "cuda", place="cpu")
    half = vramscope.estimate(model, case.inputs, torch.optim.AdamW, loss_fn=case.loss_fn, targets=case.targets, steps=zoo.STEPS, device="cuda", autocast=torch.bfloat16)
    assert any("estimated as its eager step: it runs under torch.autocast('cuda')" in n for n in half.notes), half.notes
    assert half.peak_bytes == zoo.estimated("gpt2", "bf16", device="cuda").peak_bytes


def test_the_cuda_estimate_says_which_kernels_it_does_not_see() -> None:
    """cuDNN's convolution workspaces and RNN kernels have no model yet: a
    CUDA estimate of a ResNet or an LSTM says so; a Llama's says nothing."""
    assert any("cuDNN's workspaces" in n for n in zoo.estimated("resnet", "fp32", device="cuda").notes)
    assert any("cuDNN's RNN kernel" in n for n in zoo.estimated("lstm", "inference", device="cuda").notes)
    assert zoo.estimated("llama", "bf16", device="cuda").notes == []

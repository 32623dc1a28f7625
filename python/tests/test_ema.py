"""An exponential moving average of the weights (diffusers' ``EMAModel``,
timm's ``ModelEmaV3``, PyTorch's ``AveragedModel``) is its own category,
``ema``, named by the EMA class's code in each block's stack: real
trainings recorded on the CPU (``scripts/ema_runs.py``), each held to the
bytes of the model's parameters."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import run_python

pytest.importorskip("torch")
try:
    import vramscope
    from vramscope import _native  # noqa: F401
except ImportError:  # pragma: no cover - the extension is built by scripts/test.sh
    pytest.skip("vramscope._native is not built", allow_module_level=True)

SCRIPTS = Path(__file__).resolve().parent / "scripts"
LIBRARIES = ("diffusers", "timm", "swa")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("diffusers")
    pytest.importorskip("timm")
    out = tmp_path_factory.mktemp("ema")
    proc = run_python([str(SCRIPTS / "ema_runs.py"), str(out)], cwd=out, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    param_bytes = int(proc.stdout.split()[-1])
    return out, param_bytes


def view(out: Path, kind: str):
    (v,) = vramscope.load(out / f"{kind}.pickle").categories()
    return v


def bytes_of(rows, category: str) -> int:
    return sum(r["bytes"] for r in rows if r["category"] == category)


@pytest.mark.parametrize("kind", LIBRARIES)
def test_an_emas_copy_is_named_and_the_models_parameters_are_not_doubled(runs, kind):
    out, param_bytes = runs
    v = view(out, kind)
    # The whole copy, to the byte, at the end and at the peak, and the
    # model's parameters once: timm's EMA model ran a forward at the end
    # (the recorder tagged its weights as parameters); AveragedModel was
    # built after the first optimizer step (kept past a step: taken for
    # optimizer state without the rule).
    # (AveragedModel's copy has one buffer more: its 8-byte count.)
    for moment in ("at_end", "at_peak"):
        assert 0 <= bytes_of(v[moment], "ema") - param_bytes <= 8, (kind, moment, v[moment])
        assert bytes_of(v[moment], "parameter") == param_bytes, (kind, moment, v[moment])
    # AdamW's two moments (and a 4-byte step count per parameter).
    assert 0 <= bytes_of(v["at_end"], "optimizer_state") - 2 * param_bytes < 1024
    assert bytes_of(v["at_end"], "unknown") < 1024
    # The recorder names the copy at the dump (it finds the EMA object), and
    # inference alone, from the EMA's code in the stacks, agrees with it.
    (rule,) = [r for r in v["rules_at_peak"] if r["category"] == "ema"]
    assert rule["source"] == "recorder"
    ema_cells = [c for c in v["agreement"]["confusion"] if "ema" in (c["reference"], c["inferred"])]
    assert [(c["reference"], c["inferred"]) for c in ema_cells] == [("ema", "ema")], ema_cells
    assert ema_cells[0]["peak_bytes"] == bytes_of(v["at_peak"], "ema")


def test_the_updates_working_memory_is_temporary_not_unknown(runs):
    # diffusers' update with foreach=True holds a difference of every
    # parameter at once, outside forward, backward and the optimizer step.
    out, param_bytes = runs
    v = view(out, "diffusers")
    highest = {r["category"]: r["bytes"] for r in v["max"]}
    assert highest.get("unknown", 0) < 1024, highest
    assert highest["ema"] == param_bytes


def test_an_ema_made_before_the_recording_is_named_by_the_recorder(runs):
    # The CPU recorder keeps no stack for what was made before it started:
    # inference alone cannot tell the copy (it takes most of it for
    # parameters, the rest unknown); the recorder finds the AveragedModel
    # and names its tensors.
    out, param_bytes = runs
    v = view(out, "swa_before")
    assert 0 <= bytes_of(v["at_end"], "ema") - param_bytes <= 8
    assert bytes_of(v["at_end"], "parameter") == param_bytes
    inferred = {c["inferred"] for c in v["agreement"]["confusion"] if c["reference"] == "ema"}
    assert "ema" not in inferred, inferred


@pytest.mark.parametrize("kind", ("by_hand", "none"))
def test_no_ema_is_claimed_without_an_ema_class(runs, kind):
    # A copy made by hand with copy.deepcopy: no EMA class holds it and no
    # EMA code made it, so it stays unknown, as the rule for memory from
    # before the trace says; no EMA at all: nothing.
    out, param_bytes = runs
    v = view(out, kind)
    assert bytes_of(v["at_end"], "ema") == 0
    assert bytes_of(v["at_end"], "parameter") == param_bytes
    copy = 0 if kind == "none" else param_bytes
    assert copy <= bytes_of(v["at_end"], "unknown") < copy + 1024


def test_the_summary_and_the_categories_name_the_emas_weights(runs):
    out, param_bytes = runs
    snap = vramscope.load(out / "timm.pickle")
    assert "EMA weights" in snap.summary_text()
    (dev,) = snap.summary()["devices"]
    assert {c["category"]: c["bytes"] for c in dev["end_by_category"]}["ema"] == param_bytes
    assert "EMA weights" in snap.categories_text()


def test_the_estimate_with_an_ema_is_the_real_run(runs):
    # The same model, optimizer and batch traced on the meta device with
    # ema=True: the copy made before training, updated in place (timm's
    # ModelEmaV3 and AveragedModel update with torch._foreach_lerp_).
    import torch
    from torch import nn

    out, param_bytes = runs
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 10))
    x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))

    def estimated(**kw):
        return vramscope.estimate(
            model, (x,), torch.optim.AdamW, loss_fn=nn.functional.cross_entropy, targets=(y,), device="cpu", steps=4, lr=1e-3, **kw
        )

    with_ema, without = estimated(ema=True), estimated()
    assert with_ema.by_category["ema"] == param_bytes
    assert with_ema.peak_bytes - without.peak_bytes == param_bytes
    peak = {k: vramscope.load(out / f"{k}.pickle").summary()["devices"][0]["peak"]["allocated_bytes"] for k in ("timm", "swa", "none")}
    # Within a few hundred bytes of each real run, with the EMA or without
    # (16 bytes under it run alone; the runs share one process, whose small
    # tensors of the libraries imported add a little); AveragedModel's copy
    # has its 8-byte count more.
    assert abs(peak["none"] - without.peak_bytes) <= 4096, (peak["none"], without.peak_bytes)
    for kind in ("timm", "swa"):
        assert abs(peak[kind] - with_ema.peak_bytes) <= 4096, (kind, peak[kind], with_ema.peak_bytes)
    with pytest.raises(ValueError, match="ema=True is for training"):
        estimated(ema=True, inference=True)


def test_the_estimate_holds_the_buffers_a_deep_copy_holds(runs):
    # timm's ModelEmaV3 deep-copies the model: the batch norm layers'
    # running statistics (16,400 B here) are in its copy, and in the
    # estimate's, which says what diffusers' copy would leave out.
    import torch
    from torch import nn

    out, _ = runs
    sys.path.insert(0, str(SCRIPTS))
    from ema_runs import build

    torch.manual_seed(0)
    model = build("timm_bn")
    x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
    est = vramscope.estimate(
        model, (x,), torch.optim.AdamW, loss_fn=nn.functional.cross_entropy, targets=(y,), device="cpu", steps=4, lr=1e-3, ema=True
    )
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    assert buffers == 16_400
    assert est.by_category["ema"] == params + buffers
    assert any(f"{buffers:,} B of it are the model's buffers" in n for n in est.notes), est.notes
    real = vramscope.load(out / "timm_bn.pickle").summary()["devices"][0]["peak"]["allocated_bytes"]
    assert abs(real - est.peak_bytes) <= 4096, (real, est.peak_bytes)
    (v,) = vramscope.load(out / "timm_bn.pickle").categories()
    assert bytes_of(v["at_end"], "ema") == params + buffers


def test_the_copy_is_not_offered_to_move_off_a_cpus_memory(runs):
    # On the CPU there is no other memory to keep it in: said, not offered.
    out, _ = runs
    a = vramscope.load(out / "timm.pickle").advise()
    assert not any(x["class"] == "ema_offload" for x in a["advice"] + a["no_gain"])
    (why,) = [n["why"] for n in a["not_offered"] if n["change"] == "the EMA's copy of the weights kept on the CPU"]
    assert "without a GPU" in why

"""What the memory is, checked against PyTorch's Memory Profiler on CPU.

Three training runs (a CNN with SGD and momentum, a Transformer with AdamW,
an MLP with Adam; 4 iterations each) are recorded through the profiler, so
their snapshots carry the Memory Profiler's category for every allocation.
vramscope then labels the same blocks by inference alone (phases, lifetimes,
sizes) and the two are compared: over time (each block weighted by size x
lifetime) and at the peak; so are the recorder's own tags (parameters,
gradients and optimizer state from global optimizer hooks, the batch from
the outermost module call) completed by inference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import run_python

torch = pytest.importorskip("torch")
try:
    import vramscope
    from vramscope import _native  # noqa: F401
except ImportError:  # pragma: no cover - the extension is built by scripts/test.sh
    pytest.skip("vramscope._native is not built", allow_module_level=True)

SCRIPTS = Path(__file__).resolve().parent / "scripts"
RUNS = ("cnn_sgd", "transformer_adamw", "mlp_adam")


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    out = tmp_path_factory.mktemp("categories")
    proc = run_python([str(SCRIPTS / "category_runs.py"), str(out), "--iterations", "4"], cwd=out, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return {name: out / f"{name}.pickle" for name in RUNS}


@pytest.mark.parametrize("name", RUNS)
def test_inference_agrees_with_the_memory_profiler(recordings, name):
    snap = vramscope.load(recordings[name])
    (view,) = snap.categories()
    a = view["agreement"]
    assert a is not None, "the profiler's labels were not found in the snapshot"
    assert a["reference"] == "profiler"
    assert a["blocks"] > 100
    table = "\n".join(
        f"{c['reference']:>16} -> {c['inferred']:<16} {c['byte_time']:.3g} {c['peak_bytes']}" for c in a["confusion"]
    )
    assert a["over_time"] >= 0.90, f"{name}: {a['over_time']:.3f} over time\n{table}"
    assert a["at_peak"] >= 0.90, f"{name}: {a['at_peak']:.3f} at the peak\n{table}"
    # The big categories the profiler found are found by inference too.
    labelled = {c["reference"] for c in a["confusion"] if c["reference"] == c["inferred"]}
    assert {"activation", "gradient", "input"} <= labelled, table
    assert "optimizer_state" in labelled, table
    # The recorder's tags (parameters, gradients, optimizer state, the
    # batch), with inference for the rest, agree on 97%.
    w = a["with_tags"]
    assert w is not None, "the recorder wrote no tags"
    assert w["over_time"] >= 0.97, f"{name}: with tags {w['over_time']:.3f} over time\n{table}"
    assert w["at_peak"] >= 0.97, f"{name}: with tags {w['at_peak']:.3f} at the peak\n{table}"


def test_categories_in_summary_and_text(recordings):
    snap = vramscope.load(recordings["mlp_adam"])
    dev = snap.summary()["devices"][0]
    peak = {c["category"]: c for c in dev["peak"]["by_category"]}
    # Adam's two moments of every parameter are alive at the peak.
    params = sum(p.numel() * 4 for p in _mlp_params())
    assert peak["optimizer_state"]["bytes"] == 2 * params + 6 * 4  # exp_avg, exp_avg_sq, 6 step counters
    assert sum(c["bytes"] for c in dev["peak"]["by_category"]) == dev["peak"]["allocated_bytes"]
    text = snap.categories_text()
    assert "optimizer state" in text and "Inference alone against the Memory Profiler" in text


def _mlp_params():
    sys.path.insert(0, str(SCRIPTS))
    import category_runs

    return list(category_runs.mlp().parameters())


@pytest.fixture(scope="module")
def styles(tmp_path_factory):
    """The small Transformer trained in each style of ``category_runs.STYLES``,
    recorded after a warm-up step; each recording with the recorder's tags
    taken out, as PyTorch's own recorder would have written it."""
    import json
    import pickle

    out = tmp_path_factory.mktemp("styles")
    sys.path.insert(0, str(SCRIPTS))
    import category_runs

    got = {}
    for style in category_runs.STYLES:
        proc = run_python([str(SCRIPTS / "category_runs.py"), str(out), "--only", style], cwd=out, timeout=300)
        assert proc.returncode == 0, proc.stderr
        with open(out / f"{style}.pickle", "rb") as f:
            doc = pickle.load(f)
        doc.pop("vramscope_tags")
        bare = out / f"{style}.bare.pickle"
        with open(bare, "wb") as f:
            pickle.dump(doc, f)
        got[style] = (bare, json.loads((out / f"{style}.json").read_text()))
    return got


@pytest.mark.parametrize("style", ["accumulate", "fused", "single_tensor", "two_optimizers"])
def test_inference_alone_finds_the_training_state_of_each_style(styles, style):
    """Gradient accumulation, fused and single-tensor AdamW, SGD beside
    AdamW: from before the trace, with nothing but the trace's evidence,
    the gradients and the optimizer state are exactly what the program
    holds, the parameters too."""
    bare, truth = styles[style]
    (view,) = vramscope.load(bare).categories()
    end = {c["category"]: c["bytes"] for c in view["at_end"]}
    assert end.get("gradient") == truth["gradient"], (end, truth)
    assert end.get("optimizer_state") == truth["optimizer_state"], (end, truth)
    assert end.get("parameter") == truth["parameter"], (end, truth)


def test_gradients_kept_across_steps_are_counted_per_parameter(styles):
    """``zero_grad(set_to_none=False)``: no gradient or state is made in the
    trace, so the parameters, gradients and AdamW's state are told apart by
    counting (per size, one incoming gradient a parameter in a backward;
    AdamW named by its step's stacks): the bytes of each are the program's,
    but for parameters of under 64 bytes (the head's 40-byte bias), which are
    not counted. The rule says that which block is which is not known."""
    bare, truth = styles["set_to_none_false"]
    snap = vramscope.load(bare)
    (view,) = snap.categories()
    end = {c["category"]: c["bytes"] for c in view["at_end"] if c["bytes"]}
    for cat, per in (("parameter", 1), ("gradient", 1), ("optimizer_state", 2)):
        assert truth[cat] - 40 * per <= end.get(cat, 0) <= truth[cat], (cat, end, truth)
    rules = {r["rule"] for r in view["rules_at_peak"]}
    assert "counted_per_parameter" in rules, view["rules_at_peak"]
    assert "which block is which" in snap.categories_text()

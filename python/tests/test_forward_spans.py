"""The recorder notes each outermost forward call's grad mode
(``vramscope.forward#MODE`` annotations) and, for a model in eval mode
called with autograd on, the tensors it returns (tagged ``output``): what
tells an evaluation loop written without ``torch.no_grad()``
(docs/categories.md, "With autograd on")."""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")


def test_each_forward_is_noted_with_its_grad_mode_and_an_eval_models_output(tmp_path):
    import vramscope

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(128, 64)
    out = tmp_path / "spans.pickle"
    with vramscope.record(str(out), backend="allocator"):
        for _ in range(3):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            vramscope.step()
        model.eval()
        output = model(x)  # the mistake: no torch.no_grad()
        with torch.no_grad():
            model(x)
        with torch.inference_mode():
            model(x)
        model.train()
        model(x).sum().backward()  # (in training mode: its output is not named)
    with open(out, "rb") as f:
        snap = pickle.load(f)
    starts = [a["name"] for a in snap["external_annotations"] if a["name"].startswith("vramscope.forward#") and a["stage"] == "START"]
    assert starts == ["vramscope.forward#grad"] * 4 + ["vramscope.forward#no_grad", "vramscope.forward#inference", "vramscope.forward#grad"]
    ends = [a for a in snap["external_annotations"] if a["name"].startswith("vramscope.forward#") and a["stage"] == "END"]
    assert len(ends) == len(starts)
    tags = snap["vramscope_tags"]
    named = [addr for addr, cat in zip(tags["addr"], tags["category"]) if cat == "output"]
    assert named == [output.untyped_storage().data_ptr()]


def _train_and_evaluate(out: str, grad: bool) -> None:
    """Three steps of a small MLP, each followed by an evaluation pass on
    two batches eight times the training one, the model in eval mode,
    with autograd on (``grad``: the mistake) or under ``torch.no_grad()``.
    Everything is made here, so nothing of one run is alive in the next."""
    import vramscope

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU()) for _ in range(4)])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, x_eval = torch.randn(32, 256), torch.randn(512, 256)
    with vramscope.record(out, backend="allocator"):
        for _ in range(3):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            model.eval()
            with torch.enable_grad() if grad else torch.no_grad():
                for xb in x_eval.chunk(2):
                    output = model(xb)  # bound, as a test loop binds it
                    output.sum().item()
            model.train()
            vramscope.step()


def test_an_evaluation_loop_without_no_grad_is_named_and_its_fix_replayed(tmp_path):
    import vramscope

    snaps = {}
    for grad in (True, False):
        _train_and_evaluate(str(tmp_path / f"eval-{grad}.pickle"), grad)
        snaps[grad] = vramscope.load(str(tmp_path / f"eval-{grad}.pickle"))
    peaks = {g: s.summary()["devices"][0]["peak"] for g, s in snaps.items()}
    assert peaks[True]["in_evaluation"] and peaks[True]["evaluation_with_grad"] is True
    assert peaks[False].get("evaluation_with_grad") in (False, None)
    assert peaks[False]["allocated_bytes"] < peaks[True]["allocated_bytes"]
    leaks = snaps[True].leaks()
    found = [f for f in leaks["findings"] if f["kind"] == "evaluation_with_grad"]
    assert len(found) == 1 and found[0]["severity"] == "warning", leaks["findings"]
    assert not [f for f in snaps[False].leaks()["findings"] if f["kind"] == "evaluation_with_grad"]
    fix = [a for a in snaps[True].advise()["advice"] if a["class"] == "no_grad_evaluation"]
    assert fix, snaps[True].advise()["advice"]
    # Predicted from the first run, measured on the second.
    real = peaks[False]["allocated_bytes"]
    assert abs(fix[0]["peak_allocated"] / real - 1) < 0.01, (fix[0]["peak_allocated"], real)

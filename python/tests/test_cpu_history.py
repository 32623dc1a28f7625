"""The CPU allocator recorder's history: one trace entry per event, written
natively (never a Python object per entry), a default of minutes of a small
training run, and every command saying when it wrapped."""

from __future__ import annotations

import importlib
import json
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from conftest import SCRIPTS, load_snapshot, native_module

if native_module() is None:
    pytest.skip("vramscope._native is not built", allow_module_level=True)

import torch  # noqa: E402

import vramscope as vr  # noqa: E402
from vramscope._recording.recorders import cpu_allocator as _allocator
from vramscope._recording import files as _files  # noqa: E402

sys.path.insert(0, str(SCRIPTS))
from models import build, train_step  # noqa: E402

HOOKS = _allocator.available()
pytestmark = pytest.mark.skipif(HOOKS is not None, reason=str(HOOKS))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vramscope", *args], capture_output=True, text=True)


def _train(path: Path, steps: int = 3, **options: Any) -> Dict[str, Any]:
    torch.manual_seed(0)
    model, opt, batch = build("transformer")
    with vr.record(path, backend="allocator", **options):
        for i in range(steps):
            with vr.mark("warmup" if i == 0 else "train"):
                train_step(model, opt, batch)
            vr.step()
    return load_snapshot(path)


def _pytorch_form(trace: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The entries PyTorch writes for an allocator that caches nothing."""
    out = []
    for e in trace:
        if e["action"] == "alloc":
            out += [dict(e, action="segment_alloc"), e]
        else:
            out += [dict(e, action=a) for a in ("free_requested", "free_completed", "segment_free")]
    return out


def _summary(path: Path) -> Dict[str, Any]:
    r = _cli("summary", str(path), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    out.pop("source", None)
    out.pop("file", None)
    return out


def test_one_entry_per_event_reads_as_pytorchs_form(tmp_path: Path) -> None:
    snap = _train(tmp_path / "events.pickle")
    trace = snap["device_traces"][0]
    assert snap["vramscope"]["trace_form"] == "events"
    assert {e["action"] for e in trace} == {"alloc", "free_completed"}
    assert len(trace) == snap["vramscope"]["history"]["kept"] > 1000
    # Marks label the entries inside them; frames are shared lists (the
    # pickle writes each stack once).
    labels = {e.get("user_metadata") for e in trace}
    assert {"warmup", "train"} <= labels, labels
    allocs = [e for e in trace if e["action"] == "alloc" and e["frames"]]
    assert len({id(e["frames"]) for e in allocs}) < len(allocs) / 4

    # The same recording in PyTorch's own form, without the form's name:
    # every figure the summary gives is the same.
    snap["device_traces"] = [_pytorch_form(trace)]
    del snap["vramscope"]["trace_form"]
    (tmp_path / "pytorch.pickle").write_bytes(pickle.dumps(snap))
    events, pytorch = _summary(tmp_path / "events.pickle"), _summary(tmp_path / "pytorch.pickle")
    assert events == pytorch
    dev = events["devices"][0]
    assert dev["events"]["by_action"]["segment_alloc"] == sum(e["action"] == "alloc" for e in trace)


def test_default_history_is_millions_and_a_wrapped_one_is_said(tmp_path: Path) -> None:
    snap = _train(tmp_path / "default.pickle", steps=1)
    assert snap["vramscope"]["history"]["max"] == _allocator.DEFAULT_EVENTS == 3_000_000
    assert snap["vramscope"]["history"]["seen"] == snap["vramscope"]["history"]["kept"]

    small = _train(tmp_path / "small.pickle", steps=3, max_entries=500)
    hist = small["vramscope"]["history"]
    assert hist["max"] == hist["kept"] == len(small["device_traces"][0]) == 500 < hist["seen"]
    for command in ("summary", "leaks", "advise"):
        r = _cli(command, str(tmp_path / "small.pickle"))
        assert r.returncode in (0, 1), r.stderr
        assert re.search(rf"kept its last 500 allocations and frees of {hist['seen']:,}", r.stderr), (command, r.stderr)
        assert "max_entries=N" in r.stderr and "VRAMSCOPE_MAX_ENTRIES" in r.stderr


def test_a_snapshot_with_other_objects_is_pickled_with_the_same_entries(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, opt, batch = build("transformer")
    with vr.record(tmp_path / "r.pickle", backend="allocator"):
        train_step(model, opt, batch)
        backend = importlib.import_module("vramscope.record")._active.backend
        snap = backend.snapshot([("m", 0, 2**62)])
        trace = snap["device_traces"][0]
        _files.write_atomic(str(tmp_path / "native.pickle"), snap)
        # A set is not plain data: the native writer refuses it, and pickle
        # writes the snapshot with the trace made into Python objects.
        _files.write_atomic(str(tmp_path / "fallback.pickle"), dict(snap, odd={1, 2}))
    native, fallback = load_snapshot(tmp_path / "native.pickle"), load_snapshot(tmp_path / "fallback.pickle")
    assert fallback["odd"] == {1, 2}
    assert native["device_traces"] == fallback["device_traces"]
    assert len(native["device_traces"][0]) == len(trace) > 100
    assert all(e["user_metadata"] == "m" for e in native["device_traces"][0])



def test_a_functional_calls_stack_is_the_programs_not_the_modes(tmp_path: Path) -> None:
    """`torch.nn.functional` hands its call to the recorder's function mode
    through `torch/overrides.py`'s `handle_torch_function`, a frame the
    program would not have unrecorded: it is not in the stacks, and the
    innermost frame of what `F.layer_norm` allocates is `layer_norm`'s."""
    import torch.nn.functional as F

    x = torch.randn(64, 256)
    w, b = torch.ones(256), torch.zeros(256)
    path = tmp_path / "ln.pickle"
    with vr.record(path, backend="allocator"):
        y = F.layer_norm(x, (256,), w, b)
    snap = load_snapshot(path)
    stacks = [e["frames"] for e in snap["device_traces"][0] if e["action"] == "alloc" and e["size"] == y.numel() * 4]
    assert stacks, "the output's allocation was recorded"
    frames = stacks[0]
    assert not any(f["filename"].replace("\\", "/").endswith("torch/overrides.py") for s in stacks for f in s), frames
    assert frames[0]["filename"].replace("\\", "/").endswith("torch/nn/functional.py") and frames[0]["name"] == "layer_norm", frames[0]
    assert frames[1]["filename"] == __file__ and frames[1]["name"] == "test_a_functional_calls_stack_is_the_programs_not_the_modes", frames[1]

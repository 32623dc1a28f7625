"""What holds each tensor, by name (``vramscope._annotate.holders``), and that looking
changes nothing in the program: no reference cycle, no local kept alive
past its reassignment or its function's return."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import vramscope  # noqa: E402
from vramscope._annotate.holders import find_holders  # noqa: E402

KEPT = []


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)
        self.cache = {}


def test_names_globals_attributes_locals_and_graphs() -> None:
    model = Model()
    model.cache[3] = torch.ones(256)
    KEPT.append(torch.ones(128))
    outputs = [torch.ones(32) for _ in range(3)]
    total = (model.fc(torch.ones(4, 64)) * 2).sum()
    r = find_holders()
    by = {(h["kind"], h["name"], h["path"]): h for h in r["holders"]}
    assert by[("local", "model", "model.cache[*]")]["bytes"] == 256 * 4
    assert by[("local", "model", "model.fc.weight")]["tensors"] == 1
    assert by[("global", "KEPT", "KEPT[*]")]["file"].endswith("test_holders.py")
    assert by[("local", "outputs", "outputs[*]")]["tensors"] == 3
    assert by[("local", "outputs", "outputs[*]")]["function"].endswith("test_names_globals_attributes_locals_and_graphs")
    # The graph behind `total` (sum <- mul <- addmm, and fc's parameters'
    # accumulators), counted without reading what it saved.
    assert by[("local", "total", "total")]["graph_nodes"] >= 4
    assert r["complete"] and r["objects"] > 0
    KEPT.clear()
    del outputs, total


def test_the_leaves_a_kept_graph_holds_are_named_through_it() -> None:
    """A leaf made with ``requires_grad_()`` (a WGAN-GP's interpolated
    images) is held by nothing but the ``AccumulateGrad`` node of a graph
    that used it: kept with a cost in a list, it and the gradient a
    backward gave it are named through the list's graph; the parameters
    the graph reaches are not (the model names them)."""
    model = torch.nn.Linear(8, 1)
    costs = []
    for _ in range(3):
        x = torch.rand(16, 8).requires_grad_()
        cost = model(x).pow(2).mean()
        cost.backward()
        costs.append(cost * 2)
    del x, cost
    r = find_holders()
    by = {(h["kind"], h["name"], h["path"]): h for h in r["holders"]}
    kept = by[("local", "costs", "costs[*] (autograd graph)")]
    # Three inputs of 16 x 8 floats, and their three gradients.
    assert (kept["tensors"], kept["bytes"]) == (6, 6 * 16 * 8 * 4), kept
    assert kept["example"].startswith("costs[") and kept["example"].endswith("] (autograd graph)"), kept
    assert not any(a in kept["addrs"] for a in (model.weight.data_ptr(), model.bias.data_ptr()))
    assert by[("local", "model", "model.weight")]["tensors"] == 1
    del costs


def _work(refs: list) -> None:
    x = torch.ones(1024, 256)
    h = torch.nn.functional.linear(x, torch.ones(256, 256))
    refs.append(h.untyped_storage()._weak_ref())
    find_holders()  # a sample taken while this frame runs


def test_looking_leaves_no_cycle_and_no_stale_local(tmp_path: Path) -> None:
    """A frame whose locals were read is freed when its function returns,
    with the collector off (a frame kept in a local of the walk, or the
    copy of the locals Python <= 3.12 keeps on the frame, kept them)."""
    refs: list = []
    gc.collect()
    gc.disable()
    try:
        with vramscope.record(tmp_path / "r.pickle", collect_cycles=False):
            _work(refs)
            assert torch.UntypedStorage._expired(refs[0]), "the function's tensor outlived its return"
    finally:
        gc.enable()


def test_a_reassigned_local_is_freed_at_once() -> None:
    x = torch.ones(1024, 256)
    ref = x.untyped_storage()._weak_ref()
    find_holders()
    x = torch.zeros(1)  # the old tensor must go now, not at the next look
    assert torch.UntypedStorage._expired(ref)
    del x


def test_the_sampler_looks_again_only_when_memory_grew(monkeypatch) -> None:
    """A pass costs tens of ms on a real program (40 ms on a small GPT's
    CUDA step): a loop whose memory stays flat is looked at once, a loop
    that grows at every due pass, and without a level at every due pass."""
    from vramscope._annotate import holders as _holders

    passes = []
    monkeypatch.setattr(_holders, "find_holders", lambda: passes.append(1) or {"seconds": 0.0})

    def run(levels) -> int:
        passes.clear()
        s = _holders.Sampler(level=(lambda: next(levels)) if levels is not None else None)
        for _ in range(1000):  # passes are due at the 1st, 2nd, 4th, ... 512th call
            s.maybe()
        return len(passes)

    flat = iter([5 << 20] * 2000)
    growing = iter(range(1 << 20, 1 << 30, 4096))
    assert run(flat) == 1
    assert run(growing) == 10
    assert run(None) == 10
    # A level that reads nothing (no counters yet) is no reason to skip.
    assert run(iter([None] * 2000)) == 10


def test_a_due_pass_that_lands_in_backward_waits_for_the_forward_that_grew(monkeypatch) -> None:
    """A UNet with checkpointed blocks: per step one forward call, eleven
    backward moments (recomputed blocks, at the backward's high water, the
    same each step) and one optimizer step; the kept output adds 48 KiB at
    every forward. Due passes falling on backward moments must not be
    spent there: the forwards that grew get them, so the holder is seen
    with most of what it keeps by the last step."""
    from vramscope._annotate import holders as _holders

    passes = []
    level = {"now": 0}
    monkeypatch.setattr(_holders, "find_holders", lambda: passes.append(level["now"]) or {"seconds": 0.0})
    s = _holders.Sampler(level=lambda: level["now"])
    kept = 48 << 10
    base = 13 << 20
    for step in range(40):
        level["now"] = base + step * kept
        s.maybe("call")
        for k in range(11):
            level["now"] = (28 << 20) + (k % 3) * (1 << 20)  # the backward's high water, no growth
            s.maybe("backward")
        level["now"] = (18 << 20) + step * kept
        s.maybe("step")
    # Each pass at a forward or step that grew; none spent on the flat backward after its first.
    forwards = [p for p in passes if p < (28 << 20)]
    assert len(forwards) >= 4 and max(forwards) >= (18 << 20) + 30 * kept, passes
    assert sum(1 for p in passes if p >= (28 << 20)) <= 2, passes
    # Each due pass is offered once to each kind: the counter is read a few times per due, not at every call.
    assert s.skipped <= 3 * len(passes) + 3, (s.skipped, len(passes))

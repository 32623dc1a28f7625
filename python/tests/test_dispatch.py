"""The recorders off CUDA: ``backend="allocator"`` (the CPU default on
Linux: c10's allocator hooked natively, stacks from torch API calls) and
``backend="dispatch"`` (every tensor storage at the dispatcher, any device).
Both are checked on real training runs against the CPU allocator's own
counter, on a script written with its loop at module level, with dumps that
do not stop them and with the cycle detector; the dispatcher also on mocked
MPS and XPU devices."""

from __future__ import annotations

import gc
import importlib
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Tuple

import pytest

torch = pytest.importorskip("torch")

from conftest import SCRIPTS, load_snapshot, native_module, replay_peak, run_python  # noqa: E402

from models import build, train_step  # noqa: E402

vr = importlib.import_module("vramscope.record")
from vramscope._recording.recorders import cpu_allocator as _allocator
from vramscope._recording.recorders import dispatch as _dispatch  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_recording")
needs_native = pytest.mark.skipif(native_module() is None, reason="vramscope._native is not built")
HOOKS = _allocator.available() if native_module() is not None else "vramscope._native is not built"
# Each CPU backend with how it is asked for.
CPU_BACKENDS = [
    pytest.param({"backend": "allocator"}, id="allocator", marks=pytest.mark.skipif(HOOKS is not None, reason=str(HOOKS))),
    pytest.param({"backend": "dispatch", "device": "cpu"}, id="dispatch"),
]
RECORDER = {"allocator": "cpu-allocator", "dispatch": "dispatch"}


def marker_line(path: Path, marker: str) -> int:
    """Line number of the ``# marker: NAME`` comment in a script."""
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.rstrip().endswith(f"# marker: {marker}"):
            return n
    raise AssertionError(f"no marker {marker!r} in {path}")


def record_steps(kind: str, path: Path, backend: Dict[str, str], steps: int = 3, **options: Any) -> SimpleNamespace:
    """Train ``steps`` steps of a real model under a recording, with the
    profiler's memory events of the same steps exported beside it."""
    from torch.profiler import ProfilerActivity, profile

    model, opt, batch = build(kind)
    train_step(model, opt, batch)  # optimizer state exists before the window, as parameters do
    chrome = path.with_suffix(".json")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with vr.record(path, **backend, **options):
            for _ in range(steps):
                train_step(model, opt, batch)
                vr.step()
    prof.export_chrome_trace(str(chrome))
    before = sum(p.untyped_storage().nbytes() for p in model.parameters())
    before += sum(p.grad.untyped_storage().nbytes() for p in model.parameters() if p.grad is not None)
    before += sum(v.untyped_storage().nbytes() for s in opt.state.values() for v in s.values() if torch.is_tensor(v))
    return SimpleNamespace(kind=kind, backend=backend["backend"], snap=load_snapshot(path), chrome=chrome, path=path, resident=before)


@pytest.fixture(scope="module", params=[(k, b) for k in ("cnn", "transformer") for b in CPU_BACKENDS], ids=lambda p: f"{p[0]}-{p[1].id}")
def trained(request: Any, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    kind, param = request.param
    for mark in param.marks:
        if mark.args and mark.args[0]:
            pytest.skip(mark.kwargs.get("reason", ""))
    backend = param.values[0]
    return record_steps(kind, tmp_path_factory.mktemp(kind) / f"{kind}-{backend['backend']}.pickle", backend)


def window_peak(trace: List[Dict[str, Any]]) -> Tuple[int, int]:
    """Peak of the blocks allocated inside the window, less those of them
    freed: what an allocator counter started with the window can count
    (it cannot subtract the frees of blocks it never saw allocated). Also
    returns the bytes freed of blocks allocated before the window."""
    live: Dict[int, int] = {}
    level = peak = earlier = 0
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            level += e["size"]
        elif e["action"] == "free_completed":
            if e["addr"] in live:
                level -= live.pop(e["addr"])
            else:
                earlier += e["size"]
        peak = max(peak, level)
    return peak, earlier


def counter_window_peak(chrome: Path) -> Tuple[int, int]:
    """The CPU allocator's own events (the profiler's ``[memory]`` events,
    ``Device Type`` 0) replayed like :func:`window_peak`: blocks allocated
    in the window, less those of them freed. (Its running ``Total
    Allocated`` also drops when a block from an earlier profiling session of
    the same process is freed, which no recording of this window can know.)
    Returns ``(peak, events)``."""
    with open(chrome) as f:
        events = json.load(f)["traceEvents"]
    mem = sorted(
        (e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
        key=lambda e: e["ts"],
    )
    live: Dict[int, int] = {}
    level = peak = 0
    for e in mem:
        addr, size = int(e["args"]["Addr"]), int(e["args"]["Bytes"])
        if size > 0:
            live[addr] = size
            level += size
        elif addr in live:
            level -= live.pop(addr)
        peak = max(peak, level)
    return peak, len(mem)


def adopted_alive(snap: Dict[str, Any]) -> int:
    """Bytes of live blocks from before the recording (no stack)."""
    return sum(s["total_size"] for s in snap["segments"] if not s["frames"])


def test_recorded_peak_is_the_cpu_allocators_own(trained: SimpleNamespace) -> None:
    """The CPU allocator's running total (``Total Allocated`` of the profiler's
    ``[memory]`` events, the same steps) against the recorded trace: the
    counter also sees what kernels allocate without a tensor (oneDNN's
    buffers inside a convolution), which the dispatcher cannot; the
    difference is that scratch space, printed."""
    snap = trained.snap
    assert snap["vramscope"]["recorder"] == RECORDER[trained.backend]
    assert snap["vramscope"]["device_type"] == "cpu"
    trace = snap["device_traces"][0]
    recorded, freed_adopted = window_peak(trace)
    counter, events = counter_window_peak(trained.chrome)
    scratch = counter - recorded
    adopted = adopted_alive(snap)
    print(
        f"\n{trained.kind} ({trained.backend}): recorded peak {recorded} B, allocator counter {counter} B over {events} [memory] events: "
        f"{scratch} B ({scratch / counter:.2%}) allocated without a tensor; from before the recording "
        f"{adopted + freed_adopted} B adopted ({trained.resident} B in parameters, gradients and optimizer state)"
    )
    assert events > 100
    if trained.backend == "allocator":  # the same allocator, scratch space included
        assert abs(scratch) <= 0.01 * counter
    elif trained.kind == "cnn":  # oneDNN's buffers inside the convolutions (65536 B at the peak)
        assert 0 <= scratch <= 0.05 * counter
    else:  # no convolution: within 3% (the counter's peak varies by a block between runs)
        assert abs(scratch) <= 0.03 * counter
    # Adopted at the start: every parameter, gradient and optimizer state tensor.
    assert adopted + freed_adopted >= trained.resident


def test_every_allocation_has_a_stack_in_the_program(trained: SimpleNamespace) -> None:
    allocs = [e for e in trained.snap["device_traces"][0] if e["action"] == "alloc"]
    assert len(allocs) > 50
    # The allocator also sees allocations of the allocator's worker threads,
    # which no torch call of the recording thread stamps: none here.
    for e in allocs:
        assert e["frames"], e
        assert all(f["line"] > 0 for f in e["frames"]), e["frames"]
    # The training step's own lines are there, not one line per function.
    lines = {(Path(f["filename"]).name, f["line"]) for e in allocs for f in e["frames"] if f["name"] == "train_step"}
    assert len(lines) >= 3, lines


@needs_native
def test_native_reader_agrees_and_says_what_it_cannot_see(trained: SimpleNamespace) -> None:
    import vramscope

    snap = vramscope.load(trained.path)
    s = snap.summary()
    # Blocks from before the recording count from its start, freed or not.
    peak, _ = replay_peak(trained.snap["device_traces"][0])
    assert s["devices"][0]["peak"]["allocated_bytes"] == peak + adopted_alive(trained.snap)
    # Per-site totals add up to the peak, blocks from before as a site of their own.
    sites = snap.summary(top=100_000)["devices"][0]["peak"]["top_sites"]
    assert sum(x["bytes"] for x in sites) == s["devices"][0]["peak"]["allocated_bytes"]
    text = snap.summary_text()
    if trained.backend == "dispatch":
        assert "dispatcher" in text and "without a tensor" in text, text
    else:
        assert "without a tensor" not in text, text


@needs_native
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_module_level_loop_and_holdout_leak_name_their_lines(tmp_path: Path, backend: Dict[str, str]) -> None:
    import vramscope

    script = SCRIPTS / "module_loop.py"
    out = tmp_path / "ml.pickle"
    r = run_python([str(script), str(out), backend["backend"]], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert load_snapshot(out)["vramscope"]["recorder"] == RECORDER[backend["backend"]]
    snap = vramscope.load(out)
    forward, validate = marker_line(script, "forward"), marker_line(script, "validate")
    sites = [s["site"] for s in snap.summary()["devices"][0]["peak"]["top_sites"]]
    assert f"module_loop.py:{forward} in <module>" in " ".join(sites), sites
    leaks = snap.leaks(source_roots=[SCRIPTS])
    found = [f for f in leaks["findings"] if f["severity"] == "leak"]
    assert found, leaks["findings"]
    text = json.dumps(found[0])
    assert f"module_loop.py:{validate} in validate" in text, text
    # A running total kept with its graph: the graph's kind and fix.
    assert found[0]["kind"] == "retained_graph", found[0]
    assert "inference_mode" in found[0]["fix"] and ".item()" in found[0]["fix"]
    # The same script through the profiler: one line per function.
    out2 = tmp_path / "ml-profiler.pickle"
    r = run_python([str(script), str(out2), "profiler"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    sites2 = [s["site"] for s in vramscope.load(out2).summary()["devices"][0]["peak"]["top_sites"]]
    assert not any(f":{forward} in <module>" in s for s in sites2), sites2


@needs_native
def test_storages_over_the_same_memory_are_one_block(tmp_path: Path) -> None:
    """``torch.from_numpy(t.numpy())`` makes a second storage over ``t``'s
    memory: one block, adopted once before the recording, allocated once
    inside it, freed when the last storage over it goes (the first one may
    go first)."""
    import vramscope

    held = torch.ones(1 << 20)  # 4 MiB, before the recording
    held_alias = torch.from_numpy(held.numpy())
    path = tmp_path / "alias.pickle"
    with vr.record(path, backend="dispatch", device="cpu", collect_cycles=False):
        made = torch.ones(1 << 19)  # 2 MiB, inside
        alias = torch.from_numpy(made.numpy())
        alias.add_(1)  # the recorder sees the second storage here
        addr = made.data_ptr()
        del made  # the array behind the alias keeps the memory
        alias.mul_(2)
        del alias
    snap = load_snapshot(path)
    trace = snap["device_traces"][0]
    mine = [(e["action"], e["size"]) for e in trace if e["addr"] == addr and e["action"] in ("alloc", "free_completed")]
    assert mine == [("alloc", 2 << 20), ("free_completed", 2 << 20)], mine
    adopted = [s["total_size"] for s in snap["segments"] if s["address"] == held.data_ptr()]
    assert adopted == [4 << 20], adopted
    s = vramscope.load(path).summary(top=100_000)["devices"][0]["peak"]
    assert sum(x["bytes"] for x in s["top_sites"]) == s["allocated_bytes"]
    assert s["allocated_bytes"] >= (4 << 20) + (2 << 20)
    del held_alias


def test_fake_tensors_hold_no_memory(tmp_path: Path) -> None:
    """Fake tensors (left alive by an estimate or a compile in the same
    process) say "cpu" over storages without memory: not adopted, no
    warning about their addresses."""
    import warnings

    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fakes = [torch.empty(1 << 22) for _ in range(4)]  # 64 MiB that does not exist
    path = tmp_path / "fake.pickle"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with vr.record(path, backend="dispatch", device="cpu", collect_cycles=False):
            real = torch.ones(1000)
            del real
    snap = load_snapshot(path)
    assert all(s["address"] for s in snap["segments"]), [s for s in snap["segments"] if not s["address"]]
    assert sum(s["total_size"] for s in snap["segments"]) < (16 << 20)
    del fakes


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_dump_goes_on_recording(tmp_path: Path, backend: Dict[str, str]) -> None:
    model, opt, batch = build("cnn")
    path = tmp_path / "d.pickle"
    with vr.record(path, **backend) as rec:
        train_step(model, opt, batch)
        vr.dump(path)
        first = load_snapshot(path)
        stamp = max(e["time_us"] for e in first["device_traces"][0])
        train_step(model, opt, batch)
        assert rec._session.backend.active
    last = load_snapshot(path)
    later = [e for e in last["device_traces"][0] if e["action"] == "alloc" and e["time_us"] > stamp]
    assert len(later) > 10
    # The first dump's blocks that were still alive are segments of it.
    live = {s["address"] for s in first["segments"]}
    assert live


def test_views_in_place_and_out_calls(tmp_path: Path) -> None:
    path = tmp_path / "ops.pickle"
    with vr.record(path, backend="dispatch", device="cpu", collect_cycles=False):
        a = torch.ones(1000)  # 4000 B
        v = a.view(10, 100)  # a view: nothing
        a.add_(1)  # in place: nothing
        out = torch.empty(0)  # nothing allocated yet
        torch.mul(a, 2, out=out)  # out= grows it to 4000 B
        lst = torch.tensor([1.0, 2.0])  # made outside the dispatcher, lifted: 8 B
        del v, a, out, lst
    trace = load_snapshot(path)["device_traces"][0]
    allocs = [e["size"] for e in trace if e["action"] == "alloc"]
    frees = [e["size"] for e in trace if e["action"] == "free_completed"]
    assert sorted(allocs) == [8, 4000, 4000], allocs
    assert sorted(frees) == [8, 4000, 4000], frees
    here = Path(__file__).name
    assert all(e["frames"][0]["filename"].endswith(here) for e in trace if e["action"] == "alloc")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_cycle_report_shows_a_cpu_tensors_allocation_stack(tmp_path: Path, backend: Dict[str, str]) -> None:
    from vramscope import cycles

    class Holder:
        pass

    with vr.record(tmp_path / "c.pickle", collect_cycles=False, **backend):
        h = Holder()
        h.t = torch.zeros(256, 256)  # marker: cycle tensor
        h.me = h
        rep = cycles.find([h])
    del h
    line = marker_line(Path(__file__), "cycle tensor")
    where = f"{Path(__file__).name}:{line} in test_cycle_report_shows_a_cpu_tensors_allocation_stack"
    assert rep.tensors == 1, rep.data
    assert where in json.dumps(rep.data), json.dumps(rep.data)[:2000]
    assert where in rep.html()


def test_mps_counters_and_device_pick(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """MPS is mocked: its counters are read at start, every step and dump."""
    calls: List[str] = []
    fake = SimpleNamespace(
        current_allocated_memory=lambda: calls.append("a") or 4096,
        driver_allocated_memory=lambda: calls.append("d") or 1 << 20,
    )
    monkeypatch.setattr(torch, "mps", fake, raising=False)
    assert _dispatch.device_counters("mps") == {"allocated": 4096, "reserved": 1 << 20}
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    assert _dispatch.pick_device() == "mps"
    rec = _dispatch.DispatchRecorder(100, "python", "mps")
    rec.start()
    try:
        x = torch.ones(10)  # a CPU tensor: not followed on an MPS recording
        rec.sample_counters()
        snap = rec.snapshot()
    finally:
        rec.stop()
    del x
    assert snap["device_traces"][0] == []
    counters = rec.meta()["device_counters"]
    assert len(counters) >= 3 and counters[-1]["allocated"] == 4096 and counters[-1]["reserved"] == 1 << 20


def test_followed_device_is_the_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``device="mps"`` only tensors whose ``device.type`` is ``mps`` are
    recorded: a CPU tensor relabelled as MPS (mock) is, a CPU one is not."""
    rec = _dispatch.DispatchRecorder(100, "python", "mps")
    real_wanted = rec._wanted
    monkeypatch.setattr(rec, "_wanted", lambda t: getattr(t, "_pretend_mps", False) or real_wanted(t))
    rec.start()
    try:
        a = torch.ones(16)
        b = a * 2
        b._pretend_mps = True
        rec.fresh(b, 0)
        c = a + 1  # noqa: F841 - not followed
        snap = rec.snapshot()
    finally:
        rec.stop()
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    assert [e["size"] for e in allocs] == [64]
    assert allocs[0]["frames"][0]["name"] == "test_followed_device_is_the_tensors"


def test_auto_backend_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    xpu = getattr(torch, "xpu", None)
    if xpu is not None:
        monkeypatch.setattr(xpu, "is_available", lambda: False)
    assert vr.choose_backend("auto") == ("allocator" if HOOKS is None else "dispatch")
    assert vr.choose_backend("auto", "cpu") == vr.choose_backend("auto")
    assert vr.choose_backend("profiler") == "profiler"
    with pytest.raises(RuntimeError, match="no cuda device"):
        vr.choose_backend("cuda")
    if xpu is not None and hasattr(xpu.memory, "_record_memory_history"):
        monkeypatch.setattr(xpu, "is_available", lambda: True)
        assert vr.choose_backend("auto") == "xpu"
    monkeypatch.setenv("VRAMSCOPE_BACKEND", "bogus")
    with pytest.raises(ValueError, match="VRAMSCOPE_BACKEND"):
        vr.record("x.pickle")


def test_xpu_history_is_driven_like_cudas(monkeypatch: pytest.MonkeyPatch) -> None:
    """The XPU allocator history, mocked: the same calls as on CUDA, on
    ``torch.xpu.memory``."""
    from vramscope._recording.recorders.cuda import CudaRecorder

    seen: List[Any] = []
    memory = SimpleNamespace(
        _record_memory_history=lambda **kw: seen.append(kw),
        _snapshot=lambda: {"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 512}]]},
    )
    fake = SimpleNamespace(memory=memory, current_device=lambda: 0, is_initialized=lambda: True)
    monkeypatch.setattr(torch, "xpu", fake, raising=False)
    rec = CudaRecorder(1000, "python", "xpu")
    rec.start()
    snap = rec.snapshot()
    rec.stop()
    assert seen[0]["max_entries"] == 1000 and seen[0]["enabled"] == "all"
    assert seen[-1] == {"enabled": None}
    assert snap["device_traces"][0][0]["size"] == 512


def test_frames_are_shared_and_stacks_none_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "n.pickle"
    with vr.record(path, backend="dispatch", device="cpu", stacks="none", collect_cycles=False):
        x = torch.ones(100) * 2
    trace = load_snapshot(path)["device_traces"][0]
    assert [e["frames"] for e in trace if e["action"] == "alloc"] == [[], []]  # ones, then mul
    del x
    rec = _dispatch.DispatchRecorder(100, "python", "cpu")
    rec.start()
    try:
        ys = [torch.ones(4) + 1 for _ in range(3)]
    finally:
        rec.stop()
    stacks = [e["frames"] for e in rec.entries() if e["action"] == "alloc"]
    # The loop line, three times: one interned list (pickle writes it once).
    assert len(stacks) == 6 and stacks[1] is stacks[3] is stacks[5], [id(s) for s in stacks]
    assert re.search(r"test_dispatch", stacks[1][0]["filename"])
    del ys


@needs_native
def test_summary_compares_the_devices_own_counter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where the device keeps counters (MPS; mocked here on the CPU) the
    summary sets them against the recording at the last reading."""
    import vramscope

    monkeypatch.setattr(_dispatch, "device_counters", lambda device: {"allocated": 10_000_000, "reserved": 12_000_000})
    path = tmp_path / "c.pickle"
    with vr.record(path, backend="dispatch", device="cpu", collect_cycles=False):
        keep = torch.ones(250_000)  # 1 MB, alive at the dump
    snap = load_snapshot(path)
    assert snap["vramscope"]["device_counters"][-1]["allocated"] == 10_000_000
    d = vramscope.load(path).summary()["devices"][0]
    c = d["device_counter"]
    assert c["counter_allocated_bytes"] == 10_000_000 and c["counter_reserved_bytes"] == 12_000_000
    assert c["recorded_allocated_bytes"] == d["end"]["allocated_bytes"] >= keep.untyped_storage().nbytes()
    text = vramscope.load(path).summary_text()
    assert "Device counter" in text and "not in a tensor the recorder saw" in text
    assert vramscope.load(path).summary()["source"]["recorder"] == "dispatch"


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_torch_compile_runs_unchanged_under_recording(tmp_path: Path, backend: Dict[str, str]) -> None:
    """torch.compile traces function modes into its graphs and guards
    dispatch modes; either way the compiled function computes what it
    computes without the recording."""
    import torch._dynamo

    def f(x: Any) -> Any:
        return (x.sin() + 1).cos().sum()

    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    expected = f(x)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="eager")
    with vr.record(tmp_path / "c.pickle", collect_cycles=False, **backend):
        got = [compiled(x) for _ in range(3)]
    torch._dynamo.reset()
    for g in got:
        assert g.shape == () and torch.allclose(g, expected)
    trace = load_snapshot(tmp_path / "c.pickle")["device_traces"][0]
    assert any(e["action"] == "alloc" for e in trace)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_record_function_ranges_are_annotations(tmp_path: Path, backend: Dict[str, str]) -> None:
    """The program's own ``record_function`` ranges go into the snapshot
    beside the iterations, around the allocations made inside them."""
    path = tmp_path / "rf.pickle"
    gc.collect()  # garbage of earlier tests, collected inside, would add a gc.collect range
    with vr.record(path, collect_cycles=False, **backend):
        for _ in range(2):
            with torch.autograd.profiler.record_function("my_forward"):
                x = torch.ones(1000) * 2
            vr.step()
    del x
    snap = load_snapshot(path)
    rows = [(a["name"], a["stage"]) for a in snap["external_annotations"]]
    assert rows == [
        ("ProfilerStep#1", "START"),
        ("my_forward", "START"),
        ("my_forward", "END"),
        ("ProfilerStep#1", "END"),
        ("ProfilerStep#2", "START"),
        ("my_forward", "START"),
        ("my_forward", "END"),
        ("ProfilerStep#2", "END"),
    ], rows
    times = {(a["name"], a["stage"]): a["time_us"] for a in snap["external_annotations"][:4]}
    first = [e for e in snap["device_traces"][0] if e["action"] == "alloc" and e["size"] == 4000][0]
    assert times[("my_forward", "START")] <= first["time_us"] <= times[("my_forward", "END")]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_compiled_module_trains_as_unrecorded_with_the_same_graphs(tmp_path: Path, backend: Dict[str, str]) -> None:
    """``torch.compile(model)`` inside a recording: Dynamo used to trace the
    recorder's global module hooks and fail ("already tracked for
    mutation"), and with the dispatch recorder compiled nothing at all.
    Now the training computes the same values bit for bit, Dynamo compiles
    the same frames and graphs with no graph break, the parameters of the
    compiled module and the batch are named, and the global hooks are gone
    afterwards."""
    import warnings

    import torch._dynamo
    from torch._dynamo.utils import counters
    from torch.nn.modules import module as nn_module

    def train() -> Tuple[torch.nn.Module, torch.Tensor, List[torch.Tensor]]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        compiled = torch.compile(model, backend="eager")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = compiled(x).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
            vr.step()
        return model, x, losses

    def dynamo() -> Tuple[int, int, int]:
        return counters["frames"]["total"], counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())

    torch._dynamo.reset()
    counters.clear()
    want_model, _, want = train()
    want_counts = dynamo()
    torch._dynamo.reset()
    counters.clear()
    hooks_before = (dict(nn_module._global_forward_pre_hooks), dict(nn_module._global_forward_hooks))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with vr.record(tmp_path / "c.pickle", collect_cycles=False, **backend):
            model, x, got = train()
    got_counts = dynamo()
    torch._dynamo.reset()
    assert (dict(nn_module._global_forward_pre_hooks), dict(nn_module._global_forward_hooks)) == hooks_before
    assert not [w for w in seen if "global hooks" in str(w.message)], [str(w.message) for w in seen]
    assert got_counts == want_counts == (1, 1, 0)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), want_model.state_dict().values()))
    snap = load_snapshot(tmp_path / "c.pickle")
    assert snap["vramscope"]["compilations"] == 1
    by_addr = dict(zip(snap["vramscope_tags"]["addr"], snap["vramscope_tags"]["category"]))
    for p in model.parameters():
        assert by_addr[p.untyped_storage().data_ptr()] == "parameter"
    assert by_addr[x.untyped_storage().data_ptr()] == "input"
    if backend.get("backend") == "allocator":
        # The compiled graph's own allocations carry the stack of the call.
        allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
        assert allocs and all(e["frames"] for e in allocs)
    del model, want_model, x, got, want
    gc.collect()  # compiled modules sit in reference cycles: no tensor left for the next test's recording

"""The recorder on real PyTorch: snapshots of real training on the CPU path,
checked against the allocator's own figures; OOM, periodic and atomic dumps;
activation from the environment; the CUDA path (mocked here, real on a GPU)."""

from __future__ import annotations

import importlib
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import types
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Tuple

import pytest

torch = pytest.importorskip("torch")

vr = importlib.import_module("vramscope.record")  # the module (the package's `record` may be the class)
from conftest import (  # noqa: E402
    SCRIPTS,
    allocator_peak_from_chrome_trace,
    load_snapshot,
    native_module,
    replay_peak,
    run_python,
    step_annotations,
    subprocess_env,
)
from vramscope._recording import env as _env
from vramscope._recording.recorders import profiler as _profiler  # noqa: E402

from models import build, train_step  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_recording")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
MiB = 1 << 20


@pytest.fixture
def cpu_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Record through the profiler even where a GPU is present."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("VRAMSCOPE_BACKEND", "profiler")


@pytest.fixture(scope="module", params=["cnn", "transformer"])
def trained(request: Any, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Three recorded training steps of a real model on the CPU path, with a
    Chrome trace of the very same profiler window for comparison."""
    kind = request.param
    tmp = tmp_path_factory.mktemp(kind)
    model, opt, batch = build(kind)
    chrome = tmp / "window.json"
    _profiler.window_listeners.append(lambda prof: prof.export_chrome_trace(str(chrome)))
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(torch.cuda, "is_available", lambda: False)
            mp.setenv("VRAMSCOPE_BACKEND", "profiler")
            with vr.record(tmp / f"{kind}.pickle"):
                for _ in range(3):
                    train_step(model, opt, batch)
                    vr.step()
    finally:
        _profiler.window_listeners.clear()
    return SimpleNamespace(
        kind=kind,
        path=tmp / f"{kind}.pickle",
        snap=load_snapshot(tmp / f"{kind}.pickle"),
        chrome=chrome,
        param_bytes=sum(p.nbytes for p in model.parameters()),
    )


def test_snapshot_of_real_training_is_complete(trained: SimpleNamespace) -> None:
    snap = trained.snap
    assert len(snap["device_traces"]) == 1
    trace = snap["device_traces"][0]
    assert len(trace) > 500
    assert {e["action"] for e in trace} == {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free"}
    assert all(isinstance(e["time_us"], int) and e["time_us"] > 1.6e15 for e in trace)
    assert [e["time_us"] for e in trace] == sorted(e["time_us"] for e in trace)
    categories = {e.get("category") for e in trace if e["action"] == "alloc"}
    assert {"parameter", "activation", "gradient", "optimizer_state", "input"} <= categories
    assert any(f["name"].startswith("models.py(") for e in trace for f in e["frames"])
    # Reserved equals allocated on the CPU: the live blocks at the end are the
    # segments, and they add up to what the replay leaves allocated.
    level = replay_peak(trace)[1] + sum(
        e["size"] * (1 if e["action"] == "alloc" else -1) for e in trace if e["action"] in ("alloc", "free_completed")
    )
    assert sum(s["total_size"] for s in snap["segments"]) == level
    assert all(len(s["blocks"]) == 1 and s["blocks"][0]["state"] == "active_allocated" for s in snap["segments"])


def test_peak_matches_the_allocators_own_counter(trained: SimpleNamespace) -> None:
    """Snapshot replay vs the CPU allocator's running total in the profiler's
    Chrome trace of the same window (``Total Allocated`` of its ``[memory]``
    events, kept in C++ by ProfiledCPUMemoryReporter; see
    ``allocator_peak_from_chrome_trace``). The counter cannot see blocks
    allocated before profiling, the model's parameters here, which the
    snapshot counts from the start of the window: they are added from the
    model itself."""
    peak, before = replay_peak(trained.snap["device_traces"][0])
    allocator_increase, events = allocator_peak_from_chrome_trace(trained.chrome)
    print(
        f"\n{trained.kind}: snapshot peak {peak} B (before the window {before} B); allocator counter peak "
        f"{allocator_increase} B + parameters {trained.param_bytes} B = {allocator_increase + trained.param_bytes} B "
        f"over {events} [memory] events"
    )
    assert events > 100
    assert before == trained.param_bytes  # updated in place by Adam: free + alloc of a new version
    assert abs((peak - before) - allocator_increase) <= 0.01 * allocator_increase
    assert abs(peak - (allocator_increase + trained.param_bytes)) <= 0.01 * peak


def test_annotations_mark_exactly_three_iterations(trained: SimpleNamespace) -> None:
    steps = step_annotations(trained.snap)
    names = [(n, s) for n, s, _ in steps]
    assert names == [(f"ProfilerStep#{i}", stage) for i in (1, 2, 3) for stage in ("START", "END")]
    bounds = [t for _, _, t in steps]
    assert bounds == sorted(bounds)
    # Every allocation falls inside an iteration: annotations and trace share a clock.
    ranges = list(zip(bounds[::2], bounds[1::2]))
    allocs = [e["time_us"] for e in trained.snap["device_traces"][0] if e["action"] == "alloc"]
    assert all(any(a <= t <= b for a, b in ranges) for t in allocs)
    for i, (a, b) in enumerate(ranges):
        assert sum(a <= t <= b for t in allocs) > 50, f"iteration {i + 1} is empty"


def test_native_reader_agrees(trained: SimpleNamespace, capfd: pytest.CaptureFixture) -> None:
    native = native_module()
    if native is None:
        pytest.skip("vramscope._native (the compiled reader) is not importable; build it with maturin")
    import json

    capfd.readouterr()
    assert native.cli(["summary", str(trained.path), "--json"]) == 0
    summary = json.loads(capfd.readouterr().out)
    dev = summary["devices"][0]
    peak, before = replay_peak(trained.snap["device_traces"][0])
    assert dev["peak"]["allocated_bytes"] == peak
    assert dev["peak"]["before_window_bytes"] == before
    assert dev["peak_reserved_bytes"] == peak  # CPU: every allocation is its own segment
    steps = {k: v for k, v in summary["annotations"].items() if not k.startswith(("gc.collect#", "vramscope."))}
    assert steps == {"ProfilerStep#1": 1, "ProfilerStep#2": 1, "ProfilerStep#3": 1}
    # Each step's forward, with its grad mode (what tells an evaluation
    # run with autograd on).
    forwards = {k: v for k, v in summary["annotations"].items() if k.startswith("vramscope.forward#")}
    assert forwards == {"vramscope.forward#grad": 3}
    # Each call of a repeated layer is marked (what checkpointing advice
    # needs), and each layer's backward (what names backward's memory).
    blocks = {k: v for k, v in summary["annotations"].items() if k.startswith("vramscope.block#")}
    backwards = {k: v for k, v in summary["annotations"].items() if k.startswith("vramscope.backward#")}
    if trained.kind == "transformer":
        assert blocks == {"vramscope.block#encoder.layers.0": 3, "vramscope.block#encoder.layers.1": 3}
        # (and the head beside them, the one module with parameters there)
        assert backwards == {"vramscope.backward#encoder.layers.0": 3, "vramscope.backward#encoder.layers.1": 3, "vramscope.backward#head": 3}
    else:
        assert blocks == backwards == {}


def test_oom_dumps_and_reraises_the_same_exception(tmp_path: Path, cpu_path: None) -> None:
    out = tmp_path / "oom.pickle"
    message = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.77 GiB total capacity)"
    raised: List[BaseException] = []
    held = []

    def allocate_then_fail() -> None:
        for _ in range(3):
            held.append(torch.ones(256, 1024))  # 1 MiB each, alive at the OOM
        err = torch.OutOfMemoryError(message)
        raised.append(err)
        raise err

    with pytest.raises(torch.OutOfMemoryError) as info:
        with vr.record(out):
            vr.step()
            allocate_then_fail()
    assert info.value is raised[0]
    assert str(info.value) == message
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert frames[-1] == "allocate_then_fail" and "test_oom_dumps_and_reraises_the_same_exception" in frames
    assert not vr.is_recording()
    snap = load_snapshot(out)
    live = [b["size"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    assert live.count(MiB) == 3
    assert sum(e["action"] == "alloc" and e["size"] == MiB for e in snap["device_traces"][0]) == 3


def test_failed_dump_does_not_replace_the_propagating_exception(
    tmp_path: Path, cpu_path: None, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    def broken(path: str, obj: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(importlib.import_module("vramscope._recording.session"), "write_atomic", broken)
    err = torch.OutOfMemoryError("CUDA out of memory.")
    with pytest.raises(torch.OutOfMemoryError) as info:
        with vr.record(tmp_path / "x.pickle"):
            raise err
    assert info.value is err and info.value.__context__ is None
    assert "could not write" in capfd.readouterr().err
    assert not vr.is_recording()


def test_decorator_start_stop_dump_and_idle_calls(tmp_path: Path, cpu_path: None) -> None:
    assert vr.step() == 0 and not vr.is_recording()
    with pytest.raises(RuntimeError, match="not recording"):
        vr.dump()

    @vr.record(tmp_path / "dec.pickle")
    def work(n: int) -> int:
        for _ in range(n):
            torch.ones(1000)
            vr.step()
        return n

    assert work(2) == 2 and not vr.is_recording()
    assert len(step_annotations(load_snapshot(tmp_path / "dec.pickle"))) == 4
    assert work(3) == 3  # a fresh recording per call
    assert len(step_annotations(load_snapshot(tmp_path / "dec.pickle"))) == 6

    rec = vr.start(tmp_path / "manual.pickle")
    assert vr.is_recording() and rec.path.endswith("manual.pickle")
    with vr.record(tmp_path / "nested.pickle") as nested:  # the outer recording covers it
        assert nested._session is None and vr._active is rec._session
    assert not (tmp_path / "nested.pickle").exists() and vr.is_recording()
    keep = [torch.ones(64, 1024)]
    assert vr.step() == 1
    mid = vr.dump(tmp_path / "mid.pickle")
    keep.append(torch.ones(128, 1024))
    assert vr.step() == 2
    assert vr.stop() == str(tmp_path / "manual.pickle") and vr.stop() is None
    sizes_mid = [e["size"] for e in load_snapshot(mid)["device_traces"][0] if e["action"] == "alloc"]
    sizes_end = [e["size"] for e in load_snapshot(tmp_path / "manual.pickle")["device_traces"][0] if e["action"] == "alloc"]
    assert 256 * 1024 in sizes_mid and 512 * 1024 not in sizes_mid
    assert 256 * 1024 in sizes_end and 512 * 1024 in sizes_end


def test_package_record_works_whether_class_or_module(tmp_path: Path, cpu_path: None) -> None:
    """Importing the submodule ``vramscope.record`` rebinds the package's
    ``record`` attribute to the module; it must still record when called."""
    if native_module() is None:
        pytest.skip("importing the vramscope package needs vramscope._native, which is not built")
    import vramscope

    with vramscope.record(tmp_path / "a.pickle"):
        torch.ones(1000)
    vramscope.record(tmp_path / "b.pickle")(lambda: torch.ones(1000))()
    for name in ("a.pickle", "b.pickle"):
        assert [e["size"] for e in load_snapshot(tmp_path / name)["device_traces"][0] if e["action"] == "alloc"] == [4000]
    assert vramscope.step is vr.step and vramscope.mark is vr.mark


def test_marks_label_ranges_and_allocations(tmp_path: Path, cpu_path: None) -> None:
    out = tmp_path / "marks.pickle"
    with vr.record(out):
        for _ in range(2):
            with vr.mark("forward"):
                a = torch.ones(1000, 10)  # 40000 B
            vr.mark("backward")
            b = torch.ones(2000, 10)  # 80000 B
            vr.step()
            c = torch.ones(3000, 10)  # after the step: unlabelled
            del a, b, c
    snap = load_snapshot(out)
    # (garbage collections are marked too; not the subject here)
    names = [(a["name"], a["stage"]) for a in snap["external_annotations"] if not a["name"].startswith("gc.collect")]
    one = [("ProfilerStep#{}", "START"), ("forward", "START"), ("forward", "END"), ("backward", "START"), ("backward", "END"), ("ProfilerStep#{}", "END")]
    # What ran after the last step() is not a whole iteration: no END.
    assert names == [(n.format(1), s) for n, s in one] + [(n.format(2), s) for n, s in one] + [("ProfilerStep#3", "START")]
    label = {e["size"]: e.get("user_metadata") for e in snap["device_traces"][0] if e["action"] == "alloc"}
    assert label[40000] == "forward" and label[80000] == "backward" and label[120000] is None


@pytest.mark.parametrize(
    "loop",
    [
        ("gan", ["d", "g"]),  # DCGAN: the discriminator's step, then the generator's
        ("wgan", ["d", "d", "d", "g"]),  # WGAN: critic steps, then one generator step
        ("warmup", ["m"]),  # a one-off optimizer stepped once before the loop
    ],
    ids=lambda v: v[0],
)
def test_iterations_end_with_the_optimizer_that_steps_last_in_the_loop(tmp_path: Path, loop: Tuple[str, List[str]]) -> None:
    """A program that calls no ``step()``: its iterations end with the steps
    of the optimizer that steps least often (the latest to start of those),
    the loop's last: a GAN's or a WGAN's generator (the first optimizer's
    steps cut a GAN's loop in two, and its generator's gradients, kept into
    the next loop, were never another iteration's)."""
    name, order = loop
    nets = {k: torch.nn.Linear(8, 8) for k in "dgm"}
    opts = {k: torch.optim.SGD(nets[k].parameters(), lr=0.1) for k in "dgm"}
    x = torch.randn(4, 8)

    def step(k: str) -> Tuple[int, int]:
        nets[k](x).sum().backward()
        t0 = time.time_ns() // 1000
        opts[k].step()
        t1 = time.time_ns() // 1000
        opts[k].zero_grad()
        return t0, t1

    out = tmp_path / f"{name}.pickle"
    within: List[Tuple[int, int]] = []
    with vr.record(out, backend="allocator"):
        if name == "warmup":
            step("d")  # once, before the loop
        for _ in range(3):
            for k in order:
                t = step(k)
            within.append(t)  # the loop's last step
    ends = [t for n, s, t in step_annotations(load_snapshot(out)) if s == "END"]
    assert len(ends) == 3, ends
    for (t0, t1), e in zip(within, ends):
        assert t0 <= e <= t1, (name, within, ends)


def test_periodic_dumps_keep_the_last_files(tmp_path: Path, cpu_path: None) -> None:
    out = tmp_path / "run.pickle"
    with vr.record(out, every=2, keep=2):
        for _ in range(7):
            torch.ones(1000)
            vr.step()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["run.pickle", "run.step000004.pickle", "run.step000006.pickle"]
    # Each file holds the iterations completed when it was written; the one
    # opened by the last step() saw no allocation and is left out.
    for name, last in (("run.step000004.pickle", 4), ("run.step000006.pickle", 6), ("run.pickle", 7)):
        steps = step_annotations(load_snapshot(tmp_path / name))
        assert [n for n, s, _ in steps if s == "START"] == [f"ProfilerStep#{i}" for i in range(1, last + 1)]
    assert vr.periodic_path("a/b.pickle", 123) == "a/b.step000123.pickle"


def test_the_taggers_walk_is_not_in_a_profiler_window(tmp_path: Path, cpu_path: None) -> None:
    """At each dump the tagger walks Python's objects for EMAs (torch.optim
    imports AveragedModel: always looked for) and reads every parameter:
    between two profiler windows, where the profiler's Python tracer does
    not record each call (inside one it made a million events a dump, and a
    dump of a tiny program took 8 s more)."""
    import torch.optim.swa_utils  # noqa: F401 - an EMA class to look for

    names: List[str] = []
    _profiler.window_listeners.append(lambda prof: names.extend(e.name for e in prof.events()))
    try:
        with vr.record(tmp_path / "w.pickle", every=1):
            torch.ones(1000)
            vr.step()  # a dump, and the profiler started again
    finally:
        _profiler.window_listeners.clear()
    assert any("vramscope/_recording/session.py" in n for n in names)  # the tracer ran
    walked = [n for n in names if "_annotate/ema.py" in n and ("_walk" in n or "ema_tensors" in n) or "): tag_all" in n]
    assert not walked, walked[:5]


@pytest.mark.slow  # kills a recording program again and again (20 s): CI runs it, --quick does not
def test_sigkill_during_periodic_dumps_never_leaves_a_corrupt_file(tmp_path: Path) -> None:
    """20 children recording with every=1, keep=3 are SIGKILLed, half of them
    a random 0-15 ms after a write began (writes take 3-20 ms here), half
    0-1.5 s after recording began; every file under a final name must load,
    and temporary files must not look final."""
    final = re.compile(r"^k\d+(\.step\d{6})?\.pickle$")
    rng = random.Random(1234)
    zygote = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "dump_loop.py")],
        cwd=tmp_path,
        env=subprocess_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        bufsize=1,
    )
    assert zygote.stdin and zygote.stdout
    watchdog = threading.Timer(90, zygote.kill)  # a hung child ends the test, not the run
    watchdog.start()

    def line() -> str:
        text = zygote.stdout.readline()  # type: ignore[union-attr]
        assert text, "dump_loop.py ended early"
        return text

    leftovers = finals = 0
    try:
        for trial in range(20):
            zygote.stdin.write(f"{tmp_path / f'k{trial}.pickle'}\n")
            zygote.stdin.flush()
            pid = line().split()[0]
            if trial % 2 == 0:  # aimed: into the n-th write
                target, seen = rng.randint(1, 3), 0
                while seen < target:
                    seen += " dumping " in line()
                time.sleep(rng.uniform(0, 0.015))
            else:
                time.sleep(rng.uniform(0, 1.5))
            os.kill(int(pid), signal.SIGKILL)
            while not line().startswith(f"{pid} exited"):
                pass
    finally:
        watchdog.cancel()
        zygote.stdin.close()
        zygote.wait(timeout=30)
    for p in tmp_path.iterdir():
        if final.match(p.name):
            assert load_snapshot(p)["device_traces"][0], p.name
            finals += 1
        else:
            assert p.name.startswith(".") and p.name.endswith(".tmp"), p.name
            leftovers += 1
    print(f"\n{finals} final files loaded, {leftovers} temporary files left by kills during a write")
    assert finals >= 10
    assert leftovers >= 1  # some kills did land inside a write


def test_env_activation_records_without_code_change(tmp_path: Path) -> None:
    out = tmp_path / "env.pickle"
    env = dict(VRAMSCOPE_RECORD=str(out), VRAMSCOPE_MAX_ENTRIES="1000", VRAMSCOPE_STACKS="none", VRAMSCOPE_EVERY="2", VRAMSCOPE_KEEP="1")
    proc = run_python([str(SCRIPTS / "env_train.py"), "5", "--child"], cwd=tmp_path, **env)
    assert proc.returncode == 0, proc.stderr
    assert "recording True" in proc.stdout and "child recording False" in proc.stdout
    assert f"snapshot written to {out}" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env.pickle", "env.step000004.pickle"]
    snap = load_snapshot(out)
    trace = snap["device_traces"][0]
    # The window is full: the oldest allocations and frees were dropped (the
    # limit counts those, not the segment entries of blocks of their own).
    assert sum(1 for e in trace if e["action"] in ("alloc", "free_completed")) == 1000
    assert snap["vramscope"]["history"]["seen"] > snap["vramscope"]["history"]["kept"] == 1000
    assert all(e["frames"] == [] for e in trace)
    assert [n for n, s, _ in step_annotations(snap) if s == "START"][-1] == "ProfilerStep#5"


def test_env_activation_reports_bad_values_and_runs_unrecorded(tmp_path: Path) -> None:
    proc = run_python([str(SCRIPTS / "env_train.py"), "1"], cwd=tmp_path, VRAMSCOPE_RECORD="x.pickle", VRAMSCOPE_EVERY="often")
    assert proc.returncode == 0
    assert "recording False" in proc.stdout
    assert "VRAMSCOPE_RECORD ignored: VRAMSCOPE_EVERY='often': expected a whole number" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_read_env_and_keyword_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _env.read_env({}) == {}
    got = _env.read_env({"VRAMSCOPE_RECORD": "r{pid}.pickle", "VRAMSCOPE_MAX_ENTRIES": "1_000", "VRAMSCOPE_STACKS": "ALL"})
    assert got == {"path": "r{pid}.pickle", "max_entries": 1000, "stacks": "all"}
    assert vr.record("r{pid}.pickle").path == os.path.abspath(f"r{os.getpid()}.pickle")
    more = {"VRAMSCOPE_RANKS": "0-2,5", "VRAMSCOPE_DUMP_AT": "90%", "VRAMSCOPE_LIVE": "yes"}
    assert _env.read_env(more) == {"ranks": [0, 1, 2, 5], "dump_at": "90%", "live": True}
    assert _env.read_env({"VRAMSCOPE_DUMP_AT": "4096", "VRAMSCOPE_LIVE": "file:/tmp/s.json"}) == {"dump_at": 4096, "live": "file:/tmp/s.json"}
    assert _env.read_env({"VRAMSCOPE_LIVE": "0"}) == {"live": False}
    for bad in ({"VRAMSCOPE_MAX_ENTRIES": "0"}, {"VRAMSCOPE_KEEP": "-1"}, {"VRAMSCOPE_STACKS": "cpp"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            _env.read_env(bad)
    monkeypatch.setenv("VRAMSCOPE_MAX_ENTRIES", "777")
    monkeypatch.setenv("VRAMSCOPE_RECORD", "from-env.pickle")
    assert (vr.record().max_entries, vr.record().path) == (777, os.path.abspath("from-env.pickle"))
    assert vr.record("kw.pickle", max_entries=5).max_entries == 5
    assert (vr.record().every, vr.record().keep, vr.record().stacks) == (0, 3, "python")


class FakeCuda:
    """Stands in for the CUDA allocator history where there is no GPU."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: List[Dict[str, Any]] = []
        self.queued: List[Any] = []
        self.observers: List[Any] = []
        self.initialized = False
        self.metadata: List[str] = []
        self.trace: List[Dict[str, Any]] = []
        self.segments: List[Dict[str, Any]] = []
        m = torch.cuda.memory
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: self.initialized)
        monkeypatch.setattr(torch.cuda, "_lazy_call", self.queued.append)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(m, "_record_memory_history", lambda *a, **k: self.calls.append(k))
        monkeypatch.setattr(m, "_snapshot", self.snapshot)
        monkeypatch.setattr(m, "_set_memory_metadata", self.metadata.append, raising=False)
        monkeypatch.setattr(m, "_memory_metadata_supported", lambda: True, raising=False)
        # The device as an H200 would report it (what PyTorch's file leaves out).
        props = types.SimpleNamespace(name="NVIDIA H200", total_memory=150_109_880_320, major=9, minor=0)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i=0: props)
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=0: (559_022_080, 150_109_880_320))
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i=0: 2_663_383_040)
        monkeypatch.setattr(m, "get_per_process_memory_fraction", lambda i=0: 1.0, raising=False)
        monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", self.attach)
        monkeypatch.setattr(importlib.import_module("vramscope._recording.recorders.cuda"), "_observer", {"attached": False, "queued": False})

    def attach(self, fn: Any) -> None:
        if not self.initialized:
            raise RuntimeError("attached before CUDA was initialised")  # the crash being guarded against
        self.observers.append(fn)

    def allocate(self, size: int) -> None:
        """An allocation event now, as the allocator would record it."""
        t = time.time_ns() // 1000
        self.trace.append({"action": "alloc", "addr": (1 << 40) + len(self.trace) * 512, "size": size, "stream": 0, "time_us": t, "frames": []})

    def snapshot(self) -> Dict[str, Any]:
        return {"segments": list(self.segments), "device_traces": [list(self.trace)], "external_annotations": []}


def test_cuda_path_calls_and_oom_observer_guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = FakeCuda(monkeypatch)
    out = tmp_path / "cuda.pickle"
    with vr.record(out, max_entries=1234, stacks="all"):
        assert cuda.calls == [dict(enabled="all", context="all", stacks="all", max_entries=1234)]
        assert cuda.observers == [] and len(cuda.queued) == 1  # not attached before CUDA init
        cuda.initialized = True
        cuda.queued.pop()()  # what torch.cuda._lazy_init does with queued calls
        assert len(cuda.observers) == 1
        with vr.mark("fwd"):
            pass
        vr.step()
        cuda.allocate(2048)
        monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":1024:2")
        cuda.observers[0](0, 1 << 30, 150_109_880_320, 559_022_080)  # the allocator reports an OOM
        written = load_snapshot(out)
        assert written["device_traces"][0][0]["size"] == 2048
        # What the diagnosis needs beside the trace: the device's total and
        # free memory, the fraction, the workspace setting, the OOM itself.
        dev = written["vramscope"]["device"]
        assert (dev["name"], dev["total_memory"], dev["capability"]) == ("NVIDIA H200", 150_109_880_320, [9, 0])
        assert (dev["free_at_dump"], dev["reserved_at_dump"], dev["memory_fraction"]) == (559_022_080, 2_663_383_040, 1.0)
        assert dev["env"]["CUBLAS_WORKSPACE_CONFIG"] == ":1024:2"
        (oom,) = written["vramscope"]["ooms"]
        assert (oom["requested"], oom["device_free"], oom["limit"], oom["device"]) == (1 << 30, 559_022_080, 150_109_880_320, 0)
    assert cuda.calls[-1] == dict(enabled=None)
    assert cuda.metadata == ["fwd", ""]
    snap = load_snapshot(out)
    assert snap["vramscope"]["recorder"] == "cuda-allocator-history"
    assert [n for n, s, _ in step_annotations(snap) if s == "START"] == ["ProfilerStep#2"]  # #1 has no events
    cuda.observers[0](0, 1 << 30, 0, 0)  # after the recording: does nothing
    with vr.record(tmp_path / "again.pickle"):
        pass
    assert len(cuda.observers) == 1  # attached once per process


class FakeNvml(types.ModuleType):
    """``pynvml`` (nvidia-ml-py) as it answers on a GPU shared with another
    process: this process and one other listed, with their memory."""

    def __init__(self, uuid: str, used: int, total: int, mine: int, other: int, list_me: bool = True) -> None:
        super().__init__("pynvml")
        self.uuid, self.used, self.total = uuid, used, total
        me = [SimpleNamespace(pid=os.getpid(), usedGpuMemory=mine)] if list_me else []
        self.procs = me + [SimpleNamespace(pid=1, usedGpuMemory=other)]
        self.calls: List[str] = []

    def nvmlInit(self) -> None:
        self.calls.append("init")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByUUID(self, name: str) -> str:
        if name != f"GPU-{self.uuid}":
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return "handle"

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:
        return SimpleNamespace(used=self.used, total=self.total, free=self.total - self.used)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> List[SimpleNamespace]:
        return list(self.procs)


def test_nvml_that_is_missing_or_fails_is_an_answer_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each way NVML can be unavailable says why, never raises: not
    installed, no driver, a device it does not know."""
    from vramscope._recording.device_memory import nvml_usage

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert "nvidia-ml-py is not installed" in nvml_usage("abc")["missing"]
    broken = types.ModuleType("pynvml")

    def no_driver() -> None:
        raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")

    broken.nvmlInit = no_driver
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    assert nvml_usage("abc") == {"missing": "NVML did not start (NVML_ERROR_DRIVER_NOT_LOADED)"}
    nvml = FakeNvml("0b1c", used=1, total=2, mine=1, other=0)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert "no device with this device's UUID" in nvml_usage("ffff")["missing"]
    assert nvml.calls == ["init", "shutdown"]  # shut down again, whatever happened


@pytest.mark.parametrize("list_me", [True, False], ids=["nvml-lists-this-process", "pid-namespace-hides-it"])
def test_the_device_ledger_adds_up_from_what_the_recorder_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, list_me: bool) -> None:
    """At the dump the recorder reads mem_get_info, NVML and the pinned host
    allocator; the summary's ledger puts PyTorch's pools, this process's
    memory outside PyTorch, other processes and free memory side by side,
    adding up to the device's total."""
    if native_module() is None:
        pytest.skip("vramscope._native (the compiled reader) is not importable")
    cuda = FakeCuda(monkeypatch)
    total, free, reserved = 150_109_880_320, 140_000_000_000, 2 * 20 * MiB + 64 * MiB
    context, other = 620 * MiB, 3 * 1024 * MiB
    used = total - free
    props = SimpleNamespace(name="NVIDIA H200", total_memory=total, major=9, minor=0, uuid="0b1c2d3e-aaaa-bbbb-cccc-0123456789ab")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i=0: props)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=0: (free, total))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i=0: reserved)
    monkeypatch.setattr(torch.cuda.memory, "host_memory_stats", lambda: {"allocated_bytes.current": 8 * MiB, "active_bytes.current": 2 * MiB}, raising=False)
    nvml = FakeNvml(props.uuid, used=used, total=total + 512 * MiB, mine=reserved + context, other=other, list_me=list_me)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)

    def segment(addr: int, size: int, pool: Tuple[int, int]) -> Dict[str, Any]:
        return {"device": 0, "address": addr, "total_size": size, "allocated_size": 0, "active_size": 0, "requested_size": 0,
                "stream": 0, "segment_type": "large", "segment_pool_id": pool,
                "blocks": [{"address": addr, "size": size, "requested_size": 0, "state": "inactive", "frames": []}]}

    cuda.segments = [segment(1 << 40, 20 * MiB, (0, 0)), segment(2 << 40, 20 * MiB, (0, 0)), segment(3 << 40, 64 * MiB, (0, 1))]
    out = tmp_path / "ledger.pickle"
    with vr.record(out):
        cuda.initialized = True
        cuda.queued.pop()()
        cuda.allocate(4096)
    dev = load_snapshot(out)["vramscope"]["device"]
    assert dev["host_pinned"] == {"allocated_bytes": 8 * MiB, "active_bytes": 2 * MiB}
    assert nvml.calls[-2:] == ["init", "shutdown"]
    import vramscope

    (summary,) = vramscope.load(out).summary()["devices"]
    ledger = summary["ledger"]
    parts = {p["kind"]: p for p in ledger["parts"]}
    assert ledger["total_bytes"] == total and ledger["adds_up"]
    assert sum(p["bytes"] for p in ledger["parts"]) == total
    assert (parts["pytorch_default_pool"]["bytes"], parts["pytorch_default_pool"]["segments"]) == (40 * MiB, 2)
    assert parts["pytorch_graph_pool"]["bytes"] == 64 * MiB and parts["pytorch_graph_pool"]["pool_id"] == [0, 1]
    assert parts["free"] == {**parts["free"], "bytes": free, "source": "measured"}
    assert ledger["host_pinned_bytes"] == 8 * MiB
    if list_me:
        assert parts["outside_pytorch_this_process"]["bytes"] == context
        assert parts["other_processes"]["bytes"] == used - reserved - context
        assert "outside_pytorch" not in parts
    else:
        assert parts["outside_pytorch"]["bytes"] == used - reserved
        assert any("none with this process's PID" in n for n in ledger["notes"]), ledger["notes"]
    text = vramscope.load(out).summary_text()
    assert "Device memory   139.80 GiB in all" in text and "PyTorch, pool (0, 1): a CUDA graph's own" in text, text
    # The recording tells an estimate what this program holds outside
    # PyTorch, where NVML measured it; where it did not, it says so.
    gpu_dir = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "gpu"
    est = vramscope.load(gpu_dir / "estimate_trace_b64_default.pickle.gz")
    if list_me:
        f = est.fit("80GiB", outside=out)
        assert f["outside"] == context and f["usable"] == 80 * 1024 * MiB - context
        assert "620.00 MiB outside PyTorch's allocator, as this program held it when ledger.pickle was recorded (NVML)" in f["sentence"], f["sentence"]
        assert est.fit("80GiB", outside=vramscope.load(out))["outside"] == context
    else:
        with pytest.raises(ValueError, match="did not measure this program's memory outside PyTorch"):
            est.fit("80GiB", outside=out)
    assert est.fit("80GiB", outside="700MiB")["outside"] == 700 * MiB
    assert "the CUDA context as measured" in est.fit("80GiB")["sentence"]


def _train_tiny(steps: int = 2, adam: bool = True) -> Tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    # Adam checks CUDA graph capture when CUDA looks available: the mocked
    # CUDA path steps SGD with momentum (one state tensor per parameter).
    ps = model.parameters()
    opt = torch.optim.Adam(ps) if adam else torch.optim.SGD(ps, lr=0.1, momentum=0.9)
    x = torch.randn(16, 8)
    for _ in range(steps):
        model(x).sum().backward()
        opt.step()
        vr.step()
    return model, opt, x


def _mocked_tags(monkeypatch: pytest.MonkeyPatch, set_meta: Any = lambda m: None, get_meta: Any = lambda: "") -> Dict[int, set]:
    """The mocked CUDA path's annotations, as they come: storage address ->
    the ``category=...`` metadata each was given (the dict fills while the
    recording runs; every annotation also listed in its ``"all"`` entry)."""
    cats: Dict[Any, Any] = {"all": []}

    def annotate(t: torch.Tensor, md: str) -> None:
        ptr = t.untyped_storage().data_ptr()
        cats["all"].append((ptr, md))
        cats.setdefault(ptr, set()).add(md)

    m = torch.cuda.memory
    monkeypatch.setattr(m, "_set_memory_metadata", set_meta, raising=False)
    monkeypatch.setattr(m, "_get_memory_metadata", get_meta, raising=False)
    monkeypatch.setattr(m, "_annotate_tensor", annotate, raising=False)
    monkeypatch.setattr(importlib.import_module("vramscope._annotate.tags").Tagger, "_wanted", lambda self, dev: True)
    return cats


def test_cuda_tags_name_parameters_gradients_state_and_phases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorder's global hooks, on the CUDA path (mocked: CPU tensors
    stand in for CUDA ones): phases in the allocation metadata, composed
    with the program's own and restored after; every parameter, gradient,
    optimizer state tensor and the batch annotated once per allocation."""
    cuda = FakeCuda(monkeypatch)
    current = {"meta": ""}

    def set_meta(m: str) -> None:
        cuda.metadata.append(m)
        current["meta"] = m

    cats = _mocked_tags(monkeypatch, set_meta, lambda: current["meta"])
    annotated = cats["all"]
    with vr.record(tmp_path / "tags.pickle"):
        set_meta("user-label")
        model, opt, x = _train_tiny(adam=False)
    ptr = lambda t: t.untyped_storage().data_ptr()  # noqa: E731
    for p in model.parameters():
        assert "category=parameter" in cats[ptr(p)]
        assert "category=gradient" in cats[ptr(p.grad)]
        for v in opt.state[p].values():
            assert "category=optimizer_state" in cats[ptr(v)]
    assert cats[ptr(x)] == {"category=input"}
    # Each allocation is named once, not at every step.
    assert len(annotated) == len(set(annotated))
    # Phases: the program's label kept, the phase added, then restored.
    assert "user-label;phase=forward" in cuda.metadata
    assert "user-label;phase=optimizer" in cuda.metadata
    assert cuda.metadata[-1] == "user-label"
    snap = load_snapshot(tmp_path / "tags.pickle")
    assert "vramscope_tags" not in snap  # annotate entries carry them on CUDA


def test_a_modules_output_given_to_the_next_model_is_no_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GAN's step (pytorch/examples' DCGAN): the generator's images go to
    the discriminator as ``fake.detach()``, which needs no gradient, as a
    batch does; they are the generator's activation, kept for its backward,
    not the batch. The noise and the real images are the batch."""
    FakeCuda(monkeypatch)
    cats = _mocked_tags(monkeypatch)
    gen = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh())
    disc = torch.nn.Sequential(torch.nn.Linear(16, 1), torch.nn.Sigmoid())
    # (SGD with momentum: Adam checks CUDA graph capture where CUDA looks
    # available, as in _train_tiny.)
    opt_d = torch.optim.SGD(disc.parameters(), lr=0.1, momentum=0.9)
    opt_g = torch.optim.SGD(gen.parameters(), lr=0.1, momentum=0.9)
    kept = []
    with vr.record(tmp_path / "gan.pickle"):
        for _ in range(2):
            real, noise = torch.randn(8, 16), torch.randn(8, 4)
            disc.zero_grad()
            disc(real).mean().backward()
            fake = gen(noise)
            disc(fake.detach()).mean().backward()
            opt_d.step()
            gen.zero_grad()
            (-disc(fake).mean()).backward()
            opt_g.step()
            kept.append((real, noise, fake))
    ptr = lambda t: t.untyped_storage().data_ptr()  # noqa: E731
    for real, noise, fake in kept:
        assert cats[ptr(real)] == {"category=input"}
        assert cats[ptr(noise)] == {"category=input"}
        assert "category=input" not in cats.get(ptr(fake), set()), cats.get(ptr(fake))


def test_cuda_backward_thread_is_stamped_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pre-hook on the model output's grad_fn runs on autograd's device
    thread for CUDA tensors: it stamps phase=backward there, once, and never
    on the thread that ran the forward."""
    tags_mod = importlib.import_module("vramscope._annotate.tags")
    local = threading.local()
    calls: List[Tuple[str, str]] = []
    m = torch.cuda.memory
    monkeypatch.setattr(m, "_set_memory_metadata", lambda md: (calls.append((threading.current_thread().name, md)), setattr(local, "md", md)), raising=False)
    monkeypatch.setattr(m, "_get_memory_metadata", lambda: getattr(local, "md", ""), raising=False)
    monkeypatch.setattr(m, "_annotate_tensor", lambda t, md: None, raising=False)
    tagger = tags_mod.Tagger(cuda=True)
    tagger.install()
    try:
        model = torch.nn.Linear(4, 2)
        out = model(torch.randn(3, 4))
        calls.clear()
        out.sum().backward()  # CPU: backward on this thread, which ran the forward
        assert calls == []

        def engine() -> None:  # what autograd's CUDA device thread does
            tagger._backward_begins(None)
            tagger._backward_begins(None)

        t = threading.Thread(target=engine, name="autograd-device-thread")
        t.start()
        t.join()
        assert calls == [("autograd-device-thread", "phase=backward")]
    finally:
        tagger.uninstall()


def test_a_gradient_is_named_once_per_tensor_not_at_every_step() -> None:
    """At each optimizer step the Tagger names the gradients: a gradient
    tensor named at an earlier step (``zero_grad(set_to_none=False)``, or
    none) is not looked at again (165 to 20 µs a step for the 77
    parameters of bench/bench_record_overhead.py); a new one
    (``set_to_none=True``) is named."""
    tags_mod = importlib.import_module("vramscope._annotate.tags")
    tagger = tags_mod.Tagger(cuda=False)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tagger.install()
    try:
        def step(set_to_none: bool) -> List[int]:
            """The addresses of the gradient rows this step wrote."""
            before = len(tagger.rows["addr"])
            model(torch.randn(3, 4)).sum().backward()
            grads = {p.grad.untyped_storage().data_ptr() for p in model.parameters()}
            opt.step()
            opt.zero_grad(set_to_none=set_to_none)
            rows = list(zip(tagger.rows["addr"][before:], tagger.rows["category"][before:]))
            named = [a for a, c in rows if c == "gradient"]
            assert set(named) <= grads, "a gradient row names the gradient's own block"
            return named

        step(set_to_none=False)  # the first step names everything
        assert step(set_to_none=False) == []  # the same gradient tensors: nothing to name
        assert step(set_to_none=True) == []  # (still the same tensors at this step's start)
        assert len(step(set_to_none=True)) == 4  # new tensors: each named
        # A new gradient at the address of the last one (the allocator's
        # reuse) is named again: the tensor, not the address, is new.
        assert len(step(set_to_none=True)) == 4
    finally:
        tagger.uninstall()
    by_addr = dict(zip(tagger.rows["addr"], tagger.rows["category"]))
    assert all(by_addr[p.untyped_storage().data_ptr()] == "parameter" for p in model.parameters())


def test_the_taggers_reads_are_not_seen_by_a_torch_function_mode() -> None:
    """The Tagger reads each parameter's gradient (``.grad``, its address,
    offset and device) at every optimizer step. A ``TorchFunctionMode`` on
    the stack (the CPU allocator recorder's, which takes stacks) saw each of
    those reads: four calls per parameter, 388 a step for the GPT of
    bench/bench_record_overhead.py, where the step itself made 1,604. The
    reads now run with torch functions off: a step with the Tagger makes the
    mode see what the step alone makes."""
    from torch.overrides import TorchFunctionMode

    tags_mod = importlib.import_module("vramscope._annotate.tags")
    seen: List[str] = []

    class Count(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(3, 4)

    def calls_per_step() -> int:
        model(x).sum().backward()
        seen.clear()
        with Count():
            opt.step()
        opt.zero_grad(set_to_none=True)  # new gradients: each is read at the next step
        return len(seen)

    calls_per_step()  # SGD's first step (its state)
    alone = calls_per_step()
    tagger = tags_mod.Tagger(cuda=False)
    tagger.install()
    try:
        calls_per_step()  # the first step names everything
        before = len(tagger.rows["addr"])
        tagged = calls_per_step()
        named = len(tagger.rows["addr"]) - before
    finally:
        tagger.uninstall()
    assert named == 4, "the step's four new gradients were named"
    assert tagged == alone, f"the mode saw {tagged - alone} more calls with the Tagger"


def test_a_batch_given_by_keyword_is_named_input(tmp_path: Path, cpu_path: None) -> None:
    """Hugging Face models are called with keywords (``model(input_ids=...,
    labels=...)``), and a global forward pre-hook is given the positional
    arguments only: the keywords are read from the call itself. (Before,
    such a batch was named by the stacks at best: a Whisper fine-tune's
    features were `inputs` at the peak and `unknown` at the end.)"""

    class Keywords(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(32, 4)

        def forward(self, features: Any = None, labels: Any = None) -> Any:
            return torch.nn.functional.cross_entropy(self.lin(features), labels)

    torch.manual_seed(0)
    model = Keywords()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    features, labels = torch.randn(64, 32), torch.randint(0, 4, (64,))
    out = tmp_path / "keywords.pickle"
    with vr.record(out):
        for _ in range(2):
            model(features=features, labels=labels).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    tags = load_snapshot(out)["vramscope_tags"]
    by_addr = {a: c for a, c in zip(tags["addr"], tags["category"])}
    assert by_addr.get(features.untyped_storage().data_ptr()) == "input"
    assert by_addr.get(labels.untyped_storage().data_ptr()) == "input"
    assert by_addr.get(model.lin.weight.untyped_storage().data_ptr()) == "parameter"


def test_tags_are_rows_where_annotations_are_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_path: None) -> None:
    """The CPU recorder (and CUDA builds without ``_annotate_tensor``) write
    the tags as ``vramscope_tags`` columns, read by vramscope."""
    out = tmp_path / "cpu_tags.pickle"
    with vr.record(out):
        model, opt, x = _train_tiny()
    tags = load_snapshot(out)["vramscope_tags"]
    assert set(tags) == {"device", "addr", "time_us", "category"}
    assert len({len(v) for v in tags.values()}) == 1
    by_addr = {a: c for a, c in zip(tags["addr"], tags["category"])}
    for p in model.parameters():
        assert by_addr[p.untyped_storage().data_ptr()] == "parameter"
        for v in opt.state[p].values():
            assert by_addr[v.untyped_storage().data_ptr()] == "optimizer_state"
    assert by_addr[x.untyped_storage().data_ptr()] == "input"
    native = native_module()
    if native is not None:
        import json

        (view,) = json.loads(native.load(str(out)).categories_json(None))
        assert view["agreement"]["with_tags"] is not None


@needs_cuda
def test_cuda_oom_observer_dumps_before_the_error(tmp_path: Path) -> None:
    out = tmp_path / "gpu.pickle"
    torch.cuda.init()
    free, _total = torch.cuda.mem_get_info()
    with pytest.raises(torch.OutOfMemoryError) as info:
        with vr.record(out, on_oom=True):
            x = torch.ones(4 * MiB, device="cuda")
            vr.step()
            out.unlink(missing_ok=True)
            try:
                torch.empty(free * 4, dtype=torch.uint8, device="cuda")
            finally:
                assert out.exists(), "the observer did not dump before the error was raised"
    snap = load_snapshot(out)
    assert any(e["action"] == "oom" for t in snap["device_traces"] for e in t)
    assert "out of memory" in str(info.value).lower()
    del x


@needs_cuda
def test_cuda_steps_are_in_external_annotations(tmp_path: Path) -> None:
    out = tmp_path / "gpu_steps.pickle"
    model = torch.nn.Linear(256, 256).cuda()
    with vr.record(out):
        for _ in range(3):
            model(torch.randn(64, 256, device="cuda")).sum().backward()
            vr.step()
    snap = load_snapshot(out)
    starts = [n for n, s, _ in step_annotations(snap) if s == "START"]
    assert starts == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    peak, _ = replay_peak(snap["device_traces"][torch.cuda.current_device()])
    assert peak >= 64 * 256 * 4

"""Shared helpers for the recorder tests: snapshot replay, subprocess runs,
the optional native reader.

The recorder tests need torch but not the compiled extension: everything
that uses ``vramscope._native`` skips with a reason when it is missing.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

import pytest

TESTS = Path(__file__).resolve().parent
SCRIPTS = TESTS / "scripts"
PYTHON_SRC = TESTS.parent  # the directory that holds the vramscope package

sys.path.insert(0, str(SCRIPTS))  # models.py, shared with the subprocess scripts


def load_snapshot(path: os.PathLike | str) -> Dict[str, Any]:
    """``pickle.load`` of a snapshot file (our own test output: trusted)."""
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert isinstance(snap, dict), type(snap)
    return snap


def peak_and_sizes(trace: Iterable[Dict[str, Any]]) -> Tuple[int, List[int]]:
    """The peak of what a trace allocates (above what was there before it)
    and each allocation's size, in order: what a one-step recording is held
    to allocation by allocation."""
    live = peak = 0
    sizes: List[int] = []
    for e in trace:
        if e["action"] == "alloc":
            live += e["size"]
            peak = max(peak, live)
            sizes.append(e["size"])
        elif e["action"] == "free_completed":
            live -= e["size"]
    return peak, sizes


def replay_peak(trace: Iterable[Dict[str, Any]]) -> Tuple[int, int]:
    """Peak allocated bytes over a device trace and the part of it that was
    allocated before the window.

    ``alloc`` adds its size and ``free_completed`` subtracts it. A free with no
    ``alloc`` earlier in the trace belongs to a block allocated before the
    window, which therefore counts as allocated from the start (as PyTorch's
    viewer and vramscope's reader do).

    Returns ``(peak_bytes, before_window_bytes)``.
    """
    trace = list(trace)
    open_addrs: set = set()
    before = 0
    for e in trace:
        if e["action"] == "alloc":
            open_addrs.add(e["addr"])
        elif e["action"] == "free_completed":
            if e["addr"] in open_addrs:
                open_addrs.discard(e["addr"])
            else:
                before += e["size"]
    level = peak = before
    for e in trace:
        if e["action"] == "alloc":
            level += e["size"]
        elif e["action"] == "free_completed":
            level -= e["size"]
        peak = max(peak, level)
    return peak, before


def allocator_peak_from_chrome_trace(path: os.PathLike | str) -> Tuple[int, int]:
    """Peak of the CPU allocator's own counter over a profiler Chrome trace.

    Every ``[memory]`` event carries ``Total Allocated``: the running total
    kept by c10's ``ProfiledCPUMemoryReporter`` inside the CPU allocator,
    independent of the profiler's Python-side memory analysis that
    ``_profile_to_snapshot`` builds on. The counter only knows blocks allocated
    while profiling, so the level before the first event is subtracted.

    Returns ``(peak_increase_bytes, events)``.
    """
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    mem = sorted(
        (e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
        key=lambda e: e["ts"],
    )
    assert mem, "no [memory] events in the profiler trace"
    base = mem[0]["args"]["Total Allocated"] - mem[0]["args"]["Bytes"]
    return max(e["args"]["Total Allocated"] for e in mem) - base, len(mem)


def step_annotations(snap: Dict[str, Any]) -> List[Tuple[str, str, int]]:
    """``(name, stage, time_us)`` of the ``ProfilerStep#N`` annotations."""
    return [
        (a["name"], a["stage"], a["time_us"])
        for a in snap.get("external_annotations", [])
        if a["name"].startswith("ProfilerStep#")
    ]


def native_module() -> Optional[Any]:
    """``vramscope._native`` if it can be imported, else ``None``."""
    try:
        return importlib.import_module("vramscope._native")
    except ImportError:
        return None


def subprocess_env(**extra: str) -> Dict[str, str]:
    """Environment for child Pythons: this checkout's package first, no
    ``VRAMSCOPE_*`` leaking in from the outside."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMSCOPE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    if oversubscribed():
        # One thread per program where every core already has a test
        # worker: torch's default (a thread per core) in each of them
        # oversubscribes the cores, and OpenMP's threads spin waiting for
        # each other (measured: the advice's 49 real runs beside a second
        # worker, 221 s with two threads each, 188 s with one).
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("MKL_NUM_THREADS", "1")
    env.update(extra)
    return env


def run_python(
    args: List[str], cwd: os.PathLike | str, timeout: float = 120, preload: Tuple[str, ...] = (), **env: str
) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` in ``cwd`` with :func:`subprocess_env`, forked
    from a Python that has imported torch (and ``preload``, modules the
    program imports itself) where the environment allows
    (``forkserver.py``)."""
    import forkserver

    return forkserver.run(args, subprocess_env(**env), cwd, timeout=timeout, preload=preload)


@pytest.fixture(autouse=True, scope="module")
def no_garbage_from_earlier_modules():
    """Each module starts with the garbage of the modules before it
    collected. A recording counts a block it sees freed but never saw made
    as allocated from the start, so tensors an earlier test left in a
    reference cycle (an exception's traceback holding its frame), collected
    in the middle of a later test's recording, raised that test's peak; the
    order of modules (and which share a pytest-xdist worker) must not change
    a figure."""
    import gc

    gc.collect()
    yield


@pytest.fixture
def clean_recording(monkeypatch: pytest.MonkeyPatch):
    """The test starts and ends with no active recording and no listeners,
    and does not see the caller's VRAMSCOPE_* variables (recorder test
    modules use it for every test through ``pytestmark``)."""
    for key in list(os.environ):
        if key.startswith("VRAMSCOPE_"):
            monkeypatch.delenv(key)
    yield
    _profiler = importlib.import_module("vramscope._recording.recorders.profiler")
    rec = importlib.import_module("vramscope.record")  # the module; the package's `record` is the class

    _profiler.window_listeners.clear()
    if rec.is_recording():
        rec.stop(write=False)
        pytest.fail("the test left a recording active")


# Modules that record or compile whole training programs (a minute or more
# each on 2 cores): `scripts/test.sh --quick` leaves them out (`-m "not
# slow"`); the full suite, which CI runs, keeps them.
SLOW_MODULES = {
    "test_advise_cpu.py",
    "test_advise_zoo.py",
    "test_compat.py",
    "test_corpus.py",
    "test_integrations.py",
    "test_integrations_hf.py",
    "test_wheel.py",  # links a manylinux wheel with zig (36 s, unoptimised)
    "test_zoo_estimate.py",
}


def oversubscribed() -> bool:
    """Whether every core already runs a test worker (pytest-xdist with as
    many workers as cores, as ``scripts/test.sh`` runs the suite)."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) >= (os.cpu_count() or 1)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: records or compiles whole training programs, or builds the wheel (left out by scripts/test.sh --quick)")
    if os.environ.get("PYTEST_XDIST_WORKER") and oversubscribed():
        # One intra-op thread in each worker too, as in the programs it
        # starts (`subprocess_env`): the tests that train in the worker's
        # own process (the zoo's real peaks, the estimates) beside the other
        # worker, with torch's default of a thread per core, spent their
        # time in OpenMP's threads spinning against each other (five zoo
        # cells beside a busy core: 26.5 s with two threads, 15.8 with one;
        # the figures the same).
        try:
            import torch
        except ImportError:
            return
        torch.set_num_threads(1)


# The longest modules first (seconds on two cores beside the other worker,
# from `--durations`; `.ci/run` prints the CI machine's at the end of its
# log), so that under pytest-xdist (`scripts/test.sh` on two or more cores)
# no worker starts a long module while the other is about to run out of
# work. The suite is bound by the cores: two modules side by side each take
# about twice as long as alone (the advice's real runs: 186 s alone, 481 s
# beside the compatibility matrix).
LONGEST_FIRST = (
    "test_compat.py",  # 276
    "test_advise_cpu.py",  # 254
    "test_zoo_estimate.py",  # 186 (its compiled cells: Inductor compiles each model twice)
    "test_advise_zoo.py",  # 156
    "test_corpus.py",  # 114
    "test_wheel.py",  # 40 to 170 (a manylinux wheel built unoptimised and linked with zig)
    "test_record.py",  # 105
    "test_rank_live.py",  # 65
    "test_leaks.py",  # 60
    "test_run.py",  # 45
    "test_optimizers.py",  # 45
)


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)

    def rank(item: pytest.Item) -> int:
        name = Path(str(item.fspath)).name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the order within a module is kept


# Seconds per module (setup, call and teardown of its tests, as the workers
# report them), written where VRAMSCOPE_TEST_TIMES names: `.ci/run` prints
# them last, where a cut log still shows them, so that LONGEST_FIRST and the
# suite's time can be checked against the CI machine's own figures.
_module_seconds: Dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    _module_seconds[module] = _module_seconds.get(module, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("VRAMSCOPE_TEST_TIMES")
    if not out or hasattr(session.config, "workerinput"):  # the controller writes, not each worker
        return
    ranked = sorted(_module_seconds.items(), key=lambda kv: -kv[1])
    with open(out, "w") as f:
        f.write(f"pytest: {sum(_module_seconds.values()):.0f} s in tests over {len(ranked)} modules; the longest:\n")
        for name, seconds in ranked[:15]:
            f.write(f"  {seconds:7.0f} s  {name}\n")

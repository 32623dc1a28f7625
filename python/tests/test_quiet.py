"""A CPU recording prints nothing from the profiler: Kineto's log lines
(``USDT: ... profiler_start``, ``ERROR: ... gpuGetDeviceCount failed``) are
dropped around the profiler's start and stop, c10's warning about tensors
from before the recording freed during it is hidden while it records, and
the user's own stderr output and vramscope's messages still arrive, in order.

The end-to-end tests run a fresh Python with ``CUDA_VISIBLE_DEVICES=""``, so
that they take the profiler path on a GPU machine too, and without the
variables that ask PyTorch for its logs.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

vr = importlib.import_module("vramscope.record")  # the module (the package's `record` may be the class)
from conftest import native_module, subprocess_env  # noqa: E402
from vramscope._recording import quiet as _quiet  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_recording")
NATIVE = native_module() is not None
# What the profiler prints on a CPU-only machine; none of it may reach the user.
PROFILER_NOISE = ("USDT", "gpuGetDeviceCount", "profiler_start", "profiler_stop", "ERROR:", "STAGE:", "CPUAllocator.cpp", "Memory block of unknown size")
LOG_VARIABLES = ("KINETO_LOG_LEVEL", "TORCH_CPP_LOG_LEVEL")
MAIN = "import sys; from vramscope.run import main; sys.exit(main(sys.argv[1:]))"

TRAIN = textwrap.dedent(
    """\
    import sys
    import torch
    import vramscope

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for i in range(3):
        loss = model(torch.randn(8, 16)).pow(2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"user line {i}", file=sys.stderr)
        vramscope.step()
    """
)


def run_cpu(args: list, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """``python ARGS`` on the CPU path, with PyTorch's default log levels
    unless ``env`` sets them."""
    full = subprocess_env(CUDA_VISIBLE_DEVICES="", VRAMSCOPE_BACKEND="profiler")
    for key in LOG_VARIABLES:
        full.pop(key, None)
    full.update(env)
    return subprocess.run([sys.executable, *args], cwd=str(cwd), env=full, capture_output=True, text=True, timeout=120)


PLAIN = textwrap.dedent(
    """\
    import os, sys
    import torch
    import vramscope

    model = torch.nn.Linear(16, 4)
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 16)
    model(x).sum().backward()
    opt.step()
    print("before", file=sys.stderr)
    with vramscope.record(sys.argv[1], every=1):
        for i in range(3):
            opt.zero_grad(set_to_none=True)
            x = torch.randn(8, 16)
            model(x).sum().backward()
            opt.step()
            print(f"user line {i}", file=sys.stderr)
            vramscope.step()
        os.write(2, b"raw fd write\\n")
    print("after", file=sys.stderr)
    """
)


def no_profiler_noise(stderr: str) -> None:
    for pattern in PROFILER_NOISE:
        assert pattern not in stderr, stderr


@pytest.mark.parametrize("every", [None, 1])
def test_vramscope_run_on_cpu_prints_only_vramscope_and_user_lines(tmp_path: Path, every: object) -> None:
    """``--every 1`` restarts the profiler at each step: four starts and stops."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    every_args = ["--every", str(every)] if every else []
    proc = run_cpu(["-c", MAIN, *every_args, str(script)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    no_profiler_noise(proc.stderr)
    snapshot = tmp_path / "vramscope-train.pickle"
    html = tmp_path / "vramscope-train.html"
    lines = proc.stderr.splitlines()
    assert lines[:3] == ["user line 0", "user line 1", "user line 2"], proc.stderr
    if NATIVE:
        # The Rust report command announces its file as "wrote PATH".
        assert lines[3:] == [f"vramscope: snapshot written to {snapshot}", f"vramscope: report written to {html}"]
    else:
        assert lines[3] == f"vramscope: snapshot written to {snapshot}"
        assert all(line.startswith("vramscope: ") for line in lines[3:]), proc.stderr
    if every:
        assert sorted(p.name for p in tmp_path.glob("vramscope-train.step*.pickle")) == [
            f"vramscope-train.step00000{n}.pickle" for n in (1, 2, 3)
        ]


def test_record_block_in_a_plain_script_is_quiet(tmp_path: Path) -> None:
    """Everything the script writes to stderr, before, inside and after the
    recorded block, arrives in order, and nothing else does. The model has
    trained one step before the block: the block frees those gradients and
    that batch, which c10 would warn about."""
    script = tmp_path / "plain.py"
    script.write_text(PLAIN)
    out = tmp_path / "plain.pickle"
    proc = run_cpu([str(script), str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    no_profiler_noise(proc.stderr)
    assert proc.stderr.splitlines() == ["before", "user line 0", "user line 1", "user line 2", "raw fd write", "after"]
    assert out.stat().st_size > 1000


def test_log_levels_set_by_the_user_let_the_lines_through(tmp_path: Path) -> None:
    """Someone who sets ``KINETO_LOG_LEVEL`` or ``TORCH_CPP_LOG_LEVEL`` asked
    for those logs (the levels are PyTorch's defaults here)."""
    script = tmp_path / "plain.py"
    script.write_text(PLAIN)
    proc = run_cpu([str(script), str(tmp_path / "x.pickle")], tmp_path, KINETO_LOG_LEVEL="4", TORCH_CPP_LOG_LEVEL="WARNING")
    assert proc.returncode == 0, proc.stderr
    for line in ("] profiler_start", "] profiler_stop", "] gpuGetDeviceCount failed with code", "CPUAllocator.cpp:"):
        assert line in proc.stderr, proc.stderr


@pytest.mark.skipif("KINETO_LOG_LEVEL" in os.environ, reason="KINETO_LOG_LEVEL decides what Kineto prints")
def test_the_pattern_matches_every_line_this_torch_prints(capfd: pytest.CaptureFixture) -> None:
    """Without the filter, the profiler's start and stop print lines, and the
    filter recognises every one of them (pins the pattern to this PyTorch)."""
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    capfd.readouterr()
    prof.start()
    torch.ones(4) * 2
    prof.stop()
    err = capfd.readouterr().err
    assert re.search(r"^USDT:.*\] profiler_start$", err, re.M), err
    assert re.search(r"^USDT:.*\] profiler_stop$", err, re.M), err
    assert _quiet.without_kineto_lines(err.encode()) == b""


def test_filter_keeps_everything_else_written_to_fd2(capfd: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    kineto = (
        b"USDT:2026-11-24 16:23:52 28787:28787 SyncActivityProfilerHandler.cpp:39] profiler_start\n"
        b"ERROR:2026-11-24 16:23:52 28787:28787 DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35\n"
        b"V:2026-11-24 16:23:52 1:2 CuptiActivityProfiler.cpp:1] verbose\n"
    )
    kept = b"ERROR: the user's own error line\nWARNING: not from Kineto\nno newline at the end"
    capfd.readouterr()
    with _quiet.profiler_logs_dropped():
        os.write(2, kineto[:40])  # a Kineto line in two writes is still one line
        os.write(2, kineto[40:] + kept)
    assert capfd.readouterr().err == kept.decode()


def test_fd2_is_restored_even_when_the_call_fails(capfd: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    before = os.fstat(2)
    with pytest.raises(RuntimeError, match="profiler broke"):
        with _quiet.profiler_logs_dropped():
            os.write(2, b"written before the failure\n")
            raise RuntimeError("profiler broke")
    after = os.fstat(2)
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "written before the failure\nafter\n"


def test_a_cpu_recording_in_this_process_prints_no_profiler_lines(tmp_path: Path, capfd: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in LOG_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("VRAMSCOPE_BACKEND", "profiler")
    held = torch.ones(1024)  # allocated before the recording, freed inside it
    capfd.readouterr()
    with vr.record(tmp_path / "in.pickle", every=1):
        del held
        for _ in range(2):
            torch.ones(16) * 2
            vr.step()
    err = capfd.readouterr().err
    assert err == "", err


def test_c10_log_level_is_raised_while_recording_and_restored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ERROR (2) from the first profiler start to the end, across restarts;
    then the level before, unless the program changed it meanwhile."""
    monkeypatch.delenv("TORCH_CPP_LOG_LEVEL", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("VRAMSCOPE_BACKEND", "profiler")
    level = _quiet._c10_log_level()
    if level is None:
        pytest.skip("libc10 exports no FLAGS_caffe2_log_level here")
    saved = level.value
    try:
        level.value = 1  # WARNING, PyTorch's default
        with vr.record(tmp_path / "a.pickle", every=1):
            assert level.value == 2
            vr.step()  # a dump: the profiler stops and starts again
            assert level.value == 2
        assert level.value == 1
        with vr.record(tmp_path / "b.pickle"):
            level.value = 0  # the program asks for INFO while recording
        assert level.value == 0
        # Asked for with TORCH_CPP_LOG_LEVEL: left alone.
        monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", "WARNING")
        level.value = 1
        with vr.record(tmp_path / "c.pickle"):
            assert level.value == 1
    finally:
        level.value = saved


@pytest.mark.parametrize("backend", ["allocator", "dispatch"])
def test_a_warning_from_the_program_keeps_the_programs_line(tmp_path: Path, backend: str) -> None:
    """PyTorch's warnings raised by the program's own lines are shown
    there, not at the recorder's mode that was the innermost Python frame
    (``float(loss)`` read ``vramscope/_recording/recorders/cpu_allocator.py:169``). (That warning is
    raised once per process; the copy-construction one every time.)"""
    import inspect
    import warnings

    import vramscope

    if backend == "allocator" and native_module() is None:
        pytest.skip("vramscope._native is not built")
    x = torch.ones(3, requires_grad=True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with vramscope.record(tmp_path / "w.pickle", backend=backend):
            line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
            value = float((x * 2).sum())
            copy_line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
            copied = torch.tensor(x.detach())
    assert value == 6.0 and copied.shape == (3,)
    placed = [(w.filename, w.lineno) for w in seen if "to a scalar" in str(w.message)]
    placed += [(w.filename, w.lineno - (copy_line - line)) for w in seen if "copy construct" in str(w.message)]
    assert placed, [str(w.message) for w in seen]
    assert all(p == (__file__, line) for p in placed), placed
    # Outside a recording nothing is changed.
    assert warnings._showwarnmsg.__module__ == "warnings"  # type: ignore[attr-defined]

"""One device rule: a one-device command without ``--device`` reads the
first device with allocations (not device 0 because it comes first), and
says which on stderr where the file has several."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import native_module

if native_module() is None:
    pytest.skip("vramscope._native is not built", allow_module_level=True)

import vramscope  # noqa: E402

MIB = 1 << 20


def _two_devices(path: Path) -> Path:
    """Device 0 holds one cached 2 MiB segment and allocates nothing (a
    process that touched it: the CUDA context, a stray empty_cache); device
    1 trains: 40 MiB allocated and freed twice, then a 1 GiB-capped OOM."""
    base = 0x7F0000000000
    frames = [{"filename": "train.py", "line": 12, "name": "step"}]
    dev1 = []
    t = 1
    for _ in range(2):
        for i in range(4):
            dev1.append({"action": "segment_alloc", "addr": base + i * (20 * MIB), "size": 20 * MIB, "stream": 0, "time_us": t, "frames": frames})
            dev1.append({"action": "alloc", "addr": base + i * (20 * MIB), "size": 10 * MIB, "stream": 0, "time_us": t, "frames": frames})
            t += 1
        for i in range(4):
            for a in ("free_requested", "free_completed"):
                dev1.append({"action": a, "addr": base + i * (20 * MIB), "size": 10 * MIB, "stream": 0, "time_us": t, "frames": frames})
            t += 1
    snap = {
        "segments": [
            {"device": 0, "address": 0x7E0000000000, "total_size": 2 * MIB, "allocated_size": 0, "active_size": 0, "requested_size": 0,
             "stream": 0, "segment_type": "small", "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
             "blocks": [{"address": 0x7E0000000000, "size": 2 * MIB, "requested_size": 0, "state": "inactive", "frames": []}]},
        ],
        "device_traces": [
            [{"action": "segment_alloc", "addr": 0x7E0000000000, "size": 2 * MIB, "stream": 0, "time_us": 0, "frames": []}],
            dev1,
        ],
        "allocator_settings": {},
    }
    path.write_bytes(pickle.dumps(snap))
    return path


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vramscope", *args], capture_output=True, text=True)


def test_the_device_with_allocations_is_read_and_named(tmp_path: Path) -> None:
    path = _two_devices(tmp_path / "two.pickle")
    snap = vramscope.load(path)
    # The summary shows both devices.
    assert [d["device"] for d in snap.summary()["devices"]] == [0, 1]
    # Every one-device answer is device 1's.
    assert snap.leaks()["device"] == 1
    out = _cli("advise", str(path), "--capacity", "1GiB", "--json")
    assert out.returncode == 0, out.stderr
    import json

    answer = json.loads(out.stdout)
    assert answer["device"] == 1, answer.get("device")
    assert "device 1 (the first with allocations; the file also has device 0: --device picks one)" in out.stderr, out.stderr
    for command in (["leaks"], ["segments"], ["simulate"], ["check", "--max-peak", "1GiB"]):
        run = _cli(*command, str(path))
        assert "device 1 (the first with allocations" in run.stderr, (command, run.stderr)
    # --device 0 still reads device 0, and says nothing.
    zero = _cli("advise", str(path), "--device", "0", "--capacity", "1GiB", "--json")
    assert json.loads(zero.stdout)["device"] == 0 and "picks one" not in zero.stderr


@pytest.mark.parametrize("backend", ["allocator", "dispatch"])
def test_a_wrapped_history_is_said_by_every_command(tmp_path: Path, backend: str) -> None:
    """A CPU recording longer than its history: the file keeps the last
    ``max_entries`` allocations and frees (the segment events of a block of
    its own are not counted against them), says how many it saw, and every
    command says the history wrapped and how to keep more."""
    import json

    import torch

    path = tmp_path / "wrapped.pickle"
    model = torch.nn.Linear(32, 32)
    with vramscope.record(path, backend=backend, max_entries=200):
        for _ in range(30):
            model(torch.randn(8, 32)).sum().backward()
    meta = pickle.loads(path.read_bytes())["vramscope"]["history"]
    assert meta["unit"] == "events" and meta["max"] == 200 and meta["kept"] == 200 and meta["seen"] > 300, meta
    trace = pickle.loads(path.read_bytes())["device_traces"][0]
    assert sum(1 for e in trace if e["action"] in ("alloc", "free_completed")) == 200
    note = vramscope.load(path).summary()["source"]["history"]
    assert note.startswith("the recording kept its last 200 allocations and frees of ") and "max_entries=N" in note, note
    for command in (["summary"], ["leaks"], ["advise"]):
        run = _cli(*command, str(path))
        assert "the recording kept its last 200 allocations and frees" in run.stderr, (command, run.stderr)
    # A run the history holds whole says nothing.
    whole = tmp_path / "whole.pickle"
    with vramscope.record(whole, backend=backend):
        model(torch.randn(8, 32)).sum().backward()
    assert vramscope.load(whole).summary()["source"]["history"] is None
    assert "history" not in _cli("summary", str(whole)).stderr

"""One horizon: every "fits" (advise, simulate, the limits of check and
``vramscope.limits``) says how far it holds, the same way: the recorded
iterations, whether they grew and that later ones were not recorded."""

from __future__ import annotations

import json
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
# The first iteration is a warm-up (the optimizer's state made by its
# step): the trend is read from the second.
GROWN = "the recorded iterations grew (peak 300.00 MiB in iteration 2, 500.00 MiB in iteration 4, ×1.67) and later ones were not recorded: a larger one may need more"


def _growing(path: Path, sizes: tuple = (1, 2, 3, 4)) -> Path:
    """Four iterations whose activations grow (a sequence length that rises
    every step): 100 MiB of weights, then k x 100 MiB in iteration k (or
    ``sizes[k - 1]`` x 100 MiB)."""
    base = 0x7F0000000000
    frames = [{"filename": "train.py", "line": 20, "name": "step"}]
    trace, notes, t = [], [], 1
    trace.append({"action": "segment_alloc", "addr": base, "size": 100 * MIB, "stream": 0, "time_us": t, "frames": frames})
    trace.append({"action": "alloc", "addr": base, "size": 100 * MIB, "stream": 0, "time_us": t, "frames": frames})
    addr = base + 100 * MIB
    for k in range(1, 5):
        t += 1
        notes.append({"name": f"ProfilerStep#{k}", "stage": "START", "device": 0, "time_us": t})
        a = addr + k * 1024 * MIB
        t += 1
        size = sizes[k - 1] * 100 * MIB
        trace.append({"action": "segment_alloc", "addr": a, "size": size, "stream": 0, "time_us": t, "frames": frames})
        trace.append({"action": "alloc", "addr": a, "size": size, "stream": 0, "time_us": t, "frames": frames})
        t += 1
        for action in ("free_requested", "free_completed"):
            trace.append({"action": action, "addr": a, "size": size, "stream": 0, "time_us": t, "frames": frames})
        t += 1
        notes.append({"name": f"ProfilerStep#{k}", "stage": "END", "device": 0, "time_us": t})
    segments = [{"device": 0, "address": base, "total_size": 100 * MIB, "allocated_size": 100 * MIB, "active_size": 100 * MIB,
                 "requested_size": 100 * MIB, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
                 "frames": [], "blocks": [{"address": base, "size": 100 * MIB, "requested_size": 100 * MIB, "state": "active_allocated", "frames": frames}]}]
    segments += [{"device": 0, "address": addr + k * 1024 * MIB, "total_size": sizes[k - 1] * 100 * MIB, "allocated_size": 0, "active_size": 0,
                  "requested_size": 0, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                  "blocks": [{"address": addr + k * 1024 * MIB, "size": sizes[k - 1] * 100 * MIB, "requested_size": 0, "state": "inactive", "frames": []}]}
                 for k in range(1, 5)]
    path.write_bytes(pickle.dumps({"segments": segments, "device_traces": [trace], "external_annotations": notes, "allocator_settings": {}}))
    return path


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vramscope", *args], capture_output=True, text=True)


def test_every_fits_says_the_iterations_grew_and_later_ones_were_not_recorded(tmp_path: Path) -> None:
    path = str(_growing(tmp_path / "grow.pickle"))
    advise = json.loads(_cli("advise", path, "--capacity", "4GiB", "--json").stdout)
    assert advise["reach"]["grew"] == [[2, 300 * MIB], [4, 500 * MIB]], advise["reach"]
    assert f'Each "fits" holds up to iteration 4, the last recorded; {GROWN}.' in advise["answer"], advise["answer"]
    simulate = _cli("simulate", path, "--capacity", "4GiB").stdout
    assert f"up to iteration 4, the last recorded; {GROWN}" in simulate, simulate
    check = _cli("check", path, "--max-peak", "4GiB").stdout
    assert f"peak allocated 500.00 MiB (limit 4.00 GiB), up to iteration 4, the last recorded; {GROWN}" in check, check
    # vramscope.limits and Snapshot.check read the same gates.
    gate = vramscope.load(path).check(max_peak="4GiB")
    assert GROWN in gate["checks"][0]["message"], gate
    # A limit not met says nothing of how far it holds.
    assert "iteration" not in _cli("check", path, "--max-peak", "100MiB").stdout.split("max_peak")[1].split("\n")[0]


def test_a_first_iteration_lower_than_the_rest_is_a_warm_up_not_growth(tmp_path: Path) -> None:
    # Iteration 1 before the optimizer's state (200 MiB), then three of
    # 400 MiB: the run does not grow, and "fits" says so.
    path = str(_growing(tmp_path / "warm.pickle", sizes=(1, 3, 3, 3)))
    advise = json.loads(_cli("advise", path, "--capacity", "4GiB", "--json").stdout)
    assert advise["reach"]["grew"] is None and advise["reach"]["varied"] is None, advise["reach"]
    assert "over the 4 recorded iterations; later ones doing the same work need the same" in advise["answer"], advise["answer"]
    # Two iterations alone cannot tell a warm-up from a trend: said as grown.
    two = tmp_path / "two.pickle"
    _growing(two, sizes=(1, 3, 3, 3))
    snap = pickle.loads(two.read_bytes())
    snap["external_annotations"] = [n for n in snap["external_annotations"] if n["name"] in ("ProfilerStep#1", "ProfilerStep#2")]
    two.write_bytes(pickle.dumps(snap))
    reach = json.loads(_cli("advise", str(two), "--capacity", "4GiB", "--json").stdout)["reach"]
    assert reach["grew"] == [[1, 200 * MIB], [2, 400 * MIB]], reach

"""A run whose peak is its checkpoint load (``load_checkpoint.py``: an MLP of
16 MiB built, then ``torch.load`` + ``load_state_dict``, then inference):
the checkpoint's copy of every weight is alive beside the model's until the
load returns. The recorder notes each ``torch.load`` (its storages carry no
stack on the CPU); the summary says the peak is the setup's and that a
checkpoint made it, at the line that loads; ``advise`` ranks first loading
it memory-mapped, checked against the script changed so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from conftest import SCRIPTS, native_module, run_python  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_recording")
SCRIPT = str(SCRIPTS / "load_checkpoint.py")
MAIN = "import sys; from vramscope.run import main; sys.exit(main(sys.argv[1:]))"

if native_module() is None:
    pytest.skip("vramscope._native is not built", allow_module_level=True)


def _cli(*args: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "vramscope", *args, "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _record(tmp_path: Path, mode: str) -> Path:
    out = tmp_path / f"{mode}.pickle"
    r = run_python(["-c", MAIN, "-q", "--no-report", "-o", str(out), SCRIPT, "infer", str(tmp_path / "ck.pt"), mode], cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


def test_a_checkpoint_load_that_makes_the_peak_is_said_and_replayed(tmp_path: Path) -> None:
    assert run_python([SCRIPT, "save", str(tmp_path / "ck.pt")], cwd=tmp_path).returncode == 0
    copy = _record(tmp_path, "copy")
    peak = _cli("summary", str(copy))["devices"][0]["peak"]
    setup = peak["setup"]
    assert setup["made_by"] == "checkpoint", setup
    # The four 1,024 x 1,024 weights and their biases, loaded beside the model's.
    assert setup["transient_bytes"] == 4 * (1024 * 1024 + 1024) * 4, setup
    assert setup["sites"][0][0].endswith("load_checkpoint.py:38 in <module> (torch.load)"), setup
    assert peak["allocated_bytes"] >= 2 * setup["transient_bytes"]

    rows = _cli("advise", str(copy))["advice"]
    row = rows[0]
    assert row["class"] == "setup_transients", [r["class"] for r in rows]
    assert "mmap=True" in row["code"] and "assign=True" in row["code"], row["code"]
    # The script changed as the code says: its peak, never above the row's
    # (the mapped file is not the allocator's), within 5%.
    measured = _cli("summary", str(_record(tmp_path, "mmap")))["devices"][0]["peak"]["allocated_bytes"]
    assert measured <= row["peak_allocated"] <= measured * 1.05, (row["peak_allocated"], measured)

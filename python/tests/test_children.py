"""Children that train unrecorded: ``vramscope run`` of a program that
starts its ranks with ``torch.multiprocessing.spawn`` (PyTorch's DDP
tutorial; no ``RANK`` in their environment) recorded the parent alone,
which trained nothing, and its summary read 64 bytes as if that were the
program. Each child now leaves a note at exit if it stepped an optimizer or
used a GPU; the snapshot carries them and every command says which
processes were left out and how to record them, and that way works."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from conftest import SCRIPTS, load_snapshot, native_module, run_python  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_recording")
SCRIPT = str(SCRIPTS / "spawned_ranks.py")
MAIN = "import sys; from vramscope.run import main; sys.exit(main(sys.argv[1:]))"

if native_module() is None:
    pytest.skip("vramscope._native is not built", allow_module_level=True)


def _summary(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vramscope", "summary", "--json", str(path)], capture_output=True, text=True)


def test_children_that_trained_are_named_with_how_to_record_them(tmp_path: Path) -> None:
    out = tmp_path / "parent.pickle"
    r = run_python(["-c", MAIN, "-q", "--no-report", "-o", str(out), SCRIPT, "2"], cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    children = load_snapshot(out)["vramscope"]["children"]
    assert len(children) == 2 and all(c["steps"] == 3 and c["devices"] == [] for c in children), children
    s = _summary(out)
    note = json.loads(s.stdout)["source"]["children"]
    assert note.startswith("2 child processes of the recorded one trained without being recorded"), note
    assert note.count(": 3 optimizer steps") == 2, note
    assert "VRAMSCOPE_RECORD='run-{pid}.pickle'" in note and "torchrun" in note, note
    assert f"vramscope: note: {out}: 2 child processes" in s.stderr, s.stderr


def test_the_way_the_note_gives_records_each_child(tmp_path: Path) -> None:
    r = run_python([SCRIPT, "2"], cwd=tmp_path, timeout=300, VRAMSCOPE_RECORD=str(tmp_path / "run-{pid}.pickle"))
    assert r.returncode == 0, r.stderr[-2000:]
    trained = []
    for f in tmp_path.glob("run-*.pickle"):
        info = load_snapshot(f).get("vramscope", {})
        if info.get("optimizers"):
            trained.append(info["optimizers"][0]["type"])
    # Each rank's own file, with its AdamW.
    assert trained == ["AdamW", "AdamW"], trained


def test_children_that_train_nothing_leave_no_note(tmp_path: Path) -> None:
    out = tmp_path / "parent.pickle"
    r = run_python(["-c", MAIN, "-q", "--no-report", "-o", str(out), SCRIPT, "2", "idle"], cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "children" not in load_snapshot(out)["vramscope"]
    assert json.loads(_summary(out).stdout)["source"]["children"] is None

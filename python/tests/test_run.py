"""``vramscope run``: the script runs as ``__main__`` under the recorder, the
snapshot is written however it ends, and its exit status is returned.

Each test runs ``run.main`` in a fresh Python, as the console command does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import List

import pytest

pytest.importorskip("torch")

from conftest import PYTHON_SRC, SCRIPTS, load_snapshot, native_module, run_python  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_recording")
TARGET = SCRIPTS / "run_target.py"
MAIN = "import sys; from vramscope.run import main; sys.exit(main(sys.argv[1:]))"
MiB = 1 << 20
NATIVE = native_module() is not None


def vramscope_run(args: List[str], cwd: Path) -> subprocess.CompletedProcess:
    return run_python(["-c", MAIN, *args], cwd=cwd)


def held_blocks(path: Path) -> int:
    """1 MiB blocks alive at the end of the snapshot (the script holds two)."""
    snap = load_snapshot(path)
    return sum(b["size"] == MiB and b["state"] == "active_allocated" for s in snap["segments"] for b in s["blocks"])


def test_uncaught_exception_exits_1_with_traceback_and_snapshot(tmp_path: Path) -> None:
    proc = vramscope_run([str(TARGET), "raise"], tmp_path)
    assert proc.returncode == 1, proc.stderr
    tb = proc.stderr[proc.stderr.index("Traceback (most recent call last):") :]
    line = TARGET.read_text().splitlines().index('        raise ValueError("boom from the script")') + 1
    assert f'run_target.py", line {line}, in fail' in tb
    assert "ValueError: boom from the script" in tb
    assert "runpy" not in tb and "vramscope/run.py" not in tb
    assert held_blocks(tmp_path / "vramscope-run_target.pickle") == 2


def test_sys_exit_code_is_returned_and_snapshot_written(tmp_path: Path) -> None:
    proc = vramscope_run([str(TARGET), "exit3"], tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert held_blocks(tmp_path / "vramscope-run_target.pickle") == 2
    # The script never calls vramscope.step(): no iteration is claimed.
    names = {a["name"] for a in load_snapshot(tmp_path / "vramscope-run_target.pickle")["external_annotations"]}
    assert names <= {"gc.collect#vramscope"}, names


def test_out_of_memory_error_exits_1_with_snapshot(tmp_path: Path) -> None:
    proc = vramscope_run(["-o", "oom/snap.pickle", str(TARGET), "oom"], tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB" in proc.stderr
    assert held_blocks(tmp_path / "oom" / "snap.pickle") == 2


def test_script_sees_main_argv_and_its_directory(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "ok.pickle"
    proc = vramscope_run(["-o", str(out), "--max-entries", "50000", str(TARGET), "ok", "-o", "--flag"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {"name": "__main__", "argv": [str(TARGET), "ok", "-o", "--flag"], "path0": str(SCRIPTS)}
    assert held_blocks(out) == 2
    assert f"vramscope: snapshot written to {out}" in proc.stderr
    if NATIVE:
        assert "Peak allocated" in proc.stdout
        html = out.with_suffix(".html")
        assert html.read_text().lstrip().lower().startswith("<!doctype html")
    else:
        assert "summary and report skipped (vramscope._native not available" in proc.stderr


def test_quiet_and_no_report(tmp_path: Path) -> None:
    proc = vramscope_run(["--quiet", "--no-report", str(TARGET), "ok"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert "vramscope:" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seen.json", "vramscope-run_target.pickle"]


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    proc = vramscope_run([str(tmp_path / "missing.py")], tmp_path)
    assert proc.returncode == 2 and "no such file" in proc.stderr
    proc = vramscope_run(["--stacks", "cpp", str(TARGET)], tmp_path)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not NATIVE, reason="python -m vramscope imports vramscope._native, which is not built")
def test_python_m_vramscope_run(tmp_path: Path) -> None:
    proc = run_python(["-m", "vramscope", "run", "--no-report", str(TARGET), "exit3"], cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert held_blocks(tmp_path / "vramscope-run_target.pickle") == 2


def test_runs_without_the_native_extension(tmp_path: Path) -> None:
    """The recorder and `run` are pure Python: the package's Python modules
    with an empty ``__init__`` and no ``_native`` record and skip the report.
    Every module is copied, so that a helper module the recorder starts to
    import does not break this test; one that needs ``_native`` would."""
    pkg = tmp_path / "pkg" / "vramscope"
    root = PYTHON_SRC / "vramscope"
    for src in root.rglob("*.py"):  # the rooms too (_recording/, _annotate/, ...)
        dest = pkg / src.relative_to(root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest)
    (pkg / "__init__.py").write_text("")
    work = tmp_path / "work"
    work.mkdir()
    proc = run_python(["-c", MAIN, str(TARGET), "exit3"], cwd=work, PYTHONPATH=str(pkg.parent))
    assert proc.returncode == 3, proc.stderr
    assert "summary and report skipped (vramscope._native not available" in proc.stderr
    assert held_blocks(work / "vramscope-run_target.pickle") == 2
    assert sorted(p.name for p in work.iterdir()) == ["vramscope-run_target.pickle"]


def test_leaks_are_named_after_the_run(tmp_path: Path) -> None:
    if native_module() is None:
        pytest.skip("vramscope._native is not built")
    script = tmp_path / "leaky.py"
    script.write_text(
        "import torch, vramscope\n"
        "keep = []\n"
        "for _ in range(6):\n"
        "    keep.append(torch.ones(256, 1024) * 2)  # 1 MiB kept per iteration\n"
        "    vramscope.step()\n"
    )
    proc = vramscope_run([str(script)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    leak = [line for line in proc.stdout.splitlines() if line.startswith("LEAK")]
    assert len(leak) == 1 and "leaky.py" in leak[0] and "1.00 MiB per iteration" in leak[0], proc.stdout
    assert "vramscope leaks" in proc.stdout
    # The finding names the list and the line that appends to it.
    assert "held by `keep`" in leak[0], leak
    assert "`keep.append(torch.ones(256, 1024) * 2)  # 1 MiB kept per iteration`" in proc.stdout


def test_module_runs_as_python_m_with_its_arguments(tmp_path: Path) -> None:
    pkg = tmp_path / "trainer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(
        "import sys, torch\n"
        "kept = torch.ones(256, 1024)  # 1 MiB\n"
        "print('argv', sys.argv[1:], __name__, __spec__.name)\n"
        "sys.exit(int(sys.argv[-1]))\n"
    )
    proc = vramscope_run(["--no-report", "-q", "-m", "trainer", "-x", "--flag", "4"], tmp_path)
    assert proc.returncode == 4, proc.stderr
    assert "argv ['-x', '--flag', '4'] __main__ trainer.__main__" in proc.stdout
    snap = load_snapshot(tmp_path / "vramscope-trainer.pickle")
    held = snap["vramscope"]["holders"]["holders"]
    assert any(h["name"] == "kept" and h["kind"] == "global" and h["bytes"] == MiB for h in held), held
    missing = vramscope_run(["-m", "no_such_module_here"], tmp_path)
    assert missing.returncode == 2 and "no module named 'no_such_module_here'" in missing.stderr


ENDING = (
    "import torch, vramscope\n"
    "model = torch.nn.Linear(512, 512)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n"
    "for _ in range(3):\n"
    "    opt.zero_grad()\n"
    "    model(torch.randn(64, 512)).sum().backward()\n"
    "    opt.step()\n"
    "    vramscope.step()\n"
)


@pytest.mark.skipif(not NATIVE, reason="the summary needs vramscope._native")
def test_run_ends_where_vramscope_record_ends(tmp_path: Path) -> None:
    """`vramscope run` writes its snapshot before the script's globals are
    released: its end agrees with VRAMSCOPE_RECORD's (which dumps at exit),
    the parameters, gradients and momentum still alive (it used to say 0 B)."""
    script = tmp_path / "ending.py"
    script.write_text(ENDING)
    ran = vramscope_run(["--no-report", "-q", "-o", "run.pickle", str(script)], tmp_path)
    assert ran.returncode == 0, ran.stderr
    env = run_python([str(script)], cwd=tmp_path, VRAMSCOPE_RECORD=str(tmp_path / "env.pickle"))
    assert env.returncode == 0, env.stderr
    import vramscope

    ends = []
    for name in ("run.pickle", "env.pickle"):
        dev = vramscope.load(str(tmp_path / name)).summary()["devices"][0]
        ends.append(dev["end"]["allocated_bytes"])
    # weight + bias, their gradients and momentum buffers: 3 x (1 MiB + 2 KiB).
    assert ends[0] == ends[1] == 3 * (MiB + 2048), ends

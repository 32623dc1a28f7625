"""The suite's fork server (``forkserver.py``) runs a program as ``python
ARGS`` would: the same output, exit status, ``__main__``, ``sys.argv``,
``sys.path[0]``, environment, directory and shutdown, checked against a
fresh process for each way a test starts Python."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import forkserver
from conftest import subprocess_env

pytest.importorskip("torch")

PROGRAM = textwrap.dedent(
    """
    import atexit, os, pickle, sys, threading

    class Point:
        pass

    print(__name__, __file__, sys.argv, sys.path[0], os.getcwd(), os.environ.get("VRAMSCOPE_TEST_VALUE"))
    print("stderr line", file=sys.stderr)
    pickle.dumps(Point())  # a class of __main__ pickles
    atexit.register(lambda: print("atexit ran"))
    late = open("late.txt", "w")
    late.write("written, never closed")  # flushed at shutdown
    threading.Thread(target=lambda: (__import__("time").sleep(0.2), print("thread joined at exit"))).start()
    if sys.argv[1] == "raise":
        raise ValueError("from the program")
    sys.exit(int(sys.argv[1]))
    """
)


def _both(args, cwd: Path):
    env = subprocess_env(VRAMSCOPE_TEST_VALUE="42")
    forked = forkserver.run(args, env, cwd, timeout=60)
    fresh = subprocess.run([sys.executable, *args], env=env, cwd=str(cwd), capture_output=True, text=True, timeout=60)
    return forked, fresh


@pytest.mark.parametrize("status", ["0", "3", "raise"])
def test_a_script_runs_as_in_a_fresh_python(tmp_path: Path, status: str) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    forked, fresh = _both([str(script), status], tmp_path)
    assert forked.returncode == fresh.returncode == {"0": 0, "3": 3, "raise": 1}[status]
    assert forked.stdout == fresh.stdout
    assert "42" in forked.stdout and "atexit ran" in forked.stdout and "thread joined" in forked.stdout
    assert (tmp_path / "late.txt").read_text() == "written, never closed"
    # The traceback's last lines are the program's (the server's own frames
    # may come first).
    assert forked.stderr.splitlines()[-2:] == fresh.stderr.splitlines()[-2:]


def test_code_and_modules_run_as_in_a_fresh_python(tmp_path: Path) -> None:
    code = "import sys, os; print(__name__, sys.argv, repr(sys.path[0]), os.getcwd())"
    forked, fresh = _both(["-c", code, "a", "b"], tmp_path)
    assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout) == (0, fresh.stdout)
    forked, fresh = _both(["-m", "vramscope", "--help"], tmp_path)
    assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout)
    assert forked.returncode == 0 and "usage" in forked.stdout


def test_recording_from_the_start_gets_a_fresh_process(tmp_path: Path) -> None:
    # VRAMSCOPE_RECORD is read by the interpreter's .pth hook at start-up,
    # which a forked child never passes through.
    env = subprocess_env(VRAMSCOPE_RECORD=str(tmp_path / "x.pickle"))
    assert forkserver._startup_key(env) is None
    assert forkserver._startup_key(subprocess_env(VRAMSCOPE_BACKEND="dispatch")) == forkserver._startup_key(subprocess_env())


def test_a_program_past_its_timeout_is_killed(tmp_path: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        forkserver.run(["-c", "import time; time.sleep(60)"], subprocess_env(), tmp_path, timeout=1)


def test_a_server_that_cannot_start_leaves_the_program_to_a_fresh_process(tmp_path: Path) -> None:
    code = "import sys; print('ran', sys.argv[1:])"
    proc = forkserver.run(["-c", code, "x"], subprocess_env(), tmp_path, timeout=60, preload=("no_such_module_anywhere",))
    assert (proc.returncode, proc.stdout) == (0, "ran ['x']\n")


def test_one_server_serves_every_test_and_only_a_few_are_kept(tmp_path: Path) -> None:
    # pytest sets PYTEST_CURRENT_TEST for each test: were it part of the
    # server's key, each test would start (and keep) a server of its own
    # (47 of 430 MB on one worker, until a worker was killed for memory).
    # The child still sees the value it was given.
    script = tmp_path / "env.py"
    script.write_text("import os; print(os.environ.get('PYTEST_CURRENT_TEST'), os.environ.get('VRAMSCOPE_TEST_VALUE'))")
    before = len(forkserver._servers)
    outs = []
    for name in ("a.py::one", "b.py::two"):
        env = subprocess_env(PYTEST_CURRENT_TEST=name)
        outs.append(forkserver.run([str(script)], env, tmp_path, timeout=60).stdout.split()[0])
    assert outs == ["a.py::one", "b.py::two"]
    assert len(forkserver._servers) <= max(before + 1, forkserver._MAX_SERVERS)
    # Environments that differ in what programs read at start-up get
    # servers of their own, the least recently used closed beyond the cap.
    for k in range(forkserver._MAX_SERVERS + 2):
        p = forkserver.run([str(script)], subprocess_env(VRAMSCOPE_TEST_CAP=str(k), LC_FORK_TEST=str(k)), tmp_path, timeout=60)
        assert p.returncode == 0, p.stderr
    assert len(forkserver._servers) <= forkserver._MAX_SERVERS

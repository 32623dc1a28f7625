"""The wheel users install: built by ``scripts/build-wheel.sh``, installed
into a fresh virtual environment with no Rust toolchain on ``PATH``, where
``vramscope summary`` reads a real snapshot and ``import vramscope`` works
(without torch: reading needs none)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import re
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "fixtures" / "real" / "magma27_cs336_windows.pickle.gz"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the wheel is checked on Linux")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    # Unoptimised (Cargo.toml's wheel-check profile): the same packaging as
    # the release wheel in 35 s rather than 87 s of two cores.
    p = subprocess.run([str(ROOT / "scripts" / "build-wheel.sh"), "--unoptimised", str(out)], capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stderr[-3000:]
    built = sorted(out.glob("vramscope-*.whl"))
    assert len(built) == 1, built
    return built[0]


def test_the_wheel_is_abi3_and_holds_the_core(wheel: Path) -> None:
    # abi3: one wheel for every CPython from 3.9; manylinux2014: every Linux
    # with glibc 2.17 or later, whatever the glibc of the machine that built it.
    assert "-cp39-abi3-" in wheel.name and "manylinux2014_x86_64" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    native = [n for n in names if n.startswith("vramscope/_native") and n.endswith(".so")]
    assert native, names
    # The glibc symbol versions the module needs (its .dynstr's GLIBC_2.N): none after 2.17.
    so = zipfile.ZipFile(wheel).read(native[0])
    needed = {int(m) for m in re.findall(rb"GLIBC_2\.(\d+)", so)}
    assert needed and max(needed) <= 17, sorted(needed)
    assert "vramscope/mcp.py" in names and "vramscope/_recording/session.py" in names
    assert any(n.endswith("entry_points.txt") for n in names)


def test_a_fresh_environment_without_cargo_runs_it(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    # No cargo, no rustc: only the new environment and the system's tools.
    path = os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])
    env = {"PATH": path, "HOME": str(tmp_path), "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INDEX": "1"}
    assert shutil.which("cargo", path=path) is None and shutil.which("rustc", path=path) is None
    p = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--no-deps", str(wheel)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    p = subprocess.run([str(bin_dir / "vramscope"), "summary", str(REAL)], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    # The same answer as this checkout's CLI.
    here = subprocess.run([sys.executable, "-m", "vramscope", "summary", str(REAL)], capture_output=True, text=True, timeout=300)
    assert p.stdout == here.stdout and "Peak allocated" in p.stdout
    p = subprocess.run([str(bin_dir / "python"), "-c", "import vramscope, sys; print(vramscope.load(sys.argv[1]).summary()['devices'][0]['peak']['allocated_bytes'])", str(REAL)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0 and int(p.stdout) > 0, p.stderr

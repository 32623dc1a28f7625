"""Recording never changes the program: the compatibility matrix.

Each cell runs a small real program (``scripts/compat.py``) in fresh
processes, once unrecorded and once recorded (one recorder, one entry
point), and asserts the same outputs bit for bit, no exception, the same
Dynamo counters (frames compiled, graphs, graph breaks: a recompilation is
one more frame) and a snapshot that vramscope reads. The cells run two at a
time, once per session (``compat_harness.run_matrix``); each is a test of
its own. ``python python/tests/compat_harness.py`` prints the same matrix as
a table.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest

pytest.importorskip("torch")

from compat_harness import SLOW, matrix_cells, run_matrix, skip_reason, table  # noqa: E402

CELLS = matrix_cells()
SLOW_OK = os.environ.get("VRAMSCOPE_SLOW_TESTS") == "1"


def _why_not(cell: Tuple[str, str, str]) -> str:
    why = skip_reason(*cell)
    if why:
        return why
    if cell[:2] in SLOW and not SLOW_OK:
        return "minutes on two cores: VRAMSCOPE_SLOW_TESTS=1 runs it"
    return ""


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Dict[Tuple[str, str, str], Any]:
    root = tmp_path_factory.mktemp("compat")
    results = run_matrix([c for c in CELLS if not _why_not(c)], root)
    gc.collect()  # the thread pool's garbage, not for the next module's recordings
    out = os.environ.get("VRAMSCOPE_COMPAT_TABLE")
    if out:
        Path(out).write_text(table(results) + "\n", encoding="utf-8")
    return results


@pytest.mark.parametrize("cell", CELLS, ids=["-".join(c) for c in CELLS])
def test_recording_changes_nothing(matrix: Dict[Tuple[str, str, str], Any], cell: Tuple[str, str, str]) -> None:
    why = _why_not(cell)
    if why:
        pytest.skip(why)
    result = matrix[cell]
    assert result.ok, f"{cell}: {result.verdict()}"

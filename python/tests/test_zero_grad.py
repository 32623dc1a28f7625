"""`zero_grad()` between the forward and `backward()` holds the last step's
gradients through the forward; `advise`'s `zero_grad_first` replays it
moved, against the program changed so and run for real. Lightning's
automatic optimization zeroes there by design; its fix is two hooks
(`scripts/lightning_zero_grad.py`). pytorch/examples' ImageNet script is
the Rust test's fixture (crates/advise/tests/zero_grad.rs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("lightning")

SCRIPT = Path(__file__).parent / "scripts" / "lightning_zero_grad.py"


def _record(tmp_path: Path, *args: str):
    import vramscope

    out = tmp_path / ("lightning-" + ("-".join(args) or "late") + ".pickle")
    subprocess.run(
        [sys.executable, "-m", "vramscope", "run", "-q", "--no-report", "-o", str(out), str(SCRIPT), *args],
        check=True,
        timeout=300,
        cwd=tmp_path,
    )
    return vramscope.load(str(out))


def test_lightning_zero_grad_moved_by_its_hooks_is_replayed_to_the_byte(tmp_path):
    late = _record(tmp_path)
    warned = [f for f in late.leaks()["findings"] if f["kind"] == "held_gradients"]
    assert warned and warned[0]["severity"] == "warning", late.leaks()["findings"]
    rows = [a for a in late.advise()["advice"] if a["class"] == "zero_grad_first"]
    assert rows, late.advise()["advice"]
    assert "def on_train_batch_start" in rows[0]["code"] and "optimizer_zero_grad" in rows[0]["code"]
    fixed = _record(tmp_path, "fixed")
    assert not [f for f in fixed.leaks()["findings"] if f["kind"] == "held_gradients"]
    real = fixed.summary()["devices"][0]["peak"]["allocated_bytes"]
    assert rows[0]["peak_allocated"] == real, (rows[0]["peak_allocated"], real)
    assert real < late.summary()["devices"][0]["peak"]["allocated_bytes"]

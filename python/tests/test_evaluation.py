"""Evaluation passes in programs a framework runs: the Hugging Face
Trainer's `evaluate` and Lightning's validation loop (sanity check
included), each on a batch larger than the training one, so the run peaks
there. Each is recorded as a user would (`vramscope run`), then run again
with the evaluation batch halved: the summary must say the peak is in an
evaluation pass, `advise` must predict the halved run from the first one,
and half the training micro-batch must lower nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import SCRIPTS, run_python  # noqa: E402

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

MAIN = "import sys; from vramscope.run import main; sys.exit(main(sys.argv[1:]))"
PRELOAD = {"hf": ("transformers",), "lightning": ("lightning",)}


def record(which: str, eval_batch: int, workdir: Path) -> Any:
    import vramscope

    out = workdir / f"{which}-{eval_batch}.pickle"
    proc = run_python(["-c", MAIN, "-q", "--no-report", "-o", str(out), str(SCRIPTS / "framework_eval.py"), which,
                       str(eval_batch)], cwd=workdir, timeout=600, preload=PRELOAD[which])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return vramscope.load(str(out))


def row(advice: Dict[str, Any], cls: str) -> Dict[str, Any]:
    for listed in ("advice", "no_gain"):
        for a in advice[listed]:
            if a["class"] == cls:
                return {**a, "listed": listed}
    raise AssertionError(f"no {cls} row: {advice['not_offered']}")


@pytest.mark.parametrize("which,eval_batch", [("hf", 64), ("lightning", 2048)])
def test_the_peak_in_a_frameworks_evaluation_is_found_and_halved(tmp_path, which, eval_batch):
    snap = record(which, eval_batch, tmp_path)
    peak = snap.summary()["devices"][0]["peak"]
    assert peak["in_evaluation"], peak
    # The frameworks evaluate under torch.no_grad() (the Trainer) or
    # torch.inference_mode() (Lightning): the recorder saw it.
    assert peak["evaluation_with_grad"] is False, peak
    assert peak["outside_evaluation"]["allocated_bytes"] < peak["allocated_bytes"]
    advice = snap.advise()
    half_eval = row(advice, "half_eval_batch")
    real = record(which, eval_batch // 2, tmp_path).summary()["devices"][0]["peak"]["allocated_bytes"]
    assert half_eval["listed"] == "advice"
    assert abs(half_eval["peak_allocated"] / real - 1) < 0.01, (half_eval["peak_allocated"], real)
    # The training step's micro-batch does not touch the evaluation's.
    assert row(advice, "half_batch")["listed"] == "no_gain"

"""The allocator simulation and the ranks comparison from Python:
Snapshot.simulate and vramscope.ranks, the same options and answers as
`vramscope simulate` and `vramscope ranks`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import vramscope

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "fixtures" / "real"
DECOMFL = REAL / "decomfl_opt_zo_fl_memory.pickle.gz"


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    assert vramscope.cli(["demo", "-o", str(out)]) == 0
    return out / "demo_snapshot.pickle"


def test_the_real_run_is_reproduced_and_the_sweep_ranked():
    sim = vramscope.load(DECOMFL).simulate(sweep=True)
    rec = sim["runs"][0]
    assert rec["label"] == "recorded"
    assert rec["matched_segment_events"] == rec["recorded_segment_events"] == 61
    assert rec["simulated_peak_reserved"] == rec["recorded_peak_reserved"]
    others = sim["runs"][1:]
    assert len(others) >= 8
    peaks = [r["simulated_peak_reserved"] for r in others]
    assert peaks == sorted(peaks)
    assert all(r["simulated_peak_reserved"] >= r["simulated_peak_allocated"] for r in sim["runs"])
    # Expandable segments reserve less on this run; the answer says so.
    exp = next(r for r in others if r["label"] == "expandable_segments:True")
    assert exp["simulated_peak_reserved"] < rec["simulated_peak_reserved"]
    assert "expandable_segments:True" in sim["answer"]


def test_python_and_the_cli_agree(demo: Path):
    snap = vramscope.load(demo)
    holder = snap.simulate()["recorded_oom"]["holders"][0]["site"]
    py = snap.simulate(["max_split_size_mb:256"], drop=[holder], scale={"train.py:74": 0.5})
    cli = subprocess.run(
        ["vramscope", "simulate", str(demo), "--json", "-q", "--set", "max_split_size_mb:256",
         "--drop", holder, "--scale", "train.py:74=0.5"],
        capture_output=True, text=True, check=True,
    )
    assert py == json.loads(cli.stdout)
    assert [c["change"]["kind"] for c in py["changes"]] == ["drop", "scale"]
    text = snap.simulate(text=True)
    assert py["answer"].split(":")[0] in text


def test_a_site_that_matches_nothing_raises(demo: Path):
    with pytest.raises(ValueError, match="nowhere.py"):
        vramscope.load(demo).simulate(drop=["nowhere.py:1"])
    with pytest.raises(ValueError, match="garbage_collection_threshold"):
        vramscope.load(demo).simulate(["garbage_collection_threshold:2"])


def test_ranks_from_python_match_the_cli(tmp_path: Path):
    # Three ranks in torchtune's layout; rank 1 keeps an extra tensor each
    # iteration.
    for rank in range(3):
        out = tmp_path / "iteration_6" / f"rank{rank}_memory_snapshot.pickle"
        out.parent.mkdir(parents=True, exist_ok=True)
        args = ["synth", "-o", str(out), "--entries", "12000", "--seed", "4", "--iterations", "6"]
        if rank == 1:
            args += ["--leak", "256MiB"]
        assert vramscope.cli(args) == 0
    r = vramscope.ranks(tmp_path)
    assert [x["rank"] for x in r["ranks"]][0] == 1
    assert all(x["step"] == 6 for x in r["ranks"])
    assert r["worst"]["sites"][0]["site"].endswith("train.py:74 in accumulate_history")
    cli = subprocess.run(["vramscope", "ranks", str(tmp_path), "--json", "-q"], capture_output=True, text=True, check=True)
    assert r == json.loads(cli.stdout)
    assert vramscope.ranks([tmp_path], max_imbalance=1.01)["passed"] is False
    with pytest.raises(ValueError, match="rank-from"):
        vramscope.ranks(tmp_path, rank_from="(")


def test_advise_from_python_is_the_cli_advice():
    """Snapshot.advise ranks the same changes as `vramscope advise --json`,
    and a GPU by name is its memory less the CUDA context."""
    frag = ROOT / "tests" / "fixtures" / "gpu" / "oom_frag_default.pickle.gz"
    got = vramscope.load(frag).advise()
    cli = subprocess.run(
        ["vramscope", "advise", str(frag), "--json", "-q"], capture_output=True, text=True, check=True
    )
    assert json.loads(cli.stdout) == got
    assert got["baseline"]["fits"] is False
    holders = next(a for a in got["advice"] if a["class"] == "free_holders")
    assert "oom_run.py:34" in holders["change"]
    assert holders["fits"] is None  # the recording ends at the request
    assert all(a["method"] in ("replayed", "projected") and a["how"] for a in got["advice"])
    on_h100 = vramscope.load(DECOMFL).advise(gpu="H100-80GB")
    assert on_h100["capacity"] == 85_017_493_504 - (768 << 20)
    assert "what to change" in vramscope.load(DECOMFL).advise(text=True)
    with pytest.raises(ValueError, match="--capacity"):
        vramscope.load(DECOMFL).advise(gpu="mystery")

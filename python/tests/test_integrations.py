"""The training-framework integrations on the real frameworks, on the CPU
(Lightning here, the Hugging Face Trainer and Accelerate in
``test_integrations_hf.py``, which shares the helpers below): tiny models
train with the recording on; the files, their iterations, the logged
figures, the checks and the snapshot left by an exception are read back.

The README's snippet for each framework is run as it is written there: the
test only supplies the names it leaves to the reader (``model``, the data),
so the README cannot drift from the code.
"""

from __future__ import annotations

import csv
import importlib
import re
from pathlib import Path
from typing import Any, Dict, List

import pytest

torch = pytest.importorskip("torch")

from conftest import load_snapshot, run_python, step_annotations  # noqa: E402
from vramscope.testing import MemoryLimitExceeded  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_recording", "one_thread")
README = Path(__file__).resolve().parents[2] / "README.md"
HERE = Path(__file__).resolve()
FRAMEWORKS = ("lightning", "pytorch_lightning", "transformers", "accelerate")


@pytest.fixture
def one_thread() -> Any:
    """Tiny models on one intra-op thread: on a busy 2-core machine two
    OpenMP threads spin against each other and a step takes 50 times longer."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def run_script(source: str, cwd: Path, timeout: float = 120) -> Any:
    """``python train.py`` in ``cwd``, the script being ``source``, on one
    intra-op thread per process."""
    (cwd / "train.py").write_text(source, encoding="utf-8")
    return run_python(["train.py"], cwd=cwd, timeout=timeout, OMP_NUM_THREADS="1")


def readme_snippet(heading: str) -> str:
    """The first ```python block under ``### heading`` in README.md."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n### {heading}\n")
    section = text[start : text.find("\n#", start + 1)]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, f"no python block under '### {heading}'"
    return block.group(1)


def run_snippet(heading: str, **names: Any) -> Dict[str, Any]:
    """Run the README's snippet with ``names`` defined; its variables after."""
    namespace: Dict[str, Any] = {"__name__": "readme", **names}
    exec(compile(readme_snippet(heading), f"README.md ({heading})", "exec"), namespace)
    return namespace


def iterations(path: Any) -> List[str]:
    """Names of the ``ProfilerStep#N`` ranges that start in the file."""
    return [n for n, stage, _ in step_annotations(load_snapshot(path)) if stage == "START"]


def ended(path: Any) -> List[str]:
    return [n for n, stage, _ in step_annotations(load_snapshot(path)) if stage == "END"]


def steps(first: int, last: int) -> List[str]:
    return [f"ProfilerStep#{i}" for i in range(first, last + 1)]


def alive_at_end(path: Any, size: int) -> int:
    """Blocks of ``size`` bytes allocated in the trace and never freed."""
    open_blocks = set()
    for e in load_snapshot(path)["device_traces"][0]:
        if e["action"] == "alloc" and e["size"] == size:
            open_blocks.add(e["addr"])
        elif e["action"] == "free_completed":
            open_blocks.discard(e["addr"])
    return len(open_blocks)


def marked_line(marker: str) -> int:
    """The line of this file that carries the comment ``marker``."""
    lines = HERE.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(f"# {marker}"))


def param_bytes(model: Any) -> int:
    return sum(p.nbytes for p in model.parameters())


# ---------------------------------------------------------------- Lightning


def lightning_module(L: Any, leak: bool = False, fail_at: int = 0) -> Any:
    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(64, 64)
            self.kept: List[Any] = []
            self.raised: Any = None

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            (x,) = batch
            if leak:
                self.kept.append(torch.zeros(256 * 1024))  # planted leak
            if fail_at and batch_idx + 1 == fail_at:
                doomed = torch.full((300_007,), 1.0)  # alive when the exception is raised
                self.raised = RuntimeError(f"bad batch {batch_idx}, {doomed.numel()} values")
                raise self.raised
            return self.net(x).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Tiny()


def batches(n: int, batch_size: int = 8) -> Any:
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(n * batch_size, 64)), batch_size=batch_size)


def quiet_trainer(L: Any, callback: Any, max_steps: int) -> Any:
    return L.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        logger=False,
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def test_lightning_readme_snippet_records_iterations_and_logs_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    L = pytest.importorskip("lightning.pytorch")
    monkeypatch.chdir(tmp_path)
    model = lightning_module(L)
    ns = run_snippet("PyTorch Lightning", model=model, train_loader=batches(100))
    memory, trainer = ns["memory"], ns["trainer"]

    out = tmp_path / "vramscope" / "rank0"
    assert memory.path == str(out / "train.pickle")
    assert sorted(p.name for p in out.iterdir()) == ["train.pickle", "train.step000050.pickle", "train.step000100.pickle"]
    assert iterations(out / "train.step000050.pickle") == steps(1, 50)
    assert iterations(out / "train.step000100.pickle") == steps(1, 100)
    # The end of the epoch after the last batch is an iteration cut short: no END.
    assert iterations(out / "train.pickle") == steps(1, 101)
    assert ended(out / "train.pickle") == steps(1, 100)
    assert [c["name"] for c in memory.result["checks"]] == ["max_peak", "no_leaks", "max_growth"]
    assert memory.result["passed"] is True

    with open(Path(trainer.logger.log_dir) / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("vramscope/allocated_bytes")]
    # Every 10 batches and once at the end of training.
    assert [int(r["step"]) for r in rows] == list(range(10, 101, 10)) + [100]
    weights = param_bytes(model)
    totals = {f"vramscope/{t}_bytes" for t in ("allocated", "reserved", "peak_allocated", "peak_reserved")}
    for r in rows:
        allocated, peak = int(r["vramscope/allocated_bytes"]), int(r["vramscope/peak_allocated_bytes"])
        assert weights < allocated <= peak < 10 * 2**20
        if not torch.cuda.is_available():
            assert int(r["vramscope/reserved_bytes"]) == allocated  # the CPU caches nothing
        # The categories (one column each, empty where a row has none) share out the allocated bytes.
        assert sum(int(v) for k, v in r.items() if k.startswith("vramscope/") and k not in totals and v) == allocated


@pytest.mark.parametrize("leak", [True, False], ids=["leak", "clean"])
def test_lightning_leak_fails_the_fit_with_the_leaking_line(tmp_path: Path, leak: bool) -> None:
    L = pytest.importorskip("lightning.pytorch")
    from vramscope.integrations.lightning import VramscopeCallback

    callback = VramscopeCallback(str(tmp_path / "run.pickle"), checks=dict(no_leaks=True))
    trainer = quiet_trainer(L, callback, max_steps=6)
    if not leak:
        trainer.fit(lightning_module(L), batches(6))
        assert callback.result["passed"] is True
        assert callback.result["checks"][0]["message"].startswith("no leak over ")
        return
    with pytest.raises(MemoryLimitExceeded) as raised:
        trainer.fit(lightning_module(L, leak=True), batches(6))
    text = str(raised.value)
    site = f"{HERE.name}:{marked_line('planted leak')} in training_step"
    assert f"FAIL no_leaks: 1 leak(s): {HERE}:{marked_line('planted leak')} in training_step grows by 1.00 MiB per iteration" in text
    # What holds them, by name: the module's list (Lightning passes the
    # module to the callback hooks as `pl_module`).
    assert site in text and "fix: Do not keep the tensors themselves in `pl_module.kept`" in text
    assert "as `pl_module.kept[*]`" in text
    assert "self.kept.append(torch.zeros(256 * 1024))" in text  # the line that keeps them, quoted
    assert raised.value.path == str(tmp_path / "run.pickle") == callback.path
    assert iterations(callback.path) == steps(1, 7)  # #7: from the last batch to the end of training
    assert ended(callback.path) == steps(1, 6)


def test_lightning_exception_writes_what_the_failure_left_alive(tmp_path: Path) -> None:
    L = pytest.importorskip("lightning.pytorch")
    vr = importlib.import_module("vramscope.record")
    from vramscope.integrations.lightning import VramscopeCallback

    callback = VramscopeCallback(str(tmp_path / "run.pickle"), checks=dict(no_leaks=True))
    model = lightning_module(L, fail_at=3)
    with pytest.raises(RuntimeError) as raised:
        quiet_trainer(L, callback, max_steps=6).fit(model, batches(6))
    assert raised.value is model.raised  # Lightning re-raises the very same exception
    assert not vr.is_recording()
    assert callback.result is None  # no checks on a failed run
    assert iterations(callback.path) == steps(1, 3)
    assert ended(callback.path) == steps(1, 2)  # the failing iteration never ended
    # Written while the exception was handled, before any garbage collection.
    assert alive_at_end(callback.path, 300_007 * 4) == 1


# Two ranks on the CPU (gloo), started by Lightning's own launcher, which
# runs this script again for rank 1; only rank 1 leaks.
LIGHTNING_DDP_RUN = """
import torch
import lightning.pytorch as L
from lightning.pytorch.loggers import CSVLogger
from vramscope.integrations.lightning import VramscopeCallback


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net, self.kept = torch.nn.Linear(64, 64), []

    def training_step(self, batch, batch_idx):
        if self.global_rank == 1:
            self.kept.append(torch.zeros(256 * 1024))  # rank 1 leaks
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    memory = VramscopeCallback(every_n_steps=2, checks=dict(no_leaks=True), log_every_n_steps=2)
    trainer = L.Trainer(max_steps=4, accelerator="cpu", devices=2, strategy="ddp", logger=CSVLogger("logs"), callbacks=[memory],
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Tiny(), torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 64)), batch_size=8))
"""


def test_lightning_ddp_each_rank_records_and_one_ranks_leak_fails_the_job(tmp_path: Path) -> None:
    pytest.importorskip("lightning.pytorch")
    if not torch.distributed.is_available():
        pytest.skip("this torch has no torch.distributed")
    done = run_script(LIGHTNING_DDP_RUN, tmp_path, timeout=180)
    line = next(i for i, text in enumerate(LIGHTNING_DDP_RUN.splitlines(), 1) if text.endswith("# rank 1 leaks"))
    rank1 = tmp_path / "vramscope" / "rank1" / "train.pickle"
    finding = f"memory limits exceeded (snapshot: {rank1})\n  FAIL no_leaks: 1 leak(s): {tmp_path / 'train.py'}:{line} in training_step"
    # torch.distributed prefixes each line of a rank's traceback with "[rankN]: ".
    said = {r: "\n".join(m.group(1) for m in re.finditer(rf"^\[rank{r}\]: (.*)$", done.stderr, re.M)) for r in (0, 1)}
    # Rank 1 raises its finding; rank 0, whose exit status is the job's, raises it too.
    assert done.returncode == 1, done.stderr
    assert f"MemoryLimitExceeded: {finding}" in said[1]
    assert f"MemoryLimitExceeded: on rank 1: {finding}" in said[0]
    for rank in (0, 1):
        out = tmp_path / "vramscope" / f"rank{rank}"
        assert sorted(p.name for p in out.iterdir()) == ["train.pickle", "train.step000002.pickle", "train.step000004.pickle"]
        assert ended(out / "train.pickle") == steps(1, 4)
    (metrics,) = (tmp_path / "logs").rglob("metrics.csv")  # rank 0's logger alone writes
    with open(metrics, newline="") as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == [2, 4, 4]


LEGACY_PACKAGE_RUN = """
import sys
import torch
import pytorch_lightning as pl
from vramscope.integrations.lightning import VramscopeCallback


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 8)

    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


memory = VramscopeCallback("run.pickle", checks=dict(no_leaks=True))
# A single callback, not a list: the Trainer checks its class.
trainer = pl.Trainer(max_steps=3, accelerator="cpu", logger=False, callbacks=memory, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Tiny(), torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(24, 8)), batch_size=8))
print(isinstance(memory, pl.Callback), "lightning.pytorch" in sys.modules, memory.result["passed"])
"""


def test_lightning_callback_follows_the_older_pytorch_lightning_package(tmp_path: Path) -> None:
    pytest.importorskip("pytorch_lightning")
    done = run_script(LEGACY_PACKAGE_RUN, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "True"]
    assert ended(tmp_path / "run.pickle") == steps(1, 3)


def test_lightning_warns_when_the_environment_names_another_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    L = pytest.importorskip("lightning.pytorch")
    from vramscope.integrations.lightning import VramscopeCallback

    monkeypatch.setenv("RANK", "3")  # left over in a shell, say; the Trainer runs one process
    callback = VramscopeCallback(str(tmp_path / "rank{rank}.pickle"))
    trainer = quiet_trainer(L, callback, max_steps=2)
    with pytest.warns(RuntimeWarning, match="the framework says this is rank 0, torch.distributed and the environment say rank 3"):
        trainer.fit(lightning_module(L), batches(2))
    # The framework's rank names the file, as it decides `ranks=` and the live registry.
    assert trainer.global_rank == 0 and callback.path == str(tmp_path / "rank0.pickle")
    assert ended(callback.path) == steps(1, 2)


def test_lightning_inside_a_recording_marks_its_iterations_there(tmp_path: Path) -> None:
    L = pytest.importorskip("lightning.pytorch")
    from vramscope.integrations.lightning import VramscopeCallback

    vr = importlib.import_module("vramscope.record")
    callback = VramscopeCallback(str(tmp_path / "own.pickle"), checks=dict(no_leaks=True))
    with vr.record(tmp_path / "outer.pickle"):
        with pytest.warns(RuntimeWarning, match="the checks given to the callback are not run"):
            quiet_trainer(L, callback, max_steps=3).fit(lightning_module(L), batches(3))
        assert vr.is_recording()  # the fit's end left the enclosing recording running
    assert callback.path is None and not (tmp_path / "own.pickle").exists()
    assert ended(tmp_path / "outer.pickle") == steps(1, 3)


def test_callbacks_check_their_options_when_made() -> None:
    pytest.importorskip("lightning.pytorch")
    from vramscope.integrations.lightning import VramscopeCallback

    with pytest.raises(TypeError, match="unknown max_peek"):
        VramscopeCallback(checks=dict(max_peek="1GiB"))
    with pytest.raises(ValueError, match="backend='gpu'"):
        VramscopeCallback(backend="gpu")
    with pytest.raises(TypeError, match="every_n_steps"):
        VramscopeCallback(every=5)


def test_importing_vramscope_imports_no_framework(tmp_path: Path) -> None:
    code = "import sys, vramscope, vramscope.integrations; print(sorted(m for m in %r if m in sys.modules))" % (FRAMEWORKS,)
    done = run_python(["-c", code], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

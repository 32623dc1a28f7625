"""The training-framework integrations on the real frameworks, on the CPU:
Lightning, the Hugging Face Trainer and Accelerate train tiny models with
the recording on; the files, their iterations, the logged figures, the
checks and the snapshot left by an exception are read back.

The README's snippet for each framework is run as it is written there: the
test only supplies the names it leaves to the reader (``model``, the data),
so the README cannot drift from the code.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

torch = pytest.importorskip("torch")

from conftest import load_snapshot, run_python, step_annotations  # noqa: E402
from vramscope.testing import MemoryLimitExceeded  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_recording")
README = Path(__file__).resolve().parents[2] / "README.md"
HERE = Path(__file__).resolve()
FRAMEWORKS = ("lightning", "pytorch_lightning", "transformers", "accelerate")


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

    import csv

    with open(Path(trainer.logger.log_dir) / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("vramscope/allocated_bytes")]
    # Every 10 batches and once at the end of training.
    assert [int(r["step"]) for r in rows] == list(range(10, 101, 10)) + [100]
    weights = param_bytes(model)
    for r in rows:
        allocated, peak = int(r["vramscope/allocated_bytes"]), int(r["vramscope/peak_allocated_bytes"])
        assert weights < allocated <= peak < 10 * 2**20
        assert int(r["vramscope/reserved_bytes"]) == allocated  # the CPU caches nothing
        categories = [int(r[k]) for k in r if k.startswith("vramscope/") and k.endswith("_bytes") and r[k] and not any(
            k == f"vramscope/{t}_bytes" for t in ("allocated", "reserved", "peak_allocated", "peak_reserved"))]
        assert sum(categories) == allocated


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
    assert site in text and "fix: Do not keep the tensor itself" in text
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


# ----------------------------------------------------- Hugging Face Trainer

# A GPT-2 of a few thousand parameters, built from its config (no download),
# and random token ids; shared with the script of the exit-handler test.
TINY_GPT2 = '''
import torch
from transformers import GPT2Config, GPT2LMHeadModel


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, fail_at=0):
        self.ids, self.fail_at, self.calls = torch.randint(0, 64, (n, 16)), fail_at, 0

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        self.calls += 1
        if self.calls == self.fail_at:
            doomed = torch.full((300_007,), 1.0)  # alive when the exception is raised
            raise RuntimeError(f"bad item {i}, {doomed.numel()} values")
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_gpt2():
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0))
'''

HF_FAILING_RUN = TINY_GPT2 + '''
from transformers import Trainer, TrainingArguments
from vramscope.integrations.transformers import VramscopeCallback

args = TrainingArguments(output_dir="out", max_steps=6, per_device_train_batch_size=2, report_to=[], use_cpu=True,
                         save_strategy="no", logging_steps=1, disable_tqdm=True)
trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=Tokens(12, fail_at=7), callbacks=[VramscopeCallback()])
trainer.train()
'''


def tiny_gpt2() -> Dict[str, Any]:
    pytest.importorskip("transformers")
    namespace: Dict[str, Any] = {}
    exec(compile(TINY_GPT2, "tiny_gpt2", "exec"), namespace)
    return namespace


@pytest.fixture
def fresh_accelerate() -> Any:
    """Accelerate keeps its state in process-wide singletons (the Trainer
    makes an Accelerator too): each test starts and ends without one."""
    state = pytest.importorskip("accelerate.state")

    def reset() -> None:
        state.AcceleratorState._reset_state(reset_partial_state=True)
        state.GradientState._reset_state()

    reset()
    yield
    reset()


def test_transformers_readme_snippet_records_iterations_and_logs_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_accelerate: None
) -> None:
    gpt2 = tiny_gpt2()
    monkeypatch.chdir(tmp_path)
    model = gpt2["tiny_gpt2"]()
    ns = run_snippet("Hugging Face Trainer", model=model, train_dataset=gpt2["Tokens"](8 * 60))
    memory, trainer = ns["memory"], ns["trainer"]

    out = tmp_path / "vramscope" / "rank0"
    assert memory.path == str(out / "train.pickle")
    assert sorted(p.name for p in out.iterdir()) == ["train.pickle", "train.step000050.pickle"]
    assert iterations(out / "train.step000050.pickle") == steps(1, 50)
    assert ended(out / "train.pickle") == steps(1, 60)  # one per optimizer step
    assert memory.result["passed"] is True

    logged = [e for e in trainer.state.log_history if "vramscope/allocated_bytes" in e]
    # Each logging step, and the summary of the run at its end.
    assert [e["step"] for e in logged] == list(range(10, 61, 10)) + [60]
    assert "train_runtime" in logged[-1] and "loss" in logged[0]
    weights, tensors = param_bytes(model), len(list(model.parameters()))
    for e in logged:
        assert weights < e["vramscope/allocated_bytes"] <= e["vramscope/peak_allocated_bytes"] < 10 * 2**20
        if not torch.cuda.is_available():  # exact sizes: the CPU allocator rounds nothing
            # AdamW: exp_avg and exp_avg_sq per parameter, and its step count (one float each).
            assert e["vramscope/optimizer_state_bytes"] == 2 * weights + 4 * tensors


def test_transformers_exception_inside_with_writes_the_snapshot_at_once(
    tmp_path: Path, capfd: pytest.CaptureFixture, fresh_accelerate: None
) -> None:
    gpt2 = tiny_gpt2()
    from transformers import Trainer, TrainingArguments
    from vramscope.integrations.transformers import VramscopeCallback

    vr = importlib.import_module("vramscope.record")
    memory = VramscopeCallback(str(tmp_path / "run.pickle"), checks=dict(no_leaks=True))
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=6, per_device_train_batch_size=2, report_to=[],
                             use_cpu=True, save_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=gpt2["tiny_gpt2"](), args=args, train_dataset=gpt2["Tokens"](12, fail_at=7), callbacks=[memory])
    with pytest.raises(RuntimeError, match="bad item"):
        with memory:
            trainer.train()
    assert not vr.is_recording()
    assert f"training raised RuntimeError; snapshot written to {tmp_path / 'run.pickle'}" in capfd.readouterr().err
    assert memory.path == str(tmp_path / "run.pickle") and memory.result is None
    # Items 1-6 made batches 1-3; the loader fetches one batch ahead, so item 7 failed during step 2.
    assert iterations(memory.path) == steps(1, 3) and ended(memory.path) == steps(1, 2)
    assert alive_at_end(memory.path, 300_007 * 4) == 1


def test_transformers_exception_without_with_is_written_at_exit(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    (tmp_path / "train.py").write_text(HF_FAILING_RUN, encoding="utf-8")
    done = run_python(["train.py"], cwd=tmp_path)
    path = tmp_path / "vramscope" / "rank0" / "train.pickle"
    assert done.returncode == 1, done.stderr
    assert "RuntimeError: bad item" in done.stderr
    assert f"vramscope: training did not finish; snapshot written to {path}" in done.stderr
    assert iterations(path) == steps(1, 3) and ended(path) == steps(1, 2)
    # The uncaught exception's frames, and the tensor made in the failing one, were still alive at exit.
    assert alive_at_end(path, 300_007 * 4) == 1


# --------------------------------------------------------------- Accelerate


def test_accelerate_readme_snippet_marks_optimizer_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, fresh_accelerate: None
) -> None:
    gpt2 = tiny_gpt2()
    monkeypatch.chdir(tmp_path)
    model = gpt2["tiny_gpt2"]()
    loader = torch.utils.data.DataLoader(gpt2["Tokens"](2 * 100), batch_size=2)
    ns = run_snippet("Accelerate", model=model, optimizer=torch.optim.AdamW(model.parameters()), loader=loader)
    memory = ns["memory"]

    out = tmp_path / "vramscope" / "rank0"
    assert capsys.readouterr().out.strip() == f"{out / 'train.pickle'} True"
    assert sorted(p.name for p in out.iterdir()) == ["train.pickle", "train.step000050.pickle"]
    # 100 micro-batches, gradients accumulated over 2: 50 optimizer steps.
    assert iterations(out / "train.step000050.pickle") == steps(1, 50)
    assert ended(out / "train.pickle") == steps(1, 50)
    assert [c["name"] for c in memory.result["checks"]] == ["no_leaks"]


def test_accelerate_logs_figures_and_writes_the_failure(tmp_path: Path, fresh_accelerate: None) -> None:
    accelerate = pytest.importorskip("accelerate")
    from accelerate.tracking import GeneralTracker
    from vramscope.integrations.accelerate import record

    class Collect(GeneralTracker):
        """A tracker that keeps what it is given (Accelerate's custom-tracker API)."""

        name, requires_logging_directory = "collect", False

        def __init__(self) -> None:
            super().__init__()
            self.logged: List[Any] = []

        @property
        def tracker(self) -> Any:
            return self.logged

        def store_init_configuration(self, values: dict) -> None:
            pass

        def log(self, values: dict, step: Any = None, **kwargs: Any) -> None:
            self.logged.append((step, dict(values)))

    accelerator = accelerate.Accelerator(cpu=True, log_with=Collect())
    accelerator.init_trackers("memory")
    model = accelerator.prepare(torch.nn.Linear(64, 64))
    with pytest.raises(RuntimeError, match="boom") as raised:
        with record(accelerator, tmp_path / "run.pickle", checks=dict(no_leaks=True)) as memory:
            for i in range(3):
                model(torch.randn(8, 64)).sum().backward()
                assert memory.step() == i + 1
                memory.log(step=i)
            doomed = torch.full((300_007,), 1.0)
            raise RuntimeError(f"boom with {doomed.numel()} values")
    assert str(raised.value) == "boom with 300007 values"
    logged = accelerator.get_tracker("collect").tracker
    assert [step for step, _ in logged] == [0, 1, 2]
    # At each iteration's end the weights and their gradients at least (every
    # CPU tensor of the process counts, those of earlier tests too), the same each time.
    assert len({values["vramscope/allocated_bytes"] for _, values in logged}) == 1
    for _, values in logged:
        assert values["vramscope/allocated_bytes"] >= 2 * param_bytes(model)
        assert values["vramscope/reserved_bytes"] == values["vramscope/allocated_bytes"]
        assert values["vramscope/peak_allocated_bytes"] > values["vramscope/allocated_bytes"]
    assert memory.path == str(tmp_path / "run.pickle") and memory.result is None
    assert iterations(memory.path) == steps(1, 4) and ended(memory.path) == steps(1, 3)
    assert alive_at_end(memory.path, 300_007 * 4) == 1
    assert memory.figures() == {}  # nothing recorded any more

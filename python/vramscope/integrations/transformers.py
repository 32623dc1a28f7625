"""Hugging Face Trainer: record every process's memory during
``trainer.train()``.

::

    from vramscope.integrations.transformers import VramscopeCallback

    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[VramscopeCallback(every_n_steps=100, checks=dict(no_leaks=True))])
    trainer.train()

What happens when:

* ``on_train_begin``: recording starts on each process (the model is on its
  device by then; the optimizer state and everything training allocates is
  in the trace with its stacks).
* ``on_step_end``, once per optimizer step (after all gradient-accumulation
  micro-batches): ``vramscope.step()``, an iteration boundary
  (``ProfilerStep#N``), and a snapshot every ``every_n_steps`` steps.
* ``on_log``, at the Trainer's ``logging_steps``: the main process adds its
  figures (``vramscope/allocated_bytes``, ``reserved``, the peaks, bytes per
  category) to the logged values: to ``trainer.state.log_history`` and to
  what the callbacks after this one receive (the console printer). The
  reporting integrations (``report_to``) come before user callbacks in the
  Trainer's list, so they get the figures only if this callback is put
  first: ``trainer.callback_handler.callbacks.insert(0, callback)``.
* ``on_train_end``: the snapshot is written and ``checks`` run on it; a
  failed check raises :class:`vramscope.MemoryLimitExceeded` out of
  ``trainer.train()`` with the finding's explanation and fix.

An exception in training (an out-of-memory error, a bad batch) never
reaches a ``TrainerCallback``: the Trainer has no hook for it. The recording
is still written:

* at once, when ``trainer.train()`` runs inside ``with callback:``: leaving
  the block by an exception writes the snapshot, without a garbage
  collection first, so it holds what the failure left alive, and the
  exception passes on unchanged;
* otherwise when the program exits (the exception that ended it keeps the
  failing frames alive until then), or when the next ``train()`` with this
  callback begins.

On CUDA the recorder also dumps at the moment an allocation fails.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, Optional

from transformers import TrainerCallback

from ._common import RunResults, TrainingRecording

__all__ = ["VramscopeCallback"]


class VramscopeCallback(RunResults, TrainerCallback):
    """Record each process's memory while the Trainer trains.

    Args:
        path: the snapshot written when training ends, one per process
            (placeholders as in :class:`vramscope.record`). Default
            ``vramscope/rank{rank}/train.pickle``.
        every_n_steps: also write a snapshot every N optimizer steps, to
            ``<path stem>.step000123<suffix>`` (the last ``keep``, default 3,
            are kept). Default
            ``$VRAMSCOPE_EVERY``, else 0: only at the end.
        max_entries: allocator events kept (the oldest are dropped).
        checks: run on the snapshot when training ends, the arguments of
            :meth:`vramscope.Snapshot.check`: ``max_peak``, ``max_reserved``,
            ``no_leaks``, ``max_growth``.
        **record_options: passed to :class:`vramscope.record` (``keep``,
            ``stacks``, ``backend``, ``ranks``, ``dump_at``, ``live``, ...).

    The figures are logged at the Trainer's ``logging_steps``. After
    training, ``path`` is the file written and ``result`` the checks' result.
    """

    def __init__(
        self,
        path: Optional[str | os.PathLike] = None,
        *,
        every_n_steps: Optional[int] = None,
        max_entries: Optional[int] = None,
        checks: Optional[Dict[str, Any]] = None,
        **record_options: Any,
    ) -> None:
        self._run = TrainingRecording(
            path, every_n_steps=every_n_steps, max_entries=max_entries, checks=checks, **record_options
        )

    def __enter__(self) -> "VramscopeCallback":
        return self

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> bool:
        if exc is not None and self._run.active:
            path = self._run.stop(exc)
            if path is not None:
                print(f"vramscope: training raised {exc_type.__name__}; snapshot written to {path}", file=sys.stderr)
        return False  # the training's exception goes on as it was

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # A previous train() that raised outside `with callback:` left its recording running.
        self._run.stop()
        self._run.start(framework_rank=args.process_index)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._run.step()

    def on_log(self, args: Any, state: Any, control: Any, logs: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        if logs is None or not state.is_world_process_zero:
            return
        figures = self._run.figures()
        if not figures:
            return
        # Trainer.log appended a copy of `logs` (plus "step") to the history
        # just before this call: the very same value objects, at this step.
        entry = state.log_history[-1] if state.log_history else None
        if entry is not None and entry.get("step") == state.global_step and all(entry.get(k) is v for k, v in logs.items()):
            entry.update(figures)
        logs.update(figures)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._run.stop()
        self._run.check()

"""PyTorch Lightning: record every rank's memory during ``trainer.fit``.

::

    from vramscope.integrations.lightning import VramscopeCallback

    trainer = Trainer(callbacks=[VramscopeCallback(every_n_steps=100, checks=dict(no_leaks=True))])
    trainer.fit(model, loader)

Works with ``lightning.pytorch`` and with the older ``pytorch_lightning``
package: the one the program imported, else whichever is installed
(``lightning`` first).

What happens when:

* ``setup`` of the fit: recording starts on each rank, after the process
  group exists and before the model is moved to its device, so the
  parameters' allocations are in the trace with their stacks.
* each training batch ends: ``vramscope.step()``, an iteration boundary
  (``ProfilerStep#N``), and a snapshot every ``every_n_steps`` batches.
* every ``log_every_n_steps`` batches, and once at the end, rank 0 gives
  its figures (``vramscope/allocated_bytes``, ``reserved``, the peaks, bytes
  per category) to the Trainer's loggers.
* training ends: the snapshot is written and ``checks`` run on it; a failed
  check raises :class:`vramscope.MemoryLimitExceeded` from
  ``on_train_end``. Lightning passes an exception raised there out of
  ``trainer.fit`` unchanged (after calling ``on_exception`` and tearing
  down), so the run fails with the finding's explanation and fix. The ranks
  exchange their verdicts first (one ``all_gather_object``): when one rank
  exceeds a limit, all of them raise, rank 0 quoting that rank's findings,
  because Lightning's own launcher ends the job with rank 0's exit status
  alone.
* an exception (an out-of-memory error, ``KeyboardInterrupt``): Lightning
  calls ``on_exception`` while the exception is handled; the snapshot is
  written then, without a garbage collection first, so it holds what the
  failure left alive. On CUDA the recorder has already dumped at the moment
  the allocation failed.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, Optional

from ._common import RunResults, TrainingRecording

# The callback must derive from the Callback of the package the Trainer
# comes from: the one the program already imported, else `lightning`, else
# the older standalone `pytorch_lightning`.
if "pytorch_lightning" in sys.modules and "lightning.pytorch" not in sys.modules:
    import pytorch_lightning as pl
else:
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl  # type: ignore[no-redef]

__all__ = ["VramscopeCallback"]


class VramscopeCallback(RunResults, pl.Callback):
    """Record each rank's memory while the Trainer fits.

    Args:
        path: the snapshot written when training ends, one per rank
            (placeholders as in :class:`vramscope.record`). Default
            ``vramscope/rank{rank}/train.pickle``.
        every_n_steps: also write a snapshot every N training batches, to
            ``<path stem>.step000123<suffix>`` (the last ``keep``, default 3,
            are kept). Default
            ``$VRAMSCOPE_EVERY``, else 0: only at the end.
        max_entries: allocator events kept (the oldest are dropped).
        checks: run on the snapshot when training ends, the arguments of
            :meth:`vramscope.Snapshot.check`: ``max_peak``, ``max_reserved``,
            ``no_leaks``, ``max_growth`` (``dict(no_leaks=True,
            max_growth="1MiB/iter")``).
        log_every_n_steps: how often rank 0 logs its figures. Default: the
            Trainer's ``log_every_n_steps``; 0: never.
        **record_options: passed to :class:`vramscope.record` (``keep``,
            ``stacks``, ``backend``, ``ranks``, ``dump_at``, ``live``, ...).

    After the fit, ``path`` is the file written and ``result`` the checks'
    result.
    """

    def __init__(
        self,
        path: Optional[str | os.PathLike] = None,
        *,
        every_n_steps: Optional[int] = None,
        max_entries: Optional[int] = None,
        checks: Optional[Dict[str, Any]] = None,
        log_every_n_steps: Optional[int] = None,
        **record_options: Any,
    ) -> None:
        super().__init__()
        self._run = TrainingRecording(
            path, every_n_steps=every_n_steps, max_entries=max_entries, checks=checks, **record_options
        )
        if log_every_n_steps is not None and log_every_n_steps < 0:
            raise ValueError(f"log_every_n_steps={log_every_n_steps}: must be 0 or more")
        self.log_every_n_steps = log_every_n_steps

    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if stage == "fit":
            self._run.start(framework_rank=trainer.global_rank)

    def on_train_batch_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", outputs: Any, batch: Any, batch_idx: int) -> None:
        n = self._run.step()
        every = self.log_every_n_steps if self.log_every_n_steps is not None else trainer.log_every_n_steps
        if n and every and n % every == 0:
            self._log(trainer)

    def on_train_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        if self.log_every_n_steps != 0:
            self._log(trainer)  # the peaks of the whole run
        self._run.stop()
        # Every rank learns every verdict: Lightning's launcher never looks at
        # how ranks 1.. ended, so only rank 0 raising fails the job.
        self._run.check_every_rank()

    def on_exception(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", exception: BaseException) -> None:
        # Also reached when on_train_end's own check raised: the file is written by then.
        self._run.stop(exception)

    def teardown(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        # A fit that stopped before training began (max_steps=0, an early
        # stop in setup) never reaches on_train_end: write what was recorded.
        if stage == "fit":
            self._run.stop()

    def _log(self, trainer: "pl.Trainer") -> None:
        # Loggers write on rank 0 only; the others need not take the figures.
        if not trainer.is_global_zero or not trainer.loggers:
            return
        figures = self._run.figures()
        if not figures:
            return
        for logger in trainer.loggers:
            logger.log_metrics(figures, step=trainer.global_step)

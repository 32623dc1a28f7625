"""What the training-framework integrations share: one recording per
training run in each process, the checks run on its file, and the figures
they hand to the framework's loggers.

Each process records its own file: the path is given to
:class:`vramscope.record` as it is, so its placeholders (``{rank}``,
``{local_rank}``, ``{iteration}``, ...) are filled in by the recorder from
``torch.distributed``, which every framework here sets up before training
starts.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
import warnings
from typing import Any, Dict, Optional, Set

__all__ = ["DEFAULT_PATH", "CHECK_KEYS", "TrainingRecording"]

# One directory per rank: `vramscope ranks vramscope/` reads the job as it is.
DEFAULT_PATH = os.path.join("vramscope", "rank{rank}", "train.pickle")
# Keyword arguments of Snapshot.check.
CHECK_KEYS = ("max_peak", "max_reserved", "no_leaks", "max_growth", "device", "source_roots")
# Live-state figures logged, as `vramscope/<key>_bytes`.
TOTALS = ("allocated", "reserved", "peak_allocated", "peak_reserved")

# Recordings not stopped yet, for the exit handler (strong references: a
# callback dropped by its trainer must still get its file written).
_running: Set["TrainingRecording"] = set()
_exit_handler_installed = False


def _recorder() -> Any:
    # The module; the package attribute of the same name may be the class.
    return importlib.import_module("vramscope.record")


class TrainingRecording:
    """The recording behind a framework callback.

    Args:
        path: the snapshot written when training ends (placeholders as in
            :class:`vramscope.record`). Default
            ``vramscope/rank{rank}/train.pickle``.
        every_n_steps: also dump every N iterations (``record(every=N)``).
            Default ``$VRAMSCOPE_EVERY``, else 0: only at the end.
        max_entries: allocator events kept (``record(max_entries=...)``).
        checks: keyword arguments of :meth:`vramscope.Snapshot.check`
            (``max_peak``, ``max_reserved``, ``no_leaks``, ``max_growth``,
            ``device``, ``source_roots``), run on the file when training ends.
        **record_options: passed to :class:`vramscope.record` (``keep``,
            ``stacks``, ``backend``, ``ranks``, ``dump_at``, ``live``, ...).

    Options are checked here, when the callback is made, not when training
    starts.
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
        if "every" in record_options:
            raise TypeError("give every_n_steps=, not every=")
        unknown = sorted(set(checks or {}) - set(CHECK_KEYS))
        if unknown:
            raise TypeError(f"checks: unknown {', '.join(unknown)}; expected some of {', '.join(CHECK_KEYS)}")
        self.checks: Dict[str, Any] = dict(checks or {})
        template = os.fspath(path) if path is not None else DEFAULT_PATH
        # Made once: record() validates its options now, and can be entered again for a second fit.
        every = None if every_n_steps is None else int(every_n_steps)  # None: $VRAMSCOPE_EVERY, else 0
        self._record = _recorder().record(template, every=every, max_entries=max_entries, **record_options)
        self._recording = False  # this process records, through self._record
        self._joined = False  # someone else's recording is active: iterations are marked in it
        self.path: Optional[str] = None  # the last file this recording wrote
        self.result: Optional[dict] = None  # the checks' result, once run

    @property
    def active(self) -> bool:
        """Whether iterations are being marked in a recording (ours or one
        already running when training started)."""
        return self._recording or self._joined

    def start(self, framework_rank: Optional[int] = None) -> bool:
        """Start recording; returns whether this process records its own
        file. Inside a recording started by other code, that recording
        goes on and gets the iteration marks; a rank left out by
        ``ranks=`` trains unrecorded."""
        if self._recording:
            return True
        rec = _recorder()
        self.path, self.result = None, None
        # Garbage left before training (a previous Trainer in the same
        # notebook) would be freed by the recorder's collection at the end
        # and reported as tensors that reference cycles held in this run.
        gc.collect()
        self._use_rank(framework_rank)
        self._record.__enter__()
        # record() enters without starting a session when nested in another
        # recording or when this rank is not in `ranks`.
        self._recording = self._record.recording
        self._joined = not self._recording and rec.is_recording()
        if self._recording:
            _running.add(self)
            _install_exit_handler()
        elif self._joined and self.checks:
            warnings.warn(
                "vramscope: already recording (an enclosing vramscope.record); its file gets the iteration marks, "
                "and the checks given to the callback are not run: that file is written only when it ends",
                RuntimeWarning,
                stacklevel=3,
            )
        return self._recording

    def _use_rank(self, framework_rank: Optional[int]) -> None:
        """The framework's rank names the file (and decides ``ranks=``)
        unless the user gave ``rank=``: it knows, where ``RANK`` may be a
        leftover of the shell; a disagreement is reported."""
        if framework_rank is None or self._record.rank is not None and self._record.rank != getattr(self, "_framework_rank", None):
            return
        from vramscope._recording.rank import rank_info

        seen = rank_info()["rank"]
        self._record.rank = self._framework_rank = int(framework_rank)
        if seen != framework_rank:
            warnings.warn(
                f"vramscope: the framework says this is rank {framework_rank}, torch.distributed and the "
                f"environment say rank {seen}; the file is named for rank {framework_rank}: {self._record.path}",
                RuntimeWarning,
                stacklevel=4,
            )

    def step(self) -> int:
        """End an iteration (``ProfilerStep#N``); returns N, 0 when not recording."""
        return _recorder().step() if self.active else 0

    def stop(self, exc: Optional[BaseException] = None) -> Optional[str]:
        """Write the snapshot and stop; returns its path (None when this
        process did not record). With ``exc``, the training's exception, the
        file shows what the failure left alive: no garbage collection runs
        before it is written, and a failed write is reported on stderr
        instead of replacing ``exc``."""
        self._joined = False
        if not self._recording:
            return None
        self._recording = False
        _running.discard(self)
        self._record.written = None
        if exc is None:
            self._record.__exit__(None, None, None)
        else:
            self._record.__exit__(type(exc), exc, exc.__traceback__)
        # The final file (None when writing failed while `exc` propagated).
        self.path = path = self._record.written
        return path

    def check(self) -> Optional[dict]:
        """Run ``checks`` on the written file; raise
        :class:`vramscope.MemoryLimitExceeded` with the findings when one fails."""
        if not self.checks or self.path is None:
            return None
        from vramscope import load
        from vramscope.testing import MemoryLimitExceeded, failure_message

        self.result = load(self.path).check(**self.checks)
        if not self.result["passed"]:
            raise MemoryLimitExceeded(failure_message(self.result, self.path), self.result, self.path)
        return self.result

    def check_every_rank(self) -> Optional[dict]:
        """:meth:`check` on every rank, then tell each rank the others'
        verdicts: where one rank exceeded a limit, every rank raises (that
        rank with its own findings, the others naming it and quoting them).
        For launchers that do not watch every rank's exit status (Lightning
        starts ranks 1.. from rank 0 and never looks at how they ended).
        A collective: every rank must call it, and does, whatever its check
        did, so that none is left waiting."""
        error: Optional[BaseException] = None
        try:
            result = self.check()
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the others heard of it
            error, result = exc, None
        verdict = None
        if error is not None:
            verdict = (_rank_now(), str(error), getattr(error, "result", None), getattr(error, "path", None))
        verdicts = _all_gather(verdict) if self.checks else [verdict]
        if error is not None:
            raise error
        failed = [v for v in verdicts if v is not None]
        if failed:
            from vramscope.testing import MemoryLimitExceeded

            rank, message, other_result, path = failed[0]
            raise MemoryLimitExceeded(f"on rank {rank}: {message}", other_result or {}, path or "")
        return result

    def figures(self) -> Dict[str, int]:
        """``vramscope/allocated_bytes``, ``reserved``, the peaks and one
        ``vramscope/<category>_bytes`` per category, from the live state;
        empty when nothing is recorded here or the backend keeps no totals
        (``backend="profiler"``)."""
        if not self.active:
            return {}
        state = _recorder().live_state()
        if not state:
            return {}
        out = {f"vramscope/{key}_bytes": int(state[key]) for key in TOTALS if state.get(key) is not None}
        for name, size in sorted((state.get("categories") or {}).items()):
            out[f"vramscope/{name}_bytes"] = int(size)
        return out


class RunResults:
    """``path`` and ``result`` of the :class:`TrainingRecording` in
    ``self._run``, as every integration shows them."""

    _run: TrainingRecording

    @property
    def path(self) -> Optional[str]:
        """The snapshot written when training (or the block) ended, in this process."""
        return self._run.path

    @property
    def result(self) -> Optional[dict]:
        """The checks' result (``vramscope check --json``), once they ran."""
        return self._run.result


def _rank_now() -> int:
    from vramscope._recording.rank import rank_info

    return rank_info()["rank"]


def _all_gather(obj: Any) -> list:
    """``obj`` from every rank of the default process group, or ``[obj]``
    alone."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return [obj]
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def _install_exit_handler() -> None:
    global _exit_handler_installed
    if not _exit_handler_installed:
        atexit.register(_write_unfinished)
        _exit_handler_installed = True


def _write_unfinished() -> None:
    """Exit handler: training that raised never reached the callback's end,
    so its recording is still running. Write it now, with the exception
    that ended the program (which keeps the failing frames, and their
    tensors, alive until here)."""
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    for run in list(_running):
        try:
            path = run.stop(exc)
        except Exception as err:  # noqa: BLE001 - an exit handler has no one to raise to
            print(f"vramscope: could not write the snapshot of the unfinished training: {err!r}", file=sys.stderr)
            continue
        if path is not None:
            print(f"vramscope: training did not finish; snapshot written to {path}", file=sys.stderr)

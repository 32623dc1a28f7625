"""Memory limits in tests: record a block of code and fail when it uses too
much memory or leaks.

::

    def test_training_does_not_leak():
        with vramscope.limits(max_peak="2GiB", no_leaks=True, max_growth="1MiB/iter"):
            for batch in batches:
                train_step(batch)
                vramscope.step()          # iterations, for the leak checks

On failure :class:`MemoryLimitExceeded` (an ``AssertionError``) says which
limit was exceeded, by how much, and, for leaks, the finding with its stack
and fix; the snapshot is kept for ``vramscope report``. With pytest, the
``@pytest.mark.vramscope(...)`` marker does the same for a whole test (see
``vramscope.pytest_plugin``). Without a GPU the CPU's tensors are recorded
at the dispatcher, so the same test runs in CI.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Optional, Union

__all__ = ["limits", "MemoryLimitExceeded", "failure_message"]

Size = Union[int, str, None]


class MemoryLimitExceeded(AssertionError):
    """A limit given to :class:`limits` was exceeded.

    Attributes: ``result`` (the ``vramscope check --json`` dict) and
    ``path`` (the snapshot, kept).
    """

    def __init__(self, message: str, result: dict, path: str) -> None:
        super().__init__(message)
        self.result = result
        self.path = path


def failure_message(result: dict, path: str) -> str:
    """What :class:`MemoryLimitExceeded` says for a failed check ``result``
    (the ``vramscope check --json`` dict) of the snapshot at ``path``: every
    limit with its verdict, then each leak with its explanation, fix, sites
    and stacks."""
    lines = [f"memory limits exceeded (snapshot: {path})"]
    lines += [f"  {'ok  ' if c['passed'] else 'FAIL'} {c['name']}: {c['message']}" for c in result["checks"]]
    leaks = result.get("leaks") or {}
    for f in leaks.get("findings", []):
        if f["severity"] != "leak":
            continue
        lines.append(f"\n  {f['title']}\n  {f['explanation']}\n  fix: {f['fix']}")
        for s in f["sites"][:3]:
            lines.append(f"    at {s['site']}")
            # Beneath the user's line: the model's module and line that made it.
            lines += [f"       made by {p['label']}" for p in s.get("within", [])[:3]]
            if s.get("held_by"):
                lines.append(f"       {s['held_by']['text']}")
            lines += [f"       {frame}" for frame in s["stack"][:6]]
    return "\n".join(lines)


class limits:
    """Record the block and check it against the limits when it ends.

    Args:
        max_peak: highest allocated memory allowed (bytes or ``"12GiB"``).
        max_reserved: memory the allocator may keep reserved at the end.
        no_leaks: fail on any finding of ``vramscope leaks`` with severity
            ``leak`` (call :func:`vramscope.step` once per iteration).
        max_growth: growth of allocated memory per iteration allowed
            (``"1MiB/iter"``).
        path: where the snapshot goes. Default: a temporary directory.
        keep: ``"on-failure"`` (default) deletes the snapshot when every limit
            holds; ``"always"`` keeps it.
        device: the device to check (default: the first with events).
        source_roots: directories where relative paths in the stacks are
            looked up to quote the code in leak findings.
        **record_options: passed to :class:`vramscope.record`
            (``max_entries``, ``stacks``, ...).

    An exception raised inside the block passes through unchanged, and the
    limits are not checked. ``result`` holds the check once the block ended.
    """

    def __init__(
        self,
        max_peak: Size = None,
        *,
        max_reserved: Size = None,
        no_leaks: bool = False,
        max_growth: Size = None,
        path: Optional[Union[str, os.PathLike]] = None,
        keep: str = "on-failure",
        device: Optional[int] = None,
        source_roots: tuple = (),
        **record_options: Any,
    ) -> None:
        if keep not in ("on-failure", "always"):
            raise ValueError(f"keep={keep!r}: expected 'on-failure' or 'always'")
        if max_peak is None and max_reserved is None and not no_leaks and max_growth is None:
            raise ValueError("limits(): give at least one of max_peak, max_reserved, no_leaks, max_growth")
        self.gates = dict(max_peak=max_peak, max_reserved=max_reserved, no_leaks=no_leaks, max_growth=max_growth)
        self._tmpdir: Optional[str] = None
        if path is None:
            self._tmpdir = tempfile.mkdtemp(prefix="vramscope-")
            path = os.path.join(self._tmpdir, "limits.pickle")
        self.path = os.path.abspath(os.fspath(path))
        self.keep = keep
        self.device = device
        self.source_roots = tuple(source_roots)
        self.result: Optional[dict] = None
        self._record_options = record_options
        self._recording: Any = None

    def __enter__(self) -> "limits":
        from .record import is_recording, record

        if is_recording():
            raise RuntimeError("vramscope.limits() cannot run inside another vramscope recording")
        self._recording = record(self.path, **self._record_options)
        self._recording.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self._recording.__exit__(exc_type, exc, tb)
        if exc_type is not None:
            return False
        self.check()
        return False

    def check(self) -> dict:
        """Check the written snapshot; raise :class:`MemoryLimitExceeded` on failure."""
        from . import load

        snap = load(self.path)
        self.result = snap.check(device=self.device, source_roots=self.source_roots, **self.gates)
        if self.result["passed"]:
            if self.keep == "on-failure":
                self._discard()
            return self.result
        raise MemoryLimitExceeded(failure_message(self.result, self.path), self.result, self.path)

    def _discard(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

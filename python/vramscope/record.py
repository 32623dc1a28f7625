"""Recording memory snapshots from inside a PyTorch process.

::

    with vramscope.record("run.pickle", every=100, keep=3):
        for batch in loader:
            with vramscope.mark("forward"):
                loss = model(batch)
            loss.backward()
            opt.step()
            vramscope.step()

Where the device's caching allocator keeps a history (CUDA, Intel XPU) this
is that history (``torch.cuda.memory._record_memory_history``), dumped at exit
and, on CUDA through an out-of-memory observer, at the moment an allocation
fails. Elsewhere (CPU, Apple MPS, builds without the history) every new
tensor storage is seen at PyTorch's dispatcher with its exact Python stack
(see ``_dispatch``); ``backend="profiler"`` records through the PyTorch
profiler instead (see ``_profiler``), for its Memory Profiler categories. The
file has the same format whichever recorded it. ``step()`` and ``mark()`` are ``record_function``
scopes, so they appear as ``ProfilerStep#N`` and named ranges in the
snapshot's ``external_annotations``, where the report draws iteration
boundaries. Collections of Python's cycle collector are recorded there too
(``gc.collect#gen2``, START/END), so that ``vramscope leaks`` can tell tensors
freed by reference counting from tensors that only a reference cycle's
collection freed.

Every file is written atomically (temporary file in the same directory,
fsync, rename): a process killed mid-dump leaves the previous file, never a
truncated one. Temporary names start with a dot and end in ``.tmp``.

One recording is active per process at a time; ``step``/``mark``/``dump``
act on it and do nothing (``dump`` raises) when there is none. Call them
from the thread that started the recording.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import types
from typing import Any, Callable, Dict, Optional, TypeVar

from vramscope._recording.env import STACKS_CHOICES, read_env
from vramscope._recording.rank import expand_path, parse_ranks, rank_info
from vramscope._recording.session import is_oom, Session, Span
from vramscope._recording.backend import choose_backend  # noqa: F401 - part of this module's API
from vramscope._recording.files import periodic_path, write_atomic  # noqa: F401 - part of this module's API

__all__ = ["record", "start", "stop", "dump", "step", "mark", "is_recording", "live_state"]

DEFAULT_PATH = "vramscope.pickle"
DEFAULT_MAX_ENTRIES = 100_000
DEFAULT_STACKS = "python"
DEFAULT_KEEP = 3
DEFAULT_BACKEND = "auto"
BACKENDS = ("auto", "cuda", "xpu", "allocator", "dispatch", "profiler")
DEFAULT_LIVE_INTERVAL = 0.5

_F = TypeVar("_F", bound=Callable[..., Any])
_lock = threading.RLock()
_active: Optional["Session"] = None


class record:
    """Record a memory snapshot: context manager, decorator, or ``start()``.

    Args:
        path: snapshot written when recording ends, made absolute at once.
            Default ``$VRAMSCOPE_RECORD``, else ``vramscope.pickle``. It may
            name ``{rank}``, ``{local_rank}``, ``{world_size}``,
            ``{iteration}``, ``{pid}`` and ``{host}``, filled in at each
            dump. In a job of more than one rank (``torch.distributed`` or
            ``RANK``/``WORLD_SIZE``) a path that names no rank is written
            under ``rank{rank}/`` beside the file name, so ranks never
            overwrite each other and ``vramscope ranks <dir>`` reads them.
        max_entries: history kept (the oldest is dropped): on CUDA and XPU
            PyTorch's trace entries, on the CPU recorders allocations and
            frees. Default 100000, and 3000000 for the CPU allocator hooks
            (``backend="allocator"``, the CPU's default on Linux)
            (``$VRAMSCOPE_MAX_ENTRIES``). When a recording outgrows it, every
            command says so and how to keep more.
        stacks: ``"python"`` (default), ``"all"`` (adds C++ frames on CUDA)
            or ``"none"`` (``$VRAMSCOPE_STACKS``).
        backend: what observes the allocations (``$VRAMSCOPE_BACKEND``):
            ``"auto"`` (default) is the allocator history where the device
            has one (``"cuda"``, ``"xpu"``); on the CPU (Linux)
            ``"allocator"``: c10's CPU allocator hooked natively, every
            allocation (kernels' scratch included) with the exact stack of
            the torch call that made it; elsewhere ``"dispatch"``: every
            tensor storage at the dispatcher, on any device, exact stacks.
            ``"profiler"``: the PyTorch profiler's memory profile, with its
            Memory Profiler categories (CPU only, slower, stacks one line per
            function).
        device: with ``backend="dispatch"``, the device type followed
            (``"cpu"``, ``"mps"``, ...). Default: the accelerator PyTorch
            reports, else the CPU.
        on_oom: on CUDA, dump the moment an allocation fails, before the
            ``OutOfMemoryError`` is raised. Default True.
        every: also dump every N calls to :func:`step`, to
            ``<path stem>.step000123<suffix>``. Default 0, off
            (``$VRAMSCOPE_EVERY``).
        keep: periodic files kept, older ones deleted; 0 keeps all. Default 3
            (``$VRAMSCOPE_KEEP``).
        collect_cycles: before the dump at the end (unless an exception is
            propagating), periodic dumps and :func:`dump`, run one full
            garbage collection, marked in the snapshot
            (``gc.collect#vramscope``): tensors that only reference cycles keep
            alive are freed by it, so ``vramscope leaks`` can name them even
            when Python's collector never ran during the recording. Never at
            an out-of-memory dump. Default True.
        ranks: record only these ranks (``[0, 3]``, ``"0-3,8"``); the
            others run unrecorded. Default: every rank
            (``$VRAMSCOPE_RANKS``).
        dump_at: also dump, once, the first time allocated or reserved
            memory reaches this: ``"90%"`` of the device's memory (the
            CPU's: physical memory), ``"12GiB"`` or bytes; to
            ``<path stem>.dump_at<suffix>``. Then an out-of-memory error
            that comes later still has the trace that led to it on disk,
            even when the trace buffer has wrapped by then. Checked every
            50 ms and at each :func:`step` (``$VRAMSCOPE_DUMP_AT``).
        live: publish the live state (``docs/live-protocol.md``) for
            ``vramscope live``: ``True`` on a loopback socket listed in the
            live registry, ``"127.0.0.1:PORT"``, or ``"file:PATH"``.
            Default False (``$VRAMSCOPE_LIVE``).
        live_interval: seconds between publications. Default 0.5.
        cpu_limit: with the CPU allocator hooks (``backend="allocator"``),
            the most bytes the program's tensors may hold: an allocation
            past it fails as on a device of that size (PyTorch raises its
            out-of-memory ``RuntimeError``) and is recorded as an ``oom``
            with what was free, so ``advise`` and ``simulate`` answer for
            that device. A rehearsal on the CPU of a run that will not fit
            (``"2.5GiB"``, or bytes). Default None: no limit.
        rank: this process's rank where the program knows it better than
            ``torch.distributed`` and ``RANK`` do (a framework's own
            launcher); used for paths and ``ranks``. May be set on the
            object before it is entered. Default: as found.

    Dumps never wait for other ranks (no collective runs), so a rank that
    runs out of memory writes its file while the others are blocked.

    Leaving the block dumps and stops recording, whatever the reason; an
    exception passes through unchanged (the very same object). Inside another
    recording it does nothing (the outer one records); it replaces one
    started by ``VRAMSCOPE_RECORD``.
    """

    def __init__(
        self,
        path: Optional[str | os.PathLike] = None,
        *,
        max_entries: Optional[int] = None,
        stacks: Optional[str] = None,
        on_oom: bool = True,
        every: Optional[int] = None,
        keep: Optional[int] = None,
        collect_cycles: bool = True,
        backend: Optional[str] = None,
        device: Optional[str] = None,
        ranks: Optional[Any] = None,
        dump_at: Optional[Any] = None,
        live: Optional[Any] = None,
        live_interval: float = DEFAULT_LIVE_INTERVAL,
        rank: Optional[int] = None,
        cpu_limit: Optional[Any] = None,
    ) -> None:
        self._kwargs = dict(
            path=path,
            max_entries=max_entries,
            stacks=stacks,
            on_oom=on_oom,
            every=every,
            keep=keep,
            backend=backend,
            device=device,
            ranks=ranks,
            dump_at=dump_at,
            live=live,
            live_interval=live_interval,
            rank=rank,
        )
        self.collect_cycles: bool = bool(collect_cycles)
        self.cpu_limit: Optional[int] = None
        if cpu_limit is not None:  # (the byte parser is native: not needed otherwise)
            from . import _size

            self.cpu_limit = _size(cpu_limit)
        if self.cpu_limit is not None and self.cpu_limit <= 0:
            raise ValueError(f"cpu_limit={cpu_limit!r}: must be positive")
        env = read_env()
        pick = lambda key, default: self._kwargs[key] if self._kwargs[key] is not None else env.get(key, default)  # noqa: E731
        # Absolute now: the program may change directory before the dump.
        self.path_template: str = os.path.abspath(os.fspath(pick("path", DEFAULT_PATH)))
        given = pick("max_entries", None)
        # None: the recorder's own default, once it is known which one runs.
        self.max_entries_given: Optional[int] = None if given is None else int(given)
        self.max_entries: int = DEFAULT_MAX_ENTRIES if given is None else int(given)
        self.stacks: str = str(pick("stacks", DEFAULT_STACKS))
        self.on_oom: bool = bool(on_oom)
        self.every: int = int(pick("every", 0))
        self.keep: int = int(pick("keep", DEFAULT_KEEP))
        self.backend: str = str(pick("backend", DEFAULT_BACKEND))
        self.device: Optional[str] = self._kwargs["device"]
        self.ranks = parse_ranks(pick("ranks", None))
        self.dump_at = pick("dump_at", None)
        self.live = pick("live", False)
        self.live_interval = float(live_interval)
        self.rank: Optional[int] = None if rank is None else int(rank)
        # The last snapshot written by this recording (its final file once it ended).
        self.written: Optional[str] = None
        if self.live_interval <= 0:
            raise ValueError(f"live_interval={live_interval!r}: must be positive")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend={self.backend!r}: expected one of {', '.join(BACKENDS)}")
        if self.stacks not in STACKS_CHOICES:
            raise ValueError(f"stacks={self.stacks!r}: expected one of {', '.join(STACKS_CHOICES)}")
        if self.max_entries <= 0 or self.every < 0 or self.keep < 0:
            raise ValueError("max_entries must be positive, every and keep 0 or more")
        self._session: Optional[Session] = None

    @property
    def path(self) -> str:
        """The snapshot's path now (placeholders filled in)."""
        session = self._session
        return session.path() if session is not None else expand_path(self.path_template, 0, self.rank_info())

    @property
    def recording(self) -> bool:
        """Whether this object is recording now (entering it starts nothing
        inside another recording, or on a rank that ``ranks`` leaves out)."""
        return self._session is not None

    def rank_info(self) -> Dict[str, int]:
        """``rank``, ``local_rank``, ``world_size`` as the files are named."""
        info = rank_info()
        if self.rank is not None:
            info = dict(info, rank=self.rank, world_size=max(info["world_size"], self.rank + 1))
        return info

    def __enter__(self) -> "record":
        global _active
        with _lock:
            current = current_session()
            if current is not None:
                if not current.from_env:
                    # Nested (a recorded script run by `vramscope run`, say): the
                    # outer recording already covers this block.
                    print(f"vramscope: already recording to {current.path()}; not recording {self.path} separately", file=sys.stderr)
                    return self
                # An explicit recording takes over one started by VRAMSCOPE_RECORD.
                print(f"vramscope: recording to {self.path} replaces $VRAMSCOPE_RECORD", file=sys.stderr)
                current.finish(write=False)
            if self.ranks is not None and self.rank_info()["rank"] not in self.ranks:
                return self  # not one of the ranks asked for: runs unrecorded
            session = Session(self, _on_cuda_oom)
            session.begin()
            self._session = _active = session
        return self

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> bool:
        session = self._session
        if session is not None and exc is not None and is_oom(exc):
            if not (session.ooms and session.cuda):  # CUDA's observer noted it
                session.note_oom(None, None)
            session.end_reason = "oom"
        self._end(pending=exc is not None)
        return False  # never swallow: the original exception propagates as it was

    def _end(self, pending: bool, write: bool = True) -> Optional[str]:
        global _active
        with _lock:
            session, self._session = self._session, None
            if session is None:
                return None
            if _active is session:
                _active = None
        try:
            return session.finish(write=write, collect=not pending)
        except Exception as err:
            if not pending:
                raise
            # Raising here would replace the exception that is propagating.
            print(f"vramscope: could not write {session.path()}: {err!r}", file=sys.stderr)
            return None

    def __call__(self, fn: _F) -> _F:
        """Use as a decorator: each call of ``fn`` is recorded."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with record(**self._kwargs):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def __repr__(self) -> str:
        state = "recording" if self._session else "idle"
        return f"<vramscope.record {self.path_template!r} {state}>"


def start(path: Optional[str | os.PathLike] = None, **options: Any) -> record:
    """Start recording; same arguments as :class:`record`. Returns it."""
    return record(path, **options).__enter__()


def stop(write: bool = True) -> Optional[str]:
    """Stop the active recording and write its snapshot (unless ``write`` is
    False). Returns the path written, or ``None`` when nothing was recording."""
    session = current_session()
    return session.owner._end(pending=False, write=write) if session else None


def dump(path: Optional[str | os.PathLike] = None) -> str:
    """Write the snapshot now and keep recording. Default path: the
    recording's. Returns the path written."""
    session = current_session()
    if session is None:
        raise RuntimeError("vramscope is not recording")
    target = expand_path(os.path.abspath(os.fspath(path)), session.steps, session.owner.rank_info()) if path is not None else session.path()
    return session.dump(target, collect=True, reason="manual")


def step() -> int:
    """End an iteration (``ProfilerStep#N``) and begin the next; dumps when
    ``every`` says so. Returns N, or 0 when not recording."""
    session = current_session()
    return session.step() if session else 0


def mark(name: str) -> "_Mark":
    """Label what follows with ``name`` until the next ``mark``, the end of
    the iteration, or the end of the ``with`` block when used as one. The
    label is a ``record_function`` range and, on CUDA, the ``user_metadata``
    of every allocation made meanwhile."""
    session = current_session()
    return _Mark(session, session.mark(str(name)) if session else None)


def is_recording() -> bool:
    """Whether a recording is active in this process."""
    return current_session() is not None


def live_state() -> Optional[Dict[str, Any]]:
    """The recording's state now, as ``vramscope live`` receives it
    (``docs/live-protocol.md``): allocated, reserved, peaks, bytes per
    category, the top holders, the iterations so far. ``None`` when not
    recording or when the backend keeps no running totals (``profiler``)."""
    session = current_session()
    if session is None or not session.has_totals():
        return None
    from vramscope._recording.live import state

    return state(session)


def current_session() -> Optional["Session"]:
    # A forked child inherits the parent's session object, not its recording.
    session = _active
    return session if session is not None and session.pid == os.getpid() else None


class _Mark:
    """Returned by :func:`mark`; ends the label when its ``with`` block ends."""

    def __init__(self, session: Optional["Session"], span: Optional["Span"]) -> None:
        self._session, self._span = session, span

    def __enter__(self) -> "_Mark":
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self._session is not None and self._span is not None:
            self._session.end_mark(self._span)
        return False


def _on_cuda_oom(device: int, alloc: int, limit: int, device_free: int) -> None:
    """Allocator OOM observer: dump while the failed request is in the trace."""
    session = current_session()
    if session is None or not session.settings.on_oom:
        return
    try:
        session.note_oom(alloc, device_free, device, limit)
        path = session.dump(session.path(), reason="oom")
        print(f"vramscope: out of memory on cuda:{device}; snapshot written to {path}", file=sys.stderr)
    except Exception as err:  # noqa: BLE001 - an observer must not raise into the allocator
        print(f"vramscope: could not write the snapshot at the OOM: {err!r}", file=sys.stderr)


class _CallableModule(types.ModuleType):
    """Importing ``vramscope.record`` (this module) rebinds the package's
    ``record`` attribute from the class to the module; forwarding calls keeps
    ``vramscope.record(...)`` working as a context manager and decorator."""

    def __call__(self, *args: Any, **kwargs: Any) -> record:
        return record(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

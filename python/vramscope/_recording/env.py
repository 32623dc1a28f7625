"""Recording switched on from the environment, with no change to the code.

``VRAMSCOPE_RECORD=out.pickle python train.py`` records the whole run: a
``.pth`` file installed with the package calls :func:`activate_from_env` when
the interpreter starts, which starts recording and dumps at exit. The same
variables also supply defaults for :class:`vramscope.record` arguments that
are left out (an argument always wins over a variable):

==========================  ===================================  ==========
variable                    meaning                              default
==========================  ===================================  ==========
``VRAMSCOPE_RECORD``        snapshot path; switches recording on  (off)
``VRAMSCOPE_MAX_ENTRIES``   history kept (``max_entries``)        100000; CPU hooks 3000000
``VRAMSCOPE_STACKS``        ``python``, ``all`` or ``none``      python
``VRAMSCOPE_BACKEND``       ``auto``, ``cuda``, ``xpu``,          auto
                            ``allocator``, ``dispatch`` or
                            ``profiler``
``VRAMSCOPE_EVERY``         periodic dump every N steps (0: off)  0
``VRAMSCOPE_KEEP``          periodic files kept (0: all)         3
``VRAMSCOPE_RANKS``         ranks recorded (``0,3`` or ``0-7``)   all
``VRAMSCOPE_DUMP_AT``       early dump at ``90%`` or ``12GiB``    (off)
``VRAMSCOPE_LIVE``          ``1``: publish for ``vramscope live``  (off)
                            (or ``127.0.0.1:PORT``,
                            ``file:PATH``)
==========================  ===================================  ==========

Child processes inherit the environment. Only the first process records
(the others would overwrite its file at their exit) unless the path contains
``{pid}``, which gives each process a file of its own, or the children are
the ranks of a distributed job (``RANK`` is set: ``torchrun``, Accelerate,
SLURM scripts): each rank records, into a file of its own (see
``vramscope._recording.rank``). The launcher itself (``torchrun``) never records.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
from typing import Any, Dict, Mapping, Optional

# (standard library only: imported at every interpreter start it acts in)
from vramscope._recording import children

PATH_VAR = "VRAMSCOPE_RECORD"
# Set by the recording process so that its children know they are children.
OWNER_VAR = "VRAMSCOPE_RECORD_OWNER"

_INT_VARS = {
    "max_entries": "VRAMSCOPE_MAX_ENTRIES",
    "every": "VRAMSCOPE_EVERY",
    "keep": "VRAMSCOPE_KEEP",
}
_STACKS_VAR = "VRAMSCOPE_STACKS"
STACKS_CHOICES = ("python", "all", "none")
_BACKEND_VAR = "VRAMSCOPE_BACKEND"
BACKEND_CHOICES = ("auto", "cuda", "xpu", "allocator", "dispatch", "profiler")

# The recorder started here, if any (for the exit handler and for tests).
_activated: Optional[Any] = None


def read_env(environ: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """Recording settings present in the environment, parsed and checked.

    Returns only the keys that are set: ``path``, ``max_entries``, ``stacks``,
    ``every``, ``keep``, ``backend``. Raises ``ValueError`` naming the variable when a
    value is invalid.
    """
    env = os.environ if environ is None else environ
    out: Dict[str, Any] = {}
    path = env.get(PATH_VAR, "").strip()
    if path:
        out["path"] = path  # placeholders ({pid}, {rank}, ...) are filled in at each dump
    for key, var in _INT_VARS.items():
        raw = env.get(var, "").strip()
        if not raw:
            continue
        try:
            value = int(raw.replace("_", ""))
        except ValueError:
            raise ValueError(f"{var}={raw!r}: expected a whole number") from None
        if value < 0 or (key == "max_entries" and value == 0):
            raise ValueError(f"{var}={raw!r}: must be {'positive' if key == 'max_entries' else '0 or more'}")
        out[key] = value
    stacks = env.get(_STACKS_VAR, "").strip().lower()
    if stacks:
        if stacks not in STACKS_CHOICES:
            raise ValueError(f"{_STACKS_VAR}={stacks!r}: expected one of {', '.join(STACKS_CHOICES)}")
        out["stacks"] = stacks
    backend = env.get(_BACKEND_VAR, "").strip().lower()
    if backend:
        if backend not in BACKEND_CHOICES:
            raise ValueError(f"{_BACKEND_VAR}={backend!r}: expected one of {', '.join(BACKEND_CHOICES)}")
        out["backend"] = backend
    ranks = env.get("VRAMSCOPE_RANKS", "").strip()
    if ranks:
        from vramscope._recording.rank import parse_ranks

        out["ranks"] = parse_ranks(ranks)
    dump_at = env.get("VRAMSCOPE_DUMP_AT", "").strip()
    if dump_at:
        out["dump_at"] = int(dump_at) if dump_at.isdigit() else dump_at
    live = env.get("VRAMSCOPE_LIVE", "").strip()
    if live:
        low = live.lower()
        out["live"] = True if low in ("1", "true", "yes", "on") else False if low in ("0", "false", "no", "off") else live
    return out


def activate_from_env(environ: Optional[Mapping[str, str]] = None) -> Optional[Any]:
    """Start recording if ``VRAMSCOPE_RECORD`` is set, dumping at exit.

    Called at interpreter start, so it never raises: a problem is reported
    on stderr in one line and the program runs unrecorded.

    Returns the started :class:`vramscope.record`, or ``None`` when the
    variable is unset, this process is a child of the recording one, or
    recording could not start.
    """
    global _activated
    env = os.environ if environ is None else environ
    raw_path = env.get(PATH_VAR, "").strip()
    owner = env.get(OWNER_VAR)
    if not raw_path and owner and owner != str(os.getpid()):
        # A child of `vramscope run` (which records in-process and sets
        # only the owner): a note at exit if it trained or used a GPU.
        children.watch(owner)
        return None
    if not raw_path or _activated is not None:
        return None
    from vramscope._recording.rank import is_launcher

    if is_launcher():
        return None  # torchrun: its workers record, each its own rank
    distributed = bool(env.get("RANK", "").strip())
    if owner and owner != str(os.getpid()) and "{pid}" not in raw_path and not distributed:
        # Not recorded: a note at exit if it trained or used a GPU, for the
        # recording process to say so (vramscope._recording.children).
        children.watch(owner)
        return None
    try:
        _record = _recorder()
        settings = read_env(env)
        rec = _record.start(**settings)
    except Exception as exc:  # noqa: BLE001 - must never break interpreter start
        print(f"vramscope: {PATH_VAR} ignored: {exc}", file=sys.stderr)
        return None
    rec._session.from_env = True
    if "{pid}" not in raw_path and not distributed:
        os.environ[OWNER_VAR] = str(os.getpid())
        children.clear(str(os.getpid()))  # notes of an earlier process of this pid
    _activated = rec
    atexit.register(_dump_at_exit, rec)
    return rec


def _recorder() -> Any:
    # The module, not the package attribute of the same name (the class).
    return importlib.import_module("vramscope.record")


def _dump_at_exit(rec: Any) -> None:
    """Exit handler: write the snapshot if this recording is still the
    active one (an explicit ``record`` may have taken over)."""
    global _activated
    _activated = None
    _record = _recorder()

    if _record.current_session() is None or _record.current_session() is not rec._session:
        return
    try:
        path = _record.stop()
    except Exception as exc:  # noqa: BLE001 - exit handlers cannot report otherwise
        print(f"vramscope: could not write the snapshot: {exc}", file=sys.stderr)
        return
    children.clear(str(os.getpid()))
    if path:
        print(f"vramscope: snapshot written to {path}", file=sys.stderr)

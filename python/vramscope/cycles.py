"""Reference cycles that keep tensors alive.

Python frees most objects at once by reference counting; objects in a
reference cycle wait for the cycle collector, which knows nothing about GPU
memory, so tensors held by cycles pile up until a collection (or an OOM)::

    vramscope.cycles.watch()            # or vramscope.warn_tensor_cycles()
    train()
    # WARNING vramscope.cycles: reference cycle Node -.other-> Node holds
    #   2 CUDA tensors (40.00 KiB), freed only by the garbage collector
    #   (1 time so far); graph: vramscope-cycles/cycle-3f2a9c1e.html

How it works: a ``gc.callbacks`` hook asks the collector to keep what it
would free (``DEBUG_SAVEALL``) for the duration of each collection. When the
collection found garbage, the hook looks for tensors in it; only when there
are some does it name every reference between the garbage objects
(attribute, dict key, list index, closure variable, bound method
``__self__``, frame local, ...) and hand the graph to the Rust core, which
finds the minimal cycles, the path to each tensor and deduplicates identical
shapes (a cycle created 10,000 times by the same code is one finding with a
count). The kept garbage is then released at once the way the collector
itself would have freed it: its containers are cleared (dicts, lists, sets,
deques, closure cells, frames and the locals they cached, slots, exceptions'
links), which breaks the cycles, and reference counting frees
the objects, so memory is not held longer than without the watcher and no
extra collection runs. Collections that find no garbage cost two list-length
reads.

:func:`find` analyses a given set of objects on demand (tests, notebooks).

Not seen at a collection, by how CPython collects: a loop through a
suspended generator or coroutine (the collector closes it before anything
reaches the garbage, and the loop dies by reference counting), and a hook on
a tensor made by an operation that captures the tensor (PyTorch keeps it
where the collector cannot follow: never garbage, never freed). ``find``
names both on live objects; ``vramscope leaks`` sees both in a recording.
"""

from __future__ import annotations

import atexit
import collections
import gc
import hashlib
import json
import logging
import os
import sys
import threading
import types
from typing import Any, Callable, Dict, Iterable, List, Optional

from vramscope._recording.files import write_text_atomic
from vramscope._annotate.objgraph import allocation_stacks, build_graph, held_tensors, reachable
from vramscope._annotate.refnames import holds_memory as _holds_memory

__all__ = ["watch", "stop", "find", "Watcher", "CycleReport", "warn_tensor_cycles"]

log = logging.getLogger("vramscope.cycles")

# Objects found from `find(objects)` are bounded: a function's globals reach
# the whole program.
MAX_FIND_OBJECTS = 200_000

# inspect.CO_OPTIMIZED: a function's frame, not a module or class body.
_CO_OPTIMIZED = 0x1

# The watcher's running report in its output directory (the CLI's
# `cycles::REPORT_FILE`).
REPORT_FILE = "cycles.json"


class CycleReport:
    """Findings of the cycle analysis: ``findings`` (list of dicts, largest
    first), ``bytes``, ``tensors``; ``html()``, ``dot(i)``, ``text()``."""

    def __init__(self, data: Dict[str, Any]) -> None:
        self.data = data

    @property
    def findings(self) -> List[Dict[str, Any]]:
        return list(self.data.get("findings", []))

    @property
    def bytes(self) -> int:
        return int(self.data.get("bytes", 0))

    @property
    def tensors(self) -> int:
        return int(self.data.get("tensors", 0))

    def html(self, title: str = "vramscope: reference cycles holding tensors") -> str:
        from . import _native

        return _native.cycles_html(json.dumps(self.data), title)

    def dot(self, index: int = 0) -> str:
        from . import _native

        return _native.cycles_dot(json.dumps(self.data), index)

    def text(self) -> str:
        from . import _native

        return _native.cycles_text(json.dumps(self.data))

    def write_html(self, path: str | os.PathLike) -> str:
        path = os.fspath(path)
        write_text_atomic(path, self.html())
        return path

    def write_json(self, path: str | os.PathLike) -> str:
        """The report as JSON, which ``vramscope cycles PATH`` (and the MCP
        server's ``cycles`` tool) reads back."""
        path = os.fspath(path)
        write_text_atomic(path, json.dumps(self.data))
        return path

    def _repr_html_(self) -> str:
        """In a notebook: the page with its graphs, in an iframe sandboxed
        without scripts (the page has none) and its content policy kept apart
        from the notebook's."""
        import html as _html

        doc = _html.escape(self.html(), quote=True)
        return (
            '<iframe sandbox="" style="width:100%;height:640px;border:1px solid #ddd" '
            f'srcdoc="{doc}"></iframe>'
        )

    def __repr__(self) -> str:
        return f"<vramscope.cycles.CycleReport {len(self.findings)} finding(s), {self.tensors} tensor(s), {self.bytes} bytes>"


def analyze(objects: List[Any], stacks: Optional[Callable[[int], Optional[List[str]]]] = None) -> CycleReport:
    from . import _native

    g = build_graph(objects, stacks)
    return CycleReport(json.loads(_native.cycles_analyze(json.dumps(g))))


def find(objects: Iterable[Any]) -> CycleReport:
    """Reference cycles among ``objects`` and what they reach (bounded: module
    globals, classes and code are not followed) that hold tensors.

    The analysis covers the program's objects only: the container passed in
    and every frame still executing (the caller's, in any thread) are left
    out, with whatever is reachable only through them. A frame on a loop
    leads through ``f_back`` to the frame of the function that gathered the
    objects, whose local holds the very list passed: following it reported
    ``list —[6]→ frame —f_back→ frame —local 'objs'→``, a loop of our own
    making."""
    return analyze(_find_objects(objects), allocation_stacks())


def _find_objects(objects: Iterable[Any]) -> List[Any]:
    """The nodes of :func:`find`'s graph. Executing frames are untracked by
    CPython 3.9-3.13 (so left out as atoms anyway); they are excluded by
    identity too, so that this does not hang on that detail."""
    live = _live_frames()  # kept alive while their ids are in `skip`
    skip = {id(f) for f in live}
    skip.add(id(objects))
    return reachable(objects, skip, MAX_FIND_OBJECTS)


def _live_frames() -> List[types.FrameType]:
    """The frames being executed now, in every thread."""
    out: List[types.FrameType] = []
    try:
        tops = list(sys._current_frames().values())
    except Exception:  # noqa: BLE001 - an interpreter without it: this thread only
        tops = []
    tops.append(sys._getframe())
    for f in tops:
        while f is not None:
            out.append(f)
            f = f.f_back
    return out


# ---------------------------------------------------------------------------
# The watcher.


class Watcher:
    """Watches cycle collections for garbage cycles that hold tensors.

    Args:
        device: ``"cuda"`` (default) counts CUDA tensors only, ``"any"``
            every tensor (CPU ones included), or a device type
            (``"cpu"``, ``"mps"``, ...).
        min_bytes: tensors smaller than this are ignored (default 0).
        out_dir: where the HTML (and DOT) of each new kind of cycle goes,
            and the running report of the whole run (``cycles.json``, read
            by ``vramscope cycles DIR``). Default ``vramscope-cycles`` in
            the current directory; ``None`` after ``html=False``.
        html: write a page per new kind of cycle (default True).
        warn: log a warning per new kind of cycle (default True).
        summary_at_exit: log a summary of every kind seen at exit.
    """

    def __init__(
        self,
        device: str = "cuda",
        min_bytes: int = 0,
        out_dir: Optional[str | os.PathLike] = "vramscope-cycles",
        html: bool = True,
        warn: bool = True,
        summary_at_exit: bool = True,
    ) -> None:
        self.device = device
        self.min_bytes = int(min_bytes)
        self.out_dir = os.path.abspath(os.fspath(out_dir)) if (html and out_dir is not None) else None
        self.warn = warn
        self.summary_at_exit = summary_at_exit
        self.report: Optional[Dict[str, Any]] = None  # merged over all collections
        self.files: Dict[str, str] = {}  # signature -> html path
        self.collections_seen = 0
        self._saved_debug = 0
        self._garbage_before = 0
        self._armed = False
        self._active = False
        self._lock = threading.Lock()

    # -- lifecycle --
    def start(self) -> "Watcher":
        if self._active:
            return self
        self._active = True
        gc.callbacks.append(self._callback)
        atexit.register(self._at_exit)
        return self

    def stop(self) -> Optional[CycleReport]:
        """Stop watching; returns what was found."""
        if not self._active:
            return self.result()
        self._active = False
        try:
            gc.callbacks.remove(self._callback)
        except ValueError:
            pass
        if self._armed:  # stopped inside a collection (from a callback)
            gc.set_debug(self._saved_debug)
            self._armed = False
        try:
            atexit.unregister(self._at_exit)
        except Exception:  # noqa: BLE001
            pass
        return self.result()

    def result(self) -> Optional[CycleReport]:
        return CycleReport(self.report) if self.report is not None else None

    def __enter__(self) -> "Watcher":
        return self.start()

    def __exit__(self, *exc: Any) -> bool:
        self.stop()
        return False

    # -- the hook --
    def _callback(self, phase: str, info: Dict[str, Any]) -> None:
        if not self._active:
            return
        if phase == "start":
            self._garbage_before = len(gc.garbage)
            self._saved_debug = gc.get_debug()
            gc.set_debug(self._saved_debug | gc.DEBUG_SAVEALL)
            self._armed = True
            return
        if not self._armed:
            return
        self._armed = False
        gc.set_debug(self._saved_debug)
        n = self._garbage_before
        if len(gc.garbage) <= n:
            return
        # A copy made after the collection: the objects it holds were
        # unreachable, so none refers to it, nor to gc.garbage or to a frame
        # still executing (a garbage frame's `f_back` may lead to one; only
        # these objects become nodes, so the edge is dropped).
        garbage = gc.garbage[n:]
        del gc.garbage[n:]
        try:
            held = held_tensors(garbage)
            if any(self._wanted(o) for o in garbage) or any(self._wanted(t) for t in held):
                self._record(garbage, held)
            held = None
        except Exception as err:  # noqa: BLE001 - never break the program's collection
            # As text: a log record holding the exception would keep its
            # traceback, this frame and `garbage` alive for a later collection.
            log.debug("vramscope.cycles: analysis failed: %s", repr(err))
        finally:
            _release(garbage)
            garbage = None

    def _wanted(self, o: Any) -> bool:
        if not _holds_memory(o):  # FakeTensors of a compiled graph: nothing on the device
            return False
        try:
            if self.device == "cuda" and not o.is_cuda:
                return False
            if self.device not in ("cuda", "any") and o.device.type != self.device:
                return False
            return o.untyped_storage().nbytes() >= self.min_bytes
        except Exception:  # noqa: BLE001
            return False

    def _record(self, garbage: List[Any], held: List[Any]) -> None:
        from . import _native

        self.collections_seen += 1
        stacks = allocation_stacks()
        g = build_graph(garbage, stacks, held=held)
        # Tensors the filter leaves out are not reported.
        for node in g["nodes"]:
            t = node["tensor"]
            if t is not None and not self._wanted_info(t):
                node["tensor"] = None
        new = json.loads(_native.cycles_analyze(json.dumps(g)))
        with self._lock:
            before = {f["signature"] for f in (self.report or {}).get("findings", [])}
            if self.report is None:
                self.report = new
            else:
                self.report = json.loads(_native.cycles_merge(json.dumps(self.report), json.dumps(new)))
        self._write_report()
        for f in new.get("findings", []):
            if f["signature"] in before:
                continue
            path = self._write(f)
            if self.warn:
                log.warning(
                    "vramscope: %s, freed only by the garbage collector%s",
                    f["title"],
                    f"; graph: {path}" if path else "",
                )

    def _wanted_info(self, t: Dict[str, Any]) -> bool:
        dev = t["device"].split(":")[0]
        if self.device == "cuda" and dev != "cuda":
            return False
        if self.device not in ("cuda", "any") and dev != self.device:
            return False
        return t["bytes"] >= self.min_bytes

    def _write_report(self) -> Optional[str]:
        """The running report as ``<out_dir>/cycles.json`` (rewritten whole
        at each collection that found tensors, atomically)."""
        if self.out_dir is None or self.report is None:
            return None
        os.makedirs(self.out_dir, exist_ok=True)
        path = os.path.join(self.out_dir, REPORT_FILE)
        write_text_atomic(path, json.dumps(self.report))
        return path

    def _write(self, finding: Dict[str, Any]) -> Optional[str]:
        if self.out_dir is None:
            return None
        from . import _native

        sig = hashlib.sha1(finding["signature"].encode()).hexdigest()[:10]
        os.makedirs(self.out_dir, exist_ok=True)
        path = os.path.join(self.out_dir, f"cycle-{sig}.html")
        one = dict(self.report or {}, findings=[finding])
        one_json = json.dumps(one)
        write_text_atomic(path, _native.cycles_html(one_json, "vramscope: reference cycle holding tensors"))
        write_text_atomic(path[: -len(".html")] + ".dot", _native.cycles_dot(one_json, 0))
        self.files[finding["signature"]] = path
        return path

    def _at_exit(self) -> None:
        self._active = False
        if self.summary_at_exit and self.report and self.report.get("findings"):
            from . import _native

            try:
                log.warning("vramscope: reference cycles holding tensors during this run:\n%s", _native.cycles_text(json.dumps(self.report)))
            except Exception:  # noqa: BLE001 - at exit, modules may be half torn down
                pass


def _release(garbage: List[Any]) -> None:
    """Free kept garbage as the collector would have: clear its containers
    (the collector's ``tp_clear``), which breaks the cycles, then drop the
    list so that reference counting frees the objects. Nothing else refers to
    them: they were unreachable, and their finalizers have already run."""
    slots: Dict[type, List[Any]] = {}  # per call: a lasting cache would keep classes alive
    for o in garbage:
        try:
            if isinstance(o, (dict, list, set, collections.deque)):
                o.clear()
            elif isinstance(o, BaseException):
                o.__traceback__ = o.__context__ = o.__cause__ = None
                o.args = ()
                o.__dict__.clear()
            elif isinstance(o, types.FrameType):
                # Up to 3.12 the namer's read of `f_locals` cached a snapshot
                # dict on the frame, which `clear()` leaves: it kept a kept
                # exception's frame (its locals, its tensors) alive to the
                # next collection. A module or class body's `f_locals` is
                # its namespace: left alone.
                loc = o.f_locals if o.f_code.co_flags & _CO_OPTIMIZED else None
                o.clear()
                if type(loc) is dict:
                    loc.clear()
            elif type(o).__name__ == "cell":
                try:
                    del o.cell_contents
                except ValueError:
                    pass
            elif not isinstance(o, (type, types.ModuleType)):
                d = getattr(o, "__dict__", None)
                if isinstance(d, dict):
                    d.clear()
                # A loop through `__slots__` survived to the next collection,
                # analysed (and counted) again there.
                t = type(o)
                got = slots.get(t)
                if got is None:
                    got = slots[t] = _python_slots(t)
                for slot in got:
                    try:
                        slot.__delete__(o)
                    except Exception:  # noqa: BLE001 - an unset slot
                        pass
        except Exception:  # noqa: BLE001 - objects that refuse are left to the collector
            pass
    garbage.clear()


def _python_slots(t: type) -> List[Any]:
    """The member descriptors of the ``__slots__`` a Python class (and its
    bases) declares; C types' own fields are left to them."""
    got: List[Any] = []
    if not hasattr(t, "__slots__"):  # most classes: one lookup
        return got
    for cls in getattr(t, "__mro__", ()):
        d = cls.__dict__
        if "__slots__" in d:
            got.extend(v for v in d.values() if isinstance(v, types.MemberDescriptorType))
    return got


_watcher: Optional[Watcher] = None


def watch(**options: Any) -> Watcher:
    """Start watching (one watcher per process; calling again returns it).
    Options as :class:`Watcher`."""
    global _watcher
    if _watcher is None or not _watcher._active:
        _watcher = Watcher(**options).start()
    return _watcher


def stop() -> Optional[CycleReport]:
    """Stop the watcher started by :func:`watch`; returns what it found."""
    global _watcher
    w, _watcher = _watcher, None
    return w.stop() if w is not None else None


def warn_tensor_cycles(**options: Any) -> Watcher:
    """For users of ``torch.utils.viz._cycles.warn_tensor_cycles``: log a
    warning with a lasting HTML page for each kind of cycle holding CUDA
    tensors. Without the global memory-history side effect."""
    if not logging.getLogger().handlers and not log.handlers:
        logging.basicConfig()
    return watch(**options)

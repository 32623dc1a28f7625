"""Recording without a GPU: the PyTorch profiler turned into a memory snapshot.

Without CUDA there is no allocator history to switch on, but the profiler
with ``profile_memory=True`` sees every CPU allocation, and
``torch.cuda._memory_viz._profile_to_snapshot`` turns its memory profile into
the snapshot format, with a Memory Profiler category per allocation. This
module runs that conversion and repairs what it leaves out, so that the file
reads like one written on a GPU:

* ``_profile_to_snapshot`` keeps only allocations the profiler can tie to a
  tensor; library workspaces (oneDNN convolution scratch space, ...) are
  dropped, which understates the peak. They are added back from the same
  profile, with their Python stacks and category ``unknown``.
* Its trace entries carry no ``time_us``; they get the profiler's own
  timestamps (wall clock, as on CUDA), so iteration annotations line up.
* Its single segment spans the lowest to the highest CPU address (hundreds of
  MB to TB of "reserved" memory). The CPU allocator caches nothing, so every
  block becomes its own segment, and ``segment_alloc``/``segment_free`` events
  follow each allocation: reserved equals allocated at every moment.

The profiler can only hand out results once stopped, so a dump in the middle
of a run stops it, converts the window and starts a new one; windows are
concatenated and the trace keeps the last ``max_entries`` events, like the
ring buffer on CUDA. ``_quiet`` keeps the profiler's log lines off the
user's stderr: around its starts and stops, and from the first start to
``stop()`` for c10's warning about tensors freed that were allocated before.
"""

from __future__ import annotations

import collections
import sys
import types
import warnings
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

from vramscope._recording.quiet import c10_warnings_hidden, profiler_logs_dropped
from vramscope._recording.recorders.base import Marks, Recorder
from vramscope._recording.recorders.blocks import SMALL_SIZE, cpu_segment  # noqa: F401 - SMALL_SIZE: part of this module's API

# Called with every finished ``torch.profiler.profile`` window before it is
# converted, e.g. to export a Chrome trace of the same run.
window_listeners: List[Callable[[Any], None]] = []

# Entries each timeline action becomes in ``_profile_to_snapshot``.
_ENTRIES_PER_ACTION = {"CREATE": 1, "DESTROY": 2, "INCREMENT_VERSION": 3}



class ProfilerRecorder(Recorder):
    """Records CPU memory through ``torch.profiler`` and builds snapshots.

    Args:
        max_entries: trace entries kept in the snapshot, oldest dropped first.
        stacks: ``"python"``/``"all"`` keep Python stacks (the profiler has no
            C++ frames); ``"none"`` drops them from the snapshot (the profiler
            still collects them: its memory profile needs ``with_stack``).
    """

    def __init__(self, max_entries: int, stacks: str) -> None:
        self.max_entries = max_entries
        self.stacks = stacks
        self._trace: Deque[Dict[str, Any]] = collections.deque(maxlen=max_entries)
        # Blocks alive at the end of the last window: address -> entry.
        self._live: Dict[int, Dict[str, Any]] = {}
        self._prof: Any = None
        self._freed: Optional[Dict[str, Any]] = None  # the block freed by the previous entry
        self.windows = 0
        # Windows whose memory analysis failed inside PyTorch, and why.
        self.failures: List[str] = []
        self._restore_c10_logs: Optional[Callable[[], None]] = None

    def start(self) -> None:
        """Start a profiler window."""
        from torch.profiler import ProfilerActivity, profile

        if self._restore_c10_logs is None:
            # Until stop(): freeing a tensor from before the recording warns.
            self._restore_c10_logs = c10_warnings_hidden()

        prof = profile(
            activities=[ProfilerActivity.CPU],
            profile_memory=True,
            with_stack=True,
            record_shapes=True,
        )
        with profiler_logs_dropped():  # Kineto logs "profiler_start" at every start
            prof.start()
        self._prof = prof

    def collect(self, restart: bool, between: Callable[[], None] = lambda: None) -> None:
        """Stop the current window, run ``between``, fold the window into
        the trace, restart if asked.

        ``between`` and the conversion run between the windows: with the
        profiler running, its Python tracer would record every call they
        make (the tagger's walk over Python's objects for EMAs made a
        million events, and each dump of a tiny program 8 s slower).
        """
        prof, self._prof = self._prof, None
        if prof is None:
            between()
            return
        with profiler_logs_dropped():
            prof.stop()
        try:
            between()
            for listener in list(window_listeners):
                listener(prof)
            self._absorb(prof)
            self.windows += 1
        finally:
            del prof  # the window's events can be large; free them before restarting
            if restart:
                self.start()

    def _absorb(self, prof: Any) -> None:
        from torch.cuda._memory_viz import _profile_to_snapshot

        try:
            memory_profile = _TimelineOnce(prof._memory_profile())
            # _profile_to_snapshot computes the memory profile itself; hand it the
            # one computed here so the (slow) analysis runs once.
            snap = _profile_to_snapshot(types.SimpleNamespace(_memory_profile=lambda: memory_profile))
        except Exception as err:  # noqa: BLE001 - PyTorch's analysis failing must not fail the program
            # PyTorch's memory profile asserts on some programs (FSDP2:
            # "version mismatch" in _memory_profiler.py); the window is lost,
            # and the snapshot says so.
            why = f"{type(err).__name__}: {str(err)[:200]}"
            self.failures.append(why)
            print(f"vramscope: PyTorch's memory profiler could not analyse a window ({why}); its allocations are not in the snapshot (backend='allocator' records them)", file=sys.stderr)
            return
        cpu = len(snap["device_traces"]) - 1  # the CPU comes after every CUDA device
        tensors = snap["device_traces"][cpu]
        stamped = _stamp_times(tensors, memory_profile.timeline)
        if stamped is None:
            warnings.warn(
                "vramscope: could not match the profiler timeline to the snapshot; "
                "trace entries carry no time and library workspaces are omitted",
                RuntimeWarning,
                stacklevel=2,
            )
            timed = [(0, i, e) for i, e in enumerate(tensors)]
        else:
            timed = [(t, i, e) for i, (t, e) in enumerate(zip(stamped, tensors))]
            base = len(timed)
            timed += [(t, base + i, e) for i, (t, e) in enumerate(_untracked(memory_profile))]
            timed.sort(key=lambda x: (x[0], x[1]))
        for _t, _i, entry in timed:
            if self.stacks == "none":
                entry["frames"] = []
            self._append(entry)
        for seg in snap["segments"]:
            if seg["device"] == cpu:
                for addr, block in _tile(seg):
                    # Alive before the window and still alive: known only from here.
                    self._live.setdefault(addr, {"addr": addr, "size": block["size"], "frames": block.get("frames", [])})

    def _append(self, entry: Dict[str, Any]) -> None:
        action, freed = entry["action"], self._freed
        self._freed = None
        if action == "alloc":
            if not entry["frames"] and freed and (freed["addr"], freed["size"]) == (entry["addr"], entry["size"]):
                # An in-place update is written as free + alloc of a new version;
                # a tensor from an earlier window has no stack in this one.
                entry["frames"] = freed["frames"]
            self._trace.append(_segment_event("segment_alloc", entry))
            self._trace.append(entry)
            self._live[entry["addr"]] = entry
        elif action == "free_completed":
            self._trace.append(entry)
            self._trace.append(_segment_event("segment_free", entry))
            self._freed = self._live.pop(entry["addr"], None) or entry
        else:
            self._trace.append(entry)

    def snapshot(self, marks: List[Tuple[str, int, int]]) -> Dict[str, Any]:
        """The snapshot of everything collected so far (call after ``collect``).

        Args:
            marks: ``(label, start_us, end_us)`` ranges; events inside get the
                label as ``user_metadata``, as ``_set_memory_metadata`` does on CUDA.
        """
        trace = list(self._trace)
        _label(trace, sorted(marks, key=lambda m: m[1]))
        segments = [cpu_segment(self._live[a]) for a in sorted(self._live)]
        return {"segments": segments, "device_traces": [trace]}

    kind = "profiler"
    keeps_totals = False  # the profiler's memory is known only when a window is converted

    def take_snapshot(self, marks: Callable[[], Marks], final: bool, open_spans: Sequence[Any], unrecorded: Callable[[], None]) -> Dict[str, Any]:
        # Ranges must not straddle a profiler restart: leave and re-enter them.
        for span in reversed(open_spans):
            span.exit()
        self.collect(restart=not final, between=unrecorded)
        for span in open_spans if not final else ():
            span.enter()
        return self.snapshot(marks())

    def meta(self) -> Dict[str, Any]:
        return {"profiler_failures": list(self.failures)} if self.failures else {}

    def set_label(self, label: str) -> None:
        """Labels are applied from the mark ranges at dump time."""

    def device(self) -> int:
        return 0  # the CPU is device 0 of the snapshot

    def stop(self) -> None:
        """Stop the profiler without converting what it still holds."""
        prof, self._prof = self._prof, None
        try:
            if prof is not None:
                with profiler_logs_dropped():
                    prof.stop()
        finally:
            restore, self._restore_c10_logs = self._restore_c10_logs, None
            if restore is not None:
                restore()


class _TimelineOnce:
    """A ``MemoryProfile`` whose ``timeline`` (a property that recomputes the
    whole timeline on every access) is computed once and shared."""

    def __init__(self, memory_profile: Any) -> None:
        self._memory_profile = memory_profile
        self.timeline = memory_profile.timeline

    def __getattr__(self, name: str) -> Any:
        return getattr(self._memory_profile, name)


def _label(trace: List[Dict[str, Any]], marks: List[Tuple[str, int, int]]) -> None:
    """Set ``user_metadata`` on entries inside the mark ranges. Both are in
    time order and marks never overlap, so one merge pass does it."""
    k = 0
    for entry in trace:
        t = entry.get("time_us")
        if t is None:
            continue
        while k < len(marks) and marks[k][2] <= t:
            k += 1
        if k == len(marks):
            break
        if marks[k][1] <= t:
            entry["user_metadata"] = marks[k][0]


def _stamp_times(entries: List[Dict[str, Any]], timeline: Any) -> Optional[List[int]]:
    """Profiler time (ns since the epoch) of each entry ``_profile_to_snapshot``
    made, by walking the timeline exactly as it does; ``None`` if they differ."""
    from torch.profiler._memory_profiler import TensorKey

    times: List[int] = []
    for t, action, (key, _version), _size in timeline:
        if not isinstance(key, TensorKey) or key.device.type != "cpu":
            continue
        for _ in range(_ENTRIES_PER_ACTION.get(action.name, 0)):
            i = len(times)
            if i >= len(entries) or entries[i]["addr"] != key.storage.ptr:
                return None
            times.append(t)
    if len(times) != len(entries):
        return None
    for entry, t in zip(entries, times):
        entry["time_us"] = t // 1000
    return times


def _untracked(memory_profile: Any) -> List[Tuple[int, Dict[str, Any]]]:
    """Allocations the memory profile could not tie to a tensor, as timed
    trace entries (the events ``_profile_to_snapshot`` skips)."""
    from torch._C._profiler import _EventType
    from torch.profiler._memory_profiler import TensorKey

    out: List[Tuple[int, Dict[str, Any]]] = []
    live: Dict[int, Dict[str, Any]] = {}
    for event in memory_profile._op_tree.sorted_nodes:
        if event.tag != _EventType.Allocation:
            continue
        fields = event.extra_fields
        if fields.device.type != "cpu" or TensorKey.from_allocation(fields) is not None:
            continue
        t, size, addr = event.start_time_ns, fields.alloc_size, fields.ptr
        if size > 0:
            if addr in live:  # the free was not seen: close the old block first
                out.extend((t, e) for e in _frees(live.pop(addr), t))
            alloc = {
                "action": "alloc",
                "addr": addr,
                "size": size,
                "stream": 0,
                "time_us": t // 1000,
                "frames": _python_stack(event),
                "category": "unknown",
            }
            live[addr] = alloc
            out.append((t, alloc))
        elif size < 0:
            alloc = live.pop(addr, None) or {"addr": addr, "size": -size, "frames": []}
            out.extend((t, e) for e in _frees(alloc, t))
    return out


def _frees(alloc: Dict[str, Any], t_ns: int) -> List[Dict[str, Any]]:
    return [
        {
            "action": action,
            "addr": alloc["addr"],
            "size": alloc["size"],
            "stream": 0,
            "time_us": t_ns // 1000,
            "frames": alloc["frames"],
        }
        for action in ("free_requested", "free_completed")
    ]


def _python_stack(event: Any) -> List[Dict[str, Any]]:
    """Python callers of a profiler event, innermost first, in the frame form
    ``_profile_to_snapshot`` uses (the whole location in ``name``)."""
    from torch._C._profiler import _EventType

    frames = []
    parent = event.parent
    while parent is not None:
        if parent.tag in (_EventType.PyCall, _EventType.PyCCall):
            frames.append({"filename": "none", "line": 0, "name": parent.name})
        parent = parent.parent
    return frames


def _segment_event(action: str, entry: Dict[str, Any]) -> Dict[str, Any]:
    # The frames list is shared with the entry: pickle writes it once.
    out = {k: entry[k] for k in ("addr", "size", "stream") if k in entry}
    out["action"] = action
    if "time_us" in entry:
        out["time_us"] = entry["time_us"]
    out["frames"] = entry.get("frames", [])
    return out


def _tile(seg: Dict[str, Any]) -> List[Tuple[int, Dict[str, Any]]]:
    """Allocated blocks of a ``_profile_to_snapshot`` segment with their
    addresses (its blocks tile the segment in address order)."""
    out = []
    addr = seg["address"]
    for block in seg["blocks"]:
        if block.get("state") == "active_allocated":
            out.append((addr, block))
        addr += block["size"]
    return out

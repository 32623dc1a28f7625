"""What the session asks of a recorder, whichever backend it is: one
protocol, so that the session never branches on the backend.

Each recorder (``cuda``, ``cpu_allocator``, ``dispatch``, ``profiler``)
derives from :class:`Recorder` and overrides what differs; the defaults
are those of a recorder without a caching allocator behind it (reserved is
allocated, the device is the one its tensors live on).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from vramscope._recording.backend import RECORDER_NAMES

# (name, start µs, end µs) of each mark range.
Marks = List[Tuple[str, int, int]]


class Recorder:
    """A recorder: starts and stops, labels what it sees, and writes the
    snapshot; with running totals (``keeps_totals``), the figures for the
    live state and ``dump_at``."""

    #: The backend ``record(backend=...)`` ran (``backend.choose_backend``).
    kind = ""
    #: A caching allocator stands behind it: reserved and allocated differ.
    caching = False
    #: On CUDA: the out-of-memory observer and the tagger's device.
    cuda = False
    #: Running totals (``totals()``): live state and ``dump_at`` need them.
    keeps_totals = True
    #: The device type its tensors live on (``cpu``, ``mps``, ``cuda``...).
    device_type = "cpu"
    #: ``live_blocks()`` gives the allocation stack of every live block
    #: from its own books, cheaply (the cycle finder names tensors by it).
    stacks_by_address = False

    # ----- the recording -----

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def set_label(self, label: str) -> None:
        """The mark range that is open now (``""``: none)."""

    def device(self) -> int:
        return 0

    def at_step(self) -> None:
        """Called at each ``vramscope.step()``, on the program's thread."""

    def bracket(self) -> Optional[Tuple[Callable[[], Any], Callable[..., Any], Callable[[int], int]]]:
        """For a recorder that stamps stacks on what native code allocated
        (the CPU allocator's): its (mark, stamp, stack) functions, which the
        tagger brackets module calls and compiled code with; else None."""
        return None

    def snapshot(self, marks: Optional[Marks] = None) -> Dict[str, Any]:
        """The snapshot as PyTorch would pickle it, entries inside the mark
        ranges labelled."""
        raise NotImplementedError

    def take_snapshot(self, marks: Callable[[], Marks], final: bool, open_spans: Sequence[Any], unrecorded: Callable[[], None]) -> Dict[str, Any]:
        """The session's snapshot: ``marks()`` gives the mark ranges (asked
        for when needed); ``open_spans`` are the ranges still open, for a
        recorder that must leave and re-enter them around a restart;
        ``final``: the recording ends with it; ``unrecorded()``: the
        session's own reading of Python's objects (the tagger's walk, which
        allocates nothing), run where the recording does not see it. Here
        first: this recorder sees allocations only."""
        unrecorded()
        return self.snapshot(marks())

    def meta(self) -> Dict[str, Any]:
        """Keys of its own for the snapshot's ``vramscope`` dict."""
        return {}

    def history(self) -> Optional[Dict[str, Any]]:
        """How much of the run the trace holds, where it can say."""
        return None

    def live_blocks(self, unstacked: bool = False) -> List[Tuple[int, int, List[Dict[str, Any]]]]:
        """``(address, size, frames)`` of the blocks alive now, where the
        recorder knows them; ``unstacked``: those without a stack too."""
        return []

    # ----- figures, for the live state and dump_at -----

    def name(self) -> str:
        """The snapshot's ``vramscope.recorder``."""
        return RECORDER_NAMES[self.kind]

    def device_name(self) -> str:
        return str(self.device_type)

    def totals(self, reset_window: bool = False) -> Tuple[int, int, int]:
        """``(allocated now, peak, peak since the last reset)``."""
        raise NotImplementedError

    def counters(self) -> Tuple[int, int]:
        """``(allocated, reserved)`` bytes now; equal where nothing caches."""
        a = self.totals()[0]
        return a, a

    def peaks(self, allocated: int, reserved: int, seen: List[int]) -> List[int]:
        """The peaks of allocated and reserved with these counters read,
        after ``seen``: exact from the totals where nothing caches."""
        peak = max(self.totals()[1], allocated)
        return [peak, peak]

    def iteration_end(self) -> Tuple[int, int, int]:
        """``(allocated, reserved, peak of the iteration)`` at its end, the
        iteration's window reset."""
        now, _peak, window = self.totals(reset_window=True)
        return now, now, max(window, now)

    def device_free(self) -> Optional[int]:
        """Free device memory as the driver says now (CUDA's
        ``mem_get_info``), for the live state's memory outside PyTorch;
        ``None`` where the device does not say."""
        return None

    def capacity(self) -> Optional[int]:
        """The device's memory in bytes, where known (the CPU's: physical)."""
        if self.device_name() != "cpu":
            return None
        try:
            return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            return None


def make(kind: str, owner: Any) -> Recorder:
    """The recorder for backend ``kind`` (``backend.choose_backend``), as
    ``owner`` (a ``vramscope.record``) asks: its history size, stacks,
    device and CPU limit."""
    if kind in ("cuda", "xpu"):
        from vramscope._recording.recorders.cuda import CudaRecorder

        return CudaRecorder(owner.max_entries, owner.stacks, kind)
    if kind == "allocator":
        from vramscope._recording.recorders.cpu_allocator import DEFAULT_EVENTS, AllocatorRecorder

        return AllocatorRecorder(owner.max_entries_given or DEFAULT_EVENTS, owner.stacks, owner.cpu_limit)
    if kind == "dispatch":
        from vramscope._recording.recorders.dispatch import DispatchRecorder

        return DispatchRecorder(owner.max_entries, owner.stacks, owner.device)
    from vramscope._recording.recorders.profiler import ProfilerRecorder

    return ProfilerRecorder(owner.max_entries, owner.stacks)

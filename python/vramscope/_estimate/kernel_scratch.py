"""Memory a device's kernels take inside themselves, added to a meta trace.

A meta kernel gives an operation's outputs; the real kernel may also ask
the allocator for working memory it frees before returning (a CUDA
reduction's global buffers, the CPU flash attention's per-thread blocks),
or keep some for good (cuBLAS workspaces). :class:`Kernels` is what the
trace's dispatch mode calls around each operation for one device
(``vramscope._estimate.cuda.Cuda``, ``vramscope._estimate.cpu.Cpu``): ``before``
(scratch that must exist while the kernel runs, or a result to use
instead), ``untracked`` (outputs that are not the device's memory) and
``after`` (the kernel's own scratch, in its order).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple


class Kernels:
    """Scratch bookkeeping shared by the devices: ``held`` lives through
    the current operation, ``keep`` to the end of the trace."""

    def __init__(self) -> None:
        self.keep: list = []  # alive to the end (workspaces)
        self.held: list = []  # made before an operation, freed after it
        self.autocast: Any = None  # vramscope._estimate.autocast.Autocast: casts where the program's autocast is on
        self.unmodelled: Dict[str, str] = {}  # kernel kind -> what the trace does not see of it

    def note(self, kind: str, sentence: str) -> None:
        """Say once that a kernel of ``kind`` ran whose own memory the trace
        does not see (the estimate's ``notes``)."""
        self.unmodelled.setdefault(kind, sentence)

    def before(self, func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], rec: Any) -> Optional[Any]:
        return None

    def untracked(self, func: Any, out: Any) -> Tuple[Any, ...]:
        return ()

    def after(self, func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], rec: Any) -> None:
        self.held.clear()

    def _scratch(self, steps: list, rec: Any) -> None:
        """Allocations (a size) and frees (``-i``: the i-th allocation, from
        1) in the kernel's order, all freed at the end."""
        made: list = []
        for step in steps:
            if step > 0:
                made.append(self._workspace(step, rec, "temporary", keep=False))
            else:
                made[-step - 1] = None
        while made:  # the last made is freed first, as C++ destroys locals
            made.pop()

    def _workspace(self, size: int, rec: Any, category: str = "workspace", keep: bool = True) -> Any:
        import torch

        t = torch.empty(size, dtype=torch.uint8, device="meta")
        # A workspace kept for good is made once, compiled code or not.
        rec.track(t, category, force=keep)
        if keep:
            self.keep.append(t)
        return t


def op_name(func: Any) -> str:
    """An ATen operator's name without its overload (``aten.mm.default`` → ``mm``)."""
    return str(getattr(func, "__name__", "")).split(".")[0]

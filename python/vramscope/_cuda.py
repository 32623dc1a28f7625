"""Recording on CUDA and Intel XPU: PyTorch's allocator history and, on
CUDA, its out-of-memory observer, as the recorder (``vramscope.record``)
drives them. ``torch.xpu.memory`` has the same history functions as
``torch.cuda.memory`` (PyTorch >= 2.9)."""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict

__all__ = ["CudaRecorder", "attach_oom_observer"]


class CudaRecorder:
    """A caching allocator's history (``_record_memory_history``) of
    ``torch.cuda`` or, with ``device="xpu"``, ``torch.xpu``."""

    def __init__(self, max_entries: int, stacks: str, device: str = "cuda") -> None:
        self.max_entries, self.stacks = max_entries, stacks
        self.device_type = device
        self._labelled = False

    def _module(self) -> Any:
        import torch

        return getattr(torch, self.device_type)

    def start(self) -> None:
        self._module().memory._record_memory_history(
            enabled="all",
            context=None if self.stacks == "none" else "all",
            stacks="python" if self.stacks == "none" else self.stacks,
            max_entries=self.max_entries,
        )

    def snapshot(self) -> Dict[str, Any]:
        return self._module().memory._snapshot()

    def set_label(self, label: str) -> None:
        """Stamp ``label`` on the allocations that follow (``user_metadata``)."""
        memory = self._module().memory
        setter = getattr(memory, "_set_memory_metadata", None)  # PyTorch >= 2.10
        supported = getattr(memory, "_memory_metadata_supported", lambda: True)
        if setter is None or not (label or self._labelled):
            return
        try:
            if supported():
                setter(label)
                self._labelled = bool(label)
        except Exception:  # noqa: BLE001 - labels are a nicety, recording goes on
            pass

    def device(self) -> int:
        mod = self._module()
        return mod.current_device() if mod.is_initialized() else 0

    def stop(self) -> None:
        self.set_label("")
        self._module().memory._record_memory_history(enabled=None)


# PyTorch can attach an OOM observer but not detach one: it is attached once
# per process and does nothing while no recording is active.
_observer = {"attached": False, "queued": False}


def attach_oom_observer(fn: Callable[[int, int, int, int], None]) -> None:
    """Attach ``fn`` as the CUDA allocator's OOM observer, once.

    Attaching before CUDA is initialised crashes, so until then the call is
    queued to run when PyTorch initialises CUDA (``torch.cuda._lazy_call``).
    """
    import torch

    if _observer["attached"]:
        return

    def attach() -> None:
        if _observer["attached"]:
            return
        try:
            torch._C._cuda_attach_out_of_memory_observer(fn)
            _observer["attached"] = True
        except Exception as err:  # noqa: BLE001 - never fail CUDA initialisation over this
            print(f"vramscope: no snapshot at out-of-memory errors: {err}", file=sys.stderr)

    if torch.cuda.is_initialized():
        attach()
    elif not _observer["queued"] and hasattr(torch.cuda, "_lazy_call"):
        # Queued calls run inside the initialisation, after the CUDA context exists.
        torch.cuda._lazy_call(attach)
        _observer["queued"] = True

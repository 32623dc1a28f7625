"""Which recorder ``record(backend=...)`` runs, and the name each one
leaves in the snapshot (``vramscope.recorder``)."""

from __future__ import annotations

from typing import Optional

# The snapshot's ``vramscope.recorder`` for each backend.
RECORDER_NAMES = {
    "cuda": "cuda-allocator-history",
    "xpu": "xpu-allocator-history",
    "allocator": "cpu-allocator",
    "dispatch": "dispatch",
    "profiler": "cpu-profiler",
}


def choose_backend(backend: str, device: Optional[str] = None) -> str:
    """The backend ``record(backend=...)`` runs: ``auto`` is the allocator
    history of CUDA or XPU where present, else on the CPU the allocator
    hooks where they install, else the dispatcher."""
    import torch

    def has_history(name: str) -> bool:
        mod = getattr(torch, name, None)
        try:
            return bool(mod is not None and mod.is_available() and hasattr(mod.memory, "_record_memory_history"))
        except Exception:  # noqa: BLE001 - a broken device module is an absent one
            return False

    if backend == "auto":
        for name in ("cuda", "xpu"):
            if has_history(name):
                return name
        from vramscope._recording.recorders.dispatch import pick_device

        if device in (None, "cpu") and pick_device() == "cpu":
            from vramscope._recording.recorders.cpu_allocator import available

            if available() is None:
                return "allocator"
        return "dispatch"
    if backend == "allocator":
        from vramscope._recording.recorders.cpu_allocator import available

        why = available()
        if why is not None:
            raise RuntimeError(f"backend='allocator': {why}; use backend='dispatch'")
    if backend in ("cuda", "xpu") and not has_history(backend):
        raise RuntimeError(f"backend={backend!r}: this PyTorch has no {backend} device with an allocator history; use backend='dispatch'")
    return backend

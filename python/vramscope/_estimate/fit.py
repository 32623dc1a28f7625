"""Will it fit, and the largest batch that does: an estimate held against a GPU.

The verdict itself is the allocator model's (``Snapshot.fit``, Rust
``vramscope_simulate::fit``): the estimated trace replayed without a limit,
its peak reserved against the GPU's total less what the process holds
outside the caching allocator, "too close to call" within the estimate's
1% error. Here: which GPU, and the search over batch sizes, which needs
the model traced again at each size (shapes only: about a second each).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

Gpu = Union[str, int, None]


def outside_from(outside: Any) -> Tuple[Optional[int], Optional[str]]:
    """Memory outside the caching allocator, and where the figure comes
    from: bytes (an int or ``"900MiB"``) as given, or a recording of the
    program on a GPU (a path or a `Snapshot`) whose device ledger measured
    what the program held outside PyTorch (NVML: the CUDA context, NCCL's
    buffers, other allocators). A recording that did not measure it is an
    error that says why, never a guess."""
    import os

    from vramscope import Snapshot, _size, load

    if outside is None or isinstance(outside, int):
        return outside, None
    if isinstance(outside, (str, os.PathLike)) and not os.path.isfile(os.fspath(outside)):
        if isinstance(outside, str):
            return _size(outside), None
        raise FileNotFoundError(f"outside={os.fspath(outside)!r}: no such recording")
    snap = outside if isinstance(outside, Snapshot) else load(outside)
    name = os.path.basename(snap.path) or "the recording"
    value = snap._n.measured_outside(None)
    if value is None:
        raise ValueError(
            f"outside={name!r}: the recording did not measure this program's memory outside PyTorch "
            "(recorded without nvidia-ml-py, not on a GPU, or NVML could not see the process; "
            "`vramscope summary` shows its device ledger and says which): give it in bytes instead"
        )
    return int(value), f"as this program held it when {name} was recorded (NVML)"


def _fit(est: Any, total: int, settings: Optional[str], outside: Any) -> Dict[str, Any]:
    return est.snapshot.fit(total, outside=outside, settings=settings)


def attach_fit(est: Any, gpu: Gpu, settings: Optional[str], outside: Any) -> None:
    """``est.peak_reserved_bytes`` always; ``est.fit`` when ``gpu`` says
    how much memory there is."""
    from vramscope._estimate.cuda import gpu_memory

    total, source = gpu_memory(gpu)
    f = _fit(est, total or 0, settings, outside)
    est.peak_reserved_bytes = int(f["peak_reserved"])
    if total is not None:
        f["total_from"] = source
        f["gpu"] = gpu
        est.fit = f


def _resized(tensors: Sequence[Any], dim: int, batch: int) -> Tuple[Any, ...]:
    """``tensors`` as meta tensors whose ``dim`` is ``batch`` long (the
    trace reads only shapes and dtypes). Anything else is kept."""
    import torch

    out = []
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.dim() > dim:
            shape = list(t.shape)
            shape[dim] = batch
            t = torch.empty(shape, dtype=t.dtype, device="meta")
        out.append(t)
    return tuple(out)


def search_max_batch(
    est: Any,
    trace: Callable[[Sequence[Any], Sequence[Any], Any], Any],
    inputs: Sequence[Any],
    targets: Sequence[Any],
    dim: int,
    gpu: Gpu,
    settings: Optional[str],
    outside: Any,
) -> None:
    """Set ``est.max_batch``: the largest batch whose verdict is "fits"
    (``batch``) and the largest whose estimated peak reserved stays under
    the usable memory at all (``limit``: the batches between the two are
    within the estimate's error of the limit). Peak reserved grows about
    linearly with the batch, so the search starts where the line through
    two traces meets the limit and bisects from there; every batch tried is
    kept in ``tried``."""
    import torch

    from vramscope._estimate.cuda import gpu_memory

    total, source = gpu_memory(gpu)
    if total is None:
        raise ValueError(f"max_batch_for={gpu!r}: {source}")
    sized = [t for t in (*inputs, *targets) if isinstance(t, torch.Tensor) and t.dim() > dim]
    if not sized:
        raise ValueError(f"max_batch_for: no input or target has a dimension {dim} to resize (batch_dim={dim})")
    b0 = int(sized[0].shape[dim])
    started = time.perf_counter()
    tried: Dict[int, Dict[str, Any]] = {}

    def at(batch: int) -> Dict[str, Any]:
        if batch not in tried:
            e = trace(_resized(inputs, dim, batch), _resized(targets, dim, batch), None)
            f = _fit(e, total, settings, outside)
            f["peak_allocated"] = e.peak_bytes
            tried[batch] = f
        return tried[batch]

    def largest(ok: Callable[[Dict[str, Any]], bool], band: float, lo: int) -> int:
        """The largest batch for which ``ok`` holds, given ``ok(at(lo))``:
        up from ``lo`` to where the line through the two largest batches
        tried meets the margin ``ok`` needs (``band`` of the usable
        memory), then bisection."""
        hi: Optional[int] = None
        while hi is None:
            (b1, f1), (b2, f2) = sorted(tried.items())[-2:]
            slope = (f2["peak_reserved"] - f1["peak_reserved"]) / (b2 - b1)
            need = at(lo)["margin"] - band * at(lo)["usable"]
            guess = lo + (max(1, int(need / slope)) if slope > 0 else lo)
            if ok(at(guess)):
                lo = guess
            else:
                hi = guess
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(at(mid)):
                lo = mid
            else:
                hi = mid
        return lo

    def fits_at_all(f: Dict[str, Any]) -> bool:
        return f["margin"] >= 0

    def fits(f: Dict[str, Any]) -> bool:
        return f["verdict"] == "fits"

    start = b0
    while start > 1 and not fits(at(start)):
        start //= 2
    if not fits(at(start)):
        batch, limit = 0, (1 if fits_at_all(at(1)) else 0)
    else:
        at(start * 2 if start * 2 not in tried else start + 1)  # a second point for the line
        limit = largest(fits_at_all, 0.0, start)
        batch = largest(fits, float(at(start)["band"]), start)
    best = tried.get(batch) or {}
    est.max_batch = {
        "batch": batch,
        "limit": limit,
        "peak_reserved": best.get("peak_reserved"),
        "gpu": gpu,
        "total": total,
        "total_from": source,
        "usable": at(max(batch, 1))["usable"],
        "settings": settings or "",
        "seconds": round(time.perf_counter() - started, 2),
        "tried": [{"batch": b, "peak_reserved": f["peak_reserved"], "margin": f["margin"], "verdict": f["verdict"]} for b, f in sorted(tried.items())],
        "sentence": _sentence(batch, limit, best, total, source, gpu),
    }


def _sentence(batch: int, limit: int, best: Dict[str, Any], total: int, source: str, gpu: Gpu) -> str:
    from vramscope import _native

    gib = _native.format_bytes
    name = gpu if isinstance(gpu, str) else f"a GPU of {gib(total)}"
    if batch == 0:
        return f"no batch fits {name} with room to spare: even batch 1 is within the estimate's error of the limit or over it"
    s = f"largest batch that fits {name}: {batch} (peak reserved {gib(int(best['peak_reserved']))} of {gib(int(best['usable']))} usable)"
    if limit > batch:
        s += f"; {batch + 1} to {limit} come within the estimate's {best['band']:.0%} error of the limit: too close to call"
    return s + f"; total memory {source}"


__all__: List[str] = ["attach_fit", "search_max_batch"]

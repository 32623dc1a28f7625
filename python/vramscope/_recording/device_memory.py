"""The device's memory beyond PyTorch's caching allocator, measured at a
dump: what NVML (the driver's management library, what ``nvidia-smi``
shows) says this process and the others use, and PyTorch's pinned host
memory. Written under the snapshot's ``vramscope.device`` (``nvml``,
``host_pinned``: docs/recorder-format.md), where the device ledger of
``vramscope summary`` reads them.

NVML is optional (``pip install nvidia-ml-py``): without it the ledger
still adds up (``mem_get_info`` gives the total and the free memory) but
cannot tell this process's memory outside PyTorch (the CUDA context,
NCCL's buffers, other allocators) from other processes'. Every failure is
an answer, never an exception: the ``missing`` key says what is not known
and why.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Dict, Optional

# What to install when NVML's bindings are missing.
NVML_PACKAGE = "nvidia-ml-py"


def nvml_usage(uuid: Optional[str], pid: Optional[int] = None) -> Dict[str, Any]:
    """NVML's figures for the device with ``uuid`` (``torch.cuda``'s
    ``get_device_properties(i).uuid``): ``device_used``, ``device_total``,
    ``processes`` and ``listed_used`` (the compute processes NVML lists and
    their memory), ``process_used`` (this process's, when listed) and
    ``missing`` (why a figure is absent)."""
    try:
        # The `pynvml` wrapper package (not nvidia-ml-py) warns on import
        # that it is deprecated: not the program's business.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pynvml  # nvidia-ml-py
    except ImportError:
        return {"missing": f"{NVML_PACKAGE} is not installed (pip install {NVML_PACKAGE})"}
    pid = os.getpid() if pid is None else pid
    try:
        pynvml.nvmlInit()
    except Exception as err:  # noqa: BLE001 - no driver, no permission: an answer
        return {"missing": f"NVML did not start ({err})"}
    try:
        handle = _handle(pynvml, uuid)
        if handle is None:
            return {"missing": f"NVML has no device with this device's UUID ({uuid})"}
        out: Dict[str, Any] = {}
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        out["device_used"], out["device_total"] = int(mem.used), int(mem.total)
        procs = list(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
        out["processes"] = len(procs)
        # NVML gives None (NVML_VALUE_NOT_AVAILABLE) where it cannot count a
        # process's memory (some containers, MIG without privileges).
        counted = [int(p.usedGpuMemory) for p in procs if isinstance(getattr(p, "usedGpuMemory", None), int)]
        out["listed_used"] = sum(counted)
        mine = [p for p in procs if getattr(p, "pid", None) == pid]
        used = getattr(mine[0], "usedGpuMemory", None) if mine else None
        if isinstance(used, int):
            out["process_used"] = int(used)
        elif mine:
            out["missing"] = "NVML lists this process but gives no figure for its memory"
        else:
            out["missing"] = (
                f"NVML lists {len(procs)} process(es) on the device, none with this process's PID {pid} "
                "(a container's PID namespace hides it from NVML)"
            )
        return out
    except Exception as err:  # noqa: BLE001
        return {"missing": f"NVML failed ({err})"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _handle(pynvml: Any, uuid: Optional[str]) -> Any:
    """NVML's handle of the device PyTorch calls ``uuid``; NVML spells
    UUIDs ``GPU-…`` (``MIG-…`` for a MIG instance)."""
    if not uuid:
        return None
    text = str(uuid)
    names = [text] if text.startswith(("GPU-", "MIG-")) else [f"GPU-{text}", f"MIG-{text}"]
    for name in names:
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(name)
        except Exception:  # noqa: BLE001 - not this spelling
            continue
    return None


def host_pinned(mod: Any) -> Optional[Dict[str, int]]:
    """PyTorch's pinned host memory (``host_memory_stats()``, PyTorch 2.6
    and later): ``allocated_bytes`` (held, in use or cached) and
    ``active_bytes`` (in use); ``None`` where PyTorch does not say."""
    stats = getattr(getattr(mod, "memory", None), "host_memory_stats", None)
    if stats is None:
        return None
    try:
        s = stats()
        return {
            "allocated_bytes": int(s.get("allocated_bytes.current", 0)),
            "active_bytes": int(s.get("active_bytes.current", 0)),
        }
    except Exception:  # noqa: BLE001
        return None

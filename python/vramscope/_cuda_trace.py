"""What the CUDA build would run, traced on the meta device.

On ``meta`` PyTorch takes paths that CUDA does not:

* ``scaled_dot_product_attention`` asks ``_fused_sdp_choice_stub`` which
  kernel to run (aten/src/ATen/native/transformers/attention.cpp). That is
  a per-device stub, not an operator a dispatch mode sees, and meta has
  none, so meta gets the math backend, which materialises the B·H·L·S
  scores. ``F.scaled_dot_product_attention`` is replaced during the trace
  by the kernel CUDA would run. On CUDA, ``select_sdp_backend``
  (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp) takes flash
  attention, then memory-efficient attention, then math, each where its
  checks pass and its flag is on. The flags are what ``sdpa_kernel(...)``
  sets in the user's code, so that choice is respected. The chosen kernels
  have meta implementations (torch/_meta_registrations.py:
  ``meta__scaled_dot_product_flash_attention``,
  ``meta__scaled_dot_product_efficient_attention`` and their backwards),
  which give the outputs and the ``logsumexp`` they keep for backward.
* Optimizers take their for-loop path on meta. On CUDA,
  ``_default_to_fused_or_foreach`` picks ``foreach`` when every parameter is
  a CUDA tensor, so whole lists of temporaries exist at once. ``fused=True``
  is refused on meta: its device check is widened to meta for the trace
  (``meta__fused_adam_`` exists).
* cuBLAS gives each thread a workspace the first time it runs a matmul
  (``getCurrentCUDABlasHandle`` → ``setWorkspaceForHandle``): 32 MiB on
  compute capability 9.0 and above, 8,519,680 B below, or
  ``CUBLAS_WORKSPACE_CONFIG``. cuBLASLt adds 1 MiB (``CUBLASLT_WORKSPACE_SIZE``).
  None is ever freed. Forward runs on the program's thread and backward on
  autograd's device thread: one workspace each.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Dict, Iterator, Optional, Tuple

# SDPBackend values (torch.nn.attention.SDPBackend).
_MATH, _FLASH, _EFFICIENT = 0, 1, 2

# GPUs by name: compute capability. Enough to pick kernels and workspaces.
GPUS: Dict[str, Tuple[int, int]] = {
    "B200": (10, 0),
    "H200": (9, 0),
    "H100": (9, 0),
    "H800": (9, 0),
    "L40": (8, 9),
    "L4": (8, 9),
    "A100": (8, 0),
    "A800": (8, 0),
    "A10": (8, 6),
    "RTX4090": (8, 9),
    "RTX3090": (8, 6),
    "V100": (7, 0),
    "T4": (7, 5),
}

_MATMULS = ("mm.default", "addmm.default", "bmm.default", "baddbmm.default", "_addmm_activation.default")


def capability_of(gpu: Optional[str]) -> Tuple[int, int]:
    """Compute capability of a GPU named like ``"H100-80GB"``; Hopper's
    (9, 0) when no GPU is named."""
    if gpu is None:
        return (9, 0)
    key = gpu.upper().replace(" ", "").replace("NVIDIA", "")
    for name in sorted(GPUS, key=len, reverse=True):
        if key.startswith(name):
            return GPUS[name]
    raise ValueError(f"gpu={gpu!r}: unknown GPU; expected one of {', '.join(sorted(GPUS))}")


def sdp_choice(args: Tuple[Any, ...], kwargs: Dict[str, Any], capability: Tuple[int, int]) -> int:
    """The backend ``select_sdp_backend`` would take for these inputs on a
    GPU of ``capability``: flash, then memory-efficient, then math, each
    where its flag is on and its checks pass (dtype, head size, mask)."""
    import torch

    q = args[0]
    mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
    head = int(q.shape[-1])
    half = q.dtype in (torch.float16, torch.bfloat16)
    cuda = torch.backends.cuda
    if cuda.flash_sdp_enabled() and capability >= (8, 0) and half and mask is None and head <= 256 and head % 8 == 0:
        return _FLASH
    if cuda.mem_efficient_sdp_enabled() and capability >= (5, 0) and q.dtype in (torch.float16, torch.bfloat16, torch.float32):
        if head % (8 if half else 4) == 0:
            return _EFFICIENT
    return _MATH


def workspace_sizes(capability: Tuple[int, int]) -> Tuple[int, int]:
    """(cuBLAS, cuBLASLt) workspace bytes, as CublasHandlePool.cpp sizes
    them (``CUBLAS_WORKSPACE_CONFIG``'s ``:SIZE:COUNT`` pairs in KiB)."""
    cublas = (32 << 20) if capability >= (9, 0) else 8_519_680
    conf = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    parts = conf.split(":")
    pairs = [(parts[i], parts[i + 1]) for i in range(1, len(parts) - 1, 2)]
    total = sum(int(s) * 1024 * int(c) for s, c in pairs if s.isdigit() and c.isdigit())
    if total > 0:
        cublas = total
    lt_kib = os.environ.get("CUBLASLT_WORKSPACE_SIZE", "")
    lt = int(lt_kib) * 1024 if lt_kib.isdigit() else 1 << 20
    return cublas, lt


class Cuda:
    """The CUDA-only behaviour a trace adds: the SDPA choice, and a
    workspace the first time each phase's thread runs a matmul."""

    def __init__(self, capability: Tuple[int, int]) -> None:
        self.capability = capability
        self.cublas, self.lt = workspace_sizes(capability)
        self.threads_seen: set = set()
        self.lt_made = False
        self.keep: list = []  # the workspaces, alive to the end
        self.sdp: Dict[int, int] = {}  # backend -> calls

    def before(self, func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], rec: Any) -> Optional[Any]:
        """Run before ``func`` in the dispatch mode: a result to return
        instead of calling it, or ``None``."""
        name = str(getattr(func, "_overloadname", ""))
        op = f"{getattr(func, '__name__', '').split('.')[0]}.{name}"
        if op in _MATMULS:
            thread = "backward" if rec.phase == "backward" else "forward"
            if thread not in self.threads_seen:
                self.threads_seen.add(thread)
                self._workspace(self.cublas, rec)
            if not self.lt_made and op.startswith("addmm"):
                self.lt_made = True
                self._workspace(self.lt, rec)
        return None

    def _workspace(self, size: int, rec: Any) -> None:
        import torch

        t = torch.empty(size, dtype=torch.uint8, device="meta")
        rec.track(t, "workspace")
        self.keep.append(t)


@contextlib.contextmanager
def sdpa_as_on_cuda(cuda: Cuda) -> Iterator[None]:
    """``F.scaled_dot_product_attention`` running the kernel CUDA would
    choose: flash or memory-efficient attention through their ATen ops
    (whose autograd formulas give their backwards), math otherwise."""
    import torch
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention
    aten = torch.ops.aten

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        choice = _MATH
        if not enable_gqa and query.dim() == 4 and key.shape[-2] == value.shape[-2]:
            choice = sdp_choice((query, key, value, attn_mask), {}, cuda.capability)
        cuda.sdp[choice] = cuda.sdp.get(choice, 0) + 1
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        if choice == _FLASH:
            return aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, grad, scale=scale)[0]
        if choice == _EFFICIENT:
            return aten._scaled_dot_product_efficient_attention(
                query, key, value, attn_mask, grad, dropout_p, is_causal, scale=scale
            )[0]
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)

    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


@contextlib.contextmanager
def fused_on_meta() -> Iterator[None]:
    """Let ``fused=True`` optimizers take meta parameters while tracing."""
    mods = [m for n, m in list(sys.modules.items()) if n.startswith(("torch.optim", "torch.utils._foreach_utils"))]
    found = [(m, m._get_fused_kernels_supported_devices) for m in mods if hasattr(m, "_get_fused_kernels_supported_devices")]
    for m, orig in found:
        setattr(m, "_get_fused_kernels_supported_devices", (lambda o=orig: list(o()) + ["meta"]))
    try:
        yield
    finally:
        for m, orig in found:
            setattr(m, "_get_fused_kernels_supported_devices", orig)


def cuda_path_options(cls: type, options: Dict[str, Any]) -> Dict[str, Any]:
    """``foreach=True`` added to an optimizer's options where CUDA would
    default to it: the class takes ``foreach`` and neither ``foreach`` nor
    ``fused`` was given."""
    import inspect

    if "foreach" in options or options.get("fused"):
        return options
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return options
    return {**options, "foreach": True} if "foreach" in params else options

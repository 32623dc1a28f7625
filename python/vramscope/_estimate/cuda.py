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

from vramscope._estimate.kernel_scratch import Kernels, op_name
from vramscope._estimate.cuda_kernels import ATTENTION_BACKWARDS, efficient_backward_scratch, flash_backward_scratch, reduce_scratch, threads_per_sm

# SDPBackend values (torch.nn.attention.SDPBackend).
_MATH, _FLASH, _EFFICIENT = 0, 1, 2

# Backward kernels that copy a gradient that is not contiguous.
_CONTIGUOUS_GRAD = ("native_layer_norm_backward",)

_op = op_name


_MATMULS = ("mm.default", "addmm.default", "bmm.default", "baddbmm.default", "_addmm_activation.default")


def _gpu(gpu: Any) -> Dict[str, Any]:
    """The row of the one table of GPUs (Rust, ``vramscope_gpus``) for a
    name: ``torch.cuda.get_device_name()``'s or a short one. An unknown
    name is a ``ValueError`` that lists the known ones."""
    from vramscope import _native

    try:
        return _native.gpu(str(gpu))
    except ValueError as e:
        raise ValueError(f"gpu={gpu!r}: {e}") from None


def gpu_memory(gpu: Any) -> Tuple[Optional[int], str]:
    """(total bytes, where that comes from) for ``gpu``: bytes as given,
    or the table's ``total_memory`` for the name. ``(None, why)`` for no
    GPU or a family name ("A100": 40 or 80 GB); an unknown name raises."""
    if gpu is None:
        return None, "no GPU named"
    if isinstance(gpu, int):
        return gpu, "as given"
    row = _gpu(gpu)
    if row["total"] is None:
        return None, row["no_memory"]
    return int(row["total"]), row["total_from"]


# The GPU whose kernels' choices and scratch a CUDA estimate assumes when
# none is named (or only its bytes): the table's H100 SXM.
DEFAULT_GPU = "NVIDIA H100 80GB HBM3"


def sms_of(gpu: Any) -> int:
    """Streaming multiprocessors of a GPU by name (``DEFAULT_GPU``'s when
    no GPU is named, or only its bytes)."""
    if gpu is None or isinstance(gpu, int):
        gpu = DEFAULT_GPU
    return int(_gpu(gpu)["sms"])


def capability_of(gpu: Any) -> Tuple[int, int]:
    """Compute capability of a GPU by name (``DEFAULT_GPU``'s when no GPU
    is named, or only its bytes)."""
    if gpu is None or isinstance(gpu, int):
        gpu = DEFAULT_GPU
    major, minor = _gpu(gpu)["capability"]
    return (int(major), int(minor))


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


RNN_NOTE = (
    "recurrent layers (nn.LSTM, nn.GRU, nn.RNN) on CUDA run cuDNN's RNN kernel, whose reserve space and workspace "
    "are not traced: the trace runs PyTorch's own cells"
)


def workspace_sizes(capability: Tuple[int, int]) -> Tuple[int, int]:
    """(cuBLAS, cuBLASLt) workspace bytes, as CublasHandlePool.cpp sizes
    them (``CUBLAS_WORKSPACE_CONFIG``'s ``:SIZE:COUNT`` pairs in KiB)."""
    from vramscope import _native  # the one place these sizes are written (vramscope_gpus::workspace)

    cublas, lt = _native.workspace_sizes(
        (int(capability[0]), int(capability[1])), os.environ.get("CUBLAS_WORKSPACE_CONFIG"), os.environ.get("CUBLASLT_WORKSPACE_SIZE")
    )
    return int(cublas), int(lt)


class Cuda(Kernels):
    """The CUDA-only behaviour a trace adds: the SDPA choice, and a
    workspace the first time each phase's thread runs a matmul."""

    def __init__(self, capability: Tuple[int, int], sms: int) -> None:
        super().__init__()
        self.capability = capability
        self.sms = sms
        self.cublas, self.lt = workspace_sizes(capability)
        self.threads_seen: set = set()
        self.lt_made = False
        self.sdp: Dict[int, int] = {}  # backend -> calls

    def before(self, func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], rec: Any) -> Optional[Any]:
        """Run before ``func`` in the dispatch mode: a result to return
        instead of calling it, or ``None``."""
        base = _op(func)
        grad = None
        if base in ATTENTION_BACKWARDS and "efficient" in base:
            # The memory-efficient kernel runs on a (B, L, H, K) gradient of
            # the output, copied by ``grad_out.contiguous()`` when it is not
            # laid out so (it is not when the output was transposed back, as
            # nn.MultiheadAttention does). Flash attention needs only the
            # last dimension contiguous.
            grad = args[0].transpose(1, 2) if base.startswith("_scaled") else args[0]
        elif base in _CONTIGUOUS_GRAD and args:
            # ``dY.expect_contiguous()`` in layer_norm_backward_cuda.
            grad = args[0]
        if grad is not None and not grad.is_contiguous():
            # The copy lives through the call.
            self.held.append(self._workspace(grad.numel() * grad.element_size(), rec, "temporary", keep=False))
        return None

    def untracked(self, func: Any, out: Any) -> Tuple[Any, ...]:
        """Outputs that are not device memory on CUDA: the memory-efficient
        kernel's philox seed and offset are CPU tensors when there is no
        dropout (``at::empty({}, at::dtype(at::kLong))``), meta ones here
        (flash attention's are on the device, 8 bytes each)."""
        name = _op(func)
        if name == "_scaled_dot_product_efficient_attention" and isinstance(out, tuple) and len(out) >= 4:
            return (out[2], out[3])
        return ()

    def after(self, func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], rec: Any) -> None:
        """Run after ``func`` made its outputs: the scratch its CUDA kernel
        allocates and frees inside itself, which no meta kernel shows."""
        name = _op(func)
        if name in ("convolution", "convolution_backward"):
            self.note("conv", "convolutions: cuDNN's workspaces (the algorithm is chosen at run time) are not traced")
        if f"{name}.{getattr(func, '_overloadname', '')}" in _MATMULS:
            # The handle's workspace comes when the matmul runs, after its
            # output is allocated (getCurrentCUDABlasHandle → setWorkspaceForHandle).
            thread = "backward" if rec.phase == "backward" else "forward"
            if thread not in self.threads_seen:
                self.threads_seen.add(thread)
                self._workspace(self.cublas, rec)
            if not self.lt_made and name.startswith("addmm"):
                self.lt_made = True
                self._workspace(self.lt, rec)
        if name in ATTENTION_BACKWARDS:
            # The SDPA-level ops take (B, H, L, K); the kernel-level ones (B, L, H, K).
            q = args[1]
            b, h, m, k = (int(q.shape[i]) for i in ((0, 1, 2, 3) if name.startswith("_scaled") else (0, 2, 1, 3)))
            steps = efficient_backward_scratch(b, h, m, k, q.dtype) if "efficient" in name else flash_backward_scratch(b, h, m, k)
            self._scratch(steps, rec)
        elif name in ("sum", "mean") and args and getattr(args[0], "is_floating_point", lambda: False)():
            x = args[0]
            dims = args[1] if len(args) > 1 and args[1] is not None else kwargs.get("dim") or []
            if isinstance(dims, int):
                dims = [dims]
            acc = 8 if x.element_size() == 8 else 4
            steps = reduce_scratch(tuple(x.shape), tuple(x.stride()), list(dims), x.element_size(), acc, self.sms, threads_per_sm(self.capability))
            self._scratch(steps, rec)
        self.held.clear()


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
        ac = cuda.autocast
        low = ac.lower() if ac is not None else None
        if low is not None:
            # scaled_dot_product_attention is on CUDA autocast's lower-precision list.
            query, key, value = (ac.cast_one(t, low) for t in (query, key, value))
        choice = _MATH
        if query.dim() == 4 and key.shape[-2] == value.shape[-2]:
            choice = sdp_choice((query, key, value, attn_mask), {}, cuda.capability)
            if enable_gqa and key.shape[-3] != query.shape[-3] and choice == _EFFICIENT:
                # Grouped-query attention: flash attention takes fewer key/value
                # heads, memory-efficient attention does not
                # (check_batch_size_and_num_heads_dense<false>, sdp_utils.cpp).
                choice = _MATH
        cuda.sdp[choice] = cuda.sdp.get(choice, 0) + 1
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        if choice == _FLASH:
            return aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False, scale=scale)[0]
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
def dropout_as_on_cuda() -> Iterator[None]:
    """``F.dropout`` in training as CUDA runs it: ``at::native::dropout``
    takes the fused ``native_dropout`` kernel for CUDA tensors
    (``is_fused_kernel_acceptable``, aten/src/ATen/native/Dropout.cpp), which
    keeps a bool mask for backward, 1 byte an element. On meta it takes the
    composite path, whose noise tensor is in the input's dtype (4 bytes in
    fp32)."""
    import torch
    import torch.nn.functional as F

    original = F.dropout

    def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        if not (training and 0.0 < p < 1.0 and isinstance(input, torch.Tensor) and input.is_floating_point() and input.numel() > 0):
            return original(input, p, training, inplace)
        out = torch.native_dropout(input, p, True)[0]
        return input.copy_(out) if inplace else out

    F.dropout = dropout
    try:
        yield
    finally:
        F.dropout = original


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

"""oneDNN's memory inside a CPU kernel, measured: 16-bit matrix multiplies,
and the convolutions :class:`vramscope._estimate.cpu.Cpu` does not model.

On the CPU a bfloat16 or float16 ``mm``/``addmm``/``bmm``/``baddbmm`` runs
oneDNN's brgemm matmul, which books a scratchpad for the call from c10's
allocator: per thread, the operands copied into the kernel's blocked
layout (a transposed operand in full), the fp32 accumulators of a 16-bit
result, and the batch descriptors. Its size follows the blocking oneDNN
chooses for the shape, the strides, the thread count and the ISA (AVX-512
bf16, AMX, AVX2 differ), which its heuristics decide in ways no table
here could follow: on the zoo's ViT one backward call of 192×520 by
520×768 (the first operand transposed) books 931,584 B, the same product
with the other operand transposed 845,568 B, and 541,824 B on one thread.
Float32 products (MKL's sgemm) allocate nothing of c10's.

So the estimate for ``device="cpu"`` measures it, on this machine, as the
real run will meet it: once per distinct call (the operator, each
operand's shape, strides and dtype, the thread count), it runs the product
on uninitialised CPU tensors of the same layout and reads, through
vramscope's hooks on c10's CPU allocator (the ones behind
``record(backend="allocator")``), how far the call's allocations rose above
the result it left. The trace then makes that much, after the result,
and frees it. The measurement is skipped, and said in the estimate's
notes, where the hooks cannot be had (not Linux, or a recording is
already under way in this process), and for products too large to run in
a moment (operands over :data:`MAX_BYTES` or :data:`MAX_FLOPS`).

It serves oneDNN's LSTM too where its rules (vramscope._estimate.cpu_rnn)
were not checked on this kind of CPU: a 16-bit LSTM on a CPU with AMX,
whose brgemm kernels book scratchpads of their own (a bfloat16 layer of 64
steps, batch 8, 256 units, one thread: 65,016 B in forward and 122,320 in
backward, where AVX-512's kernels book 55,736 and 62,456).

The same measurement serves the convolutions the model of oneDNN's
reorders does not cover (``Cpu._conv_forward``/``_conv_backward``: float32
NCHW on AVX-512): 16-bit ones, channels-last inputs, grouped or dilated
kernels, a strided convolution's input gradient, other ISAs. Their blocked
copies and scratchpads come and go inside the call, so how far the call
rose above what it left is all the trace needs: made after the results,
it peaks where the call did.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Optional, Tuple

#: Operands and result larger than this (bytes, together) are not run.
MAX_BYTES = 256 << 20
#: Nor products of more multiply-adds than this (about a second on two cores).
MAX_FLOPS = 8e9

MATMULS = ("mm", "addmm", "bmm", "baddbmm")
CONVOLUTIONS = ("convolution", "convolution_backward")
RNN_LAYERS = ("mkldnn_rnn_layer", "mkldnn_rnn_layer_backward")

# (operator, operands' (shape, stride, dtype) or scalars, threads) -> bytes
_measured: Dict[Tuple[Any, ...], int] = {}


class NotMeasured(Exception):
    """Why a call's scratch was not measured (said in the notes)."""


def _layout(a: Any) -> Any:
    import torch

    if isinstance(a, torch.Tensor):
        return (tuple(a.shape), tuple(a.stride()), str(a.dtype))
    if isinstance(a, (int, float, bool)) or a is None:
        return a
    return repr(a)


def _storage_bytes(shape: Tuple[int, ...], stride: Tuple[int, ...], itemsize: int) -> int:
    if any(s == 0 for s in shape):
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(shape, stride))) * itemsize


def _size(name: str, args: Tuple[Any, ...], tensors: list) -> Tuple[int, float]:
    """The bytes of the operands and results, and the multiply-adds."""
    held = sum(_storage_bytes(tuple(t.shape), tuple(t.stride()), t.element_size()) for t in tensors)
    if name in CONVOLUTIONS:
        # Forward (input, weight, …) or backward (grad_output, input, weight,
        # …): each output element sums over a kernel's window of the
        # input's channels; backward does that twice over.
        x, w = (args[0], args[1]) if name == "convolution" else (args[1], args[2])
        out = args[0] if name == "convolution_backward" else None
        per_out = w.numel() // max(1, int(w.shape[0]))
        outputs = out.numel() if out is not None else x.numel() // max(1, int(x.shape[1])) * int(w.shape[0])
        passes = 2.0 if out is not None else 1.0
        return 2 * held, passes * outputs * per_out
    if name in RNN_LAYERS:
        # (input, weight_ih, weight_hh, ...): four gates a step, each a
        # product over the input and the hidden state; backward twice over.
        x, w_ih, w_hh = tensors[0], tensors[1], tensors[2]
        steps, batch = int(x.shape[0]), int(x.shape[1])
        passes = 2.0 if name == "mkldnn_rnn_layer_backward" else 1.0
        return held, passes * steps * batch * int(w_ih.shape[0]) * (int(w_ih.shape[1]) + int(w_hh.shape[1]))
    mats = tensors[-2:]  # (mat1, mat2) or (batch1, batch2); addmm's bias first
    a, b = mats[0].shape, mats[1].shape
    rows, inner, cols = int(a[-2]), int(a[-1]), int(b[-1])
    batch = int(a[0]) if name in ("bmm", "baddbmm") else 1
    item = mats[0].element_size()
    return held + batch * rows * cols * item, float(batch) * rows * inner * cols


def scratch(func: Any, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any], grad: bool = False) -> int:
    """The bytes the call allocates above its results, measured (cached per
    layout); raises :class:`NotMeasured` with the reason. ``grad``: run it
    with autograd on (no tensor of it requires grad, so nothing is
    recorded), for kernels that choose by the grad mode (oneDNN's LSTM
    keeps a workspace for backward, and books another scratchpad, only
    then)."""
    import torch

    threads = int(torch.get_num_threads())
    key = (name, tuple(_layout(a) for a in args), tuple(sorted((k, _layout(v)) for k, v in kwargs.items())), threads, grad)
    if key in _measured:
        return _measured[key]
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if len(tensors) < 2:
        raise NotMeasured("an operand is not a tensor")
    held, flops = _size(name, args, tensors)
    if held > MAX_BYTES or flops > MAX_FLOPS:
        raise NotMeasured("too large to run in a moment")
    native = _hooks()
    real = [
        torch.empty_strided(tuple(a.shape), tuple(a.stride()), dtype=a.dtype, device="cpu")
        if isinstance(a, torch.Tensor)
        else a
        for a in args
    ]
    with _outside_the_trace(), torch.set_grad_enabled(grad):
        native.cpu_allocator_start(64)
        try:
            out = func(*real, **kwargs)
            allocated, peak, _window = native.cpu_allocator_totals()
        finally:
            native.cpu_allocator_stop()
        del out
    _measured[key] = int(peak - allocated)
    return _measured[key]


def _hooks() -> Any:
    try:
        from vramscope import _native
    except ImportError as e:
        raise NotMeasured(f"vramscope's native module is missing ({e})") from e
    if _native.cpu_allocator_recording():
        raise NotMeasured("a recording of c10's CPU allocator is under way in this process")
    try:
        _native.cpu_allocator_install()
    except OSError as e:
        raise NotMeasured(f"c10's CPU allocator cannot be hooked here ({e})") from e
    return _native


@contextlib.contextmanager
def _outside_the_trace() -> Any:
    """The product run as the real program's kernel: no dispatch or
    function mode of the trace's, no autocast, no autograd."""
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes(), torch._C.DisableTorchFunction(), torch.no_grad(), torch.autocast("cpu", enabled=False):
        yield


def is_16bit_matmul(name: str, args: Tuple[Any, ...]) -> Optional[Any]:
    """The dtype of a 16-bit matrix multiply's operands, or None."""
    import torch

    if name not in MATMULS or len(args) < 2:
        return None
    mat = args[-1] if name in ("mm", "bmm") else args[2] if len(args) > 2 else None
    dtype = getattr(mat, "dtype", None)
    return dtype if dtype in (torch.bfloat16, torch.float16) else None

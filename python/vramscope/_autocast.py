"""``torch.autocast(device_type="cuda")`` for a trace on the meta device.

Autocast acts in the dispatcher, at the ``AutocastCUDA`` key, which only
CUDA tensors carry: on meta tensors it does nothing, and a model traced
under it would keep every activation in fp32. Here the same casts are made
one level up, in a ``TorchFunctionMode``, before each function runs, by the
lists CUDA's autocast uses (aten/src/ATen/autocast_mode.cpp,
``TORCH_LIBRARY_IMPL(aten, AutocastCUDA, m)``):

* lower precision (``KERNEL_CUDA(..., lower_precision_fp)``): matmuls,
  ``linear``, convolutions, ``prelu``, ``scaled_dot_product_attention``:
  floating inputs cast to the autocast dtype;
* fp32 (``fp32`` and ``fp32_set_opt_dtype``): norms, softmax and
  log-softmax, losses, ``exp``/``log``/``pow``, ``sum``/``cumsum``: half
  inputs cast up to fp32;
* everything else runs in the dtype it is given.

As ``cached_cast`` does, a parameter (a leaf that requires grad) is cast
once per autocast region and the copy kept until the region ends, which is
what a real run holds: one low-precision copy of each weight through the
forward.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, Optional

_LOWER = frozenset(
    """linear matmul mm bmm baddbmm addmm addmv addr addbmm einsum chain_matmul
    conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d
    convolution _convolution prelu scaled_dot_product_attention __matmul__ __rmatmul__
    lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell""".split()
)

_FP32 = frozenset(
    """layer_norm group_norm batch_norm instance_norm rms_norm softmax log_softmax cross_entropy nll_loss
    mse_loss l1_loss smooth_l1_loss huber_loss kl_div binary_cross_entropy_with_logits
    poisson_nll_loss cosine_embedding_loss hinge_embedding_loss margin_ranking_loss
    multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss
    exp expm1 log log10 log2 log1p reciprocal rsqrt pow softplus acos asin cosh sinh tan erfinv
    cumsum cumprod prod logsumexp norm dist cdist pdist renorm cosine_similarity""".split()
)


class Autocast:
    """A ``TorchFunctionMode`` that casts like CUDA's autocast to ``dtype``.
    ``region()`` clears the weight cache, as leaving ``torch.autocast`` does."""

    def __init__(self, dtype: Any) -> None:
        from torch.overrides import TorchFunctionMode

        self.dtype = dtype
        self.cache: Dict[int, Any] = {}
        self.enabled = False
        outer = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                return outer.policy(getattr(func, "__name__", ""), args, kwargs or {}, func)

        self.mode = Mode()

    def cast_one(self, t: Any, dtype: Any) -> Any:
        import torch

        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dtype == dtype:
            return t
        if dtype == torch.float32 and t.dtype not in (torch.float16, torch.bfloat16):
            return t
        if t.is_leaf and t.requires_grad and dtype == self.dtype:
            key = id(t)
            hit = self.cache.get(key)
            if hit is None or hit[0] is not t:
                hit = (t, t.to(dtype))
                self.cache[key] = hit
            return hit[1]
        return t.to(dtype)

    def _cast(self, args: Any, kwargs: Dict[str, Any], dtype: Any) -> Any:
        # Last argument first: the autocast wrappers cast their arguments in
        # a C++ call's argument list, which GCC evaluates right to left
        # (a linear's bias, then its weight, then its input, as the GPU's
        # allocator history shows).
        kw = {k: self._deep(v, dtype) for k, v in reversed(list(kwargs.items()))}
        cast = [self._deep(a, dtype) for a in reversed(args)]
        return tuple(reversed(cast)), dict(reversed(list(kw.items())))

    def _deep(self, v: Any, dtype: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return type(v)(self._deep(x, dtype) for x in v)
        return self.cast_one(v, dtype)

    def policy(self, name: str, args: Any, kwargs: Dict[str, Any], call: Any) -> Any:
        """Call ``call`` as autocast would for the function ``name``."""
        import torch

        given = kwargs.get("dtype") is not None or (name in ("softmax", "log_softmax") and len(args) > 2 and args[2] is not None)
        if self.enabled and not given:
            # fp32_set_opt_dtype leaves a dtype the caller gave.
            special = _to_float(name, args, kwargs)
            if special is not None:
                return special
            if name in _LOWER:
                args, kwargs = self._cast(args, kwargs, self.dtype)
            elif name in _FP32:
                args, kwargs = self._cast(args, kwargs, torch.float32)
        return call(*args, **kwargs)

    def patched(self) -> Any:
        """The functions of ``torch.nn.functional`` and ``torch`` on the
        lists, wrapped while tracing: a Python function such as
        ``F.multi_head_attention_forward`` runs its body with the function
        mode switched off, and calls ``linear``, ``softmax``, ``torch.bmm``
        through these names."""
        import contextlib

        import torch
        import torch.nn.functional as F

        outer = self

        @contextlib.contextmanager
        def swap() -> Any:
            saved = []
            for mod in (F, torch):
                for name in sorted(_LOWER | _FP32):
                    orig = mod.__dict__.get(name)
                    if orig is None or not callable(orig) or name == "scaled_dot_product_attention":
                        continue

                    def wrapper(*args: Any, __orig: Any = orig, __name: str = name, **kwargs: Any) -> Any:
                        return outer.policy(__name, args, kwargs, __orig)

                    saved.append((mod, name, orig))
                    setattr(mod, name, wrapper)
            try:
                yield
            finally:
                for mod, name, orig in reversed(saved):
                    setattr(mod, name, orig)

        return swap()

    def region(self, on: bool) -> None:
        """Enter (``True``) or leave the autocast region."""
        self.enabled = on
        if not on:
            self.cache.clear()


def _half(t: Any) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16)


def _to_float(name: str, args: Any, kwargs: Dict[str, Any]) -> Any:
    """softmax, log-softmax and cross-entropy on a half input, as CUDA runs
    them under autocast (``None`` where the lists' policy applies as is):

    * ``F.cross_entropy`` is ``cross_entropy_loss``, which calls
      ``log_softmax(input, dim, input.scalar_type())``: the dtype is given,
      so autocast's ``fp32_set_opt_dtype`` leaves it, and the log-softmax
      runs in the half type; ``nll_loss`` (fp32 list) then casts it up to
      fp32 (the H200's history: a bf16 log-softmax, then its fp32 copy).
    * ``softmax``/``log_softmax`` of an fp16 input get ``dtype=float``,
      which CUDA runs as ``_softmax(x, dim, half_to_float=True)``
      (aten/src/ATen/native/SoftMax.cpp): an fp32 output straight from the
      half input. A bfloat16 input is first copied to fp32 (that path is
      for ``Half`` only): the fp32 list's cast, as for any other op."""
    import torch

    if name not in ("softmax", "log_softmax", "cross_entropy") or not args or not _half(args[0]):
        return None
    x = args[0]
    if name == "cross_entropy":
        import torch.nn.functional as F

        if float(kwargs.get("label_smoothing", 0.0) or 0.0) != 0.0 or len(args) > 2:
            return None
        logp = torch.log_softmax(x, 1 if x.dim() > 1 else 0, dtype=x.dtype)
        rest = {k: v for k, v in kwargs.items() if k in ("weight", "ignore_index", "reduction")}
        return F.nll_loss(logp.float(), args[1], **rest)
    if x.dtype != torch.float16:
        return None
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if dim is None or kwargs.get("dtype") is not None:
        return None
    return _softmax_to_float().apply(x, int(dim), name == "log_softmax")


@functools.lru_cache(maxsize=None)
def _softmax_to_float() -> Any:
    """The autograd function (made once: torch is imported lazily)."""
    import torch

    class SoftmaxToFloat(torch.autograd.Function):
        """The memory of ``_softmax``/``_log_softmax`` with
        ``half_to_float``: an fp32 output, kept for backward; a gradient in
        the input's dtype. Only shapes matter on meta."""

        @staticmethod
        def forward(ctx: Any, x: Any, dim: int, log: bool) -> Any:
            out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
            ctx.save_for_backward(out)
            ctx.in_dtype = x.dtype
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            (out,) = ctx.saved_tensors
            return torch.empty(out.shape, dtype=ctx.in_dtype, device=out.device), None, None

    return SoftmaxToFloat


def autocast_dtype(value: Any) -> Optional[Any]:
    """``torch.bfloat16`` / ``torch.float16`` from a dtype or its name; None for None."""
    import torch

    if value is None or value is False:
        return None
    if value is True:
        return torch.bfloat16
    if isinstance(value, str):
        value = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16, "half": torch.float16}.get(value.lower(), value)
    if value not in (torch.bfloat16, torch.float16):
        raise ValueError(f"autocast={value!r}: expected torch.bfloat16 or torch.float16 (or True for bfloat16)")
    return value

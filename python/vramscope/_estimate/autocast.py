"""``torch.autocast`` for a trace on the meta device, as the program enters it.

Autocast acts in the dispatcher, at the ``AutocastCUDA`` and ``AutocastCPU``
keys, which only CUDA and CPU tensors carry: on meta tensors it does
nothing, and a model traced under it would keep every activation in fp32.
Here the same casts are made one level up, in a ``TorchFunctionMode``,
before each function runs.

*When* to cast is PyTorch's own state: ``torch.autocast(...)`` sets it
wherever it is entered (the model's ``forward``, the training loop, a
decorator, nested, ``enabled=False`` inside), and the mode reads
``torch.is_autocast_enabled(device)`` and ``torch.get_autocast_dtype(device)``
at each call. ``estimate(autocast=...)`` enters ``torch.autocast`` itself.
The device is the trace's: an estimate for ``"cuda"`` follows
``torch.autocast("cuda")`` regions, one for ``"cpu"`` the CPU's, as a real
run on that device would. :func:`entered_as_on` lets ``torch.autocast("cuda")``
turn on without a GPU and reads a ``device_type`` of ``"meta"`` (the traced
tensors' own) as the trace's device.

*How* to cast is each device's lists (aten/src/ATen/autocast_mode.h and
autocast_mode.cpp, PyTorch 2.15), which differ a lot: CUDA runs norms,
softmax, ``exp``/``pow`` and upsampling in fp32 and sums with
``dtype=float``; the CPU runs all of those in the half type and casts only
matmuls and convolutions down and losses, ``prod`` and linear algebra up
(``python/tests/test_autocast.py`` checks the lists against the installed
PyTorch's registrations and the CPU's real casts):

* lower precision: floating inputs cast to the autocast dtype;
* fp32: half inputs cast up to fp32;
* fp32 with ``dtype`` set (CUDA): the function called with ``dtype=float32``
  where the caller gave none, so the input is not copied;
* promote: floating inputs cast to the widest among them;
* everything else runs in the dtype it is given.

As ``cached_cast`` does, an fp32 leaf that requires grad (a weight) is cast
once and the copy kept until the outermost ``torch.autocast`` exits (its
``torch.clear_autocast_cache()``), which is what a real run holds: one
low-precision copy of each weight through the forward.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Dict, FrozenSet, Iterator, NamedTuple, Optional


class Lists(NamedTuple):
    """One device's casts, by the name a Python call reaches the mode with."""

    lower: FrozenSet[str]
    fp32: FrozenSet[str]
    set_opt_dtype: FrozenSet[str]
    promote: FrozenSet[str]


def _names(text: str) -> FrozenSet[str]:
    return frozenset(text.split())


CUDA = Lists(
    lower=_names(
        """_convolution conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d
        convolution prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear addbmm baddbmm bmm
        chain_matmul linalg_multi_dot lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell
        scaled_dot_product_attention lstm gru rnn_tanh rnn_relu"""
    ),
    fp32=_names(
        """acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow softplus
        layer_norm rms_norm group_norm cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss
        hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss
        multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss
        binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp"""
    ),
    set_opt_dtype=_names("prod softmax log_softmax cumprod cumsum linalg_vector_norm linalg_matrix_norm sum norm"),
    promote=_names("addcdiv addcmul atan2 bilinear cross dot vdot grid_sample index_put tensordot scatter_add"),
)

CPU = Lists(
    lower=_names(
        """conv1d conv2d conv3d bmm mm linalg_vecdot baddbmm addmm addbmm linear _convolution matmul conv_tbc
        conv_transpose1d conv_transpose2d conv_transpose3d prelu scaled_dot_product_attention lstm"""
    ),
    fp32=_names(
        """avg_pool3d binary_cross_entropy grid_sample polar prod quantile nanquantile stft cdist trace
        view_as_complex cholesky cholesky_inverse cholesky_solve inverse lu_solve orgqr ormqr pinverse
        max_pool3d max_unpool2d max_unpool3d adaptive_avg_pool3d mse_loss cosine_embedding_loss nll_loss
        hinge_embedding_loss poisson_nll_loss smooth_l1_loss cross_entropy l1_loss huber_loss
        margin_ranking_loss soft_margin_loss triplet_margin_loss multi_margin_loss ctc_loss kl_div
        multilabel_margin_loss binary_cross_entropy_with_logits fft_fft fft_ifft fft_fft2 fft_ifft2
        fft_fftn fft_ifftn fft_rfft fft_irfft fft_rfft2 fft_irfft2 fft_rfftn fft_irfftn fft_hfft fft_ihfft
        linalg_cond linalg_matrix_rank linalg_solve linalg_cholesky linalg_svdvals linalg_eigvals
        linalg_eigvalsh linalg_inv linalg_householder_product linalg_tensorinv linalg_tensorsolve geqrf qr
        svd triangular_solve fractional_max_pool2d fractional_max_pool3d adaptive_max_pool3d linalg_qr
        linalg_cholesky_ex linalg_svd linalg_eig linalg_eigh linalg_lstsq linalg_inv_ex"""
    ),
    set_opt_dtype=frozenset(),
    promote=_names("stack cat index_copy"),
)

LISTS: Dict[str, Lists] = {"cuda": CUDA, "cpu": CPU}

# Python's names for the same functions: operators reach the mode as the
# Tensor method that implements them.
_ALIASES = {"__matmul__": "matmul", "__rmatmul__": "matmul", "__pow__": "pow", "__rpow__": "pow", "__rmatmul__": "matmul"}

# F.interpolate's modes that are upsample_* kernels (CUDA's fp32 list).
_UPSAMPLE = frozenset({"nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear"})


def _state(device: str) -> Optional[Any]:
    """The autocast dtype in force for ``device`` now, or None when off."""
    import torch

    try:
        on = torch.is_autocast_enabled(device)
    except TypeError:  # PyTorch before 2.4: one function per device
        on = torch.is_autocast_cpu_enabled() if device == "cpu" else torch.is_autocast_enabled()
    if not on:
        return None
    try:
        return torch.get_autocast_dtype(device)
    except (AttributeError, TypeError):
        return torch.get_autocast_cpu_dtype() if device == "cpu" else torch.get_autocast_gpu_dtype()


class Autocast:
    """A ``TorchFunctionMode`` that casts as ``device``'s autocast does,
    whenever PyTorch's autocast state for ``device`` is on."""

    def __init__(self, device: str) -> None:
        from torch.overrides import TorchFunctionMode

        self.device = device
        self.lists = LISTS[device]
        self.cache: Dict[int, Any] = {}
        outer = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                return outer.policy(getattr(func, "__name__", ""), args, kwargs or {}, func)

        self.mode = Mode()

    def lower(self) -> Optional[Any]:
        """The dtype autocast casts down to now, or None when it is off."""
        return _state(self.device)

    def cast_one(self, t: Any, dtype: Any) -> Any:
        """``t`` as ``cached_cast`` gives it: floating tensors other than
        fp64 cast to ``dtype``; a weight cast down once per region."""
        import torch

        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dtype in (dtype, torch.float64):
            return t
        if dtype == torch.float32 and t.dtype not in (torch.float16, torch.bfloat16):
            return t
        if t.dtype == torch.float32 and t.is_leaf and t.requires_grad and not t._is_view() and torch.is_autocast_cache_enabled() and dtype == self.lower():
            key = id(t)
            hit = self.cache.get(key)
            if hit is None or hit[0] is not t:
                hit = (t, t.to(dtype))
                self.cache[key] = hit
            return hit[1]
        return t.to(dtype)

    def clear(self) -> None:
        """``torch.clear_autocast_cache()``: the outermost region ended."""
        self.cache.clear()

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

        low = self.lower()
        if low is None:
            return call(*args, **kwargs)
        name = _ALIASES.get(name, name)
        if self.device == "cuda":
            if name == "binary_cross_entropy":
                # Banned under CUDA autocast (binary_cross_entropy_banned): the run fails.
                raise RuntimeError(
                    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast "
                    "(as PyTorch raises on CUDA); use binary_cross_entropy_with_logits"
                )
            special = _to_float(name, args, kwargs)
            if special is not None:
                return special
        kind = self.kind(name, args, kwargs)
        if kind == "lower":
            args, kwargs = self._cast(args, kwargs, low)
        elif kind == "fp32":
            args, kwargs = self._cast(args, kwargs, torch.float32)
        elif kind == "set_opt_dtype":
            first = args[0] if args else None
            given = kwargs.get("dtype") is not None or (name in ("softmax", "log_softmax") and len(args) > 2 and args[2] is not None)
            if not given and isinstance(first, torch.Tensor) and first.is_floating_point() and first.dtype != torch.float64:
                kwargs = {**kwargs, "dtype": torch.float32}
        elif kind == "promote":
            floats = [t.dtype for t in _tensors(args, kwargs) if t.is_floating_point()]
            if len(set(floats)) > 1:
                widest = functools.reduce(torch.promote_types, floats)
                args, kwargs = self._cast(args, kwargs, widest)
        return call(*args, **kwargs)

    def kind(self, name: str, args: Any = (), kwargs: Optional[Dict[str, Any]] = None) -> Optional[str]:
        """The cast policy of ``name`` on this device: ``"lower"``,
        ``"fp32"``, ``"set_opt_dtype"``, ``"promote"`` or None."""
        lists = self.lists
        if name == "interpolate":
            # F.interpolate's upsample_* kernels are on CUDA's fp32 list.
            mode = (kwargs or {}).get("mode", args[3] if len(args) > 3 else "nearest")
            return "fp32" if self.device == "cuda" and str(mode) in _UPSAMPLE else None
        if name == "pad":
            # F.pad's reflection_pad*/replication_pad* kernels are on the CPU's.
            mode = (kwargs or {}).get("mode", args[2] if len(args) > 2 else "constant")
            return "fp32" if self.device == "cpu" and str(mode) in ("reflect", "replicate") else None
        for kind in ("lower", "fp32", "set_opt_dtype", "promote"):
            if name in getattr(lists, kind):
                return kind
        return None

    def patched(self) -> Any:
        """The functions of ``torch.nn.functional`` and ``torch`` on the
        lists, wrapped while tracing: a Python function such as
        ``F.multi_head_attention_forward`` runs its body with the function
        mode switched off, and calls ``linear``, ``softmax``, ``torch.bmm``
        through these names."""
        import torch
        import torch.nn.functional as F

        outer = self
        lists = self.lists
        names = sorted(lists.lower | lists.fp32 | lists.set_opt_dtype | lists.promote | {"interpolate", "pad", "cross_entropy", "binary_cross_entropy"})

        @contextlib.contextmanager
        def swap() -> Any:
            saved = []
            for mod in (F, torch):
                for name in names:
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


def _tensors(args: Any, kwargs: Dict[str, Any]) -> list:
    import torch

    out = []
    for v in (*args, *kwargs.values()):
        for x in v if isinstance(v, (list, tuple)) else (v,):
            if isinstance(x, torch.Tensor):
                out.append(x)
    return out


@contextlib.contextmanager
def entered_as_on(device: str, ac: Autocast, notes: Optional[list] = None) -> Iterator[None]:
    """While tracing for ``device``: ``torch.autocast(device_type=...)``
    entered by the program works as on that device. For CUDA without a GPU
    PyTorch would disable it ("CUDA is not available"); a region for
    ``"meta"`` (a model that asks its input's device) is the trace's
    device's; the end of the outermost region clears the weights' casts.

    A ``torch.autocast("cuda")`` made before the trace (a decorator, made
    when its function was defined) was already disabled by PyTorch on a
    machine without a GPU, and cannot tell whether the program asked for
    that: it is taken as enabled, and ``notes`` says so."""
    import torch
    import torch.amp.autocast_mode as am

    saved: list = []

    def patch(obj: Any, name: str, value: Any) -> None:
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    init, enter = am.autocast.__init__, am.autocast.__enter__
    made_here: "set[int]" = set()
    revived: list = []

    def __init__(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        init(self, device if device_type == "meta" else device_type, *args, **kwargs)
        made_here.add(id(self))

    def __enter__(self: Any) -> Any:
        if device == "cuda" and getattr(self, "device", None) == "cuda" and not self._enabled and id(self) not in made_here and no_gpu:
            self._enabled = True
            revived.append(self)
            if notes is not None and len(revived) == 1:
                notes.append(
                    "a torch.autocast(\"cuda\") made before the trace (a decorator) had been disabled by PyTorch "
                    "for want of a GPU on this machine; it is taken as enabled, as on a GPU"
                )
        return enter(self)

    patch(am.autocast, "__init__", __init__)
    patch(am.autocast, "__enter__", __enter__)
    no_gpu = False
    if device == "cuda":
        import torch.cuda.amp.common as common

        no_gpu = bool(common.amp_definitely_not_available())
        patch(common, "amp_definitely_not_available", lambda: False)
        patch(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    original_clear = torch.clear_autocast_cache

    def clear() -> None:
        ac.clear()
        original_clear()

    patch(torch, "clear_autocast_cache", clear)
    try:
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)
        for a in revived:
            a._enabled = False


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
      for ``Half`` only): ``softmax(x, dim, dtype=float)`` as traced."""
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

"""Memory before training, exactly: trace the model on the meta device.

::

    est = vramscope.estimate(model, (x,), optimizer=torch.optim.AdamW, loss_fn=lambda out: out.sum(), steps=2)
    est.peak_bytes            # predicted peak allocated
    est.by_category           # parameter / gradient / optimizer_state / activation / ... at the peak
    est.report("est.html")    # opens like a real snapshot

The model's parameters, buffers and the inputs are replaced by tensors of
the same shape and dtype on the ``meta`` device (no memory, no compute), and
``steps`` training iterations run: forward (the model's own parameters swapped
for the meta ones for the whole trace, as ``torch.func.functional_call`` swaps
them for one call: a block checkpointed by ``torch.utils.checkpoint`` runs its
forward again inside backward),
loss, backward, optimizer step, ``zero_grad(set_to_none=True)``. A
``TorchDispatchMode`` sees every ATen operation, forward and backward; each
new storage is an allocation (its size is the storage's bytes, the Python
stack is recorded) and a finalizer on the storage records its free. The
events go into a snapshot in PyTorch's format (each block its own segment,
as on the CPU path), with a Memory Profiler category per allocation and a
``ProfilerStep#N`` range per iteration, which vramscope then reads like any
other snapshot.

For ``device="cuda"`` the trace is what the CUDA build would ask its
caching allocator for, request by request (vramscope._estimate.cuda): the
attention kernels CUDA would pick, foreach optimizers, autocast's casts,
cuBLAS workspaces, the scratch kernels allocate inside themselves
(vramscope._estimate.cuda_kernels), and the in-place additions a dispatch mode would
otherwise turn into copies. Replayed through the allocator model it gives
the peak reserved; for the GPT of tests/fixtures/gpu both peaks equal the
H200's and H100's to the byte (reserved) and within 0.3% (allocated) in
fp32 and under bf16 autocast, from batch 16 to 520.

For ``device="cpu"`` it is what the CPU build runs (vramscope._estimate.cpu):
its flash attention kernel and that kernel's scratch, the CPU's autocast
lists, oneDNN's LSTM kernel and PyTorch's recurrent cells as the CPU runs
them (vramscope._estimate.cpu_rnn). A compiled module (``torch.compile``) is planned by Inductor itself
on fake tensors, and its plan stands in for its eager step
(vramscope._estimate.compiled).

What it cannot see: kernels whose scratch is not modelled (cuDNN
convolution workspaces and RNNs, oneDNN's reorders of convolutions it does
not model), and memory outside PyTorch's
allocator; ``est.notes`` names those the model runs.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import sys
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from vramscope._estimate.optimizer import traced_optimizer

__all__ = ["estimate", "Estimate"]

# vramscope's own frames in a trace: the modes and the kernels they stand in for.
_SKIP_FILES = (
    "torch/utils/_python_dispatch.py", "torch/utils/_pytree.py", "vramscope/_estimate/trace.py", "vramscope/_estimate/autocast.py",
    "vramscope/_estimate/cuda.py", "vramscope/_estimate/cpu.py", "vramscope/_estimate/kernel_scratch.py", "vramscope/_estimate/compiled.py",
)



@functools.lru_cache(maxsize=None)
def _allocator_facts() -> Dict[str, int]:
    """The CUDA caching allocator's sizes, from the one place they are
    written (``vramscope_gpus::allocator``)."""
    from vramscope import _native

    return {k: int(v) for k, v in _native.allocator_facts().items()}

class Estimate:
    """The result of :func:`estimate`: ``peak_bytes``, ``by_category`` (at
    the peak), ``path`` (the snapshot written, where ``path=`` asked for
    one; ``None`` otherwise: the trace stays in memory) and ``snapshot`` (a
    :class:`vramscope.Snapshot`). For ``device="cuda"`` also
    ``peak_reserved_bytes`` (the trace replayed through the caching
    allocator's model), ``fit`` (the verdict for ``gpu=``, a dict with
    ``verdict`` and ``sentence``; ``None`` without a GPU's memory) and
    ``max_batch`` (with ``max_batch_for=``)."""

    def __init__(self, path: Optional[str], snapshot: Any, notes: Optional[List[str]] = None) -> None:
        self.path = path
        self.snapshot = snapshot
        # What the trace assumed or could not see, a sentence each.
        self.notes: List[str] = list(notes or [])
        dev = snapshot.summary()["devices"][0]
        self.peak_bytes: int = int(dev["peak"]["allocated_bytes"])
        self.by_category: Dict[str, int] = {c["category"]: int(c["bytes"]) for c in dev["peak"].get("by_category") or []}
        self.summary = dev
        # Set for device="cuda" (vramscope._estimate.fit).
        self.peak_reserved_bytes: Optional[int] = None
        self.fit: Optional[Dict[str, Any]] = None
        self.max_batch: Optional[Dict[str, Any]] = None

    def report(self, path: Optional[str | os.PathLike] = None) -> Any:
        """Write the HTML report (default: beside ``path``, or
        ``vramscope-estimate.html`` in the current directory for a trace
        kept in memory) and return its path."""
        if path is None and self.path is None:
            path = "vramscope-estimate.html"
        return self.snapshot.report(path, title="vramscope estimate" if self.path is None else None)

    def __repr__(self) -> str:
        cats = ", ".join(f"{k} {v}" for k, v in sorted(self.by_category.items(), key=lambda kv: -kv[1]))
        more = f", peak reserved {self.peak_reserved_bytes}" if self.peak_reserved_bytes is not None else ""
        if self.fit is not None:
            more += f", {self.fit['verdict']}"
        if self.max_batch is not None:
            more += f", max batch {self.max_batch['batch']}"
        if self.notes:
            more += f", {len(self.notes)} note{'s' if len(self.notes) > 1 else ''} in .notes"
        return f"<vramscope.Estimate peak {self.peak_bytes} bytes ({cats}){more}>"


class _Recorder:
    """Allocation events of the storages that ATen operations create."""

    def __init__(self, round_to: int = 1) -> None:
        import torch

        self.torch = torch
        self.round_to = round_to
        # Made-up addresses keep the allocator's block alignment (read once:
        # this runs at every storage the trace makes).
        self.align = _allocator_facts()["min_block"]
        self.events: List[Dict[str, Any]] = []
        self.live: Dict[int, Tuple[int, int]] = {}  # key -> (addr, size)
        self.key_of: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
        self.next_addr = 1 << 32
        self.next_key = 0
        self.time = 0
        self.phase = "setup"
        self.alloc_event: Dict[int, int] = {}  # key -> index of its alloc event
        # > 0 while a compiled module's eager storages are hidden (its plan
        # stands in for them: vramscope._estimate.compiled).
        self.paused = 0
        self.assumed: List[List[Dict[str, Any]]] = []  # stacks where a bool was read as true

    def _tick(self) -> int:
        self.time += 1
        return self.time

    def _frames(self) -> List[Dict[str, Any]]:
        out = []
        f = sys._getframe(2)
        while f is not None and len(out) < 64:
            fn = f.f_code.co_filename.replace("\\", "/")
            if not fn.endswith(_SKIP_FILES):
                out.append({"filename": f.f_code.co_filename, "line": f.f_lineno, "name": f.f_code.co_name})
            f = f.f_back
        return out

    def track(self, t: Any, category: Optional[str] = None, force: bool = False) -> None:
        if not isinstance(t, self.torch.Tensor) or (self.paused and not force):
            return
        try:
            st = t.untyped_storage()
        except Exception:  # noqa: BLE001 - sparse or subclass tensors
            return
        if st in self.key_of:
            return
        size = int(st.nbytes())
        if size == 0:
            return  # no allocator is asked for an empty storage
        if self.round_to > 1:
            # The CUDA caching allocator hands out multiples of 512 bytes.
            size = max(self.round_to, (size + self.round_to - 1) // self.round_to * self.round_to)
        key = self.next_key
        self.next_key += 1
        self.key_of[st] = key
        addr = self.next_addr
        align = self.align
        self.next_addr += max(align, (size + align - 1) // align * align)
        frames = self._frames()
        cat = category or {"forward": "activation", "backward": "temporary", "optimizer": "temporary"}.get(self.phase, "unknown")
        now = self._tick()
        self.events.append({"action": "segment_alloc", "addr": addr, "size": size, "stream": 0, "time_us": now, "frames": frames})
        self.alloc_event[key] = len(self.events)
        self.events.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": now, "frames": frames, "category": cat})
        self.live[key] = (addr, size)
        weakref.finalize(st, self._free, key)

    def _free(self, key: int) -> None:
        item = self.live.pop(key, None)
        if item is None:
            return
        addr, size = item
        now = self._tick()
        for action in ("free_requested", "free_completed", "segment_free"):
            self.events.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": now, "frames": []})

    def recategorize(self, tensors: Sequence[Any], category: str) -> None:
        """Set the category of the allocations behind ``tensors``."""
        for t in tensors:
            if t is None:
                continue
            key = self.key_of.get(t.untyped_storage())
            if key is not None and key in self.alloc_event:
                self.events[self.alloc_event[key]]["category"] = category


def _mode(rec: _Recorder, kernels: Any = None, inplace: Optional[Dict[str, Tuple[int, int]]] = None, probe: Optional[list] = None) -> Any:
    """The dispatch mode that records every storage an operation makes.

    Autograd's engine sums two gradients of one tensor in place
    (``old.add_(new)``, torch/csrc/autograd/input_buffer.cpp) when it holds
    the last reference to ``old`` and its storage, but never while a
    dispatch mode is active (``isTensorSubclassLike`` is then true for every
    tensor), so under this mode each sum would be a new allocation the GPU
    never makes: a whole activation-sized tensor per layer. ``at::linear``
    adds the bias in place (``output.add_(bias)``) for the same reason only
    outside a mode. ``inplace`` holds what the tensor's and its storage's
    use counts read inside this mode at each of those two additions
    (``_inplace_counts``: "accumulate" and "bias"); an ``add`` whose first
    operand reads the same is made in place, as CUDA would make it.
    ``probe`` collects (phase, counts) of every ``add`` instead."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    from torch._prims_common import is_non_overlapping_and_dense_or_false as dense

    add = torch.ops.aten.add.Tensor

    def counts(t: Any) -> Tuple[int, int]:
        return int(t._use_count()), int(torch._C._storage_Use_Count(t.untyped_storage()._cdata))

    scalar = torch.ops.aten._local_scalar_dense.default

    class Track(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is scalar and args and isinstance(args[0], torch.Tensor) and args[0].dtype == torch.bool:
                # A check on values (`if (mask == 0).all():`) has no value to
                # read on meta. Read as true, which is what the checks models
                # make before training take on ordinary batches (Transformers'
                # "no packed sequences" when use_cache=False); noted in the
                # snapshot with where it was read.
                rec.assumed.append(rec._frames()[:3])
                return True
            if func is add and len(args) == 2 and not kwargs and all(isinstance(a, torch.Tensor) for a in args):
                old, new = args
                if probe is not None:
                    probe.append((rec.phase, counts(old)))
                elif inplace and old.dtype == new.dtype and dense(old):
                    if rec.phase == "backward":
                        fits = old.shape == new.shape and counts(old) == inplace.get("accumulate")
                    else:
                        fits = new.dim() == 1 and old.dim() > 1 and old.shape[-1] == new.shape[0] and counts(old) == inplace.get("bias")
                    if fits:
                        return old.add_(new)
            if kernels is not None:
                instead = kernels.before(func, args, kwargs or {}, rec)
                if instead is not None:
                    return instead
            out = _as_the_kernel_lays_out(func, args, func(*args, **(kwargs or {})))
            skip = {id(t) for t in kernels.untracked(func, out)} if kernels is not None else set()
            for t in tree_leaves(out):
                if id(t) not in skip:
                    rec.track(t)
            if kernels is not None:
                kernels.after(func, args, kwargs or {}, rec)
            return out

    return Track()


def _as_the_kernel_lays_out(func: Any, args: Any, out: Any) -> Any:
    """``out`` with the layout the CPU and CUDA kernels give it where the
    meta function's differs. The meta gradient of a layer norm's input
    follows the incoming gradient's strides, while both kernels allocate it
    contiguous (``layer_norm_backward_cpu`` in aten/src/ATen/native/
    layer_norm.cpp and ``layer_norm_backward_cuda`` in native/cuda/
    layer_norm_kernel.cu: ``empty_like(*X, ..., LEGACY_CONTIGUOUS_MEMORY_FORMAT)``
    of the contiguous input). A transposed gradient arriving there (a Swin
    or a ViT pooling over tokens) then read as transposed all the way down,
    and every ``view`` of it became a copy the real run never makes."""
    import torch

    if func is torch.ops.aten.native_layer_norm_backward.default and isinstance(out, tuple):
        dx = out[0]
        if isinstance(dx, torch.Tensor) and not dx.is_contiguous():
            return (torch.empty(dx.shape, dtype=dx.dtype, device=dx.device), *out[1:])
    return out


@functools.lru_cache(maxsize=None)
def _inplace_counts() -> Dict[str, Tuple[int, int]]:
    """The use counts (tensor, storage) the first operand of an in-place
    addition reads inside the tracking mode where CUDA would add in place:
    "accumulate", the engine's sum of the gradients of two ``select``s of
    one tensor (the ``q, k, v`` of an attention's packed projection);
    "bias", ``F.linear``'s bias on a 3-D input that is not contiguous (the
    transposed input of ``nn.MultiheadAttention(batch_first=True)``).
    They are PyTorch's, the same for every trace of the process: read once."""
    import torch
    import torch.nn.functional as F

    seen: list = []
    rec = _Recorder()
    with _mode(rec, probe=seen):
        rec.phase = "forward"
        w = torch.nn.Parameter(torch.empty(6, 4, device="meta"))
        b = torch.nn.Parameter(torch.empty(6, device="meta"))
        F.linear(torch.empty(5, 3, 4, device="meta").transpose(0, 1), w, b)
        x = torch.empty(3, 4, device="meta", requires_grad=True)
        p = x * 1
        total = p[0].sum() + p[1].sum()
        rec.phase = "backward"
        total.backward()
    found: Dict[str, Tuple[int, int]] = {}
    forward = [c for phase, c in seen if phase == "forward"]
    backward = [c for phase, c in seen if phase == "backward"]
    if len(forward) == 2:  # the bias, then the sum of the two selects
        found["bias"] = forward[0]
    if len(backward) == 1:
        found["accumulate"] = backward[0]
    return found


def estimate(
    model: Any,
    example_inputs: Sequence[Any],
    optimizer: Any = None,
    *,
    loss_fn: Optional[Callable[..., Any]] = None,
    targets: Sequence[Any] = (),
    steps: int = 2,
    device: str = "cuda",
    gpu: Union[str, int, None] = None,
    settings: Optional[str] = None,
    outside_bytes: Any = None,
    inference: bool = False,
    ema: bool = False,
    autocast: Any = None,
    max_batch_for: Union[str, int, None] = None,
    batch_dim: int = 0,
    path: Optional[str | os.PathLike] = None,
    **optimizer_options: Any,
) -> Estimate:
    """Predict the memory of ``steps`` training iterations of ``model`` on
    ``example_inputs`` without allocating it (see the module docs).

    Args:
        model: an ``nn.Module`` (anywhere: only shapes and dtypes are used).
        example_inputs: positional inputs of one forward call (tensors are
            replaced by meta tensors of the same shape and dtype).
        optimizer: an optimizer class (``torch.optim.AdamW``), a factory
            taking the parameters (``lambda ps: torch.optim.SGD(ps, lr=0.1,
            momentum=0.9)``) or an optimizer instance over ``model``'s
            parameters, whose class and param groups (options included) are
            rebuilt over the traced parameters, leaving the instance as it
            was; ``None`` traces forward and backward only. Anything else
            is a ``TypeError``.
        loss_fn: ``loss_fn(output, *targets) -> scalar``; default
            ``output.sum()``.
        targets: tensors passed to ``loss_fn`` after the output (labels),
            replaced by meta tensors like the inputs.
        steps: training iterations (2 shows the optimizer state in place).
        device: whose accounting to predict: ``"cuda"`` (default) runs
            what the CUDA build would (fused attention kernels as
            ``select_sdp_backend`` picks them, ``sdpa_kernel(...)``
            respected; ``foreach`` optimizers; ``fused=True`` allowed; the
            cuBLAS/cuBLASLt workspaces) and rounds every block up to 512
            bytes as the CUDA caching allocator does; ``"cpu"`` runs what the
            CPU build would (its flash attention kernel and that kernel's
            scratch, oneDNN's LSTM, the CPU's autocast lists) and counts
            exact bytes, as the CPU allocator does. Kernels whose own memory
            is not traced (oneDNN's convolutions on the CPU, cuDNN's
            convolutions and RNNs on CUDA, a
            compiled model's) are named in ``est.notes``.
        gpu: the GPU, by name (``"H100-80GB"``, ``"A100-40GB"``) or total
            bytes: its compute capability decides the attention kernels and
            the workspace size (default: a Hopper GPU), its memory the
            verdict (``est.fit``): the trace replayed through the caching
            allocator's model, peak reserved against the GPU's total less
            ``outside_bytes``.
        settings: allocator settings for the replay, in
            ``PYTORCH_CUDA_ALLOC_CONF`` syntax (``"expandable_segments:True"``).
        outside_bytes: memory the process holds outside the caching
            allocator (CUDA context, kernels, NCCL's buffers): bytes, or a
            recording of the program on the GPU (a path or a `Snapshot`,
            written by ``vramscope.record`` with nvidia-ml-py installed)
            whose device ledger measured it; default 768 MiB, a little
            above what the project's H100 and H200 measured.
        inference: forward passes only, under ``torch.no_grad()`` (no
            loss, backward or optimizer).
        ema: an exponential moving average of the trained weights kept on
            the device, as timm's ``ModelEmaV3`` and ``AveragedModel`` with
            ``get_ema_multi_avg_fn`` keep one: a copy of the model (its
            buffers and frozen parameters too, as their deep copy holds)
            made before training (category ``ema``), its trained
            parameters updated in place after each optimizer step
            (``torch._foreach_lerp_``).
        autocast: ``torch.bfloat16`` or ``torch.float16`` (``True``:
            bfloat16): forward and loss run under
            ``torch.autocast(device_type=device, dtype=...)``, cast by that
            device's autocast lists (vramscope._estimate.autocast), weights cast once
            per step. Autocast the model or ``loss_fn`` enters itself is
            followed without it.
        max_batch_for: a GPU (as ``gpu``): also search the largest batch
            that fits it (``est.max_batch``), re-tracing with every input
            and target resized along ``batch_dim``.
        batch_dim: the batch dimension of the inputs and targets.
        path: where the snapshot goes (default: nowhere: the trace is read
            from memory and no file is left behind).

    A compiled ``model`` (``torch.compile``) is compiled once more by
    Inductor on fake tensors for its plan (seconds to a minute on a CPU);
    Dynamo's caches are then emptied, so the program's own compiled code
    compiles again at its next call.
        **optimizer_options: passed to ``optimizer`` (``lr=1e-3``, ...); for
            an instance, they override every group's options.
    """
    from vramscope import load, loads
    from vramscope._estimate.fit import attach_fit, search_max_batch

    if device not in ("cuda", "cpu"):
        raise ValueError(f"device={device!r}: expected 'cuda' or 'cpu'")
    from vramscope._estimate.autocast import autocast_dtype

    cast = autocast_dtype(autocast)
    if ema and inference:
        raise ValueError("ema=True is for training: inference keeps no moving average")
    if device == "cpu" and (gpu is not None or max_batch_for is not None):
        raise ValueError("gpu= and max_batch_for= are for device='cuda': the CPU has no caching allocator to replay")

    def trace(inputs: Sequence[Any], labels: Sequence[Any], where: Optional[str | os.PathLike]) -> Estimate:
        notes: List[str] = []
        out = _trace(model, inputs, optimizer, loss_fn, labels, steps, device, gpu, inference, cast, where, optimizer_options, notes, ema)
        if isinstance(out, bytes):
            return Estimate(None, loads(out), notes)
        return Estimate(out, load(out), notes)

    est = trace(example_inputs, targets, path)
    if device == "cuda":
        attach_fit(est, gpu, settings, outside_bytes)
        if max_batch_for is not None:
            search_max_batch(est, trace, example_inputs, targets, batch_dim, max_batch_for, settings, outside_bytes)
    return est


def _compiled_plans(
    model: Any, example_inputs: Sequence[Any], targets: Sequence[Any], loss_fn: Optional[Callable[..., Any]], device: str,
    region: Callable[[], Any], inference: bool, rec: _Recorder, notes: List[str],
) -> Any:
    """Inductor's plans of the compiled modules of ``model``
    (vramscope._estimate.compiled), to stand in for their eager steps; None
    where nothing is compiled or the plans cannot be had (said in ``notes``)."""
    compiled = _compiled(model)
    if not compiled:
        return None
    import torch

    from vramscope._estimate.compiled import NotCaptured, Replay, capture

    eager = f"{compiled} is compiled (torch.compile), and is estimated as its eager step"
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    try:
        plans = capture(model, state, tuple(example_inputs), tuple(targets), loss_fn, device, region, inference)
    except NotCaptured as e:
        notes.append(f"{eager}: {e}")
        return None
    if not plans:
        notes.append(f"{eager}: the compiled wrapper is not an nn.Module torch.compile returns")
        return None
    where = "CUDA" if device == "cuda" and torch.cuda.is_available() else "this machine's CPU"
    notes.append(
        f"{compiled} is compiled (torch.compile): estimated from Inductor's own plan (what AOTAutograd saves for "
        f"backward, Inductor's fused buffers and their lifetimes), scheduled for {where}; the scratch inside "
        + (
            "Inductor's own kernels is not traced (ATen's convolutions and 16-bit matmuls it calls are measured on this CPU)"
            if device == "cpu"
            else "its kernels is not traced"
        )
        + ("" if where == "CUDA" or device != "cuda" else ", and Triton's fusions and CUDA's attention kernels differ from the CPU's in places")
    )
    return Replay(rec, plans)


def _modules(model: Any) -> List[Any]:
    return [m for _, m in model.named_modules()] if hasattr(model, "named_modules") else []


def _compiled(model: Any) -> Optional[str]:
    """The module of ``model`` that ``torch.compile`` wraps (``OptimizedModule``
    or ``nn.Module.compile()``), by name; None when nothing is compiled."""
    modules = model.named_modules() if hasattr(model, "named_modules") else []
    for name, m in modules:
        if type(m).__name__ == "OptimizedModule" or getattr(m, "_compiled_call_impl", None) is not None:
            return f"the model's {name}" if name else "the model"
    return None


def _trace(
    model: Any,
    example_inputs: Sequence[Any],
    optimizer: Any,
    loss_fn: Optional[Callable[..., Any]],
    targets: Sequence[Any],
    steps: int,
    device: str,
    gpu: Union[str, int, None],
    inference: bool,
    cast: Any,
    path: Optional[str | os.PathLike],
    optimizer_options: Dict[str, Any],
    notes: List[str],
    ema: bool = False,
) -> Union[str, bytes]:
    """Trace ``steps`` iterations; the snapshot's path, or its pickle where
    no ``path`` was asked for."""
    import torch
    from torch.nn.utils.stateless import _reparametrize_module
    rec = _Recorder(_allocator_facts()["min_block"] if device == "cuda" else 1)
    cuda = None
    kernels: Any
    if device == "cuda":
        from vramscope._estimate.cuda import Cuda, capability_of, dropout_as_on_cuda, fused_on_meta, sdpa_as_on_cuda, sms_of

        kernels = cuda = Cuda(capability_of(gpu), sms_of(gpu))
    else:
        from vramscope._estimate.cpu import Cpu, rng_state_as_on_cpu, sdpa_as_on_cpu
        from vramscope._estimate.cpu_rnn import rnns_as_on_cpu

        kernels = Cpu()
    mode = _mode(rec, kernels, inplace=_inplace_counts())
    meta = torch.device("meta")

    def on_meta(t: Any, category: str) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        m = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=meta)
        rec.track(m, category)
        rec.recategorize([m], category)
        return m

    def region() -> Any:
        """``torch.autocast`` around forward and loss, for ``autocast=``."""
        if cast is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device, dtype=cast)

    # Compiled modules are planned by Inductor first, outside every mode
    # and patch of the trace.
    replay = _compiled_plans(model, example_inputs, targets, loss_fn, device, region, inference, rec, notes)
    annotations: List[Dict[str, Any]] = []
    on_cuda = contextlib.ExitStack()
    # Autocast where the program (or autocast=) turns it on for this device.
    from vramscope._estimate.autocast import Autocast, entered_as_on

    ac = Autocast(device)
    on_cuda.enter_context(entered_as_on(device, ac, notes))
    on_cuda.enter_context(ac.patched())
    on_cuda.enter_context(ac.mode)

    kernels.autocast = ac
    if cuda is None:
        on_cuda.enter_context(sdpa_as_on_cpu(kernels))
        on_cuda.enter_context(rng_state_as_on_cpu(rec))
        on_cuda.enter_context(rnns_as_on_cpu(kernels))
    else:
        on_cuda.enter_context(fused_on_meta())
        on_cuda.enter_context(sdpa_as_on_cuda(cuda))
        on_cuda.enter_context(dropout_as_on_cuda())
    with on_cuda, mode:
        # Only shapes, strides and dtypes are read from the real tensors: an
        # operation on them would be traced as an allocation.
        params = {n: torch.nn.Parameter(on_meta(p, "parameter"), requires_grad=p.requires_grad) for n, p in model.named_parameters()}
        buffers = {n: on_meta(b, "parameter") for n, b in model.named_buffers()}
        inputs = tuple(on_meta(x, "input") for x in example_inputs)
        labels = tuple(on_meta(y, "input") for y in targets)
        opt = None if inference else traced_optimizer(optimizer, model, params, optimizer_options, cuda_path=cuda is not None)
        # The EMA's copy, made before training as the libraries make it:
        # timm's ModelEma* and AveragedModel deep-copy the model, its frozen
        # parameters and buffers too (held, not averaged); diffusers'
        # EMAModel copies the parameters it is given.
        averaged = [on_meta(p, "ema") for p in params.values() if p.requires_grad] if ema else []
        # (Alive, as the copy is, to the end of the trace.)
        held = [on_meta(t, "ema") for t in (*(p for p in params.values() if not p.requires_grad), *buffers.values())] if ema else []
        if ema:
            rest = sum(t.numel() * t.element_size() for t in held)
            notes.append(
                "EMA: a copy of the model on the device throughout, its trained weights updated in place after each "
                "optimizer step (timm's ModelEmaV3, AveragedModel with get_ema_multi_avg_fn); "
                + (f"{rest:,} B of it are the model's buffers and frozen parameters, which those deep copies hold and "
                   "diffusers' EMAModel (given the trained parameters) does not; " if rest else "")
                + "diffusers' EMAModel(foreach=True) also holds a difference of every parameter while it updates"
            )
        state = {**params, **buffers}
        swapped = _reparametrize_module(model, state, tie_weights=True, strict=False)
        swapped.__enter__()
        if replay is not None:
            replay.install(model)
        try:
            _steps(
                model, inputs, labels, loss_fn, steps, inference, opt, params, rec, annotations, region, replay, averaged,
            )
        finally:
            swapped.__exit__(None, None, None)
            if replay is not None:
                replay.remove()

        # Blocks alive at the end: the segments of the snapshot.
        live = list(rec.live.values())
        segments = [
            {
                "device": 0,
                "address": addr,
                "total_size": size,
                "allocated_size": size,
                "active_size": size,
                "requested_size": size,
                "stream": 0,
                "segment_type": "small" if size <= _allocator_facts()["small_size"] else "large",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": [],
                "blocks": [{"address": addr, "size": size, "requested_size": size, "state": "active_allocated", "frames": []}],
            }
            for addr, size in sorted(live)
        ]
        snap = {
            "segments": segments,
            "device_traces": [list(rec.events)],
            "external_annotations": annotations,
            "allocator_settings": {},
            "vramscope": {"recorder": "estimate-meta-trace", "assumed_true": rec.assumed[:20], "notes": notes, "steps": int(steps), "inference": bool(inference), "autocast": str(cast).replace("torch.", "") if cast is not None else None, "torch": str(torch.__version__)},
        }
        if cuda is not None:
            names = {0: "math", 1: "flash", 2: "efficient"}
            snap["vramscope"]["estimate"] = {
                "gpu": gpu,
                "capability": list(cuda.capability),
                "sdpa": {names.get(k, str(k)): v for k, v in cuda.sdp.items()},
                "workspace_bytes": cuda.cublas,
            }
        else:
            snap["vramscope"]["estimate"] = {"device": "cpu", "threads": kernels.threads, "sdpa": dict(kernels.sdp), "onednn_lstm_calls": kernels.lstm_calls}
    notes.extend(kernels.unmodelled.values())
    from vramscope._estimate.lbfgs import note as lbfgs_note, steps_with_closure

    if opt is not None and not inference and steps_with_closure(opt):
        notes.append(lbfgs_note(opt))
    if cuda is not None and any(isinstance(m, torch.nn.RNNBase) for m in _modules(model)):
        from vramscope._estimate.cuda import RNN_NOTE as CUDA_RNN

        notes.append(CUDA_RNN)
    snap["vramscope"]["notes"] = notes
    if path is None:
        return pickle.dumps(snap, protocol=pickle.DEFAULT_PROTOCOL)
    path = os.fspath(path)
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=pickle.DEFAULT_PROTOCOL)
    return path


def _steps(
    model: Any, inputs: Tuple[Any, ...], labels: Tuple[Any, ...], loss_fn: Optional[Callable[..., Any]], steps: int,
    inference: bool, opt: Any, params: Dict[str, Any], rec: _Recorder, annotations: List[Dict[str, Any]], region: Callable[[], Any],
    replay: Any = None,
    averaged: Sequence[Any] = (),
) -> None:
    """The traced iterations, on the model whose parameters are the meta
    ones; ``averaged``: an EMA's copies of the trained parameters."""
    import torch

    from vramscope._estimate.lbfgs import LbfgsTrace, steps_with_closure

    # L-BFGS steps with a closure and data-dependent decisions: traced as
    # what its step allocates (lbfgs.py).
    lbfgs = LbfgsTrace(opt) if opt is not None and steps_with_closure(opt) else None
    for step in range(max(1, int(steps))):
        annotations.append({"name": f"ProfilerStep#{step + 1}", "stage": "START", "device": 0, "time_us": rec._tick()})
        rec.phase = "forward"
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        else:
            for p in params.values():
                p.grad = None
        if inference:
            with torch.no_grad(), region():
                out = model(*inputs)
            del out
            annotations.append({"name": f"ProfilerStep#{step + 1}", "stage": "END", "device": 0, "time_us": rec._tick()})
            continue
        with region():  # its exit lets the weights' casts go
            out = model(*inputs)
            loss = loss_fn(out, *labels) if loss_fn is not None else (out if isinstance(out, torch.Tensor) else out[0]).sum()
        # The output is not kept through backward: the loss holds what
        # backward needs, and training loops (a train_step function,
        # HF Trainer's compute_loss, Lightning's training_step) let the
        # output go before loss.backward().
        del out
        rec.phase = "backward"
        loss.backward()
        del loss
        if replay is not None:
            replay.end_backward(params)
        rec.recategorize([p.grad for p in params.values()], "gradient")
        if lbfgs is not None:
            rec.phase = "optimizer"
            rec.recategorize(lbfgs.step([p for p in params.values() if p.requires_grad]), "optimizer_state")
        elif opt is not None:
            rec.phase = "optimizer"
            opt.step()
            states = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
            rec.recategorize(states, "optimizer_state")
        if averaged:
            with torch.no_grad():
                torch._foreach_lerp_(list(averaged), [p for p in params.values() if p.requires_grad], 1e-3)
        annotations.append({"name": f"ProfilerStep#{step + 1}", "stage": "END", "device": 0, "time_us": rec._tick()})
        rec.phase = "setup"

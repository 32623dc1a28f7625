"""A compiled model in the trace: the buffers Inductor's own plan allocates.

``torch.compile`` changes what a step holds: AOTAutograd's partitioner
chooses what forward saves for backward (recomputing cheap operations
instead), and Inductor fuses chains of operations into kernels whose
intermediates never exist, frees each buffer after its last use and, in
backward, each saved tensor after its last use. A meta trace of the eager
module sees none of that, and Dynamo runs eagerly under the trace's
dispatch mode anyway.

So each compiled module is compiled for real first, on fake tensors of the
trace's device (no memory, no kernels run), by Inductor itself: Dynamo,
AOTAutograd with Inductor's decompositions, joint-graph passes and
partitioner, Inductor's post-grad passes, lowering and scheduler (its
fusion decisions). Code generation is skipped: ``GraphLowering.compile_to_module``
is replaced, for the capture only, by one that reads the scheduled graph's
buffers with ``torch._inductor.memory`` (each buffer's size, the step that
makes it and the step of its last use; which graph inputs the graph frees)
and runs the graph eagerly on the fakes so that backward can be captured
too.

In the trace, the module's eager forward and backward are then hidden
(their storages are not recorded) and the plans stand in for them: forward
allocates its buffers in the scheduled order, frees the temporaries after
their last use and keeps what it saves for backward; backward allocates its
buffers and frees each saved buffer after its last use there. The module's
outputs and the gradients are the eager ones, recorded when forward
returns and backward ends.

What the extern kernels (ATen's, which Inductor calls) make inside
themselves is added as the eager trace adds it: the CPU flash attention
kernel's per-thread blocks, and, measured on this CPU
(vramscope._estimate.cpu_measured), convolutions and 16-bit matmuls, in
the layouts the plan gives their inputs. What it does not see: the scratch
inside Inductor's own kernels, graph breaks
(a model that compiles into more than one graph is traced eagerly, and the
estimate says so), CUDA graphs (``mode="reduce-overhead"``). For a CUDA
estimate without a GPU the graphs are scheduled for the CPU: Inductor's
fusion decisions for Triton differ in places.
"""

from __future__ import annotations

import contextlib
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple


class NotCaptured(Exception):
    """The compiled module could not be planned: the reason, for the notes."""


@dataclass
class GraphPlan:
    """One scheduled graph: per step, the buffers it allocates (name, bytes)
    and the names freed after it; the graph's inputs and outputs by name."""

    backward: bool
    steps: List[Tuple[List[Tuple[str, int]], List[str]]]
    inputs: List[str]
    outputs: List[str]
    input_sizes: Dict[str, int] = field(default_factory=dict)
    # The FX nodes the outputs are, by name (the backward graph's inputs
    # are named after the forward's saved nodes).
    output_nodes: List[str] = field(default_factory=list)


@dataclass
class ModulePlan:
    """A compiled module's forward graph and, for training, its backward."""

    forward: GraphPlan
    backward: Optional[GraphPlan]
    user_outputs: List[str]  # forward's outputs that are the module's (the rest are saved for backward)


def _kernel_scratch(node: Any, device: str) -> List[int]:
    """What an extern kernel of the plan allocates inside itself (the trace
    adds the same for the eager kernels): the CPU flash attention's
    per-thread blocks and, in backward, its copy of a gradient of the
    output that is not contiguous."""
    from vramscope._estimate.cpu import backward_scratch, forward_scratch

    kernel = getattr(getattr(node, "node", None), "op_overload", None)
    name = str(getattr(kernel, "__name__", "")).split(".")[0]
    if device == "cpu" and name in _MEASURED:
        return _measured_scratch(node.node, kernel, name)
    if device != "cpu" or name not in ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward"):
        return []
    import torch

    args = [a for a in getattr(node.node, "inputs", [])]

    def dims(a: Any) -> List[int]:
        return [int(x) for x in a.get_size()]

    threads = int(torch.get_num_threads())
    try:
        if name.endswith("backward"):
            grad, q, k = args[0], args[1], args[2]
            b, h, lq, _d = dims(q)
            out = []
            strides = [int(x) for x in grad.get_stride()]
            shape = dims(grad)
            contiguous = all(strides[i] == _prod(shape[i + 1:]) for i in range(len(shape)) if shape[i] > 1)
            if not contiguous:
                out.append(_prod(shape) * grad.get_dtype().itemsize)
            return out + backward_scratch(b, h, lq, dims(k)[2], q.get_dtype(), threads)
        q, k = args[0], args[1]
        return forward_scratch(dims(q)[2], dims(k)[2], dims(q)[3], q.get_dtype(), threads)
    except (AttributeError, IndexError, TypeError, ValueError):
        return []


# The extern kernels whose memory the eager trace measures on the CPU
# (vramscope._estimate.cpu_measured): convolutions (Inductor leaves them to
# ATen, in the layouts it chose: channels-last for a convolutional
# network) and matmuls, 16-bit ones measured.
_MEASURED = ("convolution", "convolution_backward", "mm", "addmm", "bmm", "baddbmm")


def _measured_scratch(ir: Any, kernel: Any, name: str) -> List[int]:
    """An extern kernel's call as the eager trace makes it, measured: the
    operator's arguments from the FX node it lowers (its tensors in the
    layouts the kernel's inputs have in the plan)."""
    import torch

    from vramscope._estimate.cpu_measured import NotMeasured, is_16bit_matmul, scratch

    packet = getattr(kernel, "overloadpacket", None)
    origin = next((n for n in getattr(ir, "origins", ()) if getattr(getattr(n, "target", None), "overloadpacket", None) is packet), None)
    if origin is None:
        return []
    inputs = list(getattr(ir, "inputs", []))
    try:
        tensors = iter(
            torch.empty_strided(
                [int(v) for v in i.get_size()], [int(v) for v in i.get_stride()], dtype=i.get_dtype(), device="meta"
            )
            for i in inputs
        )

        def arg(a: Any) -> Any:
            return next(tensors) if isinstance(a, torch.fx.Node) else a

        args = tuple(arg(a) for a in origin.args)
        kwargs = {k: arg(v) for k, v in origin.kwargs.items()}
    except (AttributeError, StopIteration, TypeError, ValueError):
        return []
    if name in ("mm", "addmm", "bmm", "baddbmm") and is_16bit_matmul(name, args) is None:
        return []  # float32 products (MKL) allocate nothing of c10's
    # An ``out=`` variant (ExternKernelOut) is measured as the eager call.
    call = getattr(torch.ops.aten, name).default if getattr(kernel, "_overloadname", "") == "out" else kernel
    try:
        got = scratch(call, name, args, kwargs)
    except NotMeasured:
        return []
    return [got] if got > 0 else []


def _prod(xs: List[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _plan_of(graph: Any, device: str = "cpu") -> GraphPlan:
    """The memory timeline of an Inductor ``GraphLowering`` after scheduling."""
    from torch._inductor.memory import compute_memory_timeline, prepare_planning_info
    from torch.utils._ordered_set import OrderedSet

    sched = graph.scheduler
    inputs = list(graph.graph_inputs.keys())
    outputs = list(graph.get_output_names())
    _peak, freeable = prepare_planning_info(sched.nodes, sched.name_to_buf, sched.name_to_fused_node, OrderedSet(inputs), OrderedSet(outputs))
    infos, _, _ = compute_memory_timeline(sched.nodes, freeable, OrderedSet(outputs))
    steps: List[Tuple[List[Tuple[str, int]], List[str]]] = [([], []) for _ in sched.nodes]
    sizes: Dict[str, int] = {}
    for info in infos:
        buf = info.buffer
        name = buf.get_name() if hasattr(buf, "get_name") else buf.name
        if name in graph.graph_inputs:
            sizes[name] = int(info.size_free)
            continue  # inputs: freed after their last read, below
        elif info.size_free > 0 and 0 <= info.start_step < len(steps):
            # A buffer's bytes are what its free gives back: the outputs of
            # an operation with several (a fallback kernel's) each hold
            # their own, while the operation's own node allocates their sum
            # and frees nothing (torch._inductor.memory).
            steps[info.start_step][0].append((name, int(info.size_free)))
        if info.end_step != -1 and 0 <= info.end_step < len(steps):
            steps[info.end_step][1].append(name)
    for step, node in enumerate(sched.nodes):
        for i, size in enumerate(_kernel_scratch(node, device)):
            name = f"{node.get_name()}.scratch{i}"
            steps[step][0].append((name, size))
            steps[step][1].append(name)
    # Every input is let go after its last read: the generated code
    # deletes its reference, and AOTAutograd has cleared the saved tensors'
    # own. (torch._inductor.memory keeps inputs named like parameters,
    # "primals_*", for good; in backward those are often the forward's
    # copies of them, a weight in another layout.)
    last: Dict[str, int] = {}
    for step, node in enumerate(sched.nodes):
        for dep in node.read_writes.reads:
            if dep.name in graph.graph_inputs:
                last[dep.name] = step
    for name in inputs:
        if steps:
            steps[last.get(name, 0)][1].append(name)
    gm = graph.module if hasattr(graph.module, "graph") else graph.orig_gm
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    args = out_node.args[0] if isinstance(out_node.args[0], (list, tuple)) else [out_node.args[0]]
    nodes = [getattr(a, "name", "") for a in args]
    return GraphPlan(bool(graph.is_backward), steps, inputs, outputs, sizes, nodes)


@contextlib.contextmanager
def _planning(plans: List[GraphPlan], device: str = "cpu") -> Iterator[None]:
    """Inductor as usual up to its scheduler; then the plan is read and the
    graph runs eagerly instead of being compiled."""
    import torch
    import torch._inductor.config as config
    from torch._inductor.graph import GraphLowering

    original = GraphLowering.compile_to_module

    def compile_to_module(self: Any) -> Any:
        self._update_scheduler()
        plans.append(_plan_of(self, device))
        gm = self.module if isinstance(self.module, torch.fx.GraphModule) else self.orig_gm

        def call(args: list) -> Any:
            out = torch.fx.Interpreter(gm).run(*args)
            args.clear()
            return out

        return types.SimpleNamespace(call=call, __file__="", runner=None)

    GraphLowering.compile_to_module = compile_to_module  # type: ignore[method-assign]
    try:
        with config.patch(fx_graph_cache=False, fx_graph_remote_cache=False, autotune_local_cache=False):
            yield
    finally:
        GraphLowering.compile_to_module = original  # type: ignore[method-assign]


def compiled_modules(model: Any) -> List[Tuple[str, Any]]:
    """``(name, OptimizedModule)`` of every module ``torch.compile`` wraps,
    outermost first (one inside another is planned as part of it)."""
    out: List[Tuple[str, Any]] = []
    for name, m in (model.named_modules() if hasattr(model, "named_modules") else []):
        if type(m).__name__ == "OptimizedModule" and not any(name.startswith(n + ".") or n == "" for n, _ in out):
            out.append((name, m))
    return out


def capture(
    model: Any,
    state: Dict[str, Any],
    inputs: Tuple[Any, ...],
    labels: Tuple[Any, ...],
    loss_fn: Optional[Callable[..., Any]],
    device: str,
    region: Callable[[], Any],
    inference: bool,
) -> Dict[str, ModulePlan]:
    """Compile each compiled module of ``model`` with Inductor on fake
    tensors of ``device`` (CUDA estimates without a GPU: the CPU) and
    return its plans, by the module's name. ``state``: the trace's meta
    parameters and buffers, by name."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.nn.utils.stateless import _reparametrize_module

    # Dynamo initialises CUDA for CUDA tensors, fake or not: without a GPU
    # the graphs are captured and scheduled for the CPU.
    where = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
    targets = compiled_modules(model)
    if not targets:
        return {}
    fake = FakeTensorMode(allow_non_fake_inputs=False)

    def faked(t: Any, param: bool = False) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        with fake:
            f = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=where)
        return torch.nn.Parameter(f, requires_grad=t.requires_grad) if param else f

    if len(targets) > 1:
        raise NotCaptured(f"{len(targets)} of its modules are compiled apart ({', '.join(n for n, _ in targets)}); one is planned")
    fstate = {n: faked(t, isinstance(t, torch.nn.Parameter)) for n, t in state.items()}
    finputs = tuple(faked(x) for x in inputs)
    flabels = tuple(faked(y) for y in labels)
    # Backward is compiled lazily, when it first runs: one list for the
    # whole capture, in the order Inductor planned the graphs.
    got: List[GraphPlan] = []
    plans: Dict[str, List[GraphPlan]] = {}
    swaps: List[Tuple[Any, str, Any]] = []
    root = model
    for name, om in targets:
        plans[name] = got
        fresh = torch.compile(om._orig_mod, backend=_inductor)
        if name == "":
            root = fresh
        else:
            parent_name, _, attr = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            swaps.append((parent, attr, parent._modules[attr]))
            parent._modules[attr] = fresh
    try:
        with _reparametrize_module(model, fstate, tie_weights=True, strict=False), _planning(got, where), fake, _no_autocast_for(device, where):
            with torch.no_grad() if inference else contextlib.nullcontext(), region():
                out = root(*finputs)
                loss = None
                if not inference:
                    loss = loss_fn(out, *flabels) if loss_fn is not None else (out if isinstance(out, torch.Tensor) else out[0]).sum()
            del out
            if loss is not None:
                loss.backward()
    except NotCaptured:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of the capture is a reason to trace eagerly
        inner = e
        while inner.__cause__ is not None and not isinstance(inner, NotCaptured):
            inner = inner.__cause__
        if isinstance(inner, NotCaptured):
            raise inner from None
        raise NotCaptured(f"Inductor could not compile it on fake tensors here ({type(e).__name__}: {str(e)[:200]})") from e
    finally:
        for parent, attr, old in swaps:
            parent._modules[attr] = old
        # The capture's compiled code is no one's: Dynamo's caches are
        # emptied, so that it counts towards no recompilation limit (the
        # program's own compiled code is compiled again at its next call).
        torch._dynamo.reset()
    out_plans: Dict[str, ModulePlan] = {}
    for name, got in plans.items():
        fw = [p for p in got if not p.backward]
        bw = [p for p in got if p.backward]
        if len(fw) != 1 or len(bw) > 1 or (not inference and len(bw) != 1):
            raise NotCaptured(f"it compiles into {len(fw)} forward and {len(bw)} backward graphs (graph breaks)")
        # The forward's own outputs are those backward does not take.
        saved = set(bw[0].inputs) if bw else set()
        f = fw[0]
        user = [o for node, o in zip(f.output_nodes, f.outputs) if node not in saved] if len(f.output_nodes) == len(f.outputs) else list(f.outputs)
        out_plans[name] = ModulePlan(f, bw[0] if bw else None, user)
    return out_plans


@contextlib.contextmanager
def _no_autocast_for(device: str, where: str) -> Iterator[None]:
    """A capture on another device than the estimate's cannot follow the
    estimate's autocast (CUDA's lists act on CUDA tensors only): entering it
    ends the capture."""
    if device == where:
        yield
        return
    import torch.amp.autocast_mode as am

    init = am.autocast.__init__

    def __init__(self: Any, device_type: str, dtype: Any = None, enabled: bool = True, cache_enabled: Any = None) -> None:
        if device_type == device and enabled:
            raise NotCaptured(f"it runs under torch.autocast({device!r}), which a capture on the {where.upper()} (no GPU here) cannot follow")
        init(self, device_type, dtype, enabled, cache_enabled)

    am.autocast.__init__ = __init__  # type: ignore[method-assign]
    try:
        yield
    finally:
        am.autocast.__init__ = init  # type: ignore[method-assign]


def _inductor(gm: Any, example_inputs: List[Any]) -> Any:
    """Inductor itself, as ``torch.compile``'s default backend (a function
    of this module, so that the capture's compiled code is never the
    user's: Dynamo's cache entries are per backend)."""
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs)


class Replay:
    """The plans in the trace: hooks on each compiled module that hide its
    eager storages and record the plan's buffers instead."""

    def __init__(self, rec: Any, plans: Dict[str, ModulePlan]) -> None:
        self.rec = rec
        self.plans = plans
        self.handles: List[Any] = []
        self.saved: List[Dict[str, Any]] = []  # per forward not yet backwarded: bw input name -> buffer

    def install(self, model: Any) -> None:
        for name in self.plans:
            module = model.get_submodule(name) if name else model
            plan = self.plans[name]
            self.handles.append(module.register_forward_pre_hook(lambda m, a, _p=plan: self._begin_forward(_p)))
            self.handles.append(module.register_forward_hook(lambda m, a, out, _p=plan: self._end_forward(_p, out)))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

    def _buffer(self, size: int, category: str) -> Any:
        import torch

        t = torch.empty(size, dtype=torch.uint8, device="meta")
        self.rec.track(t, category, force=True)
        return t

    def _begin_forward(self, plan: ModulePlan) -> None:
        self.rec.paused += 1

    def _end_forward(self, plan: ModulePlan, out: Any) -> None:
        import torch
        import torch.utils._pytree as pytree

        self.rec.paused -= 1
        fw = plan.forward
        outputs = set(fw.outputs)
        user = set(plan.user_outputs)
        grad = torch.is_grad_enabled() and plan.backward is not None
        live: Dict[str, Any] = {}
        for allocs, frees in fw.steps:
            for name, size in allocs:
                if name in user:
                    continue  # the eager output, recorded below
                if name in outputs and not grad:
                    continue
                live[name] = self._buffer(size, "activation")
            for name in frees:
                live.pop(name, None)
        for leaf in pytree.tree_leaves(out):
            self.rec.track(leaf)
        if not grad:
            return
        # The saved tensors, as backward names them: after the forward's
        # nodes. (Outputs that are no buffer of their own, a parameter kept
        # for backward, hold nothing here.)
        bw = plan.backward
        by_node = dict(zip(fw.output_nodes, fw.outputs)) if len(fw.output_nodes) == len(fw.outputs) else {}
        saved = {n: live.get(by_node.get(n, "")) for n in bw.inputs if not n.startswith("tangents")}
        tensors = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
        if not tensors:
            return
        state = {"saved": saved, "plan": plan, "done": False}
        self.saved.append(state)
        for t in tensors:
            t.register_hook(lambda g, _s=state: self._begin_backward(_s) or None)

    def _begin_backward(self, state: Dict[str, Any]) -> None:
        """The module's backward starts (the gradient of an output reached
        it): its plan is recorded now, and the eager backward hidden."""
        if state["done"]:
            return
        state["done"] = True
        bw = state["plan"].backward
        saved = state["saved"]
        outputs = set(bw.outputs)
        live: Dict[str, Any] = {}
        grads: List[Any] = []
        for allocs, frees in bw.steps:
            for name, size in allocs:
                buf = self._buffer(size, "temporary")
                (grads.append(buf) if name in outputs else live.__setitem__(name, buf))
            for name in frees:
                live.pop(name, None)
                saved.pop(name, None)
        saved.clear()
        # The gradients themselves are the eager ones, recorded when
        # backward ends; the plan's stand-ins go then.
        self.rec.paused += 1
        self.pending_grads = grads

    def end_backward(self, params: Dict[str, Any]) -> None:
        """After ``loss.backward()``: the eager gradients take the place of
        the plan's."""
        if getattr(self, "pending_grads", None) is None:
            return
        self.rec.paused -= 1
        self.pending_grads = None
        for p in params.values():
            if p.grad is not None:
                self.rec.track(p.grad, "gradient")
        self.saved = [s for s in self.saved if not s["done"]]

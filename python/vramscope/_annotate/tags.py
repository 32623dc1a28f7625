"""What the memory is, told by the program itself while it runs.

A snapshot says when memory was allocated and where in the code; only the
running program knows which tensors are the model's parameters, their
``.grad`` and the optimizer's state. While a recording runs, global hooks
(no model or optimizer needs to be passed) note them:

* every optimizer step (``register_optimizer_step_pre_hook`` /
  ``..._post_hook``): the parameters of its groups, their gradients and the
  tensors in ``optimizer.state``;
* every module call (``register_module_forward_pre_hook``), once per module:
  its parameters, so models that never step an optimizer (inference) are
  covered too; and the tensors given to the outermost call that need no
  gradient, by position or by keyword (``model(input_ids=..., labels=...)``,
  read from the call's frame: the hook is given positions only): the batch;
* each call of one of the model's repeated blocks (the layers of a
  ``ModuleList`` or ``Sequential`` of one composite class), as a
  ``vramscope.block#NAME`` range in the snapshot's annotations: which
  allocations belong to which layer, which stacks cannot tell (every layer
  runs the same lines), for ``vramscope advise``'s checkpointing;
* at every dump, all of the above again, for what changed since.

Each tensor is named once per (storage address, category): on CUDA with
``torch.cuda.memory._annotate_tensor`` (an ``annotate`` trace entry that
PyTorch's own viewer shows too); elsewhere as a row of the snapshot's
``vramscope_tags`` columns (``device``, ``addr``, ``time_us``, ``category``),
a key other readers ignore. On CUDA the phases are stamped too: ``phase=``
in the thread's allocation metadata (``_set_memory_metadata``) around the
optimizer step and the outermost module call, composed with any metadata the
program set itself; backward runs on autograd's device threads, which that
setting does not reach, so a pre-hook on the grad_fn of the model's output
stamps ``phase=backward`` on the thread that runs it (once: those threads run
nothing else). ``zero_grad`` and moving the batch to the device have no
global hook; vramscope tells them apart by their stacks. Which block each
stretch of backward was for, and that stamp, are
:mod:`vramscope._annotate.backward_spans`'s.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import sys
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional

from vramscope._annotate import hooks as _hooks
from vramscope._annotate.backward_spans import _PHASE, BackwardSpans, _now_us
from vramscope._annotate.forward_spans import ForwardSpans
from vramscope._annotate.modules import ModuleMap
from vramscope._annotate.optimizers import describe


def _reads_only(fn: Any) -> Any:
    """Run ``fn`` with torch function handling off. The Tagger reads
    tensors (``.grad``, ``data_ptr``, ``storage_offset``, the device), which
    allocates nothing; a recorder's ``TorchFunctionMode`` (the CPU
    allocator's stacks) would see each read: four per parameter at every
    optimizer step, 388 calls a step for a GPT of 77 parameters, where the
    model's own step made 1,604 (1.2 ms of a 15 ms CPU step)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with _no_torch_function():
            return fn(*args, **kwargs)

    return run


def _no_torch_function() -> Any:
    import torch

    guard = getattr(torch._C, "DisableTorchFunction", None)
    return guard() if guard is not None else contextlib.nullcontext()


class Tagger(BackwardSpans, ForwardSpans):
    """Global hooks that name parameters, gradients and optimizer state (and,
    on CUDA, the forward and optimizer phases) while a recording runs."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.rows: Dict[str, List[Any]] = {"device": [], "addr": [], "time_us": [], "category": []}
        self._named: Dict[tuple, str] = {}
        self._optimizers: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._stepped: "weakref.WeakSet[Any]" = weakref.WeakSet()
        # What each optimizer kept after its first step, by id (the
        # optimizer may be gone when the snapshot is written).
        self._described: Dict[int, Dict[str, Any]] = {}
        self._seen: set = set()
        # Parameter id -> the gradient tensor last named (weakly held).
        self._grads: Dict[int, Any] = {}
        self._modules: "weakref.WeakSet[Any]" = weakref.WeakSet()
        # The model's repeated blocks (the layers of a ModuleList or
        # Sequential of one composite class), by id, with their names; each
        # call is kept as (start µs, end µs, name): what `vramscope advise`
        # needs to tell one layer's saved activations from the next's
        # (activation checkpointing), which stacks cannot (every layer runs
        # the same lines).
        self._blocks: Dict[int, str] = {}
        # The modules beside the blocks whose backward is named too (an LM
        # head, an embedding), by id: their backward spans, no forward's.
        self._parts: Dict[int, str] = {}
        self._open_blocks: List[tuple] = []
        # The storages the last outermost calls returned, by (device,
        # address) -> the storage's identity: a module's output given to
        # the next outermost call (a GAN's generated images to its
        # discriminator, `fake.detach()`; features to a probe) is that
        # module's activation, not the batch. Bounded: only the latest few
        # can be handed on.
        self._outputs: "collections.OrderedDict[tuple, Any]" = collections.OrderedDict()
        # The autocast states the outermost forward calls ran under ("off",
        # "bfloat16", "float16").
        self.autocast: set = set()
        self.block_spans: "collections.deque[tuple]" = collections.deque(maxlen=200_000)
        BackwardSpans.__init__(self)
        ForwardSpans.__init__(self)
        # Which code is which module (path, class, forward's lines) for
        # every outermost module called: what names the part of a model
        # that made memory its stack shows only as `forward`.
        self.module_map = ModuleMap()
        # Wraps the allocations of torch.compile's generated modules
        # (``_generated.GeneratedStacks``; CPU allocator recordings).
        self.generated: Optional[Any] = None
        self._local = threading.local()
        # ``(mark, stamp, stack)`` of a recorder that stamps stacks on
        # allocations after the fact (the CPU allocator hooks), or None.
        self.bracket: Optional[tuple] = None
        # Takes the holders of tensors now and then (``_holders.Sampler``).
        self.sampler: Optional[Any] = None
        # Told of each optimizer step (the session cuts iterations there).
        self.on_step: Optional[Any] = None
        # Told of each outermost module call.
        self.on_call: Optional[Any] = None
        self._compiles_at_install = self._compiles_scanned = 0
        self._annotate = None
        self._set_meta = self._get_meta = None
        if cuda:
            import torch

            mem = torch.cuda.memory
            self._annotate = getattr(mem, "_annotate_tensor", None)
            if hasattr(mem, "_set_memory_metadata") and hasattr(mem, "_get_memory_metadata"):
                self._set_meta, self._get_meta = mem._set_memory_metadata, mem._get_memory_metadata

    # ----- installing -----

    def install(self) -> None:
        import torch

        from vramscope._annotate.ema import walk_again

        self._tensor = torch.Tensor
        _hooks.activate(self)
        self._compiles_at_install = self._compiles_scanned = _hooks.compiles()
        walk_again()  # (a recording's live state never reads an earlier one's EMAs)

    def uninstall(self) -> None:
        _hooks.deactivate(self)

    # ----- hooks -----

    def _step_pre(self, opt: Any, args: Any, kwargs: Any) -> None:
        # Parameters and state keep their storage from step to step: they
        # are named at the first step (and at every dump); gradients are new
        # allocations every iteration when zero_grad sets them to None.
        self.end_backward()
        first = opt not in self._optimizers
        self._optimizers.add(opt)
        self._tag_optimizer(opt, everything=first)
        self._enter_phase("optimizer")

    def _step_post(self, opt: Any, args: Any, kwargs: Any) -> None:
        self._leave_phase()
        if self.on_step is not None:
            self.on_step(opt)
        if self.sampler is not None:
            self.sampler.maybe("step")
        if opt not in self._stepped:
            self._stepped.add(opt)
            self._tag_optimizer(opt, everything=True)  # state created by the first step
            self._describe(opt)

    def _forward_pre(self, module: Any, args: Any) -> None:
        # Runs on every module call: a set of ids is the cheap test (the
        # weak set, for dumps, is only touched the first time).
        if id(module) not in self._seen:
            if getattr(self._local, "depth", 0) == 0:
                self._find_blocks(module)
                self.module_map.add(module)
            self._seen.add(id(module))
            # torch.compile(module) wraps it in an OptimizedModule whose call
            # runs here, outside the compiled graph; the modules inside run in
            # the graph, where no hook runs: they are named from the wrapper.
            inner = getattr(module, "_orig_mod", None)
            for m in module.modules() if inner is not None else (module,):
                self._seen.add(id(m))
                self._modules.add(m)
                for p in m.parameters(recurse=False):
                    self.tag(p, "parameter")
        local = self._local
        depth = getattr(local, "depth", 0)
        if self._blocks:
            name = self._blocks.get(id(module))
            if name is not None:
                self._open_blocks.append((name, _now_us()))
        if depth == 0:
            if self._open_backward is not None and not _in_backward():
                self.end_backward()
            if self.on_call is not None:
                self.on_call(module)
            if self.sampler is not None:  # the program's loop is on the stack here
                # A call inside backward (a checkpointed block recomputed)
                # is another kind of moment than the forward's: it sees the
                # backward's high water, which later forwards never reach.
                self.sampler.maybe("backward" if _in_backward() else "call")
            # The outermost module call: the tensors it is given (that need
            # no gradient) are the batch, unless an earlier outermost call
            # made them.
            given = (*(args if isinstance(args, tuple) else (args,)), *_call_kwargs(module).values())
            for a in given:
                if isinstance(a, self._tensor) and not a.requires_grad and not self._was_output(a):
                    self.tag(a, "input")
            self._note_autocast()
            if not _in_backward():  # (a checkpointed block recomputed is no forward of the program)
                self._begin_forward()
            if self.generated is not None:
                self.generated.refresh()
            self._enter_phase("forward")
            if self.bracket is not None:
                local.since = self.bracket[0]()
        local.depth = depth + 1

    @staticmethod
    def _storage_of(t: Any) -> Optional[tuple]:
        """``((device index, address), storage, device)`` of the memory
        behind ``t`` (a tensor that holds it: see ``_local``), or None for a
        tensor without storage (meta, sparse). The storage's ``_cdata``
        tells a new allocation at a reused address from the old one."""
        try:
            storage = t.untyped_storage()
            dev = t.device
            return (dev.index or 0, storage.data_ptr()), storage, dev
        except (RuntimeError, AttributeError, NotImplementedError):
            return None

    def _remember_outputs(self, output: Any) -> None:
        """The tensors an outermost call returned (one level into a tuple,
        list or dict: a model's output object), the latest 64 kept."""
        if isinstance(output, dict):
            items = list(output.values())
        elif isinstance(output, (tuple, list)):
            items = list(output)
        else:
            items = [output]
        for t in items:
            if isinstance(t, self._tensor):
                found = self._storage_of(_local(t))
                if found is not None:
                    key, storage, _ = found
                    self._outputs.pop(key, None)
                    self._outputs[key] = getattr(storage, "_cdata", None)
                    while len(self._outputs) > 64:
                        self._outputs.popitem(last=False)

    def _was_output(self, t: Any) -> bool:
        """Whether ``t``'s storage is one an outermost call returned (the
        same storage object, not only its address reused)."""
        if not self._outputs:
            return False
        found = self._storage_of(_local(t))
        return found is not None and self._outputs.get(found[0], ()) == getattr(found[1], "_cdata", None)

    def _note_autocast(self) -> None:
        """Whether the outermost forward ran under ``torch.autocast`` of the
        recorded device, and to which dtype: a snapshot records sizes, not
        dtypes, and `vramscope advise` must not halve activations that are
        16-bit already."""
        try:
            import torch

            dev = "cuda" if self.cuda else "cpu"
            state = str(torch.get_autocast_dtype(dev)).replace("torch.", "") if torch.is_autocast_enabled(dev) else "off"
        except (AttributeError, RuntimeError, TypeError):
            return
        self.autocast.add(state)

    def _find_blocks(self, root: Any) -> None:
        """The repeated blocks under an outermost module seen for the first
        time: the children of a ``ModuleList`` or ``Sequential`` when there
        are two or more, all of one class that has modules of its own
        (transformer layers, residual stages; not a ``Sequential`` of
        convolutions and activations)."""
        import torch.nn as nn

        containers: set = set()
        try:
            for cname, c in root.named_modules():
                if not isinstance(c, (nn.ModuleList, nn.Sequential)):
                    continue
                kids = list(c.named_children())
                if len(kids) < 2 or len({type(k) for _, k in kids}) != 1:
                    continue
                if next(iter(kids[0][1].children()), None) is None:
                    continue
                for kname, k in kids:
                    self._blocks.setdefault(id(k), f"{cname}.{kname}" if cname else kname)
                    containers.add(cname)
            self._find_parts(root, containers)
        except Exception:  # a module whose named_modules fails: no blocks
            pass

    def _find_parts(self, root: Any, containers: set) -> None:
        """The modules beside the repeated blocks whose backward is named
        too (an LM head, an embedding, a final norm): the children, with
        parameters of their own, of the blocks' container's ancestors,
        those that hold no blocks. Their backwards and the blocks' never
        overlap (each runs whole before or after the others)."""
        if not containers:
            return
        ancestors = {""}
        for c in containers:
            parts = c.split(".") if c else []
            ancestors.update(".".join(parts[:i]) for i in range(len(parts) + 1))
        modules = dict(root.named_modules())
        for a in ancestors:
            parent = modules.get(a)
            if parent is None:
                continue
            for kname, k in parent.named_children():
                path = f"{a}.{kname}" if a else kname
                if path in ancestors or path in containers or id(k) in self._blocks:
                    continue
                if next(k.parameters(), None) is not None:
                    self._parts.setdefault(id(k), path)

    def _forward_post(self, module: Any, args: Any, output: Any) -> None:
        if self._open_blocks and self._blocks.get(id(module)) == self._open_blocks[-1][0]:
            name, start = self._open_blocks.pop()
            self.block_spans.append((start, _now_us(), name))
            # Inside backward this is a checkpointed block's recomputation:
            # reentrant checkpointing (its forward ran without grad, so
            # nothing was watched then) backpropagates through the graph it
            # makes, whose nodes name the block's backward; the
            # non-reentrant kind only takes saved tensors from it, and those
            # nodes never run.
            self._watch_block_backward(name, args, output)
        elif self._parts:
            part = self._parts.get(id(module))
            if part is not None and not _in_backward():
                self._watch_block_backward(part, args, output)
        local = self._local
        depth = getattr(local, "depth", 0)
        if depth <= 0:
            return
        local.depth = depth - 1
        if depth != 1:
            return
        self._remember_outputs(output)
        self._end_forward(module, output)
        if self.generated is not None:  # a first call compiles: wrap its code for backward
            self.generated.refresh()
        if self.bracket is not None:
            # What the outermost call allocated and nothing gave a stack:
            # a compiled graph's own allocations (Inductor's code calls no
            # torch API the stacks' function mode sees). They get the stack
            # of the call, from _call_impl out (this hook and _module_post
            # skipped).
            mark, stamp, stack = self.bracket
            stamp(getattr(local, "since", mark()), stack(2))
        if self._set_meta is not None:
            self._leave_phase()
            self._watch_backward(output)

    # ----- phases (CUDA allocation metadata) -----

    def _enter_phase(self, phase: str) -> None:
        if self._set_meta is None:
            return
        prev = self._get_meta() or ""
        stack = getattr(self._local, "saved", None)
        if stack is None:
            stack = self._local.saved = []
        stack.append(prev)
        own = ";".join(p for p in prev.split(";") if p and not p.startswith(_PHASE))
        self._set_meta(f"{own};{_PHASE}{phase}" if own else f"{_PHASE}{phase}")

    def _leave_phase(self) -> None:
        stack = getattr(self._local, "saved", None)
        if self._set_meta is None or not stack:
            return
        self._set_meta(stack.pop())

    # ----- naming tensors -----

    @_reads_only
    def _tag_optimizer(self, opt: Any, everything: bool = True) -> None:
        import torch

        state = opt.state
        grads = self._grads
        now = _now_us()  # (one moment for the step's gradients)
        for group in opt.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is not None:
                    # The same gradient tensor as at the last step (no
                    # zero_grad, or set_to_none=False) is already named.
                    seen = grads.get(id(p))
                    if everything or seen is None or seen() is not g:
                        self._tag_gradient(g, now)
                        try:
                            grads[id(p)] = weakref.ref(g)
                        except TypeError:
                            pass
                if not everything:
                    continue
                self.tag(p, "parameter")
                for v in state.get(p, {}).values() if p in state else ():
                    if isinstance(v, torch.Tensor):
                        self.tag(v, "optimizer_state")

    def at_step(self) -> None:
        """At ``vramscope.step()``, once torch.compile has compiled something
        in this recording: inside compiled code no hook runs (a compiled
        optimizer step calls none, a compiled function calls its modules in
        the graph), so what the hooks would have named is named here, from
        the optimizers (found among Python's objects after each new
        compilation) and the modules known."""
        _hooks.watch_compiles()  # (a program may have called torch._dynamo.reset())
        compiles = _hooks.compiles()
        if compiles == self._compiles_at_install:
            return
        try:
            if compiles != self._compiles_scanned:
                self._compiles_scanned = compiles
                self._find_optimizers()
            self.tag_all()
        except Exception:  # noqa: BLE001 - names are a help; the program goes on whatever happens here
            pass

    def _find_optimizers(self) -> None:
        import gc

        import torch

        Optimizer = torch.optim.Optimizer
        for o in gc.get_objects():
            # type(), not isinstance(): a dead weak proxy raises on __class__.
            if issubclass(type(o), Optimizer) and o not in self._optimizers:
                self._optimizers.add(o)
                self._stepped.add(o)

    def _describe(self, opt: Any) -> None:
        try:
            self._described[id(opt)] = describe(opt)
        except Exception:  # noqa: BLE001 - a description is a help; the program goes on
            pass

    def optimizers(self, refresh: bool = True) -> List[Dict[str, Any]]:
        """What each optimizer that stepped keeps: described again if it is
        still alive (state can be made later, for parameters that had no
        gradient at the first step), else as it was after its first step.
        ``refresh=False`` off the program's thread, where no tensor is read."""
        for opt in list(self._stepped) if refresh else ():
            self._describe(opt)
        return list(self._described.values())

    @_reads_only
    def tag_all(self) -> None:
        """Name everything known again (before a dump), and the copies of
        the weights that EMAs keep (``_annotate/ema.py``), which a module's
        forward named parameters if the EMA model ran one."""
        from vramscope._annotate.ema import ema_tensors

        ema = ema_tensors()
        copies = {id(t) for t in ema}
        for opt in list(self._optimizers):
            self._tag_optimizer(opt)
        for m in list(self._modules):
            for p in m.parameters(recurse=False):
                if id(p) not in copies:
                    self.tag(p, "parameter")
                if p.grad is not None:
                    self.tag(p.grad, "gradient")
        for t in ema:
            self.tag(t, "ema")

    @_reads_only
    def current(self) -> Dict[tuple, str]:
        """``(device index, address) -> category`` of the tensors known now:
        an EMA's copy, parameters, their gradients and optimizer state, read
        from the EMAs, modules and optimizers themselves (not from earlier names, whose
        addresses the allocator may have given to other tensors since). For
        the live state; a few µs per parameter."""
        import torch

        out: Dict[tuple, str] = {}

        def put(t: Any, category: str) -> None:
            t = _local(t)
            try:
                st = t.untyped_storage()
                if self._wanted(t.device) and st.nbytes():
                    out.setdefault((t.device.index or 0, st.data_ptr()), category)
            except (RuntimeError, AttributeError, NotImplementedError):
                pass

        # An EMA's copy first: its model, if it ran a forward, is among the
        # modules (the first name of an address stays).
        from vramscope._annotate.ema import LIVE_RESCAN_S, ema_tensors

        for t in ema_tensors(max_age_s=LIVE_RESCAN_S):
            put(t, "ema")
        for opt in list(self._optimizers):
            for group in list(opt.param_groups):
                for p in list(group["params"]):
                    put(p, "parameter")
                    if p.grad is not None:
                        put(p.grad, "gradient")
                    for v in list(opt.state.get(p, {}).values()) if p in opt.state else ():
                        if isinstance(v, torch.Tensor):
                            put(v, "optimizer_state")
        for m in list(self._modules):
            for p in m.parameters(recurse=False):
                put(p, "parameter")
                if p.grad is not None:
                    put(p.grad, "gradient")
        return out

    def tag(self, t: Any, category: str) -> None:
        """Name the allocation behind ``t``, once per address and category."""
        t = _local(t)
        found = self._storage_of(t)
        if found is None:
            return  # meta, sparse or otherwise storage-less tensors
        key, storage, dev = found
        addr = key[1]
        try:
            if not addr or storage.nbytes() == 0:
                return
        except (RuntimeError, AttributeError, NotImplementedError):
            return
        if not self._wanted(dev):
            return
        # An address is named again when a new allocation took it (a new
        # gradient each step with set_to_none): the storage tells them apart.
        mark = (category, getattr(storage, "_cdata", None))
        if self._named.get(key) == mark:
            return
        self._named[key] = mark
        if self._annotate is not None:
            try:
                self._annotate(t, f"category={category}")
                return
            except (RuntimeError, ValueError):
                pass
        self._row(dev.index or 0, addr, _now_us(), category)

    def _row(self, device: int, addr: int, time_us: int, category: str) -> None:
        """One row of the ``vramscope_tags`` columns."""
        r = self.rows
        r["device"].append(device)
        r["addr"].append(addr)
        r["time_us"].append(time_us)
        r["category"].append(category)

    def _tag_gradient(self, g: Any, now: int) -> None:
        """``tag(g, "gradient")`` for a gradient not named before (a new
        tensor each step under ``zero_grad(set_to_none=True)``), by the
        short path where it is a plain tensor at the start of its storage:
        its address and device read from the tensor, no storage object
        made, and no test against the address's last name (the allocator
        gives the new gradient the last one's address; the caller has
        already told the tensors apart). 77 gradients a step: 128 µs on an
        H200's host by the general path; about half that by this one."""
        if self._annotate is not None or type(g) is not _plain()[0]:
            return self.tag(g, "gradient")
        try:
            if g.is_cuda != self.cuda:
                return None
            if g.storage_offset():
                return self.tag(g, "gradient")
            addr = g.data_ptr()
            index = max(g.get_device(), 0)
        except (RuntimeError, AttributeError, NotImplementedError):
            return None
        if not addr:
            return None
        self._named[(index, addr)] = ("gradient", None)
        self._row(index, addr, now, "gradient")

    def _wanted(self, dev: Any) -> bool:
        """Tensors of the recorded device kind (the CPU recorder sees CPU
        memory, the CUDA one CUDA memory)."""
        return (dev.type == "cuda") == self.cuda

    def columns(self) -> Optional[Dict[str, List[Any]]]:
        """The ``vramscope_tags`` columns for a snapshot, or None."""
        if not self.rows["addr"]:
            return None
        return {k: list(v) for k, v in self.rows.items()}


def _call_kwargs(module: Any) -> Dict[str, Any]:
    """The keyword arguments of the module call under way. A global
    forward pre-hook gets the positional ones only, but Hugging Face models
    are called with keywords (``model(input_ids=..., labels=...)``): they
    are read from ``Module._call_impl``'s frame, a few frames above the
    hook (its ``self`` the module). Nothing where it is not found."""
    f = sys._getframe(1)
    for _ in range(6):
        if f is None:
            break
        if f.f_code.co_name == "_call_impl" and f.f_locals.get("self") is module:
            kwargs = f.f_locals.get("kwargs")
            return kwargs if isinstance(kwargs, dict) else {}
        f = f.f_back
    return {}


def _local(t: Any) -> Any:
    """The tensor that holds the memory: a DTensor's local shard (FSDP2's
    parameters and gradients), the tensor inside ``torch.func``'s wrappers
    (``grad``, ``vmap``: parameters given to ``functional_call``), else
    ``t``."""
    if type(t) not in _plain():  # (a plain tensor's missing attribute costs an exception)
        local = getattr(t, "_local_tensor", None)
        if local is not None:
            return local
    unwrap = _functorch()
    if unwrap is not None:
        wrapped, inner = unwrap
        for _ in range(16):  # one level per nested transform
            if not wrapped(t):
                break
            t = inner(t)
    return t


def _functorch() -> Optional[tuple]:
    global _FUNCTORCH
    if _FUNCTORCH is None:
        try:
            from torch._C._functorch import get_unwrapped, is_functorch_wrapped_tensor

            _FUNCTORCH = (is_functorch_wrapped_tensor, get_unwrapped)
        except ImportError:
            _FUNCTORCH = ()
    return _FUNCTORCH or None


_FUNCTORCH: Optional[tuple] = None
_PLAIN: tuple = ()


def _plain() -> tuple:
    """``torch.Tensor`` and ``torch.nn.Parameter``: types with no local shard."""
    global _PLAIN
    if not _PLAIN:
        import torch

        _PLAIN = (torch.Tensor, torch.nn.Parameter)
    return _PLAIN


def _in_backward() -> bool:
    """Whether autograd's engine is running a backward on this thread (on
    every outermost module call: the lookup is made once)."""
    global _graph_task_id
    if _graph_task_id is None:
        try:
            import torch

            _graph_task_id = torch._C._current_graph_task_id
        except Exception:  # noqa: BLE001 - an older PyTorch: every call is a forward's
            _graph_task_id = lambda: -1  # noqa: E731
    return _graph_task_id() != -1


_graph_task_id: Optional[Callable[[], int]] = None

"""What holds each tensor alive when the snapshot is written: the path from a
named root (a module global, a local of a running frame, the exception being
handled) to the tensor, found in one breadth-first pass over the objects the
garbage collector can see.

A snapshot knows where each tensor was *allocated*; a leak is fixed where it
is *kept*. The pass names the keeper the way the program spells it:
``losses[*]`` (a global list of ``train.py``), ``model.cache[*]`` (an
attribute set in ``Model.forward``), ``outputs[*]`` (a local of
``validate``), ``last_error.__traceback__.tb_frame.local 'h'``. Tensors a
kept autograd graph saved for backward (``total = total + loss``) cannot be
read without running the graph's unpack hooks, so for each named tensor with
a graph the pass counts the graph's nodes (``graph_nodes``): a graph that
grows from one look to the next is kept across iterations. The leaves a
graph accumulates into are held, not saved: those that are not parameters,
and their gradients, are named through it (``costs[*] (autograd graph)``).

Tensors are grouped by the pattern of their path (list indices and dict keys
become ``[*]``) and each group lists the storages' addresses, which are the
snapshot's block addresses, so that readers can join them to the trace.

The cost is bounded: the pass stops after ``max_objects`` objects or
``max_seconds`` and says so (``complete: false``); see docs/leaks-json.md.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import types
import warnings
from collections import deque
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from vramscope._annotate.refnames import TypeInfo, holds_memory, is_tensor, named_refs

# Defaults of the pass (documented in docs/leaks-json.md).
MAX_OBJECTS = 3_000_000
MAX_SECONDS = 30.0
# Autograd nodes walked, over all kept graphs.
MAX_GRAPH_NODES = 200_000
# The end of a path to the leaves a kept autograd graph holds (the analysis
# reads it: `through_graph`, docs/leaks-json.md).
GRAPH_SUFFIX = " (autograd graph)"

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package
# nn.Module keeps children, parameters and buffers in dicts; the program
# spells them as attributes.
_MODULE_DICTS = ("._modules", "._parameters", "._buffers")


class _Root:
    """A named starting point: ``kind`` is ``global`` (of the module in
    ``file``), ``local`` (of ``function``, running at ``file:line``) or
    ``exception`` (the one being handled)."""

    __slots__ = ("kind", "name", "file", "line", "function", "obj")

    def __init__(self, kind: str, name: str, obj: Any, file: str = "", line: int = 0, function: str = "") -> None:
        self.kind, self.name, self.obj = kind, name, obj
        self.file, self.line, self.function = file, line, function


# Set by ``vramscope run``: the script's globals (its ``__main__`` is not in
# ``sys.modules`` under that name while vramscope's own ``__main__`` is).
main_globals: Optional[Dict[str, Any]] = None


def _ours(filename: str) -> bool:
    """vramscope's frames and the runners' (runpy, importlib): their locals
    hold the program's namespace, not what the program keeps."""
    return filename.startswith(_HERE) or filename.startswith("<frozen") or filename.endswith(("runpy.py", "pytest_plugin.py"))


def _library_dirs() -> Tuple[str, ...]:
    """Where the standard library and installed packages live."""
    import site
    import sysconfig

    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            dirs.add(sysconfig.get_paths()[key])
        except KeyError:
            pass
    try:
        dirs.update(site.getsitepackages())
        dirs.add(site.getusersitepackages())
    except AttributeError:  # a virtualenv's old site module
        pass
    return tuple(os.path.join(os.path.abspath(d), "") for d in dirs if d)


def _frame_locals(f: types.FrameType) -> List[Tuple[str, Any]]:
    """A running function's locals, leaving nothing behind. Up to Python
    3.12 ``f_locals`` copies them into a dict the frame keeps until the
    function returns or the next copy: a tensor the loop then drops would
    stay alive through that dict (one iteration's output kept one iteration
    longer). The copy is emptied once read; the next reader (``locals()``,
    a debugger's trace function) fills it again. From 3.13 on ``f_locals``
    is a view of the frame that keeps nothing (and must not be cleared)."""
    try:
        loc = f.f_locals
        items = list(loc.items())
    except Exception:  # noqa: BLE001 - a frame being torn down
        return []
    if sys.version_info < (3, 13) and type(loc) is dict and loc is not f.f_globals:
        loc.clear()
    return items


def _roots(main_globals: Optional[Dict[str, Any]]) -> Tuple[List[_Root], Set[int]]:
    """Frames first (innermost first; a local is the most specific name),
    then the exception being handled, then the program's globals and its
    other modules' (not those of the standard library or installed
    packages: PyTorch alone has a million objects, and their state is not
    what a program leaks). Also the ids of the module dicts not entered."""
    roots: List[_Root] = []
    # No frame object may stay in a local of a frame on this stack: a frame
    # that refers to itself (`me = sys._getframe()`) outlives its call in a
    # reference cycle, and with it every caller's frame and locals (the
    # program's tensors would then be freed by the cycle collector instead
    # of when its function returns).
    libraries = _library_dirs()
    # The program's own frames first, then the libraries' (a Trainer's
    # `self.model` is the program's `model`): among paths of one length,
    # the first root wins.
    in_library: List[_Root] = []
    frames = sys._current_frames()
    try:
        for frame in frames.values():
            f: Optional[types.FrameType] = frame
            while f is not None:
                code = f.f_code
                if not _ours(code.co_filename) and code.co_flags & 0x1:
                    where = (code.co_filename, f.f_lineno or 0, code.co_qualname if hasattr(code, "co_qualname") else code.co_name)
                    items = _frame_locals(f)
                    into = in_library if os.path.abspath(code.co_filename).startswith(libraries) else roots
                    for k, v in items:
                        if not isinstance(v, types.FrameType):
                            into.append(_Root("local", k, v, *where))
                f = f.f_back
    finally:
        f = frame = None
        frames.clear()
    roots.extend(in_library)
    exc = sys.exc_info()[1]
    if exc is not None:
        roots.append(_Root("exception", type(exc).__name__, exc))
    modules: List[Tuple[str, Dict[str, Any]]] = []
    if main_globals is not None:
        modules.append((str(main_globals.get("__file__") or ""), main_globals))
    main = sys.modules.get("__main__")
    if main is not None and not (getattr(main, "__name__", "") or "").startswith("vramscope"):
        modules.append((str(getattr(main, "__file__", None) or ""), vars(main)))
    skipped: Set[int] = set()
    for name, m in list(sys.modules.items()):
        try:
            d = vars(m)
        except TypeError:
            continue
        file = str(d.get("__file__") or "")
        ours = name == "vramscope" or name.startswith("vramscope.") or (name == "__main__" and file.startswith(_HERE))
        if ours or not file or os.path.abspath(file).startswith(libraries):
            skipped.add(id(d))
        else:
            modules.append((file, d))
    seen: Set[int] = set()
    for where, d in modules:
        if id(d) in seen:
            continue
        seen.add(id(d))
        skipped.discard(id(d))
        for k, v in list(d.items()):
            if not (k.startswith("__") and k.endswith("__")) and not isinstance(v, types.ModuleType):
                roots.append(_Root("global", k, v, where))
    return roots, skipped


# Types whose objects refer to nothing.
_ATOMS = frozenset({int, float, complex, str, bytes, bool, type(None)})


def _kind(t: type, tensor_type: Any, module_type: Any) -> int:
    """1 a tensor; 2 not entered: modules (their globals are roots), classes
    and code (a class's attributes are shared, not what holds a tensor), and
    vramscope's own objects; 3 an ``nn.Module``; 0 anything else."""
    if tensor_type and issubclass(t, tensor_type):
        return 1
    if issubclass(t, (types.ModuleType, type, types.CodeType)):
        return 2
    mod = getattr(t, "__module__", "") or ""
    if mod == "vramscope" or mod.startswith("vramscope."):
        return 2
    if module_type is not None and issubclass(t, module_type):
        return 3
    return 0


def find_holders(
    max_objects: int = MAX_OBJECTS,
    max_seconds: float = MAX_SECONDS,
) -> Dict[str, Any]:
    """The holders of every reachable tensor, grouped; see the module doc."""
    t0 = time.perf_counter()
    gc_was = gc.isenabled()
    gc.disable()  # the pass allocates; a collection in the middle changes nothing it needs
    try:
        with warnings.catch_warnings():
            # Reading some modules' attributes warns (deprecated aliases).
            warnings.simplefilter("ignore")
            return _find(main_globals, max_objects, max_seconds, t0)
    finally:
        if gc_was:
            gc.enable()


def _find(main_globals: Optional[Dict[str, Any]], max_objects: int, max_seconds: float, t0: float) -> Dict[str, Any]:
    roots, skipped = _roots(main_globals)
    # parent[id] = id of the object it was reached from, or -1 - root index.
    parent: Dict[int, int] = {}
    objs: Dict[int, Any] = {}
    queue: deque = deque()
    for i, r in enumerate(roots):
        k = id(r.obj)
        if k not in parent:
            parent[k] = -1 - i
            objs[k] = r.obj
            queue.append(r.obj)
    tensors: List[Any] = []
    modules: List[Any] = []
    torch_mod = sys.modules.get("torch")
    tensor_type = getattr(torch_mod, "Tensor", None) or ()
    module_type = getattr(sys.modules.get("torch.nn"), "Module", None)
    complete = True
    deadline = t0 + max_seconds
    n = 0
    # The loop runs once per object of the program: locals, and a kind per
    # type (1 tensor, 2 not entered, 3 nn.Module, 0 any other) looked up once.
    kinds: Dict[type, int] = {}
    get_referents, is_tracked, popleft, push = gc.get_referents, gc.is_tracked, queue.popleft, queue.append
    atoms = _ATOMS
    while queue:
        o = popleft()
        n += 1
        if n >= max_objects or (n & 0xFFF == 0 and time.perf_counter() > deadline):
            complete = False
            break
        t = type(o)
        kind = kinds.get(t)
        if kind is None:
            kind = kinds[t] = _kind(t, tensor_type, module_type)
        if kind == 2:
            continue
        oid = id(o)
        if kind == 1:
            tensors.append(o)
            grad = _grad(o)
            if grad is not None and id(grad) not in parent:
                parent[id(grad)] = oid
                objs[id(grad)] = grad
                push(grad)
        elif kind == 3:
            modules.append(o)
        for r in get_referents(o):
            if type(r) in atoms:
                continue
            k = id(r)
            if k in parent or k in skipped:
                continue
            if not is_tracked(r) and type(r) is not dict and not isinstance(r, tensor_type):
                continue  # containers of atoms: nothing to find inside
            parent[k] = oid
            objs[k] = r
            push(r)
    namer = _Namer(roots, parent, objs)
    groups: Dict[Tuple[str, str, str, str, str], Dict[str, Any]] = {}
    storages: Set[int] = set()

    def add(t: Any, parts: List[str], root: _Root) -> None:
        if not holds_memory(t):  # a FakeTensor: reading its address warns, and it holds nothing
            return
        try:
            st = t.untyped_storage()
            addr, size = st.data_ptr(), st.nbytes()
        except Exception:  # noqa: BLE001 - a tensor without storage (meta, sparse, a wrapper)
            return
        if addr == 0 or addr in storages:
            return
        storages.add(addr)
        path, pattern = _spell(parts)
        key = (root.kind, root.name, root.file, root.function, pattern)
        g = groups.get(key)
        if g is None:
            g = groups[key] = _group(root, pattern, path)
        g["tensors"] += 1
        g["bytes"] += size
        g["addrs"].append(addr)

    names = _module_names(modules, namer)
    named: List[Tuple[Any, List[str], _Root]] = []
    for t in tensors:
        parts, root = names.get(id(t)) or namer.path(t)
        if root is not None:
            named.append((t, parts, root))
            add(t, parts, root)
    # Graphs kept alive: the size of the autograd graph behind each named
    # tensor that has one (a running sum `total = total + loss` grows one
    # iteration's graph at a time). Only the nodes are walked: reading the
    # tensors a graph saved would run its unpack hooks (activation
    # checkpointing recomputes the forward, save_on_cpu copies back).
    # The leaves a graph accumulates into are no saved tensors: each
    # `AccumulateGrad` node holds its leaf (and so the leaf's `.grad`), which
    # nothing else may hold. A WGAN-GP's `interpolates.requires_grad_()`,
    # its gradient penalty's input, lives on with every `D_cost` kept in a
    # list, with the gradient the penalty's backward gave it: named here as
    # `disc_costs[*] (autograd graph)`, where no path of Python objects
    # reaches them.
    budget = [MAX_GRAPH_NODES]
    parameter_type = getattr(getattr(torch_mod, "nn", None), "Parameter", None) or ()
    for t, parts, root in named:
        if budget[0] <= 0:
            complete = False
            break
        fn = getattr(t, "grad_fn", None)
        if fn is not None:
            leaves: List[Any] = []
            nodes = _graph_nodes(fn, budget, leaves)
            path, pattern = _spell(parts)
            key = (root.kind, root.name, root.file, root.function, pattern)
            g = groups.get(key)
            if g is None:  # its storage was named by another path first
                g = groups[key] = _group(root, pattern, path)
            g["graph_nodes"] = max(g["graph_nodes"], nodes)
            graph_parts = parts + [GRAPH_SUFFIX]
            for leaf in leaves:
                # Parameters are the model's, named through it (or by the
                # optimizer that steps them), whatever graph reaches them.
                if isinstance(leaf, parameter_type):
                    continue
                add(leaf, graph_parts, root)
                grad = _grad(leaf)
                if grad is not None:
                    add(grad, graph_parts, root)
    out = sorted(groups.values(), key=lambda g: -g["bytes"])
    return {
        "holders": out,
        "objects": n,
        "tensors": len(storages),
        "seconds": round(time.perf_counter() - t0, 3),
        "complete": complete,
    }


def _group(root: _Root, pattern: str, example: str) -> Dict[str, Any]:
    """A holder: the root, the path pattern, what it holds (filled by the
    caller)."""
    return {
        "kind": root.kind,
        "name": root.name,
        "file": root.file,
        "line": root.line,
        "function": root.function,
        "type": type(root.obj).__name__,
        "path": pattern,
        "example": example,
        "tensors": 0,
        "bytes": 0,
        "addrs": [],
        "graph_nodes": 0,
    }


def _module_names(modules: List[Any], namer: "_Namer") -> Dict[int, Tuple[List[str], _Root]]:
    """Parameters, buffers and their gradients named through the module that
    owns them (``model.fc1.weight``, ``model.fc1.weight.grad``), not through
    whatever else reached them first (an optimizer's state keys), outermost
    module first."""
    found: List[Tuple[int, List[str], _Root, Any]] = []
    for m in modules:
        parts, root = namer.path(m)
        if root is not None:
            found.append((len(parts), parts, root, m))
    found.sort(key=lambda x: x[0])
    names: Dict[int, Tuple[List[str], _Root]] = {}
    for _, parts, root, m in found:
        try:
            items = list(m.named_parameters()) + list(m.named_buffers())
        except Exception:  # noqa: BLE001 - a module whose traversal raises
            continue
        for name, p in items:
            if p is None or id(p) in names:
                continue
            names[id(p)] = (parts + [f".{name}"], root)
            g = _grad(p)
            if g is not None:
                names.setdefault(id(g), (parts + [f".{name}", ".grad"], root))
    return names


def _grad(t: Any) -> Any:
    try:
        return t.grad if t.is_leaf else None
    except Exception:  # noqa: BLE001 - a subclass whose .grad raises
        return None


class _Namer:
    """Rebuilds the path of an object from the parent links, naming each
    step as the program spells it (``.attr``, ``[3]``, ``['key']``), with
    containers an object owns (its ``__dict__``) folded into it."""

    def __init__(self, roots: List[_Root], parent: Dict[int, int], objs: Dict[int, Any]) -> None:
        self.roots, self.parent, self.objs = roots, parent, objs
        self.labels: Dict[int, Tuple[Dict[int, str], Set[int]]] = {}
        self.infos: Dict[type, TypeInfo] = {}

    def _labels(self, o: Any) -> Tuple[Dict[int, str], Set[int]]:
        got = self.labels.get(id(o))
        if got is None:
            direct = gc.get_referents(o)
            ids = {id(r) for r in direct}
            fold: List[Any] = []
            info = self.infos.get(type(o))
            if info is None:
                info = self.infos[type(o)] = TypeInfo(type(o))
            names: Dict[int, str] = {}
            try:
                for label, r in named_refs(o, direct, ids, fold, info):
                    names.setdefault(id(r), label)
            except Exception:  # noqa: BLE001 - an object whose attributes raise
                pass
            if is_tensor(o):
                g = _grad(o)
                if g is not None:
                    names.setdefault(id(g), ".grad")
            got = self.labels[id(o)] = (names, {id(f) for f in fold})
        return got

    def path(self, o: Any) -> Tuple[List[str], Optional[_Root]]:
        """The labels from the root's name to ``o`` (``["model", "._modules",
        "['fc1']", ...]``), and the root; ``([], None)`` when not reached."""
        chain: List[Any] = [o]
        k = id(o)
        while True:
            p = self.parent.get(k)
            if p is None:
                return [], None
            if p < 0:
                root = self.roots[-1 - p]
                break
            chain.append(self.objs[p])
            k = p
        chain.reverse()  # root object first
        parts: List[str] = [root.name]
        i = 0
        while i + 1 < len(chain):
            names, folds = self._labels(chain[i])
            nxt = chain[i + 1]
            if id(nxt) in folds and i + 2 < len(chain):
                label = names.get(id(chain[i + 2]))
                i += 2
            else:
                label = names.get(id(nxt))
                i += 1
            parts.append(_join(label))
        return parts, root


def _join(label: Optional[str]) -> str:
    if label is None:
        return ".?"
    if label.startswith((".", "[")):
        return label
    if label.startswith("local '"):
        return f".<local {label[7:-1]}>"
    if label == "key":
        return ".<key>"
    return f".{label}"


def _spell(parts: List[str]) -> Tuple[str, str]:
    """The path as the program spells it, and its pattern: nn.Module's
    ``._modules['fc1']`` is ``.fc1``; in the pattern every other index or key
    is ``[*]`` (the 12 tensors of ``losses[0]`` .. ``losses[11]`` are one
    holder)."""
    path: List[str] = []
    pattern: List[str] = []
    i = 0
    while i < len(parts):
        p = parts[i]
        if p in _MODULE_DICTS and i + 1 < len(parts) and parts[i + 1].startswith("['"):
            name = "." + parts[i + 1][2:-2]
            path.append(name)
            pattern.append(name)
            i += 2
            continue
        path.append(p)
        pattern.append("[*]" if p.startswith("[") else p)
        i += 1
    return "".join(path), "".join(pattern)


def _graph_nodes(fn: Any, budget: List[int], leaves: Optional[List[Any]] = None) -> int:
    """Nodes of the autograd graph from ``fn`` down, while the budget of
    nodes lasts (shared by all graphs); the leaf tensors its
    ``AccumulateGrad`` nodes hold are appended to ``leaves`` (reading a
    node's ``variable`` runs no hook: the leaf is held, not saved)."""
    seen: Set[int] = set()
    stack = [fn]
    while stack and budget[0] > 0:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        budget[0] -= 1
        if leaves is not None and type(node).__name__ == "AccumulateGrad":
            try:
                leaves.append(node.variable)
            except Exception:  # noqa: BLE001 - a node whose leaf is gone
                pass
        try:
            nxt = node.next_functions
        except Exception:  # noqa: BLE001 - a node without edges
            continue
        for f, _ in nxt:
            if f is not None:
                stack.append(f)
    return len(seen)


class Sampler:
    """Holders taken while the program runs, not only at its end: a loop in
    ``main()`` keeps its leak in a local that is gone when the recording
    ends. The recorder calls :meth:`maybe` at each outermost module call and
    after each optimizer step, on the program's own thread, where the loop's
    frames are alive. A pass runs at the 1st, 2nd, 4th, 8th, ... call (so
    that a short loop is seen at least halfway through) and whenever
    ``interval`` seconds have gone by, as long as all passes together have
    taken at most ``allowance`` seconds plus ``share`` of the time since the
    recording began (3%: a pass over a million objects takes about 1.5 s).
    The last ``keep`` passes are kept.

    Only memory that grew can be a leak: with ``level`` (the bytes allocated
    now), a pass that is due runs only if more is allocated than at every
    earlier pass from the same kind of moment (``where``: an outermost
    module call in forward, one inside backward, an optimizer step). The
    moments differ: an outermost call inside backward (a checkpointed block
    recomputed) sees the backward's high water, which the next iterations'
    forwards and steps, 48 KiB higher each for a kept UNet output, never
    reach again. A due pass that finds nothing grown at one kind of moment
    stays due for the next moment of another kind: a UNet with checkpointed
    blocks makes eleven backward moments a step beside one forward and one
    step, and where the pass went to whichever moment it fell on (on a
    loaded machine, mostly backward ones), the leak's holder was seen with
    one kept tensor, too few to name it. A loop that holds nothing new from one iteration to the
    next is looked at once or twice, not every second: on a 12 ms CUDA step
    of a small GPT a pass took 40 ms, 3% of the time at the full share."""

    def __init__(
        self,
        interval: float = 1.0,
        share: float = 0.03,
        allowance: float = 0.25,
        keep: int = 3,
        level: Optional[Callable[[], Optional[int]]] = None,
    ) -> None:
        self.interval, self.share, self.allowance = interval, share, allowance
        self.level = level
        # The most allocated at a pass, by the kind of moment (absent: no
        # pass there yet, or no level).
        self.level_seen: Dict[str, int] = {}
        self.skipped = 0  # moments a due pass was not run at: nothing grew
        # The kinds of moment seen, and those a due pass was offered to.
        self.kinds: set = set()
        self.offered: set = set()
        self.start = time.monotonic()
        self.next_time = self.start + interval
        self.calls, self.next_call = 0, 1
        self.spent = 0.0
        self.samples: deque = deque(maxlen=keep)
        self.busy = False

    def maybe(self, where: str = "call") -> None:
        self.calls += 1
        self.kinds.add(where)
        if self.calls < self.next_call and time.monotonic() < self.next_time:
            return
        if self.busy or where in self.offered:
            return
        now = time.monotonic()
        if self.spent > self.allowance + self.share * (now - self.start):
            return
        level = self._level()
        seen = self.level_seen.get(where)
        if level is not None and seen is not None and level <= seen:
            # Nothing grew since this kind of moment's last pass: the pass
            # stays due for the next moment of another kind; once every
            # kind was offered it, it is spent (one counter read a kind).
            self.skipped += 1
            self.offered.add(where)
            if self.offered >= self.kinds:
                self.offered.clear()
                self.next_call = self.calls * 2
                self.next_time = now + self.interval
            return
        self.offered.clear()
        self.next_call = self.calls * 2
        if level is not None:
            self.level_seen[where] = max(level, seen or 0)
        self.busy = True
        try:
            r = find_holders()
            r["time_us"] = time.time_ns() // 1000
            self.samples.append(r)
            self.spent += r["seconds"]
            self.next_time = time.monotonic() + max(self.interval, r["seconds"] / self.share)
        except Exception:  # noqa: BLE001 - naming holders must never stop the program
            self.next_time = self.next_call = float("inf")
        finally:
            self.busy = False

    def _level(self) -> Optional[int]:
        if self.level is None:
            return None
        try:
            return self.level()
        except Exception:  # noqa: BLE001 - no level: passes as if nothing were known
            return None

"""The object graph of a set of Python objects, every reference named, as
the JSON that the Rust cycle analysis (``crates/cycles``) reads; the objects
reachable from a few roots (:func:`reachable`, for ``cycles.find``); and the
allocation stacks of tensors while a snapshot is recorded (any device with the
dispatch recorder, CUDA with the allocator history).

The labels and the containers folded into their owners are described in
:mod:`vramscope._annotate.refnames`.
"""

from __future__ import annotations

import gc
import sys
import types
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from vramscope._annotate.refnames import TypeInfo, holds_memory, named_refs
from vramscope._annotate.refnames import is_tensor as _is_tensor
from vramscope._annotate.refnames import short_repr as _short_repr

__all__ = ["build_graph", "held_tensors", "reachable"]


def _tensor_info(t: Any, stacks: Optional[Callable[[int], Optional[List[str]]]]) -> Dict[str, Any]:
    try:
        nbytes = int(t.untyped_storage().nbytes())
    except Exception:  # noqa: BLE001 - meta, sparse or subclass tensors
        nbytes = int(t.numel() * t.element_size())
    stack = None
    if stacks is not None:
        try:
            stack = stacks(int(t.untyped_storage().data_ptr()))
        except Exception:  # noqa: BLE001
            stack = None
    gf = getattr(t, "grad_fn", None)
    try:
        storage = int(t.untyped_storage().data_ptr())
    except Exception:  # noqa: BLE001
        storage = None
    return {
        "storage": storage,  # views of one storage count once
        "shape": [int(x) for x in t.shape],
        "dtype": str(t.dtype),
        "device": str(t.device),
        "bytes": nbytes,
        "requires_grad": bool(t.requires_grad),
        "grad_fn": type(gf).__name__ if gf is not None else None,
        "stack": stack or [],
    }


def held_tensors(objects: List[Any]) -> List[Any]:
    """Tensors with memory (:func:`holds_memory`) outside ``objects`` that
    nothing but ``objects`` refers to."""
    inside = {id(o) for o in objects}
    refs: Dict[int, int] = {}
    found: Dict[int, Any] = {}
    for o in objects:
        for r in gc.get_referents(o):
            if id(r) not in inside and holds_memory(r):
                refs[id(r)] = refs.get(id(r), 0) + 1
                found[id(r)] = r
        r = None
    out = []
    for k in list(found):
        t = found.pop(k)
        # References besides the objects': getrefcount's argument and `t`.
        if sys.getrefcount(t) - 2 <= refs[k]:
            out.append(t)
        t = None
    return out


def build_graph(
    objects: List[Any],
    stacks: Optional[Callable[[int], Optional[List[str]]]] = None,
    site: Optional[str] = None,
    held: Optional[List[Any]] = None,
) -> Dict[str, Any]:
    """The graph of ``objects`` (the references between them, named) as the
    JSON the Rust core analyses. Tensors that only these objects refer to
    join the graph even when they are not in the list: the collector leaves
    out objects of older generations, yet they die with the cycle. ``held``:
    those tensors, when the caller has already looked them up.

    Only ``objects`` (and those tensors) become nodes: whatever else they
    refer to (a live caller's frame, the list that holds them) is not part of
    the graph. Linear in the objects and their references."""
    objects = list(objects) + (held_tensors(objects) if held is None else held)
    index = {id(o): i for i, o in enumerate(objects)}
    owner: Dict[int, int] = {}  # node of a folded container -> node it is folded into
    edges: Dict[Tuple[int, int, str], None] = {}  # ordered, each edge once
    infos: Dict[type, TypeInfo] = {}
    for i, o in enumerate(objects):
        direct = gc.get_referents(o)
        fold: List[Any] = []
        t = type(o)
        info = infos.get(t)
        if info is None:
            info = infos[t] = TypeInfo(t)
        ids = {id(r) for r in direct}
        refs: List[Tuple[str, Any]] = []
        try:
            for pair in named_refs(o, direct, ids, fold, info):
                refs.append(pair)
        except Exception:  # noqa: BLE001 - odd attribute access: keep the names found so far
            pass
        # A name is kept only for a reference that exists: to a referent of
        # the object, or an entry of a container folded into it.
        real = ids
        own = set()
        for c in fold:
            real = real | {id(r) for r in gc.get_referents(c)}
            j = index.get(id(c))
            if j is not None and j != i:
                owner.setdefault(j, i)
                own.add(id(c))
        named: Set[int] = set()
        for label, r in refs:
            if id(r) not in real:
                continue
            named.add(id(r))
            j = index.get(id(r))
            if j is not None:
                edges[(i, j, label)] = None
        for r in direct:
            j = index.get(id(r))
            if j is not None and id(r) not in named and id(r) not in own:
                edges[(i, j, "?")] = None
        direct = refs = fold = r = pair = None  # type: ignore[assignment]
    # Folded containers are not nodes: their entries are already their
    # owners' references, and a reference to one goes to its owner.
    keep = [i for i in range(len(objects)) if i not in owner]
    renum = {old: new for new, old in enumerate(keep)}
    nodes = []
    for i in keep:
        o = objects[i]
        t = type(o)
        # A class is named as itself (`class Registry`), not by its
        # metaclass (`type`): a loop of classes made at run time reads as them.
        is_class = isinstance(o, type)
        nodes.append(
            {
                "type": f"class {_class_name(o)}" if is_class else t.__qualname__,
                "module": (getattr(o, "__module__", None) or t.__module__) if is_class else t.__module__,
                "repr": _short_repr(o),
                # A FakeTensor is a node like any object: it holds nothing.
                "tensor": _tensor_info(o, stacks) if holds_memory(o) else None,
            }
        )
    out = []
    for (src, dst, label) in edges:
        for _ in range(4):  # a container folded into a folded one (bounded)
            if dst not in owner:
                break
            dst = owner[dst]
        if src in renum and dst in renum:
            out.append({"src": renum[src], "dst": renum[dst], "label": label})
    return {"nodes": nodes, "edges": out, "site": site}


def _class_name(c: type) -> str:
    """The class's qualified name without the function it was made in
    (`Registry`, not `make.<locals>.Registry`)."""
    try:
        return str(c.__qualname__).rsplit("<locals>.", 1)[-1]
    except Exception:  # noqa: BLE001 - a metaclass that hides it
        return str(getattr(c, "__name__", "?"))


def reachable(roots: Iterable[Any], skip: Set[int], limit: int) -> List[Any]:
    """The objects reachable from ``roots`` (at most ``limit``), not entering
    those whose id is in ``skip``, modules, classes, code or module globals:
    a function's globals reach the whole program. Untracked objects (atoms
    and containers of atoms) cannot be in a cycle and are left out, tensors
    kept."""
    seen: Dict[int, Any] = {}
    stack = list(roots)
    while stack and len(seen) < limit:
        o = stack.pop()
        i = id(o)
        if i in seen or i in skip or isinstance(o, (types.ModuleType, type, types.CodeType)):
            continue
        if not gc.is_tracked(o) and not _is_tensor(o):
            continue
        if _running(o):
            continue
        seen[i] = o
        for r in gc.get_referents(o):
            if isinstance(r, dict) and ("__builtins__" in r or "__name__" in r and "__loader__" in r):
                continue  # a module's globals
            stack.append(r)
    return list(seen.values())


def _running(o: Any) -> bool:
    """A generator or coroutine being executed (the caller's own, or one
    awaiting it) is on a live stack, like the caller's frames."""
    if isinstance(o, types.GeneratorType):
        return bool(o.gi_running)
    if isinstance(o, types.CoroutineType):
        return bool(o.cr_running)
    if isinstance(o, types.AsyncGeneratorType):
        return bool(o.ag_running)
    return False


# ---------------------------------------------------------------------------
# Allocation stacks of tensors, when a snapshot is being recorded: the
# dispatch recorder's live blocks (any device), else CUDA's allocator history.


def allocation_stacks() -> Optional[Callable[[int], Optional[List[str]]]]:
    """A function from a storage address to its allocation stack
    (``file:line in function`` lines, innermost first), or None when nothing
    records stacks."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    from vramscope.record import current_session

    session = current_session()
    blocks = []
    if session is not None and session.backend.stacks_by_address:
        blocks = session.backend.live_blocks()
    elif torch.cuda.is_available() and torch.cuda.is_initialized():
        # The segments only: the blocks carry their allocation stacks, and
        # the history (`include_traces`, every entry with its stack) took
        # 167 ms inside a 100k-entry recording on an H200, at each
        # collection that found tensors.
        from vramscope._recording.recorders.cuda import segments_without_history

        try:
            segments = segments_without_history(torch.cuda.memory.memory_snapshot)
        except Exception:  # noqa: BLE001
            return None
        for seg in segments or []:
            for b in seg.get("blocks", []):
                if b.get("state") == "active_allocated" and b.get("frames"):
                    blocks.append((b["address"], b["size"], b["frames"]))
    if not blocks:
        return None
    blocks.sort(key=lambda b: b[0])
    starts = [b[0] for b in blocks]

    def lookup(ptr: int) -> Optional[List[str]]:
        import bisect

        k = bisect.bisect_right(starts, ptr) - 1
        if k < 0 or ptr >= blocks[k][0] + blocks[k][1]:
            return None
        return [f"{f.get('filename')}:{f.get('line')} in {f.get('name')}" for f in blocks[k][2]]

    return lookup



"""The object graph of a set of Python objects, every reference named, as
the JSON that the Rust cycle analysis (``crates/cycles``) reads; and the
allocation stacks of CUDA tensors while a snapshot is recorded.

Labels: ``.attr`` (attribute or ``__dict__`` entry; instance dicts are folded
into their objects), ``[key]`` (dict key, repr), ``[3]`` (list or tuple
index), ``{element}`` (set), ``closure 'name'`` (a function's closure cell),
``cell_contents``, ``__self__``/``__func__`` (bound method), ``local 'x'`` and
``f_back`` (frame), ``__globals__``, ``__defaults__``, ``?`` (a reference the
object's type does not let us name).
"""

from __future__ import annotations

import gc
import sys
import types
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

# A repr longer than this is cut.
REPR_CHARS = 80

def _short_repr(o: Any) -> str:
    try:
        if _is_tensor(o):
            return f"tensor(shape={list(o.shape)}, dtype={o.dtype}, device={o.device})"
        r = object.__repr__(o) if isinstance(o, (dict, list, tuple, set, frozenset)) and len(o) > 8 else repr(o)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not break the watcher
        r = object.__repr__(o)
    return r if len(r) <= REPR_CHARS else r[: REPR_CHARS - 1] + "…"


_torch: Any = None


def _is_tensor(o: Any) -> bool:
    global _torch
    if _torch is None:
        _torch = sys.modules.get("torch")
        if _torch is None:
            return False
    return isinstance(o, _torch.Tensor)


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


def _named_refs(o: Any, absorbed: set) -> Iterable[Tuple[str, Any]]:
    """``(label, referent)`` for the references of ``o`` that can be named."""
    if isinstance(o, dict):
        for k, v in list(o.items()):
            yield f"[{_short_repr(k)}]", v
            yield "key", k
        return
    if isinstance(o, (list, tuple)):
        for i, v in enumerate(list(o)):
            yield f"[{i}]", v
        return
    if isinstance(o, (set, frozenset)):
        for v in list(o):
            yield "{element}", v
        return
    if isinstance(o, types.MethodType):
        yield "__self__", o.__self__
        yield "__func__", o.__func__
        return
    if isinstance(o, types.FunctionType):
        for name, cell in zip(o.__code__.co_freevars, o.__closure__ or ()):
            yield f"closure '{name}'", cell
        yield "__globals__", o.__globals__
        if o.__defaults__:
            yield "__defaults__", o.__defaults__
        if o.__kwdefaults__:
            yield "__kwdefaults__", o.__kwdefaults__
        yield "__dict__", o.__dict__
        return
    if type(o).__name__ == "cell":
        try:
            yield "cell_contents", o.cell_contents
        except ValueError:  # an empty cell
            pass
        return
    if isinstance(o, types.FrameType):
        for k, v in list(o.f_locals.items()):
            yield f"local '{k}'", v
        if o.f_back is not None:
            yield "f_back", o.f_back
        return
    # An instance: its __dict__ entries become attributes of the object
    # itself (`.other`), and the dict is not a node of its own.
    d = getattr(o, "__dict__", None)
    if isinstance(d, dict) and not isinstance(o, type):
        absorbed.add(id(d))
        for k, v in list(d.items()):
            yield f".{k}", v
    for cls in type(o).__mro__:
        for slot in cls.__dict__.get("__slots__", ()) if isinstance(cls.__dict__.get("__slots__", ()), (tuple, list)) else ():
            if slot in ("__dict__", "__weakref__"):
                continue
            try:
                yield f".{slot}", getattr(o, slot)
            except AttributeError:
                pass


def held_tensors(objects: List[Any]) -> List[Any]:
    """Tensors outside ``objects`` that nothing but ``objects`` refers to."""
    inside = {id(o) for o in objects}
    refs: Dict[int, int] = {}
    found: Dict[int, Any] = {}
    for o in objects:
        for r in gc.get_referents(o):
            if id(r) not in inside and _is_tensor(r):
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
    those tensors, when the caller has already looked them up."""
    objects = list(objects) + (held_tensors(objects) if held is None else held)
    index = {id(o): i for i, o in enumerate(objects)}
    absorbed: set = set()
    edges: List[Dict[str, Any]] = []
    for i, o in enumerate(objects):
        named: set = set()
        try:
            refs = list(_named_refs(o, absorbed))
        except Exception:  # noqa: BLE001 - objects with odd attribute access
            refs = []
        for label, r in refs:
            j = index.get(id(r))
            if j is not None:
                edges.append({"src": i, "dst": j, "label": label})
                named.add(id(r))
        for r in gc.get_referents(o):
            j = index.get(id(r))
            if j is not None and id(r) not in named and id(r) not in absorbed:
                edges.append({"src": i, "dst": j, "label": "?"})
    # Instance dicts are folded into their objects: drop them and their edges.
    keep = [i for i, o in enumerate(objects) if id(o) not in absorbed]
    renum = {old: new for new, old in enumerate(keep)}
    nodes = []
    for i in keep:
        o = objects[i]
        t = type(o)
        nodes.append(
            {
                "type": t.__qualname__,
                "module": t.__module__,
                "repr": _short_repr(o),
                "tensor": _tensor_info(o, stacks) if _is_tensor(o) else None,
            }
        )
    edges = [
        {"src": renum[e["src"]], "dst": renum[e["dst"]], "label": e["label"]}
        for e in edges
        if e["src"] in renum and e["dst"] in renum
    ]
    return {"nodes": nodes, "edges": edges, "site": site}


# ---------------------------------------------------------------------------
# Allocation stacks of CUDA tensors, when a snapshot is being recorded.


def _cuda_stacks() -> Optional[Callable[[int], Optional[List[str]]]]:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    try:
        snap = torch.cuda.memory._snapshot()
    except Exception:  # noqa: BLE001
        return None
    blocks = []
    for seg in snap.get("segments", []):
        for b in seg.get("blocks", []):
            if b.get("state") == "active_allocated" and b.get("frames"):
                blocks.append((b["address"], b["size"], b["frames"]))
    if not blocks:
        return None
    blocks.sort()
    starts = [b[0] for b in blocks]

    def lookup(ptr: int) -> Optional[List[str]]:
        import bisect

        k = bisect.bisect_right(starts, ptr) - 1
        if k < 0 or ptr >= blocks[k][0] + blocks[k][1]:
            return None
        return [f"{f.get('filename')}:{f.get('line')} in {f.get('name')}" for f in blocks[k][2]]

    return lookup



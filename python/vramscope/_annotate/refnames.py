"""Names for references: for one object, how it refers to each object that
``gc.get_referents`` returns, spelt the way a reader of the program would
look it up.

Labels (the Rust report prints them as they are; ``explain.rs`` recognises
some of them to pick its advice, so keep the spellings):

* ``.name``: an attribute the program set: an instance ``__dict__`` entry, a
  ``__slots__`` member, a class attribute (the class ``__dict__`` folded into
  the class), a module global (the module ``__dict__`` folded into the
  module).
* ``[key]``, ``[3]``, ``{element}``, ``key``: a dict value, a list, tuple or
  deque item, a set element, a dict key.
* a bare name: a field CPython itself exposes as an attribute, e.g.
  ``__self__``/``__func__`` (methods), ``cell_contents``, ``args``,
  ``__traceback__``, ``__context__``, ``__cause__`` (exceptions),
  ``tb_frame``, ``tb_next``, ``f_back``, ``f_globals``, ``gi_frame``,
  ``cr_frame``, ``ag_frame``, ``gi_yieldfrom``, ``cr_await``, ``func``,
  ``args``, ``keywords`` (``functools.partial``), ``__callback__``
  (weakref), ``__mro__``, ``__bases__``, ``__class__``, ``__objclass__``,
  ``__globals__``, ``__defaults__``, ``__dict__`` (a function's), and any
  member a C type declares.
* ``closure 'x'``: a function's closure cell for its free variable ``x`` (the
  closure tuple is folded into the function).
* ``local 'x'``: a local variable of a frame, or of the frame a suspended
  generator or coroutine embeds (Python 3.11+ keeps that frame inside the
  generator, so the generator refers to its locals itself). Cell and free
  variables are locals too; the referent is then their cell.
* ``f_func``: the function a Python 3.11+ frame (or suspended generator)
  refers to; CPython's field, no Python attribute.
* ``grad_fn``, ``_backward_hooks``, ``_post_accumulate_grad_hooks``: a
  tensor's autograd node (a custom ``autograd.Function``'s node is a Python
  object: what its ``ctx`` keeps are its attributes) and its hook dicts, as
  PyTorch's own attributes spell them.
* ``?`` is left for the references that nothing names: a value on a suspended
  frame's evaluation stack, an iterator's container, a C extension's
  private field.

A *fold* is a container an object owns whose entries are reported as the
object's own references (instance, class and module ``__dict__``, a
function's closure tuple, an optimized frame's ``f_locals`` snapshot): the
namer appends it to ``fold`` and the graph drops it as a node.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import sys
import types
import weakref
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

# A repr longer than this is cut.
REPR_CHARS = 80

_torch: Any = None


def is_tensor(o: Any) -> bool:
    global _torch
    if _torch is None:
        _torch = sys.modules.get("torch")
        if _torch is None:
            return False
    return isinstance(o, _torch.Tensor)


def holds_memory(o: Any) -> bool:
    """Whether ``o`` is a tensor with memory of its own on a device: not a
    ``FakeTensor`` or a meta tensor (their storage is on ``meta``; compiled
    graphs keep thousands of them in their nodes, on the device they stand
    for, holding nothing), nor an empty one (a compiled graph's GraphModule,
    in a loop with its Graph, kept 8 of them). A tensor whose storage cannot
    be read (sparse, nested) is taken to hold memory."""
    if not is_tensor(o):
        return False
    try:
        st = o.untyped_storage()
        return st.device.type != "meta" and st.nbytes() > 0
    except Exception:  # noqa: BLE001 - no storage to ask
        try:
            return o.device.type != "meta"
        except Exception:  # noqa: BLE001
            return True


def short_repr(o: Any) -> str:
    try:
        if is_tensor(o):
            return f"tensor(shape={list(o.shape)}, dtype={o.dtype}, device={o.device})"
        r = object.__repr__(o) if isinstance(o, (dict, list, tuple, set, frozenset)) and len(o) > 8 else repr(o)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not break the watcher
        r = object.__repr__(o)
    return r if len(r) <= REPR_CHARS else r[: REPR_CHARS - 1] + "…"


_CellType = getattr(types, "CellType", type((lambda x: lambda: x)(0).__closure__[0]))  # type: ignore[index]
_CO_OPTIMIZED = 0x1  # inspect.CO_OPTIMIZED: a function's frame, not a module or class body
# Generator-like objects: the prefix of their attributes.
_GEN_PREFIX = {types.GeneratorType: "gi", types.CoroutineType: "cr", types.AsyncGeneratorType: "ag"}
_GEN_AWAIT = {"gi": "gi_yieldfrom", "cr": "cr_await", "ag": "ag_await"}
_EXC_ATTRS = ("args", "__traceback__", "__context__", "__cause__")
_FRAME_ATTRS = ("f_back", "f_globals", "f_builtins", "f_code", "f_trace")
_DESCRIPTORS = tuple(
    t
    for t in (
        types.GetSetDescriptorType,
        types.MemberDescriptorType,
        getattr(types, "MethodDescriptorType", None),
        getattr(types, "WrapperDescriptorType", None),
        getattr(types, "ClassMethodDescriptorType", None),
    )
    if t is not None
)
_BUILTIN_METHODS = tuple(t for t in (types.BuiltinMethodType, getattr(types, "MethodWrapperType", None)) if t is not None)
_DICT_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
_TYPE_DICT = type.__dict__["__dict__"]  # the class's mappingproxy, past any metaclass override
_TYPE_BASES = type.__dict__["__bases__"]
_TYPE_MRO = type.__dict__["__mro__"]  # a member up to 3.11, a property from 3.12 on
_MODULE_DICT = types.ModuleType.__dict__["__dict__"]

# The kinds of objects with references of their own to name, tested in this
# order (subclasses included); containers are named before, and members and
# the instance dict after, for any kind that has them.
_KINDS: Tuple[Tuple[str, Any], ...] = (
    ("frame", types.FrameType),
    ("method", types.MethodType),
    ("function", types.FunctionType),
    ("cell", _CellType),
    ("class", type),
    ("module", types.ModuleType),
    ("exception", BaseException),
    ("traceback", types.TracebackType),
    ("weakref", weakref.ref),
    ("builtin", _BUILTIN_METHODS),
    ("descriptor", _DESCRIPTORS),
    ("mapping", (types.MappingProxyType,) + _DICT_VIEWS),
)
# Kinds fully named by their own rule: no members or instance dict after.
_ALONE = {"frame", "method", "function", "cell"}


class TypeInfo:
    """What :func:`named_refs` needs to know about a type, found once per
    type and graph (a garbage graph has thousands of objects of a few
    types): its container kind, its kind, its members to read (label,
    descriptor) and its instance ``__dict__`` descriptor."""

    __slots__ = ("container", "kind", "members", "dict_descr")

    def __init__(self, t: type) -> None:
        self.container = (
            "dict" if issubclass(t, dict)
            else "seq" if issubclass(t, (list, tuple, collections.deque))
            else "set" if issubclass(t, (set, frozenset))
            else None
        )
        prefix = _GEN_PREFIX.get(t)
        self.kind: Optional[str] = prefix and f"gen:{prefix}"
        torch = sys.modules.get("torch")
        if torch is not None and issubclass(t, torch.Tensor):
            self.kind = "tensor"
        for kind, base in _KINDS:
            if self.kind is None and issubclass(t, base):
                self.kind = kind
        self.members, self.dict_descr = _members(t)


def _members(t: type) -> Tuple[List[Tuple[str, Any]], Optional[Any]]:
    """Members are ``__slots__`` (labelled ``.name``) or fields a C type
    declares (``func``, ``tb_frame``, ``__base__``: bare). The ``__dict__``
    descriptor is looked up on the type so that a class overriding
    ``__getattribute__`` or proxying attributes runs no code of its own."""
    members: List[Tuple[str, Any]] = []
    seen = set()
    dict_descr = None
    for cls in t.__mro__:
        d = cls.__dict__
        python_slots = "__slots__" in d
        for name, v in list(d.items()):
            if name in seen:
                continue
            seen.add(name)
            if name == "__dict__":  # a getset, or a member in C types such as SimpleNamespace
                if dict_descr is None and isinstance(v, (types.GetSetDescriptorType, types.MemberDescriptorType)):
                    dict_descr = v
            elif isinstance(v, types.MemberDescriptorType):
                members.append((f".{name}" if python_slots else name, v))
    return members, dict_descr


def named_refs(o: Any, direct: List[Any], ids: Set[int], fold: List[Any], info: TypeInfo) -> Iterator[Tuple[str, Any]]:
    """``(label, referent)`` for the references of ``o`` that can be named.
    ``direct``: ``gc.get_referents(o)``, ``ids`` their ids; a name may be
    given to an object ``o`` does not refer to itself only through a fold
    (the caller checks)."""
    container, kind = info.container, info.kind
    if container == "dict":
        for k, v in list(o.items()):
            yield f"[{short_repr(k)}]", v
            yield "key", k
    elif container == "seq":
        for i, v in enumerate(list(o)):
            yield f"[{i}]", v
    elif container == "set":
        for v in list(o):
            yield "{element}", v

    if kind is None:
        pass
    elif kind.startswith("gen:"):
        yield from _generator(o, kind[4:], direct, ids, fold)
        return
    elif kind == "frame":
        yield from _frame(o, direct, ids, fold)
    elif kind == "method":
        yield "__self__", o.__self__
        yield "__func__", o.__func__
    elif kind == "function":
        yield from _function(o, direct, fold)
    elif kind == "cell":
        try:
            yield "cell_contents", o.cell_contents
        except ValueError:  # an empty cell
            pass
    elif kind == "class":
        yield from _class(o, fold)
    elif kind == "module":
        d = _MODULE_DICT.__get__(o)
        fold.append(d)
        for k, v in list(d.items()):
            yield f".{k}", v
    elif kind == "exception":
        for name in _EXC_ATTRS:
            yield name, getattr(o, name)
    elif kind == "traceback":
        yield "tb_next", o.tb_next  # a settable property; tb_frame is a member
    elif kind == "weakref":
        yield "__callback__", o.__callback__
    elif kind == "builtin":
        yield "__self__", o.__self__
        yield "__module__", getattr(o, "__module__", None)
    elif kind == "descriptor":
        yield "__objclass__", o.__objclass__
    elif kind == "mapping":
        for r in direct:  # `.mapping` only from 3.10 on
            yield "mapping", r
    elif kind == "tensor":
        yield from _tensor(o)
    if kind in _ALONE:
        return

    t = type(o)
    for label, descr in info.members:
        try:
            yield label, descr.__get__(o, t)
        except AttributeError:  # an unset slot
            pass
    if info.dict_descr is not None and kind not in ("class", "module"):  # folded above
        yield from _instance_dict(o, info.dict_descr, ids, fold)
    if id(t) in ids:  # heap types' instances refer to their class
        yield "__class__", t


_TENSOR_REFS = ("grad_fn", "_backward_hooks", "_post_accumulate_grad_hooks")


def _tensor(t: Any) -> Iterator[Tuple[str, Any]]:
    """A tensor's references that PyTorch exposes as attributes: its
    autograd node and hook dicts. Read with tensor subclasses' own
    ``__torch_function__`` off, which the attribute reads would call."""
    torch = sys.modules["torch"]
    off = getattr(torch._C, "DisableTorchFunctionSubclass", contextlib.nullcontext)
    for name in _TENSOR_REFS:
        try:
            with off():
                v = getattr(t, name, None)
        except Exception:  # noqa: BLE001 - a subclass whose attribute raises
            continue
        if v is not None:
            yield name, v


def _instance_dict(o: Any, dict_descr: Any, ids: Set[int], fold: List[Any]) -> Iterator[Tuple[str, Any]]:
    """An instance's attributes, as ``.name`` on the object itself. Python
    3.11+ may keep them inline (no dict object; the object refers to each
    value), and reading ``__dict__`` then makes the dict without making it a
    referent: each value is then checked to be one."""
    try:
        d = dict_descr.__get__(o, type(o))
    except (AttributeError, TypeError):
        return
    if not isinstance(d, dict):
        return
    fold.append(d)
    inline = id(d) not in ids
    for k, v in list(d.items()):
        if not inline or id(v) in ids:
            yield f".{k}", v


def _function(f: types.FunctionType, direct: List[Any], fold: List[Any]) -> Iterator[Tuple[str, Any]]:
    if f.__closure__:
        fold.append(f.__closure__)
        for name, cell in zip(f.__code__.co_freevars, f.__closure__):
            yield f"closure '{name}'", cell
    yield "__globals__", f.__globals__
    builtins = getattr(f, "__builtins__", None)  # 3.10+
    if builtins is not None:
        yield "__builtins__", builtins
    if f.__defaults__:
        yield "__defaults__", f.__defaults__
    if f.__kwdefaults__:
        yield "__kwdefaults__", f.__kwdefaults__
    yield "__code__", f.__code__
    yield "__module__", f.__module__
    # Reading `__dict__` or `__annotations__` creates the dict when there is
    # none: read them only when the function refers to a dict not named yet.
    known = {id(f.__globals__), id(builtins), id(f.__kwdefaults__)}
    if any(type(r) is dict and id(r) not in known for r in direct):
        yield "__dict__", f.__dict__
        if sys.version_info < (3, 14):  # from 3.14 on, reading it may run __annotate__
            yield "__annotations__", f.__annotations__
    params = getattr(f, "__type_params__", None)  # 3.12+
    if params:
        yield "__type_params__", params


def _class(c: type, fold: List[Any]) -> Iterator[Tuple[str, Any]]:
    """A class's own attributes as ``.name``: the dict behind its
    mappingproxy is folded into the class. ``__base__`` is a member of
    ``type``, read with the other members."""
    proxy = _TYPE_DICT.__get__(c)
    for d in gc.get_referents(proxy):
        if isinstance(d, dict):
            fold.append(d)
            for k, v in list(d.items()):
                yield f".{k}", v
    yield "__bases__", _TYPE_BASES.__get__(c)
    yield "__mro__", _TYPE_MRO.__get__(c)


def _frame(f: types.FrameType, direct: List[Any], ids: Set[int], fold: List[Any]) -> Iterator[Tuple[str, Any]]:
    """A frame refers to the frame below it, its code, globals and builtins
    (up to 3.10; 3.11+ reaches those through its function), and its
    locals."""
    for name in _FRAME_ATTRS:
        v = getattr(f, name, None)
        if v is not None and id(v) in ids:
            yield name, v
    yield from _locals(f, direct, ids, fold)


def _generator(g: Any, prefix: str, direct: List[Any], ids: Set[int], fold: List[Any]) -> Iterator[Tuple[str, Any]]:
    """Up to 3.10 a generator refers to its frame object; from 3.11 on it
    embeds the frame and refers to the locals itself (and to a frame object
    only once someone asked for ``gi_frame``: reading it here makes one,
    which the locals are read from)."""
    frame = getattr(g, f"{prefix}_frame", None)
    if frame is not None:
        yield f"{prefix}_frame", frame
    awaited = getattr(g, _GEN_AWAIT[prefix], None)
    if awaited is not None:
        yield _GEN_AWAIT[prefix], awaited
    yield f"{prefix}_code", getattr(g, f"{prefix}_code", None)
    if frame is not None:
        yield from _locals(frame, direct, ids, fold)


def _locals(f: types.FrameType, direct: List[Any], ids: Set[int], fold: List[Any]) -> Iterator[Tuple[str, Any]]:
    """``local 'x'`` for each local the owner (``direct``: the frame's or
    the generator's referents) refers to; a cell or free variable names its
    cell, found by its contents. 3.11+ frames also refer to their function
    (``f_func``)."""
    code = f.f_code
    for r in direct:
        if type(r) is types.FunctionType and r.__code__ is code:
            yield "f_func", r
    try:
        loc = f.f_locals
    except Exception:  # noqa: BLE001 - a frame being torn down
        return
    if not code.co_flags & _CO_OPTIMIZED:
        # A module or class body: the namespace is a dict of its own.
        if id(loc) in ids and loc is not f.f_globals:
            yield "f_locals", loc
        return
    if isinstance(loc, dict) and id(loc) in ids:
        fold.append(loc)  # up to 3.12: a snapshot of the locals, cached on the frame
    cells = set(code.co_cellvars) | set(code.co_freevars)
    by_contents: Dict[int, List[str]] = {}
    for k, v in list(loc.items()):
        if k in cells:
            by_contents.setdefault(id(v), []).append(k)
        elif id(v) in ids:
            yield f"local '{k}'", v
    if not by_contents:
        return
    for r in direct:
        if type(r) is _CellType:
            try:
                names = by_contents.get(id(r.cell_contents))
            except ValueError:  # an empty cell: a deleted variable
                continue
            if names:  # two cells holding one object: one name each
                yield f"local '{names.pop(0) if len(names) > 1 else names[0]}'", r

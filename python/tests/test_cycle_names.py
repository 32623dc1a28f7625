"""Every reference CPython can name is named in the cycle graph, on real
objects holding real (CPU) tensors: exceptions, tracebacks, frames and their
locals (cells included), generators and coroutines, ``functools.partial``,
bound methods, closures, class and module dicts, ``__slots__`` and weakref
callbacks. ``?`` is left for references that nothing names, so a loop made
of these has none."""

from __future__ import annotations

import functools
import gc
import sys
import types
import weakref
from pathlib import Path
from typing import Any, Dict, List, Set, Tuple

import pytest

torch = pytest.importorskip("torch")

from conftest import native_module  # noqa: E402

if native_module() is None or not hasattr(native_module(), "cycles_analyze"):
    pytest.skip("vramscope._native (with the cycle analysis) is not built", allow_module_level=True)

from vramscope import cycles  # noqa: E402
from vramscope._annotate.objgraph import build_graph  # noqa: E402


def labels(steps: List[Dict[str, Any]]) -> List[str]:
    return [s["label"] for s in steps]


def cycle_of(*roots: Any) -> List[str]:
    """The labels of the one loop that ``find`` reports from ``roots``."""
    (f,) = cycles.find(list(roots)).findings
    assert "?" not in {e["label"] for e in f["example"]["edges"]}, f["title"]
    return labels(f["example"]["cycle"])


def graph_edges(objects: List[Any]) -> Set[Tuple[str, str, str]]:
    g = build_graph(objects)
    n = g["nodes"]
    return {(n[e["src"]]["type"], e["label"], n[e["dst"]]["type"]) for e in g["edges"]}


@pytest.fixture
def watcher(tmp_path: Path):
    w = cycles.Watcher(device="any", out_dir=tmp_path / "cycles", summary_at_exit=False)
    gc.collect()
    w.start()
    yield w
    w.stop()


class Holder:
    """Holds a tensor; the tests hang a loop back to it on an attribute."""

    def __init__(self) -> None:
        self.tensor = torch.ones(64)

    def method(self, *args: Any) -> None:
        pass


class Slotted:
    __slots__ = ("tensor", "__peer", "__weakref__")

    def link(self, other: "Slotted") -> None:
        self.tensor = torch.ones(64)
        self.__peer = other


@pytest.mark.parametrize("via", ["args", "__context__", "__cause__"])
def test_exception_args_context_and_cause_are_named(via: str) -> None:
    h = Holder()
    if via == "args":
        h.err, expected = ValueError(h), [".err", "args", "[0]"]
    else:
        h.err, expected = ValueError("outer"), [".err", via, "args", "[0]"]
        setattr(h.err, via, KeyError(h))
    assert cycle_of(h) == expected


def _raise_with(obj: Any) -> None:
    raise ValueError("boom")


def _keep_error(h: Holder) -> None:
    try:
        _raise_with(h)
    except ValueError as e:
        h.err = e
    del h  # only the callee's frame holds it: the loop goes through tb_next


def test_traceback_tb_next_and_tb_frame_are_named() -> None:
    h = Holder()
    _keep_error(h)
    assert cycle_of(h) == [".err", "__traceback__", "tb_next", "tb_frame", "local 'obj'"]


def _store_own_frame(h: Holder) -> None:
    f = sys._getframe()
    h.frame = f
    del h, f


def _frame_with_cell(h: Holder) -> None:
    def getter() -> Holder:
        return h

    h.frame = sys._getframe()


def _frame_with_free_variable(h: Holder) -> None:
    def inner() -> None:
        h.frame = sys._getframe()

    inner()


def _call_store(h: Holder) -> None:
    _store_own_frame(h)


def test_frame_f_back_and_locals_are_named() -> None:
    h = Holder()
    _call_store(h)
    assert cycle_of(h) == [".frame", "f_back", "local 'h'"]


@pytest.mark.parametrize("make", [_frame_with_cell, _frame_with_free_variable])
def test_cell_and_free_variables_are_frame_locals(make: Any) -> None:
    h = Holder()
    make(h)
    assert cycle_of(h) == [".frame", "local 'h'", "cell_contents"]


def _own_frame() -> types.FrameType:
    return sys._getframe()


def test_frame_globals_are_named() -> None:
    # A module body's frame refers to its globals (its namespace).
    ns: Dict[str, Any] = {"tensor": torch.ones(4)}
    exec(compile("import sys\nframe = sys._getframe()\n", "<script>", "exec"), ns)
    edges = graph_edges([ns["frame"], ns, ns["tensor"]])
    assert ("frame", "f_globals", "dict") in edges and ("dict", "['frame']", "frame") in edges
    assert "?" not in {e[1] for e in edges}
    # A function's frame: directly up to 3.10, through its function from 3.11 on.
    edges = graph_edges([_own_frame(), _own_frame, globals()])
    if sys.version_info >= (3, 11):
        assert {("frame", "f_func", "function"), ("function", "__globals__", "dict")} <= edges
    else:
        assert ("frame", "f_globals", "dict") in edges
    assert "?" not in {e[1] for e in edges}


def _gen(owner: Any) -> Any:
    yield 1


class _Suspend:
    def __await__(self) -> Any:
        yield


async def _coro(owner: Any) -> None:
    await _Suspend()


async def _agen(owner: Any) -> Any:
    yield 1


@pytest.mark.parametrize("prefix", ["gi", "cr", "ag"])
def test_generator_coroutine_and_async_generator_frames_are_named(prefix: str) -> None:
    h = Holder()
    g = {"gi": _gen, "cr": _coro, "ag": _agen}[prefix](h)
    step = {"gi": lambda: next(g), "cr": lambda: g.send(None), "ag": lambda: g.__anext__().send(None)}[prefix]
    try:
        step()
    except StopIteration:  # the async generator's first value
        pass
    h.task = g
    try:
        # 3.11+ embeds the frame in the generator, which refers to the locals.
        via = [] if sys.version_info >= (3, 11) else [f"{prefix}_frame"]
        assert cycle_of(h) == [".task"] + via + ["local 'owner'"]
        frame = getattr(g, f"{prefix}_frame")
        assert (type(g).__name__, f"{prefix}_frame", "frame") in graph_edges([g, frame])
    finally:
        closing = g.aclose() if prefix == "ag" else None
        if closing is None:
            g.close()
        else:
            with pytest.raises(StopIteration):
                closing.send(None)


@pytest.mark.parametrize(
    "field, expected",
    [("func", [".cb", "func", "__self__"]), ("args", [".cb", "args", "[0]"]), ("keywords", [".cb", "keywords", "['key']"])],
)
def test_partial_func_args_and_keywords_are_named(field: str, expected: List[str]) -> None:
    h = Holder()
    h.cb = {"func": lambda: functools.partial(h.method), "args": lambda: functools.partial(print, h), "keywords": lambda: functools.partial(print, key=h)}[field]()
    assert cycle_of(h) == expected


def test_bound_method_func_is_named() -> None:
    h = Holder()

    def callback(self: Any, keep: Holder = h) -> None:
        pass

    h.cb = types.MethodType(callback, 0)
    assert cycle_of(h) == [".cb", "__func__", "__defaults__", "[0]"]


def _capture(h: Holder) -> None:
    h.cb = lambda: h.tensor


def test_closure_tuple_is_folded_into_the_function() -> None:
    h = Holder()
    _capture(h)
    assert cycle_of(h) == [".cb", "closure 'h'", "cell_contents"]


def _make_class(t: torch.Tensor) -> None:
    class Cache:
        table = t


def test_class_attributes_are_named_on_the_class(watcher: cycles.Watcher) -> None:
    _make_class(torch.ones(64))
    gc.collect()
    (f,) = watcher.result().findings
    ex = f["example"]
    assert "Cache" in ex["nodes"][ex["cycle"][0]["node"]]["repr"] and labels(ex["paths"][0])[-2] == ".table"
    assert labels(ex["cycle"]) in ([".__dict__", "__objclass__"], [".__weakref__", "__objclass__"], ["__mro__", "[0]"])
    assert "?" not in {e["label"] for e in ex["edges"]}


def test_module_globals_are_named_on_the_module() -> None:
    m = types.ModuleType("vramscope_test_module")
    m.table = torch.ones(64)
    exec("def lookup():\n    return table\n", m.__dict__)
    edges = graph_edges([m, m.__dict__, m.lookup, m.table])
    assert {("module", ".lookup", "function"), ("function", "__globals__", "module"), ("module", ".table", "Tensor")} <= edges
    assert "dict" not in {e[0] for e in edges} and "?" not in {e[1] for e in edges}


def test_slots_are_named() -> None:
    a, b = Slotted(), Slotted()
    a.link(b)
    b.link(a)
    assert cycle_of(a) == ["._Slotted__peer", "._Slotted__peer"]


def test_weakref_callback_is_named() -> None:
    h, target = Holder(), Holder()  # the target lives on: the callback stays
    h.watch = weakref.ref(target, h.method)
    assert cycle_of(h) == [".watch", "__callback__", "__self__"]

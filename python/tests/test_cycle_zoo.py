"""The cycles that training code really makes, each caught by the watcher
with the bytes it held, every edge named, and the fix that fits its kind;
and no finding where the loop holds no memory: the FakeTensors of a
compiled graph (FX nodes are a doubly linked list, freed by the collector,
whose values stand for CUDA tensors and hold nothing).

Each case is a small program written the way users write it (an OOM retry,
a forward hook, a custom ``autograd.Function``, a beam search, ...); the
bytes expected are those of the tensors the program made, known by
construction."""

from __future__ import annotations

import functools
import gc
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from conftest import native_module  # noqa: E402

if native_module() is None or not hasattr(native_module(), "cycles_analyze"):
    pytest.skip("vramscope._native (with the cycle analysis) is not built", allow_module_level=True)

from vramscope import cycles  # noqa: E402


def caught(make: Callable[[], Any], tmp_path: Path, device: str = "any") -> List[Dict[str, Any]]:
    """The findings of the watcher over one call of ``make`` and the
    collection after it."""
    gc.collect()
    w = cycles.Watcher(device=device, out_dir=tmp_path / "cycles", summary_at_exit=False, warn=False)
    w.start()
    try:
        make()
        gc.collect()
    finally:
        r = w.stop()
    return r.findings if r is not None else []


def the_finding(make: Callable[[], Any], tmp_path: Path) -> Dict[str, Any]:
    (f,) = caught(make, tmp_path)
    assert "?" not in {e["label"] for e in f["example"]["edges"]}, f["title"]
    return f


def loop(f: Dict[str, Any]) -> List[str]:
    return [s["label"] for s in f["example"]["cycle"]]


# -- the programs -------------------------------------------------------------


class KeepOutput(torch.autograd.Function):
    """Keeps its output on ``ctx`` as an attribute, not through
    ``save_for_backward``: the loop PyTorch's docs warn about."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        out = x.exp()
        ctx.out = out
        return out

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * ctx.out


def custom_function_keeps_its_output() -> None:
    KeepOutput.apply(torch.ones(1000, requires_grad=True))


class ActivationProbe:
    """Collects a layer's outputs with a hook that captures the probe."""

    def __init__(self, layer: nn.Module) -> None:
        self.layer = layer
        self.outputs: List[torch.Tensor] = []
        layer.register_forward_hook(lambda mod, args, out: self.outputs.append(out.detach()))


def forward_hook_captures_its_owner() -> None:
    layer = nn.Linear(100, 100)
    ActivationProbe(layer)
    layer(torch.ones(10, 100))


def oom_retry_keeps_the_error() -> None:
    def step(batch: torch.Tensor) -> None:
        act = batch * 2  # noqa: F841 - held by the frame the traceback keeps
        try:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        except RuntimeError as e:
            error = e  # noqa: F841 - kept in the frame that raised it

    step(torch.ones(64, 64))


class Scheduler:
    def __init__(self) -> None:
        self.weights = torch.ones(300)
        self.callbacks = [lambda: self.weights.sum()]


class Hypothesis:
    """A beam search node: its parent, and its children back."""

    def __init__(self, parent: Any, state: torch.Tensor) -> None:
        self.parent, self.state, self.children = parent, state, []
        if parent is not None:
            parent.children.append(self)


def beam_search_tree() -> None:
    root = Hypothesis(None, torch.ones(100))
    Hypothesis(Hypothesis(root, torch.ones(100)), torch.ones(100))


def nested_function_calls_itself() -> None:
    table = torch.ones(500)

    def walk(n: int) -> torch.Tensor:
        return table.sum() if n == 0 else walk(n - 1)

    walk(3)


class Logger:
    def __init__(self) -> None:
        self.last = torch.ones(50)
        self.flush = functools.partial(Logger.write, self)

    def write(self) -> None:
        pass


# -- the cases ----------------------------------------------------------------


def test_a_custom_function_keeping_its_output_is_told_to_save_it(tmp_path: Path) -> None:
    f = the_finding(custom_function_keeps_its_output, tmp_path)
    assert loop(f) == ["grad_fn", ".out"], f["title"]
    assert f["bytes"] == 1000 * 4  # the output; the input was freed by its caller
    assert "ctx.save_for_backward" in f["explanation"] and "KeepOutputBackward" in f["explanation"]


def test_a_forward_hook_is_told_to_remove_its_handle(tmp_path: Path) -> None:
    f = the_finding(forward_hook_captures_its_owner, tmp_path)
    assert loop(f)[0] == "._forward_hooks", f["title"]
    # The weight, the bias and the output the probe kept.
    assert f["bytes"] == (100 * 100 + 100 + 10 * 100) * 4
    assert "`Linear._forward_hooks`, by `register_forward_hook`" in f["explanation"]
    assert "handle.remove()" in f["explanation"]


def test_an_oom_retry_keeping_the_error_holds_the_frames_tensors(tmp_path: Path) -> None:
    f = the_finding(oom_retry_keeps_the_error, tmp_path)
    assert loop(f) == ["local 'error'", "__traceback__", "tb_frame"], f["title"]
    assert f["bytes"] == 2 * 64 * 64 * 4  # the batch and the activation the frame held
    assert "e.__traceback__ = None" in f["explanation"]


def test_a_lambda_in_a_list_is_placed_where_the_program_keeps_it(tmp_path: Path) -> None:
    f = the_finding(Scheduler, tmp_path)
    assert loop(f) == [".callbacks", "[0]", "closure 'self'", "cell_contents"], f["title"]
    assert f["bytes"] == 300 * 4
    assert "stored at `Scheduler.callbacks[0]`" in f["explanation"], f["explanation"]


def test_a_beam_search_tree_is_one_finding_with_every_state(tmp_path: Path) -> None:
    f = the_finding(beam_search_tree, tmp_path)
    assert sorted(loop(f)) == sorted([".children", "[0]", ".parent"]), f["title"]
    assert f["tensors"] == 3 and f["bytes"] == 3 * 100 * 4


def test_a_nested_function_calling_itself_is_told_to_del_it(tmp_path: Path) -> None:
    f = the_finding(nested_function_calls_itself, tmp_path)
    assert loop(f) == ["closure 'walk'", "cell_contents"], f["title"]
    assert f["bytes"] == 500 * 4
    assert "`del walk`" in f["explanation"]


def test_a_partial_binding_its_owner_is_named_as_such(tmp_path: Path) -> None:
    f = the_finding(Logger, tmp_path)
    assert loop(f) == [".flush", "args", "[0]"], f["title"]
    assert "A `functools.partial` stored at `Logger.flush`" in f["explanation"]


# -- what holds no memory -----------------------------------------------------


def fx_graph_of_fake_tensors() -> None:
    """What ``torch.compile`` leaves for the collector at each compilation:
    an FX graph traced with FakeTensors (on the device they stand for)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x @ w).sum(0)

    gm = make_fx(f, tracing_mode="fake")(torch.ones(64, 128), torch.ones(128, 128))
    vals = [n.meta.get("val") for n in gm.graph.nodes]
    assert any(type(v).__name__ == "FakeTensor" for v in vals), vals


def fake_cuda_tensors_in_a_loop() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        big = torch.empty(1 << 28, device="cuda")  # 1 GiB that does not exist
    a: Dict[str, Any] = {"t": big}
    a["self"] = a


def empty_tensors_in_a_loop() -> None:
    """A compiled Llama's GraphModule, in a loop with its Graph, kept 8
    empty tensors: "holds 8 tensors, 0 B" was a finding."""
    a: Dict[str, Any] = {"t": [torch.empty(0) for _ in range(8)]}
    a["self"] = a


def test_fake_tensors_of_a_compiled_graph_are_not_reported(tmp_path: Path) -> None:
    assert caught(fx_graph_of_fake_tensors, tmp_path) == []
    assert caught(fake_cuda_tensors_in_a_loop, tmp_path, device="cuda") == []
    assert caught(fake_cuda_tensors_in_a_loop, tmp_path, device="any") == []
    assert caught(empty_tensors_in_a_loop, tmp_path) == []


def test_a_real_tensor_beside_fake_ones_is_reported_alone(tmp_path: Path) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    def both() -> None:
        with FakeTensorMode():
            fake = torch.empty(1 << 20)
        a: Dict[str, Any] = {"fake": fake, "real": torch.ones(1000)}
        a["self"] = a

    (f,) = caught(both, tmp_path)
    assert f["tensors"] == 1 and f["bytes"] == 1000 * 4, f["title"]


class Feeder:
    """Keeps a generator that reads it."""

    def __init__(self) -> None:
        self.batch = torch.ones(200)
        self.it = self._batches()
        next(self.it)

    def _batches(self) -> Any:
        while True:
            yield self.batch


def test_a_generator_on_its_owner_is_found_alive_and_explained(tmp_path: Path) -> None:
    (f,) = cycles.find([Feeder()]).findings
    assert f["bytes"] == 200 * 4
    assert "A suspended generator stored at `Feeder.it`" in f["explanation"], f["explanation"]
    assert "close()" in f["explanation"] and "exception" not in f["explanation"]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the generator case below is documented on 3.11+")
def test_a_generator_on_its_owner_is_freed_by_the_collector_unseen(tmp_path: Path) -> None:
    """A blind spot, stated: the collector closes a suspended generator
    (its finalizer) before it frees anything, which breaks the loop, so
    the objects are freed by reference counting inside the collection and
    never reach the garbage the watcher reads (`vramscope leaks` sees the
    memory freed inside the collection: test_leaks.py). If this starts
    failing, the watcher sees the case: document it as caught."""
    assert caught(Feeder, tmp_path) == []


def test_a_tensor_hook_capturing_its_tensor_is_said_never_freed(tmp_path: Path) -> None:
    """Made by an operation, the tensor's hook lives where the collector
    cannot follow: the loop is never garbage (the watcher never sees it),
    and `find` says so."""

    def make() -> torch.Tensor:
        x = torch.ones(90, requires_grad=True)
        y = x * 3
        y.register_hook(lambda g: g + y)
        return y

    y = make()
    (f,) = cycles.find([y]).findings
    assert loop(f)[0] == "_backward_hooks", f["title"]
    assert "never freed, not even by `gc.collect()`" in f["explanation"]
    assert "handle.remove()" in f["explanation"]
    # Let go of, it is no collection's garbage: the watcher sees nothing.
    del y, f
    assert caught(lambda: None, tmp_path) == []


def test_a_kept_exceptions_frame_is_freed_by_the_collection_that_found_it(tmp_path: Path) -> None:
    """Naming a frame's locals reads `f_locals`, which up to Python 3.12
    caches a dict of them on the frame; releasing the garbage must clear it
    too, or the watcher keeps the frames (their locals, their tensors) to
    the next collection: for an OOM retry, the activations of the batch
    that did not fit, until a full collection."""
    message = "CUDA out of memory. Tried to allocate 2.00 GiB (kept by test_cycle_zoo)"

    def kept() -> int:
        return sum(1 for o in gc.get_objects() if type(o) is RuntimeError and str(o) == message)

    def step(batch: torch.Tensor) -> None:
        act = batch * 2  # noqa: F841
        try:
            raise RuntimeError(message)
        except RuntimeError as e:
            error = e  # noqa: F841

    gc.collect()
    w = cycles.Watcher(device="any", out_dir=None, html=False, summary_at_exit=False, warn=False).start()
    try:
        for _ in range(3):
            step(torch.ones(64, 64))
        assert kept() == 3  # only a collection frees them
        gc.collect()
        assert kept() == 0
    finally:
        r = w.stop()
    assert r is not None and r.tensors == 6 and r.data["unreached_tensors"] == 0


class Slotted:
    __slots__ = ("tensor", "peer")


def slots_loop() -> None:
    a, b = Slotted(), Slotted()
    a.tensor, b.tensor = torch.ones(100), torch.ones(100)
    a.peer, b.peer = b, a


def deque_loop() -> None:
    import collections

    d = collections.deque([torch.ones(200)])
    d.append(d)


def exceptions_loop() -> None:
    e1, e2 = ValueError(torch.ones(200)), KeyError("k")
    e1.__context__, e2.__context__ = e2, e1


@pytest.mark.parametrize("make", [slots_loop, deque_loop, exceptions_loop], ids=lambda f: f.__name__)
def test_a_loop_is_released_by_the_collection_that_found_it(make: Callable[[], None], tmp_path: Path) -> None:
    """The watcher releases what it kept as the collector would (slots,
    deques and exceptions' links too), or the loop is garbage again at the
    next collection, analysed and counted twice, its tensors held in
    between."""
    gc.collect()
    w = cycles.Watcher(device="any", out_dir=None, html=False, summary_at_exit=False, warn=False).start()
    try:
        make()
        gc.collect()
        gc.collect()
    finally:
        r = w.stop()
    assert w.collections_seen == 1
    assert r is not None and [f["count"] for f in r.findings] == [1] and r.bytes == 800


def class_made_in_a_function() -> None:
    class Registry:
        pass

    Registry.table = torch.ones(100)  # type: ignore[attr-defined]


def test_a_class_made_at_run_time_is_explained_by_its_attributes(tmp_path: Path) -> None:
    f = the_finding(class_made_in_a_function, tmp_path)
    assert f["bytes"] == 400
    assert "`Registry` is a class made while the program ran" in f["explanation"], f["explanation"]
    assert "(`Registry.table`)" in f["explanation"] and "weakref" not in f["explanation"]

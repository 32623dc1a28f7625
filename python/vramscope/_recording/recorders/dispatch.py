"""Recording on any device: every new tensor storage, seen at PyTorch's
dispatcher, with the exact Python stack that asked for it.

A ``TorchDispatchMode`` sees every ATen operator call of the recording thread
(and of the autograd engine's threads it starts). After the operator has run,
each tensor it returned whose storage is new is one ``alloc`` of the storage's
bytes, with the Python stack of the call: the current line of every frame,
read from the frames themselves (``f_lasti``), so a training loop written at
module level is ``train.py:12 in <module>``, not ``train.py:0``. A weak
reference to the storage gives its release: ``free_requested`` and
``free_completed`` when the last tensor using it goes, with the stack of the
code that dropped it. Views and in-place operators make no storage and cost a
dictionary lookup; ``out=`` and ``resize_`` calls that grow a tracked storage
are a free and a new alloc, as the allocator does them.

The file has the layout of the CPU path: one segment per live block and
``segment_alloc``/``segment_free`` around each block (nothing is cached), so
reserved equals allocated; where the device keeps counters of its own
(``torch.mps.current_allocated_memory()``, ``driver_allocated_memory()``)
they are sampled at every step and dump into the snapshot's ``vramscope``
metadata, and the summary compares them with what was recorded.

What it cannot see: memory that a kernel allocates without a tensor (oneDNN
scratch space, cuDNN and MPS workspaces) and tensors made on other Python
threads. The snapshot says so (``vramscope.recorder == "dispatch"``).
"""

from __future__ import annotations

import collections
import functools
import os
import sys
import time
import weakref
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple

from vramscope._recording.recorders.base import Recorder
from vramscope._recording.recorders.blocks import cpu_segment

__all__ = ["DispatchRecorder", "device_counters", "pick_device"]

_ALLOC, _FREE = 0, 1
# How each operator's outputs are handled, decided once per operator.
_SKIP, _FRESH, _LIFT, _RESIZE, _ENTER, _EXIT = 0, 1, 2, 3, 4, 5
# id(operator) -> (kind, the callable to run, the operator, kept alive).
_kinds: Dict[int, Tuple[int, Any, Any]] = {}


class _StorageRef(weakref.ref):
    """Weak reference to a storage that remembers which block it is."""

    __slots__ = ("key",)


def _classify(func: Any) -> int:
    """``_FRESH``: outputs are new storages (``mm``, ``empty``, ``clone``);
    ``_SKIP``: views, in-place updates, no tensor out; ``_LIFT``: a tensor
    made outside the dispatcher (``torch.tensor([...])``) enters it;
    ``_RESIZE``: ``out=`` and ``resize_`` may grow a storage."""
    try:
        schema = func._schema
        namespace = func.namespace
    except AttributeError:  # higher-order operators: their inner calls are seen
        return _SKIP
    name = schema.name.split("::")[-1]
    if namespace == "profiler":
        # record_function ranges: the program's annotations.
        return {"_record_function_enter_new": _ENTER, "_record_function_exit": _EXIT}.get(name, _SKIP)
    if name in ("lift_fresh", "lift", "lift_fresh_copy"):
        return _LIFT
    returns = schema.returns
    if not any("Tensor" in str(r.type) for r in returns):
        return _SKIP
    aliased = [r.alias_info for r in returns if r.alias_info is not None]
    if not aliased:
        return _FRESH
    if name.startswith("resize") or schema.overload_name.startswith("out") or any(
        a.name == "out" for a in schema.arguments if a.is_out
    ):
        return _RESIZE
    return _SKIP


def pick_device() -> str:
    """The device a dispatch recording follows when none is given: the
    accelerator PyTorch reports (``mps``, ``xpu``, ...), else the CPU."""
    import torch

    acc = getattr(torch, "accelerator", None)
    try:
        if acc is not None and acc.is_available():
            dev = acc.current_accelerator()
            if dev is not None:
                return str(dev.type)
    except Exception:  # noqa: BLE001 - older builds: fall back to probing
        pass
    mps = getattr(getattr(torch, "backends", None), "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def device_counters(device: str) -> Optional[Dict[str, int]]:
    """The device allocator's own figures, where PyTorch exposes them:
    ``allocated`` (bytes in tensors) and ``reserved`` (bytes the driver holds)."""
    import torch

    try:
        if device == "mps":
            return {
                "allocated": int(torch.mps.current_allocated_memory()),
                "reserved": int(torch.mps.driver_allocated_memory()),
            }
        if device not in ("cpu", "meta"):
            mod = getattr(torch, device, None)
            alloc = getattr(mod, "memory_allocated", None)
            reserved = getattr(mod, "memory_reserved", None)
            if alloc is not None and reserved is not None:
                return {"allocated": int(alloc()), "reserved": int(reserved())}
    except Exception:  # noqa: BLE001 - counters are a check, never a failure
        return None
    return None


def _now_us() -> int:
    return time.time_ns() // 1000


class Ranges:
    """``record_function`` ranges seen entering and leaving, kept as
    START/END rows. The exit gets the handle the enter returned; at the
    dispatcher that handle arrives in a new Python wrapper, so an exit whose
    handle is not known closes the innermost open range (ranges nest)."""

    def __init__(self, maxlen: int = 100_000) -> None:
        self.items: Deque[Tuple[str, str, int]] = collections.deque(maxlen=maxlen)
        self._open: List[Tuple[int, str]] = []

    def enter(self, name: Any, handle: Any) -> None:
        if isinstance(name, str):
            self._open.append((id(handle), name))
            self.items.append((name, "START", _now_us()))
            del self._open[:-1000]  # ranges never closed do not pile up

    def exit(self, handle: Any) -> None:
        if not self._open:
            return
        key = id(handle)
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == key:
                name = self._open.pop(i)[1]
                break
        else:
            name = self._open.pop()[1]
        self.items.append((name, "END", _now_us()))

    def rows(self) -> List[Dict[str, Any]]:
        return [{"name": n, "stage": st, "device": 0, "time_us": t} for n, st, t in list(self.items)]


class DispatchRecorder(Recorder):
    """Records allocations and frees of one device type at the dispatcher.

    Args:
        max_entries: allocations and frees kept, oldest dropped first (each
            becomes two or three trace entries in the file: the segment
            events of a block of its own are not counted).
        stacks: ``"python"``/``"all"`` keep Python stacks (there are no C++
            frames at this level); ``"none"`` records none (cheaper).
        device: device type followed (``"cpu"``, ``"mps"``, ...); default
            :func:`pick_device`.
    """

    def __init__(self, max_entries: int, stacks: str, device: Optional[str] = None) -> None:
        self.max_entries = max_entries
        self.stacks = stacks
        self.device_type = device or pick_device()
        # Events as tuples of plain values, which Python's collector does not
        # track (dicts would be: with 100k of them every full collection
        # walks them all): (ALLOC or FREE, address, size, time µs, stack id,
        # label). They become PyTorch's trace entries at a dump.
        self.trace: Deque[Tuple[int, int, int, int, int, str]] = collections.deque(maxlen=max_entries)
        self.seen = 0  # allocations and frees since the start, kept or not
        # Live blocks: storage id -> (address, size, stack id, label), and
        # the weak reference that reports the storage's end.
        self.live: Dict[int, Tuple[int, int, int, str]] = {}
        # Storages over memory another live storage already holds (one made
        # by ``torch.from_numpy(t.numpy())``, ``frombuffer``, DLPack): one
        # block, not two. Address -> the keys of the live storages there, the
        # block's owner (the entry with its size) among them; an alias is
        # ``live[key] = (address, 0, 0, "")``. When the owner goes first the
        # block passes to an alias: the memory is freed with the last one.
        self._at_addr: Dict[int, List[int]] = {}
        # Bytes in live blocks; the most since the start and since the last
        # totals(reset_window=True) (for the live view and dump_at).
        self.allocated = self.peak = self.window_peak = 0
        self._refs: Dict[int, _StorageRef] = {}
        self.label = ""
        self.device_readings: List[Dict[str, int]] = []  # the device allocator's own counters, read at steps
        # Interned stacks: id -> frame dicts (id 0: no stack).
        self.stack_list: List[List[Dict[str, Any]]] = [[]]
        self._stack_ids: Dict[tuple, int] = {}
        self._frame_cache: Dict[Tuple[int, int], Dict[str, Any]] = {}
        self._pinned: set = set()
        self._mode: Any = None
        self.active = False
        self.ranges = Ranges()

    # ----- life cycle -----

    def start(self) -> None:
        from vramscope._recording.compile import skip_frames

        # Weak reference callbacks run wherever the last reference went,
        # compiled regions included.
        skip_frames(DispatchRecorder._on_release)
        if "_wanted" not in self.__dict__:  # (a test may have replaced it)
            self._wanted = self._fast_wanted()  # type: ignore[method-assign]
        self.adopt_existing()
        self._mode = _make_mode(self)
        self._mode.__enter__()
        self.active = True
        self.sample_counters()

    def existing_storages(self) -> Iterator[Tuple[Any, int, int, int]]:
        """``(storage, id, size, address)`` of each followed storage alive
        now (once each, empty ones left out): the tensors Python's collector
        tracks and their gradients, so a tensor only C++ holds (a pending
        graph's saved tensors) is not seen."""
        import gc

        import torch

        Tensor = torch.Tensor
        # Fake tensors (what torch.compile, estimates and FakeTensorMode make)
        # say "cpu" over a storage with no memory; asking for its address warns.
        fake_mod = sys.modules.get("torch._subclasses.fake_tensor")
        Fake = getattr(fake_mod, "FakeTensor", None)
        seen = set()
        for o in gc.get_objects():
            # type(), not isinstance(): no __class__ lookups on lazy module
            # attributes and proxies, which may warn or import.
            if not issubclass(type(o), Tensor) or (Fake is not None and issubclass(type(o), Fake)):
                continue
            for t in (o, getattr(o, "_grad", None) if o.is_leaf else None):
                if t is None:
                    continue
                try:
                    if not self._wanted(t):
                        continue
                    st = t.untyped_storage()
                    key, size = st._cdata, st.nbytes()
                    if key in seen or size == 0:
                        continue
                    addr = st.data_ptr()
                except Exception:  # noqa: BLE001 - fake, functional, meta and sparse tensors have no plain storage
                    continue
                if not addr:
                    continue  # a storage without memory
                seen.add(key)
                yield st, key, size, addr

    def adopt_existing(self) -> int:
        """Tensors alive before the recording (the model's parameters, their
        gradients, optimizer state, the batch): live blocks without a stack,
        as a CUDA snapshot shows blocks allocated before its history; their
        frees are recorded. Returns the bytes adopted."""
        total = 0
        for st, key, size, addr in self.existing_storages():
            if key in self.live:
                continue
            ref = _StorageRef(st, self._on_release)
            ref.key = key
            self._refs[key] = ref
            if self._alias(key, addr):
                continue
            self.live[key] = (addr, size, 0, "")
            total += size
        self._grow(total)
        return total

    def _grow(self, size: int) -> None:
        a = self.allocated = self.allocated + size
        if a > self.peak:
            self.peak = a
        if a > self.window_peak:
            self.window_peak = a

    def totals(self, reset_window: bool = False) -> Tuple[int, int, int]:
        """``(allocated, peak, window peak)`` bytes, as recorded;
        ``reset_window`` starts a new window (an iteration's peak)."""
        out = (self.allocated, self.peak, self.window_peak)
        if reset_window:
            self.window_peak = self.allocated
        return out

    def stop(self) -> None:
        mode, self._mode = self._mode, None
        self.active = False
        if mode is None:
            return
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        if _get_current_dispatch_mode() is mode:
            mode.__exit__(None, None, None)
        else:
            # Another mode entered after ours is still on the stack: popping
            # would remove that one. Ours stays, passing every call through.
            print("vramscope: a dispatch mode entered after the recording is still active; the recorder stays on the stack, idle", file=sys.stderr)

    # ----- what the mode calls -----

    def _wanted(self, t: Any) -> bool:
        return t.device.type == self.device_type

    def _fast_wanted(self) -> Callable[[Any], bool]:
        # A property read instead of building a torch.device per tensor.
        if self.device_type == "cpu":
            return lambda t: t.is_cpu
        if self.device_type == "mps":
            return lambda t: t.is_mps
        return self._wanted

    def fresh(self, t: Any, depth: int) -> None:
        """``t`` came out of an operator: record its storage if it is new."""
        if not self._wanted(t):
            return
        st = t.untyped_storage()
        key = st._cdata
        if key in self.live:
            return
        size = st.nbytes()
        if size == 0:
            # Nothing allocated yet; an ``out=`` call may grow it later.
            ref = _StorageRef(st, self._on_release)
            ref.key = key
            self._refs[key] = ref
            self.live[key] = (0, 0, 0, "")
            return
        self._alloc(st, key, size, depth + 1)

    def resized(self, t: Any, depth: int) -> None:
        """``t`` was written by an ``out=`` or ``resize_`` call: a tracked
        storage that grew was freed and allocated again; an untracked one
        that is new (an empty ``out`` made outside the dispatcher) is new."""
        if not self._wanted(t):
            return
        st = t.untyped_storage()
        key = st._cdata
        held = self.live.get(key)
        size = st.nbytes()
        if held is None:
            return
        if held[0] == st.data_ptr() and held[1] in (size, 0):
            return  # the same block, or an alias of a live one
        self._release(key)
        if size:
            self._alloc(st, key, size, depth + 1)

    def _alias(self, key: int, addr: int) -> bool:
        """Whether the new storage ``key`` is over memory a live storage
        holds (then it is followed as an alias, not counted); otherwise it is
        the owner of the block at ``addr`` from now on."""
        keys = self._at_addr.get(addr)
        if keys:
            keys.append(key)
            self.live[key] = (addr, 0, 0, "")
            return True
        self._at_addr[addr] = [key]
        return False

    def _leave(self, key: int, held: Tuple[int, int, int, str]) -> bool:
        """Take ``key`` off the storages over ``held``'s address. True when
        another storage there takes the block over (the owner went first: an
        alias still holds the memory), so that it is not freed."""
        keys = self._at_addr.get(held[0])
        if keys is None or key not in keys:
            return False
        keys.remove(key)
        if not keys:
            del self._at_addr[held[0]]
            return False
        if held[1]:
            self.live[keys[0]] = held
            return True
        return False

    def _alloc(self, st: Any, key: int, size: int, depth: int) -> None:
        addr = st.data_ptr()
        ref = _StorageRef(st, self._on_release)
        ref.key = key
        self._refs[key] = ref
        if not addr:  # a size over no memory (a fake tensor's storage)
            self.live[key] = (0, 0, 0, "")
            return
        if self._alias(key, addr):
            return
        sid = self._stack(depth + 1)
        t, label = _now_us(), self.label
        self.live[key] = (addr, size, sid, label)
        self.trace.append((_ALLOC, addr, size, t, sid, label))
        self.seen += 1
        self._grow(size)

    def _on_release(self, ref: _StorageRef) -> None:
        # Runs where the last reference went: in the program's code, in a
        # collection, on any thread.
        if self.active:
            self._release(ref.key)
        else:
            held = self.live.pop(ref.key, None)
            self._refs.pop(ref.key, None)
            if held is not None:
                self._leave(ref.key, held)

    def _release(self, key: int) -> None:
        """The block's free. It carries the allocation's stack: walking the
        stack again at every free would double the recorder's cost for a
        stack the analyses do not use."""
        self._refs.pop(key, None)
        held = self.live.pop(key, None)
        if held is None or self._leave(key, held) or not held[1]:
            return
        addr, size, sid, label = held
        self.allocated -= size
        self.trace.append((_FREE, addr, size, _now_us(), sid, label))
        self.seen += 1

    def _stack(self, depth: int) -> int:
        """Id of the Python stack of the caller ``depth`` frames up,
        innermost first, as shared frame dicts (pickle writes each once).
        The hot path builds only the key: (code, instruction) per frame."""
        if self.stacks == "none":
            return 0
        try:
            top = f = sys._getframe(depth + 1)
        except ValueError:
            return 0
        # The guard that keeps torch.compile out of a dispatch mode's handler
        # adds its own frames above the handler.
        # So does PyTorch's dispatch to a function mode (`_GUARD_FILES`).
        while f is not None and _is_guard(f.f_code):
            top = f = f.f_back
        # Code objects by id: hashing a code object hashes its bytecode and
        # constants, every time. The codes of every interned stack are kept
        # (self._pinned), so an id in a key cannot be reused by another code.
        key: List[int] = []
        add = key.append
        while f is not None:
            add(id(f.f_code))
            add(f.f_lasti)
            f = f.f_back
        k = tuple(key)
        sid = self._stack_ids.get(k)
        if sid is None:
            frames = []
            f = top
            while f is not None:
                self._pinned.add(f.f_code)
                # The recorder's own frames are no one's code: a mode's
                # handler stays on the stack around a call that runs more
                # Python (``loss.backward()`` recomputing a checkpointed
                # block), where it would be taken for the user's line.
                if not f.f_code.co_filename.startswith(_OWN_FILES):
                    frames.append(self._frame(f))
                f = f.f_back
            sid = self._stack_ids[k] = len(self.stack_list)
            self.stack_list.append(frames)
        return sid

    def _frame(self, f: Any) -> Dict[str, Any]:
        k = (id(f.f_code), f.f_lasti)  # the code is pinned by the caller
        d = self._frame_cache.get(k)
        if d is None:
            code = f.f_code
            d = {"filename": code.co_filename, "line": f.f_lineno or code.co_firstlineno, "name": code.co_name}
            self._frame_cache[k] = d
        return d

    # ----- what the session calls -----

    kind = "dispatch"
    stacks_by_address = True

    def at_step(self) -> None:
        self.sample_counters()  # the device allocator's own counters (MPS), beside what was seen

    def sample_counters(self) -> None:
        c = device_counters(self.device_type)
        if c is not None:
            c["time_us"] = _now_us()
            self.device_readings.append(c)
            del self.device_readings[:-10_000]

    def collect(self, restart: bool) -> None:
        """Nothing to collect: the trace is always current."""

    def entries(self) -> List[Dict[str, Any]]:
        """The trace as PyTorch writes it, of the last ``max_entries``
        allocations and frees: ``segment_alloc`` + ``alloc`` per allocation
        (nothing is cached) and ``free_requested`` + ``free_completed`` +
        ``segment_free`` per free."""
        stacks = self.stack_list
        out: List[Dict[str, Any]] = []
        append = out.append
        for kind, addr, size, t, sid, label in list(self.trace):
            frames = stacks[sid]
            if kind == _ALLOC:
                append({"action": "segment_alloc", "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": frames})
                e = {"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": frames}
                if label:
                    e["user_metadata"] = label
                append(e)
            else:
                for action in ("free_requested", "free_completed", "segment_free"):
                    append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": frames})
        return out

    def history(self) -> Dict[str, Any]:
        """How much of the recording the trace holds (the snapshot's
        ``vramscope.history``): events are allocations and frees."""
        return {"unit": "events", "max": self.max_entries, "seen": self.seen, "kept": len(self.trace)}

    def snapshot(self, marks: Optional[List[Tuple[str, int, int]]] = None) -> Dict[str, Any]:
        """The snapshot so far; the recording goes on."""
        self.sample_counters()
        trace = self.entries()
        live = sorted(v for v in list(self.live.values()) if v[1])
        stacks = self.stack_list
        segments = [cpu_segment({"addr": a, "size": n, "frames": stacks[sid]}) for a, n, sid, _ in live]
        return {"segments": segments, "device_traces": [trace], "external_annotations": self.annotations()}

    def annotations(self) -> List[Dict[str, Any]]:
        """The program's ``record_function`` ranges, as PyTorch's
        ``external_annotations`` rows."""
        return self.ranges.rows()

    def meta(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"device_type": self.device_type}
        if self.device_readings:
            out["device_counters"] = list(self.device_readings)
        return out

    def set_label(self, label: str) -> None:
        self.label = label

    def device(self) -> int:
        return 0

    def live_blocks(self, unstacked: bool = False) -> List[Tuple[int, int, List[Dict[str, Any]]]]:
        """``(address, size, frames)`` of every live block with a stack;
        ``unstacked``: those without one too (adopted at the start), with
        no frames."""
        stacks = self.stack_list
        return [(a, n, stacks[sid]) for a, n, sid, _ in list(self.live.values()) if n and (sid or unstacked)]


# Files of torch's dynamo guard around a mode's handler (torch._disable_dynamo):
# its frames sit between the caller and the handler. And `torch/overrides.py`:
# a `torch.nn.functional` function hands its call to a function mode through
# `handle_torch_function`, a frame the program would not have unrecorded.
_GUARD_FILES = (
    "torch/_compile.py",
    "torch/_dynamo/eval_frame.py",
    "torch/overrides.py",
    "torch\\_compile.py",
    "torch\\_dynamo\\eval_frame.py",
    "torch\\overrides.py",
)
_WRAPPER_CODES: set = set()


# The recorders' own files (this directory).
_OWN_FILES = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _is_guard(code: Any) -> bool:
    if code in _WRAPPER_CODES:
        return True
    if code.co_filename.endswith(_GUARD_FILES):
        _WRAPPER_CODES.add(code)
        return True
    return False


def _make_mode(rec: DispatchRecorder) -> Any:
    """The ``TorchDispatchMode`` that feeds ``rec``."""
    return _mode_class()(rec)


@functools.lru_cache(maxsize=1)
def _mode_class() -> type:
    """One class for the life of the process (Dynamo keys what it compiled
    on the types of the active modes). Its handler is the hot path: one
    dict lookup per call, outputs touched only for operators that make
    storages."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    Tensor = torch.Tensor
    kinds = _kinds

    class VramscopeDispatch(TorchDispatchMode):
        # (The handler keeps TorchDispatchMode's dynamo guard, two Python
        # frames per call: without it torch.compile traces into it.)

        def __init__(self, rec: DispatchRecorder) -> None:
            super().__init__()
            self.rec = rec

        @classmethod
        def ignore_compile_internals(cls) -> bool:
            # Without this, Dynamo compiles nothing while a dispatch mode is
            # active ("non-infra torch dispatch mode present") and a compiled
            # program would run eagerly under the recording. With it, the
            # mode is off while Dynamo compiles and on while the compiled
            # code runs, which allocates through the dispatcher as eager
            # code does.
            return True

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            # Keyed by id: OpOverload hashes in Python. Operators live as long
            # as the process, so ids are not reused. The call goes straight to
            # the C++ binding (``OpOverload.__call__`` is one more frame).
            known = kinds.get(id(func))
            if known is None:
                known = kinds[id(func)] = (_classify(func), getattr(func, "_op", func), func)
            kind, op = known[0], known[1]
            out = op(*args, **kwargs) if kwargs else op(*args)
            rec = self.rec
            if kind == _SKIP or not rec.active:
                return out
            if kind >= _ENTER:
                if kind == _ENTER and args:
                    rec.ranges.enter(args[0], out)
                elif args:
                    rec.ranges.exit(args[0])
                return out
            # Plain tensors only: subclasses (FakeTensor while torch.compile
            # traces, DTensor, ...) have no storage of their own here.
            handle: Callable[[Any, int], None] = rec.resized if kind == _RESIZE else rec.fresh
            if type(out) is Tensor:
                handle(out, 1)
            elif isinstance(out, (tuple, list)):
                for o in out:
                    if type(o) is Tensor:
                        handle(o, 1)
            return out

    return VramscopeDispatch

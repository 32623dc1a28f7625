"""Recording on the CPU from PyTorch's allocator itself.

``vramscope._native`` points ``libc10.so``'s calls to ``posix_memalign`` and
``free`` at hooks (``crates/cpu-allocator``): every allocation of c10's CPU
allocator is seen where it happens, with its exact size and address, in
whatever thread, kernels' scratch space included (oneDNN's buffers inside a
convolution, which no tensor holds). Nothing runs per operator on the Python
side but a ``TorchFunctionMode`` around each call of the torch API: when the
call allocated, the Python stack of its caller is taken (the current line of
every frame) and given to the allocations that call made on this thread. So
``loss.backward()`` is the stack of everything backward allocates, the
optimizer's lines in ``adam.py`` of its state and temporaries, and a training
loop at module level is ``train.py:12 in <module>``.

The file is written as the dispatch recorder writes it (one segment per live
block; ``vramscope.recorder == "cpu-allocator"``); marks become
``user_metadata`` from their time ranges. Tensors alive before the recording
are adopted (their frees are recorded). Linux only: elsewhere, and where the
hooks cannot be installed, the CPU is recorded at the dispatcher.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

from vramscope._recording import compile as _compile
from vramscope._recording.recorders.dispatch import DispatchRecorder
from vramscope._recording.recorders.blocks import cpu_segment

__all__ = ["AllocatorRecorder", "available", "DEFAULT_EVENTS"]

# The CPU allocator hooks keep their events natively (32 bytes each) and
# write them without a Python object per entry (one trace entry each, about
# 58 bytes of file). Three million are 96 MB at most inside the program and
# minutes of a small model's CPU training: tiny Hugging Face models made
# 12,000 (GPT-2) to 52,000 (a diffusers UNet) a second, a 4-layer Llama 14,000.
DEFAULT_EVENTS = 3_000_000

# This package's files: never where a program's call is.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def available() -> Optional[str]:
    """``None`` when the hooks can be installed, else why not."""
    if not sys.platform.startswith("linux"):
        return f"the CPU allocator hooks need Linux, not {sys.platform}"
    try:
        from vramscope import _native

        _native.cpu_allocator_install()
    except (ImportError, AttributeError) as err:
        return f"vramscope._native is not built ({err})"
    except OSError as err:
        return str(err)
    return None


class AllocatorRecorder(DispatchRecorder):
    """Records c10's CPU allocator through native hooks; stacks come from a
    ``TorchFunctionMode`` around torch API calls."""

    kind = "allocator"

    def at_step(self) -> None:
        """The hooks see every allocation: no device counters to read."""

    def bracket(self) -> Any:
        from vramscope import _native

        return (_native.cpu_allocator_mark, _native.cpu_allocator_stamp, self._stack)

    def __init__(self, max_entries: int, stacks: str, limit: Optional[int] = None) -> None:
        super().__init__(max_entries, stacks, "cpu")
        self.trace: Any = None  # the last snapshot's _native.CpuTrace
        self.limit = limit  # bytes the program's tensors may hold (record(cpu_limit=))
        # (file, line, function) -> (calls, largest bytes): fp32 asked of fp32.
        self.upcasts: Dict[Tuple[str, int, str], Tuple[int, int]] = {}

    def start(self) -> None:
        from vramscope import _native

        _native.cpu_allocator_install()
        # The native ring keeps the last max_entries allocations and frees
        # (each one trace entry in the file).
        _native.cpu_allocator_start(max(1, self.max_entries))
        _native.cpu_allocator_set_limit(self.limit or 0)
        self._wanted = self._fast_wanted()  # type: ignore[method-assign]
        self._adopt_native()
        self._mode = _make_function_mode(self, _native)
        self._mode.__enter__()
        self.active = True

    def _adopt_native(self) -> None:
        """Tensors alive before the recording: the native side records
        their frees (no weak references needed here)."""
        from vramscope import _native

        for _st, _key, size, addr in self.existing_storages():
            _native.cpu_allocator_adopt(addr, size)

    def stop(self) -> None:
        from vramscope import _native

        mode, self._mode = self._mode, None
        self.active = False
        try:
            if mode is not None:
                from torch.overrides import _get_current_function_mode

                if _get_current_function_mode() is mode:
                    mode.__exit__(None, None, None)
                else:
                    print("vramscope: a torch function mode entered after the recording is still active; the recorder's stays, idle", file=sys.stderr)
        finally:
            _native.cpu_allocator_set_limit(0)
            _native.cpu_allocator_stop()

    def note_upcast(self, to: bool, args: Any, kwargs: Any) -> None:
        """``x.float()`` or ``x.to(torch.float32)`` of a tensor that already
        is fp32: nothing in this run, an fp32 copy in a 16-bit one (what
        tells ``advise`` that bf16 weights keep the loss in fp32). Counted
        by the calling line."""
        import torch

        x = args[0]
        if x.dtype is not torch.float32:
            return
        if to and torch.float32 not in args[1:] and (kwargs or {}).get("dtype") is not torch.float32:
            return  # .to(device) and the like
        frames = self.stack_list[self._stack(1)]
        where = next((f for f in frames if "/torch/" not in f["filename"] and not f["filename"].startswith(_PACKAGE)), None)
        if where is None:
            return
        key = (where["filename"], where["line"], where["name"])
        count, most = self.upcasts.get(key, (0, 0))
        self.upcasts[key] = (count + 1, max(most, x.numel() * 4))

    def history(self) -> Dict[str, Any]:
        from vramscope import _native

        kept = len(self.trace) if self.trace is not None else 0
        return {"unit": "events", "max": self.max_entries, "seen": int(_native.cpu_allocator_mark()), "kept": kept}

    def snapshot(self, marks: Optional[List[Tuple[str, int, int]]] = None) -> Dict[str, Any]:
        """The snapshot so far; its trace is the hooks' events copied now
        (a ``_native.CpuTrace``), written entry by entry by
        ``_files.write_atomic``: never one Python object per entry."""
        from vramscope import _native

        self.trace = _native.CpuTrace(self.stack_list, list(marks or ()))
        stacks = self.stack_list
        segments = [cpu_segment({"addr": a, "size": n, "frames": stacks[sid]}) for a, n, sid in _native.cpu_allocator_live() if n]
        return {"segments": segments, "device_traces": [self.trace], "external_annotations": self.annotations()}

    def meta(self) -> Dict[str, Any]:
        # One trace entry per allocation and per free: the reader adds the
        # segment entries of an allocator that caches nothing.
        out: Dict[str, Any] = {"device_type": "cpu", "trace_form": "events"}
        if self.limit:
            out["cpu_limit"] = self.limit
        if self.upcasts:
            out["upcasts"] = [
                {"file": f, "line": n, "name": name, "count": c, "bytes": b} for (f, n, name), (c, b) in sorted(self.upcasts.items())
            ]
        return out

    def totals(self, reset_window: bool = False) -> Tuple[int, int, int]:
        """``(allocated, peak, window peak)``, counted by the hooks."""
        from vramscope import _native

        a, p, w = _native.cpu_allocator_totals(reset_window)
        return int(a), int(p), int(w)

    def live_blocks(self, unstacked: bool = False) -> List[Tuple[int, int, List[Dict[str, Any]]]]:
        from vramscope import _native

        stacks = self.stack_list
        return [(a, n, stacks[sid]) for a, n, sid in _native.cpu_allocator_live() if n and (sid or unstacked)]


def _make_function_mode(rec: AllocatorRecorder, native: Any) -> Any:
    """The ``TorchFunctionMode`` that gives allocations their stacks: two
    native calls per torch API call, a stack walk only when it allocated."""
    return _function_mode_class()(rec, native)


@functools.lru_cache(maxsize=1)
def _function_mode_class() -> type:
    """One class for the life of the process: Dynamo guards on the types of
    the modes on the stack, so a new class per recording would recompile
    every graph at every recording."""
    import torch
    from torch.overrides import TorchFunctionMode

    compiling = _compile.bind()
    ENTER = torch.ops.profiler._record_function_enter_new
    EXIT = torch.ops.profiler._record_function_exit._RecordFunction
    FLOAT, TO = torch.Tensor.float, torch.Tensor.to

    class VramscopeStacks(TorchFunctionMode):
        def __init__(self, rec: AllocatorRecorder, native: Any) -> None:
            super().__init__()
            self.mark, self.stamp, self.stack = native.cpu_allocator_mark, native.cpu_allocator_stamp, rec._stack
            self.enter_range, self.exit_range = rec.ranges.enter, rec.ranges.exit
            self.upcast = rec.note_upcast

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            # torch.compile traces function modes into its graphs: there the
            # mode must be nothing but the call (it is True only while
            # tracing; compiled graphs run without modes).
            if compiling():
                return func(*args, **(kwargs or {}))
            mark = self.mark
            m = mark()
            out = func(*args, **kwargs) if kwargs else func(*args)
            if mark() != m:
                self.stamp(m, self.stack(1))
            if func is ENTER or func is EXIT:  # record_function ranges
                if func is ENTER and args:
                    self.enter_range(args[0], out)
                elif args:
                    self.exit_range(args[0])
            elif (func is FLOAT or func is TO) and args and out is args[0]:
                self.upcast(func is TO, args, kwargs)
            return out

    return VramscopeStacks

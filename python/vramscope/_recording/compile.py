"""Staying out of ``torch.compile``'s way.

A recording must not change what Dynamo compiles. Two things keep
vramscope's code out of it (``_hooks`` says how the global hooks use them):

* :func:`compiling`: True only while Dynamo traces. Dynamo reads it as a
  constant, so a hook that returns at once on it leaves nothing in a graph:
  no graph break and no guard of its own.
* :func:`skip_frames`: vramscope's callbacks that PyTorch or the interpreter
  call from C (global module and optimizer hooks fired from ``_call_impl``,
  autograd node hooks, weak reference and collector callbacks) can run while
  a compiled region is active, where Dynamo would otherwise try to compile
  each of them as a frame of its own (one more entry in its counters, a
  recompilation to the eye). They, and everything they call, are marked to
  run as plain Python.
"""

from __future__ import annotations

from typing import Any, Callable


def _never() -> bool:
    return False


def compiling() -> bool:
    """Whether Dynamo is tracing now (``torch.compiler.is_compiling``)."""
    return _is_compiling()


_is_compiling: Callable[[], bool] = _never


def bind() -> Callable[[], bool]:
    """PyTorch's ``is_compiling``, bound once torch is imported (calling it
    directly in a hook is what Dynamo recognises as a constant)."""
    global _is_compiling
    import torch

    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if fn is None:
        fn = getattr(getattr(torch, "_dynamo", None), "is_compiling", None)
    _is_compiling = fn or _never
    return _is_compiling


def skip_frames(*fns: Any) -> bool:
    """Have Dynamo run ``fns`` (functions or methods) and what they call as
    plain Python, never as frames to compile. Returns False where this
    PyTorch has no way to say so (nothing else changes then)."""
    try:
        from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy
    except ImportError:
        return False
    strategy = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
    for fn in fns:
        code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        if code is not None:
            set_code_exec_strategy(code, strategy)
    return True

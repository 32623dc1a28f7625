"""Whether each outermost forward ran with autograd on (the mixin of
:class:`vramscope._annotate.tags.Tagger`).

A forward that no backward uses (a validation or test loop) costs far more
with autograd on: every tensor an operation saves for backward is kept
until the output is dropped, which in a loop that binds its output
(``output = model(data)``) is after the next batch's forward, so two
batches' graphs are alive at once. A snapshot records sizes and stacks, not
the grad mode: the recorder notes it at each outermost module call, as a
``(start µs, end µs, mode)`` span (``grad``, ``no_grad`` or ``inference``),
written as a ``vramscope.forward#MODE`` annotation
(``crates/analysis/src/categories/evaluation.rs`` reads them). Calls inside
backward (a checkpointed block recomputed) are not forwards of the program
and are left out.
"""

from __future__ import annotations

import collections
import contextlib
from typing import Any, Optional

from vramscope._annotate.backward_spans import _now_us


class ForwardSpans:
    """The grad mode of each outermost forward call; the Tagger's
    ``_tensor`` and ``tag`` are used."""

    _tensor: Any
    tag: Any

    def __init__(self) -> None:
        self.forward_spans: "collections.deque[tuple]" = collections.deque(maxlen=200_000)
        # The call running now (start µs, mode): an OOM inside it raises
        # before the post-hook, and the snapshot then writes it up to now.
        self._open_forward: Optional[tuple] = None
        self._modes: Any = None

    def _begin_forward(self) -> None:
        modes = self._modes
        if modes is None:
            import torch

            inference = getattr(torch, "is_inference_mode_enabled", lambda: False)
            modes = self._modes = (inference, torch.is_grad_enabled)
        mode = "inference" if modes[0]() else "grad" if modes[1]() else "no_grad"
        self._open_forward = (_now_us(), mode)

    def _end_forward(self, module: Any, output: Any) -> None:
        open_ = self._open_forward
        if open_ is not None:
            self._open_forward = None
            self.forward_spans.append((open_[0], _now_us(), open_[1]))
            # A model in eval mode called with autograd on (an evaluation
            # loop without torch.no_grad()): what it returns is named, for
            # the replay without autograd keeps it (a key/value cache
            # returned beside the logits) and frees what only the graph kept.
            if open_[1] == "grad" and not getattr(module, "training", True):
                import torch

                guard = getattr(torch._C, "DisableTorchFunction", None)
                # (tensors read, nothing computed: a recorder's function mode need not see it)
                with guard() if guard is not None else contextlib.nullcontext():
                    for t in _tensors_in(output, self._tensor):
                        self.tag(t, "output")


    def forward_spans_now(self, now: int) -> list:
        """Every span, the call still running (an OOM in a forward) up to ``now``."""
        spans = list(self.forward_spans)
        if self._open_forward is not None:
            spans.append((self._open_forward[0], now, self._open_forward[1]))
        return spans


def _tensors_in(value: Any, tensor: type, limit: int = 2_000) -> list:
    """The tensors reachable from a module's output: tuples, lists, dicts
    (a Hugging Face ``ModelOutput``) and plain objects' attributes (its
    ``DynamicCache`` and the layers in it), six levels deep, ``limit``
    objects at most; modules, classes and functions not entered."""
    import torch.nn as nn

    found: list = []
    seen: set = set()
    todo = [(value, 0)]
    while todo and len(seen) < limit:
        v, depth = todo.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, tensor):
            found.append(v)
            continue
        if depth >= 6 or isinstance(v, (str, bytes, int, float, bool, type, nn.Module)) or v is None or callable(v):
            continue
        if isinstance(v, dict):
            items = list(v.values())
        elif isinstance(v, (list, tuple)):
            items = list(v)
        else:
            items = list(getattr(v, "__dict__", {}).values())
        todo.extend((x, depth + 1) for x in items)
    return found

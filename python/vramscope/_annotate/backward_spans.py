"""Which part of the model each stretch of backward was for, told by the
program's own autograd graph while a recording runs (the mixin of
:class:`vramscope._annotate.tags.Tagger`).

Backward runs in autograd's engine: what it allocates has only the user's
``loss.backward()`` line on its stack. In the forward of each repeated
block (and of each module with parameters beside the blocks: an LM head,
an embedding) the recorder puts a pre-hook on the autograd node that made
the output, where the block's backward begins, and on the one that made
its input, where it ends (node hooks: the graph is unchanged). Each
backward becomes a ``(start µs, end µs, name)`` span, written as a
``vramscope.backward#NAME`` annotation (``crates/analysis/src/backward_blocks.rs``
reads them). A checkpointed block's recomputation is watched too: reentrant
checkpointing backpropagates through the graph it makes.

On CUDA, backward runs on autograd's device threads, which the forward's
allocation metadata does not reach: a pre-hook on the grad_fn of the
model's output stamps ``phase=backward`` on the thread that runs it.
"""

from __future__ import annotations

import collections
import functools
import time
from typing import Any, Dict, Optional

from vramscope._recording.compile import compiling

# Metadata key the recorder adds to the program's own.
_PHASE = "phase="


def _now_us() -> int:
    return time.time_ns() // 1000


class BackwardSpans:
    """The backward spans of the blocks and parts; the Tagger's ``_tensor``,
    ``_local``, ``_set_meta`` and ``_get_meta`` are read."""

    _tensor: Any
    _local: Any
    _set_meta: Any
    _get_meta: Any

    def __init__(self) -> None:
        # Each block's backward, (start µs, end µs, name): from the moment
        # autograd reaches the node that made the block's output to the one
        # that made its input (node pre-hooks set in the block's forward).
        # Backward's allocations have only `loss.backward()` on their
        # stacks; these spans say which block they were made for.
        self.backward_spans: "collections.deque[tuple]" = collections.deque(maxlen=200_000)
        self._open_backward: Optional[tuple] = None
        self._block_hooks: Dict[str, tuple] = {}  # block name -> its two node hooks
        self._queued_task = -1  # the backward whose end is queued to end the last span

    def _watch_block_backward(self, name: str, args: Any, output: Any) -> None:
        """Pre-hooks (node hooks: the graph is unchanged) on the node that
        made the block's output, where its backward begins, and on the one
        that made its input, where it ends."""
        out = _first_grad_fn(output, self._tensor)
        if out is None:
            return
        hooks = self._block_hooks.get(name)
        if hooks is None:  # made once per block: this runs at every call
            hooks = self._block_hooks[name] = (
                functools.partial(self._block_backward, name, True),
                functools.partial(self._block_backward, name, False),
            )
        out.register_prehook(hooks[0])
        inp = _first_grad_fn(args, self._tensor)
        if inp is not None and inp is not out:
            inp.register_prehook(hooks[1])

    def _block_backward(self, name: str, begins: bool, grad_outputs: Any) -> None:
        if compiling():  # compiled autograd traces node hooks
            return None
        now = _now_us()
        open_ = self._open_backward
        if open_ is not None and (begins or open_[0] == name):
            # A block begins where the one before it (in backward's order)
            # ends, if its input's node did not end it first.
            self.backward_spans.append((open_[1], now, open_[0]))
            self._open_backward = None
        if begins:
            self._open_backward = (name, now)
            self._end_with_backward()
        return None

    def _end_with_backward(self) -> None:
        """The last span of a backward ends with it: a callback queued on
        autograd's engine, once per backward (the last block's input, an
        embedding's token ids, has no node to end it)."""
        try:
            import torch

            task = torch._C._current_graph_task_id()
            if task == self._queued_task:
                return
            self._queued_task = task
            torch.autograd.Variable._execution_engine.queue_callback(self.end_backward)
        except Exception:  # noqa: BLE001 - an engine without callbacks: the next forward or step ends it
            pass

    def end_backward(self) -> None:
        """A block's backward still open ends now (the next forward, the
        optimizer step, a dump): its input's node was never reached."""
        open_ = self._open_backward
        if open_ is not None:
            self.backward_spans.append((open_[1], _now_us(), open_[0]))
            self._open_backward = None

    def _watch_backward(self, output: Any) -> None:
        """Backward runs on autograd's device threads, which the forward's
        metadata does not reach: a pre-hook on the grad_fn of the model's
        output (a node hook; the graph is unchanged) stamps ``phase=backward``
        on the thread that runs it. Those threads run nothing but backward,
        so the stamp is set once per thread and kept."""
        outs = output if isinstance(output, (tuple, list)) else (output,)
        for o in outs:
            fn = getattr(o, "grad_fn", None) if isinstance(o, self._tensor) else None
            if fn is not None:
                fn.register_prehook(self._backward_begins)
                return

    def _backward_begins(self, grad_outputs: Any) -> None:
        if compiling():  # compiled autograd traces node hooks
            return None
        local = self._local
        # The thread that ran the forward (CPU tensors backpropagate there)
        # keeps its own metadata; an engine thread is stamped once.
        if getattr(local, "depth", None) is not None or getattr(local, "backward", False):
            return None
        local.backward = True
        if self._set_meta is not None:
            prev = self._get_meta() or ""
            own = ";".join(p for p in prev.split(";") if p and not p.startswith(_PHASE))
            self._set_meta(f"{own};{_PHASE}backward" if own else f"{_PHASE}backward")
        return None


def _first_grad_fn(value: Any, tensor: type) -> Any:
    """The autograd node of the first tensor in ``value`` (a tensor, or a
    tuple or list of them, as blocks return and take) that has one."""
    for v in value if isinstance(value, (tuple, list)) else (value,):
        fn = getattr(v, "grad_fn", None) if isinstance(v, tensor) else None
        if fn is not None:
            return fn
    return None

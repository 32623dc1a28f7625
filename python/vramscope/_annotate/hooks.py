"""The global hooks through which the recorder's :class:`~vramscope._annotate.tags.Tagger`
sees module calls and optimizer steps, and how they stay out of
``torch.compile``'s way.

Dynamo inlines global hooks into the graphs it traces. Each hook here
returns at once while Dynamo traces (``torch.compiler.is_compiling``, which
Dynamo reads as a constant), so it leaves nothing in a graph and adds no
graph break; before this, tracing ran vramscope's code and failed
("already tracked for mutation"). Called from a compiled region, the hooks
run as plain Python (``_compile.skip_frames``), never as frames to compile.

Dynamo also guards on the dicts that hold the hooks. Each hook is one
function for the life of the process, put back under the same key at every
recording, so a graph traced during one recording passes its guards in the
next; a graph traced while no recording ran, or during one, is traced once
more at its first call on the other side (one recompilation). Hiding the
hooks from Dynamo while it compiles would avoid that, but a graph that
inlines a module call (a compiled ``training_step`` calling ``self.layer``)
then guards on the dicts being empty and recompiles at every call, until
Dynamo gives up and runs it eagerly (Lightning's ``BoringModel``: 11 graphs
instead of 2).
"""

from __future__ import annotations

from typing import Any, List, Optional

from vramscope._recording import compile as _compile

# The Tagger of the recording now, if any.
_active: Optional[Any] = None


def _compiling() -> bool:
    """``torch.compiler.is_compiling`` once bound (see ``_compile``)."""
    return False


# Four explicit functions, not one made by a factory: the module hooks run
# at every module call, and a generic ``hook(*args)`` with a ``getattr``
# measured 2x the cost (478 against 233 ns a call).


def _module_pre(module: Any, args: Any) -> None:
    if _compiling():
        return None
    tagger = _active
    if tagger is not None:
        tagger._forward_pre(module, args)
    return None


def _module_post(module: Any, args: Any, output: Any) -> None:
    if _compiling():
        return None
    tagger = _active
    if tagger is not None:
        tagger._forward_post(module, args, output)
    return None


def _optimizer_pre(opt: Any, args: Any, kwargs: Any) -> None:
    if _compiling():
        return None
    tagger = _active
    if tagger is not None:
        tagger._step_pre(opt, args, kwargs)
    return None


def _optimizer_post(opt: Any, args: Any, kwargs: Any) -> None:
    if _compiling():
        return None
    tagger = _active
    if tagger is not None:
        tagger._step_post(opt, args, kwargs)
    return None


# PyTorch's warning when a module is compiled while global module hooks
# exist ("fire an extra time for the OptimizedModule"): the extra call is
# the one these hooks use; hidden while they are the only global hooks.
_COMPILE_HOOK_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"


class _Hooks:
    """The four global hooks: registered once, put back under the same keys
    at every recording."""

    def __init__(self) -> None:
        self.handles: List[Any] = []
        self.installed = False  # while a recording runs
        self.filter: Optional[tuple] = None
        # Compilations Dynamo ran while a recording ran (its start callback;
        # for the snapshot and Tagger.at_step).
        self.compiles = 0

    def install(self) -> None:
        import warnings

        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim

        global _compiling
        if self.installed:
            return
        self.watch_compiles()
        alone = not nn_module._has_any_global_hook() if hasattr(nn_module, "_has_any_global_hook") else False
        fns = (_optimizer_pre, _optimizer_post, _module_pre, _module_post)
        if not self.handles:
            _compiling = _compile.bind()
            from vramscope._annotate.tags import Tagger

            _compile.skip_frames(*fns, Tagger._backward_begins)
            self.handles = [
                (optim.register_optimizer_step_pre_hook(_optimizer_pre), ()),
                (optim.register_optimizer_step_post_hook(_optimizer_post), ()),
                (nn_module.register_module_forward_pre_hook(_module_pre), ()),
                (nn_module.register_module_forward_hook(_module_post, always_call=True), ("_global_forward_hooks_always_called",)),
            ]
        else:
            for (handle, extras), fn in zip(self.handles, fns):
                hooks_dict = handle.hooks_dict_ref()
                if hooks_dict is None:  # (never: the dicts are module globals)
                    continue
                hooks_dict[handle.id] = fn
                for name in extras:
                    getattr(nn_module, name)[handle.id] = True
        self.installed = True
        if alone:
            warnings.filterwarnings("ignore", message=_COMPILE_HOOK_WARNING, category=UserWarning)
            self.filter = warnings.filters[0]

    def uninstall(self) -> None:
        import warnings

        if not self.installed:
            return
        for handle, _extras in self.handles:
            handle.remove()
        self.installed = False
        if self.filter is not None:
            try:
                warnings.filters.remove(self.filter)
            except ValueError:  # the program reset the filters meanwhile
                pass
            mutated = getattr(warnings, "_filters_mutated", None)  # warnings seen since are shown again
            if mutated is not None:
                mutated()
            self.filter = None

    def watch_compiles(self) -> None:
        """Count compilations through Dynamo's start callback, registered
        again if ``torch._dynamo.reset()`` cleared it (it clears every
        callback)."""
        try:
            from torch._dynamo.callback import callback_handler
        except ImportError:  # older PyTorch: no count
            return
        if self._compile_start not in callback_handler.start_callbacks:
            callback_handler.register_start_callback(self._compile_start)
        ends = getattr(callback_handler, "end_callbacks", None)
        if ends is not None and hasattr(callback_handler, "register_end_callback") and self._compile_end not in ends:
            callback_handler.register_end_callback(self._compile_end)

    def _compile_start(self, *_args: Any) -> None:
        if self.installed:
            self.compiles += 1

    def _compile_end(self, *_args: Any) -> None:
        # The code just generated is loaded: its allocations get their
        # lines' stacks from its first run (CPU allocator recordings).
        generated = getattr(_active, "generated", None) if self.installed else None
        if generated is not None:
            generated.refresh()


_hooks = _Hooks()


def activate(tagger: Any) -> None:
    """Route the hooks to ``tagger`` and install them."""
    global _active
    _active = tagger
    _hooks.install()


def deactivate(tagger: Any) -> None:
    """Take the hooks out, if ``tagger`` is the one they serve."""
    global _active
    if _active is tagger:
        _active = None
        _hooks.uninstall()


def watch_compiles() -> None:
    _hooks.watch_compiles()


def compiles() -> int:
    """Compilations Dynamo has run while recordings ran, in this process."""
    return _hooks.compiles

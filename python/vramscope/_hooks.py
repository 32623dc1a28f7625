"""The global hooks through which the recorder's :class:`~vramscope._tags.Tagger`
sees module calls and optimizer steps, and how they stay out of
``torch.compile``'s way.

Dynamo inlines global module hooks into the graphs it traces and guards on
the dicts that hold them. So the module hooks are hidden from it: taken out
of PyTorch's dicts while Dynamo compiles a frame (its compile start and end
callbacks) and put back, under the same keys, when it is done. A graph
traced during a recording is then the graph traced without one, with the
same guards, and keeps passing them after the recording ends. The optimizer
hooks stay: the optimizer's step wrapper reads their dict as a plain global,
so a graph traced without them would fail its guard at every step. Each
hook is one function for the life of the process that does nothing while
Dynamo traces (for the optimizer hooks, and for PyTorch builds without the
callbacks; before this, tracing ran vramscope's code and failed: "already
tracked for mutation"), and runs as plain Python when called from a
compiled region (``_compile.skip_frames``).
"""

from __future__ import annotations

from typing import Any, List, Optional

from . import _compile

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
    at every recording, hidden from Dynamo while it compiles."""

    def __init__(self) -> None:
        self.handles: List[Any] = []
        self.installed = False  # while a recording runs
        self.hidden = False  # while Dynamo compiles
        self.filter: Optional[tuple] = None
        # Compilations Dynamo ran while a recording ran (its start callback;
        # for the snapshot).
        self.compiles = 0

    def _insert(self, modules_only: bool = False) -> None:
        from torch.nn.modules import module as nn_module

        fns = (_optimizer_pre, _optimizer_post, _module_pre, _module_post)
        for i, ((handle, extras), fn) in enumerate(zip(self.handles, fns)):
            if modules_only and i < 2:
                continue
            hooks_dict = handle.hooks_dict_ref()
            if hooks_dict is None:  # (never: the dicts are module globals)
                continue
            hooks_dict[handle.id] = fn
            for name in extras:
                getattr(nn_module, name)[handle.id] = True

    def _remove(self, modules_only: bool = False) -> None:
        for handle, _extras in self.handles[2:] if modules_only else self.handles:
            handle.remove()

    def install(self) -> None:
        import warnings

        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim

        global _compiling
        if self.installed:
            return
        if not self.handles:
            _compiling = _compile.bind()
            from ._tags import Tagger

            _compile.skip_frames(_module_pre, _module_post, _optimizer_pre, _optimizer_post, Tagger._backward_begins)
        self.watch_compiles()
        alone = not nn_module._has_any_global_hook() if hasattr(nn_module, "_has_any_global_hook") else False
        if not self.handles:
            self.handles = [
                (optim.register_optimizer_step_pre_hook(_optimizer_pre), ()),
                (optim.register_optimizer_step_post_hook(_optimizer_post), ()),
                (nn_module.register_module_forward_pre_hook(_module_pre), ()),
                (nn_module.register_module_forward_hook(_module_post, always_call=True), ("_global_forward_hooks_always_called",)),
            ]
        else:
            self._insert()
        self.installed = True
        if alone:
            warnings.filterwarnings("ignore", message=_COMPILE_HOOK_WARNING, category=UserWarning)
            self.filter = warnings.filters[0]

    def uninstall(self) -> None:
        import warnings

        if not self.installed:
            return
        self._remove(modules_only=self.hidden)
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

    # ----- hidden while Dynamo compiles -----

    def watch_compiles(self) -> None:
        """Register the compile callbacks, again if ``torch._dynamo.reset()``
        cleared them (it clears every callback)."""
        try:
            from torch._dynamo.callback import callback_handler
        except ImportError:  # older PyTorch: the hooks return at once while tracing
            return
        if self._compile_start not in callback_handler.start_callbacks:
            callback_handler.register_start_callback(self._compile_start)
        if self._compile_end not in callback_handler.end_callbacks:
            callback_handler.register_end_callback(self._compile_end)

    def _compile_start(self, *_args: Any) -> None:
        if self.installed:
            self.compiles += 1
        if self.installed and not self.hidden:
            self._remove(modules_only=True)
            self.hidden = True

    def _compile_end(self, *_args: Any) -> None:
        if self.hidden:
            self.hidden = False
            if self.installed:
                self._insert(modules_only=True)


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

"""An exponential moving average's copy of the weights, found among
Python's objects when a snapshot is written.

The reader names an EMA's copy by the EMA class's code in the copy's
allocation stack (``crates/analysis/src/categories/ema.rs``); a copy made
before the recording started has no stack on the CPU recorders (nor on
CUDA when the history was turned on later), and stays ``unknown``. The
EMA object itself says which tensors are its copy: the recorder finds the
EMA classes' instances (no hook runs when one is made or updated) and tags
their tensors ``category=ema`` at each dump, after the parameters, so that
the copy of an EMA model that ran a forward (and was tagged as parameters
then) is named by what it is.

Only classes whose module is imported are looked for, and Python's objects
are walked once per dump (50 ms for half a million objects). The live state,
read every second or so, walks them at most every ``LIVE_RESCAN_S`` and
reads the EMAs found last in between.
"""

from __future__ import annotations

import sys
import time
import weakref
from typing import Any, Dict, List, Tuple

# (module, class, where its copy is): an attribute holding a list of
# tensors, or ``"self"``/an attribute holding an ``nn.Module`` whose
# parameters and buffers are the copy.
_CLASSES: Tuple[Tuple[str, str, str], ...] = (
    ("diffusers.training_utils", "EMAModel", "shadow_params"),
    ("timm.utils.model_ema", "ModelEma", "ema"),
    ("timm.utils.model_ema", "ModelEmaV2", "self"),
    ("timm.utils.model_ema", "ModelEmaV3", "self"),
    ("torch.optim.swa_utils", "AveragedModel", "self"),
    ("torch_ema.ema", "ExponentialMovingAverage", "shadow_params"),
    ("ema_pytorch.ema_pytorch", "EMA", "ema_model"),
)


def _classes() -> Dict[type, str]:
    out: Dict[type, str] = {}
    for module, name, where in _CLASSES:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type):
            out[cls] = where
    return out


def _copy_of(o: Any, where: str) -> List[Any]:
    import torch

    held = o if where == "self" else getattr(o, where, None)
    if isinstance(held, torch.nn.Module):
        return [*held.parameters(), *held.buffers()]
    if isinstance(held, (list, tuple)):
        return [t for t in held if isinstance(t, torch.Tensor)]
    return []


# The live state's walk of Python's objects, at most this often (an EMA made
# meanwhile is named from the next walk on).
LIVE_RESCAN_S = 30.0

# The EMAs the last walk found, (weak reference, where its copy is), and when.
_found: List[Tuple[Any, str]] = []
_walked_at = float("-inf")


def ema_tensors(max_age_s: float = 0.0) -> List[Any]:
    """The tensors of every EMA's copy alive now (empty when no EMA class is
    imported or none was made; never raises). ``max_age_s``: the EMAs found by a walk of
    Python's objects at most that old serve (their copies read now)."""
    global _found, _walked_at

    now = time.monotonic()
    if now - _walked_at > max_age_s:
        try:
            _found = _walk()
        except Exception:  # noqa: BLE001 - names are a help; the program goes on whatever happens here
            _found = []
        _walked_at = now
    out: List[Any] = []
    for ref, where in _found:
        o = ref()
        if o is None:
            continue
        try:
            out.extend(_copy_of(o, where))
        except Exception:  # noqa: BLE001 - a name is a help; the program goes on
            continue
    return out


def walk_again() -> None:
    """The next ``ema_tensors`` walks Python's objects whatever its age
    (a new recording)."""
    global _walked_at

    _walked_at = float("-inf")


def _walk() -> List[Tuple[Any, str]]:
    """A weak reference to each EMA instance alive, with where its copy is."""
    import gc

    classes = _classes()
    if not classes:
        return []
    kinds = tuple(classes)
    out: List[Tuple[Any, str]] = []
    for o in gc.get_objects():
        # type(), not isinstance(): a dead weak proxy raises on __class__.
        t = type(o)
        if not issubclass(t, kinds):
            continue
        where = next(w for c, w in classes.items() if issubclass(t, c))
        try:
            out.append((weakref.ref(o), where))
        except TypeError:  # (no class of _CLASSES has __slots__ today)
            continue
    return out

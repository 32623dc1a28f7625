"""Warnings keep the program's location while a recording runs.

The recorders watch the program through a ``TorchFunctionMode`` (the CPU
allocator's stacks) or a ``TorchDispatchMode`` (the dispatcher's events),
whose Python method is the innermost frame while an operator runs. A
warning raised in C++ by the operator (``TORCH_WARN``: "Converting a tensor
with requires_grad=True to a scalar", from the program's ``float(loss)``)
takes the innermost Python frame for its file and line, and so read as
vramscope's own (``vramscope/_recording/recorders/cpu_allocator.py:169``).

While a recording runs, ``warnings._showwarnmsg`` (through which every
warning is shown or recorded, ``catch_warnings(record=True)`` and pytest's
capture included) puts back the location the warning would have had
without the recording: the innermost frame outside vramscope and outside
PyTorch's mode machinery. Nothing runs per operator; only a warning that
names one of vramscope's files is touched.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import Any, Optional, Tuple

# Frames a warning never belongs to: vramscope's, and PyTorch's code that
# calls a mode.
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))).replace("\\", "/") + "/"
_MACHINERY = ("torch/overrides.py", "torch/utils/_python_dispatch.py", "torch/_ops.py")

_lock = threading.Lock()
_depth = 0
_original: Any = None


def _ours(filename: str) -> bool:
    return os.path.abspath(filename).replace("\\", "/").startswith(_OURS)


def _program_frame() -> Optional[Tuple[str, int]]:
    """(file, line) of the innermost frame that is neither vramscope's nor
    PyTorch's mode machinery, above the vramscope frame that raised."""
    f = sys._getframe(2)
    seen_ours = False
    while f is not None:
        name = f.f_code.co_filename.replace("\\", "/")
        if _ours(name):
            seen_ours = True
        elif seen_ours and not name.endswith(_MACHINERY):
            return f.f_code.co_filename, f.f_lineno
        f = f.f_back
    return None


def _showwarnmsg(msg: Any) -> None:
    if _ours(str(getattr(msg, "filename", ""))):
        place = _program_frame()
        if place is not None:
            msg.filename, msg.lineno = place
            msg.line = None  # read again from the program's file
    _original(msg)


class program_location:
    """While entered (recordings may nest), warnings raised under
    vramscope's modes are shown at the program's location."""

    def __enter__(self) -> "program_location":
        global _depth, _original
        with _lock:
            if _depth == 0:
                _original = warnings._showwarnmsg  # type: ignore[attr-defined]
                warnings._showwarnmsg = _showwarnmsg  # type: ignore[attr-defined]
            _depth += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        global _depth
        with _lock:
            _depth -= 1
            if _depth == 0:
                warnings._showwarnmsg = _original  # type: ignore[attr-defined]

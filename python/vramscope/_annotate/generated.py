"""Code ``torch.compile`` generated, named by the source it computes.

A compiled model allocates in modules Inductor writes
(``/tmp/torchinductor_<user>/xx/c….py``, function ``call``): a stack
there names a file that means nothing once the run is over. Inductor keeps,
for each module it loaded in this process, which lines of ``call`` compute
which FX nodes and the source stack each node was traced from
(``PyCodeCache.linemaps``). At each dump the recorder writes that map
(``vramscope.generated``); the reader puts the source frames into every
stack beside the generated frame, so sites, leaks and the report name the
model's lines (``modeling_llama.py:164 in forward``) and modules.

A source frame is written only where the file still reads as it did when
it was traced (the trace keeps each line's text), at the line that reads
so now: Inductor's cache serves the code compiled before an edit that
moved the lines (the same graph), or compiled for another program with
the same graph, and its source stacks are then as they were.

On the CPU, the allocator recorder's stacks come from a function mode that
compiled code never calls; :class:`GeneratedStacks` gives the buffers a
generated module allocates (its ``empty_strided_cpu``) the stack of the
line that allocates them, as a CUDA recording has them.
"""

from __future__ import annotations

import linecache
import os
import re
from typing import Any, Callable, Dict, List, Optional

# Entries written at most (a model compiled into many graphs has a few
# thousand); the map is for naming.
MAX_ENTRIES = 100_000

_FRAME = re.compile(r'File "(.+)", line (\d+), in (.+)\n(?:    (.*)\n)?')
# Dynamo traces through the recorder's own function mode: its frame is in
# the traced stacks and is no part of the program.
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _frames(trace: Optional[str]) -> Optional[List[Dict[str, Any]]]:
    """The source frames of one FX node's stack trace, innermost first;
    ``None`` when a file no longer reads as it did (another program's
    trace, served from the cache) or there is no trace."""
    if not trace:
        return None
    out = []
    for file, line, name, code in _FRAME.findall(trace):
        at = _where(file, int(line), code.strip()) if code else int(line)
        if at is None:
            return None
        if os.path.abspath(file).startswith(_OWN):
            continue
        out.append({"filename": file, "line": at, "name": name})
    return out[::-1] or None


def _where(file: str, line: int, code: str) -> Optional[int]:
    """The line of ``file`` that reads ``code``: ``line`` itself, or, where
    the file was edited since the trace (lines moved), the one line of the
    file that reads so; ``None`` when none or several do."""
    if linecache.getline(file, line).strip() == code:
        return line
    found = [i + 1 for i, text in enumerate(linecache.getlines(file)) if text.strip() == code]
    return found[0] if len(found) == 1 else None


def source_map() -> List[Dict[str, Any]]:
    """``[{"file", "lines", "frames"}]`` for every generated module loaded in
    this process: ``lines[i]`` is the first line of ``call`` that computes
    the node traced from ``frames[i]`` (innermost first), up to the next."""
    try:
        from torch._inductor.codecache import PyCodeCache
    except Exception:  # noqa: BLE001 - no Inductor: nothing generated
        return []
    out: List[Dict[str, Any]] = []
    entries = 0
    for path, linemap in list(getattr(PyCodeCache, "linemaps", {}).items()):
        if not linemap or len(linemap) != 2:
            continue
        lines: List[int] = []
        frames: List[List[Dict[str, Any]]] = []
        for start, trace in zip(*linemap):
            if entries >= MAX_ENTRIES:
                break
            fr = _frames(trace)
            lines.append(int(start))
            frames.append(fr or [])  # a start with no source ends the one before
            entries += 1
        if any(frames):
            out.append({"file": path, "lines": lines, "frames": frames})
    return out


class GeneratedStacks:
    """Gives the buffers generated modules allocate the stack of their line
    (CPU allocator recordings). Modules loaded since the last look are
    wrapped at each outermost module call; :meth:`restore` undoes it."""

    def __init__(self, mark: Callable[[], int], stamp: Callable[[int, int], None], stack: Callable[[int], int]) -> None:
        self.mark, self.stamp, self.stack = mark, stamp, stack
        self._seen = 0
        self._wrapped: List[tuple] = []

    def refresh(self) -> None:
        try:
            from torch._inductor.codecache import PyCodeCache
        except Exception:  # noqa: BLE001
            return
        mods = getattr(PyCodeCache, "modules", None)
        if not isinstance(mods, list) or len(mods) == self._seen:
            return
        for mod in mods[self._seen :]:
            helper = getattr(mod, "empty_strided_cpu", None)
            if helper is None or getattr(helper, "_vramscope", False):
                continue
            mod.empty_strided_cpu = self._wrap(helper)
            self._wrapped.append((mod, helper))
        self._seen = len(mods)

    def _wrap(self, helper: Callable[..., Any]) -> Callable[..., Any]:
        mark, stamp, stack = self.mark, self.stamp, self.stack

        def empty_strided_cpu(size: Any, stride: Any, dtype: Any) -> Any:
            m = mark()
            t = helper(size, stride, dtype)
            stamp(m, stack(1))
            return t

        empty_strided_cpu._vramscope = True  # type: ignore[attr-defined]
        return empty_strided_cpu

    def restore(self) -> None:
        for mod, helper in self._wrapped:
            mod.empty_strided_cpu = helper
        self._wrapped.clear()

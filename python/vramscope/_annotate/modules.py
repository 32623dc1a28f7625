"""Which code is which module: the map that lets a stack name the part of a
model that made its memory.

A stack says ``modeling_llama.py:157 in forward``; it does not say which
module's ``forward`` that is, nor which of the 32 layers called it. The
recorder sees the model itself: for every module under an outermost module
call it writes the module's path (repeated blocks grouped:
``model.layers[*].mlp``), its class, the lines of its ``forward`` and the
module that calls it (its nearest ancestor other than a ``ModuleList`` or
``ModuleDict``, which are never called). The analysis matches a stack's
frames against those lines (``vramscope.modules`` in the snapshot; see
docs/recorder-format.md).
"""

from __future__ import annotations

import dis
import inspect
import re
from typing import Any, Dict, List, Optional, Tuple

# A model with more distinct (grouped) module paths than this is mapped up
# to it: the map is for naming, not for completeness.
MAX_ROWS = 20_000

_INDEX = re.compile(r"\.(\d+)(?=\.|$)")
_COMPILED_PREFIX = "_orig_mod."


def grouped(path: str) -> str:
    """``model.layers.3.mlp`` -> ``model.layers[*].mlp``: every call of a
    repeated block runs the same lines, so a stack cannot tell them apart."""
    if path.startswith(_COMPILED_PREFIX) or path == "_orig_mod":
        path = path[len(_COMPILED_PREFIX) :] if path != "_orig_mod" else ""
    if not path:
        return ""
    out = _INDEX.sub("[*]", "." + path)
    return out[1:] if out.startswith(".") else out


def _code_lines(module: Any) -> Optional[Tuple[str, int, int]]:
    """File, first and last line of the module's ``forward`` (through
    decorators that keep ``__wrapped__``), or None."""
    fn = getattr(type(module), "forward", None)
    try:
        fn = inspect.unwrap(fn) if fn is not None else None
    except ValueError:  # a __wrapped__ cycle
        return None
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    last = code.co_firstlineno
    # (co_lines is Python 3.10+; findlinestarts reads the same table.)
    for _, line in dis.findlinestarts(code):
        if line is not None and line > last:
            last = line
    return code.co_filename, code.co_firstlineno, last


class ModuleMap:
    """The map of every outermost module seen, built once per module (a
    model's structure does not change between calls in programs vramscope
    is asked about; a new outermost module is mapped when first called)."""

    def __init__(self) -> None:
        self._rows: Dict[Tuple[str, str, int], Dict[str, Any]] = {}
        # The outermost modules, weakly: their parameters are read at each
        # dump (what trains may change after the first call: a layer frozen).
        self._roots: List[Any] = []
        # The last table read (for a dump off the program's thread, which
        # reads no tensor).
        self.last_parameters: List[Dict[str, Any]] = []

    def add(self, root: Any) -> None:
        import weakref

        import torch.nn as nn

        try:
            self._roots.append(weakref.ref(root))
        except TypeError:
            pass

        containers = (nn.ModuleList, nn.ModuleDict)
        try:
            named = list(root.named_modules(remove_duplicate=False))
        except Exception:  # noqa: BLE001 - a module whose walk fails is left unnamed
            return
        kinds: Dict[str, bool] = {}
        for path, m in named:
            kinds[grouped(path)] = isinstance(m, containers)
        for path, m in named:
            if len(self._rows) >= MAX_ROWS:
                return
            if isinstance(m, containers):
                continue
            try:
                lines = _code_lines(m)
            except Exception:  # noqa: BLE001 - a module we cannot read is left unnamed; the program goes on
                continue
            if lines is None:
                continue
            g = grouped(path)
            key = (g, lines[0], lines[1])
            if key in self._rows:
                continue
            self._rows[key] = {
                "path": g,
                "class": type(m).__name__,
                "caller": _caller(g, kinds) if g else None,
                "file": lines[0],
                "first_line": lines[1],
                "last_line": lines[2],
            }

    def rows(self) -> List[Dict[str, Any]]:
        return list(self._rows.values())

    def parameters(self) -> List[Dict[str, Any]]:
        """The parameters of every outermost module alive, by the module
        that owns them (grouped as the map's paths): how many tensors, their
        bytes and the bytes of those that train (``requires_grad``), summed
        over a repeated block's copies, with the number of copies. A
        parameter shared by two modules (a tied embedding and output layer)
        is counted once, for the first. What sharding advice gathers by
        block, which the gradients alone cannot tell where some parameters
        are frozen (LoRA's base model): ``vramscope.parameters`` in the
        snapshot (docs/recorder-format.md)."""
        from vramscope._annotate.tags import _local

        seen: set = set()
        by: Dict[str, Dict[str, Any]] = {}
        copies: Dict[str, set] = {}
        for ref in self._roots:
            root = ref()
            if root is None:
                continue
            try:
                named = list(root.named_parameters())
            except Exception:  # noqa: BLE001 - a model whose walk fails is left out
                continue
            for name, p in named:
                if id(p) in seen:
                    continue
                seen.add(id(p))
                owner = name.rpartition(".")[0]
                g = grouped(owner)
                try:
                    t = _local(p)
                    nbytes = int(t.numel()) * int(t.element_size())
                except Exception:  # noqa: BLE001 - a parameter we cannot size is left out
                    continue
                row = by.setdefault(g, {"path": g, "copies": 0, "tensors": 0, "bytes": 0, "trainable_bytes": 0})
                row["tensors"] += 1
                row["bytes"] += nbytes
                if p.requires_grad:
                    row["trainable_bytes"] += nbytes
                copies.setdefault(g, set()).add(owner)
        for g, row in by.items():
            row["copies"] = len(copies[g])
        self.last_parameters = sorted(by.values(), key=lambda r: r["path"])
        return self.last_parameters


def _caller(path: str, containers: Dict[str, bool]) -> str:
    """The nearest ancestor that is called: containers are skipped
    (``model.layers[*]``'s caller is ``model``, past ``model.layers``)."""
    parts = _split(path)
    while parts:
        parts.pop()
        parent = "".join(parts).lstrip(".")
        if not containers.get(parent, False):
            return parent
    return ""


def _split(path: str) -> List[str]:
    """``model.layers[*].mlp`` -> ``["model", ".layers", "[*]", ".mlp"]``."""
    out: List[str] = []
    for piece in re.findall(r"\[\*\]|\.?[^.\[]+", path):
        out.append(piece)
    return out

"""Files the recorder and its pages write: whole or not at all.

A snapshot is written while the program may be killed at any moment (an OOM,
a job's time limit), and a viewer may read the file as it is replaced: every
file here goes to a dot-named temporary file in the same directory (same
filesystem) and is renamed over the old one, so ``path`` is always either
the old file or the complete new one.
"""

from __future__ import annotations

import functools
import os
import pickle
import tempfile
from typing import IO, Any, Callable


def periodic_path(path: str, n: int) -> str:
    """``out.pickle`` -> ``out.step000123.pickle`` for step 123."""
    root, ext = os.path.splitext(path)
    return f"{root}.step{n:06d}{ext}"


def write_atomic(path: str, obj: Any) -> None:
    """Pickle ``obj`` to ``path``, whole or not at all, with the
    interpreter's default protocol (as ``torch.cuda.memory._dump_snapshot``
    writes). A snapshot whose trace is the CPU allocator hooks' (a
    ``_native.CpuTrace``) is written by the native writer, entry by entry."""
    traces = obj.get("device_traces") if isinstance(obj, dict) else None
    if traces and any(map(is_native_trace, traces)):
        from vramscope import _native

        try:
            replace_atomically(path, lambda f: _native.write_pickle(f, obj, pickle.DEFAULT_PROTOCOL))
            return
        except TypeError:
            # Something in the snapshot that is not plain data: pickle
            # writes it, with the trace made into Python objects.
            obj = dict(obj, device_traces=[t.entries() if is_native_trace(t) else t for t in traces])
    replace_atomically(path, lambda f: pickle.dump(obj, f, protocol=pickle.DEFAULT_PROTOCOL))


def is_native_trace(trace: Any) -> bool:
    """Whether a snapshot's trace is the CPU allocator hooks' (a
    ``_native.CpuTrace``, written entry by entry) rather than a list."""
    return type(trace).__name__ == "CpuTrace"


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``, whole or not at all."""
    replace_atomically(path, lambda f: f.write(text.encode("utf-8")))


def replace_atomically(path: str, fill: Callable[[IO[bytes]], Any]) -> None:
    """``fill`` a temporary file beside ``path``, fsync it, rename it over
    ``path`` and fsync the directory; on any failure the temporary file is
    removed and ``path`` is left as it was."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; match a plain open()
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:  # not possible on every platform; the rename is still atomic
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


@functools.lru_cache(maxsize=1)
def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

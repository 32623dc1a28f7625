"""Keeping the profiler's own log lines off the user's stderr.

A CPU recording runs ``torch.profiler`` with ``profile_memory=True``, and two
parts of PyTorch then write to file descriptor 2 directly, in C++, lines that
read like failures of the user's program and say nothing about it:

1. Kineto, the profiler's library, at every start and stop of the profiler::

    USDT:2026-11-24 16:23:52 28787:28787 SyncActivityProfilerHandler.cpp:39] profiler_start
    USDT:2026-11-24 16:23:52 28787:28787 SyncActivityProfilerHandler.cpp:46] profiler_stop
    ERROR:2026-11-24 16:23:52 28787:28787 DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35

   Its level cannot be lowered for the recording: it is read once per
   process, from ``KINETO_LOG_LEVEL`` when the profiler is first initialised,
   and nothing changes it afterwards (setting the variable would silence the
   user's own profiling for good, and do nothing once the profiler has run).
   But Kineto writes only inside the start and stop calls (its trace export
   and the memory profile write none), so exactly those calls run with fd 2
   pointed at a temporary file; when the call returns fd 2 is restored and
   every captured line that is not a Kineto log line (another thread's
   output, a warning) is written back. A file rather than a pipe: the call
   may write more than a pipe holds, and nobody would read the pipe before
   the call returns.

2. c10's CPU allocator, when the program frees, during the recording, a
   tensor allocated before it (the previous batch, gradients of an earlier
   step), the first time and every 1000th time after::

    [W1124 16:41:33.749304388 CPUAllocator.cpp:245] Memory block of unknown size was allocated before the profiling started, profiler results will not include the deallocation event

   That happens at any free, on any thread, so no redirection can be
   scoped to it. It is a c10 ``LOG(WARNING)``, shown when its level is at
   least ``FLAGS_caffe2_log_level``, the variable that ``TORCH_CPP_LOG_LEVEL``
   sets when torch is imported. Python has no setter for it, but libc10
   exports it: the recording raises it to ERROR through ``ctypes`` and puts
   the old value back when it ends. Other c10 warnings of the same level are
   hidden meanwhile too (Python warnings, ``TORCH_WARN`` included, are not
   affected); where the variable cannot be found nothing changes.

A user who sets ``KINETO_LOG_LEVEL`` or ``TORCH_CPP_LOG_LEVEL`` asked for
that logging: then it is left alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys
import tempfile
import threading
from typing import IO, Callable, Iterator, Optional, Tuple

# Kineto's log line: "<LEVEL>:<YYYY-MM-DD HH:MM:SS> <pid>:<tid> <file>:<line>] <message>".
# The level names differ between Kineto versions ("V:" or "VERBOSE:", STAGE and
# USDT only in newer ones), so all of them are accepted.
KINETO_LINE = re.compile(
    rb"^(?:V|VERBOSE|INFO|WARNING|STAGE|ERROR|USDT|\?\?\?):"
    rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ [^\s\]]+:\d+\] "
)

# c10's levels: INFO 0, WARNING 1, ERROR 2, FATAL 3.
_C10_ERROR = 2
_C10_LIBRARIES = ("libc10.so", "libc10.dylib", "c10.dll")

# fd 2 is one per process: two threads redirecting at once would restore
# each other's temporary file. Reentrant: a nested redirection is harmless.
_lock = threading.RLock()


@contextlib.contextmanager
def profiler_logs_dropped() -> Iterator[None]:
    """Run the block (a profiler start or stop) with Kineto's log lines
    removed from stderr; everything else written to fd 2 meanwhile is kept."""
    if "KINETO_LOG_LEVEL" in os.environ:
        yield
        return
    with _lock:
        _flush_stderr()  # what Python buffered before goes out first, unfiltered
        saved, capture = _open_capture()
        if capture is None:  # no fd 2 or no temporary file: run unfiltered rather than fail
            yield
            return
        try:
            os.dup2(capture.fileno(), 2)
            try:
                yield
            finally:
                _flush_stderr()  # Python's writes during the block go through the filter too
                os.dup2(saved, 2)
                capture.seek(0)
                _write_all(2, without_kineto_lines(capture.read()))
        finally:
            capture.close()
            os.close(saved)


def _open_capture() -> Tuple[int, Optional[IO[bytes]]]:
    """A duplicate of fd 2 and the temporary file to capture into, or
    ``(-1, None)`` when either cannot be had."""
    try:
        saved = os.dup(2)
    except OSError:  # fd 2 closed (a daemon, say): nothing would reach it anyway
        return -1, None
    try:
        return saved, tempfile.TemporaryFile()
    except OSError:
        os.close(saved)
        return -1, None

def without_kineto_lines(data: bytes) -> bytes:
    """``data`` without the lines Kineto's logger wrote; the rest unchanged."""
    if not data:
        return data
    return b"".join(line for line in data.splitlines(keepends=True) if not KINETO_LINE.match(line))


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            written = os.write(fd, data)
        except OSError:  # stderr gone (a closed pipe): the lines cannot be shown anywhere
            return
        data = data[written:]


def _flush_stderr() -> None:
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError, OSError):  # None, closed or broken: nothing buffered to keep
        pass


def c10_warnings_hidden() -> Callable[[], None]:
    """Raise c10's log level to ERROR; returns the function that restores it
    (it leaves a level the program changed meanwhile as it is)."""
    level = None if "TORCH_CPP_LOG_LEVEL" in os.environ else _c10_log_level()
    if level is None or level.value >= _C10_ERROR:
        return lambda: None
    before = level.value
    level.value = _C10_ERROR

    def restore() -> None:
        if level.value == _C10_ERROR:
            level.value = before

    return restore


def _c10_log_level() -> Optional[ctypes.c_int]:
    """``FLAGS_caffe2_log_level`` in the libc10 torch has loaded, or None."""
    try:
        import torch
    except ImportError:
        return None
    lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
    # RTLD_NOLOAD: the copy torch loaded, never a second one (Windows
    # returns the loaded module for the same path anyway).
    mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LAZY", 0)
    for name in _C10_LIBRARIES:
        path = os.path.join(lib_dir, name)
        if not os.path.exists(path):
            continue
        try:
            return ctypes.c_int.in_dll(ctypes.CDLL(path, mode=mode), "FLAGS_caffe2_log_level")
        except (OSError, ValueError):  # not loaded, or built without the variable (glog builds)
            return None
    return None

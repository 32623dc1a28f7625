"""``vramscope run [options] script.py [args]``: run a script under the recorder.

The script runs in this process as ``python script.py args`` would run it
(``__name__ == "__main__"``, ``sys.argv`` = the script and its arguments, its
directory first on ``sys.path``), inside :class:`vramscope.record`. The
snapshot is written however the script ends: normally, ``sys.exit``, an
uncaught exception, an out-of-memory error. Then the summary is printed and
the HTML report written beside the snapshot, by the Rust command line. The
exit status is the script's.
"""

from __future__ import annotations

import argparse
import importlib
import os
import runpy
import sys
import traceback
from pathlib import Path
from types import TracebackType
from typing import List, Optional, Sequence

from ._env import STACKS_CHOICES


def build_parser() -> argparse.ArgumentParser:
    """The options of ``vramscope run``; they go before the script."""
    p = argparse.ArgumentParser(
        prog="vramscope run",
        description="Run a Python script while recording a memory snapshot, then summarise it and write the report.",
    )
    p.add_argument("-o", "--output", metavar="PATH", help="snapshot path (default: vramscope-<script name>.pickle here)")
    p.add_argument("--max-entries", type=int, metavar="N", help="allocator events kept (default 100000)")
    p.add_argument("--stacks", choices=STACKS_CHOICES, help="stacks recorded (default python)")
    p.add_argument("--every", type=int, default=None, metavar="N", help="also dump every N vramscope.step() calls")
    p.add_argument("--keep", type=int, default=None, metavar="K", help="periodic dumps kept (default 3)")
    p.add_argument("--no-report", action="store_true", help="do not write the HTML report")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary and no messages from vramscope")
    p.add_argument("script", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``vramscope run`` with ``argv`` (default ``sys.argv[1:]``, without
    the ``run`` word). Returns the script's exit status: the code of its
    ``SystemExit``, 1 after an uncaught exception (traceback printed), 0
    otherwise. Usage errors exit with status 2, as argparse does."""
    ns = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    script = Path(ns.script)
    if not script.is_file():
        print(f"vramscope run: {ns.script}: no such file", file=sys.stderr)
        return 2
    output = ns.output or f"vramscope-{script.stem}.pickle"

    from .record import record  # imports torch when recording starts, not before

    # No collection before the dumps: when the recording ends the script's
    # namespace has already been released (a module's functions and globals
    # form cycles), and a collection would show its live tensors as held by
    # reference cycles.
    options = dict(max_entries=ns.max_entries, stacks=ns.stacks, every=ns.every, keep=ns.keep, collect_cycles=False)
    try:
        recorder = record(output, **options)
    except ValueError as err:
        print(f"vramscope run: {err}", file=sys.stderr)
        return 2
    output = recorder.path  # absolute: the script may change directory
    with recorder:
        code = _run_script(str(script), list(ns.args))
    _flush()
    if not os.path.exists(output):
        print(f"vramscope: no snapshot was written to {output}", file=sys.stderr)
        return code
    if not ns.quiet:
        print(f"vramscope: snapshot written to {output}", file=sys.stderr)
    _summarise(output, report=not ns.no_report, quiet=ns.quiet)
    return code


def _run_script(path: str, args: List[str]) -> int:
    """Execute the script as ``__main__``; returns its exit status."""
    saved_argv, saved_path0 = sys.argv, sys.path[0] if sys.path else None
    sys.argv = [path, *args]
    script_dir = os.path.dirname(os.path.abspath(path))
    if sys.path:
        sys.path[0] = script_dir  # what `python script.py` puts first
    else:
        sys.path.insert(0, script_dir)
    try:
        runpy.run_path(path, run_name="__main__")
        return 0
    except SystemExit as exc:
        return _exit_status(exc.code)
    except KeyboardInterrupt:
        _print_traceback(*sys.exc_info())
        return 130  # as a shell reports a process ended by SIGINT
    except BaseException:  # noqa: BLE001 - the script's failure is reported, not ours
        _print_traceback(*sys.exc_info())
        return 1
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0


def _exit_status(code: object) -> int:
    """The status Python would exit with for ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _print_traceback(etype: Optional[type], value: Optional[BaseException], tb: Optional[TracebackType]) -> None:
    """Print the traceback as Python would, without the frames of this
    module and runpy that lead into the script."""
    # runpy may be frozen ("<frozen runpy>"): compare code filenames as Python saw them.
    here = {_run_script.__code__.co_filename, runpy.run_path.__code__.co_filename}
    while tb is not None and tb.tb_frame.f_code.co_filename in here:
        tb = tb.tb_next
    _flush()
    traceback.print_exception(etype, value, tb)
    sys.stderr.flush()


def _summarise(snapshot: str, report: bool, quiet: bool) -> None:
    """Print the summary and write the report through the Rust command line,
    when the compiled extension is there."""
    try:
        native = importlib.import_module("vramscope._native")
    except ImportError as err:
        if not quiet:
            print(f"vramscope: summary and report skipped (vramscope._native not available: {err})", file=sys.stderr)
        return
    if not quiet:
        native.cli(["summary", snapshot])
        _print_leaks(native, snapshot)
    if report:
        html = report_path(snapshot)
        if native.cli(["report", snapshot, "-o", html, "--quiet"]) == 0 and not quiet:
            print(f"vramscope: report written to {html}", file=sys.stderr)
    _flush()


def _print_leaks(native: object, snapshot: str) -> None:
    """One line per leak found across the script's iterations (with
    ``vramscope.step()`` in its loop), and where to read more."""
    import json

    try:
        r = json.loads(native.load(snapshot).leaks_json())  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - the summary is printed; this is extra
        return
    _flush()
    for f in r.get("findings", []):
        if f.get("severity") == "leak":
            print(f"LEAK  {f['title']}\n      fix: {f['fix']}")
    if r.get("leaks_found"):
        print(f"vramscope: details with: vramscope leaks {snapshot}")
    sys.stdout.flush()


def report_path(snapshot: str) -> str:
    """``runs/x.pickle`` -> ``runs/x.html``."""
    root, ext = os.path.splitext(snapshot)
    return (root if ext else snapshot) + ".html"


def _flush() -> None:
    # The Rust side writes to the file descriptors directly: flush Python's
    # buffers first so that the output keeps its order.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, ValueError):
            pass

"""``vramscope run [options] script.py [args]`` and ``vramscope run [options]
-m module [args]``: run a program under the recorder.

The program runs in this process as ``python script.py args`` (or ``python -m
module args``) would run it: ``__name__ == "__main__"``, ``sys.argv`` = the
script (the module's file) and its arguments, its directory (the current
directory for ``-m``) first on ``sys.path``, inside :class:`vramscope.record`.
The snapshot is written however it ends (normally, ``sys.exit``, an uncaught
exception, an out-of-memory error) while the program's globals are still
alive, as ``VRAMSCOPE_RECORD`` does: what the program holds at its end is in
the snapshot, and named (what holds each tensor). Then the summary is printed
and the HTML report written beside the snapshot, by the Rust command line.
The exit status is the program's.
"""

from __future__ import annotations

import argparse
import builtins
import importlib
import importlib.util
import io
import os
import sys
import traceback
import types
from pathlib import Path
from types import TracebackType
from typing import Any, Dict, List, Optional, Sequence, Tuple

from vramscope._recording.env import STACKS_CHOICES


def build_parser() -> argparse.ArgumentParser:
    """The options of ``vramscope run``; they go before the script."""
    p = argparse.ArgumentParser(
        prog="vramscope run",
        description="Run a Python script while recording a memory snapshot, then summarise it and write the report.",
    )
    p.add_argument("-o", "--output", metavar="PATH", help="snapshot path (default: vramscope-<script name>.pickle here)")
    p.add_argument("--max-entries", type=int, metavar="N", help="history kept: trace entries on CUDA/XPU, allocations and frees on the CPU (default 100000; 3000000 with the CPU allocator hooks)")
    p.add_argument("--stacks", choices=STACKS_CHOICES, help="stacks recorded (default python)")
    p.add_argument("--every", type=int, default=None, metavar="N", help="also dump every N vramscope.step() calls")
    p.add_argument("--keep", type=int, default=None, metavar="K", help="periodic dumps kept (default 3)")
    p.add_argument("--no-report", action="store_true", help="do not write the HTML report")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary and no messages from vramscope")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module as `python -m MODULE` would (then no script)")
    p.add_argument("script", nargs="?", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script or module")
    return p


# Options of `vramscope run` that take a value: the program's own arguments
# begin at the first word that is neither one of these nor an option.
_VALUED = {"-o", "--output", "--max-entries", "--stacks", "--every", "--keep"}


def _split(argv: List[str]) -> Tuple[List[str], Optional[str], Optional[str], List[str]]:
    """``(our options, module, script, the program's arguments)``: everything
    after the script or ``-m MODULE`` belongs to the program, options
    included (``vramscope run -m pytest -x tests``)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-m":
            if i + 1 >= len(argv):
                return argv, None, None, []  # argparse says what is missing
            return argv[:i], argv[i + 1], None, argv[i + 2 :]
        if a.startswith("-m") and len(a) > 2 and not a.startswith("--"):
            return argv[:i], a[2:], None, argv[i + 1 :]
        if a == "--":
            return argv[:i], None, argv[i + 1] if i + 1 < len(argv) else None, argv[i + 2 :]
        if a in _VALUED:
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        return argv[:i], None, a, argv[i + 1 :]
    return argv, None, None, []


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``vramscope run`` with ``argv`` (default ``sys.argv[1:]``, without
    the ``run`` word). Returns the script's exit status: the code of its
    ``SystemExit``, 1 after an uncaught exception (traceback printed), 0
    otherwise. Usage errors exit with status 2, as argparse does."""
    words = list(sys.argv[1:] if argv is None else argv)
    ours, module, script_arg, program_args = _split(words)
    parser = build_parser()
    ns = parser.parse_args(ours)
    if module is None and script_arg is None:
        parser.error("a script or -m MODULE is required")
    try:
        program = _Program.module(module) if module is not None else _Program.script(str(script_arg))
    except _NotFound as err:
        print(f"vramscope run: {err}", file=sys.stderr)
        return 2
    output = ns.output or f"vramscope-{program.stem}.pickle"

    from vramscope._annotate import holders as _holders
    from .record import record  # imports torch when recording starts, not before

    options = dict(max_entries=ns.max_entries, stacks=ns.stacks, every=ns.every, keep=ns.keep)
    try:
        recorder = record(output, **options)
    except ValueError as err:
        print(f"vramscope run: {err}", file=sys.stderr)
        return 2
    output = recorder.path  # absolute: the program may change directory
    # The program's namespace (and the exception it ended with) stays alive
    # until the snapshot is written: its end is what the program left, and
    # the holders are named after its globals.
    _holders.main_globals = program.globals
    # Its children (mp.spawn's ranks, Hogwild's workers) are not recorded:
    # named as the owner, each leaves a note if it trained or used a GPU,
    # which the snapshot carries (vramscope._recording.children).
    from vramscope._recording.children import clear
    from vramscope._recording.env import OWNER_VAR

    owned = OWNER_VAR not in os.environ
    if owned:
        os.environ[OWNER_VAR] = str(os.getpid())
        clear(str(os.getpid()))  # notes of an earlier process of this pid
    try:
        with recorder:
            code, failure = program.run(program_args)
    finally:
        _holders.main_globals = None
        if owned:
            os.environ.pop(OWNER_VAR, None)
            clear(str(os.getpid()))
    del failure
    program.release()
    _flush()
    if not os.path.exists(output):
        print(f"vramscope: no snapshot was written to {output}", file=sys.stderr)
        return code
    if not ns.quiet:
        print(f"vramscope: snapshot written to {output}", file=sys.stderr)
    _summarise(output, report=not ns.no_report, quiet=ns.quiet)
    return code


class _NotFound(Exception):
    pass


class _Program:
    """A script or a module's code with the namespace it runs in, kept by
    the caller until the snapshot is written (``runpy`` drops it on return)."""

    def __init__(self, code: types.CodeType, path: str, stem: str, namespace: Dict[str, Any], path0: str) -> None:
        self.code, self.path, self.stem, self.path0 = code, path, stem, path0
        self.module: Optional[types.ModuleType] = types.ModuleType("__main__")
        self.module.__dict__.update(namespace)
        self.globals: Optional[Dict[str, Any]] = self.module.__dict__

    @classmethod
    def script(cls, path: str) -> "_Program":
        if not os.path.isfile(path):
            raise _NotFound(f"{path}: no such file")
        with io.open_code(path) as f:
            source = f.read()
        code = compile(source, path, "exec", dont_inherit=True)
        ns = {"__name__": "__main__", "__file__": path, "__cached__": None, "__doc__": None,
              "__loader__": None, "__package__": None, "__spec__": None, "__builtins__": builtins}
        return cls(code, path, Path(path).stem, ns, os.path.dirname(os.path.abspath(path)))

    @classmethod
    def module(cls, name: str) -> "_Program":
        cwd = os.getcwd()
        saved = list(sys.path)
        sys.path.insert(0, cwd)  # `python -m` looks in the current directory first
        try:
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.submodule_search_locations is not None:
                spec = importlib.util.find_spec(f"{name}.__main__")  # a package runs its __main__
        except (ImportError, ValueError) as err:
            raise _NotFound(f"-m {name}: {err}") from None
        finally:
            sys.path[:] = saved
        if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
            raise _NotFound(f"-m {name}: no module named {name!r} (or it cannot be run)")
        code = spec.loader.get_code(spec.name)
        if code is None:
            raise _NotFound(f"-m {name}: no code to run")
        path = spec.origin or name
        ns = {"__name__": "__main__", "__file__": path, "__cached__": spec.cached, "__doc__": None,
              "__loader__": spec.loader, "__package__": spec.parent, "__spec__": spec, "__builtins__": builtins}
        return cls(code, path, name.split(".")[0], ns, cwd)

    def run(self, args: List[str]) -> Tuple[int, Optional[BaseException]]:
        """Execute as ``__main__``; the exit status, and the exception it
        ended with (kept alive by the caller until the snapshot is written)."""
        assert self.module is not None
        saved_argv, saved_main = sys.argv, sys.modules.get("__main__")
        saved_path0 = sys.path[0] if sys.path else None
        sys.argv = [self.path, *args]
        if sys.path:
            sys.path[0] = self.path0  # what `python script.py` / `python -m` puts first
        else:
            sys.path.insert(0, self.path0)
        sys.modules["__main__"] = self.module
        try:
            exec(self.code, self.module.__dict__)
            return 0, None
        except SystemExit as exc:
            return _exit_status(exc.code), None
        except KeyboardInterrupt as exc:
            _print_traceback(*sys.exc_info())
            return 130, exc  # as a shell reports a process ended by SIGINT
        except BaseException as exc:  # noqa: BLE001 - the program's failure is reported, not ours
            _print_traceback(*sys.exc_info())
            return 1, exc
        finally:
            sys.argv = saved_argv
            if saved_main is not None:
                sys.modules["__main__"] = saved_main
            if saved_path0 is not None and sys.path:
                sys.path[0] = saved_path0

    def release(self) -> None:
        self.module = None
        self.globals = None


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
    here = {_Program.run.__code__.co_filename}
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

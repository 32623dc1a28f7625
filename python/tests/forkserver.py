"""Test programs started from a Python that has already imported torch.

The suite starts some 330 Pythons (the compatibility matrix, the corpus,
the advice's real runs), and each paid 2-3 s of CPU for ``import torch``
before doing anything: about a quarter of the whole suite's CPU time on two
cores. A fork server imports torch once and forks a child per command; from
the fork on, the child is the command's own process: its ``__main__``,
``sys.argv``, ``sys.path[0]``, environment, working directory, files 0-2
and exit status are those ``python ARGS`` would have, it shuts down as any
Python does (``atexit``, non-daemon threads), and its own children are
fresh processes. What differs: torch and ``torch._dynamo`` are in
``sys.modules`` before the program's first line, as they are a moment later
in nearly every program here (``torch.optim``'s ``Optimizer`` imports
``torch._dynamo`` when it is constructed: 2 s of the 3 s an advice check's
program took, 1 s with it imported first; its recording the same to the
event).

A command goes through a fork server only when the environment it asks for
differs from the server's in variables that nothing reads at start-up
(``VRAMSCOPE_*`` other than ``VRAMSCOPE_RECORD*``, which the interpreter's
``.pth`` hook reads before the program runs); the servers are kept per
start-up environment, one per test worker and environment. Anything else
(``VRAMSCOPE_RECORD``, stdin input) runs as a fresh process, as does every
command under ``VRAMSCOPE_TEST_FORK=0``.

``python forkserver.py serve`` is the server; requests and replies are JSON
lines on its stdin and stdout.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from typing import Any, Dict, List, Optional, Tuple

# Read when the program starts (the .pth hook), so never given to a child
# of a server that started without it.
_STARTUP_VRAMSCOPE = ("VRAMSCOPE_RECORD",)
_LATE_PREFIX = "VRAMSCOPE_"
# Set by pytest for each test (and read by nothing at start-up): in the key,
# every test had a server of its own, kept to the end of the session: 47
# servers of 430 MB on one worker, until the kernel killed a test worker
# for memory. The child still gets the variable as asked.
_LATE_NAMES = ("PYTEST_CURRENT_TEST",)
# Servers kept at once per test worker; the least recently used one is
# closed to make room (a few environments and preloads serve the suite).
_MAX_SERVERS = 4


def _startup_key(env: Dict[str, str]) -> Optional[Tuple[Tuple[str, str], ...]]:
    """The variables a server must have been started with to serve ``env``,
    or None when ``env`` needs a fresh process."""
    if any(k.startswith(p) for k in env for p in _STARTUP_VRAMSCOPE):
        return None
    return tuple(sorted((k, v) for k, v in env.items() if not k.startswith(_LATE_PREFIX) and k not in _LATE_NAMES))


def enabled() -> bool:
    return os.environ.get("VRAMSCOPE_TEST_FORK", "1") != "0" and hasattr(os, "fork")


class _NotStarted(Exception):
    """The server ended before it forked the command: nothing ran."""


class _Server:
    """One fork server and the commands it is running."""

    def __init__(self, env: Dict[str, str], preload: Tuple[str, ...]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "serve", *preload],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        )
        self.lock = threading.Lock()
        self.next_id = 0
        self.pending: Dict[int, Dict[str, Any]] = {}
        self.dead = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            with self.lock:
                slot = self.pending.get(msg["id"])
            if slot is not None:
                slot.update(msg)
                slot["started" if "pid" in msg else "event"].set()
        with self.lock:
            self.dead = True
            for slot in self.pending.values():
                slot["started"].set()
                slot["event"].set()

    def _ask(self, request: Dict[str, Any]) -> Dict[str, Any]:
        slot: Dict[str, Any] = {"event": threading.Event(), "started": threading.Event()}
        with self.lock:
            # (Closed by another thread to make room since it was handed
            # out: the command runs as a fresh process.)
            if self.dead or self.proc.stdin is None or self.proc.stdin.closed:
                raise _NotStarted()
            self.next_id += 1
            request["id"] = slot["id"] = self.next_id
            self.pending[self.next_id] = slot
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
            except (OSError, ValueError):
                self.pending.pop(self.next_id, None)
                raise _NotStarted() from None
        return slot

    def run(self, args: List[str], env: Dict[str, str], cwd: str, timeout: Optional[float], out: str, err: str) -> int:
        """Run ``python ARGS``; its exit status (negative: the signal)."""
        slot = self._ask({"args": args, "env": env, "cwd": cwd, "stdout": out, "stderr": err})
        # The timeout counts from the fork, not from a new server's imports.
        slot["started"].wait()
        try:
            if "pid" not in slot:  # the server ended before forking (a preload failed)
                raise _NotStarted()
            if not slot["event"].wait(timeout):
                os.kill(slot["pid"], 9)
                slot["event"].wait(30)
                raise subprocess.TimeoutExpired([sys.executable, *args], timeout or 0)
            if "rc" not in slot:
                raise RuntimeError(f"the fork server ended while running {args}")
            return int(slot["rc"])
        finally:
            with self.lock:
                self.pending.pop(slot["id"], None)

    def close(self) -> None:
        with self.lock:  # not while another thread writes a request
            if self.proc.stdin is not None:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_servers: Dict[Tuple[Tuple[Tuple[str, str], ...], Tuple[str, ...]], _Server] = {}
_servers_lock = threading.Lock()


def _server_for(env: Dict[str, str], preload: Tuple[str, ...]) -> Optional[_Server]:
    startup = _startup_key(env)
    if startup is None:
        return None
    key = (startup, tuple(sorted(preload)))
    with _servers_lock:
        server = _servers.pop(key, None)  # re-inserted last: most recently used
        if server is None or server.dead:
            # The least recently used idle ones (one running a command, from
            # another thread, is left alone).
            idle = [k for k, v in _servers.items() if not v.pending]
            while len(_servers) >= _MAX_SERVERS and idle:
                _servers.pop(idle.pop(0)).close()
            server = _Server(dict(startup), key[1])
        _servers[key] = server
        return server


@atexit.register
def _close_all() -> None:
    for server in list(_servers.values()):
        server.close()
    _servers.clear()


def run(
    args: List[str],
    env: Dict[str, str],
    cwd: "os.PathLike[str] | str",
    timeout: Optional[float] = None,
    check: bool = False,
    preload: Tuple[str, ...] = (),
) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, *args], env=env, cwd=cwd,
    capture_output=True, text=True, timeout=timeout, check=check)``, through
    a fork server where the environment allows (module docs).

    ``preload``: modules the program imports itself that the server imports
    before forking too (``transformers.modeling_utils``: 3-4 s of CPU), for
    programs that import them anyway; never for one that does not (an
    import can change torch's state)."""
    def fresh() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], env=env, cwd=str(cwd), capture_output=True, text=True, timeout=timeout, check=check)

    server = _server_for(env, tuple(preload)) if enabled() else None
    if server is None:
        return fresh()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="vramscope-fork-") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        try:
            rc = server.run(list(args), env, os.path.abspath(str(cwd)), timeout, out, err)
        except _NotStarted:
            # A server that could not start (its stderr says why) must not
            # fail the test: the command runs as a fresh process.
            return fresh()
        with open(out, encoding="utf-8", errors="replace") as f:
            stdout = f.read()
        with open(err, encoding="utf-8", errors="replace") as f:
            stderr = f.read()
    proc = subprocess.CompletedProcess([sys.executable, *args], rc, stdout, stderr)
    if check:
        proc.check_returncode()
    return proc


# --- the server ---------------------------------------------------------------


def _serve(preload: List[str]) -> Dict[str, Any]:
    """Read requests, fork a child for each, report each child's pid and
    exit status. Returns (in the child only) the request to run."""
    import importlib
    import select

    import torch  # noqa: F401  (the point of the server)

    for name in preload:
        importlib.import_module(name)

    # What the server made is never collected in a child: a child's
    # shutdown then skips it (1.5 s -> 0.5 s here; each page the collector
    # would touch is copied on write), and it is garbage of the server's,
    # not the program's.
    import gc

    gc.freeze()
    # What every training program imports when it makes its optimizer
    # (module docs); it allocates no tensor and starts no thread. After
    # the freeze: it imports triton, whose nanobind objects, frozen, are
    # never collected at a child's shutdown, and nanobind says so on
    # stderr ("leaked 64 types!"), which a fresh Python does not.
    import torch._dynamo  # noqa: F401

    running: Dict[int, int] = {}  # pid -> request id
    buf = b""
    eof = False

    def reply(msg: Dict[str, Any]) -> None:
        os.write(1, (json.dumps(msg) + "\n").encode())

    while not (eof and not running):
        ready, _, _ = select.select([] if eof else [0], [], [], 0.02)
        if ready:
            chunk = os.read(0, 1 << 16)
            eof = not chunk
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                req = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    return req
                running[pid] = req["id"]
                reply({"id": req["id"], "pid": pid})
        while running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            rid = running.pop(pid, None)
            if rid is not None:
                reply({"id": rid, "rc": os.waitstatus_to_exitcode(status)})
    sys.exit(0)


def _become(req: Dict[str, Any]) -> Tuple[str, Any]:
    """Turn this forked child into ``python ARGS``: files, directory,
    environment, argv and sys.path[0] as the interpreter sets them."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    os.close(null)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    args: List[str] = req["args"]
    if args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        sys.path[0] = ""
        return "code", args[1]
    if args[0] == "-m":
        sys.argv = ["-m", *args[2:]]
        sys.path[0] = os.getcwd()
        return "module", args[1]
    sys.argv = list(args)
    sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
    return "script", args[0]


def _main() -> None:
    req = _serve(sys.argv[2:])
    kind, what = _become(req)
    if kind == "module":
        import runpy

        runpy._run_module_as_main(what, alter_argv=True)  # type: ignore[attr-defined]  # what `python -m` calls
        return
    # A script or -c code runs in a new __main__ that stays in sys.modules
    # until shutdown, as the interpreter's own does (runpy.run_path would
    # put the server's back when the script returns).
    import types

    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    if kind == "script":
        import importlib.machinery

        path = os.path.abspath(what)
        main.__file__ = what
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)  # type: ignore[assignment]
        main.__cached__ = None  # type: ignore[attr-defined]
        with open(path, "rb") as f:
            code = compile(f.read(), what, "exec")
    else:
        code = compile(what, "<string>", "exec")
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    _main()

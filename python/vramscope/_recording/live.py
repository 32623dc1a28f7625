"""The recording's state while it runs: taken from cheap sources, published
for ``vramscope live``, and watched for ``dump_at``.

The state (``docs/live-protocol.md``) comes from running totals, never from
the trace: on CUDA ``memory_stats()`` and ``memory_snapshot()`` (the blocks,
not the history), on the CPU the recorder's own counters and live blocks.
A daemon thread takes it every ``interval`` seconds and sends it to the
viewers connected to a loopback socket (each proves it may read with the
token of the registry file, which only this user can read) or replaces a
file the user named. The same thread polls the allocated and reserved bytes
for ``dump_at`` (every 50 ms: one counter read) and dumps when they first
cross the threshold, so the trace that leads to an out-of-memory error is
on disk before the buffer wraps.
"""

from __future__ import annotations

import collections
import json
import os
import secrets
import socket
import sys
import tempfile
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Tuple

from vramscope._recording.rank import host

__all__ = ["Watcher", "state", "parse_threshold", "registry_dir"]

TOP_SITES = 20
STACK_FRAMES = 16
ITERATIONS_KEPT = 200
DUMP_AT_POLL_S = 0.05
# The most of the wall time publishing may take: when taking the state costs
# more than this share of the interval, the interval grows to match.
MAX_PUBLISH_SHARE = 0.01
# Frames of these libraries are not where the program asked for memory.
_LIBRARY_PARTS = ("/torch/", "/vramscope/", "\\torch\\", "\\vramscope\\", "<frozen ")


def registry_dir() -> str:
    """Where live processes leave their ``<pid>.json`` (see the protocol)."""
    explicit = os.environ.get("VRAMSCOPE_LIVE_DIR")
    if explicit:
        return explicit
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "vramscope-live")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"vramscope-live-{uid}")


def parse_threshold(value: Any, capacity: Optional[int]) -> Optional[int]:
    """``"90%"`` of ``capacity``, ``"12GiB"``, or bytes -> bytes."""
    if value is None or value is False:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError(f"dump_at={value!r}: must be positive")
        return int(value)
    text = str(value).strip()
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            raise ValueError(f"dump_at={value!r}: expected a percentage like '90%'") from None
        if not 0 < pct <= 100:
            raise ValueError(f"dump_at={value!r}: a percentage between 0 and 100")
        if capacity is None:
            raise ValueError(f"dump_at={value!r}: this device's capacity is unknown; give bytes (e.g. '12GiB')")
        return int(capacity * pct / 100)
    from vramscope import _native

    try:
        return int(_native.parse_bytes(text))
    except Exception as err:  # noqa: BLE001 - one message for every bad spelling
        raise ValueError(f"dump_at={value!r}: expected a percentage ('90%') or a size ('12GiB', bytes): {err}") from None


def _frame(f: Dict[str, Any]) -> str:
    return f"{f.get('filename', '?')}:{f.get('line', 0)} in {f.get('name', '?')}"


# The site of blocks without a stack: alive when the recording began.
BEFORE_RECORDING = "(allocated before the recording)"


def _site(frames: List[Dict[str, Any]]) -> str:
    """The innermost frame of the program itself (not torch's internals)."""
    if not frames:
        return BEFORE_RECORDING
    for f in frames:
        name = str(f.get("filename", ""))
        if not any(p in name for p in _LIBRARY_PARTS):
            return f"{os.path.basename(name)}:{f.get('line', 0)} in {f.get('name', '?')}"
    return _frame(frames[0])


def top_holders(blocks: List[Tuple[int, int, List[Dict[str, Any]]]], n: int = TOP_SITES) -> List[Dict[str, Any]]:
    """Live blocks grouped by site (the program's line that allocated
    them), largest first; the stack shown is that of the site's largest
    share."""
    groups: Dict[int, List[Any]] = {}
    for _addr, size, frames in blocks:
        key = id(frames)  # recorders intern stacks: one list per distinct stack
        g = groups.get(key)
        if g is None:
            groups[key] = [size, 1, frames]
        else:
            g[0] += size
            g[1] += 1
    # One row per site: [bytes, blocks, the largest stack's bytes, its frames].
    merged: Dict[str, List[Any]] = {}
    for size, count, frames in groups.values():
        m = merged.setdefault(_site(frames), [0, 0, -1, frames])
        m[0] += size
        m[1] += count
        if size > m[2]:
            m[2], m[3] = size, frames
    ranked = sorted(merged.items(), key=lambda kv: -kv[1][0])[:n]
    return [{"site": site, "bytes": m[0], "blocks": m[1], "stack": [_frame(f) for f in m[3][:STACK_FRAMES]]} for site, m in ranked]


def categories(session: Any, blocks: List[Tuple[int, int, Any]], allocated: int, named: Optional[Dict[tuple, str]] = None) -> Dict[str, int]:
    """Bytes per category: blocks that are a known tensor's storage
    (parameters, gradients, optimizer state of the modules and optimizers
    the hooks have seen), the rest ``other``. ``named``: that map as the
    last step read it (the watcher's thread must not read tensors); by
    default read now, on the caller's thread."""
    if named is None:
        named = {}
        for _ in range(3):  # a weak set may change meanwhile
            try:
                named = session.tagger.current()
                break
            except RuntimeError:
                continue
    dev = session.backend.device() if session.cuda else 0
    out: Dict[str, int] = collections.defaultdict(int)
    for addr, size, _frames in blocks:
        category = named.get((dev, addr))
        if category is not None:
            out[category] += size
    out["other"] = max(allocated - sum(out.values()), 0)
    return dict(out)


def state(session: Any, seq: int = 0, on_watcher: bool = False) -> Dict[str, Any]:
    """The live state of ``session`` (a recording) as the protocol has it.
    ``on_watcher``: taken on the watcher's thread, which reads counters and
    the allocator's blocks but never a tensor (categories as of the last
    step)."""
    t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    allocated, reserved, peak_a, peak_r = session.figures()
    blocks = session.backend.live_blocks(unstacked=True)
    info = session.owner.rank_info()
    out = {
        "version": 1,
        "pid": os.getpid(),
        "host": host(),
        "rank": info["rank"],
        "local_rank": info["local_rank"],
        "world_size": info["world_size"],
        "device": session.device_name(),
        "recorder": session.recorder_name(),
        "time_us": time.time_ns() // 1000,
        "seq": seq,
        "iteration": session.steps,
        "allocated": allocated,
        "reserved": reserved,
        "peak_allocated": peak_a,
        "peak_reserved": peak_r,
        "capacity": session.capacity(),
        "device_free": session.backend.device_free(),
        "categories": categories(session, blocks, allocated, session.category_map if on_watcher else None),
        "top": top_holders(blocks),
        "iterations": list(session.iterations),
        "ooms": list(session.ooms),
        "dumps": list(session.dumps),
    }
    out["publish_us"] = (time.perf_counter_ns() - t0) // 1000
    # The part the thread ran itself: publish_us also counts the waits for
    # the GIL while the program's thread holds it (on a CUDA training step
    # 1.6-3.4 ms of wall time, of which the state's own work is a fraction).
    out["publish_cpu_us"] = (time.thread_time_ns() - c0) // 1000
    return out


class _Server:
    """Loopback listener: viewers connect, send the token line, and get each
    state as one JSON line."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        if host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
            raise ValueError(f"live={address!r}: the live socket listens on the loopback only (127.0.0.1:PORT)")
        self.token = secrets.token_hex(16)
        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind((host.strip("[]"), int(port or 0)))
        self.sock.listen(8)
        self.address = f"{host}:{self.sock.getsockname()[1]}"
        self.clients: List[socket.socket] = []
        self.lock = threading.Lock()
        self.last: Optional[bytes] = None
        self.closed = False
        threading.Thread(target=self._accept, name="vramscope-live-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._greet, args=(conn,), daemon=True).start()

    def _greet(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(5.0)
            line = b""
            while not line.endswith(b"\n") and len(line) < 4096:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                line += chunk
            if json.loads(line.decode("utf-8", "replace") or "{}").get("token") != self.token:
                conn.sendall(b'{"error": "bad token"}\n')
                conn.close()
                return
            conn.settimeout(2.0)
            with self.lock:
                if self.last is not None:
                    conn.sendall(self.last)
                self.clients.append(conn)
        except (OSError, ValueError, AttributeError):
            conn.close()

    def send(self, line: bytes) -> None:
        with self.lock:
            self.last = line
            for c in list(self.clients):
                try:
                    c.sendall(line)
                except OSError:  # the viewer went away
                    self.clients.remove(c)
                    c.close()

    def close(self) -> None:
        self.closed = True
        with self.lock:
            for c in self.clients:
                c.close()
            self.clients = []
        self.sock.close()


class Watcher:
    """The recording's background thread: live publication and ``dump_at``."""

    def __init__(self, session: Any, live: Any, interval: float, dump_at: Optional[int]) -> None:
        self.session = session
        self.interval = float(interval)
        self.dump_at = dump_at
        self.server: Optional[_Server] = None
        self.file: Optional[str] = None
        self.registry: Optional[str] = None
        if live:
            target = "127.0.0.1:0" if live is True else str(live)
            if target.startswith("file:"):
                self.file = os.path.abspath(target[5:])
                os.makedirs(os.path.dirname(self.file), exist_ok=True)
            else:
                self.server = _Server(target)
                self.registry = self._register()
        self.seq = 0
        self.publish_us: Deque[int] = collections.deque(maxlen=1000)
        # The interval in force: ``interval``, or longer where publishing
        # would take more than MAX_PUBLISH_SHARE of the time.
        self.effective_interval = self.interval
        self._publish_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vramscope-watch", daemon=True)
        self._thread.start()

    @property
    def publishing(self) -> bool:
        return self.server is not None or self.file is not None

    def _register(self) -> str:
        assert self.server is not None
        directory = registry_dir()
        os.makedirs(directory, mode=0o700, exist_ok=True)
        path = os.path.join(directory, f"{os.getpid()}.json")
        entry = {
            "pid": os.getpid(),
            "address": self.server.address,
            "token": self.server.token,
            "host": host(),
            "rank": self.session.owner.rank_info()["rank"],
            "argv": list(sys.argv),
            "started_us": time.time_ns() // 1000,
        }
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(entry, f)
        os.replace(path + ".tmp", path)
        return path

    def _run(self) -> None:
        next_publish = time.monotonic()
        poll = DUMP_AT_POLL_S if self.dump_at is not None else self.interval
        reported: set = set()
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                if self.dump_at is not None:
                    self._check_threshold()
                if self.publishing and now >= next_publish:
                    self.publish()
                    next_publish = now + self.effective_interval
            except Exception as err:  # noqa: BLE001 - never take the program down
                if repr(err) not in reported:  # once each, not twice a second
                    reported.add(repr(err))
                    print(f"vramscope: live state failed: {err!r}", file=sys.stderr)
            self._stop.wait(min(poll, max(next_publish - time.monotonic(), 0.001)) if self.publishing else poll)

    def _check_threshold(self) -> None:
        allocated, reserved = self.session.counters()
        threshold = self.dump_at
        if threshold is not None and max(allocated, reserved) >= threshold:
            self.dump_at = None  # once
            try:
                self.session.dump_threshold(allocated, reserved, on_watcher=True)
            except RuntimeError:  # the program's thread changed a container meanwhile: at the next poll
                if self.session.dump_at is None and not any(d["reason"] == "dump_at" for d in self.session.dumps):
                    self.dump_at = self.session.dump_at = threshold
                raise

    def publish(self) -> Dict[str, Any]:
        # The watcher's thread publishes, and so do close() and callers on
        # other threads: one at a time (they share the file's temporary name).
        with self._publish_lock:
            return self._publish()

    def _publish(self) -> Dict[str, Any]:
        self.seq += 1
        st = state(self.session, self.seq, on_watcher=True)
        self.publish_us.append(st["publish_us"])
        # Back off: the program's thread waits on the GIL while this runs.
        self.effective_interval = max(self.interval, st["publish_us"] / 1e6 / MAX_PUBLISH_SHARE)
        st["publish_interval_us"] = int(self.effective_interval * 1e6)
        line = (json.dumps(st, separators=(",", ":")) + "\n").encode()
        if self.server is not None:
            self.server.send(line)
        if self.file is not None:
            tmp = f"{self.file}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(line)
            os.replace(tmp, self.file)
        return st

    def halt(self) -> None:
        """Stop the thread (before the final dump: no dump_at dump races it)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def close(self) -> None:
        """After the final dump: the last state, then the socket goes."""
        if self.publishing:
            try:
                self.publish()  # the final figures, for viewers still connected
            except Exception:  # noqa: BLE001
                pass
        if self.server is not None:
            self.server.close()
        if self.registry is not None:
            try:
                os.unlink(self.registry)
            except OSError:
                pass

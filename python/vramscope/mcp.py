"""``vramscope mcp``: vramscope as a Model Context Protocol server, so that a
coding agent can ask it about a snapshot instead of guessing at the command
line.

The server speaks MCP over stdio (the official Python SDK, ``pip install
'vramscope[mcp]'``). Each tool runs the same command as the CLI, in this
process, with ``--json``, and answers with the CLI's JSON: an agent and a
person reading ``vramscope advise --json`` see the same figures. A file is
read once and kept while it is asked about (until it changes on disk).

Files are read only under the directories given with ``--root`` (the
working directory by default): a path outside them is an error that says
so. A damaged or wrong file is an error carrying the CLI's message; the
server goes on serving. A long answer comes in pages of ``PAGE_CHARS``
characters: each page ends with a line saying how to ask for the next.

Python was chosen over Rust's ``rmcp`` because the server then shares the
package users already install (the recorder, ``vramscope run``), and the
official SDK's client is what the tests drive it with.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import Dict, List, Optional, Sequence, Tuple

from . import _native

# A page of an answer: what an agent reads in one go without losing the
# thread (a summary of a large file is 10-30k characters).
PAGE_CHARS = 60_000

INSTRUCTIONS = """vramscope reads PyTorch memory snapshots (torch.cuda.memory._dump_snapshot pickles, \
vramscope recordings, profiler traces) and explains where GPU memory went. Start with `summary` \
(peak, what the memory is, OOMs and their causes), then `leaks` for memory that grows, `advise` \
for what to change so that a run fits (give `capacity` or `gpu`), `simulate` to try allocator \
settings, `diff` to compare two runs, `cycles` for reference cycles that held tensors (a cycle watcher's \
directory). Every answer is the JSON of the matching `vramscope ... --json` \
command."""


class Roots:
    """The directories files may be read from (and reports written to)."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.dirs = [os.path.realpath(r) for r in roots]

    def file(self, path: str, what: str = "file") -> str:
        """``path`` (relative to the first root when relative) if it lies
        under a root, else a ``ToolError`` naming the roots."""
        from mcp.server.mcpserver.exceptions import ToolError

        full = os.path.realpath(os.path.join(self.dirs[0], os.path.expanduser(path)))
        if not any(full == d or full.startswith(d.rstrip(os.sep) + os.sep) for d in self.dirs):
            raise ToolError(
                f"{what} {path!r} is outside the directories this server may read ({', '.join(self.dirs)}); "
                "start `vramscope mcp --root DIR` to allow another"
            )
        return full


class Answers:
    """Each answer's full text and warnings, by the call that made it, for
    its later pages (the last few calls only), cut in pages of
    ``page_chars``."""

    KEEP = 16

    def __init__(self, page_chars: int = PAGE_CHARS) -> None:
        self.texts: Dict[Tuple[str, ...], Tuple[str, List[str]]] = {}
        self.lock = threading.Lock()
        self.page_chars = page_chars

    def whole(self, key: Tuple[str, ...], make) -> Tuple[str, List[str]]:
        with self.lock:
            kept = self.texts.get(key)
        if kept is None:
            kept = make()
            with self.lock:
                self.texts[key] = kept
                while len(self.texts) > self.KEEP:
                    self.texts.pop(next(iter(self.texts)))
        return kept

    def page(self, key: Tuple[str, ...], make, page: int) -> List[str]:
        text, warnings = self.whole(key, make)
        return paged(text, page, self.page_chars) + warnings


def paged(text: str, page: int, page_chars: int = PAGE_CHARS) -> List[str]:
    """Page ``page`` (from 1) of ``text``, and where there are more pages a
    note saying how many and how to ask for the next."""
    from mcp.server.mcpserver.exceptions import ToolError

    pages = max(1, -(-len(text) // page_chars))
    if page < 1 or page > pages:
        raise ToolError(f"page {page} does not exist: the answer has {pages} page(s) of {page_chars:,} characters")
    if pages == 1:
        return [text]
    part = text[(page - 1) * page_chars : page * page_chars]
    more = f"call again with page={page + 1} for the next" if page < pages else "this is the last"
    return [part, f"[vramscope: page {page} of {pages} of this answer ({len(text):,} characters); {more}]"]


def run_cli(args: List[str], answers: Sequence[int] = (0,)) -> Tuple[str, List[str]]:
    """The CLI's output for ``args`` and its warnings (what a damaged file
    lost), or a ``ToolError`` with its message; ``answers``: the exit codes
    that are answers (``check``'s 3: a limit exceeded)."""
    from mcp.server.mcpserver.exceptions import ToolError

    code, out, err = _native.cli_captured(args)
    if code not in answers:
        message = "\n".join(line for line in err.splitlines() if line.strip()) or f"exit code {code}"
        raise ToolError(f"vramscope {args[0]} failed (exit {code}): {message}")
    return out, [f"[{line}]" for line in err.splitlines() if line.startswith("vramscope: warning")]


def _stat(path: str):
    try:
        return os.stat(path)
    except OSError:
        return None


def _flag(args: List[str], name: str, value) -> None:
    if value is None or value is False:
        return
    if value is True:
        args.append(name)
    elif isinstance(value, (list, tuple)):
        for v in value:
            args.extend([name, str(v)])
    else:
        args.extend([name, str(value)])


def build(roots: Roots, page_chars: int = PAGE_CHARS):
    """The server, its tools registered."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("vramscope", instructions=INSTRUCTIONS)
    kept = Answers(page_chars)
    _native.cli_keep_loaded(True)

    def whole(command: str, files: List[str], flags: Dict[str, object], codes: Sequence[int] = (0,),
              stamped: Optional[List[str]] = None) -> Tuple[str, List[str]]:
        args = [command, *files, "--json", "-q"]
        for name, value in flags.items():
            _flag(args, name, value)
        # A file changed on disk is a new question.
        stamps = tuple(f"{st.st_mtime_ns}:{st.st_size}" for st in (_stat(f) for f in (stamped or files)) if st)
        return kept.whole((*args, *stamps), lambda: run_cli(args, codes))

    def ask(command: str, files: List[str], flags: Dict[str, object], page: int, codes: Sequence[int] = (0,),
            stamped: Optional[List[str]] = None) -> List[str]:
        text, warnings = whole(command, files, flags, codes, stamped)
        return paged(text, page, kept.page_chars) + warnings

    @server.tool(structured_output=False)
    def summary(file: str, device: Optional[int] = None, top: int = 10, page: int = 1) -> List[str]:
        """The overview of a snapshot: each device's peak (allocated and reserved) and when, what the memory
        is at the peak (parameters, gradients, optimizer state, activations...), the allocation sites alive at
        the peak, fragmentation, and each out-of-memory error with its cause. `file`: a snapshot under the
        server's roots; `top`: sites listed."""
        return ask("summary", [roots.file(file)], {"--device": device, "--top": top}, page)

    @server.tool(structured_output=False)
    def oom(file: str, device: Optional[int] = None) -> List[str]:
        """Why the run ran out of memory: each OOM the file records (the request, what was allocated, reserved
        and free, the cause in one sentence and the fix), from the summary. An empty list: the file has none."""
        text, warnings = whole("summary", [roots.file(file)], {"--device": device, "--top": 10})
        doc = json.loads(text)
        ooms = [{"device": d.get("device"), **o} for d in doc.get("devices", []) for o in d.get("ooms", [])]
        return [json.dumps({"ooms": ooms, "damage": doc.get("source", {}).get("damage")}, indent=2), *warnings]

    @server.tool(structured_output=False)
    def leaks(file: str, device: Optional[int] = None, page: int = 1) -> List[str]:
        """Memory that grows from one training iteration to the next: each finding with its kind, the
        allocation sites, the variable that holds the memory and the line that stores into it, and the fix."""
        # Source lines are not quoted: the files a stack names may lie outside the roots.
        return ask("leaks", [roots.file(file)], {"--device": device, "--no-source": True}, page)

    @server.tool(structured_output=False)
    def categories(file: str, device: Optional[int] = None, page: int = 1) -> List[str]:
        """What the memory is over the run: bytes per category (parameters, gradients, optimizer state,
        activations, autograd detail, workspaces, ...) at the peak and how each was told."""
        return ask("categories", [roots.file(file)], {"--device": device}, page)

    @server.tool(structured_output=False)
    def advise(
        file: str,
        capacity: Optional[str] = None,
        gpu: Optional[str] = None,
        fraction: Optional[float] = None,
        ranks: Optional[int] = None,
        device: Optional[int] = None,
        page: int = 1,
    ) -> List[str]:
        """What to change so that the run fits, or peaks lower: allocator settings and program changes
        (smaller batch, checkpointing, set_to_none, 8-bit optimizer state, sharding...), each replayed on a
        model of the CUDA caching allocator and ranked by the peak it gives. `capacity`: memory PyTorch may
        use (\"40GiB\"); or `gpu`: a GPU's name (\"NVIDIA H100 80GB HBM3\"); default: from the file's OOM."""
        flags = {"--capacity": capacity, "--gpu": gpu, "--fraction": fraction, "--ranks": ranks, "--device": device}
        return ask("advise", [roots.file(file)], flags, page)

    @server.tool(structured_output=False)
    def simulate(
        file: str,
        settings: Optional[List[str]] = None,
        sweep: bool = False,
        capacity: Optional[str] = None,
        drop: Optional[List[str]] = None,
        free_early: Optional[List[str]] = None,
        scale: Optional[List[str]] = None,
        device: Optional[int] = None,
        page: int = 1,
    ) -> List[str]:
        """Replay the recorded run under other allocator settings (each a PYTORCH_CUDA_ALLOC_CONF string,
        \"expandable_segments:True\") or program changes (`drop` SITE, `free_early` SITE, `scale`
        SITE=FACTOR), and say whether it fits `capacity`. `sweep`: also the usual settings."""
        flags = {"--set": settings, "--sweep": sweep, "--capacity": capacity, "--drop": drop,
                 "--free-early": free_early, "--scale": scale, "--device": device}
        return ask("simulate", [roots.file(file)], flags, page)

    @server.tool(structured_output=False)
    def diff(
        file_a: str,
        file_b: Optional[str] = None,
        at_a: Optional[str] = None,
        at_b: Optional[str] = None,
        device: Optional[int] = None,
        top: int = 20,
        page: int = 1,
    ) -> List[str]:
        """What is alive in B and not in A, matched by allocation stack and size. Two files: each at its end
        (or `at_a`/`at_b`), and their peaks site by site. One file: its peak against its end. A moment is
        peak, end, #EVENT, a time (1.5s) or iter:N / iter:N:peak."""
        files = [roots.file(file_a)] + ([roots.file(file_b)] if file_b else [])
        return ask("diff", files, {"--at-a": at_a, "--at-b": at_b, "--device": device, "--top": top}, page)

    @server.tool(structured_output=False)
    def segments(file: str, at: Optional[str] = None, device: Optional[int] = None, page: int = 1) -> List[str]:
        """The allocator's segments and blocks at a moment (`at`: peak, end, #EVENT, a time, iter:N):
        which block lies where, free space and fragmentation."""
        return ask("segments", [roots.file(file)], {"--at": at, "--device": device}, page)

    @server.tool(structured_output=False)
    def check(
        file: str,
        max_peak: Optional[str] = None,
        max_reserved: Optional[str] = None,
        no_leaks: bool = False,
        max_growth: Optional[str] = None,
        device: Optional[int] = None,
    ) -> List[str]:
        """Memory limits, as CI checks them: the peak, reserved memory, growth per iteration and "no leak",
        each with its measured value and whether it holds (`passed`)."""
        flags = {"--max-peak": max_peak, "--max-reserved": max_reserved, "--no-leaks": no_leaks,
                 "--max-growth": max_growth, "--device": device}
        return ask("check", [roots.file(file)], flags, 1, codes=(0, 3))

    @server.tool(structured_output=False)
    def cycles(path: str = "vramscope-cycles", page: int = 1) -> List[str]:
        """Reference cycles that kept tensors alive until Python's garbage collector ran: each kind of cycle
        with its count, the tensors and bytes it held, the loop of references (every edge named: attribute,
        dict key, closure variable, bound method...), the path to the tensors and the fix. `path`: the
        directory a cycle watcher wrote (`vramscope.cycles.watch()`: vramscope-cycles/), its cycles.json, or
        an object graph's JSON."""
        full = roots.file(path)
        # A directory's own stamp changes with every page written in it; the report's is the one to follow.
        stamped = os.path.join(full, "cycles.json") if os.path.isdir(full) else full
        return ask("cycles", [full], {}, page, stamped=[stamped])

    @server.tool(structured_output=False)
    def report(file: str, out: Optional[str] = None, baseline: Optional[str] = None) -> List[str]:
        """Write the self-contained interactive HTML report (timeline, flamegraph, segments, what to do) and
        return its path. `out`: where (under the roots; default FILE.html beside the file); `baseline`: a
        second snapshot to compare against (a Diff tab)."""
        src = roots.file(file)
        dest = roots.file(out or src + ".html", "output")
        args = ["report", src, "-o", dest, "-q"]
        _flag(args, "--baseline", roots.file(baseline) if baseline else None)
        _, warnings = run_cli(args)
        return [json.dumps({"report": dest, "bytes": os.path.getsize(dest)}, indent=2), *warnings]

    return server


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="vramscope mcp",
        description="Serve vramscope to a coding agent over the Model Context Protocol (stdio).",
    )
    p.add_argument("--root", action="append", default=[], metavar="DIR",
                   help="a directory whose files may be read (repeatable; default: the working directory)")
    p.add_argument("--page-chars", type=int, default=PAGE_CHARS, metavar="N",
                   help=f"characters in one page of a long answer (default {PAGE_CHARS:,})")
    a = p.parse_args(argv)
    try:
        import mcp  # noqa: F401
    except ImportError:
        print("vramscope mcp needs the MCP SDK: pip install 'vramscope[mcp]' (or pip install mcp)", file=sys.stderr)
        return 2
    roots = Roots(a.root or [os.getcwd()])
    build(roots, max(1000, a.page_chars)).run("stdio")
    return 0

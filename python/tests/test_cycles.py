"""The reference-cycle detector on real torch tensors (CPU): the classic
cycles are found with every edge named, identical cycles are counted once,
the watcher leaves the program's memory and other gc hooks alone, and its
HTML page opens offline in a browser."""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

torch = pytest.importorskip("torch")

from conftest import native_module  # noqa: E402

if native_module() is None or not hasattr(native_module(), "cycles_analyze"):
    pytest.skip("vramscope._native (with the cycle analysis) is not built", allow_module_level=True)

import vramscope  # noqa: E402
from vramscope import cycles  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


class Node:
    """A node that refers to another and holds a tensor."""

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value
        self.other: Any = None


def node_pair(n: int = 1000) -> Node:
    a, b = Node(torch.ones(n)), Node(torch.ones(n))
    a.other, b.other = b, a
    return a


class AwaitableTensor:
    """Holds a tensor and registers a callback on itself: a bound method
    stored on the object refers back to it through ``__self__``."""

    def __init__(self, t: torch.Tensor) -> None:
        self.tensor = t
        self.callback = self.on_done

    def on_done(self) -> torch.Tensor:
        return self.tensor


class ClosureTensor:
    """The same with a closure: the lambda captures ``self``."""

    def __init__(self, t: torch.Tensor) -> None:
        self.tensor = t
        self.cb = lambda: self.tensor


def labels(steps: List[Dict[str, Any]]) -> List[str]:
    return [s["label"] for s in steps]


def test_two_nodes_referencing_each_other() -> None:
    a = node_pair(1000)
    r = cycles.find([a])
    assert len(r.findings) == 1, r.text()
    f = r.findings[0]
    assert f["count"] == 1 and f["tensors"] == 2
    assert f["bytes"] == 2 * 1000 * 4
    ex = f["example"]
    assert labels(ex["cycle"]) == [".other", ".other"]
    assert {t["type"] for t in ex["cycle"]} == {"Node"}
    # Each path ends at the tensor (label ""), reached through `.value`.
    assert sorted(labels(p)[-2] for p in ex["paths"]) == [".value", ".value"]
    assert any(c.endswith("Node") for c in f["classes"]), f["classes"]


def test_bound_method_stored_on_the_object_is_named() -> None:
    obj = AwaitableTensor(torch.ones(500))
    f = cycles.find([obj]).findings[0]
    assert labels(f["example"]["cycle"]) in ([".callback", "__self__"], ["__self__", ".callback"])
    assert "__self__" in f["explanation"]
    assert f["bytes"] == 2000


def test_closure_capturing_the_object_is_named() -> None:
    obj = ClosureTensor(torch.ones(500))
    f = cycles.find([obj]).findings[0]
    joined = " ".join(labels(f["example"]["cycle"]))
    assert ".cb" in joined and "closure 'self'" in joined and "cell_contents" in joined
    assert "closure" in f["explanation"]


def test_no_cycle_no_finding() -> None:
    a = Node(torch.ones(10))
    a.other = Node(torch.ones(10))
    assert cycles.find([a]).findings == []


@pytest.fixture
def watcher(tmp_path: Path):
    w = cycles.Watcher(device="any", out_dir=tmp_path / "cycles", summary_at_exit=False)
    gc.collect()
    w.start()
    yield w
    w.stop()


def test_watcher_records_garbage_cycles_and_frees_them(watcher: cycles.Watcher, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="vramscope.cycles")
    probe = torch.ones(1)
    import weakref

    pair = node_pair(2000)
    gone = weakref.ref(pair.value)
    del pair
    assert gone() is not None  # only the cycle collector can free it
    gc.collect()
    assert gone() is None, "the watcher kept the garbage alive"
    r = watcher.result()
    assert r is not None and len(r.findings) == 1
    assert r.findings[0]["bytes"] == 2 * 2000 * 4
    assert any("Node" in m and "graph:" in m for m in caplog.messages), caplog.messages
    html = list((tmp_path / "cycles").glob("cycle-*.html"))
    dot = list((tmp_path / "cycles").glob("cycle-*.dot"))
    assert len(html) == 1 and len(dot) == 1
    assert "digraph" in dot[0].read_text()
    del probe


def vramscope_cli(*args: str) -> subprocess.CompletedProcess:
    from conftest import subprocess_env

    return subprocess.run([sys.executable, "-m", "vramscope", *args], env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)


def test_the_running_report_is_read_back_by_the_cli(watcher: cycles.Watcher, tmp_path: Path) -> None:
    """The watcher keeps its whole report in ``cycles.json``; ``vramscope
    cycles DIR`` reads it back (JSON, text, DOT, HTML) with the same figures."""
    for n in (3000, 3000, 500):
        node_pair(n)
        gc.collect()
    r = watcher.result()
    assert r is not None and len(r.findings) == 1 and r.findings[0]["count"] == 3
    kept = tmp_path / "cycles" / "cycles.json"
    assert kept.is_file()
    p = vramscope_cli("cycles", str(tmp_path / "cycles"), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == r.data
    assert json.loads(p.stdout)["bytes"] == 2 * (3000 + 3000 + 500) * 4
    text = vramscope_cli("cycles", str(kept))
    assert text.returncode == 0 and "Node" in text.stdout and ".other" in text.stdout, text.stdout
    dot = vramscope_cli("cycles", str(kept), "--dot", "0", "--html", str(tmp_path / "c.html"))
    assert dot.returncode == 0 and dot.stdout.startswith("digraph"), dot.stderr
    assert (tmp_path / "c.html").read_text(encoding="utf-8").lower().lstrip().startswith("<!doctype html>")
    # A finding that does not exist, a directory without a report, a snapshot: each an error that says so.
    missing = vramscope_cli("cycles", str(kept), "--dot", "5")
    assert missing.returncode == 2 and "--dot 5" in missing.stderr, missing.stderr
    empty_dir = vramscope_cli("cycles", str(tmp_path))
    assert empty_dir.returncode == 1 and "without cycles.json" in empty_dir.stderr, empty_dir.stderr
    (tmp_path / "other.json").write_text('{"segments": []}')
    other = vramscope_cli("cycles", str(tmp_path / "other.json"))
    assert other.returncode == 2 and "neither" in other.stderr, other.stderr


def test_ten_thousand_cycles_are_one_finding(watcher: cycles.Watcher) -> None:
    for _ in range(10_000):
        node_pair(16)
    gc.collect()
    r = watcher.result()
    assert r is not None
    (f,) = r.findings
    assert f["count"] == 10_000
    assert f["tensors"] == 20_000
    assert f["bytes"] == 20_000 * 16 * 4


def test_cuda_default_ignores_cpu_tensors(tmp_path: Path) -> None:
    w = cycles.Watcher(out_dir=tmp_path, summary_at_exit=False).start()
    try:
        node_pair(100)
        gc.collect()
    finally:
        w.stop()
    assert w.result() is None or w.result().findings == []


def test_other_gc_callbacks_still_run(watcher: cycles.Watcher) -> None:
    seen: List[str] = []
    cb = lambda phase, info: seen.append(phase)  # noqa: E731
    gc.callbacks.append(cb)
    try:
        node_pair(10)
        gc.collect()
    finally:
        gc.callbacks.remove(cb)
    assert "start" in seen and "stop" in seen
    assert gc.get_debug() & gc.DEBUG_SAVEALL == 0  # restored after each collection
    assert not gc.garbage


def test_a_notebook_shows_the_page_in_a_sandboxed_frame() -> None:
    import html
    import re

    r = cycles.find([node_pair(100)])
    frame = r._repr_html_()
    m = re.fullmatch(r'<iframe sandbox="" style="[^"]*" srcdoc="([^"]*)"></iframe>', frame)
    assert m is not None, frame[:200]
    assert html.unescape(m.group(1)) == r.html()
    assert "Node" in r.html()


def test_html_opens_offline_and_shows_the_red_tensor(tmp_path: Path) -> None:
    a = node_pair(100)
    page = tmp_path / "cycle.html"
    cycles.find([a]).write_html(page)
    text = page.read_text()
    assert "<script" not in text and "default-src 'none'" in text
    node = shutil.which("node")
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    checker = ROOT / "tests" / "browser" / "page_check.mjs"
    if not node or not os.path.exists(chromium) or not (ROOT / "tests/browser/node_modules/playwright-core").exists():
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs node, chromium and tests/browser/node_modules for this test")
        pytest.skip("node/chromium/playwright-core not available")
    out = subprocess.run([node, str(checker), str(page), "svg .tensor"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    import json

    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["requests"] == 0 and res["errors"] == []
    assert res["found"] >= 2
    assert res["fill"].replace(" ", "") in ("rgb(220,38,38)", "#dc2626"), res


def test_warn_tensor_cycles_logs_and_summarises_at_exit(tmp_path: Path) -> None:
    """The drop-in for PyTorch's warn_tensor_cycles, in a process of its own:
    a warning naming the page, the classes and the bytes when the cycle is
    collected, the page still there afterwards, and a summary at exit."""
    import sys
    import textwrap

    from conftest import subprocess_env

    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import gc, sys, torch, vramscope

            class Node:
                def __init__(self, v):
                    self.value, self.other = v, None

            vramscope.warn_tensor_cycles(device="any", out_dir=sys.argv[1])
            for _ in range(3):
                a, b = Node(torch.ones(256)), Node(torch.ones(256))
                a.other, b.other = b, a
            del a, b
            gc.collect()
            """
        )
    )
    out_dir = tmp_path / "pages"
    r = subprocess.run([sys.executable, str(script), str(out_dir)], env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    err = r.stderr
    warn = [line for line in err.splitlines() if "freed only by the garbage collector" in line]
    assert len(warn) == 1, err  # one kind of cycle, one warning
    assert "Node" in warn[0] and "KiB" in warn[0] and "graph: " in warn[0]
    page = Path(warn[0].split("graph: ")[1].strip())
    assert page.exists() and page.parent == out_dir  # the page outlives the warning
    assert "during this run" in err and "3×" in err, err


# ---------------------------------------------------------------------------
# A caught exception kept on an object, and what `find` leaves out. (Every
# other kind of reference: test_cycle_names.py.)


class Worker:
    """Keeps the exception it caught: the traceback's frame holds `self`."""

    def __init__(self) -> None:
        self.tensor = torch.ones(64)

    def run(self) -> None:
        try:
            raise ValueError("boom")
        except ValueError as e:
            self.err = e


def test_kept_exception_is_named_end_to_end_under_the_watcher(watcher: cycles.Watcher) -> None:
    w = Worker()
    w.run()
    del w
    gc.collect()
    (f,) = watcher.result().findings
    steps = [(s["type"], s["label"]) for s in f["example"]["cycle"]]
    assert steps == [("Worker", ".err"), ("ValueError", "__traceback__"), ("traceback", "tb_frame"), ("frame", "local 'self'")]
    assert f["title"].startswith("Worker —.err→ ValueError —__traceback__→ traceback —tb_frame→ frame —local 'self'→ (cycle)")
    assert "?" not in {e["label"] for e in f["example"]["edges"]}
    assert "list" not in {n["type"] for n in f["example"]["nodes"]}  # not the watcher's copy of gc.garbage


def _garbage_like() -> List[Any]:
    """What a copy of gc.garbage holds once a Worker kept its exception. The
    frame of this function stays reachable (the `f_back` of `run`'s frame)
    and holds the list: `list —[4]→ frame —f_back→ frame —local 'objs'→`."""
    w = Worker()
    w.run()
    tb = w.err.__traceback__
    objs = [w.tensor, w, w.err, tb, tb.tb_frame]
    del w, tb
    return objs


def test_find_leaves_out_the_list_passed_and_the_callers_frames() -> None:
    objs = _garbage_like()
    here = sys._getframe()
    found = cycles._find_objects(objs)
    assert not any(o is objs for o in found)
    assert not any(o is here for o in found)  # executing: its callers neither
    assert any(o is objs[4] for o in found)  # the frame of `run` is on the loop
    (f,) = cycles.find(objs).findings
    assert labels(f["example"]["cycle"]) == [".err", "__traceback__", "tb_frame", "local 'self'"]
    assert "list" not in {n["type"] for n in f["example"]["nodes"]}
    assert not any("test_find_leaves_out" in n["repr"] for n in f["example"]["nodes"])


def test_cuda_allocation_stacks_are_read_without_the_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher looks up tensors' allocation stacks at each collection
    that found some: from the segments' blocks, never the whole history
    (`include_traces=False`), which took 167 ms inside a 100k-entry
    recording on an H200."""
    from vramscope._annotate import objgraph

    calls: List[bool] = []

    def memory_snapshot(mempool_id: Any = None, include_traces: bool = True) -> List[Dict[str, Any]]:
        calls.append(include_traces)
        frames = [{"filename": "train.py", "line": 7, "name": "step"}]
        return [{"blocks": [{"address": 4096, "size": 512, "state": "active_allocated", "frames": frames}]}]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "memory_snapshot", memory_snapshot)
    look = objgraph.allocation_stacks()
    assert calls == [False]
    assert look is not None and look(4096 + 100) == ["train.py:7 in step"]
    assert look(4096 + 512) is None

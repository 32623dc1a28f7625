"""``vramscope mcp`` driven by the MCP SDK's own client over stdio, as a
coding agent would: the tools listed, each called on real files, and each
answer compared with what ``vramscope ... --json`` prints for the same
file; a damaged file, a path outside the roots and an unknown page are
errors with the CLI's words, and the server goes on answering after them.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

pytest.importorskip("mcp", reason="the MCP SDK: scripts/setup-venv.sh installs it")

from conftest import native_module, subprocess_env  # noqa: E402

if native_module() is None:
    pytest.skip("the compiled module is not built", allow_module_level=True)

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "tests" / "fixtures" / "gpu"
REAL = ROOT / "tests" / "fixtures" / "real"
PAGE = 40_000  # characters a page: the big summary (55k) needs two, every other answer one


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory the server may read: a real snapshot (999 segments:
    a long summary), a GPU OOM, a
    leaking run and its clean baseline, and a damaged file."""
    d = tmp_path_factory.mktemp("mcp_root")
    shutil.copy(REAL / "nothanmin_cs336_999segments.pickle.gz", d / "real.pickle.gz")
    shutil.copy(GPU / "oom_gpt_default.pickle.gz", d / "oom.pickle.gz")
    shutil.copy(GPU / "advise_leak.pickle.gz", d / "leak.pickle.gz")
    shutil.copy(GPU / "advise_baseline.pickle.gz", d / "baseline.pickle.gz")
    # A cycle watcher's directory, and an object graph as the Python side extracts it.
    graph = {
        "nodes": [
            {"type": "Node", "module": "__main__", "repr": "<Node>", "tensor": None},
            {"type": "Node", "module": "__main__", "repr": "<Node>", "tensor": None},
            {"type": "Tensor", "module": "torch", "repr": "tensor(...)",
             "tensor": {"shape": [512, 10], "dtype": "torch.float32", "device": "cuda:0", "bytes": 20480,
                        "requires_grad": False, "grad_fn": None, "stack": []}},
        ],
        "edges": [{"src": 0, "dst": 1, "label": ".other"}, {"src": 1, "dst": 0, "label": ".other"},
                  {"src": 0, "dst": 2, "label": ".value"}],
        "site": "train.py:12 in step",
    }
    (d / "graph.json").write_text(json.dumps(graph))
    (d / "vramscope-cycles").mkdir()
    (d / "vramscope-cycles" / "cycles.json").write_text(native_module().cycles_analyze(json.dumps(graph)))
    (d / "damaged.pickle").write_bytes(b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x08segments\x94]")
    return d


def cli_text(root: Path, *args: str) -> str:
    """What ``vramscope ARGS --json -q`` prints."""
    p = subprocess.run([sys.executable, "-m", "vramscope", *args, "--json", "-q"], cwd=root,
                       capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert p.returncode in (0, 3), p.stderr
    return p.stdout


def cli_json(root: Path, *args: str) -> Any:
    return json.loads(cli_text(root, *args))


async def _session(root: Path, calls: List[Tuple[str, Dict[str, Any]]]) -> Tuple[List[Any], List[Any]]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "vramscope", "mcp", "--root", str(root), "--page-chars", str(PAGE)],
        cwd=str(root), env=subprocess_env(),
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
            results = [await session.call_tool(name, args) for name, args in calls]
    return tools, results


def text_of(result: Any) -> str:
    """The answer: the first block (the CLI's JSON, or a page of it)."""
    return result.content[0].text


def notes_of(result: Any) -> List[str]:
    """The blocks after the answer: the page note, warnings."""
    return [c.text for c in result.content[1:]]


@pytest.fixture(scope="module")
def served(root: Path) -> Dict[str, Any]:
    """One server, many calls (the files stay loaded between them)."""
    calls = [
        ("summary", {"file": "real.pickle.gz"}),
        ("summary", {"file": "real.pickle.gz", "page": 2}),
        ("oom", {"file": "oom.pickle.gz"}),
        ("advise", {"file": "oom.pickle.gz"}),
        ("leaks", {"file": "leak.pickle.gz"}),
        ("categories", {"file": "leak.pickle.gz"}),
        ("simulate", {"file": "oom.pickle.gz", "settings": ["expandable_segments:True"]}),
        ("diff", {"file_a": "baseline.pickle.gz", "file_b": "leak.pickle.gz"}),
        ("segments", {"file": "oom.pickle.gz", "at": "peak"}),
        ("check", {"file": "leak.pickle.gz", "max_peak": "1GiB"}),
        ("report", {"file": "leak.pickle.gz", "out": "leak.html"}),
        ("summary", {"file": "damaged.pickle"}),
        ("summary", {"file": str(ROOT / "README.md")}),
        ("summary", {"file": "../outside.pickle"}),
        ("summary", {"file": "real.pickle.gz", "page": 999}),
        ("advise", {"file": "oom.pickle.gz", "gpu": "NVIDIA H100 80GB HBM3"}),
        ("cycles", {}),
        ("cycles", {"path": "graph.json"}),
        ("cycles", {"path": "leak.pickle.gz"}),
    ]
    tools, results = asyncio.run(_session(root, calls))
    return {"tools": {t.name: t for t in tools}, "results": results, "calls": calls}


def pages_joined(served: Dict[str, Any], first: int) -> str:
    """The first two pages of an answer."""
    return "".join(text_of(served["results"][first + k]) for k in (0, 1))


def test_every_tool_is_listed_with_a_described_schema(served: Dict[str, Any]) -> None:
    tools = served["tools"]
    assert set(tools) >= {"summary", "oom", "leaks", "categories", "advise", "simulate", "diff", "segments", "check", "report",
                         "cycles"}
    for t in tools.values():
        assert t.description and len(t.description) > 60, t.name
        assert t.input_schema["type"] == "object"
    assert "file" in tools["summary"].input_schema["required"]
    assert "capacity" in tools["advise"].input_schema["properties"]


def test_answers_are_the_clis_json(served: Dict[str, Any], root: Path) -> None:
    r = served["results"]
    # A summary longer than a page comes in pages; joined, they begin the CLI's JSON.
    whole = cli_text(root, "summary", "real.pickle.gz")
    note = notes_of(r[0])[0]
    assert note.startswith("[vramscope: page 1 of") and "call again with page=2" in note, note
    assert len(text_of(r[0])) == PAGE and whole.startswith(pages_joined(served, 0))
    assert json.loads(text_of(r[3])) == cli_json(root, "advise", "oom.pickle.gz")
    assert json.loads(text_of(r[4])) == cli_json(root, "leaks", "leak.pickle.gz", "--no-source")
    assert json.loads(text_of(r[5])) == cli_json(root, "categories", "leak.pickle.gz")
    assert json.loads(text_of(r[6])) == cli_json(root, "simulate", "oom.pickle.gz", "--set", "expandable_segments:True")
    assert json.loads(text_of(r[7])) == cli_json(root, "diff", "baseline.pickle.gz", "leak.pickle.gz")
    assert json.loads(text_of(r[8])) == cli_json(root, "segments", "oom.pickle.gz", "--at", "peak")
    assert json.loads(text_of(r[9])) == cli_json(root, "check", "leak.pickle.gz", "--max-peak", "1GiB")
    assert json.loads(text_of(r[15])) == cli_json(root, "advise", "oom.pickle.gz", "--gpu", "NVIDIA H100 80GB HBM3")
    assert not any(x.is_error for x in r[:12] if x is not r[11])


def test_cycles_are_read_from_the_watchers_directory(served: Dict[str, Any], root: Path) -> None:
    r = served["results"]
    from_dir, from_graph, not_cycles = r[16], r[17], r[18]
    answer = json.loads(text_of(from_dir))
    assert answer == cli_json(root, "cycles", "vramscope-cycles") == json.loads(text_of(from_graph))
    assert answer["bytes"] == 20480 and answer["findings"][0]["count"] == 1
    assert [s["label"] for s in answer["findings"][0]["example"]["cycle"]] == [".other", ".other"]
    assert not_cycles.is_error and "exit 2" in text_of(not_cycles), text_of(not_cycles)


def test_the_oom_is_explained(served: Dict[str, Any], root: Path) -> None:
    ooms = json.loads(text_of(served["results"][2]))["ooms"]
    summary = cli_json(root, "summary", "oom.pickle.gz")
    expected = [o for d in summary["devices"] for o in d["ooms"]]
    assert ooms and [o["cause"] for o in ooms] == [o["cause"] for o in expected]
    assert ooms[0]["requested_bytes"] == expected[0]["requested_bytes"] > 0


def test_the_report_is_written_under_the_root(served: Dict[str, Any], root: Path) -> None:
    answer = json.loads(text_of(served["results"][10]))
    page = Path(answer["report"])
    assert page == root / "leak.html" and page.stat().st_size == answer["bytes"] > 100_000
    assert page.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html>")


def test_bad_calls_are_errors_with_the_clis_words_and_the_server_goes_on(served: Dict[str, Any], root: Path) -> None:
    r = served["results"]
    damaged, outside_abs, outside_rel, no_page = r[11], r[12], r[13], r[14]
    assert damaged.is_error and "damaged.pickle" in text_of(damaged) and "exit 2" in text_of(damaged), text_of(damaged)
    for x in (outside_abs, outside_rel):
        assert x.is_error and "outside the directories this server may read" in text_of(x), text_of(x)
    assert no_page.is_error and "page 999 does not exist" in text_of(no_page)
    # Answered after the errors: one server served every call.
    assert not r[15].is_error


def test_the_standalone_binary_hands_mcp_to_python(root: Path) -> None:
    binary = ROOT / "target" / "release" / "vramscope"
    if not binary.exists():
        pytest.skip("the release binary is not built")
    p = subprocess.run([str(binary), "mcp", "--help"], capture_output=True, text=True,
                       env=subprocess_env(VRAMSCOPE_PYTHON=sys.executable), timeout=120)
    assert p.returncode == 0 and "--root" in p.stdout, p.stderr

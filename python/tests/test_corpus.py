"""The acceptance corpus: everyday training programs (``scripts/corpus.py``)
recorded on the CPU with ``vramscope run``, as a new user would, each in its
correct form and with the classic leaks planted.

* Correct forms: no leak and no warning at all (only ``[ok]`` findings).
* Planted forms: the leak found, of the kind planted, and the finding names
  the variable that holds it and the planted line that stores into it.

``python python/tests/test_corpus.py`` prints the table (program, form,
findings, expected, ok).
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import SCRIPTS, native_module, run_python  # noqa: E402

sys.path.insert(0, str(SCRIPTS))
import corpus  # noqa: E402

MAIN = "import sys; from vramscope.run import main; sys.exit(main(sys.argv[1:]))"
CELLS: List[Tuple[str, str]] = [(p, f) for p, forms in corpus.FORMS.items() for f in forms]
_results: Dict[Tuple[str, str], Dict[str, Any]] = {}


def record(program: str, form: str, workdir: Path) -> Dict[str, Any]:
    """Run one cell under `vramscope run` and read its leaks."""
    out = workdir / f"{program}.{form}.pickle"
    proc = run_python(["-c", MAIN, "-q", "--no-report", "-o", str(out), str(SCRIPTS / "corpus.py"), program, form],
                      cwd=workdir, timeout=600, preload=corpus.preload(program))
    cell: Dict[str, Any] = {"rc": proc.returncode, "stderr": proc.stderr[-3000:], "findings": [], "path": out}
    if proc.returncode == 0 and out.exists():
        import vramscope

        cell["findings"] = vramscope.load(str(out)).leaks()["findings"]
    return cell


def judge(program: str, form: str, cell: Dict[str, Any]) -> List[str]:
    """What is wrong with the cell's findings (empty: as expected)."""
    if cell["rc"] != 0:
        return [f"exit {cell['rc']}: {cell['stderr']}"]
    findings, problems = _framework_warnings(program, cell["findings"])
    expected = corpus.FORMS[program][form]
    bad = [f for f in findings if f["severity"] in ("leak", "warning")]
    if expected is None:
        return problems + [f"{f['severity']}: {f['title']}" for f in bad]
    kind, variable = expected
    leaks = [f for f in findings if f["severity"] == "leak"]
    if not leaks:
        return problems + ["no leak found"]
    planted_line = _planted_line(program, form)
    named = [
        (f, s["held_by"]) for f in leaks for s in f["sites"]
        if s.get("held_by") and s["held_by"]["name"] == variable
    ]
    if not named:
        return [f"no leak names `{variable}`: {[f['title'] for f in leaks]}"]
    f, held = named[0]
    if f["kind"] != kind:
        problems.append(f"kind {f['kind']}, planted {kind}")
    stored = held.get("stored_at")
    if not stored or stored[1] != planted_line:
        problems.append(f"storing line {stored and stored[1]}, planted at {planted_line}")
    others = [x["title"] for x in findings if x["severity"] in ("leak", "warning") and x is not f]
    if others:
        problems.append(f"also: {others}")
    return problems


def _framework_warnings(program: str, findings: List[Dict[str, Any]]) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Take out the warning a program's framework makes true on correct code
    (``corpus.FRAMEWORK_WARNINGS``), checking that it is there and that its
    fix is the framework's; returns the other findings and the problems."""
    kind = corpus.FRAMEWORK_WARNINGS.get(program)
    if kind is None:
        return findings, []
    mine = [f for f in findings if f["severity"] == "warning" and f["kind"] == kind]
    rest = [f for f in findings if not any(f is m for m in mine)]
    if not mine:
        return rest, [f"no {kind} warning: {program}'s framework makes it true"]
    if "optimizer_zero_grad" not in mine[0]["fix"]:
        return rest, [f"{kind} fix is not the framework's: {mine[0]['fix']}"]
    return rest, []


def _planted_line(program: str, form: str) -> Optional[int]:
    """The line marked ``# PLANTED`` in the program's function (``# PLANTED:
    FORM`` where the program plants more than one form)."""
    import inspect

    src, start = inspect.getsourcelines(corpus.PROGRAMS[program])
    marked = [(start + i, line.split("# PLANTED", 1)[1]) for i, line in enumerate(src) if "# PLANTED" in line]
    # A program with several planted forms marks each line with its form.
    for at, rest in marked:
        if rest.strip().lstrip(":").strip() == form:
            return at
    return marked[0][0] if marked else None


def summary(f: Dict[str, Any]) -> str:
    held = next((s["held_by"] for s in f["sites"] if s.get("held_by")), None)
    by = f" held by {held['name']}" if held else ""
    line = f":{held['stored_at'][1]}" if held and held.get("stored_at") else ""
    return f"{f['severity']}:{f['kind']}{by}{line}"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Dict[Tuple[str, str], Dict[str, Any]]:
    if native_module() is None:
        pytest.skip("vramscope._native is not built")
    if not _results:
        work = tmp_path_factory.mktemp("corpus")
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {c: pool.submit(record, c[0], c[1], work) for c in CELLS}
            for c, fut in futures.items():
                _results[c] = fut.result()
    return _results


# Cells that do not pass yet, and why (strict: a cell that passes must leave).
KNOWN_GAPS: Dict[Tuple[str, str], str] = {}


@pytest.mark.parametrize(
    "cell",
    [pytest.param(c, marks=pytest.mark.xfail(reason=KNOWN_GAPS[c], strict=True)) if c in KNOWN_GAPS else c for c in CELLS],
    ids=[f"{p}-{f}" for p, f in CELLS],
)
def test_corpus_cell(results: Dict[Tuple[str, str], Dict[str, Any]], cell: Tuple[str, str]) -> None:
    problems = judge(cell[0], cell[1], results[cell])
    assert not problems, f"{cell}: {problems}"


@pytest.mark.parametrize(
    "cell, words",
    [
        (("keepers", "closure"), "`callbacks.clear()`"),
        (("seq_lm", "hook_per_step"), "`handle.remove()`"),
        (("metrics", "cat_on_device"), "concatenate once"),
    ],
    ids=["closure", "hook", "cat"],
)
def test_the_fix_is_worded_for_how_the_tensors_are_kept(results: Dict[Tuple[str, str], Dict[str, Any]], cell: Tuple[str, str], words: str) -> None:
    """Functions that hold tensors through their defaults are cleared, a hook
    registered in the loop is registered once, an accumulator grown by
    concatenation is concatenated once: not the generic `.item()` advice."""
    leaks = [f for f in results[cell]["findings"] if f["severity"] == "leak"]
    assert leaks and words in leaks[0]["fix"], [f["fix"] for f in leaks]


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {c: pool.submit(record, c[0], c[1], Path(tmp)) for c in CELLS}
            for (p, f), fut in futures.items():
                cell = fut.result()
                found = [summary(x) for x in cell["findings"] if x["severity"] != "benign"] or ["none"]
                expected = corpus.FORMS[p][f]
                want = "no leak, no warning" if expected is None else f"{expected[0]} held by {expected[1]}:{_planted_line(p, f)}"
                if p in corpus.FRAMEWORK_WARNINGS:
                    want += f"; warning:{corpus.FRAMEWORK_WARNINGS[p]} (the framework's order)"
                problems = judge(p, f, cell)
                rows.append((p, f, "; ".join(found), want, "ok" if not problems else "; ".join(problems)))
    print("| program | form | findings (leaks, warnings) | expected | ok |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()



@pytest.mark.parametrize("cell", [("zoo_bert", "outputs_kept"), ("zoo_lstm", "outputs_kept")], ids=["bert", "lstm"])
def test_the_caller_that_keeps_a_models_output_is_quoted(results: Dict[Tuple[str, str], Dict[str, Any]], cell: Tuple[str, str]) -> None:
    """The site is inside the model's `forward` (a wrapper in zoo.py); the
    line that keeps what it returned is in its caller: read there too, as a
    snapshot without vramscope's holders (PyTorch's own recorder) has
    nothing else to name it."""
    leaks = [f for f in results[cell]["findings"] if f["severity"] == "leak"]
    assert leaks, [f["title"] for f in results[cell]["findings"]]
    site = leaks[0]["sites"][0]
    assert site["file"].endswith("zoo.py")
    assert site["kept_by"] is not None and site["kept_by"][0] == _planted_line(*cell), site["kept_by"]
    assert site["kept_in"] is not None and "corpus.py:" in site["kept_in"] and site["kept_in"].endswith(" in run"), site["kept_in"]
    # Without the recorder's holders, the caller's line is the explanation.
    import pickle

    import vramscope

    with open(results[cell]["path"], "rb") as fh:
        snap = pickle.load(fh)
    snap["vramscope"].pop("holders", None)
    snap["vramscope"].pop("holder_samples", None)
    bare = [f for f in vramscope.loads(pickle.dumps(snap)).leaks(source_roots=[SCRIPTS])["findings"] if f["severity"] == "leak"]
    assert bare and "In its caller (" in bare[0]["explanation"] and "`kept.append(out)" in bare[0]["explanation"], bare and bare[0]["explanation"]

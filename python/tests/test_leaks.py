"""Leaks, diffs and memory limits on training loops recorded with real torch
(CPU path) by vramscope's own recorder: each planted bug is found with its
site and fix, and the clean control loop yields no leak.

The loops are in ``scripts/leaky_loops.py``; their exact sizes come from the
model itself (an MLP 256 → 1024 → 1024 → 10, batch 2048, float32, Adam).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, List

import pytest

torch = pytest.importorskip("torch")

from conftest import SCRIPTS, native_module, run_python, subprocess_env  # noqa: E402

if native_module() is None:
    pytest.skip("vramscope._native is not built", allow_module_level=True)

import vramscope  # noqa: E402

leaky_loops = importlib.import_module("leaky_loops")

MiB = 1 << 20
BATCH = 2048
VARIANTS = leaky_loops.VARIANTS


def param_bytes() -> int:
    return sum(p.numel() * p.element_size() for p in leaky_loops.MLP().parameters())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """Every variant, recorded once (12 iterations; the cycle run 20)."""
    tmp = tmp_path_factory.mktemp("leaky")
    out: Dict[str, Path] = {}
    for v in VARIANTS:
        path = tmp / f"{v}.pickle"
        iters = "20" if v == "cycle" else "12"
        r = run_python([str(SCRIPTS / "leaky_loops.py"), v, str(path), "--iters", iters], cwd=tmp, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        out[v] = path
    return out


def leaks(path: Path) -> Dict[str, Any]:
    return vramscope.load(path).leaks(source_roots=[SCRIPTS])


def by_severity(report: Dict[str, Any], severity: str) -> List[Dict[str, Any]]:
    return [f for f in report["findings"] if f["severity"] == severity]


def test_iterations_come_from_the_recorders_steps(runs: Dict[str, Path]) -> None:
    r = leaks(runs["clean"])
    assert r["iteration_source"] == {"kind": "profiler_step"}
    assert len(r["iterations"]) == 12
    assert all(it["complete"] for it in r["iterations"])
    # After the first iteration (optimizer state appears) every iteration
    # ends where it began.
    assert [it["growth"] for it in r["iterations"][1:]] == [0] * 11
    assert r["growth_per_iteration"] == 0


def test_clean_loop_has_no_leak_and_explains_the_optimizer_state(runs: Dict[str, Path]) -> None:
    r = leaks(runs["clean"])
    assert not r["leaks_found"]
    assert by_severity(r, "leak") == [] and by_severity(r, "warning") == []
    opt = [f for f in r["findings"] if f["kind"] == "one_time" and f["title"].startswith("optimizer state")]
    assert len(opt) == 1, [f["title"] for f in r["findings"]]
    # Adam: exp_avg and exp_avg_sq per parameter, plus one 4-byte step per parameter.
    n_params = len(list(leaky_loops.MLP().parameters()))
    assert opt[0]["bytes"] == 2 * param_bytes() + 4 * n_params
    assert opt[0]["severity"] == "benign"
    # The optimizer the program used, and its rule with the figures read
    # from the optimizer itself.
    assert opt[0]["title"].startswith("optimizer state (Adam):"), opt[0]["title"]
    rule = f"Adam keeps exp_avg, exp_avg_sq and step: {3 * n_params} tensors"
    assert rule in opt[0]["explanation"], opt[0]["explanation"]
    assert "(2.0×)" in opt[0]["explanation"]


def test_sgd_without_momentum_is_said_to_keep_nothing(tmp_path: Path) -> None:
    """SGD without momentum keeps no state: nothing is called its state,
    and the recorder says what the optimizer holds (nothing) and why."""
    script = tmp_path / "sgd.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch import nn
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(6):
            x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    """))
    out = tmp_path / "sgd.pickle"
    r = run_python(["-m", "vramscope", "run", "-q", "--no-report", "-o", str(out), str(script)], cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    snap = vramscope.load(out)
    found = snap.leaks()["findings"]
    assert not [f for f in found if f["title"].startswith("optimizer state")], [f["title"] for f in found]
    assert not [f for f in found if f["severity"] in ("leak", "warning")], [f["title"] for f in found]


def test_features_appended_in_forward(runs: Dict[str, Path]) -> None:
    r = leaks(runs["append"])
    found = by_severity(r, "leak")
    assert len(found) == 1, [f["title"] for f in r["findings"]]
    f = found[0]
    assert f["kind"] == "growth"
    site = f["sites"][0]
    assert "leaky_loops.py" in site["site"] and "in forward" in site["site"]
    # One 2048 x 1024 float32 activation kept per iteration.
    assert site["bytes_per_iteration"] == BATCH * 1024 * 4
    assert f["bytes_per_iteration"] == BATCH * 1024 * 4
    assert site["kept_by"][1].startswith("self.features.append(h)")
    # What holds them, by name: the list on the model, a local of main().
    held = site["held_by"]
    assert (held["name"], held["kind"], held["function"], held["path"]) == ("model", "local", "main", "model.features[*]")
    # One per iteration; those the recorder's last look found kept (the
    # current iteration's is held by its local too, and is not counted).
    assert 10 <= held["tensors"] <= 12 and held["bytes"] == held["tensors"] * BATCH * 1024 * 4
    assert held["stored_at"][2] == "self.features.append(h)  # the bug: keeps h and its graph alive"
    assert "held by `model`" in f["title"]
    assert "detach()" in f["fix"]
    # What grows: activations (the profiler labels them so; the finding says it).
    assert site["category"] == "activation"
    # Tensors of iteration k are still alive after k + 1: all but the last two.
    assert site["outliving_blocks"] >= 9
    live = site["live_bytes"]
    assert all(b - a == BATCH * 1024 * 4 for a, b in zip(live[1:], live[2:]))


def test_loss_summed_with_its_graph(runs: Dict[str, Path]) -> None:
    r = leaks(runs["loss_sum"])
    found = by_severity(r, "leak")
    assert len(found) == 1, [f["title"] for f in r["findings"]]
    f = found[0]
    assert f["kind"] == "retained_graph"
    assert "total_loss += val_loss.item()" in f["fix"] and "inference_mode" in f["fix"]
    # Held through the autograd graph of the running sum, a local of main().
    held = [s["held_by"] for s in f["sites"] if s.get("held_by")]
    assert held and all(h["name"] == "total_loss" and h["through_graph"] for h in held), held
    assert held[0]["stored_at"][2].startswith("total_loss += val_loss")
    # The graph of each validation pass keeps both ReLU outputs (saved for
    # backward) and the log-softmax of the loss.
    assert f["bytes_per_iteration"] >= 2 * BATCH * 1024 * 4
    assert any("in forward" in s["site"] for s in f["sites"])
    assert any("cross_entropy" in s["site"] for s in f["sites"])
    # Inside the model: activations. (The loss's log-softmax, made by a call
    # outside any module and never backpropagated, matches no inference rule;
    # the profiler backend labels it from the Memory Profiler.)
    assert {s["category"] for s in f["sites"] if "in forward" in s["site"]} == {"activation"}


def test_reference_cycle_of_nodes(runs: Dict[str, Path]) -> None:
    r = leaks(runs["cycle"])
    found = by_severity(r, "leak")
    assert len(found) == 1, [f["title"] for f in r["findings"]]
    f = found[0]
    assert f["kind"] == "reference_cycle"
    site = f["sites"][0]
    assert "leaky_loops.py" in site["site"]
    # Two 2048 x 10 float32 tensors per iteration, freed only by the collector.
    per_iteration = 2 * BATCH * 10 * 4
    assert site["gc_freed_bytes"] >= 10 * per_iteration
    # Between two collections (Python's own ones run during the recording
    # too) the pile grows by exactly those two tensors per iteration (plus
    # the 8-byte scalar of `out * 2` that MulBackward keeps).
    live = site["live_bytes"]
    rises = [b - a for a, b in zip(live, live[1:]) if b > a]
    assert len(rises) >= 5 and all(per_iteration <= d <= per_iteration + 64 for d in rises), live
    assert max(live) >= 2 * per_iteration
    assert "weakref" in f["fix"] and "vramscope.cycles" in f["fix"]
    assert "cycle collector" in f["explanation"]


def test_a_loop_through_a_generator_is_freed_by_the_collector(runs: Dict[str, Path]) -> None:
    """The collector closes a suspended generator before it frees a loop
    through it; what the loop held dies inside the collection, counted in
    no `collected`: every collection is marked, not only those that count."""
    r = leaks(runs["generator_cycle"])
    found = by_severity(r, "leak")
    assert [f["kind"] for f in found] == ["reference_cycle"], [f["title"] for f in r["findings"]]
    site = found[0]["sites"][0]
    assert "leaky_loops.py" in site["site"]
    # One 2048 x 10 float32 tensor per iteration, every one freed by a
    # collection: three by the program's (iterations 4, 8, 12), none left
    # for the recorder's at the end.
    assert site["gc_freed_bytes"] == 12 * BATCH * 10 * 4
    assert "generator" in found[0]["fix"]
    # They pile up by one tensor an iteration between collections (the
    # slope over the run, a quarter of it, is not what a user meets).
    assert "pile up (80.00 KiB per iteration," in found[0]["explanation"], found[0]["explanation"]


def test_a_tensor_hook_that_refers_to_its_tensor_is_named(runs: Dict[str, Path]) -> None:
    """`out.register_hook(lambda g: ... out ...)` on an output: never freed,
    not even by the collector; the finding names the line, not a guess."""
    r = leaks(runs["tensor_hook"])
    found = by_severity(r, "leak")
    assert len(found) == 1, [f["title"] for f in r["findings"]]
    f = found[0]
    assert f["title"].endswith("a hook on the tensor refers to it"), f["title"]
    # The output, 2048 x 10 float32, every iteration.
    assert f["bytes_per_iteration"] == pytest.approx(BATCH * 10 * 4, rel=0.01)
    assert "out.register_hook(lambda g: g * (out.detach().norm() > 0))" in f["explanation"]
    assert "never freed, not even by `gc.collect()`" in f["explanation"]
    assert "h.remove()" in f["fix"]


@pytest.mark.parametrize("variant", ["zero_grad_late", "zero_grad_keep"])
def test_gradients_held_into_the_next_forward(runs: Dict[str, Path], variant: str) -> None:
    r = leaks(runs[variant])
    assert not r["leaks_found"]
    held = [f for f in r["findings"] if f["kind"] == "held_gradients"]
    assert len(held) == 1, [f["title"] for f in r["findings"]]
    f = held[0]
    assert f["bytes"] == param_bytes()  # every gradient, one per parameter
    assert "zero_grad(set_to_none=True)" in f["fix"] and "before the forward pass" in f["fix"]
    if variant == "zero_grad_keep":
        assert "set_to_none=False" in f["explanation"]
    else:
        assert "after the forward pass" in f["explanation"]


def test_check_gates_and_exit_codes(runs: Dict[str, Path]) -> None:
    clean, leaky = str(runs["clean"]), str(runs["append"])
    assert vramscope.cli(["check", clean, "--no-leaks", "--max-growth", "1MiB/iter", "-q"]) == 0
    assert vramscope.cli(["check", leaky, "--no-leaks", "-q"]) == 3
    assert vramscope.cli(["check", leaky, "--max-growth", "1MiB/iter", "-q"]) == 3
    assert vramscope.cli(["check", leaky, "--max-growth", "9MiB/iter", "-q"]) == 0
    peak = vramscope.load(clean).summary()["devices"][0]["peak"]["allocated_bytes"]
    assert vramscope.cli(["check", clean, "--max-peak", str(peak), "-q"]) == 0
    assert vramscope.cli(["check", clean, "--max-peak", str(peak - 1), "-q"]) == 3
    assert vramscope.cli(["check", clean, "-q"]) == 2  # nothing to check
    assert vramscope.cli(["check", clean, "--max-peak", "12 parsecs"]) == 2
    res = vramscope.load(leaky).check(max_peak="1GiB", no_leaks=True, max_growth="1MiB/iter")
    assert not res["passed"]
    assert {c["name"]: c["passed"] for c in res["checks"]} == {"max_peak": True, "no_leaks": False, "max_growth": False}


def test_limits_context_manager(tmp_path: Path) -> None:
    model = leaky_loops.MLP(keep=True)
    x = torch.randn(256, 256)
    with pytest.raises(vramscope.MemoryLimitExceeded) as err:
        with vramscope.limits(no_leaks=True, path=tmp_path / "leak.pickle"):
            for _ in range(6):
                model(x).sum().backward()
                vramscope.step()
    assert "grows by" in str(err.value) and "fix:" in str(err.value)
    # What holds the leak, by name: the list on the model, and the line
    # of leaky_loops.py that appends to it.
    assert "held by `model` (MLP, local of test_limits_context_manager" in str(err.value), str(err.value)
    assert "self.features.append(h)" in str(err.value)
    assert Path(err.value.path).exists()  # kept for the report
    model = leaky_loops.MLP(keep=False)
    ok = vramscope.limits(no_leaks=True, max_growth="1KiB/iter", path=tmp_path / "ok.pickle")
    with ok:
        for _ in range(6):
            model(x).sum().backward()
            model.zero_grad(set_to_none=True)
            vramscope.step()
    assert ok.result is not None and ok.result["passed"]
    assert not (tmp_path / "ok.pickle").exists()  # deleted when every limit holds


def test_pytest_marker(tmp_path: Path) -> None:
    (tmp_path / "test_marked.py").write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(SCRIPTS)!r})
            import pytest, torch, vramscope
            from leaky_loops import MLP

            def loop(keep):
                model, x = MLP(keep=keep), torch.randn(256, 256)
                for _ in range(6):
                    model(x).sum().backward()
                    model.zero_grad(set_to_none=True)
                    vramscope.step()

            @pytest.mark.vramscope(no_leaks=True)
            def test_leaks():
                loop(True)

            @pytest.mark.vramscope(no_leaks=True, max_peak="1GiB")
            def test_clean():
                loop(False)
            """
        )
    )
    # Installed packages register the plugin through their entry point.
    from importlib.metadata import entry_points

    installed = any(e.value == "vramscope.pytest_plugin" for e in entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", "vramscope.pytest_plugin"]
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *plugin, "test_marked.py"],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-3000:]
    assert "1 failed, 1 passed" in out, out[-3000:]
    assert "MemoryLimitExceeded" in out and "grows by" in out
    kept = list((tmp_path / ".vramscope").glob("*test_leaks*.pickle"))
    assert len(kept) == 1
    assert not list((tmp_path / ".vramscope").glob("*test_clean*.pickle"))


def diff_json(capfd: pytest.CaptureFixture, *args: str) -> Dict[str, Any]:
    import json

    capfd.readouterr()
    assert vramscope.cli(["diff", *args, "--json", "-q"]) == 0
    return json.loads(capfd.readouterr().out)


def test_diff_of_a_run_against_itself_is_empty(runs: Dict[str, Path], capfd: pytest.CaptureFixture) -> None:
    for v in ("clean", "cycle"):
        d = diff_json(capfd, str(runs[v]), str(runs[v]))
        assert d["grown"] == [] and d["shrunk"] == [], v
        assert d["totals"]["delta"] == 0
        assert all(s["delta"] == 0 for s in d["by_site"])


def test_diff_of_clean_and_leaky_runs_names_the_leaking_site_first(runs: Dict[str, Path], capfd: pytest.CaptureFixture) -> None:
    d = diff_json(capfd, str(runs["clean"]), str(runs["append"]))
    # Two processes: addresses and built-in object ids differ, stacks match.
    assert len(d["grown"]) == 1 and d["shrunk"] == []
    g = d["grown"][0]
    assert "leaky_loops.py" in g["site"] and "forward" in g["site"]
    assert g["bytes"] == 12 * BATCH * 1024 * 4  # one kept activation per iteration
    assert d["by_site"][0]["site"] == g["site"]
    # Iterations of one file: what iteration 10 holds that iteration 3 did not.
    d = diff_json(capfd, str(runs["append"]), "--at-a", "iter:3", "--at-b", "iter:10")
    assert d["grown"][0]["bytes"] == 7 * BATCH * 1024 * 4


def test_the_leak_shows_the_path_that_keeps_its_tensors(tmp_path: Path) -> None:
    """One line allocates through two paths: `forward` called by the
    training step (freed each step) and by `validate` (its outputs kept in
    a list). The finding shows a stack through `validate` and names where
    the two paths part."""
    script = tmp_path / "val.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch import nn
        model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        kept = []

        def forward(x):
            return model(x)

        def train_step():
            opt.zero_grad()
            forward(torch.randn(256, 64)).square().mean().backward()
            opt.step()

        def validate():
            with torch.no_grad():
                kept.append(forward(torch.randn(64, 64)))

        for _ in range(8):
            train_step()
            validate()
    """))
    out = tmp_path / "val.pickle"
    r = run_python(["-m", "vramscope", "run", "-q", "--no-report", "-o", str(out), str(script)], cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    found = [f for f in vramscope.load(out).leaks()["findings"] if f["severity"] == "leak"]
    assert found, "no leak found"
    site = found[0]["sites"][0]
    print(found[0]["explanation"])
    assert any("in validate" in line for line in site["stack"]), site["stack"]
    assert not any("in train_step" in line for line in site["stack"]), site["stack"]
    kept, freed = site["leaking_path"]
    assert kept.endswith("in validate") and freed.endswith("in train_step"), site["leaking_path"]
    assert "allocated through" in found[0]["explanation"] and "in validate" in found[0]["explanation"]


def test_a_memoised_function_of_tensors_is_named_with_its_cache(tmp_path: Path) -> None:
    """`functools.lru_cache` on a function called with each step's output
    keeps every argument and result: the leak names the memoised function
    and the fix is about its cache (no line of the program stores into it)."""
    script = tmp_path / "memo.py"
    script.write_text(textwrap.dedent("""
        import functools
        import torch
        import torch.nn.functional as F
        from torch import nn
        model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)

        @functools.lru_cache(maxsize=None)
        def normalise(x):
            return x / x.norm()

        for _ in range(8):
            x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))
            opt.zero_grad(set_to_none=True)
            out = model(x)
            F.cross_entropy(out, y).backward()
            opt.step()
            normalise(out.detach())
    """))
    out = tmp_path / "memo.pickle"
    r = run_python(["-m", "vramscope", "run", "-q", "--no-report", "-o", str(out), str(script)], cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    found = by_severity(vramscope.load(out).leaks(), "leak")
    assert len(found) == 1, [f["title"] for f in found]
    held = next(s["held_by"] for s in found[0]["sites"] if s.get("held_by"))
    assert held["name"] == "normalise" and "lru_cache" in held["type_name"], held
    # Each step's output (64 × 10 float32) is a key, and its normalised copy a value.
    assert found[0]["bytes_per_iteration"] == 2 * 64 * 10 * 4
    assert "normalise.cache_clear()" in found[0]["fix"] and "maxsize" in found[0]["fix"], found[0]["fix"]

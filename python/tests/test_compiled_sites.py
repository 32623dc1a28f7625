"""A compiled model's memory is not named by the files torch.compile
generates (``/tmp/torchinductor_<user>/xx/c….py:92 in call``), which mean
nothing once the run is over: its sites are the program's lines.

A CUDA recording takes its stacks inside the generated code (PyTorch's own
traceback capture sees every Python frame); the CPU recorders do not, so
this test takes the stacks the way CUDA does: it wraps the allocation
helper the generated modules call (``empty_strided_cpu``), records the real
Python stack of each buffer they allocate, and writes those stacks into a
snapshot in PyTorch's format."""

from __future__ import annotations

import inspect
import pickle
import traceback
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import native_module  # noqa: E402

if native_module() is None:
    pytest.skip("vramscope._native is not built", allow_module_level=True)


@pytest.fixture(autouse=True)
def _no_garbage_left():
    """Compiling leaves Dynamo's caches and reference cycles behind; the
    tests after these (the cycle watcher's) must not find them."""
    yield
    torch._dynamo.reset()
    import gc

    gc.collect()

import vramscope  # noqa: E402

THIS = Path(__file__).name


def _generated_allocations():
    """(bytes, stack) of every buffer the generated code of one compiled
    training step allocates, the stack innermost frame first as PyTorch
    records it."""
    from torch._inductor.codecache import PyCodeCache

    torch._dynamo.reset()
    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)))
    x = torch.randn(32, 64)
    model(x).sum().backward()  # compiles forward and backward
    seen = []
    patched = []
    for mod in list(PyCodeCache.modules):
        helper = getattr(mod, "empty_strided_cpu", None)
        if helper is None:
            continue

        def wrapped(size, stride, dtype, _helper=helper):
            t = _helper(size, stride, dtype)
            frames = [{"filename": f.filename, "line": f.lineno, "name": f.name} for f in traceback.extract_stack()[:-1]]
            seen.append((t.untyped_storage().nbytes(), frames[::-1]))
            return t

        mod.empty_strided_cpu = wrapped
        patched.append((mod, helper))
    try:
        model(x).sum().backward()  # the line compiled forward is run from
    finally:
        for mod, helper in patched:
            mod.empty_strided_cpu = helper
        torch._dynamo.reset()
    return seen


def test_compiled_allocations_are_sited_at_the_programs_lines(tmp_path: Path) -> None:
    allocations = _generated_allocations()
    assert allocations, "the compiled step allocated nothing through its generated code"
    # The stacks are inside Inductor's generated modules (no source map in
    # this file: the reader has only the rule that they are no one's code)...
    innermost = {frames[0]["filename"] for _, frames in allocations}
    assert all(Path(f).parent.name == Path(f).stem[1:3] and len(Path(f).stem) == 52 for f in innermost), innermost
    # ...written as a CUDA recording writes them: every buffer allocated, in
    # a segment of its own, and still live at the end.
    base, events, segments = 0x7F0000000000, [], []
    for i, (size, frames) in enumerate(allocations):
        addr = base + i * (1 << 21)
        events.append({"action": "segment_alloc", "addr": addr, "size": 1 << 21, "stream": 0, "time_us": i, "frames": frames})
        events.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": i, "frames": frames})
        segments.append({"device": 0, "address": addr, "total_size": 1 << 21, "allocated_size": size, "active_size": size,
                         "requested_size": size, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                         "is_expandable": False, "frames": frames,
                         "blocks": [{"address": addr, "size": size, "requested_size": size, "state": "active_allocated", "frames": frames},
                                    {"address": addr + size, "size": (1 << 21) - size, "requested_size": 0, "state": "inactive", "frames": []}]})
    path = tmp_path / "compiled.pickle"
    path.write_bytes(pickle.dumps({"segments": segments, "device_traces": [events]}))

    summary = vramscope.load(path).summary()["devices"][0]
    sites = [s["site"] for s in summary["peak"]["top_sites"] + summary["end_top_sites"]]
    assert sites and not any("torchinductor" in s for s in sites), sites
    # Every buffer is owned by this file's line that ran the compiled model.
    assert all(f"{Path(__file__).name}:" in s and s.endswith("in _generated_allocations") for s in sites), sites


NET = """
import sys
import torch
import torch._functorch.config as aot_config
import torch._inductor.config as inductor_config
import vramscope

# Compiled afresh: the source map is this compilation's.
inductor_config.fx_graph_cache = False
aot_config.enable_autograd_cache = False


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(48, 272), torch.nn.Linear(272, 48)

    def forward(self, x):
        h = self.up(x)  # UP
        h = torch.nn.functional.silu(h)  # SILU
        return self.down(h)


model = torch.compile(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(512, 48)
with vramscope.record(sys.argv[1], backend="allocator"):
    for _ in range(3):
        loss = model(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        vramscope.step()
"""


def test_a_compiled_recording_names_the_models_source_lines(tmp_path: Path) -> None:
    """Recorded for real on the CPU (a program of its own, as a user runs
    it): the buffers the generated code allocates get its lines' stacks,
    and the reader puts the source each line computes into them: the sites
    are Net.forward's lines, from the first (compiling) iteration on."""
    from conftest import run_python

    script = tmp_path / "net.py"
    script.write_text(NET)
    path = tmp_path / "compiled.pickle"
    r = run_python([str(script), str(path)], cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    snap = pickle.loads(path.read_bytes())
    generated = snap["vramscope"]["generated"]
    assert generated and all("/c" in g["file"] for g in generated), generated
    lines = NET.splitlines()
    up = next(i + 1 for i, text in enumerate(lines) if "# UP" in text)
    silu = next(i + 1 for i, text in enumerate(lines) if "# SILU" in text)
    summary = vramscope.load(path).summary()["devices"][0]
    sites = {s["site"].rsplit("/", 1)[-1]: s for s in summary["peak"]["top_sites"]}
    assert not any("torchinductor" in s for s in sites), list(sites)
    # The up projection's output and SiLU's (512 x 272 fp32 each), kept for
    # backward, at the lines that compute them.
    assert sites[f"net.py:{up} in forward"]["bytes"] >= 512 * 272 * 4, list(sites)
    assert sites[f"net.py:{silu} in forward"]["bytes"] >= 512 * 272 * 4, list(sites)


def test_a_source_line_that_no_longer_reads_the_same_is_not_named() -> None:
    """Inductor's cache can serve one program the code another compiled
    (same graph): the traced stacks are then the other program's. A frame
    whose file does not read as the trace says is not written."""
    from vramscope._annotate.generated import _frames

    line = inspect.currentframe().f_lineno
    code = "line = inspect.currentframe().f_lineno"  # the line above, as a trace quotes it
    good = f'  File "{__file__}", line {line}, in f\n    {code}\n'
    assert _frames(good) == [{"filename": __file__, "line": line, "name": "f"}]
    # The file edited since (lines moved): the one line that reads so.
    moved = f'  File "{__file__}", line {line - 7}, in f\n    {code}\n'
    assert _frames(moved) == [{"filename": __file__, "line": line, "name": "f"}]
    # A line no longer there, or there several times: not named.
    stale = f'  File "{__file__}", line {line}, in f\n    y = 2  # nowhere in this file\n'
    assert _frames(stale) is None
    twice = f'  File "{__file__}", line {line}, in f\n    torch._dynamo.reset()\n'
    assert _frames(twice) is None
    assert _frames("") is None

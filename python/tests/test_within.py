"""Beneath the user's line, the part of the model that made the memory.

A Hugging Face model's memory is allocated inside the library, so its site
is the user's ``out = model(x)``; the by-site tables, the leaks and the
report name beneath it the model's modules (``model.layers[*].mlp``) and
lines (``modeling_llama.py:NNN in forward``), from the stacks and the
recorder's module map."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import native_module  # noqa: E402

if native_module() is None:
    pytest.skip("vramscope._native is not built", allow_module_level=True)

import vramscope  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
import zoo  # noqa: E402

THIS = Path(__file__).name


def _record_llama(path: Path, keep: bool = False) -> int:
    """Three AdamW steps of the zoo's Llama (4 layers); with ``keep``, six,
    keeping each step's logits (a leak). Returns the line of ``model(x)``."""
    torch.manual_seed(0)
    case = zoo.llama()
    model, (x,), (y,) = case.model, case.inputs, case.targets
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    kept = []
    import inspect

    line = inspect.currentframe().f_lineno + 3
    with vramscope.record(path, backend="allocator"):
        for _ in range(6 if keep else 3):
            out = model(x)
            loss = case.loss_fn(out, y)
            loss.backward()
            if keep:
                kept.append(out.logits)
            opt.step()
            opt.zero_grad()
            vramscope.step()
    return line


def _site(sites, line: int) -> dict:
    for s in sites:
        if s["site"].endswith(f"{THIS}:{line} in _record_llama"):
            return s
    raise AssertionError(f"no site at {THIS}:{line}: {[s['site'] for s in sites]}")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("within") / "llama.pickle"
    return path, _record_llama(path)


def test_a_library_models_memory_is_named_beneath_the_users_line(llama) -> None:
    path, line = llama
    snap = pickle.loads(path.read_bytes())
    rows = {r["path"]: r for r in snap["vramscope"]["modules"]}
    # The recorder's map: repeated blocks grouped, callers past containers.
    assert rows["model.layers[*].mlp"]["class"] == "LlamaMLP"
    assert rows["model.layers[*].mlp"]["caller"] == "model.layers[*]"
    assert rows["model.layers[*]"]["caller"] == "model"
    assert rows[""]["class"] == "LlamaForCausalLM" and rows[""]["caller"] is None
    assert rows["model.layers[*].mlp"]["file"].endswith("modeling_llama.py")

    site = _site(vramscope.load(path).summary()["devices"][0]["peak"]["top_sites"], line)
    within = site["within"]
    assert within and sum(p["bytes"] for p in within) <= site["bytes"]
    assert [p["bytes"] for p in within] == sorted((p["bytes"] for p in within), reverse=True)
    modules = {p["module"] for p in within}
    # The MLP's projections (one of three: the line calls all of them), the
    # LM head, named alone; each at its line in modeling_llama.py.
    assert "model.layers[*].mlp.{gate_proj,up_proj,down_proj}" in modules, modules
    assert "lm_head" in modules, modules
    head = next(p for p in within if p["module"] == "lm_head")
    assert head["class"] == "Linear" and "llama/modeling_llama.py:" in head["line"], head
    # The LM head's logits: batch 4 x 128 tokens x 4096 vocabulary in fp32.
    assert head["bytes"] == 4 * 128 * zoo.VOCAB * 4, head
    assert head["label"].startswith("lm_head (Linear) at transformers/models/llama/modeling_llama.py:"), head

    text = subprocess.run([sys.executable, "-m", "vramscope", "summary", str(path)], capture_output=True, text=True, check=True).stdout
    assert "└ lm_head (Linear) at transformers/models/llama/modeling_llama.py:" in text, text


def test_without_the_module_map_the_lines_remain(llama, tmp_path: Path) -> None:
    """PyTorch's own files have no module map: the parts are the model's
    lines alone, and no module is guessed."""
    path, line = llama
    snap = pickle.loads(path.read_bytes())
    del snap["vramscope"]["modules"]
    bare = tmp_path / "bare.pickle"
    bare.write_bytes(pickle.dumps(snap))
    site = _site(vramscope.load(bare).summary()["devices"][0]["peak"]["top_sites"], line)
    assert site["within"] and all(p["module"] is None for p in site["within"]), site["within"]
    assert any("llama/modeling_llama.py:" in p["line"] for p in site["within"])


def test_a_leak_in_a_library_model_names_the_module_it_comes_from(tmp_path: Path) -> None:
    path = tmp_path / "leak.pickle"
    _record_llama(path, keep=True)
    out = subprocess.run([sys.executable, "-m", "vramscope", "leaks", str(path), "--json"], capture_output=True, text=True, check=True)
    leaks = [f for f in json.loads(out.stdout)["findings"] if f["severity"] == "leak"]
    assert leaks, out.stdout[:2000]
    site = leaks[0]["sites"][0]
    assert site["held_by"] and "kept" in site["held_by"]["text"], site.get("held_by")
    # What is kept is the LM head's logits: 2 MiB a step.
    top = site["within"][0]
    assert top["module"] == "lm_head", site["within"]
    assert top["bytes"] >= 5 * 4 * 128 * zoo.VOCAB * 4, top


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(32, 128), torch.nn.Linear(128, 32)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Stack(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(n))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


class Decoder(Stack):
    """A decoder's own forward (as BART's or Whisper's has): its code
    tells its blocks from the encoder's."""

    def forward(self, x):
        for b in self.blocks:
            x = b(x) + x
        return x


class Seq2Seq(torch.nn.Module):
    def __init__(self, decoder: type) -> None:
        super().__init__()
        self.enc, self.dec = Stack(2), decoder(3)

    def forward(self, x):
        return self.dec(self.enc(x))


def _sited(tmp_path: Path, model: torch.nn.Module) -> dict:
    path = tmp_path / "s2s.pickle"
    with vramscope.record(path, backend="allocator"):
        for _ in range(2):
            model(torch.randn(64, 32)).sum().backward()
            vramscope.step()
    sites = vramscope.load(path).summary()["devices"][0]["peak"]["top_sites"]
    mine = [s for s in sites if f"{THIS}:" in s["site"] and s["function"] == "forward"]
    assert mine, [s["site"] for s in sites]
    return {p["module"]: p for s in mine for p in s.get("within", [])}


def test_one_block_class_in_two_places_is_told_apart(tmp_path: Path) -> None:
    """The encoder and decoder run the same Block code; the decoder's own
    forward around it says whose each frame is. The user's own model has
    its sites in its own code; the parts beneath name the modules."""
    named = _sited(tmp_path, Seq2Seq(Decoder))
    # ReLU's output (64 x 128 fp32, kept for fc2's backward) is made by
    # the Block's own line: three in the decoder, two in the encoder.
    dec, enc = named["dec.blocks[*]"], named["enc.blocks[*]"]
    assert dec["class"] == enc["class"] == "Block", named.keys()
    assert (dec["bytes"], dec["count"]) == (3 * 64 * 128 * 4, 3), dec
    assert (enc["bytes"], enc["count"]) == (2 * 64 * 128 * 4, 2), enc
    # Each encoder block's fc2 output is kept as the next block's input:
    # the linear is one of two in the encoder's blocks.
    assert named["enc.blocks[*].{fc1,fc2}"]["class"] == "Linear", named.keys()
    assert not any(k.startswith("{") for k in named), named.keys()


def test_what_the_stacks_cannot_tell_is_named_as_both(tmp_path: Path) -> None:
    """Encoder and decoder of one class, called on one line: no frame says
    which ran, so the part is named as either (never one of them)."""
    named = _sited(tmp_path, Seq2Seq(Stack))
    assert set(named) == {"{enc,dec}.blocks[*]"}, named.keys()
    assert named["{enc,dec}.blocks[*]"]["class"] == "Block"


def test_a_failed_memory_limit_says_which_module_leaks() -> None:
    """``vramscope.limits``' failure message (the check's result) names,
    beneath the leaking line, the module that made what is kept."""
    from vramscope.testing import failure_message

    fixture = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "recorded" / "llama_kept_logits.pickle.gz"
    out = subprocess.run([sys.executable, "-m", "vramscope", "check", str(fixture), "--no-leaks", "--json"], capture_output=True, text=True)
    result = json.loads(out.stdout)
    assert result["passed"] is False, result["checks"]
    message = failure_message(result, str(fixture))
    assert "made by lm_head (Linear) at transformers/models/llama/modeling_llama.py:" in message, message
    assert "held by `logits`" in message, message


def test_backwards_memory_is_named_by_the_block_it_was_made_for(tmp_path: Path) -> None:
    """Backward's allocations have only the user's ``backward()`` line on
    their stacks. The recorder marks each block's backward (node pre-hooks
    set in its forward), and beneath that line each gradient is named by
    the block whose backward made it: three blocks' weights and biases."""
    torch.manual_seed(0)
    model = Stack(3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 32)
    path = tmp_path / "bw.pickle"
    import inspect

    line = inspect.currentframe().f_lineno + 4
    with vramscope.record(path, backend="allocator"):
        for _ in range(2):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            vramscope.step()
    snap = pickle.loads(path.read_bytes())
    spans = [a for a in snap["external_annotations"] if a["name"].startswith("vramscope.backward#")]
    assert {a["name"] for a in spans} == {f"vramscope.backward#blocks.{i}" for i in range(3)}
    assert len(spans) == 2 * 3 * 2  # start and end, three blocks, two steps
    sites = vramscope.load(path).summary()["devices"][0]["end_top_sites"]
    site = next(s for s in sites if s["site"].endswith(f"{THIS}:{line} in test_backwards_memory_is_named_by_the_block_it_was_made_for"))
    per_block = (32 * 128 + 128 + 128 * 32 + 32) * 4
    assert site["bytes"] == 3 * per_block, site
    assert site["within"] == [
        {"module": "blocks[*]", "class": "Block", "line": None, "backward": True, "label": "blocks[*] (Block) in backward", "bytes": 3 * per_block, "count": 12}
    ], site["within"]
    text = subprocess.run([sys.executable, "-m", "vramscope", "summary", str(path)], capture_output=True, text=True, check=True).stdout
    assert "└ blocks[*] (Block) in backward" in text, text


def test_a_checkpointed_blocks_recomputation_is_sited_at_the_backward_line(tmp_path: Path) -> None:
    """A checkpointed block runs its forward again inside ``loss.backward()``,
    with the recorder's function mode still on the stack around the
    backward call: the recomputation's memory is sited at the user's
    ``backward()`` line (never at a recorder's frame), its modules beneath."""
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(Stack):
        def forward(self, x):
            for b in self.blocks:
                x = checkpoint(b, x, use_reentrant=False)
            return x

    torch.manual_seed(0)
    model = Checkpointed(3)
    x = torch.randn(64, 32)
    path = tmp_path / "ckpt.pickle"
    import inspect

    line = inspect.currentframe().f_lineno + 3
    with vramscope.record(path, backend="allocator"):
        for _ in range(2):
            model(x).sum().backward()
            vramscope.step()
    snap = pickle.loads(path.read_bytes())
    files = {f["filename"] for e in snap["device_traces"][0] for f in e.get("frames", [])}
    assert not any("vramscope/_recording" in f for f in files), sorted(f for f in files if "vramscope" in f)
    d = vramscope.load(path).summary()["devices"][0]
    sites = d["peak"]["top_sites"] + d["end_top_sites"]
    assert not any("vramscope/" in s["site"] for s in sites), [s["site"] for s in sites]
    mine = [s for s in sites if s["site"].endswith(f"{THIS}:{line} in test_a_checkpointed_blocks_recomputation_is_sited_at_the_backward_line")]
    assert mine, [s["site"] for s in sites]
    named = {p["module"] for s in mine for p in s.get("within", [])}
    assert "blocks[*]" in named, named


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_a_checkpointed_blocks_backward_is_named_either_way(tmp_path: Path, reentrant: bool) -> None:
    """Reentrant checkpointing runs each block's forward without grad (no
    node to watch then) and backpropagates through the recomputation's own
    graph inside backward: its nodes name the block's backward. Either way,
    each block's backward is marked in each step and the gradients alive at
    the end (three blocks' weights and biases, and the input's gradient
    where it wants one) are named by it."""
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(Stack):
        def forward(self, x):
            for b in self.blocks:
                x = checkpoint(b, x, use_reentrant=reentrant)
            return x

    torch.manual_seed(0)
    model = Checkpointed(3)
    x = torch.randn(64, 32, requires_grad=reentrant)  # reentrant needs an input that wants a gradient
    path = tmp_path / "ckpt.pickle"
    with vramscope.record(path, backend="allocator"):
        for _ in range(2):
            model(x).sum().backward()
            vramscope.step()
    snap = pickle.loads(path.read_bytes())
    spans = [a for a in snap["external_annotations"] if a["name"].startswith("vramscope.backward#") and a["stage"] == "START"]
    assert sorted(a["name"] for a in spans) == sorted(f"vramscope.backward#blocks.{i}" for i in range(3) for _ in range(2))
    sites = vramscope.load(path).summary()["devices"][0]["end_top_sites"]
    per_block = (32 * 128 + 128 + 128 * 32 + 32) * 4
    within = [p for s in sites for p in s.get("within", []) if p["backward"]]
    grads = 3 * per_block + (x.numel() * 4 if reentrant else 0)
    assert within and within[0]["module"] == "blocks[*]" and within[0]["bytes"] == grads, within


def test_the_head_and_embedding_beside_the_blocks_are_named_in_backward(tmp_path: Path) -> None:
    """Beside the repeated blocks, the modules with parameters of their
    own (an input projection, a head) have their backward named too, and
    what runs after backward (a gradient norm) is no block's."""

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Linear(16, 32)
            self.body = Stack(2)
            self.head = torch.nn.Linear(32, 512)

        def forward(self, x):
            return self.head(self.body(self.embed(x)))

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 16)
    path = tmp_path / "head.pickle"
    import inspect

    line = inspect.currentframe().f_lineno + 4
    with vramscope.record(path, backend="allocator"):
        for _ in range(2):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            vramscope.step()
    sites = vramscope.load(path).summary()["devices"][0]["end_top_sites"]
    site = next(s for s in sites if s["site"].endswith(f"{THIS}:{line} in test_the_head_and_embedding_beside_the_blocks_are_named_in_backward"))
    named = {p["module"]: p for p in site["within"]}
    assert set(named) == {"head", "body.blocks[*]", "embed"}, named
    assert (named["head"]["class"], named["head"]["bytes"]) == ("Linear", (32 * 512 + 512) * 4), named["head"]
    assert named["embed"]["bytes"] == (16 * 32 + 32) * 4, named["embed"]
    assert named["body.blocks[*]"]["bytes"] == 2 * (32 * 128 + 128 + 128 * 32 + 32) * 4
    assert all(p["backward"] for p in site["within"])
    snap = pickle.loads(path.read_bytes())
    spans = [a for a in snap["external_annotations"] if a["name"].startswith("vramscope.backward#")]
    names = {a["name"].split("#", 1)[1] for a in spans}
    assert names == {"head", "body.blocks.0", "body.blocks.1", "embed"}, names
    # The last span (the embedding's: its input has no node) ends with the
    # backward, before the gradient norm's first allocation.
    ends = sorted(a["time_us"] for a in spans if a["name"].endswith("#embed") and a["stage"] == "END")
    clips = [e["time_us"] for e in snap["device_traces"][0] if e["action"] == "alloc" and any("clip_grad" in f["filename"] for f in e.get("frames", []))]
    assert clips and ends[0] <= min(clips), (ends, clips[:3])

"""Formula mode (`vramscope estimate --config`) against trace mode on the
same models: Transformers' GPT-2 small (fp32; as configured, with `gelu_new`
and dropout, and with the exact GELU and no dropout) and Qwen2.5-1.5B (bf16,
grouped-query attention, RMSNorm, SwiGLU), two layers each, batch 2 × 256,
fused attention. The parts both cover agree within 5%: parameters,
gradients, optimizer state, and the activations kept for backward (layers,
the final norm, the logits' log-softmax). The formula leaves out what only a
trace sees: the cuBLAS workspaces, temporaries, and the CUDA allocator's
rounding."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from conftest import native_module  # noqa: E402

if native_module() is None:
    pytest.skip("vramscope._native is not built", allow_module_level=True)

import vramscope  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "crates" / "estimate" / "tests" / "data"
B, S, LAYERS = 2, 256, 2


def _config(name: str, over: Dict[str, Any], tmp_path: Path) -> Path:
    d = json.loads((DATA / name).read_text())
    d.update(over)
    for key in ("num_hidden_layers", "n_layer"):
        if key in d:
            d[key] = LAYERS
    path = tmp_path / name
    path.write_text(json.dumps(d))
    return path


def _formula(config: Path, dtype: str) -> Dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "vramscope", "estimate", "--config", str(config), "--batch", str(B), "--seq", str(S), "--flash-attention", "--dtype", dtype, "--json"],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout)


def _trace(config: Path, tmp_path: Path) -> Dict[str, int]:
    """The trace's parameters, optimizer state and the activations alive
    when backward starts (what the formula's activations count)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(**json.loads(config.read_text()))
    cfg._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(cfg)
    x = torch.empty(B, S, dtype=torch.long, device="meta")

    def loss_fn(out: Any, y: Any) -> Any:
        return torch.nn.functional.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), y.reshape(-1))

    path = tmp_path / "trace.pickle"
    est = vramscope.estimate(model, (x,), torch.optim.AdamW, loss_fn=loss_fn, targets=(x,), steps=2, device="cuda", path=path)
    live: Dict[int, Any] = {}
    for ev in pickle.loads(path.read_bytes())["device_traces"][0]:
        if ev["action"] == "alloc":
            if ev.get("category") == "temporary":
                break
            live[ev["addr"]] = ev
        elif ev["action"] == "free_completed":
            live.pop(ev["addr"], None)
    return {
        "activations": sum(v["size"] for v in live.values() if v["category"] == "activation"),
        "parameters": est.by_category["parameter"],
        "optimizer_state": est.by_category["optimizer_state"],
    }


@pytest.mark.parametrize(
    "name,over,dtype",
    [
        ("gpt2.json", {}, "fp32"),
        ("gpt2.json", {"activation_function": "gelu", "attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0}, "fp32"),
        ("qwen2.5-1.5b.json", {}, "bf16"),
    ],
)
def test_the_formula_agrees_with_the_trace(name: str, over: Dict[str, Any], dtype: str, tmp_path: Path) -> None:
    config = _config(name, over, tmp_path)
    f = _formula(config, dtype)
    t = _trace(config, tmp_path)
    c = f["components"]
    print(name, over, "formula", c, f["activations_structural"], "trace", t)
    # Parameters and AdamW's two states: the trace adds the step counters (512 B each).
    assert abs(c["parameters"] / t["parameters"] - 1) < 0.001
    assert abs(c["optimizer_state"] / t["optimizer_state"] - 1) < 0.01
    err = c["activations"] / t["activations"] - 1
    print(f"activations: formula {c['activations']:,} vs trace {t['activations']:,} ({err:+.2%})")
    assert abs(err) <= 0.05, err

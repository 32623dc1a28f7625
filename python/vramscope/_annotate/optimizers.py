"""What each optimizer of the program keeps: its class, the settings that
decide its state (``momentum``, ``amsgrad``, ``centered``...), and the state
tensors it holds per kind, counted from ``optimizer.state`` itself.

The analysis names the optimizer and its real rule with these figures
("SGD with momentum=0.9 keeps momentum_buffer: one tensor per parameter")
instead of guessing the rule from the size of what the first step made.
"""

from __future__ import annotations

from typing import Any, Dict

# Settings worth naming: those that change what the state holds.
_SETTINGS = ("momentum", "nesterov", "dampening", "amsgrad", "centered", "betas", "weight_decay",
             "foreach", "fused", "capturable", "maximize", "lr", "history_size")


def _plain(v: Any) -> Any:
    """A setting as JSON: numbers, booleans, strings; a tensor's value."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    try:
        return float(v)  # a tensor learning rate
    except Exception:  # noqa: BLE001 - anything else is left out
        return None


def describe(opt: Any) -> Dict[str, Any]:
    """``{"type", "module", "settings", "parameters", "parameter_bytes",
    "parameter_dtypes": {dtype: bytes}, "state": {key: [tensors, bytes]}}``
    of one optimizer, now."""
    import torch

    tensor = torch.Tensor
    params = [p for g in opt.param_groups for p in g.get("params", ())]
    defaults = getattr(opt, "defaults", {}) or {}
    settings = {k: _plain(defaults[k]) for k in _SETTINGS if k in defaults}
    state: Dict[str, list] = {}
    for per_param in list(getattr(opt, "state", {}).values()):
        if not isinstance(per_param, dict):
            continue
        for key, v in per_param.items():
            # L-BFGS keeps its history as lists of tensors (``old_dirs``,
            # ``old_stps``, ``ro``): counted as the tensors in them.
            items = v if isinstance(v, (list, tuple)) else (v,)
            for t in items:
                if isinstance(t, tensor):
                    row = state.setdefault(str(key), [0, 0])
                    row[0] += 1
                    row[1] += t.numel() * t.element_size()
    # Bytes by dtype: whether the weights are already 16-bit.
    dtypes: Dict[str, int] = {}
    for p in params:
        if isinstance(p, tensor):
            k = str(p.dtype).replace("torch.", "")
            dtypes[k] = dtypes.get(k, 0) + p.numel() * p.element_size()
    return {
        "type": type(opt).__name__,
        "module": type(opt).__module__,
        "settings": settings,
        "parameters": len(params),
        "parameter_bytes": sum(dtypes.values()),
        "parameter_dtypes": dtypes,
        "state": state,
    }

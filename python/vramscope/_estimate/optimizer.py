"""The optimizer ``vramscope.estimate`` steps in its trace, from what the
user has at hand: a class, a factory or the instance they train with."""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, Mapping, Optional

# The optimizer the trace steps. Users have at hand a class, a factory or
# the instance they train with. An instance is never called or stepped (that
# would allocate real state and change real parameters): its class is rebuilt
# over the traced parameters with the same param groups, each group's real
# parameters mapped by identity to the traced ones of the same name, and the
# group's options kept, since they decide the state (SGD keeps a momentum
# buffer only with momentum) and the temporaries (foreach or not). Its state
# is not copied: the trace starts from a fresh optimizer, as training does.
_ACCEPTED = (
    "an optimizer class (torch.optim.AdamW), a factory taking the parameters "
    "(lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9)), "
    "an optimizer instance (torch.optim.AdamW(model.parameters(), lr=1e-3)) or None"
)


def traced_optimizer(
    optimizer: Any, model: Any, params: Mapping[str, Any], options: Dict[str, Any], cuda_path: bool = False
) -> Optional[Any]:
    """The optimizer the trace steps, over ``params`` (name -> traced
    parameter, names as ``model.named_parameters()`` gives them); ``None``
    when ``optimizer`` is ``None``.

    ``options`` (the estimate's ``**optimizer_options``) are passed to a
    class or factory; for an instance they override every group's options.
    ``cuda_path``: a class gets ``foreach=True`` where CUDA would default
    to it (an instance's groups say what they say; ``foreach=None`` there
    is resolved by PyTorch on the traced, meta, parameters).

    Raises:
        TypeError: ``optimizer`` is none of the accepted kinds, or the
            instance's class cannot be rebuilt from its param groups.
        ValueError: the instance optimises a tensor that is not a parameter
            of ``model``.
    """
    import torch

    if optimizer is None:
        return None
    if isinstance(optimizer, torch.optim.Optimizer):
        return _rebuild(optimizer, model, params, options)
    if callable(optimizer):  # a class is callable too
        if cuda_path and isinstance(optimizer, type):
            from vramscope._estimate.cuda import cuda_path_options

            options = cuda_path_options(optimizer, options)
        return optimizer([p for p in params.values() if p.requires_grad], **options)
    raise TypeError(f"optimizer={optimizer!r}: expected {_ACCEPTED}")


def _rebuild(instance: Any, model: Any, params: Mapping[str, Any], options: Dict[str, Any]) -> Any:
    """A new optimizer of the instance's class over the traced parameters,
    group by group; the instance itself is only read."""
    name_of = {id(p): name for name, p in model.named_parameters()}
    groups: List[Dict[str, Any]] = []
    for group in instance.param_groups:
        traced = []
        for p in group["params"]:
            name = name_of.get(id(p))
            if name is None:
                shape = tuple(getattr(p, "shape", ()))
                raise ValueError(
                    f"optimizer: the {type(instance).__name__} instance optimises a tensor of shape {shape} "
                    "that is not a parameter of the model given to estimate(); build the optimizer on "
                    "this model's parameters, or pass its class or a factory instead"
                )
            traced.append(params[name])
        # A new dict: the optimizer fills in missing options with setdefault,
        # and the instance's groups must stay as they are.
        groups.append({**{k: v for k, v in group.items() if k != "params"}, **options, "params": traced})
    cls = type(instance)
    try:
        return cls(groups, **_constructor_defaults(cls, instance.defaults, options))
    except TypeError as err:
        raise TypeError(
            f"optimizer: could not build a {cls.__name__} like the instance given ({err}); "
            f"pass a factory instead: optimizer=lambda params: {cls.__name__}(params, ...)"
        ) from err


def _constructor_defaults(cls: type, defaults: Dict[str, Any], options: Dict[str, Any]) -> Dict[str, Any]:
    """The instance's defaults that ``cls(...)`` takes as keyword arguments.

    Every group already carries its options; the defaults go to the
    constructor as well because constructors check their own arguments
    (ranges, flags that exclude each other) and some have no default for
    ``lr``. Only names the signature accepts are passed: ``defaults`` may
    hold entries a subclass fills in itself (AdamW's
    ``decoupled_weight_decay``), which its constructor rejects.
    """
    from torch.optim.optimizer import required  # the "no default" marker of older optimizers

    merged = {**defaults, **options}
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):  # no signature to read (a C extension): groups carry the options
        return {}
    accepted = sig.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        names = set(merged)
    else:
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        names = {n for n, p in accepted.items() if p.kind in kinds and n not in ("self", "params")}
    return {k: v for k, v in merged.items() if k in names and v is not required}

"""L-BFGS in ``vramscope.estimate``: its step, traced as what it allocates.

``torch.optim.LBFGS.step(closure)`` evaluates the closure (a forward and
a backward) up to ``max_iter`` times per step and decides with the data
what to do next (``if ys > 1e-10``, the tolerances), which a trace without
data cannot follow: ``opt.step()`` without a closure raised a ``TypeError``
from deep inside the trace. Its memory does not depend on those decisions
once its history is full, which is where a long run spends its time and
peaks: ``history_size`` pairs of vectors the size of all parameters
(``old_dirs``, ``old_stps``), the direction ``d`` and ``prev_flat_grad``,
kept from one evaluation to the next, with the last step's direction
(``state["d"]``, while a step's own is bound), and the joined gradient and
``q``, bound through the next evaluation's forward and backward; and in
each evaluation's update
(``torch/optim/lbfgs.py``, ``step``), the joined gradient (``flat_grad``),
the new pair made before the oldest is dropped, ``q`` and the new
direction made while the old one is still bound.

So the first traced step makes the full history at once, and each step
then traces one evaluation's update in that order; the forward and
backward are the estimate's own (one evaluation). Checked against
``python/tests/scripts/optimizer_fit.py lbfgs`` run for real
(``python/tests/test_optimizers.py``).
"""

from __future__ import annotations

from typing import Any, Dict, List


def steps_with_closure(opt: Any) -> bool:
    """Whether the optimizer's ``step`` needs a closure (L-BFGS)."""
    import torch

    return isinstance(opt, torch.optim.LBFGS)


def note(opt: Any) -> str:
    group = opt.param_groups[0]
    size = group.get("history_size", 100)
    search = group.get("line_search_fn")
    extra = (
        f"; its line search ({search}) copies the joined gradient a few more times, which is not traced"
        if search
        else ""
    )
    return (
        f"L-BFGS: its step is traced as its history full ({size} pairs of vectors the size of all parameters, "
        "as from its history_size-th evaluation on) and one evaluation's update; the closure's forward and backward "
        f"are traced once per step (L-BFGS runs them up to max_iter times, each the same){extra}"
    )


class LbfgsTrace:
    """What the traced L-BFGS keeps from one step to the next."""

    def __init__(self, opt: Any) -> None:
        self.opt = opt
        self.history: List[Any] = []
        self.kept: Dict[str, Any] = {}
        self.flat_grad: Any = None
        self.q: Any = None

    def step(self, params: List[Any]) -> List[Any]:
        """One evaluation's update, with the history made full first; the
        tensors L-BFGS keeps, for their category."""
        import torch

        size = int(self.opt.param_groups[0].get("history_size", 100))
        with torch.no_grad():
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            # _gather_flat_grad, bound again: the previous evaluation's
            # joined gradient stays bound through this one's forward and
            # backward, and goes once the new one is made.
            flat_grad = torch.cat([g.reshape(-1) for g in grads])
            self.flat_grad = flat_grad
            if not self.kept:
                # The state the history_size-th evaluation finds: the pairs,
                # the direction and the previous gradient.
                self.kept["d"] = flat_grad.neg()
                self.kept["prev_flat_grad"] = flat_grad.clone()
                for _ in range(size):
                    self.history.append((torch.empty_like(flat_grad), torch.empty_like(flat_grad)))
            y = flat_grad.sub(self.kept["prev_flat_grad"])
            s = self.kept["d"].mul(0.5)
            # The new pair is made before the oldest goes.
            self.history.pop(0)
            self.history.append((y, s))
            del y, s
            # q stays bound through the next evaluation, as in step's loop.
            self.q = flat_grad.neg()
            d = torch.mul(self.q, 1.0)  # d = r = q * H_diag, the old d still bound
            if int(self.opt.param_groups[0].get("max_iter", 20)) > 1:
                # state["d"] keeps the last step's direction through every
                # evaluation of the next step but its first.
                self.kept["d_state"] = self.kept["d"]
            self.kept["d"] = d
            del d
            self.kept["prev_flat_grad"].copy_(flat_grad)
            # _add_grad: each parameter updated in place from a view of d.
            offset = 0
            for p in params:
                n = p.numel()
                p.add_(self.kept["d"][offset : offset + n].view_as(p), alpha=0.5)
                offset += n
            del flat_grad
        return [t for pair in self.history for t in pair] + list(self.kept.values())

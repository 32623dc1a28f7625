"""PyTorch's own RNN cells as they run on the CPU.

Where oneDNN does not take an RNN (``nn.GRU``, ``nn.RNN``, an LSTM with
projections or in float64, oneDNN turned off: vramscope._estimate.cpu_rnn),
``at::gru``/``at::rnn_tanh``/``at::rnn_relu``/``at::lstm`` run the cells of
aten/src/ATen/native/RNN.cpp. Those cells take another path on CPU tensors
than on any other device (``FullLayer`` and ``FullBidirectionalLayer``
check ``input.device().is_cpu()``): the input's projection is made for the
whole sequence in one ``linear`` and unbound into steps (``pre_compute_input``),
where elsewhere each step projects its own input. A meta trace takes the
second path and keeps a projection per step for backward: 5-15% above a
real GRU's or projected LSTM's step. :func:`native_rnn` is the CPU's path,
line for line, in-place operations included; it runs on meta tensors like
the rest of the trace.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple


class _Params:
    """One direction of one layer (``CellParams``): ``w_ih``, ``w_hh``,
    the biases where the RNN has them, ``w_hr`` for projections."""

    def __init__(self, ws: Sequence[Any], has_biases: bool, has_proj: bool) -> None:
        it = iter(ws)
        self.w_ih, self.w_hh = next(it), next(it)
        self.b_ih = next(it) if has_biases else None
        self.b_hh = next(it) if has_biases else None
        self.w_hr = next(it) if has_proj else None

    def linear_ih(self, x: Any) -> Any:
        import torch.nn.functional as F

        return F.linear(x, self.w_ih, self.b_ih)

    def linear_hh(self, h: Any) -> Any:
        import torch.nn.functional as F

        return F.linear(h, self.w_hh, self.b_hh)

    def matmul_hr(self, h: Any) -> Any:
        return h if self.w_hr is None else h.matmul(self.w_hr.t())


def _lstm_cell(x: Any, hidden: Tuple[Any, Any], p: _Params) -> Tuple[Any, Any]:
    hx, cx = hidden
    gates = p.linear_hh(hx).add_(x)
    i, f, g, o = gates.unsafe_chunk(4, 1)
    i, f, g, o = i.sigmoid_(), f.sigmoid_(), g.tanh_(), o.sigmoid_()
    cy = (f * cx).add_(i * g)
    hy = o * cy.tanh()
    return p.matmul_hr(hy), cy


def _gru_cell(x: Any, hidden: Any, p: _Params) -> Any:
    ig = x.unsafe_chunk(3, 1)
    hg = p.linear_hh(hidden).unsafe_chunk(3, 1)
    reset = hg[0].add_(ig[0]).sigmoid_()
    update = hg[1].add_(ig[1]).sigmoid_()
    new = ig[2].add(hg[2].mul_(reset)).tanh_()
    return (hidden - new).mul_(update).add_(new)


def _simple_cell(relu: bool) -> Any:
    def cell(x: Any, hidden: Any, p: _Params) -> Any:
        pre = p.linear_hh(hidden).add_(x)
        return pre.relu_() if relu else pre.tanh_()

    return cell


CELLS = {"lstm": _lstm_cell, "gru": _gru_cell, "rnn_tanh": _simple_cell(False), "rnn_relu": _simple_cell(True)}


def _layer(cell: Any, steps: Sequence[Any], hidden: Any, p: _Params, lstm: bool) -> Tuple[List[Any], Any]:
    outputs = []
    for x in steps:
        hidden = cell(x, hidden, p)
        outputs.append(hidden[0] if lstm else hidden)
    return outputs, hidden


def native_rnn(kind: str, x: Any, hx: Any, params: Sequence[Any], has_biases: bool, num_layers: int, dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> Tuple[Any, ...]:
    """``at::{kind}`` on CPU tensors, without oneDNN: ``(output, h_n)``, or
    ``(output, h_n, c_n)`` for ``lstm``."""
    import torch

    lstm = kind == "lstm"
    cell = CELLS[kind]
    has_proj = lstm and hx[0].shape[-1] != hx[1].shape[-1]
    per = 2 + (2 if has_biases else 0) + (1 if has_proj else 0)
    directions = 2 if bidirectional else 1
    ps = [_Params(params[i * per:(i + 1) * per], has_biases, has_proj) for i in range(num_layers * directions)]
    if lstm:
        hiddens: List[Any] = list(zip(hx[0].unbind(0), hx[1].unbind(0)))
    else:
        hiddens = list(hx.unbind(0))
    layer_input = x.transpose(0, 1) if batch_first else x
    finals: List[Any] = []
    for layer in range(num_layers):
        # Locals live as long as in C++: a direction's projection until the
        # next is made (or the layer returns), the steps' outputs until the
        # layer returns.
        fw = ps[layer * directions]
        fw_steps = fw.linear_ih(layer_input).unbind(0)
        fw_outs, h = _layer(cell, fw_steps, hiddens[layer * directions], fw, lstm)
        fw_out = torch.stack(fw_outs, 0)
        finals.append(h)
        if bidirectional:
            bw = ps[layer * directions + 1]
            bw_steps = list(reversed(bw.linear_ih(layer_input).unbind(0)))
            del fw_steps
            bw_outs, h = _layer(cell, bw_steps, hiddens[layer * directions + 1], bw, lstm)
            bw_outs.reverse()
            rev = torch.stack(bw_outs, 0)
            finals.append(h)
            layer_output = torch.cat([fw_out, rev], fw_out.dim() - 1)
            del bw_steps, bw_outs, rev
        else:
            layer_output = fw_out
            del fw_steps
        del fw_outs, fw_out, h
        layer_input = layer_output
        del layer_output
        if dropout != 0 and train and layer < num_layers - 1:
            layer_input = torch.dropout(layer_input, dropout, True)
    output = layer_input.transpose(0, 1) if batch_first else layer_input
    if lstm:
        return output, torch.stack([h for h, _ in finals], 0), torch.stack([c for _, c in finals], 0)
    return output, torch.stack(finals, 0)


def split_args(kind: str, args: Sequence[Any]) -> Optional[Tuple[Any, ...]]:
    """``_VF.{kind}``'s arguments for a padded (not packed) sequence, or
    None for a packed one (``batch_sizes`` second)."""
    import torch

    if len(args) != 9:
        return None
    hx = args[1]
    if kind == "lstm" and not isinstance(hx, (list, tuple)):
        return None
    if kind != "lstm" and not (isinstance(hx, torch.Tensor) and isinstance(args[2], (list, tuple))):
        return None
    return tuple(args)

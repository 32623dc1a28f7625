"""``nn.LSTM`` on the CPU as the CPU build runs it: oneDNN's RNN kernel.

``at::lstm`` (aten/src/ATen/native/RNN.cpp) hands an LSTM on CPU tensors to
oneDNN wherever ``use_mkldnn`` holds: float32 or bfloat16 (float16 only
without grad), oneDNN enabled, no projections, a non-empty input. It then
runs ``mkldnn_rnn`` (native/mkldnn/RNN.cpp): the input made time-major and
contiguous, one ``mkldnn_rnn_layer`` per layer and direction, the final
states stacked. On the meta device ``use_mkldnn`` is false and ``at::lstm``
runs PyTorch's own cells instead, which keep the four gates of every step
for backward and none of what oneDNN keeps: traced that way an LSTM's
training step was 10-12% below the real one. :func:`rnns_as_on_cpu` makes
``_VF.lstm`` take the same path as the CPU (``mkldnn_rnn_layer`` has meta
kernels, forward and backward, and its own autograd formula), and
:class:`OneDnnLstm` gives what each call allocates beyond its outputs,
from oneDNN 3's rules (src/cpu/rnn/rnn_utils.cpp and .hpp):

* the **workspace** kept for backward (training only): the gates of every
  step, the hidden states, the cell states and room for their gradients,
  each region page-aligned, leading dimensions from ``get_good_ld`` (a
  multiple of 64 bytes, one more 64 bytes where it would be a multiple of
  256 elements);
* the **weights** reordered into the layout the kernel asks for, on every
  call: ``ldigo`` with good strides for float32 training (the gemm kernels);
  gates blocked by 32 outputs on AVX-512, 16 on AVX2 (``ldgOi32o``,
  ``ldgOI32o2i`` for 16-bit) for the brgemm kernels (16-bit types, float32
  inference); in
  backward also ``ldgoi`` (``ldgIO32i2o``) and the weights' gradients in
  ``ldigo`` with good strides;
* the **scratchpad**: the gates of one step (of every step where the gemm
  kernels merge them), the hidden state and its gradient, page-aligned, plus
  the scratchpad registry's alignment and pointer tables (4,664 bytes for
  the gemm kernels, at most 5,112 for brgemm);
* around the kernel: the two biases summed, in backward the gradient made
  contiguous, zero gradients for unused states, fp32 copies of 16-bit
  gradients, and the second bias's gradient cloned.

Checked allocation by allocation against oneDNN 3.13 in PyTorch 2.15 on
x86 with AVX-512 and no AMX (``python/tests/test_cpu_rnn.py``: sequence lengths,
batches, input and hidden sizes that are and are not multiples of 16 and
256, float32 and bfloat16, training and inference) and, float32, on AVX2.
Where oneDNN has no 16-bit LSTM (AVX2 without AVX-512's bf16), PyTorch
runs a 16-bit LSTM's own cells, but one cast by the CPU's autocast still
goes to oneDNN and raises ("could not create a primitive descriptor"):
the estimate says so (:data:`RAISES`). The one figure that is
a fit and not oneDNN's rule: the 16-bit backward's scratchpad (brgemm's own
buffers), within 15% of the measured (25 KiB at a batch of 130).

Where the rules were not checked (16-bit kernels on a CPU with AMX, whose
brgemm kernels block and buffer otherwise; float32 inference but on
AVX-512 and AVX2), the call is run once on this CPU at the same shapes and
its scratchpad is what it took beyond the buffers above
(vramscope._estimate.cpu_measured); where it cannot be run, the estimate
says the figure may differ.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Sequence, Tuple

PAGE = 4096
# ideep's LSTM mode (ideep::rnn_kind::LSTM) as mkldnn_rnn_layer reads it.
LSTM_MODE = 2
# The scratchpad registry beyond the RNN's own regions: the page the
# regions are aligned to, and its pointer tables (measured per kernel kind).
REGISTRY = {"gemm": PAGE + 568, "brgemm": PAGE + 1016}
BRGEMM_BACKWARD = 17_848
RAISES = (
    "nn.LSTM under the CPU's autocast ({dtype}) raises on this CPU ({capability}): oneDNN has no {dtype} LSTM "
    "kernel here (RuntimeError: could not create a primitive descriptor for the LSTM forward propagation "
    "primitive); the figure is what it takes on a CPU that has one (AVX-512 with bf16). On this CPU keep the "
    "LSTM in float32: call it inside torch.autocast('cpu', enabled=False) with its input made float32"
)


def _up(x: int, m: int) -> int:
    return -(-x // m) * m


def good_ld(dim: int, size: int) -> int:
    """``rnn_utils::get_good_ld``: a leading dimension of whole 64-byte
    lines that is not a multiple of 256 elements (4K aliasing)."""
    per_line = 64 // size
    ld = _up(dim, per_line)
    return ld + per_line if ld % 256 == 0 else ld


def regions(sizes: Sequence[int]) -> int:
    """Bytes of regions laid out as ``set_offsets`` lays them: each starts
    on a page, and the whole ends on one."""
    end = 0
    for s in sizes:
        end = _up(end, PAGE) + s
    return _up(end, PAGE)


@dataclass(frozen=True)
class OneDnnLstm:
    """One ``mkldnn_rnn_layer`` call: ``steps`` × ``batch`` inputs of
    ``inputs`` features, ``hidden`` units, elements of ``size`` bytes
    (4 float32, 2 bfloat16 or float16)."""

    steps: int
    batch: int
    inputs: int
    hidden: int
    size: int
    training: bool
    avx512: bool = True

    @property
    def kernel(self) -> str:
        """``brgemm`` or ``gemm``: which oneDNN RNN implementation runs
        (float32 inference takes brgemm on AVX2 as on AVX-512)."""
        if self.size != 4:
            return "brgemm"
        return "gemm" if self.training else "brgemm"

    @property
    def block(self) -> int:
        """The brgemm kernels' block of gate outputs: a vector register's
        floats times two (32 on AVX-512, 16 on AVX2)."""
        return 32 if self.avx512 else 16

    def _states(self) -> List[int]:
        """The workspace's regions (training), in ``set_offsets``' order."""
        t, n, i, h, f = self.steps, self.batch, self.inputs, self.hidden, self.size
        s = 2 * (t + 1) * n  # (layers + 1) × (steps + 1) × batch
        wide = max(i, h)
        states = s * good_ld(wide, f) * f
        cells = s * h * f
        if not self.training:
            return [states, cells]
        gates = t * n * good_ld(4 * h, f) * f
        ht = t * n * good_ld(h, f) * f
        diff = s * good_ld(wide, 4) * 4
        return [gates, ht, states, cells, diff, diff, s * h * 4]

    def workspace(self) -> int:
        """The workspace ``mkldnn_rnn_layer`` returns and backward reads."""
        return regions(self._states()) if self.training else 0

    def scratchpad(self, backward: bool = False) -> int:
        """The scratchpad oneDNN asks for during the call."""
        t, n, h = self.steps, self.batch, self.hidden
        if backward and self.kernel == "brgemm":
            # The brgemm backward's own buffers (transposed inputs, blocked
            # gates) are not the regions above: a fit on measured calls, per
            # batch row two bytes an input and four a (16-bit) gate row,
            # and its largest constant (measured 9,656-17,848 bytes).
            return n * (2 * self.inputs + 4 * good_ld(4 * h, 2)) + BRGEMM_BACKWARD
        merged = self.kernel == "gemm" and (backward or n < 128)
        gates = (t if merged else 1) * n * good_ld(4 * h, 4) * 4
        ht_size = self.size if self.kernel == "brgemm" else 4
        parts = [] if self.training else self._states()
        parts += [gates, n * good_ld(h, ht_size) * ht_size]
        if self.training:
            parts.append(n * good_ld(h, 4) * 4)
        return regions(parts) + REGISTRY[self.kernel]

    def weights(self) -> List[int]:
        """The forward's reorders of ``weight_ih`` and ``weight_hh``."""
        i, h, f = self.inputs, self.hidden, self.size
        if self.kernel == "gemm":
            ld = good_ld(4 * h, 4)
            return [i * ld * 4, h * ld * 4]
        pad = 2 if f == 2 else 1
        gates = 4 * _up(h, self.block)
        return [_up(i, pad) * gates * f, _up(h, pad) * gates * f]

    def backward_weights(self) -> List[int]:
        """Backward's reorders: the weights (where their layout differs from
        PyTorch's), then the weights' and the bias's gradients."""
        i, h, f = self.inputs, self.hidden, self.size
        g = 4 * h
        out: List[int] = []
        if self.kernel == "gemm":
            out += [g * good_ld(k, 4) * 4 for k in (i, h) if good_ld(k, 4) != k]
        else:
            out += [4 * _up(h, 2) * _up(k, 32) * f for k in (i, h)]
        ld = good_ld(g, 4)
        return out + [i * ld * 4, h * ld * 4, g * 4]


def applies(x: Any, hx: Sequence[Any], params: Sequence[Any]) -> bool:
    """``use_mkldnn`` and the checks ``at::lstm`` makes before oneDNN."""
    import torch

    if not (torch.backends.mkldnn.is_available() and torch._C._get_mkldnn_enabled()):
        return False
    if len(hx) != 2 or x.numel() == 0 or hx[0].shape[-1] != hx[1].shape[-1]:
        return False  # projections run PyTorch's own cells
    if x.dtype == torch.float32:
        return True
    if x.dtype == torch.float16 and torch.is_grad_enabled():
        return False
    return onednn_16bit(x.dtype)


def onednn_16bit(dtype: Any) -> bool:
    """Whether oneDNN has this 16-bit type's kernels on this CPU
    (``mkldnn_bf16_device_check``, ``mkldnn_fp16_device_check``)."""
    import torch

    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if dtype == torch.float16:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return dtype == torch.float32


def _mkldnn_rnn(x: Any, hx: Sequence[Any], params: Sequence[Any], has_biases: bool, num_layers: int, dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> Tuple[Any, Any, Any]:
    """``mkldnn_rnn``, line for line, with ``mkldnn_rnn_layer`` on meta."""
    import torch

    if batch_first:
        x = x.transpose(0, 1)
    x = x.contiguous()
    h0, c0 = hx[0].contiguous(), hx[1].contiguous()
    stride = 4 if has_biases else 2
    directions = 2 if bidirectional else 1
    hidden = int(h0.shape[2])
    hy: List[Any] = []
    cy: List[Any] = []
    layer_input = x
    # Each direction's output lives until the next layer's replaces it
    # (``layer_output[direction] = ...``), not until the next layer starts.
    outputs: List[Any] = [None] * directions
    for layer in range(num_layers):
        for d in range(directions):
            index = layer * directions + d
            w = params[index * stride:(index + 1) * stride]
            b_ih = w[2] if has_biases else torch.zeros(w[0].shape, dtype=w[0].dtype, device=w[0].device)
            b_hh = w[3] if has_biases else torch.zeros(w[1].shape, dtype=w[1].dtype, device=w[1].device)
            out = torch.mkldnn_rnn_layer(
                layer_input, w[0], w[1], b_ih, b_hh, h0[index], c0[index], d > 0, [], LSTM_MODE, hidden,
                num_layers, has_biases, bidirectional, batch_first, train,
            )
            outputs[d] = out[0]
            hy.append(out[1])
            cy.append(out[2])
            del out
        layer_input = outputs[0] if directions == 1 else torch.cat(outputs, -1)
        if dropout != 0 and train and layer < num_layers - 1:
            layer_input = torch.dropout(layer_input, dropout, True)
    output = layer_input.transpose(0, 1) if batch_first else layer_input
    return output, torch.stack(hy, 0), torch.stack(cy, 0)


@contextlib.contextmanager
def rnns_as_on_cpu(cpu: Any) -> Iterator[None]:
    """``_VF.lstm``, ``_VF.gru``, ``_VF.rnn_tanh`` and ``_VF.rnn_relu``
    (what ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` call) on the CPU's paths:
    oneDNN's for an LSTM it takes, after the CPU autocast's cast (``lstm``
    is on its lower-precision list); PyTorch's cells as the CPU runs them
    otherwise (vramscope._estimate.cpu_rnn_native). A packed sequence
    keeps the meta device's path."""
    import torch

    from vramscope._estimate.cpu_rnn_native import native_rnn, split_args

    vf = torch._VF
    kinds = ("lstm", "gru", "rnn_tanh", "rnn_relu")
    had = {k: vars(vf)[k] for k in kinds if k in vars(vf)}
    originals = {k: getattr(vf, k) for k in kinds}

    def patched(kind: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            split = None if kwargs else split_args(kind, args)
            if split is None:
                return originals[kind](*args, **kwargs)
            x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first = split
            rest = (has_biases, num_layers, dropout, train, bidirectional, batch_first)
            if kind != "lstm":
                return native_rnn(kind, x, hx, params, *rest)
            ac = cpu.autocast
            low = ac.lower() if ac is not None else None
            if low is not None and "lstm" in ac.lists.lower:
                # What runs inside (transpose, cat, stack, dropout) is on
                # none of the CPU autocast's lists but ``cat``'s and
                # ``stack``'s promotion, which leaves one dtype as it is.
                x = ac.cast_one(x, low)
                hx = [ac.cast_one(t, low) for t in hx]
                params = [ac.cast_one(t, low) for t in params]
                if not onednn_16bit(x.dtype):
                    # The CPU autocast's LSTM goes to oneDNN without
                    # use_mkldnn's device check (measured on AVX2).
                    cpu.note("lstm", RAISES.format(dtype=str(x.dtype).replace("torch.", ""), capability=cpu.capability))
                    cpu.lstm_raises = True
                    cpu.lstm_calls += 1
                    return _mkldnn_rnn(x, hx, params, *rest)
            if applies(x, hx, params):
                cpu.lstm_calls += 1
                return _mkldnn_rnn(x, hx, params, *rest)
            return native_rnn("lstm", x, hx, params, *rest)

        return call

    for k in kinds:
        setattr(vf, k, patched(k))
    try:
        yield
    finally:
        for k in kinds:
            if k in had:
                setattr(vf, k, had[k])
            else:
                delattr(vf, k)


def forward_call(layer: OneDnnLstm, has_biases: bool, measured: Optional[int] = None) -> List[int]:
    """What ``mkldnn_rnn_layer`` allocates and frees inside itself, in order
    (see ``Kernels._scratch``): the summed bias, the weights' reorders, the
    scratchpad. ``measured``: how far the real call rose above its results
    on this CPU (cpu_measured); the scratchpad is the rest of it."""
    f, g = layer.size, 4 * layer.hidden
    before = [g * f, *layer.weights()]
    return before + [_rest(measured, before, layer.scratchpad())]


def _rest(measured: Optional[int], before: List[int], modelled: int) -> int:
    """The scratchpad: what the call measured beyond the buffers modelled
    before it (all alive at once), or the model's where nothing was measured
    or the measure is not above those buffers."""
    if measured is None or measured <= sum(before):
        return modelled
    return measured - sum(before)


def backward_call(layer: OneDnnLstm, grad_contiguous: bool, grad_hy: bool, grad_cy: bool, measured: Optional[int] = None) -> List[int]:
    """What ``mkldnn_rnn_layer_backward`` allocates and frees inside itself:
    the gradient made contiguous, zeros for the states' missing gradients,
    the summed bias, fp32 copies of 16-bit gradients, oneDNN's reorders and
    scratchpad (the rest of ``measured``, as in :func:`forward_call`)."""
    t, n, h, f = layer.steps, layer.batch, layer.hidden, layer.size
    steps: List[int] = []
    if not grad_contiguous:
        steps.append(t * n * h * f)
    steps += [n * h * f for present in (grad_hy, grad_cy) if not present]
    steps.append(4 * h * f)
    if f != 4:
        steps += [t * n * h * 4, n * h * 4, n * h * 4]
    before = steps + layer.backward_weights()
    return before + [_rest(measured, before, layer.scratchpad(backward=True))]


def layer_of(args: Sequence[Any], training: bool, avx512: bool) -> Optional[OneDnnLstm]:
    """The call's sizes from ``mkldnn_rnn_layer``'s (or its backward's)
    arguments: the input (time-major), ``weight0`` (4·hidden × inputs)."""
    x, w0 = args[0], args[1]
    if x.dim() != 3 or w0.dim() != 2:
        return None
    return OneDnnLstm(
        steps=int(x.shape[0]), batch=int(x.shape[1]), inputs=int(x.shape[2]), hidden=int(w0.shape[0]) // 4,
        size=x.element_size(), training=training, avx512=avx512,
    )

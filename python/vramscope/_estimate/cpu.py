"""What the CPU build would run, traced on the meta device.

On ``meta`` ``scaled_dot_product_attention`` has no kernel choice to make
and runs the math backend, which keeps the B·H·L·S attention weights (and,
for grouped-query attention, copies of the keys and values repeated to every
head). On the CPU, ``select_sdp_backend_cpp``
(aten/src/ATen/native/transformers/sdp_utils_cpp.cpp) takes the flash
kernel wherever its checks pass: flash enabled, no dropout, 4-D inputs of
one head size with the last dimension contiguous, a 2-D or 4-D mask that
broadcasts, grouped or single key/value heads allowed, and a float, double,
bfloat16 or half dtype. ``F.scaled_dot_product_attention`` is replaced
during the trace by the kernel the CPU would run:
``_scaled_dot_product_flash_attention_for_cpu`` has a meta implementation
(its output and fp32 ``logsumexp``), and its autograd formula gives the
backward, whose meta implementation gives the three gradients.

:class:`Cpu` adds what those kernels allocate inside themselves
(aten/src/ATen/native/cpu/FlashAttentionKernel.cpp): per thread, blocks of
``qSplit × kvSplit`` in the accumulation type (fp32), and for bfloat16 and
half the same blocks again in the input's type, freed when the kernel
returns; backward also copies a gradient of the output that is not
contiguous, and each thread's ``dsum`` row. The block sizes follow the
query length (32 rows below 192, 64 below 768, else 256; 512 keys at most).

:class:`Cpu` also adds oneDNN's reorders around a float32 convolution,
forward and backward (``_conv_forward``, ``_conv_backward``: the blocked
copies of the input, weights, output and gradients), and the unfolded
input of PyTorch's own ``slow_conv2d`` where oneDNN declines.
Other convolutions (16-bit, channels-last, grouped) and 16-bit matmuls
get what they make inside themselves measured on this machine
(vramscope._estimate.cpu_measured); a convolution of a channels-last input
returns, as on the CPU, a channels-last output (``meta`` makes it
contiguous).

``torch.utils.checkpoint`` keeps the CPU's random number generator state
(``torch.get_rng_state()``, a 5,056-byte tensor of c10's CPU allocator) for
every checkpointed call until its recomputation: on the CPU that is the
device's memory, so :func:`rng_state_as_on_cpu` traces it.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional, Tuple

from vramscope._estimate.cpu_measured import NotMeasured, is_16bit_matmul, scratch
from vramscope._estimate.kernel_scratch import Kernels, op_name

_FORWARD = "_scaled_dot_product_flash_attention_for_cpu"
_BACKWARD = "_scaled_dot_product_flash_attention_for_cpu_backward"


def _splits(q_len: int, kv_len: int) -> Tuple[int, int]:
    """(qSplitSize, kvSplitSize) as flash_attention_kernel_impl picks them."""
    q_split = 256 if q_len >= 768 else 64 if q_len >= 192 else 32
    return min(q_split, q_len), min(512, kv_len)


def forward_scratch(q_len: int, kv_len: int, head: int, dtype: Any, threads: int) -> list:
    """``cpu_flash_attention``'s per-thread buffers: ``buf`` (fp32: the
    scores block, the running max and sum, the output block) and
    ``buf_reduced`` (the scores block in the input's type, for half types)."""
    import torch

    qs, kvs = _splits(q_len, kv_len)
    steps = [threads * (qs * kvs + 2 * qs + qs * head) * 4]
    if dtype in (torch.bfloat16, torch.float16):
        steps.append(threads * qs * kvs * dtype.itemsize)
    return steps


def backward_scratch(b: int, h: int, q_len: int, kv_len: int, dtype: Any, threads: int) -> list:
    """``cpu_flash_attention_backward``'s: ``buf`` (fp32 attention and its
    gradient, one block each per thread), ``buf_reduced`` (the same in the
    input's type, for half types) and one ``dsum`` row per thread that runs
    (``parallel_for`` over B·H)."""
    import torch

    qs, kvs = _splits(q_len, kv_len)
    steps = [threads * 2 * qs * kvs * 4]
    if dtype in (torch.bfloat16, torch.float16):
        steps.append(threads * 2 * qs * kvs * dtype.itemsize)
    steps += [qs * 4] * min(threads, b * h)
    return steps


def flash_applies(q: Any, k: Any, v: Any, mask: Any, dropout_p: float, enable_gqa: bool) -> bool:
    """Whether the CPU would run the flash kernel for these inputs."""
    import torch

    if not torch.backends.cuda.flash_sdp_enabled():  # the one flag for both devices
        return False
    if dropout_p > 0.0 or not (q.dim() == k.dim() == v.dim() == 4):
        return False
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        return False
    hq, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
    if not (hq == hk == hv):
        grouped = enable_gqa and hk == hv and hk > 0 and hq % hk == 0
        if not (grouped or (hk == 1 and hv == 1)):
            return False
    if mask is not None:
        if mask.requires_grad or mask.dim() not in (2, 4):
            return False
        ok = lambda m, t: m == t or m == 1  # noqa: E731
        if not (ok(mask.shape[-2], q.shape[-2]) and ok(mask.shape[-1], k.shape[-2])):
            return False
        if mask.dim() == 4 and not (ok(mask.shape[0], q.shape[0]) and ok(mask.shape[1], hq)):
            return False
    if not (q.shape[-1] == k.shape[-1] == v.shape[-1]):
        return False
    if min(q.shape[-2], k.shape[-2]) == 0:
        return False
    if not (q.stride(-1) == k.stride(-1) == v.stride(-1) == 1):
        return False
    return q.dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _channels_last(t: Any) -> bool:
    """``suggest_memory_format() == ChannelsLast`` for a 4-D tensor: its
    strides in channels-last order (channels innermost), a single channel
    being contiguous either way."""
    if t.dim() != 4:
        return False
    s = t.stride()
    return s[1] < s[3] <= s[2] <= s[0]


RNN_UNCHECKED = (
    "nn.LSTM: oneDNN's RNN kernel is modelled as it runs on x86 with AVX-512 (checked there to the allocation); "
    "on this CPU ({capability}) {what} may differ"
)


def _has_amx() -> bool:
    """Whether oneDNN's bfloat16 kernels can use AMX here (its tiles and
    their bf16 instructions): they choose other blockings and buffers."""
    import torch

    caps = getattr(torch.cpu, "get_capabilities", None)
    if caps is None:
        return False
    try:
        got = caps()
    except Exception:  # an old or odd build: AMX is not what it reports
        return False
    return bool(got.get("amx_tile") and got.get("amx_bf16"))


class Cpu(Kernels):
    """The CPU's kernel choices and scratch a trace adds."""

    def __init__(self) -> None:
        super().__init__()
        import torch

        self.threads = int(torch.get_num_threads())
        self.sdp: Dict[str, int] = {}  # backend -> calls
        self.capability = str(torch.backends.cpu.get_cpu_capability())
        self.avx512 = self.capability.startswith("AVX512")
        self.amx = _has_amx()
        self.lstm_calls = 0  # nn.LSTM calls that took oneDNN's path (cpu_rnn.rnns_as_on_cpu)
        self.lstm_raises = False  # one of them raises on this CPU (cpu_rnn.RAISES says so)
        self.conv_modelled = 0  # convolutions whose oneDNN reorders were traced

    def before(self, func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], rec: Any) -> Optional[Any]:
        name = op_name(func)
        if name == "mkldnn_rnn_layer":
            return self._lstm_forward(func, args, kwargs, rec)
        if name == "mkldnn_rnn_layer_backward":
            return self._lstm_backward(func, args, kwargs, rec)
        if name == "convolution" and self._conv_forward(args, rec):
            self.conv_modelled += 1
            return None
        if name == "convolution_backward":
            grads = self._conv_backward(args, rec)
            if grads is not None:
                self.conv_modelled += 1
                return grads
        if name in ("convolution", "convolution_backward"):
            return self._conv_measured(func, name, args, kwargs, rec)
        if name == _BACKWARD and args and not args[0].is_contiguous():
            # flash_attention_backward_kernel_impl: grad_out.contiguous(),
            # alive through the kernel.
            g = args[0]
            self.held.append(self._workspace(g.numel() * g.element_size(), rec, "temporary", keep=False))
        return None

    def _conv_forward(self, args: Tuple[Any, ...], rec: Any) -> bool:
        """oneDNN's forward convolution (``mkldnn_convolution``) on a
        float32 NCHW input, as it runs on AVX-512: the input reordered to
        16-channel blocks (from 16 input channels on), the weights to
        16-by-16 blocks (outputs only below 16 input channels), the output
        made in 16-channel blocks and copied to PyTorch's layout, the
        blocked copies freed around it; a bias padded to whole blocks; a
        1×1 convolution with a stride first gathers the strided input, one
        image's per thread. Where ``ConvParams::use_mkldnn`` says no
        (one image, a 1×1 or 3×3 kernel, few elements), PyTorch's own
        ``slow_conv2d`` runs: its input unfolded for the call (im2col).
        Measured allocation by allocation (``python/tests/test_cpu_conv.py``).
        Made here, before the output: the copies are freed before the
        output is made, all but the blocked output, freed after it."""
        if len(args) < 9:
            return False
        x, w, bias, stride, padding, dilation, transposed, _, groups = args[:9]
        g = self._conv_geometry(x, w, stride, padding, dilation, transposed, groups)
        if g is None:
            return False
        n, c, h, wd, k, kh, kw, ho, wo = g
        strided = any(int(v) != 1 for v in stride)
        if not self._onednn_takes(n, c, h, wd, kh, kw, strided):
            # PyTorch's own (slow_conv2d): its unfolded input, made for
            # the call, unless the kernel reads the input as it is.
            if n < 16 and not (kh == kw == 1 and not strided and int(padding[0]) == int(padding[1]) == 0):
                self.held.append(self._workspace(n * c * kh * kw * ho * wo * 4, rec, "temporary", keep=False))
            return True
        p16 = lambda v: -(-v // 16) * 16  # noqa: E731
        blocked = c >= 16
        steps = []
        if bias is not None and k % 16:
            steps.append(p16(k) * 4 + 128)  # the bias padded to whole blocks
        if blocked and kh == kw == 1 and strided:
            steps.append(self.threads * p16(c) * ho * wo * 4 + 128)
        if blocked:
            steps.append(n * p16(c) * h * wd * 4)
        steps.append(p16(k) * (p16(c) if blocked else c) * kh * kw * 4)
        made = [self._workspace(s, rec, "temporary", keep=False) for s in steps]
        self.held.append(self._workspace(n * p16(k) * ho * wo * 4, rec, "temporary", keep=False))
        made.clear()
        return True

    def _onednn_takes(self, n: int, c: int, h: int, w: int, kh: int, kw: int, strided: bool) -> bool:
        """``ConvParams::use_mkldnn`` (aten/src/ATen/native/Convolution.cpp)
        for a float32 CPU convolution: otherwise PyTorch's own kernel runs."""
        return (strided or n >= 16 or kh != 1 or kw != 1 or self.threads > 1) and ((kh > 3 and kw > 3) or n > 1 or n * c * h * w > 20480)

    def _conv_measured(self, func: Any, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any], rec: Any) -> Any:
        """A convolution the model of oneDNN's reorders does not cover
        (16-bit, channels-last, grouped, a strided input gradient): its
        results in the layout the CPU gives them, then what it makes
        inside itself, measured on this machine (cpu_measured) and made
        after them. On ``meta`` a convolution's output is contiguous; on
        the CPU it is channels-last where the input or the weights are
        (``_determine_backend_memory_format``: ``mkldnn_conv_use_channels_last``,
        ``thnn_conv_use_channels_last``), and the input's gradient with it:
        the layout the next kernels, and their memory, follow."""
        import torch

        out = func(*args, **kwargs)
        x, w = (args[0], args[1]) if name == "convolution" else (args[1], args[2])
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        cl = torch.channels_last
        last = x.dim() == 4 and (_channels_last(x) or _channels_last(w))
        t = outs[0]
        if last and isinstance(t, torch.Tensor) and t.dim() == 4 and not t.is_contiguous(memory_format=cl):
            outs[0] = torch.empty_like(t, memory_format=cl)
        for t in outs:
            if isinstance(t, torch.Tensor):
                rec.track(t)
        self._measured(
            func, name, args, kwargs, rec, "conv",
            "convolutions: oneDNN's reorders into its blocked layouts are modelled for float32 NCHW convolutions on "
            "AVX-512 (forward; backward at stride 1, or for the weights' gradient) and measured on this CPU for the "
            "others, and were not for some ({why}): on the zoo of docs/estimate.md up to 5% of a UNet's training peak",
        )
        self.held.clear()
        return tuple(outs) if isinstance(out, (tuple, list)) else outs[0]

    def _measured(self, func: Any, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any], rec: Any, kind: str, unmeasured: str) -> None:
        """What the call makes inside itself, measured on this machine
        (cpu_measured) and made after its results, freed as it returns; or,
        where it cannot be measured, the note ``unmeasured`` (its ``{why}``
        the reason)."""
        try:
            got = scratch(func, name, args, kwargs)
        except NotMeasured as e:
            self.note(kind, unmeasured.format(why=e))
            return
        if got > 0:
            self._scratch([got], rec)

    def _conv_geometry(self, x: Any, w: Any, stride: Any, padding: Any, dilation: Any, transposed: bool, groups: int) -> Optional[Tuple[int, ...]]:
        """(n, c, h, w, k, kh, kw, ho, wo) of a float32 NCHW convolution on
        AVX-512 with oneDNN on (what the model covers), or None."""
        import torch

        if not self.avx512 or not torch._C._get_mkldnn_enabled() or transposed or groups != 1:
            return None
        if x.dim() != 4 or w.dim() != 4 or x.dtype != torch.float32 or w.dtype != torch.float32:
            return None
        if not x.is_contiguous() or any(d != 1 for d in dilation) or x.numel() == 0:
            return None
        n, c, h, wd = (int(v) for v in x.shape)
        k, _, kh, kw = (int(v) for v in w.shape)
        ho = (h + 2 * int(padding[0]) - kh) // int(stride[0]) + 1
        wo = (wd + 2 * int(padding[1]) - kw) // int(stride[1]) + 1
        if ho <= 0 or wo <= 0:
            return None
        return n, c, h, wd, k, kh, kw, ho, wo

    def _conv_backward(self, args: Tuple[Any, ...], rec: Any) -> Optional[Tuple[Any, Any, Any]]:
        """oneDNN's backward convolution (``mkldnn_convolution_backward``)
        where its forward is modelled, made here in its order (its
        gradients returned in place of the meta kernel's, which makes all
        three at once): for the input's gradient (stride 1, 16 input
        channels or more) the output's gradient and the weights reordered
        into blocks and the input's gradient made in blocks, then copied
        out; for the weights' gradient the output's gradient and the input
        reordered again (a strided 1×1's input gathered, as forward), the
        weights' and the bias's gradients made in blocks (a bias whose
        channels are not whole blocks also once in its own size), then
        copied out. Not traced: the per-thread copy of the weights'
        gradient the kernel reduces into for some shapes (a blocked
        weight's size and 8 KiB)."""
        import torch

        if len(args) < 11:
            return None
        gout, x, w, bias_sizes, stride, padding, dilation, transposed, _, groups, mask = args[:11]
        g = self._conv_geometry(x, w, stride, padding, dilation, transposed, groups)
        if g is None or not isinstance(gout, torch.Tensor) or not gout.is_contiguous() or gout.dtype != torch.float32:
            return None
        n, c, h, wd, k, kh, kw, ho, wo = g
        strided = any(int(v) != 1 for v in stride)
        if not self._onednn_takes(n, c, h, wd, kh, kw, strided):
            return None  # PyTorch's slow_conv2d backward: not modelled
        want_input, want_weight, want_bias = (bool(m) for m in mask)
        if (want_input and (strided or c < 16)) or (want_bias and not want_weight):
            return None
        p16 = lambda v: -(-v // 16) * 16  # noqa: E731
        blocked = c >= 16
        gout_r = n * p16(k) * ho * wo * 4
        w_r = p16(k) * (p16(c) if blocked else c) * kh * kw * 4

        def temp(size: int) -> Any:
            return self._workspace(size, rec, "temporary", keep=False)

        def out(like: Any, shape: Any = None) -> Any:
            t = torch.empty(like.shape if shape is None else shape, dtype=torch.float32, device=like.device)
            rec.track(t)
            return t

        grad_input = grad_weight = grad_bias = None
        if want_input:
            made = [temp(gout_r), temp(w_r)]
            dsrc = temp(n * p16(c) * h * wd * 4)
            made.clear()
            grad_input = out(x)
            del dsrc
        if want_weight:
            made = [temp(gout_r)]
            if blocked:
                made.append(temp(n * p16(c) * h * wd * 4))
            dw = temp(w_r)
            if blocked and kh == kw == 1 and strided:
                made.append(temp(self.threads * p16(c) * ho * wo * 4 + 128))
            db = None
            if want_bias:
                db = temp(p16(k) * 4 + (128 if k % 16 else 0))
                if k % 16:
                    made.append(temp(k * 4))
            made.clear()
            if want_bias:
                grad_bias = out(w, (k,))
            grad_weight = out(w)
            del dw, db
        return grad_input, grad_weight, grad_bias

    def _lstm_forward(self, func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], rec: Any) -> Any:
        """``mkldnn_rnn_layer``: its outputs, the workspace it keeps for
        backward in place of the meta kernel's empty one, and what oneDNN
        takes while it runs (vramscope._estimate.cpu_rnn)."""
        import torch

        from vramscope._estimate.cpu_rnn import forward_call, layer_of

        output, hy, cy, workspace = func(*args, **kwargs)
        layer = layer_of(args, torch.is_grad_enabled(), self.avx512)
        for t in (output, hy, cy):
            rec.track(t)
        if layer is None:
            return output, hy, cy, workspace
        measured = self._lstm_measured(layer, func, "mkldnn_rnn_layer", args, kwargs)
        if layer.training:
            workspace = torch.empty(layer.workspace(), dtype=torch.uint8, device=output.device)
            rec.track(workspace)
        self._scratch(forward_call(layer, bool(args[12]), measured), rec)
        return output, hy, cy, workspace

    def _lstm_backward(self, func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], rec: Any) -> Any:
        """``mkldnn_rnn_layer_backward``: the gradients (the second bias's
        its own clone, where the meta kernel returns the first twice) and
        what the kernel takes while it runs."""
        import torch

        from vramscope._estimate.cpu_rnn import backward_call, layer_of

        grad_out, grad_hy, grad_cy = args[10], args[11], args[12]
        out = list(func(*args, **kwargs))
        layer = layer_of(args, True, self.avx512)
        if layer is None or (grad_out is None and grad_hy is None and grad_cy is None):
            for t in out:
                rec.track(t)
            return tuple(out)
        for i in (0, 1, 2, 3, 5, 6):
            rec.track(out[i])
        contiguous = grad_out is not None and grad_out.is_contiguous()
        measured = self._lstm_measured(layer, func, "mkldnn_rnn_layer_backward", args, kwargs)
        if measured is not None:
            # The second bias's gradient is a clone made as the call
            # returns, after the scratchpad is freed: the rise above what
            # the call left counts it, though it was not there at the peak.
            measured += out[3].numel() * out[3].element_size()
        self._scratch(backward_call(layer, contiguous, grad_hy is not None, grad_cy is not None, measured), rec)
        out[4] = torch.empty_like(out[3])
        rec.track(out[4])
        return tuple(out)

    def _lstm_measured(self, layer: Any, func: Any, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Optional[int]:
        """Where oneDNN's choices on this CPU were not checked (its 16-bit
        kernels but on AVX-512 without AMX; float32 inference's packed
        weights but on AVX-512 and AVX2), the call measured on this CPU:
        how far it rose above its results (None where the rules were
        checked). Where it cannot be measured, the note says what may
        differ. (Where a 16-bit LSTM does not run at all, the program
        raises and the note says that instead.)"""
        if layer.size != 4:
            if self.avx512 and not self.amx:
                return None
            what = "its 16-bit kernels' blocked weights and scratchpad"
        elif not layer.training and not (self.avx512 or self.capability == "AVX2"):
            what = "inference's packed weights"
        else:
            return None
        if self.lstm_raises:
            return None
        if name == "mkldnn_rnn_layer_backward" and args and hasattr(args[-1], "numel"):
            # oneDNN reads the workspace without checking its size: the
            # measured call is given room to spare (made before the
            # measurement starts), not the modelled size, which a kernel of
            # another blocking could overrun.
            import torch

            room = int(args[-1].numel()) * 2 + (1 << 20)
            args = (*args[:-1], torch.empty(room, dtype=torch.uint8, device="meta"))
        try:
            return scratch(func, name, args, kwargs, grad=name == "mkldnn_rnn_layer" and layer.training)
        except (NotMeasured, RuntimeError) as e:  # RuntimeError: the real kernel refused the call
            self.note("lstm", RNN_UNCHECKED.format(capability=self._isa(), what=what) + f" (not measured: {e})")
            return None

    def _isa(self) -> str:
        """The CPU's capability as the notes name it (AMX beside AVX-512)."""
        return f"{self.capability} with AMX" if self.amx else self.capability

    def after(self, func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], rec: Any) -> None:
        name = op_name(func)
        if is_16bit_matmul(name, args) is not None:
            self._measured(
                func, name, args, kwargs, rec, "16bit_matmul",
                "16-bit matmuls: oneDNN's scratchpad inside them is measured by running each on this CPU, and was not "
                "for some ({why}): on the zoo of docs/estimate.md it is 2% of a ViT's bf16 training peak",
            )
        if name == _FORWARD:
            q, k = args[0], args[1]
            self._scratch(forward_scratch(int(q.shape[2]), int(k.shape[2]), int(q.shape[3]), q.dtype, self.threads), rec)
        elif name == _BACKWARD:
            q, k = args[1], args[2]
            b, h = int(q.shape[0]), int(q.shape[1])
            self._scratch(backward_scratch(b, h, int(q.shape[2]), int(k.shape[2]), q.dtype, self.threads), rec)
        self.held.clear()


@contextlib.contextmanager
def sdpa_as_on_cpu(cpu: Cpu) -> Iterator[None]:
    """``F.scaled_dot_product_attention`` running the kernel the CPU would
    choose: the flash kernel where its checks pass, math otherwise."""
    import torch
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention
    aten = torch.ops.aten

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        ac = cpu.autocast
        low = ac.lower() if ac is not None else None
        if low is not None:
            # scaled_dot_product_attention is on the CPU autocast's lower-precision list.
            query, key, value, attn_mask = (ac.cast_one(t, low) for t in (query, key, value, attn_mask))
        if flash_applies(query, key, value, attn_mask, dropout_p, enable_gqa):
            cpu.sdp["flash"] = cpu.sdp.get("flash", 0) + 1
            return aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]
        cpu.sdp["math"] = cpu.sdp.get("math", 0) + 1
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)

    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


@contextlib.contextmanager
def rng_state_as_on_cpu(rec: Any) -> Iterator[None]:
    """``torch.get_rng_state()`` (a real CPU tensor: the trace's dispatch
    mode never sees it made) recorded as an allocation of the trace."""
    import torch

    original = torch.get_rng_state

    def get_rng_state() -> Any:
        state = original()
        rec.track(state)
        return state

    torch.get_rng_state = get_rng_state
    try:
        yield
    finally:
        torch.get_rng_state = original

"""Scratch that CUDA kernels allocate and free inside themselves.

A meta kernel gives an operation's outputs; the CUDA kernel may also ask
the caching allocator for working memory it frees before returning. That
memory shows in a real run's allocator history (and in its fragmentation)
and not in a trace on meta, so the trace adds it after the operation, in
the kernel's order: each function here returns the steps, a size to
allocate or ``-i`` to free the i-th allocation (from 1); whatever is left
is freed at the end, last first.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

ATTENTION_BACKWARDS = (
    "_efficient_attention_backward",
    "_scaled_dot_product_efficient_attention_backward",
    "_flash_attention_backward",
    "_scaled_dot_product_flash_attention_backward",
)


def _up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def efficient_backward_scratch(b: int, h: int, m: int, k: int, dtype: Any) -> list:
    """The memory-efficient kernel's backward scratch, in its order
    (aten/src/ATen/native/transformers/cuda/attention_backward.cu,
    ``_efficient_attention_backward``, and mem_eff_attention/kernel_backward.h):

    * ``delta``: the kernel computes it for fp16/bf16 into a (B, H, M) fp32
      tensor; for fp32 (``kKernelComputesDelta`` false) it is
      ``(grad_out * out).sum(-1).transpose(-2, -1).contiguous()``: a
      B·M·H·K product and a B·M·H sum, freed once the contiguous copy exists.
    * the workspace, ``workspace_size()`` bytes: ``kNeedsAccumGradQ`` holds
      from sm70 on (split keys), so each (batch, head) gets
      ``ceil(M/kBlockSizeI) * ceil(K/kBlockSizeJ)`` GradQTempStorage tiles
      (a 16-byte header and kBlockSizeI·kBlockSizeJ floats), aligned to 4
      floats. Blocks of 64×64 are taken (the kernels for K ≤ 64; larger
      heads use larger blocks, within a tile's rounding of this). gK/gV need
      staging only for half types with K above the block (not modelled).
    """
    import torch

    steps: list = []
    if dtype == torch.float32:
        steps += [b * m * h * k * 4, b * m * h * 4, b * h * m * 4, -1, -2]
    else:
        steps += [b * h * m * 4]
    tiles = -(-m // 64) * -(-k // 64)
    steps.append(b * h * _up(tiles * (4 + 64 * 64), 4) * 4)
    return steps


def flash_backward_scratch(b: int, h: int, m: int, k: int) -> list:
    """FlashAttention-2's backward scratch (flash_attn/flash_api.cpp,
    ``mha_bwd``): ``softmax_d`` (B, H, M rounded to 128) and ``dq_accum``
    (B, M rounded to 128, H, K rounded to 32 up to 128 and to 64 above),
    both fp32, which the H200 shows as one allocation of their sum
    (17,039,616 B at B=16, H=8, M=512, K=64 with PyTorch 2.11: the two
    and 256 bytes more)."""
    mr = _up(m, 128)
    kr = _up(k, 32 if k <= 128 else 64)
    return [b * h * mr * 4 + b * mr * h * kr * 4 + 256]


# The most threads one multiprocessor runs, by compute capability (CUDA's
# deviceQuery figures); the multiprocessors themselves are the GPU table's
# (vramscope._native.gpu): reductions size their global scratch by both.
def threads_per_sm(capability: Tuple[int, int]) -> int:
    if capability in ((8, 6), (8, 7), (8, 9), (12, 0)):
        return 1536
    if capability == (7, 5):
        return 1024
    return 2048


def _last_pow2(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def reduce_scratch(
    shape: Sequence[int],
    strides: Sequence[int],
    dims: Sequence[int],
    in_size: int,
    acc_size: int,
    sms: int,
    sm_threads: int,
) -> List[int]:
    """The global-memory scratch of a TensorIterator reduction
    (aten/src/ATen/native/cuda/Reduce.cuh, ``setReduceConfig`` and
    ``gpu_reduce_kernel``): when one output's inputs are split across
    thread blocks, a buffer of ``sizeof(arg_t) * num_outputs *
    ctas_per_output`` (times ``block.x * output_vec_size`` without a
    block-x reduction) and ``4 * grid.x`` bytes of semaphores, freed when
    the kernel is launched. Bias gradients (a sum over the batch and
    sequence of a linear layer's output gradient) take this path: 96 MiB
    and 48 B for a 1536-wide bias at 8192 rows on an H100, as its
    allocator history shows.

    ``shape``/``strides`` (elements) of the input, ``dims`` the reduced
    ones. Reduced and kept dimensions are each taken as one coalesced
    dimension, as TensorIterator merges a contiguous tensor's; other
    layouts are not modelled (no scratch)."""
    nd = len(shape)
    red = [d % nd for d in dims] if dims else list(range(nd))
    keep = [d for d in range(nd) if d not in red and shape[d] > 1]
    red = [d for d in red if shape[d] > 1]
    if not red:
        return []
    n_in = 1
    for d in red:
        n_in *= int(shape[d])
    n_out = 1
    for d in keep:
        n_out *= int(shape[d])
    red_stride = min(int(strides[d]) for d in red)
    out_stride = min((int(strides[d]) for d in keep), default=0)
    if n_in * n_out >= 2**31:
        return []  # split into 32-bit-indexable pieces: not modelled
    fastest = not keep or red_stride < out_stride
    if fastest:
        dim0, dim1, step_stride = n_in, n_out, red_stride
    else:
        dim0, dim1, step_stride = n_out, n_in, out_stride
    vec_out = 1
    if step_stride == 1:
        if fastest and dim0 > 128:
            dim0 //= 4  # vectorize along input (one coalesced reduced dimension)
        elif not fastest:
            vec_out = 4
            while vec_out > 1 and (n_out % vec_out or any(int(strides[d]) % vec_out for d in keep if int(strides[d]) != 1)):
                vec_out //= 2
            dim0 //= vec_out
    max_threads = 512 // vec_out
    d0 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    d1 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    bw = min(d0, 32)
    bh = min(d1, max_threads // bw)
    bw = min(d0, max_threads // bh)
    threads = bw * bh
    step_in, step_out = 1, 1
    block_x_reduce = fastest
    if fastest:
        step_in *= bw
    else:
        step_out *= bw
    values = -(-n_in // step_in)
    block_y_reduce = values >= bh * 16 or values >= 256
    if block_y_reduce:
        step_in *= bh
    else:
        step_out *= bh
    grid_x = -(-(n_out // vec_out) // step_out)
    target = sms * (sm_threads // threads)
    values = -(-n_in // step_in)
    if not (block_y_reduce and values >= 256 and grid_x <= target):
        return []
    ctas = max(min(-(-target // grid_x), -(-values // 16)), -(-values // 256))
    if ctas <= 1:
        return []
    size = acc_size * n_out * ctas
    if not block_x_reduce:
        size *= bw * vec_out
    return [size, 4 * grid_x]

"""Triton kernel: merge the S partial attention results of a split-KV call in one launch.

Imported only where Triton imports (``split_merge.triton_status``). The math is
``split_merge.merge_torch``'s: base-2 weights ``2^(lse_s - max lse)`` in float32, the
weighted sum divided by the weight sum, rounded once to the output dtype. FlashInfer's
pairwise ``merge_state`` takes S - 1 launches and rounds each intermediate result.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def split_merge_kernel(out_ptr, lse_ptr, dst_ptr, pairs, heads, tokens,
                       out_row_stride, out_head_stride, lse_row_stride,
                       COPIES: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr):
    """One program: BLOCK (token, head) pairs, all COPIES splits of each.

    Split s of token t is row ``s * tokens + t`` of ``out`` (rows, heads, D; last dim
    contiguous) and ``lse`` (rows, heads); the result goes to a contiguous (tokens, heads, D).
    """
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,) flat pair index
    valid = idx < pairs
    token = (idx // heads).to(tl.int64)
    head = (idx % heads).to(tl.int64)
    d = tl.arange(0, D)
    mask = valid[:, None]
    # Pass 1: the largest lse per pair (lse is 1/D of the traffic; pass 2 re-reads it).
    top = tl.full((BLOCK,), float("-inf"), tl.float32)
    for s in tl.static_range(COPIES):
        lse = tl.load(lse_ptr + (s * tokens + token) * lse_row_stride + head, mask=valid,
                      other=float("-inf"))
        top = tl.maximum(top, lse)
    # A pair whose every split saw no key has top = -inf: shift by 0 instead, so every weight
    # is 2^-inf = 0 and the pair comes out 0, not NaN from -inf - -inf.
    top = tl.where(top == float("-inf"), 0.0, top)
    # Pass 2: weighted sum in float32, splits in order (as merge_torch sums them).
    acc = tl.zeros((BLOCK, D), tl.float32)
    total = tl.zeros((BLOCK,), tl.float32)
    for s in tl.static_range(COPIES):
        row = s * tokens + token
        lse = tl.load(lse_ptr + row * lse_row_stride + head, mask=valid, other=float("-inf"))
        w = tl.exp2(lse - top)  # (BLOCK,)
        src = out_ptr + (row * out_row_stride + head * out_head_stride)[:, None] + d[None, :]
        acc += w[:, None] * tl.load(src, mask=mask, other=0.0).to(tl.float32)
        total += w
    total = tl.where(total > 0.0, total, 1.0)
    dst = dst_ptr + ((token * heads + head) * D)[:, None] + d[None, :]
    tl.store(dst, (acc / total[:, None]).to(dst_ptr.dtype.element_ty), mask=mask)


def launch(out, lse, dst, *, copies: int, block: int | None = None) -> None:
    """Fill ``dst`` (T, H, D) contiguous from ``out`` (copies * T, H, D) and ``lse``
    (copies * T, H); see ``split_merge.merge_splits``."""
    tokens, heads, head_dim = dst.shape
    pairs = tokens * heads
    # ~2048 output elements per program: 32 pairs at D = 64, enough programs for every SM.
    block = block or max(1, 2048 // head_dim)
    grid = (triton.cdiv(pairs, block),)
    split_merge_kernel[grid](
        out, lse, dst, pairs, heads, tokens, out.stride(0), out.stride(1), lse.stride(0),
        COPIES=copies, D=head_dim, BLOCK=block, num_warps=4)

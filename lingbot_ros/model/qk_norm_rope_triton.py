"""Triton kernel: per-head q/k LayerNorm + rotary embedding + cast, in one launch.

Imported only where Triton imports (``qk_fused.triton_status``); the math is the
float32 path of ``Attention.norm_qk`` followed by the rope's ``x * cos + x[partner] * sin``,
rounded once to the output dtype. The partner channels are loaded a second time instead of
shuffled in registers: LayerNorm is per-row affine, so ``norm(x)[partner]`` is
``(x[partner] - mean) * rstd * w[partner] + b[partner]`` with the same row statistics.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _norm_rotate(src, d, pd, mask, w_ptr, b_ptr, cos, sin, eps, D: tl.constexpr):
    x = tl.load(src + d[None, :], mask=mask, other=0.0).to(tl.float32)  # (BLOCK, D)
    xp = tl.load(src + pd[None, :], mask=mask, other=0.0).to(tl.float32)  # partner channels
    mean = tl.sum(x, axis=1) / D
    xc = x - mean[:, None]
    var = tl.sum(xc * xc, axis=1) / D
    rstd = tl.rsqrt(var + eps)[:, None]
    y = xc * rstd * tl.load(w_ptr + d)[None, :] + tl.load(b_ptr + d)[None, :]
    yp = (xp - mean[:, None]) * rstd * tl.load(w_ptr + pd)[None, :] + tl.load(b_ptr + pd)[None, :]
    return y * cos + yp * sin


@triton.jit
def qk_norm_rope_kernel(qkv_ptr, q_out_ptr, k_out_ptr, qw_ptr, qb_ptr, kw_ptr, kb_ptr,
                        cos_ptr, sin_ptr, partner_ptr, pairs, heads, table_rows, row_stride,
                        eps, D: tl.constexpr, BLOCK: tl.constexpr):
    """One program: BLOCK (token, head) pairs of q and of k.

    qkv row r holds [q heads | k heads | v heads], D channels each; token r uses rope table
    row ``r % table_rows`` and its head h goes to ``out[r, h]`` of a contiguous (rows, heads, D).
    """
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,) flat pair index
    valid = idx < pairs
    row = (idx // heads).to(tl.int64)
    head = (idx % heads).to(tl.int64)
    d = tl.arange(0, D)
    pd = tl.load(partner_ptr + d)
    mask = valid[:, None]
    table = (row % table_rows)[:, None] * D + d[None, :]
    cos = tl.load(cos_ptr + table, mask=mask, other=0.0)
    sin = tl.load(sin_ptr + table, mask=mask, other=0.0)
    src = qkv_ptr + (row * row_stride + head * D)[:, None]
    dst = (row * heads * D + head * D)[:, None] + d[None, :]
    q = _norm_rotate(src, d, pd, mask, qw_ptr, qb_ptr, cos, sin, eps, D)
    tl.store(q_out_ptr + dst, q.to(q_out_ptr.dtype.element_ty), mask=mask)
    k = _norm_rotate(src + heads * D, d, pd, mask, kw_ptr, kb_ptr, cos, sin, eps, D)
    tl.store(k_out_ptr + dst, k.to(k_out_ptr.dtype.element_ty), mask=mask)


def launch(qkv, q_out, k_out, q_norm, k_norm, cos, sin, partner, *, heads: int,
           block: int = 64) -> None:
    """Fill ``q_out``/``k_out`` from ``qkv`` (rows, 3 * heads * D); see ``qk_fused``."""
    rows, width = qkv.shape
    head_dim = width // (3 * heads)
    pairs = rows * heads
    grid = (triton.cdiv(pairs, block),)
    qk_norm_rope_kernel[grid](
        qkv, q_out, k_out, q_norm.weight, q_norm.bias, k_norm.weight, k_norm.bias,
        cos, sin, partner, pairs, heads, cos.shape[0], qkv.stride(0), q_norm.eps,
        D=head_dim, BLOCK=block, num_warps=4)

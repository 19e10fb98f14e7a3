"""Triton kernel: per-head q/k LayerNorm + rotary embedding + cast, in one launch.

Optionally (constexpr switches, compiled per setting) q is written several times, for the
split-KV backend's repeated requests, and k and v go straight into their paged-cache slots.

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
                        eps, k_rows_ptr, v_rows_ptr, rows, kv_row_stride, kv_head_stride,
                        D: tl.constexpr, BLOCK: tl.constexpr, Q_COPIES: tl.constexpr,
                        SCATTER_KV: tl.constexpr):
    """One program: BLOCK (token, head) pairs of q and of k (and of v with SCATTER_KV).

    qkv row r holds [q heads | k heads | v heads], D channels each; token r uses rope table
    row ``r % table_rows``. Its q head h goes to ``q_out[c * rows + r, h]`` of a contiguous
    (Q_COPIES * rows, heads, D) for every copy c. Its k head goes to ``k_out[r, h]`` of a
    contiguous (rows, heads, D); with SCATTER_KV, ``k_out`` is a (slots, heads, D) cache
    layer (row/head strides given) and k goes to row ``k_rows[r]``, v (copied as it is) to
    row ``v_rows[r]``.
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
    q = _norm_rotate(src, d, pd, mask, qw_ptr, qb_ptr, cos, sin, eps, D)
    q = q.to(q_out_ptr.dtype.element_ty)
    for c in tl.static_range(Q_COPIES):  # the split-KV backend's repeated requests
        dst = ((c * rows + row) * heads * D + head * D)[:, None] + d[None, :]
        tl.store(q_out_ptr + dst, q, mask=mask)
    k = _norm_rotate(src + heads * D, d, pd, mask, kw_ptr, kb_ptr, cos, sin, eps, D)
    k = k.to(k_out_ptr.dtype.element_ty)
    if SCATTER_KV:  # straight into the paged cache: no k tensor, no index_copy_
        k_row = tl.load(k_rows_ptr + row, mask=valid, other=0)
        v_row = tl.load(v_rows_ptr + row, mask=valid, other=0)
        head_off = (head * kv_head_stride)[:, None] + d[None, :]
        tl.store(k_out_ptr + (k_row * kv_row_stride)[:, None] + head_off, k, mask=mask)
        v = tl.load(src + 2 * heads * D + d[None, :], mask=mask, other=0.0)
        tl.store(k_out_ptr + (v_row * kv_row_stride)[:, None] + head_off,
                 v.to(k_out_ptr.dtype.element_ty), mask=mask)
    else:
        dst = (row * heads * D + head * D)[:, None] + d[None, :]
        tl.store(k_out_ptr + dst, k, mask=mask)


def launch(qkv, q_out, k_out, q_norm, k_norm, cos, sin, partner, *, heads: int,
           block: int = 64, q_copies: int = 1, kv_rows=None) -> None:
    """Fill ``q_out``/``k_out`` from ``qkv`` (rows, 3 * heads * D); see ``qk_fused``.

    ``q_copies``: ``q_out`` is (q_copies * rows, heads, D), q written once per copy.
    ``kv_rows``: None (``k_out`` is a contiguous (rows, heads, D)), or int64 ``(k_rows,
    v_rows)`` of shape (rows,): ``k_out`` is then a (slots, heads, D) cache layer with unit
    channel stride, receiving k at rows ``k_rows`` and v at rows ``v_rows``.
    """
    rows, width = qkv.shape
    head_dim = width // (3 * heads)
    pairs = rows * heads
    grid = (triton.cdiv(pairs, block),)
    scatter = kv_rows is not None
    k_rows, v_rows = kv_rows if scatter else (partner, partner)  # unread without scatter
    qk_norm_rope_kernel[grid](
        qkv, q_out, k_out, q_norm.weight, q_norm.bias, k_norm.weight, k_norm.bias,
        cos, sin, partner, pairs, heads, cos.shape[0], qkv.stride(0), q_norm.eps,
        k_rows, v_rows, rows, k_out.stride(0), k_out.stride(1),
        D=head_dim, BLOCK=block, Q_COPIES=q_copies, SCATTER_KV=scatter, num_warps=4)

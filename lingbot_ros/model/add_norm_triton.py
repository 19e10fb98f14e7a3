"""Triton kernel: LayerScale residual + LayerNorm of the result, one row per program.

Imported only where Triton imports (``add_norm.add_norm_status``). The math is the torch
pair it replaces, ``x = torch.addcmul(x, y, gamma); norm2(x)``:

- ``x + y * gamma`` as one float32 FMA (what torch's addcmul computes, on the CPU and on
  CUDA: checked on an H200, float32 results equal to the FMA bit for bit), rounded once to
  x's dtype: the new residual stream, bit-identical to torch's;
- LayerNorm of that ROUNDED row (norm2 sees the bf16 x), float32 mean and biased variance,
  ``(x - mean) * rsqrt(var + eps) * weight + bias``, rounded to x's dtype.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def add_norm_kernel(x_ptr, y_ptr, gamma_ptr, w_ptr, b_ptr, x_out_ptr, n_out_ptr,
                    x_row_stride, y_row_stride, eps, C: tl.constexpr, BLOCK: tl.constexpr,
                    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """One program: row r of x, y (row strides given, channels contiguous) -> row r of the
    contiguous (rows, C) outputs ``x_out`` (residual) and ``n_out`` (normed)."""
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK)  # (BLOCK,) channels, BLOCK = next power of 2 >= C
    mask = c < C
    x = tl.load(x_ptr + row * x_row_stride + c, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + row * y_row_stride + c, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(gamma_ptr + c, mask=mask, other=0.0).to(tl.float32)
    x_new = tl.fma(y, g, x).to(x_out_ptr.dtype.element_ty)  # explicit: not left to contraction
    tl.store(x_out_ptr + row * C + c, x_new, mask=mask)
    v = x_new.to(tl.float32)  # the rounded residual, as norm2 reads it
    mean = tl.sum(v, axis=0) / C
    vc = tl.where(mask, v - mean, 0.0)  # padding channels stay out of the variance
    var = tl.sum(vc * vc, axis=0) / C
    out = vc * tl.rsqrt(var + eps)
    if HAS_WEIGHT:
        out = out * tl.load(w_ptr + c, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        out = out + tl.load(b_ptr + c, mask=mask, other=0.0).to(tl.float32)
    tl.store(n_out_ptr + row * C + c, out.to(n_out_ptr.dtype.element_ty), mask=mask)


def launch(x, y, gamma, weight, bias, eps: float, x_out, n_out) -> None:
    """Fill ``x_out``/``n_out`` (rows, C) contiguous from ``x``/``y`` (rows, C) with unit
    channel stride; ``weight``/``bias`` (C,) or None. See ``add_norm.add_scaled_norm``."""
    rows, width = x.shape
    block = triton.next_power_of_2(width)
    add_norm_kernel[(rows,)](
        x, y, gamma, weight if weight is not None else x, bias if bias is not None else x,
        x_out, n_out, x.stride(0), y.stride(0), eps, C=width, BLOCK=block,
        HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
        num_warps=8 if block >= 2048 else 4)

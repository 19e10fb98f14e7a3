"""Triton kernel: per-row float8 e4m3 quantization, optionally of the exact GELU of the row.

Imported only where Triton imports (``fp8_mlp.quant_status``). One program per row: the row
in float32 (GELU with erf, as ``F.gelu``), its max |v| / 448 as the row's scale (at least
``fp8_mlp.MIN_SCALE``), ``v / scale`` rounded to e4m3. The torch emulation in ``fp8_mlp``
computes the same values (tests/model/test_precisions.py holds the two together on CUDA).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def quant_rows_kernel(x_ptr, q_ptr, s_ptr, row_stride, K: tl.constexpr, BLOCK: tl.constexpr,
                      GELU: tl.constexpr, QMAX: tl.constexpr, SMIN: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, BLOCK)  # (BLOCK,) columns, BLOCK = next power of 2 >= K
    mask = k < K
    v = tl.load(x_ptr + row * row_stride + k, mask=mask, other=0.0).to(tl.float32)
    if GELU:
        v = 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476))
    amax = tl.max(tl.where(mask, tl.abs(v), 0.0), axis=0)
    scale = tl.maximum(amax / QMAX, SMIN)
    tl.store(q_ptr + row * K + k, (v / scale).to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + row, scale)


def quantize_rows(x: torch.Tensor, gelu: bool, qmax: float, min_scale: float
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) CUDA rows with unit column stride -> (M, K) e4m3 and (M, 1) float32 scales
    (``fp8_mlp``'s constants passed in: qmax 448, min_scale)."""
    rows, width = x.shape
    q = torch.empty((rows, width), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
    if rows:
        quant_rows_kernel[(rows,)](x, q, scale, x.stride(0), K=width,
                                   BLOCK=triton.next_power_of_2(width), GELU=gelu,
                                   QMAX=qmax, SMIN=min_scale)
    return q, scale

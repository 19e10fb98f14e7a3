"""Fp8Mlp: the aggregator's MLP (fc1 -> exact GELU -> fc2) with float8 e4m3 GEMMs.

Selected by ``GCTModel.prepare(mlp_precision="fp8")`` (off by default: see
docs/performance.md for its speed and its pose difference). The weights are quantized once,
per output channel; the activations per row (token), dynamically, at each call:

    scale_w[o] = max_i |W[o, i]| / 448          W8 = round_e4m3(W / scale_w)       (prepare)
    scale_x[r] = max_i |x[r, i]| / 448          x8 = round_e4m3(x / scale_x)       (per call)
    y = (x8 @ W8^T) * scale_x[r] * scale_w[o] + b                                  (one GEMM)

On CUDA the GEMM is ``torch._scaled_mm`` (row-wise scales, bf16 out, the bias in its
epilogue; Hopper's FP8 tensor cores) and the row quantization a Triton kernel
(``fp8_quant_triton``: the GELU of fc1's output fused into fc2's quantization). Elsewhere
(CPU, or without Triton) the same math runs as torch ops on dequantized values: the
emulation the tests hold the CUDA path to.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..kernel_import import import_status

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # the largest finite float8 e4m3fn
MIN_SCALE = 1e-12  # an all-zero row quantizes to zeros, not NaN


def quant_status() -> str:
    """'' when the Triton row-quantization kernel is usable on CUDA tensors, else why not."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    return import_status(f"{__package__}.fp8_quant_triton")


def quantize_rows(x: Tensor, gelu: bool = False) -> tuple[Tensor, Tensor]:
    """Per-row e4m3 quantization of ``gelu(x)`` (or of x).

    Args:
        x: (M, K) float, rows contiguous.
    Returns:
        q (M, K) float8_e4m3fn and scale (M, 1) float32, with ``q * scale ~ gelu(x)``.
    """
    if x.is_cuda and not quant_status():
        from . import fp8_quant_triton
        return fp8_quant_triton.quantize_rows(x, gelu, E4M3_MAX, MIN_SCALE)
    v = F.gelu(x.float()) if gelu else x.float()  # (M, K) float32
    scale = (v.abs().amax(dim=1, keepdim=True) / E4M3_MAX).clamp_min(MIN_SCALE)  # (M, 1)
    return (v / scale).to(E4M3), scale


def quantize_weight(weight: Tensor) -> tuple[Tensor, Tensor]:
    """(N, K) weight -> (N, K) e4m3 and its per-output-channel scale (1, N) float32."""
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1, keepdim=True) / E4M3_MAX).clamp_min(MIN_SCALE)  # (N, 1)
    return (w / scale).to(E4M3), scale.reshape(1, -1).contiguous()


def scaled_matmul(q: Tensor, q_scale: Tensor, w8: Tensor, w_scale: Tensor, bias: Tensor,
                  out_dtype: torch.dtype) -> Tensor:
    """``(q * q_scale) @ (w8 * w_scale^T)^T + bias`` -> (M, N) in ``out_dtype``.

    q (M, K) e4m3, q_scale (M, 1) f32, w8 (N, K) e4m3, w_scale (1, N) f32, bias (N,)."""
    if q.is_cuda:
        return torch._scaled_mm(q, w8.t(), scale_a=q_scale, scale_b=w_scale, bias=bias,
                                out_dtype=out_dtype, use_fast_accum=True)
    y = (q.float() * q_scale) @ (w8.float() * w_scale.t()).t()  # (M, N) float32
    return (y + bias.float()).to(out_dtype)


class Fp8Mlp(nn.Module):
    """An ``Mlp`` with e4m3 weights; same call, same output dtype as the bf16 one it replaces."""

    def __init__(self, fc1: nn.Linear, fc2: nn.Linear) -> None:
        super().__init__()
        for name, linear in (("fc1", fc1), ("fc2", fc2)):
            if linear.in_features % 16 or linear.out_features % 16:
                raise ValueError(f"mlp_precision fp8 needs {name}'s sizes to be multiples of "
                                 f"16 (FP8 GEMM tiles), got {linear.in_features}x"
                                 f"{linear.out_features}")
            w8, w_scale = quantize_weight(linear.weight)
            self.register_buffer(f"{name}_weight", w8)  # (N, K) e4m3
            self.register_buffer(f"{name}_scale", w_scale)  # (1, N) f32
            bias = (linear.bias if linear.bias is not None
                    else torch.zeros(linear.out_features, device=linear.weight.device))
            self.register_buffer(f"{name}_bias", bias.detach().to(linear.weight.dtype))
        self.out_dtype = fc2.weight.dtype

    @classmethod
    def from_mlp(cls, mlp: nn.Module) -> "Fp8Mlp":
        return cls(mlp.fc1, mlp.fc2)

    def forward(self, x: Tensor) -> Tensor:
        lead, width = x.shape[:-1], x.shape[-1]
        rows = x.reshape(-1, width)  # (M, C)
        if not rows.is_contiguous():
            rows = rows.contiguous()
        q, s = quantize_rows(rows)  # (M, C) e4m3, (M, 1)
        h = scaled_matmul(q, s, self.fc1_weight, self.fc1_scale, self.fc1_bias,
                          self.out_dtype)  # (M, hidden)
        q, s = quantize_rows(h, gelu=True)  # gelu(h) quantized: (M, hidden), (M, 1)
        y = scaled_matmul(q, s, self.fc2_weight, self.fc2_scale, self.fc2_bias,
                          self.out_dtype)  # (M, C)
        return y.reshape(*lead, y.shape[-1])

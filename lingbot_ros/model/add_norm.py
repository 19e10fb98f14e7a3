"""LayerScale residual + the next LayerNorm, fused: ``x = x + y * gamma; norm(x)``.

Every block ends its attention half with ``x = ls1.residual(x, attn(...))`` and starts its
MLP half with ``norm2(x)``: two kernels that each read the 1024-wide bf16 rows once more
(~0.9 ms of LayerNorm and part of the 1.6 ms of elementwise kernels per frame, see
docs/performance.md "Where the time goes"). ``add_scaled_norm`` does both in one Triton
launch on CUDA and returns the residual too (the block adds the MLP output to it).

Precision: the residual is bit-identical to ``torch.addcmul`` (float32 math, rounded once);
the normed output is within one unit in the last place of ``norm(x)`` (the same float32
statistics, summed in another order).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..kernel_import import import_status

MAX_WIDTH = 2048  # one row per program: the whole row lives in registers
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def add_norm_status() -> str:
    """'' when the Triton kernel is usable on CUDA tensors, else why not."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    return import_status(f"{__package__}.add_norm_triton")


def fusable(x: Tensor, norm: nn.Module) -> bool:
    """Whether the kernel computes ``norm(x)`` for this x: CUDA, a float dtype, a LayerNorm
    over the last dim only, at most MAX_WIDTH wide, with parameters (if any) of x's dtype on
    x's device (CUDA's LayerNorm refuses bf16 rows with float32 parameters; the kernel
    would not, and should not answer where torch raises)."""
    if not (x.is_cuda and x.dtype in DTYPES and isinstance(norm, nn.LayerNorm)):
        return False
    width = x.shape[-1]
    params = [p for p in (norm.weight, norm.bias) if p is not None]
    return (tuple(norm.normalized_shape) == (width,) and 0 < width <= MAX_WIDTH
            and all(p.device == x.device and p.dtype == x.dtype for p in params))


def add_scaled_norm(x: Tensor, y: Tensor, gamma: Tensor, norm: nn.LayerNorm
                    ) -> tuple[Tensor, Tensor]:
    """``x_new = torch.addcmul(x, y, gamma)`` and ``norm(x_new)``.

    Args:
        x: (..., C) residual stream.
        y: (..., C) branch output; may be a strided view (e.g. a slice of a larger tensor).
        gamma: (C,) LayerScale weights.
        norm: the LayerNorm over C that follows (with or without affine parameters).
    Returns:
        x_new, normed: (..., C) each, in x's dtype (contiguous from the kernel). The kernel
        runs when ``fusable(x, norm)``, Triton is usable and x, y, gamma share one dtype;
        anything else takes the two torch ops. Strided x / y (channels contiguous or not):
        rows whose leading dims flatten to one stride are read in place, others are copied
        first (``reshape``).
    """
    if (not fusable(x, norm) or add_norm_status() or x.numel() == 0 or y.shape != x.shape
            or not x.dtype == y.dtype == gamma.dtype or gamma.shape != x.shape[-1:]):
        return add_scaled_norm_torch(x, y, gamma, norm)
    return add_scaled_norm_triton(x, y, gamma, norm)


def add_scaled_norm_torch(x: Tensor, y: Tensor, gamma: Tensor, norm: nn.Module
                          ) -> tuple[Tensor, Tensor]:
    """The two torch ops the kernel replaces: the fallback and the kernel's test reference."""
    x_new = torch.addcmul(x, y, gamma)
    return x_new, norm(x_new)


def add_scaled_norm_triton(x: Tensor, y: Tensor, gamma: Tensor, norm: nn.LayerNorm
                           ) -> tuple[Tensor, Tensor]:
    """``add_scaled_norm`` as one Triton launch, whatever the device (CUDA, or CPU tensors
    under ``TRITON_INTERPRET=1`` in the tests); x, y, gamma of one dtype, x non-empty."""
    from .add_norm_triton import launch
    width = x.shape[-1]
    x_new = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    normed = torch.empty_like(x_new)
    launch(_rows(x), _rows(y), gamma.contiguous(), norm.weight, norm.bias, norm.eps,
           x_new.view(-1, width), normed.view(-1, width))
    return x_new, normed


def _rows(t: Tensor) -> Tensor:
    """(rows, C) with unit channel stride: a view where the layout allows, else a copy."""
    width = t.shape[-1]
    if t.stride(-1) != 1:
        t = t.contiguous()
    try:
        return t.view(-1, width)
    except RuntimeError:  # leading dims that do not flatten to one stride
        return t.reshape(-1, width)

"""The fused q/k path of the rotary attention layers (frame and global blocks).

Unfused, q and k each take six kernels per block in bf16 (cast to float32, LayerNorm, three
for the rotation, cast back); at 378x504 on an H200 that is ~5 ms of a 35 ms frame, mostly
LayerNorm kernels that handle 64-wide rows badly. ``norm_rope`` does it in one Triton launch
with the same float32 math, rounded once at the end.

``resolve`` turns the ``fused_kernels`` setting into a yes/no for a model on a device; the
layers fall back to the torch ops wherever the fused path does not apply (CPU, float32
models, no Triton, layers without q/k norms or rotation).
"""
from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor, nn

from ..config import FUSED_KERNEL_MODES

MODES = FUSED_KERNEL_MODES  # the fused_kernels setting's values, defined in config.py


@lru_cache(maxsize=1)
def triton_status() -> str:
    """'' when the Triton kernel can be imported, else why not."""
    try:
        from . import qk_norm_rope_triton  # noqa: F401  (imports triton)
    except Exception as exc:  # ImportError, or a broken Triton install
        return f"{type(exc).__name__}: {exc}"
    return ""


def resolve(mode: str, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether a model on ``device`` with aggregator ``dtype`` uses the fused kernel.

    ``auto``: on CUDA with a bfloat16 aggregator when Triton imports; ``on``: the same, but
    raise instead of falling back; ``off``: never.
    """
    if mode not in MODES:
        raise ValueError(f"fused_kernels must be one of {MODES}, got {mode!r}")
    if mode == "off":
        return False
    reason = ""
    if device.type != "cuda":
        reason = f"the model is on {device}, the kernel needs CUDA"
    elif dtype != torch.bfloat16:
        reason = f"the aggregator runs in {dtype}; the kernel is for bfloat16 (precision bf16)"
    elif triton_status():
        reason = f"Triton is not usable ({triton_status()})"
    if reason and mode == "on":
        raise RuntimeError(f"fused_kernels='on' but {reason}")
    return not reason


def norm_rope(qkv: Tensor, heads: int, q_norm: nn.LayerNorm, k_norm: nn.LayerNorm,
              tables: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """Normed, rotated q and k of every token, in ``qkv``'s dtype.

    Args:
        qkv: (rows, 3 * heads * d) output of the qkv projection (last dim contiguous).
        tables: the rope's float32 ``(cos (R, d), signed_sin (R, d), partner (d,))``; row r
            uses table row ``r % R`` (R = tokens per frame for the 2D rope of a batch of
            frames, R = rows for the 3D rope).
    Returns:
        q, k: contiguous (rows, heads, d).
    """
    from .qk_norm_rope_triton import launch
    rows, width = qkv.shape
    q = torch.empty((rows, heads, width // (3 * heads)), dtype=qkv.dtype, device=qkv.device)
    k = torch.empty_like(q)
    cos, sin, partner = tables
    launch(qkv, q, k, q_norm, k_norm, cos, sin, partner, heads=heads)
    return q, k

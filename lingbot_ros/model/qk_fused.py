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

from typing import Optional

import torch
from torch import Tensor, nn

from ..config import FUSED_KERNEL_MODES
from ..kernel_import import import_status
from .rope import rotate

MODES = FUSED_KERNEL_MODES  # the fused_kernels setting's values, defined in config.py


def triton_status() -> str:
    """'' when the Triton kernel can be imported, else why not."""
    return import_status(f"{__package__}.qk_norm_rope_triton")


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
              tables: tuple[Tensor, Tensor, Tensor], *, q_copies: int = 1,
              kv_dst: Optional[tuple[Tensor, Tensor, Tensor]] = None
              ) -> tuple[Tensor, Optional[Tensor]]:
    """Normed, rotated q and k of every token, in ``qkv``'s dtype.

    One Triton launch for CUDA tensors when Triton imports; elsewhere the same float32 math
    in torch ops (``norm_rope_torch``), so callers have one API on every device.

    Args:
        qkv: (rows, 3 * heads * d) output of the qkv projection (last dim contiguous).
        tables: the rope's float32 ``(cos (R, d), signed_sin (R, d), partner (d,))``; row r
            uses table row ``r % R`` (R = tokens per frame for the 2D rope of a batch of
            frames, R = rows for the 3D rope).
        q_copies: q is returned ``q_copies`` times, copy-major (the split-KV backend's
            repeated requests; saves a ``q.repeat``).
        kv_dst: ``(flat, k_rows, v_rows)``: ``flat`` a (slots, heads, d) cache layer in
            qkv's dtype (``KVStorage.layer_tokens``), ``k_rows``/``v_rows`` int64 (rows,) on
            its device. k goes to ``flat[k_rows]`` and v (qkv's third part, unchanged) to
            ``flat[v_rows]`` (replaces ``KVStorage.write``), and k is not returned.
    Returns:
        q: contiguous (q_copies * rows, heads, d); k: contiguous (rows, heads, d), or None
        with ``kv_dst``.
    """
    _check_options(qkv, heads, q_copies, kv_dst)
    fn = norm_rope_triton if qkv.is_cuda and not triton_status() else norm_rope_torch
    return fn(qkv, heads, q_norm, k_norm, tables, q_copies=q_copies, kv_dst=kv_dst)


def norm_rope_triton(qkv: Tensor, heads: int, q_norm: nn.LayerNorm, k_norm: nn.LayerNorm,
                     tables: tuple[Tensor, Tensor, Tensor], *, q_copies: int = 1,
                     kv_dst: Optional[tuple[Tensor, Tensor, Tensor]] = None
                     ) -> tuple[Tensor, Optional[Tensor]]:
    """``norm_rope`` as one Triton launch, whatever the device (CUDA, or CPU tensors under
    ``TRITON_INTERPRET=1`` in the tests); head_dim a power of 2."""
    from .qk_norm_rope_triton import launch
    rows, width = qkv.shape
    d = width // (3 * heads)
    q = torch.empty((q_copies * rows, heads, d), dtype=qkv.dtype, device=qkv.device)
    cos, sin, partner = tables
    if kv_dst is None:
        k = torch.empty((rows, heads, d), dtype=qkv.dtype, device=qkv.device)
        launch(qkv, q, k, q_norm, k_norm, cos, sin, partner, heads=heads, q_copies=q_copies)
        return q, k
    flat, k_rows, v_rows = kv_dst
    launch(qkv, q, flat, q_norm, k_norm, cos, sin, partner, heads=heads, q_copies=q_copies,
           kv_rows=(k_rows.contiguous(), v_rows.contiguous()))  # the kernel reads unit stride
    return q, None


def norm_rope_torch(qkv: Tensor, heads: int, q_norm: nn.LayerNorm, k_norm: nn.LayerNorm,
                    tables: tuple[Tensor, Tensor, Tensor], *, q_copies: int = 1,
                    kv_dst: Optional[tuple[Tensor, Tensor, Tensor]] = None
                    ) -> tuple[Tensor, Optional[Tensor]]:
    """``norm_rope`` in torch ops: the kernel's float32 math (norms, rotation, one rounding
    to qkv's dtype), the options as ``q.repeat`` and two ``index_copy_``. The fallback off
    CUDA and the kernel's test reference."""
    rows, width = qkv.shape
    d = width // (3 * heads)
    q, k, v = qkv.view(rows, 3, heads, d).unbind(1)  # (rows, heads, d) views
    cos, sin, partner = tables
    if cos.shape[0] != rows:  # per-frame tables of a batch of frames: row r uses r % R
        pick = torch.arange(rows, device=cos.device) % cos.shape[0]
        cos, sin = cos.index_select(0, pick), sin.index_select(0, pick)
    cos, sin = cos[:, None], sin[:, None]  # (rows, 1, d): one angle per token, every head
    q, k = (rotate(norm(t.float()), cos, sin, partner).to(qkv.dtype).contiguous()
            for norm, t in ((q_norm, q), (k_norm, k)))
    if q_copies > 1:
        q = q.repeat(q_copies, 1, 1)
    if kv_dst is None:
        return q, k
    flat, k_rows, v_rows = kv_dst
    flat.index_copy_(0, k_rows, k)
    flat.index_copy_(0, v_rows, v)
    return q, None


def _check_options(qkv: Tensor, heads: int, q_copies: int,
                   kv_dst: Optional[tuple[Tensor, Tensor, Tensor]]) -> None:
    """Shape/dtype checks of the options (host-side only: nothing syncs in a graph capture)."""
    if isinstance(q_copies, bool) or not isinstance(q_copies, int) or q_copies < 1:
        raise ValueError(f"norm_rope: q_copies must be a positive integer, got {q_copies!r}")
    if kv_dst is None:
        return
    flat, k_rows, v_rows = kv_dst
    rows, d = qkv.shape[0], qkv.shape[1] // (3 * heads)
    if flat.dim() != 3 or tuple(flat.shape[1:]) != (heads, d) or flat.stride(2) != 1:
        raise ValueError(f"norm_rope: kv_dst's flat must be (slots, {heads}, {d}) with unit "
                         f"channel stride, got {tuple(flat.shape)} strides {flat.stride()}")
    if flat.dtype != qkv.dtype or flat.device != qkv.device:
        raise ValueError(f"norm_rope: kv_dst's flat is {flat.dtype} on {flat.device}, qkv "
                         f"{qkv.dtype} on {qkv.device}")
    for name, idx in (("k_rows", k_rows), ("v_rows", v_rows)):
        if idx.shape != (rows,) or idx.dtype != torch.int64 or idx.device != qkv.device:
            raise ValueError(f"norm_rope: {name} must be int64 ({rows},) on {qkv.device}, got "
                             f"{idx.dtype} {tuple(idx.shape)} on {idx.device}")

"""Transformer building blocks shared by DINO, the aggregator and the camera head.

Parameter names follow the official checkpoints (``norm1``, ``attn.qkv``, ``attn.q_norm``,
``attn.k_norm``, ``attn.proj``, ``ls1.gamma``, ``norm2``, ``mlp.fc1``, ``mlp.fc2``,
``ls2.gamma``). Modules are stateless: everything a forward needs is an argument.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import add_norm, qk_fused
from .fused_kernels import UNFUSED, FusedKernels

RopeFn = Callable[[Tensor], Tensor]  # rotates q or k of shape (B, heads, N, head_dim)
# A rope may also offer ``tables()`` (float32 cos, signed sin, partner) for the fused kernel.


class Mlp(nn.Module):
    """fc1 -> exact GELU -> fc2."""

    def __init__(self, dim: int, hidden: int, out_dim: Optional[int] = None) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, out_dim or dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class LayerScale(nn.Module):
    """Per-channel residual scale ``x * gamma``."""

    def __init__(self, dim: int, init: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init)))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma

    def residual(self, x: Tensor, y: Tensor) -> Tensor:
        """``x + y * gamma`` in one kernel (rounded once)."""
        return torch.addcmul(x, y, self.gamma)


class Attention(nn.Module):
    """Multi-head attention weights (qkv, optional per-head q/k LayerNorm, proj).

    ``forward`` is plain full self-attention over a batch; ``project_qkv`` gives the normed
    per-token heads for callers that attend against a cache (global blocks, camera head).

    Precision (what bf16 autocast did in the reference, without its per-call casts): q and k
    are normed in float32 (the q/k norm weights stay float32) and stay float32 through RoPE;
    they meet v's dtype only at the attention kernel.

    ``fused.qk_rope`` (a per-call argument: the stream that runs the model decides, see
    ``FusedKernels``) runs norm + rotation + cast as one Triton kernel on CUDA tensors; the
    math is the same.
    """

    def __init__(self, dim: int, num_heads: int, qk_norm: bool = False,
                 norm_eps: float = 1e-5) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.q_norm = nn.LayerNorm(self.head_dim, eps=norm_eps) if qk_norm else nn.Identity()
        self.k_norm = nn.LayerNorm(self.head_dim, eps=norm_eps) if qk_norm else nn.Identity()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, rope: Optional[RopeFn] = None,
                fused: FusedKernels = UNFUSED) -> Tensor:
        """Self-attention of every sequence in the batch over itself.

        Args:
            x: (B, N, C) normed tokens.
            rope: optional rotation applied to q and k after their norms.
            fused: the stream's fused kernels (``qk_rope`` applies here).
        Returns:
            (B, N, C) projected attention output.
        """
        b, n, c = x.shape
        h, d = self.num_heads, self.head_dim
        qkv = self.qkv(x)  # (B, N, 3C)
        if fused.qk_rope and self._fusable(qkv, rope):
            q, k = qk_fused.norm_rope(qkv.view(b * n, 3 * c), h, self.q_norm, self.k_norm,
                                      rope.tables())  # (B*N, h, d) each
            q, k = (t.view(b, n, h, d).transpose(1, 2) for t in (q, k))  # (B, h, N, d) views
            v = qkv.view(b, n, 3, h, d)[:, :, 2].transpose(1, 2)  # (B, h, N, d) view
        else:
            q, k, v = qkv.view(b, n, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)  # (B, h, N, d)
            q, k = self.norm_qk(q, k)
            if rope is not None:
                q, k = rope(q), rope(k)
        out = sdpa(q.to(v.dtype), k.to(v.dtype), v)  # (B, h, N, d)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))  # (B, N, C)

    def project_qkv(self, x: Tensor, rope: Optional[RopeFn] = None,
                    fused: FusedKernels = UNFUSED, q_copies: int = 1,
                    kv_dst: Optional[tuple[Tensor, Tensor, Tensor]] = None
                    ) -> tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
        """Per-token heads of a flat token list.

        Args:
            x: (N, C) normed tokens.
            rope, fused: as in ``forward``.
            q_copies, kv_dst: with ``fused.kv_write`` and the fused kernel, q comes repeated
                ``q_copies`` times (a split-KV backend's requests) and k, v go straight to
                ``kv_dst`` = (flat cache layer, K rows, V rows) (see ``qk_fused.norm_rope``).
        Returns:
            q: (N, heads, head_dim), or (q_copies * N, ...) when the kernel repeated it;
            k, v: (N, heads, head_dim), or None when the kernel wrote them to ``kv_dst``.
            q and k went through their norms and the rotation, and are in v's dtype when
            the fused kernel ran (else float32 with q/k norms).
        """
        n = x.shape[0]
        qkv = self.qkv(x)  # (N, 3C)
        v = qkv.view(n, 3, self.num_heads, self.head_dim)[:, 2]  # (N, h, d)
        if fused.qk_rope and self._fusable(qkv, rope):
            if fused.kv_write and (q_copies > 1 or kv_dst is not None):
                q, k = qk_fused.norm_rope(qkv, self.num_heads, self.q_norm, self.k_norm,
                                          rope.tables(), q_copies=q_copies, kv_dst=kv_dst)
                return q, k, (None if kv_dst is not None else v)
            q, k = qk_fused.norm_rope(qkv, self.num_heads, self.q_norm, self.k_norm,
                                      rope.tables())
            return q, k, v
        q, k = qkv.view(n, 3, self.num_heads, self.head_dim).unbind(1)[:2]  # (N, h, d)
        q, k = self.norm_qk(q, k)
        if rope is not None:
            q, k = rope(q), rope(k)
        return q, k, v

    def _fusable(self, qkv: Tensor, rope: Optional[RopeFn]) -> bool:
        d = self.head_dim
        return (qkv.is_cuda and rope is not None and hasattr(rope, "tables")
                and not isinstance(self.q_norm, nn.Identity) and d & (d - 1) == 0)

    def norm_qk(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Per-head LayerNorm of q and k in float32 (identity without qk_norm)."""
        if isinstance(self.q_norm, nn.Identity):
            return q, k
        return self.q_norm(q.float()), self.k_norm(k.float())


# On CUDA, FlashAttention first: it reads q/k/v as strided views of the qkv projection and
# writes its output token-major, so a block copies nothing around its attention; cuDNN's
# kernel (PyTorch's first choice on Hopper) made q, k, v and the output contiguous: 4 copies
# per block, ~0.7 ms per frame. The others are there for dtypes FlashAttention lacks.
_CUDA_SDPA_ORDER = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                    SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def sdpa(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``F.scaled_dot_product_attention`` of (B, h, N, d) tensors, FlashAttention first on CUDA."""
    if not q.is_cuda:
        return F.scaled_dot_product_attention(q, k, v)
    try:
        order = sdpa_kernel(_CUDA_SDPA_ORDER, set_priority=True)
    except TypeError:  # torch < 2.6 has no priority order: keep PyTorch's own choice
        order = contextlib.nullcontext()
    with order:
        return F.scaled_dot_product_attention(q, k, v)


def attend(q: Tensor, k: Tensor, v: Tensor, key_mask: Optional[Tensor] = None) -> Tensor:
    """Non-causal attention of flat queries over flat keys (one sequence).

    Args:
        q: (Nq, heads, d); k, v: (Nk, heads, d).
        key_mask: optional bool, True for keys to attend to: (Nk,) for every query (a
            fixed-size buffer whose tail is not in use yet), or (Nq, Nk) per query (a
            batched step's block mask: each stream's query sees its own stream's keys).
    Returns:
        (Nq, heads * d).
    """
    if key_mask is not None:
        # The masked case is the graphed camera head: one query per head over a few hundred
        # float32 keys. Two batched matmuls and a softmax take ~10 us; SDPA's masked float32
        # kernel tiles for long query blocks and took 41 us per call (16 calls per frame).
        scores = torch.bmm(q.transpose(0, 1), k.permute(1, 2, 0))  # (h, Nq, Nk)
        scores = scores.mul_(q.shape[-1] ** -0.5).masked_fill_(~key_mask, float("-inf"))
        out = torch.bmm(scores.softmax(dim=-1), v.transpose(0, 1))  # (h, Nq, d)
        return out.transpose(0, 1).reshape(q.shape[0], -1)  # (Nq, h * d)
    out = F.scaled_dot_product_attention(  # (1, h, Nq, d)
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None])
    return out[0].transpose(0, 1).reshape(q.shape[0], -1)  # (Nq, h * d)


class Block(nn.Module):
    """Pre-norm transformer block with LayerScale: x + ls1(attn(norm1 x)); x + ls2(mlp(norm2 x))."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, *, qk_norm: bool = False,
                 norm_eps: float = 1e-5, layerscale_init: float = 1.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = Attention(dim, num_heads, qk_norm=qk_norm, norm_eps=norm_eps)
        self.ls1 = LayerScale(dim, layerscale_init)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.ls2 = LayerScale(dim, layerscale_init)

    def forward(self, x: Tensor, rope: Optional[RopeFn] = None,
                fused: FusedKernels = UNFUSED, normed: Optional[Tensor] = None,
                next_norm: Optional[nn.LayerNorm] = None):
        """Args:
            x: (B, N, C); rope, fused as in ``Attention.forward``.
            normed: ``norm1(x)`` when the block before computed it (chained, see below).
            next_norm: the LayerNorm that follows this block (the next block's ``norm1``):
                with ``fused.add_norm`` it is fused with this block's last residual.
        Returns:
            ``(x, next_norm(x))``: x (B, N, C), and its next norm (None without ``next_norm``).
        """
        h = self.norm1(x) if normed is None else normed
        return self.ffn_residual(x, self.attn(h, rope, fused), fused, next_norm)

    def ffn_residual(self, x: Tensor, attn_out: Tensor, fused: FusedKernels = UNFUSED,
                     next_norm: Optional[nn.LayerNorm] = None):
        """The block after its attention: ``x + ls1(attn_out)``, then the MLP half; returns
        as ``forward``: ``(x, next_norm(x) or None)``."""
        x, h = add_then_norm(x, attn_out, self.ls1.gamma, self.norm2, fused)
        return add_then_norm(x, self.mlp(h), self.ls2.gamma, next_norm, fused)


def add_then_norm(x: Tensor, y: Tensor, gamma: Tensor, norm: Optional[nn.LayerNorm],
                  fused: FusedKernels = UNFUSED) -> tuple[Tensor, Optional[Tensor]]:
    """``x + y * gamma`` (one rounding, as ``LayerScale.residual``) and ``norm`` of it (None
    without a norm): one fused kernel with ``fused.add_norm`` where it applies."""
    if norm is None:
        return torch.addcmul(x, y, gamma), None
    if fused.add_norm and add_norm.fusable(x, norm):
        return add_norm.add_scaled_norm(x, y, gamma, norm)
    x = torch.addcmul(x, y, gamma)
    return x, norm(x)

"""Merge the partial results of a split-KV attention call by their log-sum-exp.

Split-KV runs the same queries as S requests, each over 1/S of the keys (see
``flashinfer_paged``). Each request returns its softmax-normalised output ``o_s`` and the
log-sum-exp ``lse_s`` of its scores; the attention over all keys is

    sum_s w_s o_s,    w_s = 2^(lse_s - m) / sum_r 2^(lse_r - m),    m = max_s lse_s

with FlashInfer's lse in BASE 2 (``lse = log2 sum_j 2^(score_j * log2 e)``: its cascade
merge uses exp2/log2). ``merge_splits`` does this in one launch on CUDA (Triton) instead of
S - 1 pairwise ``flashinfer.merge_state`` calls, in float32, rounded once.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..kernel_import import import_status

MAX_COPIES = 16  # splits per merge; the kernel unrolls its loop over them
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def triton_status() -> str:
    """'' when the Triton merge kernel can be imported, else why not."""
    return import_status(f"{__package__}.split_merge_triton")


def merge_splits(out: Tensor, lse: Tensor, copies: int) -> Tensor:
    """The attention over all keys from ``copies`` partial results.

    Args:
        out: (copies * T, H, D) bf16/fp16/fp32 partial outputs, copy-major (rows
            s*T .. (s+1)*T - 1 are split s). The Triton kernel (CUDA, D a power of 2) reads
            any row/head strides; a non-contiguous last dim is copied first.
        lse: (copies * T, H) float32 base-2 log-sum-exp of each partial result; -inf where a
            split saw no key.
        copies: number of splits S, 1 .. MAX_COPIES.
    Returns:
        (T, H, D) contiguous, in ``out``'s dtype; 0 where every split's lse is -inf.
    """
    _check(out, lse, copies)
    dim = out.shape[2]
    if out.is_cuda and dim > 0 and not dim & (dim - 1) and not triton_status():
        return merge_triton(out, lse, copies)
    return _merge(out, lse, copies)


def merge_triton(out: Tensor, lse: Tensor, copies: int) -> Tensor:
    """``merge_splits`` as one Triton launch, whatever the device (CUDA, or CPU tensors
    under ``TRITON_INTERPRET=1`` in the tests); D a power of 2."""
    from .split_merge_triton import launch
    _check(out, lse, copies)
    tokens = out.shape[0] // copies
    dst = torch.empty((tokens,) + tuple(out.shape[1:]), dtype=out.dtype, device=out.device)
    launch(out if out.stride(2) == 1 else out.contiguous(),  # the kernel reads unit strides
           lse if lse.stride(1) == 1 else lse.contiguous(), dst, copies=copies)
    return dst


def merge_torch(out: Tensor, lse: Tensor, copies: int) -> Tensor:
    """``merge_splits`` in torch ops: CPU, no Triton, a head_dim that is no power of 2; the
    kernel's test reference."""
    _check(out, lse, copies)
    return _merge(out, lse, copies)


def _merge(out: Tensor, lse: Tensor, copies: int) -> Tensor:
    tokens, heads, dim = out.shape[0] // copies, out.shape[1], out.shape[2]
    parts = out.reshape(copies, tokens, heads, dim).float()  # (S, T, H, D)
    lse = lse.reshape(copies, tokens, heads)  # (S, T, H)
    top = lse.amax(dim=0)  # (T, H)
    top = torch.where(top == float("-inf"), 0.0, top)  # all -inf: weights 0, not NaN
    w = torch.exp2(lse - top)  # (S, T, H)
    total = w.sum(dim=0)
    total = torch.where(total > 0, total, 1.0)
    merged = (w[..., None] * parts).sum(dim=0) / total[..., None]  # (T, H, D) float32
    return merged.to(out.dtype)


def _check(out: Tensor, lse: Tensor, copies: int) -> None:
    if isinstance(copies, bool) or not isinstance(copies, int) or not 1 <= copies <= MAX_COPIES:
        raise ValueError(f"merge_splits: copies must be an integer in [1, {MAX_COPIES}], "
                         f"got {copies!r}")
    if out.dim() != 3 or lse.dim() != 2:
        raise ValueError(f"merge_splits: out must be (rows, heads, dim) and lse (rows, heads), "
                         f"got {tuple(out.shape)} and {tuple(lse.shape)}")
    if tuple(lse.shape) != tuple(out.shape[:2]) or out.shape[0] % copies:
        raise ValueError(f"merge_splits: out {tuple(out.shape)} and lse {tuple(lse.shape)} "
                         f"must share (copies * T, heads), copies = {copies}")
    if out.dtype not in OUT_DTYPES or lse.dtype != torch.float32:
        raise TypeError(f"merge_splits: out must be one of {OUT_DTYPES} and lse float32, "
                        f"got {out.dtype} and {lse.dtype}")
    if out.device != lse.device:
        raise ValueError(f"merge_splits: out on {out.device}, lse on {lse.device}")

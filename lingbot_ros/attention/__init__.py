"""Attention backends over the paged KV cache: ``torch_ref`` (oracle) and ``flashinfer``."""
from __future__ import annotations

import torch

from ..cache.storage import KVStorage
from ..config import ATTENTION_BACKENDS
from .backend import AttentionBackend
from .torch_ref import TorchRefBackend

BACKENDS = tuple(b for b in ATTENTION_BACKENDS if b != "auto")  # the concrete backends


def choose_backend(name: str, device: torch.device, dtype: torch.dtype) -> tuple[str, str]:
    """The backend ``name`` stands for, and why: ``auto`` picks flashinfer on CUDA with a
    bf16/fp16 cache when the package is installed, else torch_ref."""
    if name != "auto":
        return name, "configured"
    if device.type != "cuda":
        return "torch_ref", f"auto: device {device.type}"
    if dtype not in (torch.bfloat16, torch.float16):
        return "torch_ref", f"auto: {str(dtype).replace('torch.', '')} cache (flashinfer needs bf16)"
    from .flashinfer_paged import flashinfer_available
    if not flashinfer_available():
        return "torch_ref", "auto: flashinfer not installed (pip install -e '.[gpu]')"
    return "flashinfer", "auto: CUDA + flashinfer"


def check_backend(name: str, device: torch.device, dtype: torch.dtype,
                  variant: str = "auto") -> None:
    """Raise, with what to use instead, unless backend ``name`` (not ``auto``) can run a cache
    of ``dtype`` on ``device``; allocates nothing (a front end checks its settings first)."""
    if name == "flashinfer":
        from .flashinfer_paged import check_runnable
        check_runnable(device, dtype, variant)
    elif name != "torch_ref":
        raise ValueError(f"unknown attention backend {name!r}; choose one of {BACKENDS}")


def make_backend(name: str, storage: KVStorage, variant: str = "fa2",
                 graph_query_tokens: int | None = None, kv_splits: int = 1,
                 fused_merge: bool = False, graph_requests: int = 1) -> AttentionBackend:
    """Build a backend by name; ``variant`` (fa2 | fa3 | auto) applies to flashinfer only.

    ``graph_query_tokens``: build a flashinfer backend whose ``run`` can be captured in a
    CUDA graph, for steps of exactly that many query tokens (torch_ref cannot be captured:
    its gathered key count changes every step). ``kv_splits``: flashinfer split-KV (see
    ``flashinfer_paged``); torch_ref ignores it (one dense call). ``fused_merge``: the
    split-KV results merged in one Triton launch (``split_merge``), else pairwise by
    FlashInfer. ``graph_requests``: the streams (requests) of every step of a graph
    backend, whose ``graph_query_tokens`` they share equally (a batched step).
    """
    if name == "torch_ref":
        if graph_query_tokens is not None:
            raise ValueError("attention backend 'torch_ref' cannot run inside a CUDA graph; "
                             "use 'flashinfer' or switch CUDA graphs off")
        return TorchRefBackend(storage)
    if name == "flashinfer":
        from .flashinfer_paged import FlashInferPagedBackend  # lazy: flashinfer is optional
        return FlashInferPagedBackend(storage, variant, graph_query_tokens=graph_query_tokens,
                                      kv_splits=kv_splits, fused_merge=fused_merge,
                                      graph_requests=graph_requests)
    raise ValueError(f"unknown attention backend {name!r}; choose one of {BACKENDS}")


__all__ = ["AttentionBackend", "TorchRefBackend", "make_backend", "choose_backend", "check_backend",
           "BACKENDS"]

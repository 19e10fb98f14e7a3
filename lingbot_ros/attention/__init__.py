"""Attention backends over the paged KV cache: ``torch_ref`` (oracle) and ``flashinfer``."""
from __future__ import annotations

from ..cache.storage import KVStorage
from .backend import AttentionBackend
from .torch_ref import TorchRefBackend

BACKENDS = ("torch_ref", "flashinfer")


def make_backend(name: str, storage: KVStorage, variant: str = "fa2") -> AttentionBackend:
    """Build a backend by name; ``variant`` (fa2 | fa3 | auto) applies to flashinfer only."""
    if name == "torch_ref":
        return TorchRefBackend(storage)
    if name == "flashinfer":
        from .flashinfer_paged import FlashInferPagedBackend  # lazy: flashinfer is optional
        return FlashInferPagedBackend(storage, variant)
    raise ValueError(f"unknown attention backend {name!r}; choose one of {BACKENDS}")


__all__ = ["AttentionBackend", "TorchRefBackend", "make_backend", "BACKENDS"]

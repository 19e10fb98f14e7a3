"""The attention-backend protocol: ``plan(layout)`` once per frame step, ``run(layer, q)``
per global layer.

Shape contract (non-causal, RoPE already applied to q and to the cached K):

    q    (num_query_tokens, heads, head_dim)   the step's tokens, frame order; or that
                                               repeated ``query_copies`` times (a split-KV
                                               backend's requests, set by plan), copy-major
    out  (num_query_tokens, heads, head_dim)   same dtype as q

A layout holds one request per stream (``PagedKVLayout.concat``; one for a stream's own
step): the query rows are the streams' rows one after the other (``qo_indptr``), and each
request attends to its own pages only, so a stream's rows of ``out`` are those of its run
alone (torch_ref: equal on the CPU; flashinfer: within its bf16 bounds).

The backend reads K/V from the cache storage it was built with; ``plan`` freezes the visible
pages of the step for every layer, so nothing else happens in the per-layer loop.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from ..cache.layout import PagedKVLayout


@runtime_checkable
class AttentionBackend(Protocol):
    name: str
    query_copies: int  # run() also takes q repeated this many times (valid after plan)

    def plan(self, layout: PagedKVLayout) -> None:
        """Prepare the step's page table for all layers (no per-layer work later)."""

    def run(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """Attend the step's queries to the visible keys of ``layer``."""

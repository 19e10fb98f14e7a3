"""torch_ref: gather the visible pages, then dense SDPA. The oracle; runs on CPU and GPU.

A layout of several requests (one per stream, ``PagedKVLayout.concat``) runs one SDPA per
request over that request's own keys, on the same shapes as the stream run alone, so each
stream's rows equal its separate run; one request is one dense call, as ever.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..cache.layout import PagedKVLayout
from ..cache.storage import KVStorage


class TorchRefBackend:
    name = "torch_ref"
    query_copies = 1  # one dense call per request: q once

    def __init__(self, storage: KVStorage) -> None:
        self.storage = storage
        self._k_rows: torch.Tensor | None = None  # every request's K rows, request order
        self._v_rows: torch.Tensor | None = None
        self._num_query_tokens = 0
        self._qo_bounds: list[int] = []  # per request: query rows [b_i, b_i+1)
        self._kv_bounds: list[int] = []  # per request: its rows of _k_rows [b_i, b_i+1)

    def plan(self, layout: PagedKVLayout) -> None:
        rows = layout.token_slots().to(self.storage.device, non_blocking=True)
        self._k_rows, self._v_rows = rows, rows + layout.page_size
        self._num_query_tokens = layout.num_query_tokens
        self._qo_bounds = layout.qo_indptr.tolist()
        self._kv_bounds = layout.kv_token_indptr()

    def run(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        if self._k_rows is None:
            raise RuntimeError("torch_ref: run() before plan()")
        if q.shape[0] != self._num_query_tokens:
            raise ValueError(f"torch_ref: q has {q.shape[0]} tokens, the plan has "
                             f"{self._num_query_tokens}")
        flat = self.storage.layer_tokens(layer)  # (slots, heads, head_dim)
        if len(self._qo_bounds) == 2:  # one request
            return _attend(flat, q, self._k_rows, self._v_rows)
        qo, kv = self._qo_bounds, self._kv_bounds
        return torch.cat([  # each request gathers its own keys: the shapes of a lone stream
            _attend(flat, q[qo[i]:qo[i + 1]], self._k_rows[kv[i]:kv[i + 1]],
                    self._v_rows[kv[i]:kv[i + 1]]) for i in range(len(qo) - 1)])


def _attend(flat: torch.Tensor, q: torch.Tensor, k_rows: torch.Tensor,
            v_rows: torch.Tensor) -> torch.Tensor:
    """q (tokens, heads, head_dim) attends to the K/V rows of ``flat``; same shape out."""
    k = flat.index_select(0, k_rows)  # (num_kv_tokens, heads, head_dim)
    v = flat.index_select(0, v_rows)
    out = F.scaled_dot_product_attention(  # (1, heads, tokens, head_dim) each
        q.transpose(0, 1)[None], k.transpose(0, 1)[None].to(q.dtype),
        v.transpose(0, 1)[None].to(q.dtype))
    return out[0].transpose(0, 1)  # (tokens, heads, head_dim)

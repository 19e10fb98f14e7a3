"""torch_ref: gather the visible pages, then dense SDPA. The oracle; runs on CPU and GPU."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..cache.layout import PagedKVLayout
from ..cache.storage import KVStorage


class TorchRefBackend:
    name = "torch_ref"
    query_copies = 1  # one dense call: q once

    def __init__(self, storage: KVStorage) -> None:
        self.storage = storage
        self._k_rows: torch.Tensor | None = None
        self._v_rows: torch.Tensor | None = None
        self._num_query_tokens = 0

    def plan(self, layout: PagedKVLayout) -> None:
        rows = layout.token_slots().to(self.storage.device, non_blocking=True)
        self._k_rows, self._v_rows = rows, rows + layout.page_size
        self._num_query_tokens = layout.num_query_tokens

    def run(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        if self._k_rows is None:
            raise RuntimeError("torch_ref: run() before plan()")
        if q.shape[0] != self._num_query_tokens:
            raise ValueError(f"torch_ref: q has {q.shape[0]} tokens, the plan has "
                             f"{self._num_query_tokens}")
        flat = self.storage.layer_tokens(layer)  # (slots, heads, head_dim)
        k = flat.index_select(0, self._k_rows)  # (num_kv_tokens, heads, head_dim)
        v = flat.index_select(0, self._v_rows)
        out = F.scaled_dot_product_attention(  # (1, heads, tokens, head_dim) each
            q.transpose(0, 1)[None], k.transpose(0, 1)[None].to(q.dtype),
            v.transpose(0, 1)[None].to(q.dtype))
        return out[0].transpose(0, 1)  # (num_query_tokens, heads, head_dim)

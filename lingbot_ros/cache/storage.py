"""KVStorage: the one preallocated KV tensor of all global layers (a torch door).

Shape ``[layers, num_pages, 2, page_size, heads, head_dim]`` (FlashInfer NHD per layer:
``storage.layer(l)`` is the contiguous ``[num_pages, 2, page_size, heads, head_dim]`` that
the kernels take). Pages are zero-initialised so an unwritten slot can never hold NaN.
"""
from __future__ import annotations

import torch

from ..config import CacheConfig
from .errors import CacheFullError

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class KVStorage:
    def __init__(self, config: CacheConfig, num_pages: int) -> None:
        self.config = config
        self.dtype = TORCH_DTYPES[config.dtype]
        self.device = torch.device(config.device)
        self._check_budget(num_pages)
        self.data = self._allocate(num_pages)
        self._refresh_views()

    @property
    def num_pages(self) -> int:
        return self.data.shape[1]

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def layer(self, layer: int) -> torch.Tensor:
        """(num_pages, 2, page_size, heads, head_dim) view of one layer."""
        return self._layers[layer]

    def layer_tokens(self, layer: int) -> torch.Tensor:
        """(num_pages * 2 * page_size, heads, head_dim) view: one row per K or V slot.

        Slot of K for (page, offset) = (2 * page) * page_size + offset; V is + page_size.
        """
        return self._flat[layer]

    def write(self, layer: int, k_slots: torch.Tensor, v_slots: torch.Tensor,
              k: torch.Tensor, v: torch.Tensor) -> None:
        flat = self._flat[layer]
        flat.index_copy_(0, k_slots, k)
        flat.index_copy_(0, v_slots, v)

    def grow(self, num_new_pages: int) -> None:
        """Reallocate with ``num_new_pages`` more pages at the end, keeping the contents."""
        total = self.num_pages + num_new_pages
        self._check_budget(total)
        try:
            data = self._allocate(total)
        except torch.OutOfMemoryError as exc:  # a typed error naming the knob, never a bare OOM
            raise CacheFullError(
                f"out of device memory growing the KV pool to {total} pages; bound the "
                "trajectory memory with max_special_frames") from exc
        data[:, :self.num_pages].copy_(self.data)
        self.data = data
        self._refresh_views()

    def _allocate(self, num_pages: int) -> torch.Tensor:
        c = self.config
        return torch.zeros((c.num_layers, num_pages, 2, c.page_size, c.num_heads, c.head_dim),
                           dtype=self.dtype, device=self.device)

    def _check_budget(self, num_pages: int) -> None:
        budget = self.config.max_cache_bytes
        need = num_pages * self.config.bytes_per_page
        if budget is not None and need > budget:
            raise CacheFullError(
                f"KV pool of {num_pages} pages needs {need / 2**20:.1f} MiB, over "
                f"max_cache_bytes ({budget / 2**20:.1f} MiB); raise max_cache_bytes or bound "
                "the trajectory memory with max_special_frames")

    def _refresh_views(self) -> None:
        self._layers = [self.data[i] for i in range(self.config.num_layers)]
        c = self.config
        self._flat = [t.view(-1, c.num_heads, c.head_dim) for t in self._layers]

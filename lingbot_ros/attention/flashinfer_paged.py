"""flashinfer_paged: FlashInfer paged prefill over the cache pages. The only flashinfer importer.

One ``BatchPrefillWithPagedKVCacheWrapper`` (NHD, non-causal, no positional encoding: RoPE is
applied to q and k before the append) serves all layers: ``plan`` runs once per frame step
with CPU int32 index tensors (no device sync), ``run`` once per layer. The page size is the
exact number of patch tokens per frame; fa3 handles non-power-of-two pages and a partial last
page (checked against torch_ref on the GPU). flashinfer is imported lazily, so the package
works without it.
"""
from __future__ import annotations

import torch

from ..cache.layout import PagedKVLayout
from ..cache.storage import KVStorage

VARIANTS = ("fa2", "fa3", "auto")
WORKSPACE_BYTES = 128 * 1024 * 1024  # FlashInfer's recommended split-k workspace


def _import_flashinfer():
    try:
        import flashinfer
    except ImportError as exc:
        raise RuntimeError(
            "attention backend 'flashinfer' needs the flashinfer-python package (and a CUDA "
            "GPU); install it or use attention backend 'torch_ref'") from exc
    return flashinfer


class FlashInferPagedBackend:
    def __init__(self, storage: KVStorage, variant: str = "fa2",
                 workspace_bytes: int = WORKSPACE_BYTES) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"flashinfer variant must be one of {VARIANTS}, got {variant!r}")
        if storage.device.type != "cuda" or not torch.cuda.is_available():
            raise RuntimeError(
                f"attention backend 'flashinfer' needs the KV cache on a CUDA device, the cache "
                f"is on {storage.device}; use attention backend 'torch_ref' on the CPU")
        if storage.dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"attention backend 'flashinfer' needs a bfloat16 or float16 cache, "
                             f"got {storage.dtype}; use torch_ref for float32")
        if variant == "fa3" and torch.cuda.get_device_capability(storage.device)[0] < 9:
            raise RuntimeError("flashinfer variant 'fa3' needs a Hopper GPU (sm90); use 'fa2'")
        flashinfer = _import_flashinfer()
        self.name = f"flashinfer_{variant}"
        self.storage = storage
        self._workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=storage.device)
        self._wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            self._workspace, kv_layout="NHD", backend=variant)
        self._planned = False

    def plan(self, layout: PagedKVLayout) -> None:
        c = self.storage.config
        self._wrapper.plan(
            layout.qo_indptr, layout.kv_indptr, layout.kv_indices, layout.kv_last_page_len,
            num_qo_heads=c.num_heads, num_kv_heads=c.num_heads, head_dim_qk=c.head_dim,
            page_size=c.page_size, causal=False, pos_encoding_mode="NONE",
            q_data_type=self.storage.dtype, kv_data_type=self.storage.dtype)
        self._planned = True

    def run(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        if not self._planned:
            raise RuntimeError("flashinfer: run() before plan()")
        return self._wrapper.run(q, self.storage.layer(layer))

"""flashinfer_paged: FlashInfer paged prefill over the cache pages. The only flashinfer importer.

One ``BatchPrefillWithPagedKVCacheWrapper`` (NHD, non-causal, no positional encoding: RoPE is
applied to q and k before the append) serves all layers: ``plan`` runs once per frame step
(without waiting for the GPU: it may run while the previous step replays), ``run`` once per
layer. The page size is the
exact number of patch tokens per frame; fa3 handles non-power-of-two pages and a partial last
page (checked against torch_ref on the GPU). flashinfer is imported lazily, so the package
works without it.

CUDA-graph mode (``graph_query_tokens``): the wrapper owns fixed device buffers for the page
table, ``plan`` refills them on the host before a replay and the captured ``run`` reads them,
so one graph serves every step whatever its page count (up to ``MAX_GRAPH_PAGES``).

Split-KV (``kv_splits`` = S > 1): a step's ~1,000 queries x 16 heads make only ~100 query
tiles, less than one wave on a 132-SM GPU, each walking all ~70,000 keys. With S > 1 the
queries are repeated S times as S requests, each over a contiguous 1/S of the visible pages,
and the S partial results are merged by their log-sum-exp (FlashInfer ``merge_state``):
S times more tiles, the same arithmetic, one small merge per layer. The model hands ``run``
the queries already repeated (``query_copies``; the fused q/k kernel writes them so), and
with ``fused_merge`` the S results are merged in one Triton launch (``split_merge``) instead
of S - 1 pairwise ``merge_state`` calls.

Several streams (a layout of B requests, ``PagedKVLayout.concat``): B x S requests,
copy-major (copy s of every stream, then copy s + 1), each stream's pages cut in S parts,
so the merge over the B * T query rows is the one above. Graph mode takes
``graph_requests`` = B: its buffers hold B x S requests, one wrapper per batch size.
"""
from __future__ import annotations

import importlib.util

import torch

from ..cache.layout import PagedKVLayout
from ..cache.storage import KVStorage
from ..config import FLASHINFER_VARIANTS, check_kv_splits, check_positive_int
from .split_merge import merge_splits

WORKSPACE_BYTES = 128 * 1024 * 1024  # FlashInfer's recommended split-k workspace
MAX_GRAPH_PAGES = 1 << 16  # page-index buffer of a CUDA-graph wrapper (256 KiB)


def flashinfer_available() -> bool:
    """Whether the flashinfer package is installed (without importing it)."""
    return importlib.util.find_spec("flashinfer") is not None


def resolve_variant(variant: str, device: torch.device) -> str:
    """``auto`` -> fa3 on Hopper (sm90, where it is measured and parity-tested), else fa2."""
    if variant != "auto":
        return variant
    return "fa3" if torch.cuda.get_device_capability(device)[0] == 9 else "fa2"


def check_runnable(device: torch.device, dtype: torch.dtype, variant: str) -> str:
    """Raise (ValueError / RuntimeError, saying what to use instead) unless this backend can
    run a cache of ``dtype`` on ``device``; return the resolved variant. Imports nothing, so
    a front end can check its settings before allocating anything."""
    if variant not in FLASHINFER_VARIANTS:
        raise ValueError(f"flashinfer variant must be one of {FLASHINFER_VARIANTS}, "
                         f"got {variant!r}")
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(
            f"attention backend 'flashinfer' needs the KV cache on a CUDA device, the cache "
            f"is on {device}; use attention backend 'torch_ref' (or 'auto') on the CPU")
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"attention backend 'flashinfer' needs a bfloat16 or float16 cache, "
                         f"got {dtype}; use torch_ref for float32")
    variant = resolve_variant(variant, device)
    if variant == "fa3" and torch.cuda.get_device_capability(device)[0] < 9:
        raise RuntimeError("flashinfer variant 'fa3' needs a Hopper GPU (sm90); use 'fa2'")
    if not flashinfer_available():
        raise RuntimeError("attention backend 'flashinfer' needs the flashinfer-python "
                           "package (pip install -e '.[gpu]'); or use attention backend "
                           "'torch_ref'")
    return variant


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
                 workspace_bytes: int = WORKSPACE_BYTES,
                 graph_query_tokens: int | None = None, kv_splits: int = 1,
                 fused_merge: bool = False, graph_requests: int = 1) -> None:
        variant = check_runnable(storage.device, storage.dtype, variant)
        check_kv_splits(kv_splits)
        flashinfer = _import_flashinfer()
        self._merge_state = flashinfer.merge_state
        self.fused_merge = fused_merge
        self.kv_splits = kv_splits
        self.name = f"flashinfer_{variant}" + (f"_split{kv_splits}" if kv_splits > 1 else "")
        self.storage = storage
        self._workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=storage.device)
        self.graph_query_tokens = graph_query_tokens
        graph_buffers = {}
        self.graph_requests = graph_requests
        if graph_query_tokens is not None:
            check_positive_int("graph_query_tokens", graph_query_tokens)
            check_positive_int("graph_requests", graph_requests)
            if graph_query_tokens % graph_requests:
                raise ValueError(f"flashinfer graph backend: {graph_query_tokens} query tokens "
                                 f"do not split into {graph_requests} equal requests")
            self.name += "_graph" + (f"_b{graph_requests}" if graph_requests > 1 else "")
            per_request = graph_query_tokens // graph_requests
            requests = kv_splits * graph_requests

            def i32(values):
                return torch.tensor(values, dtype=torch.int32, device=storage.device)
            graph_buffers = dict(
                use_cuda_graph=True,
                qo_indptr_buf=i32([per_request * i for i in range(requests + 1)]),
                paged_kv_indptr_buf=i32([0] * (requests + 1)),
                paged_kv_indices_buf=i32([0] * MAX_GRAPH_PAGES),
                paged_kv_last_page_len_buf=i32([0] * requests))
        self._wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            self._workspace, kv_layout="NHD", backend=variant, **graph_buffers)
        self._planned = False
        self._plan_uploaded: torch.cuda.Event | None = None  # after the last plan's uploads
        self._splits = 1  # split-KV copies of the current plan (requests: x streams)
        self._query_tokens = 0  # the step's queries (one copy)

    @property
    def query_copies(self) -> int:
        """Split-KV requests of the current plan: ``run`` takes q once (and repeats it) or
        already repeated that many times (the fused q/k kernel writes it so)."""
        return self._splits

    def plan(self, layout: PagedKVLayout) -> None:
        """Plan the step of ``layout`` for every layer. Does not wait for the GPU, so it may
        run while the previous step still replays (``StreamRunner.prepare_next``): its
        uploads queue behind that step. The caller plans each step once."""
        c = self.storage.config
        if self.graph_query_tokens is not None:
            if layout.num_query_tokens != self.graph_query_tokens:
                raise ValueError(f"flashinfer graph backend: the step has "
                                 f"{layout.num_query_tokens} query tokens, the graph "
                                 f"{self.graph_query_tokens}")
            if layout.num_requests != self.graph_requests:
                raise ValueError(f"flashinfer graph backend: the step has "
                                 f"{layout.num_requests} requests (streams), the graph "
                                 f"{self.graph_requests}")
            if layout.num_pages > MAX_GRAPH_PAGES:
                raise ValueError(f"flashinfer graph backend: {layout.num_pages} visible pages "
                                 f"exceed {MAX_GRAPH_PAGES}; bound max_special_frames")
        fewest = min(layout.kv_indptr.diff().tolist())  # pages of the shortest request
        splits = self.kv_splits if self.graph_query_tokens is not None else min(
            self.kv_splits, fewest)
        if fewest < splits:
            raise ValueError(f"flashinfer graph backend: {fewest} visible pages "
                             f"cannot be split {splits} ways")
        qo_indptr, kv_indptr, kv_indices, last_page_len = self._split(layout, splits)
        # FlashInfer copies CPU page indices into its buffer with a blocking copy (a wait for
        # everything queued on the stream); handed over on the device, they are not waited
        # for. (The layout's indices are pinned: this upload is asynchronous.)
        kv_indices = kv_indices.to(self.storage.device, non_blocking=True)
        # The plan's metadata goes up from one pinned host buffer of the wrapper: the upload
        # of the previous plan must have left it before it is overwritten.
        if self._plan_uploaded is not None:
            self._plan_uploaded.synchronize()
        self._wrapper.plan(
            qo_indptr, kv_indptr, kv_indices, last_page_len,
            num_qo_heads=c.num_heads, num_kv_heads=c.num_heads, head_dim_qk=c.head_dim,
            page_size=c.page_size, causal=False, pos_encoding_mode="NONE",
            q_data_type=self.storage.dtype, kv_data_type=self.storage.dtype)
        self._plan_uploaded = torch.cuda.Event()
        self._plan_uploaded.record()
        self._splits = splits
        self._query_tokens = layout.num_query_tokens
        self._planned = True

    @staticmethod
    def _split(layout: PagedKVLayout, splits: int):
        """Page-table arrays (CPU int32: qo_indptr, kv_indptr, kv_indices, last_page_len) of
        ``splits`` x R requests, R = the layout's requests (one per stream).

        Copy-major: request s * R + r is copy s of request r's queries (rows
        s * T + qo_r .. of the repeated q, T = all queries) over the s-th contiguous 1/S of
        request r's pages; the page indices are reordered into that request order. One
        split returns the layout's own arrays; one request keeps its page indices.
        """
        if splits == 1:
            return (layout.qo_indptr, layout.kv_indptr, layout.kv_indices,
                    layout.kv_last_page_len)
        tokens, size = layout.num_query_tokens, layout.page_size
        qo, kv = layout.qo_indptr.tolist(), layout.kv_indptr.tolist()
        last_len = layout.kv_last_page_len.tolist()
        q_ptr, k_ptr, last, ranges = [0], [0], [], []
        for s in range(splits):
            for r, length in enumerate(last_len):
                n = kv[r + 1] - kv[r]
                lo, hi = kv[r] + round(s * n / splits), kv[r] + round((s + 1) * n / splits)
                ranges.append((lo, hi))
                q_ptr.append(s * tokens + qo[r + 1])
                k_ptr.append(k_ptr[-1] + hi - lo)
                last.append(length if s == splits - 1 else size)
        indices = layout.kv_indices
        if len(last_len) > 1:
            indices = torch.cat([indices[lo:hi] for lo, hi in ranges])
            indices = indices.pin_memory() if torch.cuda.is_available() else indices
        i32 = torch.int32
        return (torch.tensor(q_ptr, dtype=i32), torch.tensor(k_ptr, dtype=i32), indices,
                torch.tensor(last, dtype=i32))

    def run(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        if not self._planned:
            raise RuntimeError("flashinfer: run() before plan()")
        kv = self.storage.layer(layer)
        if self._splits == 1:
            return self._wrapper.run(q, kv)
        tokens = self._query_tokens
        if q.shape[0] == tokens:
            q = q.repeat(self._splits, 1, 1)  # (S*T, h, d): one copy per request
        elif q.shape[0] != self._splits * tokens:
            raise ValueError(f"flashinfer: q has {q.shape[0]} rows; the plan is for {tokens} "
                             f"queries (or {self._splits} copies of them)")
        out, lse = self._wrapper.run(q, kv, return_lse=True)  # (S*T, h, d), (S*T, h)
        if self.fused_merge:
            return merge_splits(out, lse, self._splits)
        parts = [(out[i * tokens:(i + 1) * tokens], lse[i * tokens:(i + 1) * tokens])
                 for i in range(self._splits)]  # (tokens, heads, dim), (tokens, heads) each
        while len(parts) > 1:  # pairwise log-sum-exp merges
            merged = [self._merge_state(*parts[i], *parts[i + 1])
                      for i in range(0, len(parts) - 1, 2)]
            parts = merged + ([parts[-1]] if len(parts) % 2 else [])
        return parts[0][0]

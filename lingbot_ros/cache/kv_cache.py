"""PagedKVCache: page table + storage + per-step layout, behind one small API.

    cache = PagedKVCache(CacheConfig(...))
    txn = cache.begin(1, StepKind.SPECULATIVE)   # FrameTxn: layout, write(), commit(), rollback()
    cache.info()                  # counters and bytes, for services and diagnostics
    cache.reset()                 # between sequences; keeps the allocation

``PagedKVCache(config, shared=pool)``: the stream's table draws its page ids from a
``SharedKVPool`` and writes into its storage (several streams, one tensor); every count of
``info()`` is then that of the same stream alone, ``bytes_reserved`` being its pages' share.

The bookkeeping (PageTable) is pure Python and O(1) per frame step; this class only turns its
plan into tensors once per step. Nothing here runs per layer except ``FrameTxn.write``.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from ..config import CacheConfig
from .frame_txn import FrameTxn
from .layout import PagedKVLayout
from .page_table import PageTable, StepPlan
from .shared_pool import SharedKVPool
from .special_stream import ceil_div
from .step_kind import StepKind
from .storage import KVStorage


@dataclass(frozen=True)
class StepForecast:
    """A step's plan and the tensors ``begin`` makes of it (``PagedKVCache.forecast``)."""

    plan: StepPlan
    layout: PagedKVLayout
    k_slots: torch.Tensor  # (num_query_tokens,) int64 K rows on the storage device
    v_slots: torch.Tensor


class PagedKVCache:
    def __init__(self, config: CacheConfig, shared: SharedKVPool | None = None) -> None:
        self.config = config
        self.shared = shared
        if shared is None:
            self.table = PageTable(config)
            self.storage = KVStorage(config, self.table.num_pages)
        else:
            self.table = shared.table_for(config)
            self.storage = shared.storage
            # a dropped cache (a replaced runner: a restore, a new size) gives its ids back
            weakref.finalize(self, shared.discard, self.table)
        self._offsets = torch.arange(config.page_size)  # patch-slot offsets within a page

    @property
    def frames_committed(self) -> int:
        """Committed frames since reset: the time index of the next frame."""
        return self.table.frames_committed

    def begin(self, num_frames: int = 1, kind: StepKind | str = StepKind.KEYFRAME,
              forecast: StepForecast | None = None) -> FrameTxn:
        """Start a step of ``num_frames`` frames; ``kind`` says what it sees (``StepKind``).

        ``forecast``: from ``forecast`` before the previous step closed; its layout and write
        rows are reused when the step's plan equals the forecast one (else built now);
        ``FrameTxn.as_forecast`` says which.

        Raises ``TransactionError`` if a step is pending, ``CacheError`` if the step cannot fit
        and ``CacheFullError`` if growing the special pool would exceed the byte budget; in
        every case the cache is unchanged.
        """
        short = self.table.special_pages_short(num_frames)  # every check, nothing mutated
        if short:
            chunk = ceil_div(self.config.special_chunk_frames * self.config.num_special,
                              self.config.page_size)
            self._grow_special(max(short, chunk))  # CacheFullError over budget, unchanged
        plan = self.table.begin(num_frames, kind)
        as_forecast = forecast is not None and forecast.plan == plan
        if not as_forecast:
            forecast = self._tensors_of(plan)
        return FrameTxn(self.table, self.storage, plan, forecast.layout, forecast.k_slots,
                        forecast.v_slots, as_forecast=as_forecast)

    def forecast(self, pending_commits: bool, num_frames: int = 1,
                 kind: StepKind | str = StepKind.KEYFRAME) -> StepForecast | None:
        """The next step's plan, layout and write rows, as ``begin`` will make them once the
        pending step is committed (``pending_commits``) or rolled back; None if it cannot
        tell (the special pool must grow first). The cache is unchanged; the write rows'
        upload is queued on the current stream without waiting for it."""
        plan = self.table.forecast(pending_commits, num_frames, kind)
        return None if plan is None else self._tensors_of(plan)

    def _tensors_of(self, plan: StepPlan) -> StepForecast:
        layout = PagedKVLayout.from_plan(plan, self.config.page_size,
                                         self.config.tokens_per_frame)
        k_slots = self._write_slots(plan)
        return StepForecast(plan, layout, k_slots, k_slots + self.config.page_size)

    def current_layout(self) -> PagedKVLayout | None:
        """Layout of what a query would see now (pending step included); None when empty.

        For inspection and tests; a step's own layout is ``FrameTxn.layout``.
        """
        pages, last_len, num_kv = self.table.visible()
        if not pages:
            return None
        return PagedKVLayout.from_pages(pages, last_len, num_kv, self.config.page_size, 0)

    def reset(self) -> None:
        """Forget all frames (a pending step is invalidated); the allocation is kept."""
        self.table.reset()

    def info(self) -> dict:
        """Counters of the committed state plus memory, for services and diagnostics."""
        stats = self.table.stats()
        pages_used = stats["patch_pages_used"] + stats["special_pages_used"]
        stats.update(
            num_layers=self.config.num_layers,
            bytes_used=pages_used * self.config.bytes_per_page,
            bytes_reserved=self._bytes_reserved(),
            max_special_frames=self.config.max_special_frames,
            dtype=self.config.dtype,
            device=str(self.storage.device),
        )
        return stats

    def state_dict(self, to_host: bool = True) -> tuple[dict, dict[str, torch.Tensor]]:
        """(plain data, tensors) of the committed state between steps: the page table's
        bookkeeping, and every layer's pages in logical order, copied to the host with the
        cache's dtype: ``patch`` (layers, scale + window frames, 2, page_size, heads,
        head_dim) and ``special`` (layers, pinned + live chunks, ...). No page ids: they are
        remapped when loaded. The device->host copy is the only wait (``to_host=False``:
        copies on the cache's device)."""
        state = self.table.state_dict()
        patch_pages, special_pages = self._logical_pages()
        data = self.storage.data
        tensors = {}
        for name, pages in (("patch", patch_pages), ("special", special_pages)):
            index = torch.tensor(pages, dtype=torch.int64, device=data.device)
            pages_of = data.index_select(1, index)
            tensors[name] = pages_of.cpu() if to_host else pages_of
        return state, tensors

    def load_state_dict(self, state: dict, tensors: dict[str, torch.Tensor]) -> None:
        """Load ``state_dict``'s output into this cache (reset first; the special pool grows
        to the saved page count). Pages are taken from the fresh pools in logical order, so
        the physical numbering may differ from the saved one. Raises ``CacheError`` /
        ValueError for a state that does not fit this cache's configuration."""
        cfg = self.config
        shape = (cfg.num_layers, 2, cfg.page_size, cfg.num_heads, cfg.head_dim)
        for name in ("patch", "special"):
            t = tensors[name]
            if t.ndim != 6 or (t.shape[0],) + tuple(t.shape[2:]) != shape:
                raise ValueError(f"{name} pages have shape {tuple(t.shape)}, this cache's "
                                 f"pages are (layers, n) + {shape[1:]} with {shape[0]} layers")
            if t.dtype != self.storage.dtype:
                raise ValueError(f"{name} pages are {t.dtype}, this cache holds "
                                 f"{self.storage.dtype}")
        grow = int(state["special_pages_total"]) - self.table.special_pool.num_total
        if grow > 0:
            self._grow_special(grow)
        patch_pages, special_pages = self.table.load_state_dict(state)
        if (len(patch_pages), len(special_pages)) != (tensors["patch"].shape[1],
                                                      tensors["special"].shape[1]):
            self.table.reset()
            raise ValueError("the page counts of the state and of its tensors differ")
        data = self.storage.data
        index = torch.tensor(patch_pages + special_pages, dtype=torch.int64, device=data.device)
        pages = torch.cat([tensors["patch"], tensors["special"]], dim=1).to(data.device)
        data.index_copy_(1, index, pages)

    def _logical_pages(self) -> tuple[list[int], list[int]]:
        """(patch pages: scale then window, special pages: pinned then live), committed."""
        t = self.table
        return t.patches.committed_pages(), t.specials.committed_pages()

    def check_invariants(self) -> None:
        self.table.check_invariants()
        if self.shared is not None:
            self.shared.check_invariants()
        elif self.storage.num_pages != self.table.num_pages:
            raise AssertionError("storage and page table disagree on the page count")

    def _grow_special(self, num_pages: int) -> None:
        """The special pool gets ``num_pages`` more pages (its own storage grows, or the
        shared pool grants them); ``CacheFullError`` over the budget, nothing changed."""
        if self.shared is None:
            self.storage.grow(num_pages)
            self.table.add_special_pages(num_pages)
        else:
            self.shared.grow_special(self.table, num_pages)

    def _bytes_reserved(self) -> int:
        """The storage's bytes; with a shared pool, those of this stream's pages."""
        if self.shared is None:
            return self.storage.nbytes
        return self.table.num_pages * self.config.bytes_per_page

    def _write_slots(self, plan) -> torch.Tensor:
        """(frames * tokens_per_frame,) int64 K rows the step's tokens go to, frame order."""
        ps, n = self.config.page_size, plan.num_frames
        special = torch.tensor([2 * ps * page + offset for page, offset in plan.special_slots],
                               dtype=torch.int64).view(n, self.config.num_special)
        patch_base = torch.tensor(plan.patch_pages, dtype=torch.int64) * (2 * ps)
        patch = patch_base[:, None] + self._offsets[None, :]  # (frames, page_size)
        rows = torch.cat([special, patch], dim=1).flatten()  # (frames * tokens_per_frame,)
        return rows.to(self.storage.device, non_blocking=True)

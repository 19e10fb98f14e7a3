"""PagedKVLayout: one step's page table as int32 tensors (a torch door).

Built once per frame step and consumed by ``AttentionBackend.plan``; every global layer
reuses it. A stream's step is one request; ``concat`` joins the steps of several streams
(one pool, one page table each) into one layout of one request per stream, FlashInfer's
batch format, so one batched call attends each stream's queries to its own keys only.
Index tensors live in (pinned, when CUDA is present) CPU memory, which is what FlashInfer's
``plan`` wants: it copies them host-side anyway, so device tensors would cost a
synchronisation per frame.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .page_table import StepPlan


@dataclass(frozen=True, slots=True)
class PagedKVLayout:
    page_size: int  # tokens per page
    num_query_tokens: int  # queries of the step: frames x (specials + patches)
    num_kv_tokens: int  # keys the queries attend to
    # R requests (one per stream; R = 1 for a stream's own step), request-major:
    qo_indptr: torch.Tensor  # (R + 1,) int32 CPU: [0, T_0, T_0 + T_1, ..] query rows
    kv_indptr: torch.Tensor  # (R + 1,) int32 CPU: [0, P_0, P_0 + P_1, ..] pages
    kv_indices: torch.Tensor  # (num_pages,) int32 CPU: per request scale | window | specials
    kv_last_page_len: torch.Tensor  # (R,) int32 CPU: 1..page_size

    @property
    def num_pages(self) -> int:
        return self.kv_indices.numel()

    @property
    def num_requests(self) -> int:
        return self.kv_last_page_len.numel()

    def kv_token_indptr(self) -> list[int]:
        """[0, K_0, K_0 + K_1, ..]: each request's visible keys, cumulated (R + 1 ints).

        A request of P pages sees (P - 1) * page_size + last_page_len keys (only its last
        page can be partial), 0 without pages; one request sees ``num_kv_tokens``.
        """
        if self.num_requests == 1:
            return [0, self.num_kv_tokens]
        return self._keys_of_pages()

    def _keys_of_pages(self) -> list[int]:
        pages = self.kv_indptr.tolist()
        last = self.kv_last_page_len.tolist()
        bounds = [0]
        for i, length in enumerate(last):
            count = pages[i + 1] - pages[i]
            bounds.append(bounds[-1] + (0 if count == 0 else (count - 1) * self.page_size
                                        + length))
        return bounds

    @staticmethod
    def concat(layouts: Sequence["PagedKVLayout"]) -> "PagedKVLayout":
        """One layout of every request of ``layouts``, in order (one per stream).

        The queries are the streams' query rows one after the other, the keys of request i
        are its own pages only. One layout is returned as is (a single stream's step is
        unchanged). The layouts must share the page size (one pool).
        """
        layouts = list(layouts)
        if not layouts:
            raise ValueError("PagedKVLayout.concat: no layouts (one per stream expected)")
        if len(layouts) == 1:
            return layouts[0]
        sizes = {lay.page_size for lay in layouts}
        if len(sizes) != 1:
            raise ValueError(f"PagedKVLayout.concat: the layouts have page sizes "
                             f"{sorted(sizes)}; streams batched together share one pool "
                             f"and one page size")
        qo, kv, last = [0], [0], []
        for lay in layouts:
            bounds = lay._keys_of_pages()
            if bounds[-1] != lay.num_kv_tokens:
                raise ValueError(f"PagedKVLayout.concat: a layout's pages hold {bounds[-1]} "
                                 f"keys but it says num_kv_tokens={lay.num_kv_tokens} (only "
                                 f"a request's last page may be partial)")
            qo += [qo[-1] + t for t in lay.qo_indptr.tolist()[1:]]
            kv += [kv[-1] + p for p in lay.kv_indptr.tolist()[1:]]
            last += lay.kv_last_page_len.tolist()
        return PagedKVLayout(
            page_size=layouts[0].page_size,
            num_query_tokens=sum(lay.num_query_tokens for lay in layouts),
            num_kv_tokens=sum(lay.num_kv_tokens for lay in layouts),
            qo_indptr=_i32(qo), kv_indptr=_i32(kv),
            kv_indices=_pinned(torch.cat([lay.kv_indices for lay in layouts])),
            kv_last_page_len=_i32(last))

    @staticmethod
    def from_plan(plan: StepPlan, page_size: int, tokens_per_frame: int) -> "PagedKVLayout":
        return PagedKVLayout.from_pages(plan.page_indices, plan.last_page_len, plan.num_kv_tokens,
                                        page_size, plan.num_frames * tokens_per_frame)

    @staticmethod
    def from_pages(pages, last_page_len: int, num_kv_tokens: int, page_size: int,
                   num_query_tokens: int) -> "PagedKVLayout":
        return PagedKVLayout(
            page_size=page_size,
            num_query_tokens=num_query_tokens,
            num_kv_tokens=num_kv_tokens,
            qo_indptr=_i32([0, num_query_tokens]),
            kv_indptr=_i32([0, len(pages)]),
            kv_indices=_i32(list(pages)),
            kv_last_page_len=_i32([last_page_len]),
        )

    def token_slots(self, request: int | None = None) -> torch.Tensor:
        """(num_kv_tokens,) int64 K-slot rows of every visible token, layout order; with
        ``request``, that request's rows only (kv_token_indptr()'s range of it).

        Row of K for (page, offset) = 2 * page * page_size + offset (see KVStorage); add
        page_size for V. Used by the torch reference backend to gather the pages.
        """
        if request is None and self.num_requests == 1:
            return self._slots(self.kv_indices, self.num_kv_tokens)
        if request is None:
            return torch.cat([self.token_slots(i) for i in range(self.num_requests)])
        if not 0 <= request < self.num_requests:
            raise ValueError(f"token_slots: request {request} of a layout of "
                             f"{self.num_requests} requests")
        pages = self.kv_indptr.tolist()
        bounds = self.kv_token_indptr()
        return self._slots(self.kv_indices[pages[request]:pages[request + 1]],
                           bounds[request + 1] - bounds[request])

    def _slots(self, page_ids: torch.Tensor, tokens: int) -> torch.Tensor:
        ps = self.page_size
        pages = page_ids.to(torch.int64)
        rows = (2 * ps * pages)[:, None] + torch.arange(ps)[None, :]  # (num_pages, page_size)
        return rows.flatten()[:tokens]


def _pinned(t: torch.Tensor) -> torch.Tensor:
    """Page-locked when CUDA is present: FlashInfer's ``plan`` uploads it asynchronously."""
    return t.pin_memory() if torch.cuda.is_available() else t


def _i32(values) -> torch.Tensor:
    return _pinned(torch.tensor(values, dtype=torch.int32))

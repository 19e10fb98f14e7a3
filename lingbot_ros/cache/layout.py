"""PagedKVLayout: one step's page table as int32 tensors (a torch door).

Built once per frame step and consumed by ``AttentionBackend.plan``; every global layer
reuses it. Index tensors live in (pinned, when CUDA is present) CPU memory, which is what
FlashInfer's ``plan`` wants: it copies them host-side anyway, so device tensors would cost a
synchronisation per frame.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .page_table import StepPlan


@dataclass(frozen=True, slots=True)
class PagedKVLayout:
    page_size: int  # tokens per page
    num_query_tokens: int  # queries of the step: frames x (specials + patches)
    num_kv_tokens: int  # keys the queries attend to
    qo_indptr: torch.Tensor  # (2,) int32 CPU: [0, num_query_tokens] (one request)
    kv_indptr: torch.Tensor  # (2,) int32 CPU: [0, num_pages]
    kv_indices: torch.Tensor  # (num_pages,) int32 CPU: scale | window | special pages
    kv_last_page_len: torch.Tensor  # (1,) int32 CPU: 1..page_size

    @property
    def num_pages(self) -> int:
        return self.kv_indices.numel()

    @staticmethod
    def from_plan(plan: StepPlan, page_size: int, tokens_per_frame: int) -> "PagedKVLayout":
        return PagedKVLayout.from_pages(plan.page_indices, plan.last_page_len, plan.num_kv_tokens,
                                        page_size, plan.num_frames * tokens_per_frame)

    @staticmethod
    def from_pages(pages, last_page_len: int, num_kv_tokens: int, page_size: int,
                   num_query_tokens: int) -> "PagedKVLayout":
        pin = torch.cuda.is_available()

        def i32(values):
            t = torch.tensor(values, dtype=torch.int32)
            return t.pin_memory() if pin else t

        return PagedKVLayout(
            page_size=page_size,
            num_query_tokens=num_query_tokens,
            num_kv_tokens=num_kv_tokens,
            qo_indptr=i32([0, num_query_tokens]),
            kv_indptr=i32([0, len(pages)]),
            kv_indices=i32(list(pages)),
            kv_last_page_len=i32([last_page_len]),
        )

    def token_slots(self) -> torch.Tensor:
        """(num_kv_tokens,) int64 K-slot rows of every visible token, layout order.

        Row of K for (page, offset) = 2 * page * page_size + offset (see KVStorage); add
        page_size for V. Used by the torch reference backend to gather the pages.
        """
        ps = self.page_size
        pages = self.kv_indices.to(torch.int64)
        rows = (2 * ps * pages)[:, None] + torch.arange(ps)[None, :]  # (num_pages, page_size)
        return rows.flatten()[:self.num_kv_tokens]

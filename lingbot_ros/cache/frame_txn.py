"""FrameTxn: the handle of one step of the paged cache (append -> attend -> commit | rollback).

    txn = cache.begin(1, StepKind.SPECULATIVE)   # checks first; raises before mutating
    backend.plan(txn.layout)                     # once per step
    for layer in range(num_layers):
        txn.write(layer, k, v)                   # (frames * tokens_per_frame, heads, head_dim)
        out = backend.run(layer, q)
    txn.commit()   # or txn.rollback(): exactly once

Used as a context manager it rolls back when the body raises. The handle holds the page table
and the storage, not the cache object, so the cache can keep a reference to its pending step
without a cycle that would keep gigabytes of storage alive until the garbage collector runs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Protocol

from .errors import TransactionError
from .layout import PagedKVLayout
from .page_table import PageTable, StepPlan
from .step_kind import StepKind
from .storage import KVStorage

if TYPE_CHECKING:  # pragma: no cover
    import torch


class KVWriter(Protocol):
    """Where a step's global layers put their K/V: a ``FrameTxn`` or a graph's static slots.

    ``write`` stores one layer's K/V. ``destination`` offers a fused kernel the place to
    write them itself: (flat K/V rows of the layer, K rows, V rows), or None when the
    writes must go through ``write`` (a ``FrameTxn``, whose writes are checked)."""

    def write(self, layer: int, k: "torch.Tensor", v: "torch.Tensor") -> None: ...

    def destination(self, layer: int
                    ) -> Optional[tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]]: ...


class FrameTxn:
    def __init__(self, table: PageTable, storage: KVStorage, plan: StepPlan,
                 layout: PagedKVLayout, k_slots: "torch.Tensor", v_slots: "torch.Tensor",
                 as_forecast: bool = False) -> None:
        self._table = table
        self._storage = storage
        self.plan = plan
        self.layout = layout
        self._k_slots = k_slots  # (num_query_tokens,) int64 on the storage device
        self._v_slots = v_slots
        config = storage.config
        self._shape = (layout.num_query_tokens, config.num_heads, config.head_dim)
        self.as_forecast = as_forecast  # layout and rows are the forecast's (planned ahead)
        self.state = "pending"

    @property
    def kind(self) -> StepKind:
        return self.plan.kind

    @property
    def first_frame(self) -> int:
        """Time index of the step's first frame (committed frames before the step)."""
        return self.plan.first_frame

    @property
    def num_frames(self) -> int:
        return self.plan.num_frames

    @property
    def write_rows(self) -> tuple["torch.Tensor", "torch.Tensor"]:
        """(K rows, V rows) of the storage's flat layer view the step writes, frame order."""
        return self._k_slots, self._v_slots

    def write(self, layer: int, k: "torch.Tensor", v: "torch.Tensor") -> None:
        """Store the step's keys and values of one layer, tokens in frame order.

        Each frame contributes ``num_special`` special tokens followed by ``page_size`` patch
        tokens; ``k`` and ``v`` are ``(num_frames * tokens_per_frame, heads, head_dim)``.
        """
        if self.state != "pending":
            raise TransactionError(f"cannot write: this step is already {self.state}")
        storage = self._storage
        for name, t in (("k", k), ("v", v)):
            if tuple(t.shape) != self._shape:
                raise TransactionError(
                    f"{name} has shape {tuple(t.shape)}, the step expects {self._shape} "
                    f"({self.num_frames} frame(s) x {storage.config.tokens_per_frame} tokens)")
            if t.dtype != storage.dtype or t.device != storage.data.device:
                raise TransactionError(
                    f"{name} is {t.dtype} on {t.device}, the cache stores {storage.dtype} on "
                    f"{storage.data.device}")
        if not 0 <= layer < storage.config.num_layers:
            raise TransactionError(f"layer {layer} outside [0, {storage.config.num_layers})")
        storage.write(layer, self._k_slots, self._v_slots, k, v)

    def destination(self, layer: int) -> None:
        """None: a step's K/V go through ``write``, which checks them (``KVWriter``)."""
        return None

    def commit(self) -> None:
        """Keep the step's frames; run the deferred window eviction."""
        self._finish("commit", "committed", self._table.commit)

    def rollback(self) -> None:
        """Forget the step's frames: pages, special tail and counters as before ``begin``."""
        self._finish("roll back", "rolled back", self._table.rollback)

    def _finish(self, verb: str, state: str, action) -> None:
        if self.state != "pending":
            raise TransactionError(f"cannot {verb}: this step is already {self.state}")
        action(self.plan.generation)
        self.state = state

    def __enter__(self) -> "FrameTxn":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.state != "pending":
            return
        if self.plan.generation == self._table.generation:
            self.rollback()
        else:
            self.state = "invalidated by reset"
        if exc_type is None:
            raise TransactionError("the step was neither committed nor rolled back; rolled back")

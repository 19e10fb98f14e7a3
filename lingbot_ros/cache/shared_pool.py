"""SharedKVPool: one KV storage whose pages several streams' page tables share (a torch door).

Each stream keeps its own ``PageTable`` (pools, FIFO order, counters, transactions) over ids
that a ``PageLedger`` grants it from the one ``KVStorage``; a ``PagedKVCache(config,
shared=pool)`` is then a stream's view of the pool. A table's pools keep their ids for its
lifetime: a stream's reset, rollback or restore only moves ids within its own pools, so the
other streams' pages and bytes are untouched. Growth (a stream's special pool is short) takes
free ledger ids, else grows the storage at its end (one reallocation, contents kept: every
stream's pages stay where they are; only the tensor address changes, between steps).

    pool = SharedKVPool(CacheConfig(...))          # shape, dtype, device, byte budget
    front = PagedKVCache(front_config, shared=pool)
    rear = PagedKVCache(rear_config, shared=pool)  # same page shape; window etc. may differ
    pool.check_invariants()                        # no id in two tables; free + owned = total

The byte budget (``max_cache_bytes`` of the pool's config) is for the whole pool; the streams'
own ``max_cache_bytes`` are not used.
"""
from __future__ import annotations

from ..config import CacheConfig
from .page_ledger import PageLedger
from .page_pool import PagePool
from .page_table import PageTable
from .storage import KVStorage

# What must agree for two tables to address one storage
SHAPE_FIELDS = ("num_layers", "num_heads", "head_dim", "page_size", "num_special", "dtype",
                "device")


class SharedKVPool:
    def __init__(self, config: CacheConfig) -> None:
        self.config = config
        self.storage = KVStorage(config, 0)
        self.ledger = PageLedger(0)
        self._tables: list[PageTable] = []

    @property
    def num_streams(self) -> int:
        return len(self._tables)

    def table_for(self, config: CacheConfig) -> PageTable:
        """A new stream's page table, its pools over granted ids (the storage grows as
        needed). ValueError if ``config``'s page shape differs from the pool's;
        ``CacheFullError`` over the pool's budget (nothing changed)."""
        self.check_compatible(config)
        num_patch, num_special = PageTable.pool_sizes(config)
        ids = self._grant(num_patch + num_special)
        table = PageTable(config, (PagePool.of_ids(ids[:num_patch]),
                                   PagePool.of_ids(ids[num_patch:])))
        self._tables.append(table)
        return table

    def grow_special(self, table: PageTable, num_pages: int) -> None:
        """Give ``table``'s special pool ``num_pages`` more ids (``CacheFullError`` over the
        budget, before anything changes)."""
        self._check_member(table)
        table.add_special_ids(self._grant(num_pages))

    def release(self, table: PageTable) -> None:
        """A stream is removed: its ids become free for the next grant (the storage keeps its
        size). The table must not be used afterwards."""
        self._check_member(table)
        self._tables = [t for t in self._tables if t is not table]
        table.reset()
        self.ledger.give_back(table.page_ids())

    def discard(self, table: PageTable) -> None:
        """``release``, unless ``table`` was released already (a dropped stream's cache
        calls it; an explicit ``release`` may have come first)."""
        if any(t is table for t in self._tables):
            self.release(table)

    def info(self) -> dict:
        return {"streams": len(self._tables), "pages_total": self.ledger.num_total,
                "pages_free": self.ledger.num_free, "bytes_reserved": self.storage.nbytes,
                "max_cache_bytes": self.config.max_cache_bytes}

    def check_compatible(self, config: CacheConfig) -> None:
        for name in SHAPE_FIELDS:
            mine, theirs = getattr(self.config, name), getattr(config, name)
            if mine != theirs:
                raise ValueError(f"a stream with {name}={theirs!r} cannot share a KV pool of "
                                 f"{name}={mine!r}: every stream of one pool has the same "
                                 f"{', '.join(SHAPE_FIELDS)}")

    def check_invariants(self) -> None:
        """Each table's own invariants; no id in two tables; free + owned = the storage."""
        for table in self._tables:
            table.check_invariants()
        self.ledger.check([t.page_ids() for t in self._tables])
        if self.storage.num_pages != self.ledger.num_total:
            raise AssertionError("the storage and the ledger disagree on the page count")

    def _grant(self, num_pages: int) -> list[int]:
        short = self.ledger.shortfall(num_pages)
        if short:
            self.storage.grow(short)  # raises CacheFullError over budget, before mutating
            self.ledger.extend(short)
        return self.ledger.grant(num_pages)

    def _check_member(self, table: PageTable) -> None:
        if not any(t is table for t in self._tables):
            raise ValueError("this page table was not made by this pool (or was released)")

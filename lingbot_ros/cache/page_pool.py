"""A pool of page ids with a FIFO free list. Pure Python: no torch.

Each stream (patch, special) owns one pool over its own ids of the storage: a contiguous range
for a cache alone (``PagePool(first_id, n)``), ids granted by a ``PageLedger`` when several
caches share one storage (``PagePool.of_ids``). Pages are taken from the front of the free
list and returned to its back, so recycling is FIFO; a rolled-back page goes back to the
front, which restores the list exactly.
"""
from __future__ import annotations

from collections import deque
from itertools import chain, islice

from .errors import CacheError


class PagePool:
    def __init__(self, first_id: int, num_pages: int) -> None:
        self._first = first_id  # where ``grow`` starts while the pool is empty
        self._ids: list[int] = list(range(first_id, first_id + num_pages))  # own ids, in order
        self._free: deque[int] = deque(self._ids)
        self._used: set[int] = set()

    @classmethod
    def of_ids(cls, ids) -> "PagePool":
        """A pool over the given ids (free list in that order); ValueError on a repeat."""
        pool = cls(0, 0)
        pool.add_ids(ids)
        return pool

    @property
    def num_total(self) -> int:
        return len(self._ids)

    def ids(self) -> list[int]:
        """Every id the pool owns, in the order ``reset`` frees them."""
        return list(self._ids)

    @property
    def num_free(self) -> int:
        return len(self._free)

    def can_allocate(self, num_pages: int) -> bool:
        return len(self._free) >= num_pages

    def allocate(self) -> int:
        if not self._free:
            raise CacheError("page pool exhausted (internal sizing error)")
        page = self._free.popleft()
        self._used.add(page)
        return page

    def release(self, page: int) -> None:
        """Return a page to the back of the free list (normal recycling)."""
        self._take_back(page)
        self._free.append(page)

    def unallocate(self, page: int) -> None:
        """Undo the latest ``allocate``: the page goes back to the front of the free list."""
        self._take_back(page)
        self._free.appendleft(page)

    def peek(self, num_pages: int, returned_front=(), returned_back=()) -> list[int]:
        """The next ``num_pages`` ids ``allocate`` would give once ``returned_front`` were
        un-allocated (in that order, as a rollback returns them) and ``returned_back``
        released. Changes nothing; the caller checks there are that many."""
        return list(islice(chain(returned_front, self._free, returned_back), num_pages))

    def grow(self, num_pages: int) -> None:
        """Add ``num_pages`` new ids right after the largest one (the storage grew at its end)."""
        start = max(self._ids) + 1 if self._ids else self._first
        self.add_ids(range(start, start + num_pages))

    def add_ids(self, ids) -> None:
        """Take ``ids`` (new to this pool) at the back of the free list, in that order."""
        ids = [int(i) for i in ids]
        if len(set(ids)) != len(ids) or set(ids) & set(self._ids):
            raise ValueError(f"page ids {ids} repeat or are already in the pool")
        self._ids.extend(ids)
        self._free.extend(ids)

    def reset(self) -> None:
        self._free = deque(self._ids)
        self._used.clear()

    def free_ids(self) -> list[int]:
        return list(self._free)

    def used_ids(self) -> set[int]:
        return set(self._used)

    def _take_back(self, page: int) -> None:
        if page not in self._used:
            raise CacheError(f"page {page} is not in use (double free?)")
        self._used.remove(page)

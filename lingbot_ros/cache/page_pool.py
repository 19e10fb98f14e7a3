"""A pool of page ids with a FIFO free list. Pure Python: no torch.

Each stream (patch, special) owns one pool over a contiguous id range of the shared storage.
Pages are taken from the front of the free list and returned to its back, so recycling is
FIFO; a rolled-back page goes back to the front, which restores the list exactly.
"""
from __future__ import annotations

from collections import deque
from itertools import chain, islice

from .errors import CacheError


class PagePool:
    def __init__(self, first_id: int, num_pages: int) -> None:
        self.first_id = first_id
        self.num_total = num_pages
        self._free: deque[int] = deque(range(first_id, first_id + num_pages))
        self._used: set[int] = set()

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
        """Add ``num_pages`` new ids right after the current range (the storage grew)."""
        start = self.first_id + self.num_total
        self._free.extend(range(start, start + num_pages))
        self.num_total += num_pages

    def reset(self) -> None:
        self._free = deque(range(self.first_id, self.first_id + self.num_total))
        self._used.clear()

    def free_ids(self) -> list[int]:
        return list(self._free)

    def used_ids(self) -> set[int]:
        return set(self._used)

    def _take_back(self, page: int) -> None:
        if page not in self._used:
            raise CacheError(f"page {page} is not in use (double free?)")
        self._used.remove(page)

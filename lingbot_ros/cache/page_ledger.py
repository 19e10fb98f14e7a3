"""PageLedger: which page ids of one shared storage no page table owns. Pure Python.

Several streams' page tables draw their pools' ids from one storage (``SharedKVPool``). The
ledger only counts: ids are granted lowest first, so the numbering is deterministic; it never
touches the storage, whose owner grows it by ``shortfall(n)`` pages and calls ``extend``
before ``grant``.

    ledger = PageLedger(0)
    ledger.extend(ledger.shortfall(5))   # the storage grew by that many pages at its end
    ids = ledger.grant(5)                # [0, 1, 2, 3, 4]
    ledger.give_back(ids)                # a stream was removed
"""
from __future__ import annotations

from bisect import insort

from .errors import CacheError


class PageLedger:
    def __init__(self, num_pages: int = 0) -> None:
        if not isinstance(num_pages, int) or num_pages < 0:
            raise ValueError(f"a ledger starts with a page count >= 0, got {num_pages!r}")
        self.num_total = num_pages
        self._free: list[int] = list(range(num_pages))  # sorted

    @property
    def num_free(self) -> int:
        return len(self._free)

    def free_ids(self) -> list[int]:
        return list(self._free)

    def shortfall(self, num_pages: int) -> int:
        """Pages the storage must grow by before ``grant(num_pages)``."""
        return max(0, num_pages - len(self._free))

    def extend(self, num_pages: int) -> None:
        """The storage grew by ``num_pages`` pages at its end: their ids become free."""
        self._free.extend(range(self.num_total, self.num_total + num_pages))
        self.num_total += num_pages

    def grant(self, num_pages: int) -> list[int]:
        """Take the ``num_pages`` lowest free ids; ``CacheError`` (nothing taken) if short."""
        if num_pages > len(self._free):
            raise CacheError(f"{num_pages} pages asked of a ledger with {len(self._free)} free "
                             "(grow the storage first: internal error)")
        ids, self._free = self._free[:num_pages], self._free[num_pages:]
        return ids

    def give_back(self, ids) -> None:
        """Ids no table owns any more (a stream was removed) become free again."""
        ids = [int(i) for i in ids]
        free = set(self._free)
        for i in ids:
            if i in free or not 0 <= i < self.num_total:
                raise CacheError(f"page {i} given back twice or not of this ledger")
            free.add(i)
            insort(self._free, i)

    def check(self, owned: list[list[int]]) -> None:
        """``owned``: each table's ids. No id in two tables or both owned and free; owned +
        free = every id of the storage. ``AssertionError`` otherwise."""
        seen: set[int] = set()
        for ids in owned:
            if len(set(ids)) != len(ids) or seen & set(ids):
                raise AssertionError(f"a page id is owned twice: {sorted(ids)}")
            seen |= set(ids)
        free = set(self._free)
        if len(free) != len(self._free) or free & seen:
            raise AssertionError("a page id is free twice, or both free and owned")
        if free | seen != set(range(self.num_total)):
            raise AssertionError(f"owned + free ids != the {self.num_total} ids of the storage")

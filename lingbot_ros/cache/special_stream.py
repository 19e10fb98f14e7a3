"""The special stream: 6 tokens per frame, packed append-only into pages. Pure Python.

Token g (counted since reset; frame k owns tokens 6k..6k+5) lives in chunk g // page_size at
offset g % page_size; each chunk is backed by one page. Only the last page may be partial.

    pinned chunks (hold the scale frames' specials)   live chunks (oldest first)   tail
    [c0][c1]                                          [c5][c6] ... [c41]          [c42: partial]

Trajectory-memory bound (``max_frames`` = M, beyond the reference): when a step commits, every
live chunk whose frames all lie outside the last M frames is released whole. Pinned chunks are
never released, so the anchor (scale) frames keep their specials. With ``max_frames=None``
nothing is ever released, as in the reference. Releases are deferred to ``commit()``, like
the patch window's eviction, and hidden from the step's own layout only for a keyframe step
(``hide_released``); a speculative step sees them until it is committed.
"""
from __future__ import annotations

from collections import deque

from .errors import CacheError
from .page_pool import PagePool


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class SpecialStream:
    def __init__(self, pool: PagePool, page_size: int, tokens_per_frame: int,
                 scale_frames: int, max_frames: int | None) -> None:
        self.pool = pool
        self.page_size = page_size
        self.tokens_per_frame = tokens_per_frame
        self.max_frames = max_frames
        self.num_pinned_chunks = ceil_div(scale_frames * tokens_per_frame, page_size)
        self.num_tokens = 0  # committed tokens since reset
        self._pinned: list[tuple[int, int]] = []  # (chunk, page)
        self._live: deque[tuple[int, int]] = deque()  # (chunk, page), oldest first
        self._pending: list[tuple[int, int]] = []  # chunks opened by the pending step
        self._pending_tokens = 0
        self._num_pending_release = 0  # live chunks the commit releases
        self._num_hidden = 0  # of those, hidden from the pending step

    @staticmethod
    def pages_for_bound(page_size: int, tokens_per_frame: int, scale_frames: int,
                        max_frames: int) -> int:
        """Pages that a bounded stream can ever hold at once (so it never grows)."""
        pinned = ceil_div(scale_frames * tokens_per_frame, page_size)
        step = max(1, scale_frames)  # largest step: the scale-frame phase
        return pinned + ceil_div((max_frames + step) * tokens_per_frame, page_size) + 1

    # -- queries ---------------------------------------------------------------------------
    @property
    def num_frames(self) -> int:
        return self.num_tokens // self.tokens_per_frame

    def pages_needed(self, num_frames: int) -> int:
        """New pages a step of ``num_frames`` frames opens; raise if the step is not allowed."""
        if self.max_frames is not None and num_frames > self.max_frames:
            raise CacheError(f"a step of {num_frames} frames exceeds max_special_frames "
                             f"({self.max_frames})")
        return len(self._new_chunks(num_frames))

    def visible(self) -> tuple[list[int], int]:
        """(pages in order, tokens in the last page), pending step included; ([], 0) if empty."""
        chunks = (self._pinned + list(self._live)[self._num_hidden:]
                  + self._pending)
        # Pinned chunks opened by the pending step belong before the live ones; they are
        # only ever opened while no live chunk exists, so appending keeps the order.
        if not chunks:
            return [], 0
        total = self.num_tokens + self._pending_tokens
        last_len = total - chunks[-1][0] * self.page_size
        return [p for _, p in chunks], last_len

    def committed_usage(self) -> tuple[int, int]:
        """(pages, retained tokens) of the committed state, ignoring a pending step."""
        chunks = self._pinned + list(self._live)
        tokens = sum(min((c + 1) * self.page_size, self.num_tokens) - c * self.page_size
                     for c, _ in chunks)
        return len(chunks), tokens

    def all_pages(self) -> list[int]:
        return [p for _, p in self._pinned + list(self._live) + self._pending]

    def committed_pages(self) -> list[int]:
        """Committed pages in logical order: pinned chunks, then live ones (oldest first)."""
        return [p for _, p in self._pinned + list(self._live)]

    def forecast(self, close: str | None, num_frames: int, hide_released: bool
                 ) -> tuple[list[tuple[int, int]], list[int], int] | None:
        """(slots, visible pages, last page length) that ``append`` would give once the
        pending step (if any) is closed (``close``: ``commit`` or ``rollback``), computed
        without changing anything; None if the pool lacks pages for it (it must grow
        first). Raises ``CacheError`` as ``pages_needed`` would then."""
        tokens, pinned, live = self.num_tokens, self._pinned, list(self._live)
        returned_front, released = [], []
        if close == "commit":
            released = [p for _, p in live[:self._num_pending_release]]
            live = live[self._num_pending_release:]
            tokens += self._pending_tokens
            pinned = pinned + [c for c in self._pending if c[0] < self.num_pinned_chunks]
            live += [c for c in self._pending if c[0] >= self.num_pinned_chunks]
        elif close == "rollback":
            returned_front = [p for _, p in self._pending]
        if self.max_frames is not None and num_frames > self.max_frames:
            raise CacheError(f"a step of {num_frames} frames exceeds max_special_frames "
                             f"({self.max_frames})")
        new_tokens = num_frames * self.tokens_per_frame
        chunks = range(ceil_div(tokens, self.page_size),
                       ceil_div(tokens + new_tokens, self.page_size))
        if len(chunks) > self.pool.num_free + len(returned_front) + len(released):
            return None
        pending = list(zip(chunks, self.pool.peek(len(chunks), returned_front, released)))
        hidden = (self._count_releasable(live, tokens // self.tokens_per_frame + num_frames)
                  if hide_released else 0)
        page_of = dict(([live[-1]] if live else pinned[-1:]) + pending)
        slots = [(page_of[g // self.page_size], g % self.page_size)
                 for g in range(tokens, tokens + new_tokens)]
        visible = pinned + live[hidden:] + pending
        return slots, [p for _, p in visible], tokens + new_tokens - visible[-1][0] * self.page_size

    # -- snapshot --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The committed tokens and chunks in logical order (no page ids). Between steps."""
        if self._pending:
            raise CacheError("a special step is pending: commit or roll it back first")
        return {"num_tokens": self.num_tokens, "pinned_chunks": [c for c, _ in self._pinned],
                "live_chunks": [c for c, _ in self._live]}

    def load_state_dict(self, state: dict) -> list[int]:
        """Take the chunks of ``state`` on this (empty, freshly reset) stream, one page each
        from the pool in logical order (pinned, then live); returns those pages in that order
        for the caller to fill."""
        pinned, live = list(state["pinned_chunks"]), list(state["live_chunks"])
        if self._pinned or self._live or self._pending or self.num_tokens:
            raise CacheError("load_state_dict needs an empty special stream")
        if not self.pool.can_allocate(len(pinned) + len(live)):
            raise CacheError(f"the special pool has {self.pool.num_free} free pages, the state "
                             f"needs {len(pinned) + len(live)}")
        self.num_tokens = int(state["num_tokens"])
        self._pinned = [(int(c), self.pool.allocate()) for c in pinned]
        self._live = deque((int(c), self.pool.allocate()) for c in live)
        return [p for _, p in self._pinned + list(self._live)]

    # -- transaction -----------------------------------------------------------------------
    def append(self, num_frames: int, hide_released: bool) -> list[tuple[int, int]]:
        """Open the pages the step needs; return its (page, offset) slots in token order.

        ``hide_released``: hide the chunks the commit releases from the step's view now.
        """
        new_chunks = self._new_chunks(num_frames)
        self._pending = [(c, self.pool.allocate()) for c in new_chunks]
        self._pending_tokens = num_frames * self.tokens_per_frame
        self._num_pending_release = self._count_releasable(self._live,
                                                            self.num_frames + num_frames)
        self._num_hidden = self._num_pending_release if hide_released else 0
        tail = [self._live[-1]] if self._live else self._pinned[-1:]
        page_of = dict(tail + self._pending)
        start = self.num_tokens
        return [(page_of[g // self.page_size], g % self.page_size)
                for g in range(start, start + self._pending_tokens)]

    def commit(self) -> None:
        for _ in range(self._num_pending_release):
            _, page = self._live.popleft()
            self.pool.release(page)
        for chunk, page in self._pending:
            (self._pinned if chunk < self.num_pinned_chunks else self._live).append((chunk, page))
        self.num_tokens += self._pending_tokens
        self._clear_pending()

    def rollback(self) -> None:
        for _, page in reversed(self._pending):
            self.pool.unallocate(page)
        self._clear_pending()

    def reset(self) -> None:
        self.num_tokens = 0
        self._pinned.clear()
        self._live.clear()
        self._clear_pending()

    # -- helpers ---------------------------------------------------------------------------
    def _new_chunks(self, num_frames: int) -> range:
        first_new = ceil_div(self.num_tokens, self.page_size)  # first chunk not yet opened
        end_token = self.num_tokens + num_frames * self.tokens_per_frame
        return range(first_new, ceil_div(end_token, self.page_size))

    def _count_releasable(self, live, frames_after_commit: int) -> int:
        """Chunks at the front of ``live`` whose frames all lie outside the last
        ``max_frames`` once ``frames_after_commit`` frames are committed."""
        if self.max_frames is None:
            return 0
        oldest_kept_frame = frames_after_commit - self.max_frames
        count = 0
        for chunk, _ in live:
            last_frame = ((chunk + 1) * self.page_size - 1) // self.tokens_per_frame
            if last_frame >= oldest_kept_frame:
                break
            count += 1
        return count

    def _clear_pending(self) -> None:
        self._pending = []
        self._pending_tokens = 0
        self._num_pending_release = 0
        self._num_hidden = 0

    def check_invariants(self) -> None:
        chunks = [c for c, _ in self._pinned + list(self._live)]
        if chunks != sorted(chunks) or len(set(chunks)) != len(chunks):
            raise AssertionError(f"special chunks out of order: {chunks}")
        if any(c >= self.num_pinned_chunks for c, _ in self._pinned):
            raise AssertionError("a live chunk sits in the pinned list")
        if self.num_tokens and chunks[-1] != (self.num_tokens - 1) // self.page_size:
            raise AssertionError("the tail chunk is not the one holding the last token")
        _, last_len = self.visible()
        if chunks and not 1 <= last_len <= self.page_size:
            raise AssertionError(f"last_page_len {last_len} outside [1, {self.page_size}]")

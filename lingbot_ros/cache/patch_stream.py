"""The patch stream: one page per frame; pinned scale pages plus a FIFO window. Pure Python.

    scale (pinned forever)        window (FIFO, last `window` frames incl. the current one)
    [f0][f1]..[f{S-1}]            [f{N-W+1}] ... [f{N}]

A step appends its frames at once. Eviction is *deferred*: the pages that leave the window
when the step commits stay allocated until ``commit()`` (so ``rollback()`` has nothing to
restore). Whether the step's own layout already hides them depends on its kind (``StepKind``):
a keyframe step does not see them (append, evict, attend), a speculative step does (append,
attend, and evict only if it is committed).
"""
from __future__ import annotations

from collections import deque

from .errors import CacheError
from .page_pool import PagePool


class PatchStream:
    def __init__(self, pool: PagePool, scale_frames: int, window: int) -> None:
        self.pool = pool
        self.scale_frames = scale_frames
        self.window = window
        self._scale: list[tuple[int, int]] = []  # (frame, page), pinned
        self._window: deque[tuple[int, int]] = deque()  # (frame, page), oldest first
        self._pending: list[tuple[int, int]] = []
        self._num_pending_pinned = 0
        self._num_pending_evict = 0  # window pages the commit releases
        self._num_hidden = 0  # of those, hidden from the pending step (keyframe steps: all)

    # -- queries ---------------------------------------------------------------------------
    @property
    def num_scale(self) -> int:
        return len(self._scale)

    @property
    def num_window(self) -> int:
        return len(self._window)

    def check_append(self, num_frames: int) -> None:
        """Raise ``CacheError`` if ``num_frames`` new frames cannot be appended; mutates nothing."""
        num_pinned = min(num_frames, self.scale_frames - len(self._scale))
        num_windowed = num_frames - num_pinned
        if num_windowed > self.window:
            raise CacheError(
                f"a step of {num_frames} frames would push {num_windowed - self.window} of its own "
                f"frames out of the window ({self.window}) before they are seen; use smaller steps "
                "or a larger window")
        if not self.pool.can_allocate(num_frames):
            raise CacheError(
                f"a step of {num_frames} frames needs {num_frames} free patch pages, "
                f"{self.pool.num_free} are free; multi-frame steps are meant for an empty cache "
                "(the scale-frame phase)")

    def visible_pages(self) -> list[int]:
        """Pages a query sees: scale pages, then window pages, oldest first (pending included)."""
        pinned = self._pending[:self._num_pending_pinned]
        windowed = self._pending[self._num_pending_pinned:]
        kept = list(self._window)[self._num_hidden:]
        return [p for _, p in self._scale + pinned + kept + windowed]

    def visible_frames(self) -> list[int]:
        pinned = self._pending[:self._num_pending_pinned]
        windowed = self._pending[self._num_pending_pinned:]
        kept = list(self._window)[self._num_hidden:]
        return [f for f, _ in self._scale + pinned + kept + windowed]

    def all_pages(self) -> list[int]:
        return [p for _, p in self._scale + list(self._window) + self._pending]

    # -- transaction -----------------------------------------------------------------------
    def append(self, first_frame: int, num_frames: int, hide_evicted: bool) -> list[int]:
        """Take one page per new frame (call ``check_append`` first).

        ``hide_evicted``: hide the pages that the commit will release from the step's own
        view now (a keyframe step); False keeps them visible until the commit (speculative).
        """
        pages = [self.pool.allocate() for _ in range(num_frames)]
        self._pending = [(first_frame + i, p) for i, p in enumerate(pages)]
        self._num_pending_pinned = min(num_frames, self.scale_frames - len(self._scale))
        num_windowed = num_frames - self._num_pending_pinned
        self._num_pending_evict = max(0, len(self._window) + num_windowed - self.window)
        self._num_hidden = self._num_pending_evict if hide_evicted else 0
        return pages

    def commit(self) -> None:
        for _ in range(self._num_pending_evict):  # the deferred eviction
            _, page = self._window.popleft()
            self.pool.release(page)
        self._scale.extend(self._pending[:self._num_pending_pinned])
        self._window.extend(self._pending[self._num_pending_pinned:])
        self._clear_pending()

    def rollback(self) -> None:
        for _, page in reversed(self._pending):
            self.pool.unallocate(page)
        self._clear_pending()

    def reset(self) -> None:
        self._scale.clear()
        self._window.clear()
        self._clear_pending()

    def _clear_pending(self) -> None:
        self._pending = []
        self._num_pending_pinned = 0
        self._num_pending_evict = 0
        self._num_hidden = 0

    def check_invariants(self) -> None:
        if len(self._scale) > self.scale_frames:
            raise AssertionError("more pinned pages than scale_frames")
        if len(self._window) > self.window:
            raise AssertionError("window holds more frames than `window`")
        if not self._pending and len(self._scale) < self.scale_frames and self._window:
            raise AssertionError("window frames exist while scale slots are still open")

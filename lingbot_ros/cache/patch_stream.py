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

    def committed_pages(self) -> list[int]:
        """Committed pages in logical order: scale, then window (oldest first)."""
        return [p for _, p in self._scale + list(self._window)]

    def forecast(self, close: str | None, first_frame: int, num_frames: int,
                 hide_evicted: bool) -> tuple[list[int], list[int]]:
        """(pages, visible pages) that ``append`` would give once the pending step (if any)
        is closed (``close``: ``commit`` or ``rollback``), computed without changing
        anything. Raises ``CacheError`` as ``check_append`` would then."""
        scale, window = self._scale, list(self._window)
        returned_front, released = [], []
        if close == "commit":
            evicted, window = window[:self._num_pending_evict], window[self._num_pending_evict:]
            released = [p for _, p in evicted]
            scale = scale + self._pending[:self._num_pending_pinned]
            window += self._pending[self._num_pending_pinned:]
        elif close == "rollback":
            returned_front = [p for _, p in self._pending]
        num_pinned = min(num_frames, self.scale_frames - len(scale))
        num_windowed = num_frames - num_pinned
        if num_windowed > self.window:
            raise CacheError(f"a step of {num_frames} frames does not fit the window")
        if self.pool.num_free + len(returned_front) + len(released) < num_frames:
            raise CacheError(f"a step of {num_frames} frames needs more free patch pages")
        pages = self.pool.peek(num_frames, returned_front, released)
        new = list(zip(range(first_frame, first_frame + num_frames), pages))
        hidden = max(0, len(window) + num_windowed - self.window) if hide_evicted else 0
        visible = scale + new[:num_pinned] + window[hidden:] + new[num_pinned:]
        return pages, [p for _, p in visible]

    # -- snapshot --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The committed frames in logical order (no page ids: a snapshot does not depend on
        the physical numbering). Only between steps."""
        if self._pending:
            raise CacheError("a patch step is pending: commit or roll it back first")
        return {"scale_frames": [f for f, _ in self._scale],
                "window_frames": [f for f, _ in self._window]}

    def load_state_dict(self, state: dict) -> list[int]:
        """Take the frames of ``state`` on this (empty, freshly reset) stream: one page per
        frame from the pool, in logical order (scale, then window). Returns those pages, in
        that order, for the caller to fill."""
        scale, window = list(state["scale_frames"]), list(state["window_frames"])
        if self._scale or self._window or self._pending:
            raise CacheError("load_state_dict needs an empty patch stream")
        if len(scale) > self.scale_frames or len(window) > self.window:
            raise CacheError(f"the state holds {len(scale)} scale and {len(window)} window "
                             f"frames; this stream keeps {self.scale_frames} and {self.window}")
        if not self.pool.can_allocate(len(scale) + len(window)):
            raise CacheError("the patch pool is too small for the state")
        self._scale = [(int(f), self.pool.allocate()) for f in scale]
        self._window = deque((int(f), self.pool.allocate()) for f in window)
        return [p for _, p in self._scale + list(self._window)]

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

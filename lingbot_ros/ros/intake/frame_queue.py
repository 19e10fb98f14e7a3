"""A bounded latest-wins queue between the image callback and the worker thread.

The callback never blocks: when the queue is full the *oldest* frame is dropped (the newest
is what a realtime consumer wants) and the drop is counted. Pure Python, thread-safe.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Optional


class FrameQueue:
    def __init__(self, maxlen: int) -> None:
        if maxlen < 1:
            raise ValueError(f"queue size must be >= 1, got {maxlen}")
        self._items: deque = deque()
        self._maxlen = maxlen
        self._cond = threading.Condition()
        self.num_dropped = 0  # frames pushed out by newer ones
        self.max_depth = 0  # the deepest the queue has been (it never exceeds maxlen)

    def put(self, item: Any) -> bool:
        """Enqueue; return True if an older frame was dropped to make room."""
        with self._cond:
            dropped = len(self._items) >= self._maxlen
            if dropped:
                self._items.popleft()
                self.num_dropped += 1
            self._items.append(item)
            self.max_depth = max(self.max_depth, len(self._items))
            self._cond.notify()
            return dropped

    def get(self, timeout: float) -> Optional[Any]:
        """The oldest queued frame, or None after ``timeout`` seconds without one."""
        with self._cond:
            if not self._items:
                self._cond.wait(timeout)
            return self._items.popleft() if self._items else None

    def clear(self) -> int:
        """Drop everything queued; return how many frames were dropped."""
        with self._cond:
            n = len(self._items)
            self._items.clear()
            return n

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

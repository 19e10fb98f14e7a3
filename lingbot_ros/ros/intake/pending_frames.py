"""PendingFrames: what the worker must remember about an image until its outcome is out.

The session is pipelined (``StreamingSession.submit`` / ``collect``): an image's outcome
comes back when the next image is queued behind it, and the anchor frames' all at once. So
each image the session accepted keeps its context (the message, the TF chain it is published
in, whether ~/depth is due) until its result or failure is published, found by the ticket
``submit`` returned (outcomes carry it; stamps may repeat, tickets never do). Outcomes come
in input order, so a frame whose ticket is older than an outcome's will never have one
(anchors a stream restart dropped, a frame lost to a CUDA error): ``pop_older`` takes those.
Bounded: past ``limit`` contexts the oldest age out.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, NamedTuple, Optional


class PendingFrame(NamedTuple):
    item: Any  # the queued image (message, receive time, generation)
    chain: Any  # the TF chain it is published in (FrameChain)
    depth_due: bool  # ~/depth was due when it was handed in


class PendingFrames:
    def __init__(self, limit: int = 256) -> None:
        self._frames: OrderedDict[int, PendingFrame] = OrderedDict()  # by ticket
        self._limit = limit

    def add(self, ticket: int, frame: PendingFrame) -> None:
        self._frames[ticket] = frame
        while len(self._frames) > self._limit:
            self._frames.popitem(last=False)

    def pop(self, ticket: int) -> Optional[PendingFrame]:
        return self._frames.pop(ticket, None)

    def pop_older(self, ticket: int) -> int:
        """Forget the contexts of tickets before ``ticket`` (an outcome for ``ticket`` is out:
        theirs never will be); return how many."""
        older = [t for t in self._frames if t < ticket]
        for t in older:
            del self._frames[t]
        return len(older)

    def clear(self) -> int:
        """Forget every context (a reset); return how many there were."""
        n = len(self._frames)
        self._frames.clear()
        return n

    def __len__(self) -> int:
        return len(self._frames)

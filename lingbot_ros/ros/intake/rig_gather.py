"""RigGather: a camera rig's frames, gathered into ticks (one frame per camera at most).

Each camera has one latest-frame slot: the image callbacks ``put`` into it (a frame still
waiting there is replaced by the newer one and counted as dropped for that camera); the rig's
worker ``take``s a tick, every waiting frame at once, when it is ready:

- every live camera has a frame waiting, or
- the oldest waiting frame is ``max_wait_ms`` old (the clock's time since its ``put``): the
  tick runs with the frames that are there, so a late or dead camera holds the others back
  at most that long (``cameras.max_wait_ms``).

A camera is live from the start and whenever a frame of it arrives; a tick that runs without
it while it was live (the wait ran out) counts a miss and makes it not live, so a camera that
stopped costs one ``max_wait_ms``, not one per tick. ``max_wait_ms`` 0: a tick is ready as
soon as any frame waits.

The clock is passed in (``time.monotonic`` in the node; a fake in tests, which never sleep).
Thread-safe (one lock): callbacks put from the executor, one worker takes. No rclpy, no torch.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

__all__ = ["GatherCounts", "RigGather", "Tick"]


@dataclass(frozen=True)
class Tick:
    """One step's frames: camera -> the item ``put`` for it, in the rig's name order."""

    frames: Mapping[str, Any]
    missing: tuple[str, ...]  # the rig's cameras without a frame in this tick
    timed_out: bool  # ran because the oldest frame waited max_wait_ms, not every live camera
    waited_s: float  # how long its oldest frame waited (clock seconds)


@dataclass(frozen=True)
class GatherCounts:
    """One camera's counters since the gather was made."""

    received: int  # frames put
    dropped: int  # replaced in their slot by a newer frame before a tick took them
    cleared: int  # dropped by ``clear`` (a reset of that camera or of the rig)
    taken: int  # frames that went out in a tick
    missed: int  # ticks that ran without it while it was live (its frame was late)
    live: bool


class RigGather:
    def __init__(self, names: Sequence[str], max_wait_ms: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        names = tuple(names)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"names must be one or more distinct camera names, got "
                             f"{list(names)}")
        if not max_wait_ms >= 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
        self.names = names
        self.max_wait_s = float(max_wait_ms) / 1000.0
        self._clock = clock
        self._cond = threading.Condition()
        self._slots: dict[str, tuple[Any, float]] = {}  # camera -> (item, put time)
        self._live = {n: True for n in names}
        self._counts = {n: dict(received=0, dropped=0, cleared=0, taken=0, missed=0)
                        for n in names}

    def put(self, camera: str, item: Any) -> bool:
        """Into ``camera``'s slot; True when an older waiting frame was dropped for it."""
        self._check(camera)
        with self._cond:
            counts = self._counts[camera]
            counts["received"] += 1
            dropped = camera in self._slots
            if dropped:
                counts["dropped"] += 1
            self._slots[camera] = (item, self._clock())
            self._live[camera] = True
            self._cond.notify_all()
            return dropped

    def ready(self) -> bool:
        with self._cond:
            return self._ready(self._clock())

    def deadline(self) -> Optional[float]:
        """The clock time at which the waiting frames run even without the others; None
        when nothing waits."""
        with self._cond:
            return self._deadline()

    def take(self) -> Optional[Tick]:
        """The tick if one is ready (its frames leave their slots), else None."""
        with self._cond:
            return self._take(self._clock())

    def wait(self, timeout_s: float) -> Optional[Tick]:
        """Block until a tick is ready (then take it) or ``timeout_s`` of the clock passed.
        The worker's loop; waits are bounded by the clock's remaining time, so a fake clock
        that does not move returns after ``timeout_s`` of real time at most."""
        end = time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            while True:
                now = self._clock()
                tick = self._take(now)
                if tick is not None:
                    return tick
                left = end - time.monotonic()
                if left <= 0:
                    return None
                deadline = self._deadline()
                self._cond.wait(left if deadline is None else
                                min(left, max(deadline - now, 0.0) + 1e-4))

    def clear(self, camera: Optional[str] = None) -> int:
        """Drop ``camera``'s waiting frame (None: every camera's), counted as cleared; the
        number dropped. A reset of a camera clears its slot."""
        if camera is not None:
            self._check(camera)
        with self._cond:
            names = self.names if camera is None else (camera,)
            n = 0
            for name in names:
                if self._slots.pop(name, None) is not None:
                    self._counts[name]["cleared"] += 1
                    n += 1
            return n

    def counts(self) -> dict[str, GatherCounts]:
        with self._cond:
            return {n: GatherCounts(**self._counts[n], live=self._live[n]) for n in self.names}

    def waiting(self) -> tuple[str, ...]:
        """The cameras with a frame in their slot, in name order."""
        with self._cond:
            return tuple(n for n in self.names if n in self._slots)

    # -- under the lock --------------------------------------------------------------------
    def _check(self, camera: str) -> None:
        if camera not in self._live:
            raise ValueError(f"no camera {camera!r} in the rig {list(self.names)}")

    def _deadline(self) -> Optional[float]:
        if not self._slots:
            return None
        return min(t for _, t in self._slots.values()) + self.max_wait_s

    def _ready(self, now: float) -> bool:
        if not self._slots:
            return False
        if all(n in self._slots for n in self.names if self._live[n]):
            return True
        return now >= self._deadline()

    def _take(self, now: float) -> Optional[Tick]:
        if not self._ready(now):
            return None
        complete = all(n in self._slots for n in self.names if self._live[n])
        oldest = min(t for _, t in self._slots.values())
        frames = {n: self._slots[n][0] for n in self.names if n in self._slots}
        missing = tuple(n for n in self.names if n not in self._slots)
        for n in frames:
            self._counts[n]["taken"] += 1
        for n in missing:
            if self._live[n]:  # it was waited for and did not come: not waited for again
                self._counts[n]["missed"] += 1  # until its next frame
                self._live[n] = False
        self._slots.clear()
        return Tick(frames=frames, missing=missing, timed_out=not complete,
                    waited_s=max(0.0, now - oldest))

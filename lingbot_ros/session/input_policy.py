"""InputPolicy: which handed-in frames a stream takes, by their stamp and model input size.

No torch (numpy for the stamp's type): a decision per frame, before anything else happens to it.

    policy = InputPolicy(config)
    stamp, restart = policy.check_stamp(stamp_ns)       # FrameRejected, or a SessionEvent / None
    restart = restart or policy.check_size(hw)          # (only without a stamp restart)
    ...                                                 # the frame goes in
    policy.accept(stamp, hw)

Stamps: strictly increasing integer nanoseconds. A repeated stamp is rejected
(``duplicate_stamp``); a stamp going backwards is rejected (``non_monotonic_stamp``, policy
``drop``) or restarts the stream (policy ``reset``); a forward jump over ``max_gap_s``
restarts it. Sizes: once the stream has a size, another one is rejected (``size_changed``)
until it has been seen ``size_change_frames`` times in a row, and then restarts the stream.
A stamp restart unlocks the size: that frame starts the new stream at any size.

Nothing changes for a rejected frame but the size-change count; ``accept`` records a frame
that went in, and ``reset`` forgets the stream (a reset or a restart).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..config import SessionConfig
from .types import FrameRejected


@dataclass(frozen=True)
class SessionEvent:
    """A restart the policy calls for on the current frame; the session applies it and
    queues it for ``pop_events`` (a front end logs it once and counts it)."""

    kind: str  # restart_stamp_backwards | restart_stamp_gap | restart_size_changed
    message: str  # one line naming what happened (both stamps, both sizes)


class InputPolicy:
    def __init__(self, config: SessionConfig) -> None:
        self.on_stamp_backwards = config.on_stamp_backwards
        self.max_gap_s = config.max_gap_s
        self.size_change_frames = config.size_change_frames
        self.reset()

    def reset(self) -> None:
        """Forget the stream: the next frame is taken at any stamp and any size."""
        self.last_stamp: Optional[int] = None
        self.stream_hw: Optional[tuple[int, int]] = None  # the locked size, None = any
        self._new_size: Optional[tuple[int, int]] = None  # a size seen since the last frame
        self._new_size_frames = 0  # ... that many times in a row
        self._gap_exempt = False  # the next frame may come after any gap (a restore)

    def check_stamp(self, stamp_ns) -> tuple[int, Optional[SessionEvent]]:
        """The stamp as int ns, and the restart it calls for or None; ``FrameRejected``
        (``bad_stamp``, ``duplicate_stamp``, ``non_monotonic_stamp``) if it cannot go in."""
        if not isinstance(stamp_ns, (int, np.integer)) or isinstance(stamp_ns, bool):
            raise FrameRejected("bad_stamp", f"stamp must be integer nanoseconds, got {stamp_ns!r}")
        stamp_ns, last = int(stamp_ns), self.last_stamp
        if last is None or stamp_ns > last:
            gap = self.max_gap_s
            if (last is not None and gap is not None and stamp_ns - last > gap * 1e9
                    and not self._gap_exempt):
                return stamp_ns, SessionEvent("restart_stamp_gap", (
                    f"stream restarted: stamp {stamp_ns} ns is {(stamp_ns - last) / 1e9:.3f} s "
                    f"after the previous frame's {last} ns (session.max_gap_s {gap:g})"))
            return stamp_ns, None
        if stamp_ns == last:
            raise FrameRejected("duplicate_stamp", f"stamp {stamp_ns} ns repeats the previous "
                                "frame's; frame skipped")
        if self.on_stamp_backwards == "drop":
            raise FrameRejected("non_monotonic_stamp", f"stamp {stamp_ns} ns is before the "
                                f"previous frame's {last} ns; frame skipped "
                                "(session.on_stamp_backwards: drop)")
        return stamp_ns, SessionEvent("restart_stamp_backwards", (
            f"stream restarted: stamp {stamp_ns} ns is before the previous frame's {last} ns "
            "(a looped bag or a restarted player?)"))

    def check_size(self, hw: tuple[int, int]) -> Optional[SessionEvent]:
        """The restart a model input size calls for, or None; ``FrameRejected``
        (``size_changed``) while a new size has not yet persisted for ``size_change_frames``
        frames in a row (this count is the one thing a rejected frame changes)."""
        old = self.stream_hw
        if old is None or hw == old:
            self._new_size, self._new_size_frames = None, 0
            return None
        need = self.size_change_frames
        self._new_size_frames = self._new_size_frames + 1 if hw == self._new_size else 1
        self._new_size = hw
        if self._new_size_frames >= need:
            return SessionEvent("restart_size_changed", (
                f"stream restarted: the model input changed from {old[0]}x{old[1]} to "
                f"{hw[0]}x{hw[1]} for {need} frame(s) in a row (the camera changed resolution "
                "or aspect)"))
        raise FrameRejected("size_changed", f"model input {hw[0]}x{hw[1]} differs from the "
                            f"stream's {old[0]}x{old[1]} ({self._new_size_frames} of "
                            f"{need} frame(s): the stream restarts on the new size if it "
                            "persists)")

    def accept(self, stamp_ns: int, hw: tuple[int, int]) -> None:
        """The frame went in: later stamps must follow it, later sizes equal it."""
        self.last_stamp = stamp_ns
        self.stream_hw = hw
        self._gap_exempt = False

    def exempt_next_gap(self) -> None:
        """The next frame that goes in may follow the last one after any forward gap (the
        stream was restored from a snapshot: the downtime is expected, not a new scene)."""
        self._gap_exempt = True

    def state_dict(self) -> dict:
        """The policy's state as JSON-able data (``load_state_dict`` takes it back)."""
        return {"last_stamp": self.last_stamp,
                "stream_hw": None if self.stream_hw is None else list(self.stream_hw),
                "new_size": None if self._new_size is None else list(self._new_size),
                "new_size_frames": self._new_size_frames}

    def load_state_dict(self, state: dict) -> None:
        """Take back ``state_dict``'s output. The next frame may then follow the saved last
        stamp after any forward gap (``exempt_next_gap``): a loaded policy is a restored
        stream's, whose downtime is no scene change."""
        def hw(value):
            return None if value is None else (int(value[0]), int(value[1]))

        last = state["last_stamp"]
        self.last_stamp = None if last is None else int(last)
        self.stream_hw = hw(state["stream_hw"])
        self._new_size = hw(state["new_size"])
        self._new_size_frames = int(state["new_size_frames"])
        self.exempt_next_gap()

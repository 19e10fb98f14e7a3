"""NodeTelemetry: the node's counters and last-frame facts, one owner, read as snapshots.

Written by the worker thread (each frame's fate, restarts, the session's info) and by the
image callback (received, dropped before the queue); read by ~/status, the services and
/diagnostics on the executor thread. Every write takes the lock; readers get a frozen
``TelemetrySnapshot`` and never see a half-updated counter set.

One counter per fact. The counters here are the fate of each image that reached the node,
since the node started: ``received``, then exactly one of ``dropped_<why>``,
``rejected_<reason>`` (by the image conversion or by the session), ``failed_<why>`` or
``processed`` (its outputs were published); plus ``resets`` and the session's restarts
(``restart_<kind>``). The session keeps its own counts since its last reset (``info()``:
``frames_processed``, ``frames_rejected``); the node does not read those.

Two timings, named apart: ``end_to_end_ms`` is the node's, from the image callback to the
frame's outputs published (diagnostics ``latency_*_ms``, ``TrackingStatus.latency_ms``);
the session's ``FrameResult.latency_ms`` / ``info().latency_ms`` is hand-in to result
(diagnostics ``compute_*_ms``, ``TrackingStatus.compute_ms``).
"""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Optional

from ...session import LatencyWindow, SessionInfo


@dataclass(frozen=True)
class TelemetrySnapshot:
    """The node's telemetry at one instant (immutable: safe to read from any thread)."""

    counters: Mapping[str, int]
    end_to_end_ms: Mapping[str, Optional[float]]  # callback -> published: count, last, p50...
    session_info: Optional[SessionInfo]  # the session's info() after the last frame
    last_error: str  # the last failure, "" once a frame succeeded after it
    last_image_time: Optional[float]  # time.monotonic() of the last image callback
    last_processed_time: Optional[float]  # ... of the last frame published
    last_restart: Optional[tuple[float, str]]  # (time.monotonic(), message) of the last restart
    last_fx: Optional[float]  # the predicted focal length of the last frame, input pixels
    last_input_hw: Optional[tuple[int, int]]  # the last processed image's size

    @property
    def received(self) -> int:
        return self.counters.get("received", 0)

    @property
    def processed(self) -> int:
        return self.counters.get("processed", 0)

    @property
    def dropped(self) -> int:
        return sum(v for k, v in self.counters.items() if k.startswith("dropped_"))

    @property
    def rejected(self) -> int:
        return sum(v for k, v in self.counters.items() if k.startswith("rejected_"))


class NodeTelemetry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: Counter = Counter()
        self._end_to_end = LatencyWindow()  # itself locked
        self._session_info: Optional[SessionInfo] = None
        self._last_error = ""
        self._last_image_time: Optional[float] = None
        self._last_processed_time: Optional[float] = None
        self._last_restart: Optional[tuple[float, str]] = None
        self._last_fx: Optional[float] = None
        self._last_input_hw: Optional[tuple[int, int]] = None

    # -- writers ------------------------------------------------------------------------------
    def count(self, key: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._counters[key] += n

    def image_received(self, now: float) -> None:
        with self._lock:
            self._counters["received"] += 1
            self._last_image_time = now

    def frame_published(self, now: float, end_to_end_ms: float, fx: float,
                        input_hw: tuple[int, int]) -> None:
        """A frame's outputs went out: counted ``processed``; the last failure is over."""
        with self._lock:
            self._counters["processed"] += 1
            self._last_error = ""
            self._last_processed_time = now
            self._last_fx, self._last_input_hw = fx, input_hw
        self._end_to_end.add(end_to_end_ms)

    def failed(self, counter: Optional[str], error: str, n: int = 1) -> None:
        """A failure of ``n`` images (counted under ``counter`` unless None); ``error`` until
        a frame succeeds."""
        with self._lock:
            if counter is not None:
                self._counters[counter] += n
            self._last_error = error

    def restarted(self, kind: str, message: str, now: float) -> None:
        with self._lock:
            self._counters[kind] += 1
            self._last_restart = (now, message)

    def set_session_info(self, info: Optional[SessionInfo]) -> None:
        """The session's ``info()`` (None: no session; a ``SessionInfo`` is frozen)."""
        with self._lock:
            self._session_info = info

    def stream_reset(self, info: Optional[SessionInfo]) -> None:
        """~/reset: counted; the end-to-end window restarts; the session's new info."""
        self._end_to_end.clear()
        with self._lock:
            self._counters["resets"] += 1
            self._session_info = info

    # -- readers ------------------------------------------------------------------------------
    def snapshot(self) -> TelemetrySnapshot:
        end_to_end = MappingProxyType(self._end_to_end.summary())
        with self._lock:
            return TelemetrySnapshot(
                counters=MappingProxyType(dict(self._counters)), end_to_end_ms=end_to_end,
                session_info=self._session_info, last_error=self._last_error,
                last_image_time=self._last_image_time,
                last_processed_time=self._last_processed_time, last_restart=self._last_restart,
                last_fx=self._last_fx, last_input_hw=self._last_input_hw)

    def session_info(self) -> Optional[SessionInfo]:
        """The session's last info (cheap: no copy, no percentiles)."""
        with self._lock:
            return self._session_info

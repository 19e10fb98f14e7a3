"""Latency statistics over a sliding window of recent steps (diagnostics), and host-time laps
per step phase (benchmarks)."""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Optional

import numpy as np


class LatencyWindow:
    """The last ``size`` step latencies (ms); percentiles on demand, O(1) per add.

    Thread-safe: a front end adds from its worker while its diagnostics timer reads a summary
    and its reset service clears it (a summary taken while another thread cleared the window
    once crashed the node).
    """

    def __init__(self, size: int = 1000) -> None:
        self._values: deque[float] = deque(maxlen=size)
        self._lock = threading.Lock()
        self.count = 0  # all adds since clear(), not only the kept ones
        self._version = 0  # + 1 at each change of the window
        self._summary: Optional[tuple[int, dict]] = None  # (version, summary()) last computed

    def add(self, ms: float) -> None:
        with self._lock:
            self._values.append(float(ms))
            self.count += 1
            self._version += 1

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self.count = 0
            self._version += 1

    def summary(self) -> dict:
        """``{count, last, p50, p90, p99, max}`` in ms over the kept window (None if empty).
        Computed once per change of the window: a diagnostics tick between two frames reads
        the last one (~50 us of percentiles over 1,000 values saved per tick)."""
        with self._lock:  # copy, then compute outside the lock
            version, cached = self._version, self._summary
            if cached is not None and cached[0] == version:
                return dict(cached[1])
            values = np.fromiter(self._values, dtype=np.float64, count=len(self._values))
            count = self.count
        if not values.size:
            out = {"count": 0, "last": None, "p50": None, "p90": None, "p99": None, "max": None}
        else:
            p50, p90, p99 = np.percentile(values, [50, 90, 99])
            out = {"count": count, "last": float(values[-1]), "p50": float(p50),
                   "p90": float(p90), "p99": float(p99), "max": float(values.max())}
        with self._lock:
            if self._version == version:  # no add meanwhile: it is the window's
                self._summary = (version, out)
        return dict(out)


    def state_dict(self) -> dict:
        """The kept latencies and the count, JSON-able (``load_state_dict`` takes it back)."""
        with self._lock:
            return {"values": list(self._values), "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        with self._lock:
            self._values.clear()
            self._values.extend(float(v) for v in state["values"])
            self.count = int(state["count"])
            self._version += 1


class HostLaps:
    """Host time of the named phases of each frame step (``StreamingSession.time_host``):
    where the time goes that the GPU waits for. Off by default; then a lap is one branch.

    Each ``lap(name)`` records the time since the previous lap (or ``mark``) of the same
    thread's step, so consecutive laps tile the step's host time.
    """

    def __init__(self) -> None:
        self.enabled = False
        self._last = 0.0
        self._ms: dict[str, list[float]] = {}

    def mark(self) -> None:
        """Start timing from now (the next lap measures from here)."""
        if self.enabled:
            self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        if self.enabled:
            now = time.perf_counter()
            self._ms.setdefault(name, []).append((now - self._last) * 1e3)
            self._last = now

    def take(self) -> dict[str, list[float]]:
        """Milliseconds per lap name, in the order first seen, since the last call."""
        ms, self._ms = self._ms, {}
        return ms

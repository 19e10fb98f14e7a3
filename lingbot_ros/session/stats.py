"""Latency statistics over a sliding window of recent steps (for diagnostics)."""
from __future__ import annotations

from collections import deque

import numpy as np


class LatencyWindow:
    """The last ``size`` step latencies (ms); percentiles on demand, O(1) per add."""

    def __init__(self, size: int = 1000) -> None:
        self._values: deque[float] = deque(maxlen=size)
        self.count = 0  # all adds since clear(), not only the kept ones

    def add(self, ms: float) -> None:
        self._values.append(float(ms))
        self.count += 1

    def clear(self) -> None:
        self._values.clear()
        self.count = 0

    def summary(self) -> dict:
        """``{count, last, p50, p90, p99, max}`` in ms over the kept window (None if empty)."""
        if not self._values:
            return {"count": 0, "last": None, "p50": None, "p90": None, "p99": None, "max": None}
        v = np.fromiter(self._values, dtype=np.float64)
        p50, p90, p99 = np.percentile(v, [50, 90, 99])
        return {"count": self.count, "last": self._values[-1], "p50": float(p50),
                "p90": float(p90), "p99": float(p99), "max": float(v.max())}

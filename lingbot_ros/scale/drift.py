"""Scale drift: the recent samples against the applied (LOCKED) scale.

Once LOCKED, the applied scale follows the median of the last ``max_samples`` samples at most
``max_change_per_s``. When the true sensor/model ratio changes (a new lens focus, another
room, a depth camera re-calibrated), that median flips only after half its window has seen
the new ratio, and the applied value then needs ``|log ratio| / max_change_per_s`` seconds to
get there (a 1.5x change: ~50 frames, then 40 s at 1 %/s). Meanwhile every output is off by
the ratio. The detector says so.

At each sample while LOCKED, the **recent** samples are the last ``min_samples`` (as many as
a lock needs). Their median's disagreement with the applied value is counted in sigmas: the
standard error of that median, ``1.2533 x spread / sqrt(n)``, where ``spread`` is the recent
samples' own 1.4826 x MAD of log scale, at least ``SPREAD_FLOOR``. The floor keeps noiseless
samples from turning a rounding difference into infinite sigmas: with the defaults a
disagreement under ~1 % never warns. A disagreement beyond ``drift_warn_sigma`` that lasts
``drift_warn_s`` seconds (of the samples' stamps) without a break is a drift warning. One
agreeing sample, or leaving LOCKED, ends it.

Numpy-free: the recent window is a handful of floats.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional

from .samples import MAD_TO_SIGMA, MEDIAN_EFFICIENCY, span_s

__all__ = ["ScaleDrift", "SPREAD_FLOOR", "measure_drift"]

SPREAD_FLOOR = 0.005  # per-sample relative spread assumed at least (0.5 %): see the docstring


@dataclass(frozen=True, slots=True)
class ScaleDrift:
    """The recent samples against the applied scale, at the last sample (LOCKED only)."""

    recent_metres_per_unit: float  # the median of the recent samples
    applied_metres_per_unit: float  # what the outputs get
    sigmas: float  # (recent - applied) in log, over the recent median's standard error
    samples: int  # recent samples compared
    since_ns: Optional[int]  # stamp of the disagreement's first sample (None: they agree)
    for_s: float  # how long it has lasted, to the last sample (0.0 while they agree)
    warning: bool  # beyond drift_warn_sigma for drift_warn_s

    @property
    def text(self) -> str:
        """e.g. "the last 10 samples give 2.5 m per model unit, the applied scale is 3.75
        (-33 %, 41 sigma) for 1.5 s"."""
        change = 100.0 * (self.recent_metres_per_unit / self.applied_metres_per_unit - 1.0)
        return (f"the last {self.samples} samples give {self.recent_metres_per_unit:.4g} m "
                f"per model unit, the applied scale is {self.applied_metres_per_unit:.4g} "
                f"({change:+.0f} %, {abs(self.sigmas):.0f} sigma) for {self.for_s:.1f} s")


def _median(sorted_values: list[float]) -> float:
    n = len(sorted_values)
    mid = n // 2
    return sorted_values[mid] if n % 2 else 0.5 * (sorted_values[mid - 1] + sorted_values[mid])


def measure_drift(recent_logs: Iterable[float], applied_log: float, stamp_ns: Optional[int],
                  since_ns: Optional[int], warn_sigma: float, warn_s: float) -> ScaleDrift:
    """The drift at the sample stamped ``stamp_ns``: ``recent_logs`` the recent samples' log
    scales (at least one), ``applied_log`` the applied value after this sample, ``since_ns``
    the start of the disagreement so far (None: none). The result's ``since_ns`` is the one
    to pass at the next sample. The same inputs give the same result (a restored estimator
    recomputes it)."""
    logs = sorted(recent_logs)
    median = _median(logs)
    spread = MAD_TO_SIGMA * _median(sorted(abs(v - median) for v in logs))
    error = MEDIAN_EFFICIENCY * max(spread, SPREAD_FLOOR) / math.sqrt(len(logs))
    sigmas = (median - applied_log) / error
    disagree = abs(sigmas) > warn_sigma and stamp_ns is not None
    if disagree:
        if since_ns is None or stamp_ns < since_ns:  # a new one (or stamps went back)
            since_ns = stamp_ns
        for_s = span_s(since_ns, stamp_ns)
    else:
        since_ns, for_s = None, 0.0
    return ScaleDrift(recent_metres_per_unit=math.exp(median),
                      applied_metres_per_unit=math.exp(applied_log), sigmas=sigmas,
                      samples=len(logs), since_ns=since_ns, for_s=for_s,
                      warning=disagree and for_s >= warn_s)

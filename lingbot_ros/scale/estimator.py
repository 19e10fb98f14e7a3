"""One stream's metric scale: robust, in log scale, with states and bounded refinement.

``ScaleEstimator`` (one per stream, owned by whoever feeds it frames) turns samples into an
estimate of metres per model unit:

* **robust, in log scale** -- the estimate is the median of the log samples of a sliding
  window (``max_samples``); its spread is 1.4826 x MAD (a relative standard deviation);
* **states** -- UNKNOWN (no sample) -> CONVERGING -> LOCKED, which needs at least
  ``min_samples`` samples and a spread below ``lock_spread``. ``none`` stays UNKNOWN;
  ``fixed`` is LOCKED at once at ``factor``;
* **continuity** -- once LOCKED, the applied value follows the window's median at most
  ``max_change_per_s`` (in log, per second of *sample stamps*): never a jump. A segment
  rollover keeps the estimate; ``reset()`` (a new stream) starts a new one;
* **stale detector** -- ``stale_reason(now_s)`` names why a source gave nothing for
  ``stale_timeout_s`` (the last rejection reason, or that no input ever came);
* **drift detector** -- once LOCKED, each snapshot's ``drift`` compares the last
  ``min_samples`` samples with the applied value, and ``drift_warning`` says so when they
  disagree beyond ``drift_warn_sigma`` for ``drift_warn_s`` (drift.py);
* **snapshots** -- ``state_dict()`` / ``load_state_dict()``: the whole estimate as plain JSON
  values (a stream snapshot's part); a restored estimator gives bit-identical estimates on the
  same next samples. A state saved under other estimate settings (source, ``factor``,
  ``camera_height_m``, ``depth_unit_m``, ``min_samples``, ``lock_spread``, ``max_samples``,
  ``max_change_per_s``) is refused with a ValueError naming them.

Readers get immutable :class:`ScaleEstimate` snapshots. Numpy only.
"""
from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass
from enum import Enum
from typing import Optional

import numpy as np

from .config import ScaleConfig
from .drift import ScaleDrift, measure_drift
from .json_floats import float_from_json, float_to_json
from .sources import source_kind
from .samples import (MAD_TO_SIGMA, MEDIAN_EFFICIENCY, Rejection,
                      SampleResult, ScaleSample)

__all__ = ["ScaleState", "ScaleEstimate", "ScaleEstimator", "float_to_json",
           "float_from_json"]

STATE_VERSION = 1  # of ScaleEstimator.state_dict()
# The settings an estimate depends on: a state saved under other values is refused. The
# source-specific ones count only for their source (their value *is* the scale there).
_ESTIMATE_SETTINGS = ("source", "min_samples", "lock_spread", "max_samples",
                      "max_change_per_s")


class ScaleState(str, Enum):
    UNKNOWN = "UNKNOWN"  # no sample yet (or source none): outputs are in model units
    CONVERGING = "CONVERGING"  # samples, but not enough or not consistent: not metric yet
    LOCKED = "LOCKED"  # metres_per_unit is applied to every output


@dataclass(frozen=True, slots=True)
class ScaleEstimate:
    """An immutable snapshot of a stream's scale (what ``~/scale`` and diagnostics carry)."""

    state: ScaleState
    source: str  # the ScaleConfig source
    metres_per_unit: float  # NaN while UNKNOWN; the running median while CONVERGING;
    #                         the applied (rate-bounded) value once LOCKED
    sigma_log: float  # 1-sigma uncertainty of log(metres_per_unit); inf while UNKNOWN
    samples: int  # samples accepted since the last reset
    segment: int  # the estimate's segment (a reset starts a new one)
    min_samples: int  # samples LOCKED needs (for "estimating scale 4/10 (depth)")
    reason: str = ""  # the last rejection reason ("" once a sample followed it)
    rejections: tuple[tuple[str, int], ...] = ()  # (reason, count), sorted by reason
    stamp_s: float = math.nan  # stamp of the last sample or rejection (s)
    stamp_ns: Optional[int] = None  # the same stamp in integer ns (None: not given)
    drift: Optional[ScaleDrift] = None  # LOCKED on samples: the recent ones vs the applied

    @property
    def drift_warning(self) -> Optional[str]:
        """Why the applied scale is not to be trusted now (the recent samples disagree with it
        beyond ``drift_warn_sigma`` for ``drift_warn_s``), else None."""
        if self.drift is None or not self.drift.warning:
            return None
        return f"scale drift ({self.source}): {self.drift.text}"

    @property
    def locked(self) -> bool:
        return self.state is ScaleState.LOCKED

    @property
    def output_factor(self) -> Optional[float]:
        """The factor to apply to outputs, or None: nothing may be claimed in metres."""
        return self.metres_per_unit if self.locked else None

    @property
    def units(self) -> str:
        """The units outputs are in: "m" once LOCKED, else "model units"."""
        return "m" if self.locked else "model units"

    def rejection_count(self, reason: str) -> int:
        return dict(self.rejections).get(reason, 0)

    @property
    def status_text(self) -> str:
        """A one-line human summary, e.g. "estimating scale 4/10 (depth)"."""
        if not source_kind(self.source).metric:
            return "no scale source: distances are in model units"
        if self.locked:
            return (f"scale locked: {self.metres_per_unit:.6g} m per model unit "
                    f"(+-{100 * self.sigma_log:.2g} %, {self.source})")
        why = f", last rejection: {self.reason}" if self.reason else ""
        return (f"estimating scale {min(self.samples, self.min_samples)}/{self.min_samples} "
                f"({self.source}{why})")


class ScaleEstimator:
    """Metres per model unit for one stream; feed it every source result with :meth:`add`."""

    def __init__(self, config: ScaleConfig = ScaleConfig(), segment: int = 0) -> None:
        if not isinstance(config, ScaleConfig):
            raise ValueError(f"config must be a ScaleConfig, got {type(config).__name__}")
        self._config = config
        self._kind = source_kind(config.source)
        self._logs: deque[float] = deque(maxlen=config.max_samples)
        self._stats: Optional[tuple[float, float]] = None  # _median_spread of _logs, cached
        self._rejections: Counter[str] = Counter()
        self._segment = int(segment)
        self._clear()
        self._snapshot = self._make_snapshot()

    @property
    def config(self) -> ScaleConfig:
        return self._config

    @property
    def estimate(self) -> ScaleEstimate:
        """The latest snapshot (immutable; safe to hand to other threads)."""
        return self._snapshot

    def reset(self, segment: Optional[int] = None) -> ScaleEstimate:
        """Start a new estimate (a new stream): segment = ``segment`` or the previous + 1.
        Rejection counters keep counting (they are the stream source's lifetime counts)."""
        self._segment = self._segment + 1 if segment is None else int(segment)
        self._clear()
        self._snapshot = self._make_snapshot()
        return self._snapshot

    def add(self, result: SampleResult, stamp_ns: Optional[int] = None) -> ScaleEstimate:
        """Take one frame's sample or rejection; returns the new snapshot. ``stamp_ns``: the
        result's stamp in integer ns (the estimate carries it: ``~/scale``'s stamp). A sample
        of another source than the configured one is a programming error (ValueError)."""
        if isinstance(result, Rejection):
            self._rejections[result.reason] += 1
            self._reason = result.reason
            self._note_stamp(result.stamp_s, stamp_ns)
            self._last_rejection_s = _finite_or(result.stamp_s, self._last_rejection_s)
        elif isinstance(result, ScaleSample):
            if result.source != self._config.source:
                raise ValueError(f"a {result.source!r} sample fed to a "
                                 f"{self._config.source!r} estimator")
            self._note_stamp(result.stamp_s, stamp_ns)
            if self._kind.samples:
                self._take(result)
        else:
            raise ValueError(f"expected a ScaleSample or a Rejection, got "
                             f"{type(result).__name__}")
        self._snapshot = self._make_snapshot()
        return self._snapshot

    def stale_reason(self, now_s: float) -> Optional[str]:
        """Why the source has yielded no sample for ``stale_timeout_s`` before ``now_s`` (in
        the clock of the sample stamps), or None. ``none``/``fixed`` are never stale."""
        cfg, reason = self._config, self._kind.no_input_reason
        if reason is None:
            return None
        if math.isfinite(now_s) and not math.isfinite(self._since_s):
            self._since_s = now_s  # the clock starts at the first look
        ref = self._last_sample_s if math.isfinite(self._last_sample_s) else self._since_s
        if not math.isfinite(now_s) or not now_s - ref > cfg.stale_timeout_s:
            return None
        if self._reason and self._last_rejection_s >= ref:
            return self._reason
        return reason

    # --- snapshots ----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The estimate as plain JSON values (non-finite floats as "nan"/"inf"/"-inf"; finite
        ones round-trip exactly through JSON): the samples window, counts, state, segment,
        applied value and its time, the stale clock, the drift's start (``drift_since_s``;
        with the stamp of its last measure and its start before it, so a restored estimator
        recomputes the same ``drift``; absent from an older build's: none under way) and the
        rejection counters, with the settings it was made under (checked by
        :meth:`load_state_dict`)."""
        return {"version": STATE_VERSION, "settings": _settings_of(self._config),
                "logs": [float_to_json(v) for v in self._logs], "count": self._count,
                "state": self._state.value, "segment": self._segment,
                "applied_log": float_to_json(self._applied_log),
                "applied_s": float_to_json(self._applied_s), "reason": self._reason,
                "last_sample_s": float_to_json(self._last_sample_s),
                "last_rejection_s": float_to_json(self._last_rejection_s),
                "since_s": float_to_json(self._since_s),
                "stamp_s": float_to_json(self._stamp_s), "stamp_ns": self._stamp_ns,
                "drift_since_s": float_to_json(self._drift_since_s),
                "drift_stamp_s": float_to_json(self._drift_stamp_s),
                "drift_before_s": float_to_json(self._drift_before_s),
                "rejections": {k: int(v) for k, v in sorted(self._rejections.items())}}

    def check_state_dict(self, state) -> None:
        """ValueError (naming what) unless ``state`` (``state_dict``'s output) can continue in
        this estimator: a known version, the same estimate settings, consistent values."""
        self._parse_state(state)

    def load_state_dict(self, state) -> ScaleEstimate:
        """Continue the estimate of ``state`` (``state_dict``'s output); returns the restored
        snapshot. ValueError, and this estimator unchanged, when it is malformed or was made
        under other estimate settings (a ``scale.source`` of its own, another fixed factor,
        camera height, window...)."""
        parsed = self._parse_state(state)
        self._logs.clear()
        self._logs.extend(parsed["logs"])
        self._stats = None
        self._rejections = Counter(parsed["rejections"])
        for key in ("count", "state", "segment", "applied_log", "applied_s", "reason",
                    "last_sample_s", "last_rejection_s", "since_s", "stamp_s", "stamp_ns",
                    "drift_since_s", "drift_stamp_s", "drift_before_s"):
            setattr(self, f"_{key}", parsed[key])
        self._drift = None
        if self._state is ScaleState.LOCKED and self._logs:  # as it was at the last sample
            self._drift_since_s = parsed["drift_before_s"]
            self._measure_drift(self._drift_stamp_s)
        self._snapshot = self._make_snapshot()
        return self._snapshot

    def _parse_state(self, state) -> dict:
        if not isinstance(state, dict):
            raise ValueError(f"scale state: expected a dict, got {type(state).__name__}")
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"scale state: version {state.get('version')!r} is unknown; this "
                             f"build reads version {STATE_VERSION}")
        saved, here = state.get("settings"), _settings_of(self._config)
        if not isinstance(saved, dict):
            raise ValueError("scale state: no settings")
        if saved.get("source") != here["source"]:
            raise ValueError(f"the scale estimate was made with scale.source "
                             f"{saved.get('source')!r}, this stream's is {here['source']!r}: "
                             f"set scale.source to {saved.get('source')!r} to continue it "
                             f"(or start a new stream)")
        diff = [f"scale.{k}: saved {saved.get(k)!r}, here {here[k]!r}" for k in here
                if saved.get(k) != here[k]]
        if diff:
            raise ValueError("the scale estimate was made under other settings (" +
                             "; ".join(diff) + "): set them as saved to continue it (or "
                             "start a new stream)")
        try:
            logs = [float_from_json(v) for v in state["logs"]]
            out = {"logs": logs, "count": int(state["count"]),
                   "state": ScaleState(state["state"]), "segment": int(state["segment"]),
                   "reason": str(state["reason"]),
                   "rejections": {str(k): int(v) for k, v in state["rejections"].items()}}
            for key in ("applied_log", "applied_s", "last_sample_s", "last_rejection_s",
                        "since_s", "stamp_s"):
                out[key] = float_from_json(state[key])
            stamp_ns = state.get("stamp_ns")  # an older snapshot has none
            if stamp_ns is not None and (isinstance(stamp_ns, bool)
                                         or not isinstance(stamp_ns, int)):
                raise ValueError(f"stamp_ns {stamp_ns!r} is not an integer")
            out["stamp_ns"] = stamp_ns
            # an older snapshot has none: no drift was under way
            out["drift_since_s"] = float_from_json(state.get("drift_since_s", "nan"))
            out["drift_stamp_s"] = float_from_json(state.get("drift_stamp_s", "nan"))
            out["drift_before_s"] = float_from_json(state.get("drift_before_s", "nan"))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"scale state is malformed ({type(exc).__name__}: {exc})") \
                from None
        cfg = self._config
        if len(logs) > cfg.max_samples or not all(math.isfinite(v) for v in logs):
            raise ValueError(f"scale state: {len(logs)} samples in the window (at most "
                             f"{cfg.max_samples}, all finite)")
        if out["count"] < len(logs) or any(v < 0 for v in out["rejections"].values()):
            raise ValueError("scale state: counts are inconsistent")
        if out["state"] is ScaleState.LOCKED and not math.isfinite(out["applied_log"]):
            raise ValueError("scale state: LOCKED without a finite value")
        kind = self._kind
        if out["state"] is not ScaleState.UNKNOWN and not kind.fixed and not logs:
            raise ValueError(f"scale state: {out['state'].value} without samples")
        if not kind.samples:
            want = ScaleState.LOCKED if kind.fixed else ScaleState.UNKNOWN
            if out["state"] is not want or logs:
                raise ValueError(f"scale state: {out['state'].value} with "
                                 f"{len(logs)} samples for source {cfg.source!r}")
        return out

    # --- internals ----------------------------------------------------------------------------

    def _clear(self) -> None:
        self._logs.clear()
        self._stats = None
        self._count = 0
        self._applied_log = math.nan
        self._applied_s = math.nan
        self._state = ScaleState.UNKNOWN
        self._reason = ""
        self._last_sample_s = math.nan
        self._last_rejection_s = -math.inf
        self._since_s = math.nan
        self._stamp_s = math.nan
        self._stamp_ns: Optional[int] = None
        self._drift_since_s = math.nan  # start of the recent samples' disagreement (drift.py)
        self._drift_before_s = math.nan  # ... as it was before the last measure
        self._drift_stamp_s = math.nan  # the stamp of the last measure
        self._drift: Optional[ScaleDrift] = None
        if self._kind.fixed:
            self._state = ScaleState.LOCKED
            self._applied_log = math.log(self._config.factor)

    def _note_stamp(self, stamp_s: float, stamp_ns: Optional[int]) -> None:
        if math.isfinite(stamp_s):
            if not math.isfinite(self._since_s):
                self._since_s = stamp_s
            self._stamp_s = stamp_s
            self._stamp_ns = None if stamp_ns is None else int(stamp_ns)

    def _take(self, sample: ScaleSample) -> None:
        cfg = self._config
        self._logs.append(math.log(sample.metres_per_unit))
        self._stats = None
        self._count += 1
        self._reason = ""
        self._last_sample_s = _finite_or(sample.stamp_s, self._last_sample_s)
        target, spread = self._median_spread()
        if self._state is not ScaleState.LOCKED:
            self._applied_log = target
            self._applied_s = sample.stamp_s
            if len(self._logs) >= cfg.min_samples and spread < cfg.lock_spread:
                self._state = ScaleState.LOCKED
                self._measure_drift(sample.stamp_s)
            else:
                self._state = ScaleState.CONVERGING
            return
        # LOCKED: move toward the target at a bounded rate of the sample stamps
        dt = sample.stamp_s - self._applied_s if math.isfinite(self._applied_s) else 0.0
        if not math.isfinite(dt) or dt < 0:
            dt = 0.0
        bound = cfg.max_change_per_s * dt
        self._applied_log += min(max(target - self._applied_log, -bound), bound)
        if math.isfinite(sample.stamp_s) and not sample.stamp_s < self._applied_s:
            self._applied_s = sample.stamp_s
        self._measure_drift(sample.stamp_s)

    def _measure_drift(self, stamp_s: float) -> None:
        """The last ``min_samples`` samples against the applied value, at ``stamp_s``."""
        cfg = self._config
        logs = self._logs  # the newest min_samples, read from the deque's end
        recent = [logs[i] for i in range(-min(cfg.min_samples, len(logs)), 0)]
        self._drift_before_s, self._drift_stamp_s = self._drift_since_s, stamp_s
        self._drift = measure_drift(recent, self._applied_log, stamp_s, self._drift_since_s,
                                    cfg.drift_warn_sigma, cfg.drift_warn_s)
        self._drift_since_s = self._drift.since_s

    def _median_spread(self) -> tuple[float, float]:
        """The window's median log scale and its MAD spread (computed once per change of
        the window: a sample's update and its snapshot share it)."""
        if self._stats is None:
            logs = np.fromiter(self._logs, dtype=np.float64, count=len(self._logs))
            median = float(np.median(logs))
            spread = MAD_TO_SIGMA * float(np.median(np.abs(logs - median))) \
                if logs.size > 1 else math.inf
            self._stats = (median, spread)
        return self._stats

    def _make_snapshot(self) -> ScaleEstimate:
        cfg = self._config
        if self._state is ScaleState.UNKNOWN:
            value, sigma = math.nan, math.inf
        elif self._kind.fixed:
            value, sigma = cfg.factor, 0.0
        else:
            target, spread = self._median_spread()
            n = len(self._logs)
            sigma = MEDIAN_EFFICIENCY * spread / math.sqrt(n) if n > 1 else math.inf
            sigma = math.hypot(sigma, self._applied_log - target)  # + the lag after a lock
            value = math.exp(self._applied_log)
        return ScaleEstimate(state=self._state, source=cfg.source, metres_per_unit=value,
                             sigma_log=sigma, samples=self._count, segment=self._segment,
                             min_samples=cfg.min_samples, reason=self._reason,
                             rejections=tuple(sorted(self._rejections.items())),
                             stamp_s=self._stamp_s, stamp_ns=self._stamp_ns,
                             drift=self._drift)


def _finite_or(value: float, default: float) -> float:
    return value if math.isfinite(value) else default


def _settings_of(config: ScaleConfig) -> dict:
    keys = _ESTIMATE_SETTINGS + source_kind(config.source).settings
    return {k: getattr(config, k) for k in keys}

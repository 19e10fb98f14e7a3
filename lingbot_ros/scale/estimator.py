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
* **stale detector** -- ``stale_reason(now_ns)`` names why a source gave nothing for
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
from .samples import (MAD_TO_SIGMA, MEDIAN_EFFICIENCY, Rejection, SampleResult,
                      ScaleSample, span_s)

__all__ = ["ScaleState", "ScaleEstimate", "ScaleEstimator", "float_to_json",
           "float_from_json"]

STATE_VERSION = 2  # of ScaleEstimator.state_dict(); 1: stamps in float seconds (read too)
# its stamps, integer ns or None (version 1: "<name>_s" float seconds)
_STAMPS = ("applied_ns", "last_sample_ns", "last_rejection_ns", "since_ns", "stamp_ns",
           "drift_since_ns", "drift_stamp_ns", "drift_before_ns")
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
    stamp_ns: Optional[int] = None  # stamp of the last sample or rejection (None: none yet)
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
        stamp of the frame it came with (the estimate carries it: ``~/scale``'s stamp;
        default the result's, which for odometry is the newest frame the fit used). A sample
        of another source than the configured one is a programming error (ValueError)."""
        if isinstance(result, Rejection):
            self._rejections[result.reason] += 1
            self._reason = result.reason
            self._note_stamp(result.stamp_ns, stamp_ns)
            if result.stamp_ns is not None:
                self._last_rejection_ns = result.stamp_ns
        elif isinstance(result, ScaleSample):
            if result.source != self._config.source:
                raise ValueError(f"a {result.source!r} sample fed to a "
                                 f"{self._config.source!r} estimator")
            self._note_stamp(result.stamp_ns, stamp_ns)
            if self._kind.samples:
                self._take(result)
        else:
            raise ValueError(f"expected a ScaleSample or a Rejection, got "
                             f"{type(result).__name__}")
        self._snapshot = self._make_snapshot()
        return self._snapshot

    def stale_reason(self, now_ns: Optional[int]) -> Optional[str]:
        """Why the source has yielded no sample for ``stale_timeout_s`` before ``now_ns`` (in
        the clock of the sample stamps), or None. ``none``/``fixed`` are never stale."""
        cfg, reason = self._config, self._kind.no_input_reason
        if reason is None:
            return None
        if now_ns is None:
            return None
        if self._since_ns is None:
            self._since_ns = int(now_ns)  # the clock starts at the first look
        ref = self._last_sample_ns if self._last_sample_ns is not None else self._since_ns
        if not span_s(ref, now_ns) > cfg.stale_timeout_s:
            return None
        if self._reason and self._last_rejection_ns is not None \
                and self._last_rejection_ns >= ref:
            return self._reason
        return reason

    # --- snapshots ----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The estimate as plain JSON values (non-finite floats as "nan"/"inf"/"-inf"; finite
        ones round-trip exactly through JSON): the samples window, counts, state, segment,
        applied value and its time, the stale clock, the drift's start (``drift_since_ns``;
        with the stamp of its last measure and its start before it, so a restored estimator
        recomputes the same ``drift``; absent from an older build's: none under way) and the
        rejection counters, with the settings it was made under (checked by
        :meth:`load_state_dict`)."""
        return {"version": STATE_VERSION, "settings": _settings_of(self._config),
                "logs": [float_to_json(v) for v in self._logs], "count": self._count,
                "state": self._state.value, "segment": self._segment,
                "applied_log": float_to_json(self._applied_log),
                "reason": self._reason, **{k: getattr(self, f"_{k}") for k in _STAMPS},
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
        for key in ("count", "state", "segment", "applied_log", "reason") + _STAMPS:
            setattr(self, f"_{key}", parsed[key])
        self._drift = None
        if self._state is ScaleState.LOCKED and self._logs:  # as it was at the last sample
            self._drift_since_ns = parsed["drift_before_ns"]
            self._measure_drift(self._drift_stamp_ns)
        self._snapshot = self._make_snapshot()
        return self._snapshot

    def _parse_state(self, state) -> dict:
        if not isinstance(state, dict):
            raise ValueError(f"scale state: expected a dict, got {type(state).__name__}")
        version = state.get("version")
        if version not in (1, STATE_VERSION):
            raise ValueError(f"scale state: version {version!r} is unknown; this build reads "
                             f"versions {STATE_VERSION} and 1")
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
            out["applied_log"] = float_from_json(state["applied_log"])
            out.update(_stamps_v2(state) if version == STATE_VERSION else _stamps_v1(state))
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
        self._applied_ns: Optional[int] = None  # the stamp the applied value is of
        self._state = ScaleState.UNKNOWN
        self._reason = ""
        self._last_sample_ns: Optional[int] = None
        self._last_rejection_ns: Optional[int] = None
        self._since_ns: Optional[int] = None  # the stale clock's start
        self._stamp_ns: Optional[int] = None  # the estimate's stamp
        self._drift_since_ns: Optional[int] = None  # the recent samples' disagreement began
        self._drift_before_ns: Optional[int] = None  # ... as it was before the last measure
        self._drift_stamp_ns: Optional[int] = None  # the stamp of the last measure
        self._drift: Optional[ScaleDrift] = None
        if self._kind.fixed:
            self._state = ScaleState.LOCKED
            self._applied_log = math.log(self._config.factor)

    def _note_stamp(self, result_ns: Optional[int], frame_ns: Optional[int]) -> None:
        if result_ns is not None:
            if self._since_ns is None:
                self._since_ns = result_ns
            self._stamp_ns = result_ns if frame_ns is None else int(frame_ns)

    def _take(self, sample: ScaleSample) -> None:
        cfg = self._config
        self._logs.append(math.log(sample.metres_per_unit))
        self._stats = None
        self._count += 1
        self._reason = ""
        self._last_sample_ns = sample.stamp_ns
        target, spread = self._median_spread()
        if self._state is not ScaleState.LOCKED:
            self._applied_log = target
            self._applied_ns = sample.stamp_ns
            if len(self._logs) >= cfg.min_samples and spread < cfg.lock_spread:
                self._state = ScaleState.LOCKED
                self._measure_drift(sample.stamp_ns)
            else:
                self._state = ScaleState.CONVERGING
            return
        # LOCKED: move toward the target at a bounded rate of the sample stamps
        applied = self._applied_ns
        dt = 0.0 if applied is None else max(0.0, span_s(applied, sample.stamp_ns))
        bound = cfg.max_change_per_s * dt
        self._applied_log += min(max(target - self._applied_log, -bound), bound)
        if applied is None or not sample.stamp_ns < applied:
            self._applied_ns = sample.stamp_ns
        self._measure_drift(sample.stamp_ns)

    def _measure_drift(self, stamp_ns: Optional[int]) -> None:
        """The last ``min_samples`` samples against the applied value, at ``stamp_ns``."""
        cfg = self._config
        logs = self._logs  # the newest min_samples, read from the deque's end
        recent = [logs[i] for i in range(-min(cfg.min_samples, len(logs)), 0)]
        self._drift_before_ns, self._drift_stamp_ns = self._drift_since_ns, stamp_ns
        self._drift = measure_drift(recent, self._applied_log, stamp_ns, self._drift_since_ns,
                                    cfg.drift_warn_sigma, cfg.drift_warn_s)
        self._drift_since_ns = self._drift.since_ns

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
                             stamp_ns=self._stamp_ns,
                             drift=self._drift)


def _stamp_ns(value, what: str) -> Optional[int]:
    """A saved stamp: an integer (ns) or None; ValueError otherwise."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{what} {value!r} is not an integer (ns) or null")
    return value


def _stamps_v2(state: dict) -> dict:
    return {k: _stamp_ns(state[k], k) for k in _STAMPS}


def _stamps_v1(state: dict) -> dict:
    """A version-1 state's stamps (float seconds; NaN/-inf: none) in ns. Its ``stamp_ns``
    (when it has one) is the estimate's stamp; the others are rounded to the ns (within
    ~0.25 us of what they were made from at today's epoch)."""
    def ns(key: str) -> Optional[int]:
        v = float_from_json(state.get(key, "nan"))  # the drift's: absent from older ones
        return round(v * 1e9) if math.isfinite(v) else None
    out = {k: ns(k[:-3] + "_s") for k in _STAMPS}
    saved = _stamp_ns(state.get("stamp_ns"), "stamp_ns")
    if saved is not None:
        out["stamp_ns"] = saved
    return out


def _settings_of(config: ScaleConfig) -> dict:
    keys = _ESTIMATE_SETTINGS + source_kind(config.source).settings
    return {k: getattr(config, k) for k in keys}

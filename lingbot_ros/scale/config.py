"""``ScaleConfig``: where a stream's metric scale comes from and how it is estimated.

Typed and frozen, validated once with clear errors (stdlib only). See docs/scale.md for the
decision table (which source for which robot) and what every output looks like in metres.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from .sources import SCALE_SOURCES, SourceKind, source_kind

__all__ = ["ScaleConfig", "SCALE_SOURCES", "BEFORE_LOCK_POLICIES"]

BEFORE_LOCK_POLICIES = ("withhold", "publish_model_units")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_positive(name: str, value) -> None:
    if not _is_number(value) or value <= 0:
        raise ValueError(f"scale.{name} must be a finite number > 0, got {value!r}")


def _check_int(name: str, value, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"scale.{name} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True, slots=True)
class ScaleConfig:
    """One stream's scale settings (the ROS parameters ``scale.*``).

    Units: metres, seconds, degrees; "model units" are the scale-free units of the model's
    poses and depth. ``metres_per_unit`` = metres per model unit.
    """

    source: str = "none"  # a registered source (scale/sources.py): none, fixed, depth, ...
    factor: float = 1.0  # fixed: metres per model unit
    # depth: metres per sensor unit; None = from the encoding (16UC1/mono16: mm, 32FC1: m)
    depth_unit_m: Optional[float] = None
    depth_max_dt_s: float = 0.02  # depth: max |stamp(depth) - stamp(colour)| for a match
    depth_min_m: float = 0.1  # depth: sensor readings outside [min, max] are invalid
    depth_max_m: float = 10.0
    depth_min_conf: float = 1.5  # depth: model confidence (1 + exp(.)) below this is masked
    depth_stride: int = 3  # depth: evaluate every n-th model pixel along x and y (cost)
    min_pixels: int = 1000  # depth: a frame needs this many valid pixels (evaluation grid)
    min_baseline_m: float = 0.3  # odometry: path length (metres of base motion) per sample
    odom_window: int = 150  # odometry: sliding window of frames (5 s at 30 Hz)
    odom_min_step_m: float = 0.1  # odometry: pair frames this far apart (less = still);
    #                               long pairs keep the model's pose noise from biasing k
    odom_max_dt_s: float = 0.1  # odometry: max gap of the odometry around an image stamp
    planar: bool = False  # odometry: compare x/y of the base only (wheel odometry)
    camera_height_m: Optional[float] = None  # camera_height: None = from TF (the node)
    max_ground_tilt_deg: float = 10.0  # camera_height: floor normal vs the base's up axis
    ground_inlier_ratio: float = 0.02  # camera_height: inlier band, a share of the height
    ground_min_inliers: int = 500  # camera_height: a credible floor has this many points
    min_samples: int = 10  # LOCKED needs at least this many samples ...
    lock_spread: float = 0.05  # ... whose relative spread (1.4826 MAD of log) is below this
    max_samples: int = 100  # the estimate is the median of the last max_samples samples
    max_change_per_s: float = 0.01  # after LOCKED: |d log(scale) / dt| bound (1 %/s)
    stale_timeout_s: float = 5.0  # no sample for this long: the reason is reported (WARN)
    # after LOCKED: the median of the last min_samples samples this many sigmas (of that
    # median) from the applied scale, for drift_warn_s seconds of stamps: WARN (drift.py)
    drift_warn_sigma: float = 5.0
    drift_warn_s: float = 1.0
    before_lock: str = "withhold"  # withhold | publish_model_units

    def __post_init__(self) -> None:
        _ = self.kind  # the registry (scale/sources.py) refuses an unknown source
        if self.before_lock not in BEFORE_LOCK_POLICIES:
            raise ValueError(f"scale.before_lock must be one of {BEFORE_LOCK_POLICIES}, got "
                             f"{self.before_lock!r}")
        for name in ("factor", "depth_max_dt_s", "depth_max_m", "depth_min_conf",
                     "min_baseline_m", "odom_min_step_m", "odom_max_dt_s",
                     "max_ground_tilt_deg", "ground_inlier_ratio", "lock_spread",
                     "max_change_per_s", "stale_timeout_s", "drift_warn_sigma"):
            _check_positive(name, getattr(self, name))
        for name in ("depth_unit_m", "camera_height_m"):
            if getattr(self, name) is not None:
                _check_positive(name, getattr(self, name))
        for name in ("depth_min_m", "drift_warn_s"):
            value = getattr(self, name)
            if not _is_number(value) or value < 0:
                raise ValueError(f"scale.{name} must be a finite number >= 0, got {value!r}")
        if self.depth_min_m >= self.depth_max_m:
            raise ValueError(f"scale.depth_min_m ({self.depth_min_m}) must be below "
                             f"scale.depth_max_m ({self.depth_max_m})")
        if self.odom_min_step_m > self.min_baseline_m:
            raise ValueError(f"scale.odom_min_step_m ({self.odom_min_step_m}) must not exceed "
                             f"scale.min_baseline_m ({self.min_baseline_m})")
        if self.depth_min_conf < 1:
            raise ValueError(f"scale.depth_min_conf must be >= 1 (confidence is 1 + exp(.)), "
                             f"got {self.depth_min_conf!r}")
        if self.max_ground_tilt_deg >= 90:
            raise ValueError(f"scale.max_ground_tilt_deg must be below 90 degrees, got "
                             f"{self.max_ground_tilt_deg!r}")
        if self.ground_inlier_ratio >= 1:
            raise ValueError(f"scale.ground_inlier_ratio must be below 1, got "
                             f"{self.ground_inlier_ratio!r}")
        for name, minimum in (("depth_stride", 1), ("min_pixels", 1), ("odom_window", 2),
                              ("ground_min_inliers", 3), ("min_samples", 1),
                              ("max_samples", 1)):
            _check_int(name, getattr(self, name), minimum)
        if self.max_samples < self.min_samples:
            raise ValueError(f"scale.max_samples ({self.max_samples}) must be at least "
                             f"scale.min_samples ({self.min_samples})")
        if not isinstance(self.planar, bool):
            raise ValueError(f"scale.planar must be a bool, got {self.planar!r}")

    @property
    def kind(self) -> SourceKind:
        """The registered source (:class:`~lingbot_ros.scale.sources.SourceKind`): what it
        needs and is. ValueError for a source that is not registered."""
        return source_kind(self.source)

    @property
    def reads_predicted_depth(self) -> bool:
        """The source samples every frame's predicted depth (the session must return it)."""
        return self.kind.needs_depth

    @property
    def metric(self) -> bool:
        """True when a source is set: outputs are meant to be in metres (once LOCKED)."""
        return self.kind.metric

"""What a sample source returns for one frame: a ``ScaleSample`` or a ``Rejection``.

Sources never raise on bad input: they return a ``Rejection`` with one of :data:`REASONS`,
and the :class:`~lingbot_ros.scale.ScaleEstimator` counts it (the one place it is counted).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

__all__ = ["ScaleSample", "Rejection", "SampleResult", "Reason", "REASONS",
           "MAD_TO_SIGMA", "MEDIAN_EFFICIENCY", "span_s", "ns_of"]

MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution -> its standard deviation
MEDIAN_EFFICIENCY = 1.2533  # standard error of a median = 1.2533 sigma / sqrt(n)


class Reason:
    """The one rejection vocabulary: every reason a source (or a front end adapting its
    input) gives for "no sample from this frame". Plain strings: counters and diagnostics
    keys are ``scale_rejected_<reason>``."""

    WRONG_ENCODING = "wrong_encoding"  # depth: not 16UC1/mono16/32FC1 (or a bad dtype)
    WRONG_SIZE = "wrong_size"  # depth/points: not the colour image's / model output's size
    ALL_INVALID = "all_invalid"  # depth: no valid sensor reading (0, NaN, inf, out of range)
    NON_FINITE = "non_finite"  # a model output or a pose contains NaN or inf
    TOO_FEW_PIXELS = "too_few_pixels"  # depth: fewer than min_pixels valid, confident pixels
    OUT_OF_SYNC = "out_of_sync"  # depth/odometry: nothing within the allowed stamp difference
    NO_DEPTH = "no_depth"  # depth: no depth image (none received, or none for this frame);
    #                        depth/camera_height: the frame carries no predicted depth
    NO_ODOMETRY = "no_odometry"  # odometry: no odometry received yet
    STATIONARY = "stationary"  # odometry: the base stood still in the window
    PURE_ROTATION = "pure_rotation"  # odometry: the base only turned (on the spot)
    SHORT_BASELINE = "short_baseline"  # odometry: moved, but less than min_baseline_m so far
    DEGENERATE = "degenerate"  # odometry: the model's base displacements are ~0
    NO_FLOOR = "no_floor"  # camera_height: no credible ground plane below the camera
    NO_HEIGHT = "no_height"  # camera_height: no camera height (neither configured nor TF)
    NO_GROUND_FRAME = "no_ground_frame"  # camera_height: frames.ground -> camera not in TF


REASONS = tuple(v for k, v in vars(Reason).items() if k.isupper())


def span_s(start_ns: int, end_ns: int) -> float:
    """The seconds from ``start_ns`` to ``end_ns``: stamps are integer nanoseconds everywhere
    in scale/; a duration becomes seconds only where an algorithm computes with seconds
    (the rate bound, the drift's duration, a stamp tolerance in a message)."""
    return (int(end_ns) - int(start_ns)) / 1e9


def ns_of(seconds: float) -> int:
    """A duration or setting in seconds (``depth_max_dt_s``, ``odom_max_dt_s``) in integer
    nanoseconds, to compare with stamp differences."""
    return int(round(float(seconds) * 1e9))


@dataclass(frozen=True, slots=True)
class ScaleSample:
    """One frame's measurement: ``metres_per_unit`` at the image stamp ``stamp_ns``."""

    stamp_ns: int
    metres_per_unit: float
    source: str
    support: int = 0  # pixels / frames / inliers the measurement rests on (information)

    def __post_init__(self) -> None:
        m = self.metres_per_unit
        if not (isinstance(m, (int, float)) and math.isfinite(m) and m > 0):
            raise ValueError(f"metres_per_unit must be a finite number > 0, got {m!r}")


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a frame gave no sample: ``reason`` is one of :data:`REASONS`; ``stamp_ns``: the
    frame's (or the odometry pose's) stamp, None when the input had no usable stamp."""

    stamp_ns: Optional[int]
    reason: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"unknown rejection reason {self.reason!r}; one of {REASONS}")


SampleResult = Union[ScaleSample, Rejection]

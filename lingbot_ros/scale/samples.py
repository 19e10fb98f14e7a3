"""What a sample source returns for one frame: a ``ScaleSample`` or a ``Rejection``.

Sources never raise on bad input: they return a ``Rejection`` with one of :data:`REASONS`,
and the :class:`~lingbot_ros.scale.ScaleEstimator` counts it (the one place it is counted).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

__all__ = ["ScaleSample", "Rejection", "SampleResult", "REASONS", "NO_INPUT_REASON",
           "MAD_TO_SIGMA", "MEDIAN_EFFICIENCY"]

MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution -> its standard deviation
MEDIAN_EFFICIENCY = 1.2533  # standard error of a median = 1.2533 sigma / sqrt(n)

# Every reason a source gives for "no sample from this frame".
REASONS = (
    "wrong_encoding",  # depth: not 16UC1/mono16/32FC1 (or its dtype does not match)
    "wrong_size",  # depth/points: not the colour image's size, or not the model output's
    "all_invalid",  # depth: no valid sensor reading at all (0, NaN, inf, out of range)
    "non_finite",  # a model output or a pose contains NaN or inf
    "too_few_pixels",  # depth: fewer than min_pixels valid, confident pixels
    "out_of_sync",  # depth/odometry: nothing within the allowed stamp difference
    "no_depth",  # depth: no depth image received yet (no depth topic)
    "no_odometry",  # odometry: no odometry received yet
    "stationary",  # odometry: the base stood still in the window
    "pure_rotation",  # odometry: the base only turned (on the spot) in the window
    "short_baseline",  # odometry: the base moved, but less than min_baseline_m so far
    "degenerate",  # odometry: the model's base displacements are ~0 (nothing to compare)
    "no_floor",  # camera_height: no credible ground plane below the camera
    "no_height",  # camera_height: no camera height (neither configured nor from TF)
    "no_ground_frame",  # camera_height: the ground frame (frames.ground) -> camera not in TF
)
# What a source reports while it yields nothing because nothing ever came in.
NO_INPUT_REASON = {"depth": "no_depth", "odometry": "no_odometry", "camera_height": "no_floor"}


@dataclass(frozen=True, slots=True)
class ScaleSample:
    """One frame's measurement: ``metres_per_unit`` at the image stamp ``stamp_s``."""

    stamp_s: float
    metres_per_unit: float
    source: str
    support: int = 0  # pixels / frames / inliers the measurement rests on (information)

    def __post_init__(self) -> None:
        m = self.metres_per_unit
        if not (isinstance(m, (int, float)) and math.isfinite(m) and m > 0):
            raise ValueError(f"metres_per_unit must be a finite number > 0, got {m!r}")


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a frame gave no sample: ``reason`` is one of :data:`REASONS`."""

    stamp_s: float
    reason: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"unknown rejection reason {self.reason!r}; one of {REASONS}")


SampleResult = Union[ScaleSample, Rejection]

"""``LoopConfig``: the back end's settings, typed and checked (the node's ``loop.*``
parameters, one row each in ros/params/table.py; the offline runner's and the evaluation's
``--loop-param NAME=VALUE``; docs/loop.md). Units: metres, seconds, degrees."""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["LoopConfig", "ROBUST_KERNELS"]

ROBUST_KERNELS = ("huber", "cauchy")  # loop.loop_robust_kernel


@dataclass(frozen=True)
class LoopConfig:
    """Keyframe database, retrieval and pose graph settings.

    Distances apply in the stream's units: metres once the scale is LOCKED, else model
    units (the database is kept in the units of the poses it is given)."""

    enable: bool = False
    # keyframe database: a keyframe within both of these of one already kept is not added
    min_keyframe_distance_m: float = 0.5
    min_keyframe_angle_deg: float = 15.0
    # retrieval: candidates at least this old (of the stamps), never one still in the window
    min_age_s: float = 20.0
    top_k: int = 5
    # pose graph: the front end's relative motions' standard deviations per metre moved
    # (translation, metres/metre; rotation, degrees/metre) and at least these (a standstill)
    odom_sigma_t_per_m: float = 0.02
    odom_sigma_deg_per_m: float = 0.5
    odom_sigma_t_min_m: float = 0.005
    odom_sigma_deg_min: float = 0.1
    # ... and of the log of their relative scale (how far the front end's scale may move
    # between two keyframes; it also widens the translation's: docs/loop.md "Pose graph")
    odom_sigma_log_scale_per_m: float = 0.01
    odom_sigma_log_scale_min: float = 0.001
    # a rollover's Sim(3) alignment: the log relative scale's standard deviation across it
    rollover_sigma_log_scale: float = 0.05
    # accepted loops: standard deviations and the robust kernel (its threshold in sigmas)
    loop_sigma_t_m: float = 0.05
    loop_sigma_deg: float = 1.0
    loop_sigma_log_scale: float = 0.05
    loop_robust_kernel: str = "huber"  # or "cauchy"
    loop_robust_k: float = 1.345
    # gates of a verified loop (verification)
    max_correction_m: float = 10.0
    max_correction_deg: float = 10.0
    confirm_m: float = 1.0
    confirm_deg: float = 2.0
    # verification of a candidate on the pair (loop/verify.py, docs/loop.md "Verification"):
    # the pair's depth confidence (1 + exp(.)) below this is not used
    verify_min_conf: float = 1.5
    # at least this many valid, confident pixels (at the stored depth's stride) for the scale
    # tie, and as many reprojected into the keyframe's view for the geometric check
    min_valid_pixels: int = 100
    # a reprojected pixel is an inlier when |z_reprojected / z_keyframe - 1| <= this ...
    inlier_depth_ratio: float = 0.1
    # ... and a loop needs at least this fraction of inliers among the reprojected pixels
    min_inlier_fraction: float = 0.6
    # confirmation: a verified loop waits at most this long (stamps) for a second one that
    # agrees, among at most this many pending verified loops (the oldest dropped first)
    confirm_window_s: float = 10.0
    confirm_max_pending: int = 8
    # the back end (loop/backend.py): at most this many of a keyframe's candidates verified
    max_verify_per_keyframe: int = 2
    # per-loop sigmas (backend.loop_sigmas, docs/loop.md "The back end"): a verification
    # whose every overlapping pixel is an inlier gets these; one at the gate
    # (min_inlier_fraction) gets loop_sigma_* above; geometric in between. The translation's
    # also grows by loop_sigma_t_per_m per unit of the pair's baseline
    loop_sigma_t_best_m: float = 0.03
    loop_sigma_deg_best: float = 0.5
    loop_sigma_log_scale_best: float = 0.005
    loop_sigma_t_per_m: float = 0.02

    def __post_init__(self) -> None:
        if not isinstance(self.enable, bool):
            raise ValueError(f"loop.enable must be a bool, got {self.enable!r}")
        for name in ("min_keyframe_distance_m", "min_keyframe_angle_deg", "min_age_s",
                     "odom_sigma_t_min_m", "odom_sigma_deg_min", "verify_min_conf"):
            _check_number(name, getattr(self, name), allow_zero=True)
        for name in ("odom_sigma_t_per_m", "odom_sigma_deg_per_m", "loop_sigma_t_m",
                     "loop_sigma_deg", "loop_robust_k", "max_correction_m",
                     "max_correction_deg", "confirm_m", "confirm_deg",
                     "odom_sigma_log_scale_per_m", "odom_sigma_log_scale_min",
                     "rollover_sigma_log_scale", "loop_sigma_log_scale",
                     "inlier_depth_ratio", "min_inlier_fraction", "confirm_window_s",
                     "loop_sigma_t_best_m", "loop_sigma_deg_best",
                     "loop_sigma_log_scale_best"):
            _check_number(name, getattr(self, name), allow_zero=False)
        _check_number("loop_sigma_t_per_m", self.loop_sigma_t_per_m, allow_zero=True)
        if self.odom_sigma_t_min_m <= 0 and self.odom_sigma_t_per_m <= 0:
            raise ValueError("loop.odom_sigma_t_min_m must be > 0")
        if self.loop_robust_kernel not in ROBUST_KERNELS:
            raise ValueError(f"loop.loop_robust_kernel must be one of {ROBUST_KERNELS}, got "
                             f"{self.loop_robust_kernel!r}")
        for name in ("top_k", "min_valid_pixels", "confirm_max_pending",
                     "max_verify_per_keyframe"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"loop.{name} must be an integer >= 1, got {v!r}")
        if self.min_inlier_fraction > 1:
            raise ValueError(f"loop.min_inlier_fraction must be at most 1, got "
                             f"{self.min_inlier_fraction!r}")
        for name in ("min_keyframe_angle_deg", "max_correction_deg", "confirm_deg"):
            if getattr(self, name) > 180:
                raise ValueError(f"loop.{name} must be at most 180, got "
                                 f"{getattr(self, name)!r}")


def _check_number(name: str, value, allow_zero: bool) -> None:
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value) and (value >= 0 if allow_zero else value > 0))
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"loop.{name} must be a finite number {bound}, got {value!r}")

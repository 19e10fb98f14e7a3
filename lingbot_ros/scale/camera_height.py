"""The ``camera_height`` source: the floor under the camera in the predicted points.

The frame's predicted points (the camera's optical frame, model units) below the camera
are searched for a ground plane by RANSAC: a plane whose upward normal lies within
``max_ground_tilt_deg`` of the base's up axis (``T_base_optical``'s z axis seen from the
camera), inliers within ``ground_inlier_ratio`` x its distance to the camera, at least
``ground_min_inliers`` of them, refined by least squares. The camera's distance to that
plane is its height in model units; the sample is ``camera_height_m / height_model``. A
frame without a credible floor gives ``no_floor``. Deterministic (seeded).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .config import ScaleConfig
from .samples import Rejection, SampleResult, ScaleSample
from .se3 import is_rigid

__all__ = ["GroundPlane", "fit_ground_plane", "camera_height_sample"]

RANSAC_ITERATIONS = 128
RANSAC_POINTS = 2048  # hypotheses are scored on this many points ...
MAX_POINTS = 32768  # ... the refined plane's inliers are counted on at most this many


class GroundPlane:
    """``normal . x = -height`` in the camera's frame: ``normal`` (unit, pointing up, toward
    the camera), ``height`` the camera's distance to the plane, ``inliers`` its support."""

    __slots__ = ("normal", "height", "inliers")

    def __init__(self, normal: np.ndarray, height: float, inliers: int) -> None:
        self.normal, self.height, self.inliers = normal, height, inliers


def _plane_inliers(points, normal, height, ratio):
    return np.abs(points @ normal + height) < ratio * height


def fit_ground_plane(points: np.ndarray, up: np.ndarray, config: ScaleConfig,
                     seed: int = 0) -> Optional[GroundPlane]:
    """RANSAC floor in ``points`` (N, 3), finite, camera frame; ``up`` the unit up axis in the
    same frame. None when no plane within the tilt bound has enough inliers."""
    up = np.asarray(up, dtype=np.float64)
    below = points[points @ up < 0]
    rng = np.random.default_rng(seed)
    if len(below) > MAX_POINTS:
        below = below[rng.choice(len(below), MAX_POINTS, replace=False)]
    if len(below) < max(3, config.ground_min_inliers):
        return None
    scored = below if len(below) <= RANSAC_POINTS else \
        below[rng.choice(len(below), RANSAC_POINTS, replace=False)]
    tri = scored[rng.integers(0, len(scored), size=(RANSAC_ITERATIONS, 3))]  # (I, 3, 3)
    normals = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    norm = np.linalg.norm(normals, axis=1)
    ok = norm > 1e-12
    normals = normals[ok] / norm[ok, None]
    normals *= np.where(normals @ up < 0, -1.0, 1.0)[:, None]
    heights = -np.einsum("ix,ix->i", normals, tri[ok, 0])
    cos_tilt = math.cos(math.radians(config.max_ground_tilt_deg))
    ok = (normals @ up >= cos_tilt) & (heights > 0)
    if not ok.any():
        return None
    normals, heights = normals[ok], heights[ok]
    dist = np.abs(scored @ normals.T + heights)  # (M, I)
    score = (dist < config.ground_inlier_ratio * heights).sum(axis=0)
    best = int(np.argmax(score))
    normal, height = normals[best], float(heights[best])
    for _ in range(2):  # least-squares refinement on the inliers
        inl = below[_plane_inliers(below, normal, height, config.ground_inlier_ratio)]
        if len(inl) < 3:
            return None
        centre = inl.mean(axis=0)
        normal = np.linalg.svd(inl - centre, full_matrices=False)[2][2]
        normal = normal if normal @ up >= 0 else -normal
        height = -float(normal @ centre)
        if not (normal @ up >= cos_tilt and height > 0):
            return None
    n_in = int(np.count_nonzero(_plane_inliers(below, normal, height,
                                               config.ground_inlier_ratio)))
    if n_in < config.ground_min_inliers:
        return None
    return GroundPlane(normal, height, n_in)


def camera_height_sample(stamp_s: float, points: np.ndarray, T_base_optical: np.ndarray,
                         camera_height_m: Optional[float] = None,
                         config: ScaleConfig = ScaleConfig(source="camera_height"),
                         conf: Optional[np.ndarray] = None, seed: int = 0) -> SampleResult:
    """One frame's sample from its predicted points ``points`` (H, W, 3) or (N, 3) in the
    camera's optical frame (model units) and the camera's height over the ground in metres
    (``camera_height_m``, else ``config.camera_height_m``). ``conf`` (H, W) or (N,), if
    given, masks points below ``depth_min_conf``. Never raises on bad input."""
    height_m = config.camera_height_m if camera_height_m is None else camera_height_m
    if not (isinstance(height_m, (int, float)) and math.isfinite(height_m) and height_m > 0):
        return Rejection(stamp_s, "no_height", f"camera height {height_m!r} is not a number "
                         "of metres > 0")
    if not is_rigid(T_base_optical):
        return Rejection(stamp_s, "non_finite", "T_base_optical is not a finite rigid 4x4")
    pts = np.asarray(points)
    if pts.ndim < 2 or pts.shape[-1] != 3 or pts.dtype.kind != "f":
        return Rejection(stamp_s, "wrong_size", f"points must be (..., 3) floats, got "
                         f"{pts.shape} {pts.dtype}")
    pts = pts.reshape(-1, 3)
    if conf is not None:
        c = np.asarray(conf).reshape(-1)
        if c.shape[0] != pts.shape[0]:
            return Rejection(stamp_s, "wrong_size", f"{c.shape[0]} confidences for "
                             f"{pts.shape[0]} points")
        if not np.isfinite(c).all():
            return Rejection(stamp_s, "non_finite", "the confidence has NaN/inf")
        pts = pts[c >= config.depth_min_conf]
    if not np.isfinite(pts).all():
        return Rejection(stamp_s, "non_finite", "the predicted points have NaN/inf")
    # the base's up axis (z) seen from the optical frame: R_bo^T e_z
    up = np.asarray(T_base_optical, dtype=np.float64)[2, :3]
    plane = fit_ground_plane(pts.astype(np.float64, copy=False), up, config, seed)
    if plane is None:
        return Rejection(stamp_s, "no_floor", "no ground plane within "
                         f"{config.max_ground_tilt_deg} deg of up below the camera")
    k = float(height_m) / plane.height
    if not (math.isfinite(k) and k > 0):
        return Rejection(stamp_s, "no_floor", f"degenerate floor at {plane.height} units")
    return ScaleSample(stamp_s, k, "camera_height", support=plane.inliers)

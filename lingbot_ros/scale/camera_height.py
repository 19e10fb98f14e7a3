"""The ``camera_height`` source: the floor under the camera in the predicted points.

The frame's predicted points (the camera's optical frame, model units) below the camera
(along the base's up axis, ``T_base_optical``'s z axis seen from the camera) are searched for
a ground plane by RANSAC: a plane whose upward normal lies within ``max_ground_tilt_deg`` of
that axis, inliers within ``ground_inlier_ratio`` x its distance to the camera, at least
``ground_min_inliers`` of them. The camera's distance to that plane is its height in model
units; the sample is ``camera_height_m / height_model``. A frame without a credible floor
gives ``no_floor``. Deterministic: the candidates are spread evenly over the points, the
hypotheses' triples come from a Generator seeded with ``seed``.

The search, sized for the budget of 1 ms p99 per frame at 518x378 (``lingbot-ros-bench``'s
``scale_estimator``, docs/scale.md):

* the candidates: ``RANSAC_POINTS`` of the points below the camera, evenly spread over them
  (over the image, for a depth grid's points);
* the hypotheses: planes through ``RANSAC_ITERATIONS`` triples of distinct candidates, the
  first ``RANSAC_FIRST`` made at once and the others only when the search goes on; those
  outside the tilt bound or not below the camera are dropped before any scoring (most
  triples not on the floor are);
* the scoring: in batches of ``RANSAC_BATCH``, a batch of planes against all the candidates
  in one matrix product (hypotheses x candidates), in draw order; it stops early once the
  best plane's share of the candidates makes it unlikely that a better all-floor triple is
  still to come (``RANSAC_CONFIDENCE``);
* the refinement: least squares on the best plane's inliers among the candidates, twice,
  then on its inliers among all the points below the camera (at most ``MAX_POINTS`` of
  them), whose number is its support (the fit takes at most ``FIT_POINTS`` of them, evenly
  spread).

The points travel as (3, N) rows (x, y, z) in the depth's own float type (float32 for the
model's depth); the fits are in float64.

:func:`camera_height_depth_sample` takes a frame's predicted depth map instead: every
``depth_stride``-th model pixel along x and y (the depth source's grid) is unprojected with
the intrinsics at the model's resolution into the optical frame first
(:func:`depth_grid_points`, what the node and the offline runner do).
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional, Union

import numpy as np

from ..geometry import is_rigid
from .config import ScaleConfig
from .samples import Rejection, SampleResult, ScaleSample
from .se3 import POSE_TOL

__all__ = ["GroundPlane", "fit_ground_plane", "camera_height_sample", "depth_grid_points",
           "camera_height_depth_sample"]

RANSAC_ITERATIONS = 512  # hypotheses (point triples), made in two goes ...
RANSAC_FIRST = 128  # ... these first, the rest when no plane has stopped the search ...
RANSAC_BATCH = 32  # ... scored this many at a time ...
RANSAC_CONFIDENCE = 0.999  # ... until an all-floor triple would have come with this chance
RANSAC_POINTS = 640  # the hypotheses are drawn from and scored on this many candidates
MAX_POINTS = 32768  # the refined plane's inliers are counted on at most this many points ...
FIT_POINTS = 4096  # ... and fitted on at most this many of them


class GroundPlane:
    """``normal . x = -height`` in the camera's frame: ``normal`` (unit, pointing up, toward
    the camera), ``height`` the camera's distance to the plane, ``inliers`` its support."""

    __slots__ = ("normal", "height", "inliers")

    def __init__(self, normal: np.ndarray, height: float, inliers: int) -> None:
        self.normal, self.height, self.inliers = normal, height, inliers


def _spread(n: int, m: int) -> np.ndarray:
    """``m`` of ``range(n)`` (m < n), evenly spread: one in each of m equal strata."""
    return np.arange(m) * n // m


_ROTATED = np.array([0, 1, 2, 1, 2, 0, 2, 0, 1])  # x y z, y z x, z x y


@lru_cache(maxsize=64)
def _triples(m: int, seed: int) -> np.ndarray:
    """The hypotheses' point triples: (3, RANSAC_ITERATIONS) indices of distinct points in
    ``range(m)`` (m >= 3), drawn once per (m, seed) by a seeded Generator (read only)."""
    rng = np.random.default_rng(seed)
    first = rng.integers(0, m, RANSAC_ITERATIONS)
    second = (first + rng.integers(1, m, RANSAC_ITERATIONS)) % m
    third = (first + rng.integers(1, m - 1, RANSAC_ITERATIONS)) % m  # != first
    third = np.where(third == second, (first + m - 1) % m, third)  # != second: the free one
    out = np.stack([first, second, third])
    out.flags.writeable = False
    return out


def _least_squares_plane(points: np.ndarray, up: np.ndarray):
    """The plane that minimises the squared distances of ``points`` (4, n) float64, rows x,
    y, z and 1, n >= 3: (unit normal on ``up``'s side, height = -normal . centroid), or
    None when they do not span a plane. The moments come from one product (uncentred: fine
    in float64 for points a few model units away); the normal is the scatter's eigenvector
    of the smallest eigenvalue, in closed form (numpy's eigh costs more than all the rest)."""
    (sxx, sxy, sxz, sx), (_, syy, syz, sy), (_, _, szz, sz), (_, _, _, n) = \
        (points @ points.T).tolist()
    cx, cy, cz = sx / n, sy / n, sz / n
    a, b, c = sxx / n - cx * cx, syy / n - cy * cy, szz / n - cz * cz  # the covariance
    d, e, f = sxy / n - cx * cy, sxz / n - cx * cz, syz / n - cy * cz  # [[a d e] [d b f] [e f c]]
    # the smallest eigenvalue (trigonometric solution of the characteristic cubic)
    q = (a + b + c) / 3.0
    off = d * d + e * e + f * f
    p = math.sqrt(((a - q) ** 2 + (b - q) ** 2 + (c - q) ** 2 + 2.0 * off) / 6.0)
    if not p > 0:
        return None  # isotropic or all one point
    a_, b_, c_ = (a - q) / p, (b - q) / p, (c - q) / p
    r = (a_ * (b_ * c_ - f * f / p / p) - d / p * (d / p * c_ - f / p * e / p)
         + e / p * (d / p * f / p - b_ * e / p)) / 2.0
    smallest = q + 2.0 * p * math.cos(math.acos(min(1.0, max(-1.0, r))) / 3.0
                                      + 2.0 * math.pi / 3.0)
    # its eigenvector: the null direction of the scatter minus it, the largest cross product
    # of two of its rows
    r0, r1, r2 = (a - smallest, d, e), (d, b - smallest, f), (e, f, c - smallest)
    best, best_sq = None, 0.0
    for u, v in ((r0, r1), (r0, r2), (r1, r2)):
        w = (u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0])
        sq = w[0] * w[0] + w[1] * w[1] + w[2] * w[2]
        if sq > best_sq:
            best, best_sq = w, sq
    if best is None or not best_sq > (1e-12 * p * p) ** 2:
        return None  # collinear: no plane
    norm = math.sqrt(best_sq)
    if best[0] * up[0] + best[1] * up[1] + best[2] * up[2] < 0:
        norm = -norm
    normal = (best[0] / norm, best[1] / norm, best[2] / norm)
    return normal, -(normal[0] * cx + normal[1] * cy + normal[2] * cz)


def _hypotheses(cand: np.ndarray, triples: np.ndarray, up: np.ndarray, cos_tilt: float,
                ratio: float):
    """Planes through ``triples`` (3, I) of the candidates ``cand`` (4, M) (x, y, z, 1 rows)
    that can be the floor (within the tilt, below the camera): ``(draw (H,), planes (H,
    4))``, ``draw`` each one's triple (increasing) and ``planes . (x, y, z, 1)`` the signed
    distance in units of the inlier band (``ratio`` x the plane's height): a candidate is an
    inlier where its magnitude is below 1."""
    # the coordinates in three rotations (x y z, y z x, z x y): a cross product in 3 ops
    tri = cand.take(_ROTATED, axis=0).take(triples, axis=1)  # (9, 3, I)
    edges = tri[:, 1:] - tri[:, :1]  # (9, 2, I): b - a, c - a
    e1, e2 = edges[:, 0], edges[:, 1]
    normals = e1[3:6] * e2[6:9] - e1[6:9] * e2[3:6]  # (3, I), not unit: |e1| |e2| sin
    along = up @ normals
    na = np.einsum("xi,xi->i", normals, tri[:3, 0])  # normal . a: -height x |normal| x sign
    # within the tilt: along / |normal| >= cos; below the camera: the up-pointing normal's
    # height -sign(along) na > 0 (a triple of repeated points has no normal, no height)
    draw = np.flatnonzero((along * along >= cos_tilt ** 2 * np.einsum("xi,xi->i", normals,
                                                                       normals))
                          & (along * na < 0))
    # |n . p - n . a| < ratio |n . a|  <=>  |n / (ratio n . a) . p - 1 / ratio| < 1
    planes = np.empty((4, len(draw)))
    planes[:3] = normals.take(draw, axis=1)
    planes[:3] /= ratio * na.take(draw)
    planes[3] = -1.0 / ratio
    return draw, planes.T


def _ransac(cand: np.ndarray, up: np.ndarray, config: ScaleConfig, seed: int):
    """The inliers (M,) bool of the plane with the most of them among the candidates
    ``cand`` (4, M) (x, y, z, 1 rows, float64), or None when no hypothesis can be the
    floor. The planes of the first ``RANSAC_FIRST`` triples are made first, the others only
    when the search goes on."""
    cos_tilt = math.cos(math.radians(config.max_ground_tilt_deg))
    triples = _triples(cand.shape[1], seed)
    best, best_score, needed = None, 0, RANSAC_ITERATIONS
    for first, last in ((0, RANSAC_FIRST), (RANSAC_FIRST, RANSAC_ITERATIONS)):
        if first >= needed:
            break
        draw, planes = _hypotheses(cand, triples[:, first:last], up, cos_tilt,
                                   config.ground_inlier_ratio)
        for start in range(0, len(draw), RANSAC_BATCH):
            if first + draw[start] >= needed:
                break  # enough triples tried for the best plane's share of the candidates
            dist = planes[start:start + RANSAC_BATCH] @ cand  # (B, M): a batch in one product
            inliers = np.abs(dist, out=dist) < 1.0
            score = inliers.sum(axis=1)
            i = int(score.argmax())
            if score[i] > best_score:
                best, best_score = inliers[i], int(score[i])
                miss = 1.0 - (best_score / cand.shape[1]) ** 3  # a triple is not all on it
                if miss < 1.0:
                    needed = math.ceil(math.log(1.0 - RANSAC_CONFIDENCE)
                                       / math.log(max(miss, 1e-12)))
    return best


def _fit_rows(rows: np.ndarray, up: np.ndarray, config: ScaleConfig, seed: int = 0,
              valid: Optional[np.ndarray] = None) -> Optional[GroundPlane]:
    """:func:`fit_ground_plane` on ``rows`` (3, N) floats (x, y, z rows), all finite, of
    which only those ``valid`` (N,) bool count (None: all); ``up`` unit."""
    if rows.shape[1] > MAX_POINTS:
        keep = _spread(rows.shape[1], MAX_POINTS)
        rows = rows.take(keep, axis=1)
        valid = None if valid is None else valid[keep]
    below = up.astype(rows.dtype) @ rows < 0
    if valid is not None:
        below &= valid
    below_idx = np.flatnonzero(below)
    n_below = len(below_idx)
    if n_below < max(3, config.ground_min_inliers):
        return None
    if n_below > RANSAC_POINTS:
        below_idx = below_idx[_spread(n_below, RANSAC_POINTS)]
    cand = np.ones((4, len(below_idx)))  # the candidates: (x, y, z, 1) rows, float64
    cand[:3] = rows.take(below_idx, axis=1)
    inliers = _ransac(cand, up, config, seed)
    if inliers is None or np.count_nonzero(inliers) < 3:
        return None
    cos_tilt = math.cos(math.radians(config.max_ground_tilt_deg))
    ratio = config.ground_inlier_ratio
    # least squares on the best plane's inliers among the candidates, twice (the second
    # time on the refined plane's), then on (at most FIT_POINTS of) its inliers among all
    # the points, whose number is its support
    for refit in range(2):
        if refit:
            inliers = np.abs(np.array([*normal, height]) @ cand) < ratio * height
            if np.count_nonzero(inliers) < 3:
                return None
        plane = _least_squares_plane(cand.compress(inliers, axis=1), up)
        if plane is None or not (np.dot(plane[0], up) >= cos_tilt and plane[1] > 0):
            return None
        normal, height = plane
    dist = np.asarray(normal, rows.dtype) @ rows
    dist += height
    inliers = np.abs(dist, out=dist) < ratio * height
    inliers &= below
    inlier_idx = np.flatnonzero(inliers)
    if len(inlier_idx) < max(3, config.ground_min_inliers):
        return None
    fit = inlier_idx[::-(-len(inlier_idx) // FIT_POINTS)]
    points = np.ones((4, len(fit)))
    points[:3] = rows.take(fit, axis=1)
    plane = _least_squares_plane(points, up)
    if plane is None or not (np.dot(plane[0], up) >= cos_tilt and plane[1] > 0):
        return None
    return GroundPlane(np.array(plane[0]), plane[1], len(inlier_idx))


def fit_ground_plane(points: np.ndarray, up: np.ndarray, config: ScaleConfig,
                     seed: int = 0) -> Optional[GroundPlane]:
    """RANSAC floor in ``points`` (N, 3), finite, camera frame; ``up`` the up axis in the
    same frame. None when no plane within the tilt bound has enough inliers."""
    up = np.asarray(up, dtype=np.float64).reshape(3)
    length = float(np.linalg.norm(up))
    if not (math.isfinite(length) and length > 0):
        return None
    return _fit_rows(_as_rows(points), up / length, config, seed)


def _as_rows(points: np.ndarray) -> np.ndarray:
    """(..., 3) floats -> (3, N) C-contiguous rows, float32 or float64 as given (free for
    the points of :func:`depth_grid_points`, a view of such rows)."""
    pts = np.asarray(points)
    dtype = np.float32 if pts.dtype == np.float32 else np.float64
    return np.ascontiguousarray(pts.reshape(-1, 3).T, dtype=dtype)


@lru_cache(maxsize=16)
def _up_axis(T_bytes: bytes) -> Optional[np.ndarray]:
    """The base's up axis (z) seen from the optical frame, ``R_bo^T e_z`` (unit, read only),
    of a ``T_base_optical`` given by its float64 bytes; None when it is not a finite rigid
    transform. Cached: a camera's mount rarely changes."""
    T = np.frombuffer(T_bytes).reshape(4, 4)
    if not is_rigid(T, tol=POSE_TOL, last_row_tol=POSE_TOL):
        return None
    up = T[2, :3] / np.linalg.norm(T[2, :3])
    up.flags.writeable = False
    return up


def _checked_inputs(stamp_ns: int, camera_height_m, T_base_optical, config: ScaleConfig):
    """``(height in metres, up axis)``, or the Rejection of the height or of
    ``T_base_optical``."""
    height_m = config.camera_height_m if camera_height_m is None else camera_height_m
    if not (isinstance(height_m, (int, float)) and math.isfinite(height_m) and height_m > 0):
        return Rejection(stamp_ns, "no_height", f"camera height {height_m!r} is not a number "
                         "of metres > 0")
    try:
        T = np.asarray(T_base_optical, dtype=np.float64)
    except (TypeError, ValueError):
        T = None
    up = _up_axis(T.tobytes()) if T is not None and T.shape == (4, 4) else None
    if up is None:
        return Rejection(stamp_ns, "non_finite", "T_base_optical is not a finite rigid 4x4")
    return float(height_m), up


def _sample(stamp_ns: int, rows: np.ndarray, conf, up: np.ndarray, height_m: float,
            config: ScaleConfig, seed: int) -> SampleResult:
    """The sample of the points ``rows`` (3, N) (x, y, z rows) with their confidences
    ``conf`` ((N,)-sized, or None)."""
    valid = None
    if conf is not None:
        c = np.asarray(conf).reshape(-1)
        if c.shape[0] != rows.shape[1]:
            return Rejection(stamp_ns, "wrong_size", f"{c.shape[0]} confidences for "
                             f"{rows.shape[1]} points")
        if c.size and not (math.isfinite(c.min()) and math.isfinite(c.max())):
            return Rejection(stamp_ns, "non_finite", "the confidence has NaN/inf")
        valid = c >= config.depth_min_conf
        if valid.all():
            valid = None
    if not np.isfinite(rows).all():  # fine where only masked points are not finite
        if valid is None or not np.isfinite(rows.compress(valid, axis=1)).all():
            return Rejection(stamp_ns, "non_finite", "the predicted points have NaN/inf")
        rows = np.where(valid, rows, 0)
    plane = _fit_rows(rows, up, config, seed, valid)
    if plane is None:
        return Rejection(stamp_ns, "no_floor", "no ground plane within "
                         f"{config.max_ground_tilt_deg} deg of up below the camera")
    k = height_m / plane.height
    if not (math.isfinite(k) and k > 0):
        return Rejection(stamp_ns, "no_floor", f"degenerate floor at {plane.height} units")
    return ScaleSample(stamp_ns, k, "camera_height", support=plane.inliers)


def camera_height_sample(stamp_ns: int, points: np.ndarray, T_base_optical: np.ndarray,
                         camera_height_m: Optional[float] = None,
                         config: ScaleConfig = ScaleConfig(source="camera_height"),
                         conf: Optional[np.ndarray] = None, seed: int = 0) -> SampleResult:
    """One frame's sample from its predicted points ``points`` (H, W, 3) or (N, 3) in the
    camera's optical frame (model units) and the camera's height over the ground in metres
    (``camera_height_m``, else ``config.camera_height_m``). ``conf`` (H, W) or (N,), if
    given, masks points below ``depth_min_conf``. Never raises on bad input."""
    checked = _checked_inputs(stamp_ns, camera_height_m, T_base_optical, config)
    if isinstance(checked, Rejection):
        return checked
    pts = np.asarray(points)
    if pts.ndim < 2 or pts.shape[-1] != 3 or pts.dtype.kind != "f":
        return Rejection(stamp_ns, "wrong_size", f"points must be (..., 3) floats, got "
                         f"{pts.shape} {pts.dtype}")
    height_m, up = checked
    return _sample(stamp_ns, _as_rows(pts), conf, up, height_m, config, seed)


@lru_cache(maxsize=16)
def _grid_rays(hw: tuple, stride: int, K_bytes: bytes, dtype: str):
    """The rays (x/z, y/z) of the grid of :func:`depth_grid_points` on an ``hw`` map: a row
    (W',) of x and a column (H', 1) of y (read only); None for intrinsics that are not
    finite and positive. Cached: a stream's intrinsics rarely change."""
    K = np.frombuffer(K_bytes).reshape(3, 3)
    if not (np.isfinite(K).all() and K[0, 0] > 0 and K[1, 1] > 0):
        return None
    s = stride
    x_ray = ((np.arange(s // 2, hw[1], s) - K[0, 2]) / K[0, 0]).astype(dtype)
    y_ray = ((np.arange(s // 2, hw[0], s) - K[1, 2]) / K[1, 1]).astype(dtype)[:, None]
    x_ray.flags.writeable = y_ray.flags.writeable = False
    return x_ray, y_ray


def depth_grid_points(depth: np.ndarray, K: np.ndarray, stride: int,
                      conf: Optional[np.ndarray] = None):
    """The points of a depth map (H, W) (z-depth, model units) on a grid of every
    ``stride``-th pixel along x and y (from ``stride // 2``), in the optical frame (x right,
    y down, z forward) through the pinhole ``K`` (3, 3) at the depth map's resolution.
    Returns ``(points (N, 3), conf (N,) or None)`` for the pixels of positive depth:
    ``points`` float32 for a float32 (or narrower) depth, else float64, the transposed view
    of C-contiguous (3, N) rows; a Rejection (``wrong_size`` / ``non_finite``) for a map
    that cannot give points."""
    d = np.asarray(depth)
    if d.ndim == 3 and d.shape[-1] == 1:
        d = d[..., 0]
    K = np.asarray(K, dtype=np.float64)
    if d.ndim != 2 or d.dtype.kind != "f" or K.shape != (3, 3):
        return Rejection(math.nan, "wrong_size", f"depth must be (H, W) floats and K 3x3, got "
                         f"{d.shape} {d.dtype} and {K.shape}")
    c = None if conf is None else np.asarray(conf)
    if c is not None and c.ndim == 3 and c.shape[-1] == 1:
        c = c[..., 0]
    if c is not None and c.shape != d.shape:
        return Rejection(math.nan, "wrong_size", f"confidence {c.shape} is not the depth's "
                         f"{d.shape}")
    s = max(1, int(stride))
    dtype = "float32" if d.dtype.itemsize <= 4 else "float64"
    rays = _grid_rays(d.shape, s, K.tobytes(), dtype)
    if rays is None:
        return Rejection(math.nan, "non_finite", "the intrinsics are not finite and positive")
    grid = (slice(s // 2, None, s), slice(s // 2, None, s))
    z = d[grid]
    lo, hi = (z.min(), z.max()) if z.size else (1.0, 1.0)  # NaN in both if there is one
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return Rejection(math.nan, "non_finite", "the predicted depth has NaN/inf")
    rows = np.empty((3,) + z.shape, dtype)
    rows[2] = z
    np.multiply(rows[2], rays[0], out=rows[0])
    np.multiply(rows[2], rays[1], out=rows[1])
    rows = rows.reshape(3, -1)
    c = None if c is None else c[grid].reshape(-1)
    if not lo > 0:  # the model's depth is positive: rarely taken
        keep = rows[2] > 0
        rows = rows.compress(keep, axis=1)
        c = None if c is None else c.compress(keep)
    return rows.T, c


def camera_height_depth_sample(stamp_ns: int, depth: np.ndarray, K: np.ndarray,
                               T_base_optical: np.ndarray,
                               camera_height_m: Optional[float] = None,
                               config: ScaleConfig = ScaleConfig(source="camera_height"),
                               conf: Optional[np.ndarray] = None,
                               seed: int = 0) -> SampleResult:
    """One frame's sample from its predicted depth map (H, W) (model units) and ``K`` (3, 3)
    at that resolution: the points of :func:`depth_grid_points` (``config.depth_stride``)
    and their confidences, as :func:`camera_height_sample` takes them. Never raises on bad
    input."""
    checked = _checked_inputs(stamp_ns, camera_height_m, T_base_optical, config)
    if isinstance(checked, Rejection):
        return checked
    points = depth_grid_points(depth, K, config.depth_stride, conf)
    if isinstance(points, Rejection):
        return Rejection(stamp_ns, points.reason, points.detail)
    height_m, up = checked
    return _sample(stamp_ns, points[0].T, points[1], up, height_m, config, seed)

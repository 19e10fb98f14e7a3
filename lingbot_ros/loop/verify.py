"""Verification of a loop candidate: the pair's outputs -> a Sim(3) measurement, and its gates
(docs/loop.md, "Verification").

The model runs on the pair (``pair_runner.py``): the stored keyframe, then the current frame,
in a fresh two-frame stream. Its outputs (:class:`PairOutputs`, model units of the pair, the
pair's own world) are tied to the map here:

* **scale tie**: ``s = median(D_stored / D_pair_kf)`` over the pixels ``[::k, ::k]`` (``k``
  the stored depth's stride) where both depths are finite and > 0 and the pair's
  confidence is at least ``loop.verify_min_conf``: stored units per pair unit. Fewer than
  ``loop.min_valid_pixels`` such pixels: ``too_few_pixels``.
* **measurement**: ``T_pair = inverse(c2w_kf) @ c2w_cur`` (rigid, pair units), and
  ``T_kf_cur = [[sigma R_pair, s t_pair], [0, 1]]``: the current frame seen from the
  keyframe, its translation in the keyframe's (stored) units, ``sigma`` the relative scale
  as ``PoseGraph.add_loop`` takes it (the current frame's unit in the keyframe's units):
  ``s / s_cur``, ``s_cur = median(D_front_end_cur / D_pair_cur)`` (the same rule) when the
  front end's depth of the current frame is given, else 1 (the front end's units taken as
  unchanged since the keyframe; exact once metres are locked).
* **geometric consistency**: the pair's current depth, every ``k``-th pixel each way, is
  back-projected with ``K_cur``, moved into the keyframe by ``T_pair``, projected with ``K_kf``
  (pair units throughout); a point landing in front of the keyframe's camera, inside its
  image (nearest pixel), on a valid and confident pair depth ``z_kf`` overlaps; it is an
  inlier when ``|z / z_kf - 1| <= loop.inlier_depth_ratio``. Fewer than
  ``loop.min_valid_pixels`` overlapping: ``little_overlap``; an inlier fraction below
  ``loop.min_inlier_fraction``: ``inconsistent``.
* **plausibility**: the implied current pose is the stored keyframe pose times the
  measurement, made rigid: ``R = R_kf R_pair``, ``t = R_kf (s t_pair) + t_kf``. Its
  correction against the front end's pose of the current frame, ``|t - t_fe|`` and the angle
  of ``R_fe^T R``, at most ``loop.max_correction_m`` / ``loop.max_correction_deg``, else
  ``implausible``.
* **confirmation**: a loop that passed is accepted only when a second one agrees
  (``LoopConfirmation``, in ``confirm.py``).

Numpy and lingbot_ros.geometry only.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..geometry import check_rigid, rigid_inverse, rotation_angle
from .config import LoopConfig
from .graph_types import ROTATION_TOL
from .place_db import PlaceKeyframe

__all__ = ["LoopReason", "REJECTIONS", "PairOutputs", "VerifyResult", "LoopVerifier",
           "verify_pair", "scale_tie", "reprojection_inliers", "implied_pose"]


class LoopReason:
    """The one vocabulary of verification: ``verified`` (every gate of one verification
    passed) or why a candidate was rejected; counters are keyed by these strings."""

    VERIFIED = "verified"
    NON_FINITE = "non_finite"  # a pose of the pair is not finite
    TOO_FEW_PIXELS = "too_few_pixels"  # the scale tie: fewer than min_valid_pixels
    LITTLE_OVERLAP = "little_overlap"  # geometric: fewer than min_valid_pixels reprojected
    INCONSISTENT = "inconsistent"  # geometric: inlier fraction below min_inlier_fraction
    IMPLAUSIBLE = "implausible"  # the implied correction over max_correction_m / _deg


REJECTIONS = (LoopReason.NON_FINITE, LoopReason.TOO_FEW_PIXELS, LoopReason.LITTLE_OVERLAP,
              LoopReason.INCONSISTENT, LoopReason.IMPLAUSIBLE)


def _frozen(a, name: str, shape: Optional[tuple] = None, dtype=np.float64) -> np.ndarray:
    out = np.array(a, dtype=dtype)  # a copy
    if shape is not None and out.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {out.shape}")
    out.flags.writeable = False
    return out


@dataclass(frozen=True, eq=False)
class PairOutputs:
    """The two-frame stream's outputs (read-only copies): both frames' camera-to-world poses
    in the pair's world (OpenCV optical axes, the pair's model units), their depths along
    the optical axis and confidences (H, W) at model resolution, and their intrinsics there
    (the model predicts them per frame)."""

    c2w_kf: np.ndarray
    c2w_cur: np.ndarray
    depth_kf: np.ndarray = field(repr=False)
    conf_kf: np.ndarray = field(repr=False)
    depth_cur: np.ndarray = field(repr=False)
    conf_cur: np.ndarray = field(repr=False)
    K_kf: np.ndarray  # (3, 3) each frame's predicted intrinsics at model resolution
    K_cur: np.ndarray

    def __post_init__(self) -> None:
        hw = np.shape(self.depth_kf)
        if len(hw) != 2 or min(hw) < 1:
            raise ValueError(f"depth_kf must be (H, W), got {hw}")
        for name in ("c2w_kf", "c2w_cur"):
            object.__setattr__(self, name, _frozen(getattr(self, name), name, (4, 4)))
        for name in ("depth_kf", "conf_kf", "depth_cur", "conf_cur"):
            object.__setattr__(self, name, _frozen(getattr(self, name), name, hw, np.float32))
        for name in ("K_kf", "K_cur"):
            k = _frozen(getattr(self, name), name, (3, 3))
            if not (np.isfinite(k).all() and abs(np.linalg.det(k)) > 0):
                raise ValueError(f"{name} must be finite and invertible")
            object.__setattr__(self, name, k)

    @property
    def hw(self) -> tuple[int, int]:
        return tuple(self.depth_kf.shape)


@dataclass(frozen=True, eq=False)
class VerifyResult:
    """One verification. ``accepted``: every gate passed (``reason`` ``verified``); else the
    rejecting gate's reason. Values a gate did not reach are nan / None. ``measurement``
    (4, 4) is ``T_kf_cur`` for ``PoseGraph.add_loop(keyframe_id, <current id>, ...)``."""

    keyframe_id: int
    stamp_ns: int  # the current frame's
    accepted: bool
    reason: str
    scale: float  # s: stored units per pair unit
    relative_scale: float  # sigma: the current frame's unit in the keyframe's
    scale_pixels: int  # pixels of the scale tie
    overlap_pixels: int  # reprojected pixels that landed on a valid keyframe depth
    inlier_fraction: float
    correction_m: float  # |t_implied - t_front_end| (stream units)
    correction_deg: float
    measurement: Optional[np.ndarray]  # (4, 4) Sim(3) T_kf_cur
    implied_pose: Optional[np.ndarray]  # (4, 4) rigid: where the loop puts the current frame
    front_end_pose: np.ndarray  # (4, 4) rigid: where the front end has it

    def correction(self) -> np.ndarray:
        """The rigid correction this loop implies (``map -> odom`` at the current frame):
        ``implied_pose @ inverse(front_end_pose)``; ValueError before the measurement."""
        if self.implied_pose is None:
            raise ValueError(f"no measurement: rejected {self.reason}")
        return self.implied_pose @ rigid_inverse(self.front_end_pose)


def _valid(depth: np.ndarray, conf: Optional[np.ndarray], min_conf: float) -> np.ndarray:
    ok = np.isfinite(depth) & (depth > 0)
    if conf is not None:
        ok &= conf >= min_conf
    return ok


def scale_tie(reference, pair_depth, pair_conf, stride: int,
              min_conf: float) -> tuple[float, int]:
    """``(median(reference / pair_depth[::stride, ::stride]), n)`` over the n pixels where
    both are finite and > 0 and ``pair_conf[::stride, ::stride] >= min_conf``; ``reference``
    is already strided (the stored depth) or full size (a front end's depth: then strided
    here too). nan when n is 0."""
    pair = np.asarray(pair_depth)[::stride, ::stride]  # (h, w), the stored depth's grid
    conf = np.asarray(pair_conf)[::stride, ::stride]
    ref = np.asarray(reference, dtype=np.float64)
    if ref.shape != pair.shape:
        ref = ref[::stride, ::stride]
    if ref.shape != pair.shape:
        raise ValueError(f"the reference depth {np.shape(reference)} does not match the "
                         f"pair's depth {np.shape(pair_depth)} at stride {stride}")
    ok = _valid(ref, None, 0.0) & _valid(pair, conf, min_conf)
    n = int(np.count_nonzero(ok))
    if n == 0:
        return math.nan, 0
    return float(np.median(ref[ok] / pair[ok].astype(np.float64))), n


def reprojection_inliers(pair: PairOutputs, T_kf_cur_pair: np.ndarray, stride: int,
                         ratio: float, min_conf: float) -> tuple[int, int]:
    """``(overlapping, inliers)``: the pair's current depth at ``[::stride, ::stride]``
    moved into the keyframe by the pair's rigid ``T_kf_cur_pair`` and compared with the
    pair's keyframe depth at the nearest pixel (module docstring)."""
    h, w = pair.hw
    vs, us = np.mgrid[0:h:stride, 0:w:stride]  # (h', w') pixel rows, columns
    z = pair.depth_cur[::stride, ::stride].astype(np.float64)
    ok = _valid(z, pair.conf_cur[::stride, ::stride], min_conf)
    pix = np.stack([us[ok], vs[ok], np.ones(int(ok.sum()))]).astype(np.float64)  # (3, N)
    cam = (np.linalg.inv(pair.K_cur) @ pix) * z[ok]  # (3, N) in the current camera
    kf = T_kf_cur_pair[:3, :3] @ cam + T_kf_cur_pair[:3, 3:4]  # (3, N) in the keyframe's
    front = kf[2] > 0
    proj = pair.K_kf @ kf[:, front]  # (3, M)
    iu = np.rint(proj[0] / proj[2])
    iv = np.rint(proj[1] / proj[2])
    inside = (iu >= 0) & (iu < w) & (iv >= 0) & (iv < h)
    iu, iv = iu[inside].astype(np.int64), iv[inside].astype(np.int64)
    z_proj = kf[2, front][inside]
    z_ref = pair.depth_kf[iv, iu].astype(np.float64)
    on = _valid(z_ref, pair.conf_kf[iv, iu], min_conf)
    err = np.abs(z_proj[on] / z_ref[on] - 1.0)
    return int(np.count_nonzero(on)), int(np.count_nonzero(err <= ratio))


def implied_pose(T_world_kf, measurement) -> np.ndarray:
    """The rigid pose (4, 4) the measurement ``T_kf_cur`` (Sim(3)) gives the current frame
    from the keyframe's pose: ``R = R_kf R_m``, ``t = R_kf t_m + t_kf`` (the measurement's
    translation is in the keyframe's units; its scale drops: a pose is rigid)."""
    m = np.asarray(measurement, dtype=np.float64)
    sr = m[:3, :3]
    out = np.eye(4)
    out[:3, :3] = T_world_kf[:3, :3] @ (sr / np.cbrt(np.linalg.det(sr)))
    out[:3, 3] = T_world_kf[:3, :3] @ m[:3, 3] + T_world_kf[:3, 3]
    return out


def verify_pair(pair: PairOutputs, keyframe: PlaceKeyframe, T_world_cur, stamp_ns: int,
                config: LoopConfig, current_depth=None) -> VerifyResult:
    """Verify one candidate (module docstring): ``keyframe`` as the database keeps it,
    ``T_world_cur`` the front end's rigid pose of the current frame (stream world),
    ``current_depth`` optionally its depth (H, W) from the front end (for the relative
    scale). The gates run in order; the first that fails gives the reason."""
    if not isinstance(pair, PairOutputs):
        raise ValueError(f"pair must be a PairOutputs, got {type(pair).__name__}")
    if not isinstance(keyframe, PlaceKeyframe):
        raise ValueError(f"keyframe must be a PlaceKeyframe, got {type(keyframe).__name__}")
    if tuple(keyframe.depth_hw) != pair.hw:
        raise ValueError(f"the stored depth is of a {keyframe.depth_hw} depth, the pair's is "
                         f"{pair.hw}: verify at the stream's model resolution")
    fe = check_rigid(T_world_cur, "T_world_cur", tol=ROTATION_TOL)
    base = dict(keyframe_id=keyframe.keyframe_id, stamp_ns=int(stamp_ns), accepted=False,
                scale=math.nan, relative_scale=math.nan, scale_pixels=0, overlap_pixels=0,
                inlier_fraction=math.nan, correction_m=math.nan, correction_deg=math.nan,
                measurement=None, implied_pose=None, front_end_pose=_frozen(fe, "pose"))
    if not (np.isfinite(pair.c2w_kf).all() and np.isfinite(pair.c2w_cur).all()):
        return VerifyResult(reason=LoopReason.NON_FINITE, **base)
    c = config
    k = keyframe.depth_stride
    s, n = scale_tie(keyframe.depth, pair.depth_kf, pair.conf_kf, k, c.verify_min_conf)
    base["scale_pixels"] = n
    sigma = 1.0
    if n >= c.min_valid_pixels and current_depth is not None:
        if np.shape(current_depth) != pair.hw:
            raise ValueError(f"current_depth must be {pair.hw}, got {np.shape(current_depth)}")
        s_cur, n_cur = scale_tie(current_depth, pair.depth_cur, pair.conf_cur, k,
                                 c.verify_min_conf)
        n = min(n, n_cur)
        base["scale_pixels"] = n
        sigma = s / s_cur if n_cur else math.nan
    if n < c.min_valid_pixels:
        return VerifyResult(reason=LoopReason.TOO_FEW_PIXELS, **base)
    T_pair = rigid_inverse(pair.c2w_kf) @ pair.c2w_cur  # (4, 4) rigid, pair units
    m = np.eye(4)
    m[:3, :3] = sigma * T_pair[:3, :3]
    m[:3, 3] = s * T_pair[:3, 3]
    implied = implied_pose(keyframe.pose, m)
    dist = float(np.linalg.norm(implied[:3, 3] - fe[:3, 3]))
    angle = math.degrees(float(rotation_angle(fe[:3, :3].T @ implied[:3, :3])))
    overlap, inliers = reprojection_inliers(pair, T_pair, k, c.inlier_depth_ratio,
                                            c.verify_min_conf)
    base.update(scale=s, relative_scale=sigma, measurement=_frozen(m, "measurement"),
                implied_pose=_frozen(implied, "implied"), overlap_pixels=overlap,
                inlier_fraction=inliers / overlap if overlap else math.nan,
                correction_m=dist, correction_deg=angle)
    if overlap < c.min_valid_pixels:
        return VerifyResult(reason=LoopReason.LITTLE_OVERLAP, **base)
    if inliers < c.min_inlier_fraction * overlap:
        return VerifyResult(reason=LoopReason.INCONSISTENT, **base)
    if dist > c.max_correction_m or angle > c.max_correction_deg:
        return VerifyResult(reason=LoopReason.IMPLAUSIBLE, **base)
    base["accepted"] = True
    return VerifyResult(reason=LoopReason.VERIFIED, **base)


class LoopVerifier:
    """:func:`verify_pair` with counters: ``counts['candidates']`` and one per reason."""

    def __init__(self, config: LoopConfig) -> None:
        if not isinstance(config, LoopConfig):
            raise ValueError(f"config must be a LoopConfig, got {type(config).__name__}")
        self.config = config
        self.counts: Counter = Counter()

    def verify(self, pair: PairOutputs, keyframe: PlaceKeyframe, T_world_cur, stamp_ns: int,
               current_depth=None) -> VerifyResult:
        result = verify_pair(pair, keyframe, T_world_cur, stamp_ns, self.config,
                             current_depth)
        self.counts["candidates"] += 1
        self.counts[result.reason] += 1
        return result

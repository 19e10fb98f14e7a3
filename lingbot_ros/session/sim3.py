"""Similarity transforms (Sim(3)) for window rollover alignment and trajectory evaluation.

A :class:`Sim3` maps a point ``x`` to ``s * R @ x + t``. Applied to a camera-to-world pose
(OpenCV camera axes) it rotates the camera and moves its centre:
``R_c -> R @ R_c``, ``c -> s * R @ c + t`` -- the scale acts on translation only, so the result
stays a rigid c2w. Depth maps scale by ``s``.

Two estimators:

* :func:`reference_alignment` -- the reference's window rule
  (``gct_stream_window_v2._pairwise_alignment``): rotation from one anchor frame pair
  ``R = R_prev @ R_curr^T``, scale = median of per-pixel depth ratios prev/curr over the
  paired keyframes (finite, |curr| > eps) clamped to [1e-3, 1e3], translation from the anchor
  centres ``t = c_prev - s R c_curr``. :func:`select_anchor` picks the anchor (the latest
  overlap frame that is a keyframe in both windows) and the pairs.
* :func:`umeyama` -- least-squares Sim(3)/SE(3) between point sets (camera centres) for
  evaluation, like ``evo_ape -as``; :func:`ate_rmse` on top.

Parameters are float64 numpy; ``apply_*`` take numpy arrays or torch tensors and return the
same kind (torch keeps dtype and device, no host sync: ``s`` is a Python float).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import numpy as np
import torch

__all__ = ["Sim3", "select_anchor", "depth_ratio_scale", "reference_alignment", "umeyama",
           "ate_rmse", "SCALE_CLAMP"]

SCALE_CLAMP = (1e-3, 1e3)  # the reference clamps the median depth ratio to this range

Array = Union[np.ndarray, torch.Tensor]


def _as_np(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
    return np.asarray(x, dtype=np.float64)


def _like(a: np.ndarray, ref: Array):
    if isinstance(ref, torch.Tensor):
        return torch.tensor(np.array(a), dtype=ref.dtype, device=ref.device)
    return a


@dataclass(frozen=True)
class Sim3:
    """``x -> scale * rotation @ x + translation`` (float64)."""

    scale: float = 1.0
    rotation: np.ndarray = field(default_factory=lambda: np.eye(3))
    translation: np.ndarray = field(default_factory=lambda: np.zeros(3))

    def __post_init__(self) -> None:
        s = float(self.scale)
        r = _as_np(self.rotation).reshape(3, 3).copy()
        t = _as_np(self.translation).reshape(3).copy()
        if not (np.isfinite(s) and s > 0):
            raise ValueError(f"scale must be finite and > 0, got {self.scale!r}")
        if not (np.isfinite(r).all() and np.isfinite(t).all()):
            raise ValueError("rotation and translation must be finite")
        if not np.allclose(r @ r.T, np.eye(3), atol=1e-5) or np.linalg.det(r) < 0:
            raise ValueError("rotation must be a proper rotation matrix")
        r.flags.writeable = False
        t.flags.writeable = False
        object.__setattr__(self, "scale", s)
        object.__setattr__(self, "rotation", r)
        object.__setattr__(self, "translation", t)

    @classmethod
    def identity(cls) -> "Sim3":
        return cls()

    @classmethod
    def from_matrix(cls, m) -> "Sim3":
        """From a 4x4 ``[[sR, t], [0, 1]]``."""
        m = _as_np(m).reshape(4, 4)
        sr = m[:3, :3]
        s = float(np.cbrt(np.linalg.det(sr)))
        return cls(s, sr / s, m[:3, 3])

    def matrix(self) -> np.ndarray:
        """4x4 float64 ``[[sR, t], [0, 1]]``."""
        m = np.eye(4)
        m[:3, :3] = self.scale * self.rotation
        m[:3, 3] = self.translation
        return m

    def inverse(self) -> "Sim3":
        r_inv = self.rotation.T
        return Sim3(1.0 / self.scale, r_inv, -(r_inv @ self.translation) / self.scale)

    def compose(self, other: "Sim3") -> "Sim3":
        """``self ∘ other``: apply ``other`` first, then ``self``."""
        return Sim3(self.scale * other.scale, self.rotation @ other.rotation,
                    self.scale * (self.rotation @ other.translation) + self.translation)

    __matmul__ = compose

    def apply_points(self, points: Array) -> Array:
        """(..., 3) points -> ``s R p + t``."""
        sr = _like(self.scale * self.rotation, points)
        return points @ sr.T + _like(self.translation, points)

    def apply_c2w(self, c2w: Array) -> Array:
        """(..., 4, 4) camera-to-world poses -> ``[[R R_c, s R c + t], [0, 1]]`` (still rigid)."""
        if not isinstance(c2w, torch.Tensor):
            c2w = np.asarray(c2w, dtype=np.float64)
        if tuple(c2w.shape[-2:]) != (4, 4):
            raise ValueError(f"c2w must have shape (..., 4, 4), got {tuple(c2w.shape)}")
        out = c2w.clone() if isinstance(c2w, torch.Tensor) else c2w.copy()
        r = _like(self.rotation, out)
        out[..., :3, :3] = r @ c2w[..., :3, :3]
        out[..., :3, 3] = self.apply_points(c2w[..., :3, 3])
        return out

    def apply_depth(self, depth: Array) -> Array:
        """Depth maps (any shape) -> ``depth * s``."""
        return depth * self.scale


def select_anchor(prev_is_keyframe: Sequence[bool], curr_is_keyframe: Sequence[bool]
                  ) -> tuple[int, list[int]]:
    """Anchor and depth pairs inside a window overlap (the reference's rule).

    ``prev_is_keyframe[i]`` / ``curr_is_keyframe[i]``: whether overlap frame i (the same
    physical frame; i = 0 is the oldest) is a keyframe in the previous / current window.
    Returns ``(anchor, pairs)``: the latest offset that is a keyframe in both and every such
    offset (ascending); ``(0, [0])`` when none is (the reference's fallback).
    """
    prev, curr = list(prev_is_keyframe), list(curr_is_keyframe)
    n = min(len(prev), len(curr))
    if n == 0:
        raise ValueError("the overlap is empty: nothing to align on")
    pairs = [i for i in range(n) if prev[i] and curr[i]]
    return (pairs[-1], pairs) if pairs else (0, [0])


def depth_ratio_scale(prev_depths: Array, curr_depths: Array,
                      clamp: tuple[float, float] = SCALE_CLAMP) -> float:
    """Median of per-pixel ratios prev/curr over all given pixels where both are finite and
    |curr| > eps (of float32), clamped to ``clamp``; 1.0 if no pixel qualifies.

    The shapes must match (e.g. (P, H, W) for P paired keyframes). torch's median (the lower
    of the two middle values, as the reference) in float32, or float64 for float64 input.
    One host sync (the returned float)."""
    a = torch.as_tensor(prev_depths)
    b = torch.as_tensor(curr_depths)
    if a.shape != b.shape:
        raise ValueError(f"depth shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    dtype = torch.float64 if torch.float64 in (a.dtype, b.dtype) else torch.float32
    a, b = a.to(dtype).reshape(-1), b.to(device=a.device, dtype=dtype).reshape(-1)
    ok = torch.isfinite(a) & torch.isfinite(b) & (b.abs() > torch.finfo(torch.float32).eps)
    ratios = a[ok] / b[ok]
    if ratios.numel() == 0:
        return 1.0
    return min(max(float(ratios.median()), clamp[0]), clamp[1])


def reference_alignment(prev_anchor_c2w: Array, curr_anchor_c2w: Array,
                        prev_depths: Optional[Array] = None, curr_depths: Optional[Array] = None,
                        clamp: tuple[float, float] = SCALE_CLAMP) -> Sim3:
    """The Sim(3) mapping the current window's world into the previous (already aligned)
    window's world, by the reference rule.

    ``*_anchor_c2w``: the anchor frame's 4x4 c2w in each window. ``*_depths``: depth maps of
    the paired keyframes, the same frames in the same order in both (see
    :func:`select_anchor`); without them the scale is 1 (the reference does the same).
    """
    pa, pb = _as_np(prev_anchor_c2w).reshape(4, 4), _as_np(curr_anchor_c2w).reshape(4, 4)
    r = pa[:3, :3] @ pb[:3, :3].T
    # re-orthonormalise: float32 model rotations are only nearly orthonormal
    u, _, vt = np.linalg.svd(r)
    r = u @ np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))]) @ vt
    s = 1.0
    if prev_depths is not None and curr_depths is not None:
        s = depth_ratio_scale(prev_depths, curr_depths, clamp)
    t = pa[:3, 3] - s * (r @ pb[:3, 3])
    return Sim3(s, r, t)


def umeyama(src: Array, dst: Array, with_scale: bool = True) -> Sim3:
    """Least-squares ``dst ≈ s R src + t`` (Umeyama 1991) for (N, 3) point sets, N >= 3 and
    not all collinear for a unique rotation. ``with_scale=False`` gives SE(3) (s = 1)."""
    x, y = _as_np(src), _as_np(dst)
    if x.ndim != 2 or x.shape[1] != 3 or x.shape != y.shape:
        raise ValueError(f"src and dst must both be (N, 3), got {x.shape} and {y.shape}")
    if len(x) < 3:
        raise ValueError(f"umeyama needs at least 3 points, got {len(x)}")
    mx, my = x.mean(0), y.mean(0)
    xc, yc = x - mx, y - my
    cov = yc.T @ xc / len(x)
    u, d, vt = np.linalg.svd(cov)
    sign = np.eye(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        sign[2, 2] = -1.0
    r = u @ sign @ vt
    var_x = (xc ** 2).sum() / len(x)
    if with_scale:
        if var_x <= 0:
            raise ValueError("src points are all identical: scale is undefined")
        s = float(np.trace(np.diag(d) @ sign) / var_x)
    else:
        s = 1.0
    return Sim3(s, r, my - s * (r @ mx))


def ate_rmse(est_centres: Array, gt_centres: Array, align: Optional[str] = "sim3") -> float:
    """Absolute trajectory error (RMSE of centre distances) after aligning the estimate to
    the ground truth: ``'sim3'`` (monocular, like ``evo_ape -as``), ``'se3'`` or ``None``."""
    est, gt = _as_np(est_centres), _as_np(gt_centres)
    if align not in ("sim3", "se3", None):
        raise ValueError(f"align must be 'sim3', 'se3' or None, got {align!r}")
    if align is not None:
        est = umeyama(est, gt, with_scale=align == "sim3").apply_points(est)
    return float(np.sqrt(((est - gt) ** 2).sum(-1).mean()))

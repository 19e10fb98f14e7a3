"""Similarity transforms (Sim(3)) for window rollover alignment and trajectory evaluation.

A :class:`Sim3` maps a point ``x`` to ``s * R @ x + t``. Applied to a camera-to-world pose
(OpenCV camera axes) it rotates the camera and moves its centre:
``R_c -> R @ R_c``, ``c -> s * R @ c + t`` -- the scale acts on translation only, so the result
stays a rigid c2w. Depth maps scale by ``s``.

:func:`umeyama` is the least-squares Sim(3)/SE(3) between point sets (camera centres) for
evaluation, like ``evo_ape -as``; :func:`ate_rmse` on top. (The session's window rollover
estimates its Sim(3) from anchor poses and depth ratios: ``lingbot_ros.session.alignment``.)

Float64 numpy throughout; ``apply_depth`` only multiplies by the Python float ``s``, so it
scales a depth array of any kind (a device tensor stays where it is, without a host sync).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

__all__ = ["Sim3", "umeyama", "ate_rmse"]


def _as_np(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


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

    def apply_points(self, points) -> np.ndarray:
        """(..., 3) points -> ``s R p + t`` (float64)."""
        points = np.asarray(points)
        return points @ (self.scale * self.rotation).T + self.translation

    def apply_c2w(self, c2w) -> np.ndarray:
        """(..., 4, 4) camera-to-world poses -> ``[[R R_c, s R c + t], [0, 1]]`` (still rigid),
        float64."""
        c2w = np.asarray(c2w, dtype=np.float64)
        if tuple(c2w.shape[-2:]) != (4, 4):
            raise ValueError(f"c2w must have shape (..., 4, 4), got {tuple(c2w.shape)}")
        out = c2w.copy()
        out[..., :3, :3] = self.rotation @ c2w[..., :3, :3]
        out[..., :3, 3] = self.apply_points(c2w[..., :3, 3])
        return out

    def apply_depth(self, depth):
        """Depth maps (any shape, any array type) -> ``depth * s``."""
        return depth * self.scale


def umeyama(src, dst, with_scale: bool = True) -> Sim3:
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


def ate_rmse(est_centres, gt_centres, align: Optional[str] = "sim3") -> float:
    """Absolute trajectory error (RMSE of centre distances) after aligning the estimate to
    the ground truth: ``'sim3'`` (monocular, like ``evo_ape -as``), ``'se3'`` or ``None``."""
    est, gt = _as_np(est_centres), _as_np(gt_centres)
    if align not in ("sim3", "se3", None):
        raise ValueError(f"align must be 'sim3', 'se3' or None, got {align!r}")
    if align is not None:
        est = umeyama(est, gt, with_scale=align == "sim3").apply_points(est)
    return float(np.sqrt(((est - gt) ** 2).sum(-1).mean()))

"""The few SE(3) helpers the scale sources need (numpy, float64, (4, 4) rigid poses);
``rigid_inverse`` is the geometry package's."""
from __future__ import annotations

import numpy as np

from ..geometry import rigid_inverse, rotation_vector

__all__ = ["rigid_inverse", "so3_exp", "interpolate_pose", "is_rigid"]


def so3_exp(w: np.ndarray) -> np.ndarray:
    """Rotation vector (3,) -> rotation matrix (3, 3) (Rodrigues)."""
    w = np.asarray(w, dtype=np.float64)
    angle = float(np.linalg.norm(w))
    k = np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])
    if angle < 1e-9:
        return np.eye(3) + k
    k /= angle
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)


def interpolate_pose(t0: np.ndarray, t1: np.ndarray, alpha: float) -> np.ndarray:
    """Pose between ``t0`` (alpha 0) and ``t1`` (alpha 1): linear translation, geodesic
    rotation (constant angular rate)."""
    t0 = np.asarray(t0, dtype=np.float64)
    t1 = np.asarray(t1, dtype=np.float64)
    out = np.eye(4)
    r0 = t0[:3, :3]
    out[:3, :3] = r0 @ so3_exp(alpha * rotation_vector(r0.T @ t1[:3, :3]))
    out[:3, 3] = (1.0 - alpha) * t0[:3, 3] + alpha * t1[:3, 3]
    return out


def is_rigid(t, tol: float = 1e-4) -> bool:
    """A finite (4, 4) with an orthonormal, right-handed rotation and a [0 0 0 1] last row."""
    try:
        t = np.asarray(t, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    if t.shape != (4, 4) or not np.isfinite(t).all():
        return False
    r = t[:3, :3]
    return (np.allclose(r.T @ r, np.eye(3), atol=tol) and abs(np.linalg.det(r) - 1.0) < tol
            and np.allclose(t[3], [0.0, 0.0, 0.0, 1.0], atol=tol))

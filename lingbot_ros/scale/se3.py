"""The few SE(3) helpers the scale sources need (numpy, float64, (4, 4) rigid poses);
``rigid_inverse``, ``interpolate_pose`` and ``rotation_exp`` are the geometry package's."""
from __future__ import annotations

import numpy as np

from ..geometry import interpolate_pose, rigid_inverse, rotation_exp

__all__ = ["rigid_inverse", "rotation_exp", "interpolate_pose", "is_rigid"]


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

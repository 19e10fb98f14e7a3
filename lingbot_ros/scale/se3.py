"""The few SE(3) helpers the scale sources need (numpy, float64, (4, 4) rigid poses);
``rigid_inverse``, ``interpolate_pose`` and ``rotation_exp`` are the geometry package's.
``POSE_TOL``: how far from rigid a pose they take may be (``lingbot_ros.geometry.is_rigid``
with ``tol`` and ``last_row_tol`` both ``POSE_TOL``)."""
from __future__ import annotations

from ..geometry import interpolate_pose, rigid_inverse, rotation_exp

__all__ = ["rigid_inverse", "rotation_exp", "interpolate_pose", "POSE_TOL"]

# max |R^T R - I| and max |last row - [0 0 0 1]| of a pose the scale sources take: a finite
# (4, 4) with an orthonormal, right-handed rotation and a [0 0 0 1] last row
POSE_TOL = 1e-4

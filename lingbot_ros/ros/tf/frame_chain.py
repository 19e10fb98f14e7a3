"""How the model's camera poses become the REP-105 tree: map -> odom -> base -> camera.

The model gives ``c2w``: the camera's optical frame in the model world, which is the first
frame's optical frame. On a robot the tracked frame is the base (base_link): with ``T_bo``
the optical frame in the base frame (the extrinsic, from the robot's static TF), the map is
the base at the first frame, so it is level when the robot is, whatever the camera's tilt:

    T_map_base(t) = T_bo @ c2w(t) @ T_bo^-1          points: p_map = T_bo @ p_world

With a metric scale k (metres per model unit, docs/scale.md) the model's translation is
scaled BEFORE the composition, since ``T_bo`` is in metres (the URDF's):

    T_map_base(t) = T_bo @ S_k(c2w(t)) @ T_bo^-1     points: p_map = T_bo @ (k p_world)

so a camera mounted ahead of a robot turning in place leaves the base put.

A bare camera (``frames.base: ""``) has no base: its body frame (REP-103: x forward, z up)
plays the base, ``T_bo`` = the body -> optical rotation, and the camera frame is tracked.
Pure numpy: no rclpy, no messages.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...geometry import T_BODY_OPTICAL, rigid_inverse, rotation_vector
from ...scale import c2w_to_metres, points_to_metres


@dataclass(frozen=True)
class FrameChain:
    """The frames one stream is published in, and the fixed transforms between them."""

    tracked_frame: str  # child of odom: the base frame, or the camera frame (camera-only)
    camera_frame: str  # the images' frame (depth, camera_info)
    T_base_optical: np.ndarray  # (4, 4) the camera's optical axes in the base frame
    T_base_tracked: np.ndarray  # (4, 4) identity on a robot; base -> camera (camera-only)

    @classmethod
    def robot(cls, base_frame: str, camera_frame: str, T_base_camera: np.ndarray,
              camera_is_optical: bool) -> "FrameChain":
        """``T_base_camera``: the camera frame's pose in the base frame (from TF)."""
        T_camera_optical = np.eye(4) if camera_is_optical else T_BODY_OPTICAL
        return cls(base_frame, camera_frame, np.asarray(T_base_camera, float) @ T_camera_optical,
                   np.eye(4))

    @classmethod
    def camera_only(cls, camera_frame: str, camera_is_optical: bool) -> "FrameChain":
        T_body_camera = np.asarray(T_BODY_OPTICAL) if camera_is_optical else np.eye(4)
        return cls(camera_frame, camera_frame, np.asarray(T_BODY_OPTICAL, float),
                   T_body_camera)

    def tracked_in_map(self, c2w: np.ndarray,
                       metres_per_unit: Optional[float] = None) -> np.ndarray:
        """(4, 4) pose of the tracked frame in the map, from a model c2w; with
        ``metres_per_unit``, c2w's translation is scaled to metres first (None: model units,
        unchanged)."""
        bo = self.T_base_optical
        if metres_per_unit is not None:
            c2w = c2w_to_metres(c2w, metres_per_unit)
        return bo @ c2w @ rigid_inverse(bo) @ self.T_base_tracked

    def points_in_map(self, xyz_world: np.ndarray,
                      metres_per_unit: Optional[float] = None) -> np.ndarray:
        """(N, 3) model-world points -> float32 map points (scaled to metres first when
        ``metres_per_unit`` is given)."""
        if metres_per_unit is not None:
            xyz_world = points_to_metres(xyz_world, metres_per_unit)
        M = self.T_map_world
        return (xyz_world @ M[:3, :3].T + M[:3, 3]).astype(np.float32)

    @property
    def T_map_world(self) -> np.ndarray:
        """Model-world points -> map (the first frame's base is the map origin)."""
        return self.T_base_optical


def body_velocity(T_prev: np.ndarray, T_cur: np.ndarray, dt_s: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(linear, angular) velocity of a frame between two of its poses, in its own axes (as
    nav_msgs/Odometry's twist, which is in ``child_frame_id``). Finite differences: a
    rotation of angle a about axis u over dt gives u * a / dt."""
    rel = rigid_inverse(T_prev) @ T_cur
    return rel[:3, 3] / dt_s, rotation_vector(rel[:3, :3]) / dt_s

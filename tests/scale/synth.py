"""Synthetic ground truth for the scale tests: robot motions, mounts, planes (numpy)."""
from __future__ import annotations

import json

import numpy as np

from lingbot_ros.scale.se3 import rigid_inverse, rotation_exp

# camera_link -> optical: x_opt = -y_body, y_opt = -z_body, z_opt = x_body
R_BODY_OPTICAL = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


def ns(t: float) -> int:
    """A stamp or time in seconds (a float or numpy float) as the integer ns scale/ takes."""
    return round(float(t) * 1e9)


def pose(rotvec=(0.0, 0.0, 0.0), t=(0.0, 0.0, 0.0)) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3] = rotation_exp(np.asarray(rotvec, dtype=float))
    out[:3, 3] = t
    return out


def mount(forward=0.3, up=0.5, pitch_down_rad=0.0, yaw_rad=0.0) -> np.ndarray:
    """T_base_optical: a camera ``forward`` m ahead of and ``up`` m above base_link, looking
    forward, pitched down by ``pitch_down_rad``."""
    body = pose((0.0, pitch_down_rad, 0.0)) @ pose((0.0, 0.0, 0.0))
    body = pose((0.0, 0.0, yaw_rad)) @ body
    body[:3, 3] = (forward, 0.0, up)
    out = body.copy()
    out[:3, :3] = body[:3, :3] @ R_BODY_OPTICAL
    return out


def model_poses(odom_base: np.ndarray, T_bo: np.ndarray, k: float) -> np.ndarray:
    """The model's c2w (model units, world = first optical frame) for base poses in the odom
    frame (metres) and metres per model unit ``k``."""
    cam = odom_base @ T_bo  # (N, 4, 4) optical in odom
    c2w = rigid_inverse(cam[0]) @ cam
    c2w[:, :3, 3] /= k
    return c2w


def base_path(kind: str, n: int, dt: float = 1 / 30, speed: float = 0.5,
              yaw_rate: float = 0.3) -> np.ndarray:
    """(n, 4, 4) base poses in odom: 'arc' (drive and turn), 'spin' (turn in place),
    'stop_go' (drive, stand for a third of the time, drive), 'still'."""
    out = np.empty((n, 4, 4))
    x = y = yaw = 0.0
    for i in range(n):
        v, w = speed, yaw_rate
        if kind == "spin":
            v = 0.0
        elif kind == "still":
            v = w = 0.0
        elif kind == "stop_go" and n // 3 <= i < 2 * n // 3:
            v = w = 0.0
        out[i] = pose((0.0, 0.0, yaw), (x, y, 0.0))
        x += v * dt * np.cos(yaw)
        y += v * dt * np.sin(yaw)
        yaw += w * dt
    return out


def as_version_1(state: dict) -> dict:
    """An estimator state as a version-1 build wrote it (strict JSON): each ``<name>_ns``
    stamp as ``<name>_s`` float seconds ("nan": none; "-inf" for no last rejection), and
    ``stamp_ns`` besides."""
    v1 = {k: v for k, v in state.items() if not k.endswith("_ns")}
    v1.update({k[:-3] + "_s": "nan" if v is None else v / 1e9
               for k, v in state.items() if k.endswith("_ns")})
    if state["last_rejection_ns"] is None:
        v1["last_rejection_s"] = "-inf"
    v1.update(version=1, stamp_ns=state["stamp_ns"])
    return json.loads(json.dumps(v1, allow_nan=False))

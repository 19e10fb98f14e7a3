"""Pose encoding ``absT_quaR_FoV`` -> camera-to-world matrix and pinhole intrinsics.

``pose_enc = [tx, ty, tz, qx, qy, qz, qw, fov_h, fov_w]`` (quaternion scalar-last, FoV in
radians). ``[R | t]`` is **camera-to-world**: t is the camera centre in the world frame and
the camera axes are OpenCV's (x right, y down, z forward). The world frame is that of the
stream's first frame. (The reference's docstring calls it world-to-camera; its own code uses
it as camera-to-world.) Intrinsics are at the model input resolution.
"""
from __future__ import annotations

import torch
from torch import Tensor

MIN_FOV = 1e-6  # rad; the relu'd FoV can be exactly 0, which would make the focal length inf


def quaternion_to_matrix(quat: Tensor) -> Tensor:
    """(..., 4) xyzw quaternion (any norm) -> (..., 3, 3) rotation matrix."""
    x, y, z, w = torch.unbind(quat, -1)
    two_s = 2.0 / (quat * quat).sum(-1)
    rows = (1 - two_s * (y * y + z * z), two_s * (x * y - z * w), two_s * (x * z + y * w),
            two_s * (x * y + z * w), 1 - two_s * (x * x + z * z), two_s * (y * z - x * w),
            two_s * (x * z - y * w), two_s * (y * z + x * w), 1 - two_s * (x * x + y * y))
    return torch.stack(rows, -1).reshape(quat.shape[:-1] + (3, 3))


def pose_to_c2w(pose_enc: Tensor) -> Tensor:
    """(..., 9) -> (..., 4, 4) camera-to-world (OpenCV camera axes)."""
    c2w = torch.zeros(pose_enc.shape[:-1] + (4, 4), dtype=pose_enc.dtype, device=pose_enc.device)
    c2w[..., :3, :3] = quaternion_to_matrix(pose_enc[..., 3:7])
    c2w[..., :3, 3] = pose_enc[..., :3]
    c2w[..., 3, 3] = 1.0
    return c2w


def pose_to_intrinsics(pose_enc: Tensor, image_hw: tuple[int, int]) -> Tensor:
    """(..., 9) -> (..., 3, 3) pinhole K at the input size (H, W); principal point centred.

    ``fx = (W / 2) / tan(fov_w / 2)``, ``fy = (H / 2) / tan(fov_h / 2)``. A FoV below
    ``MIN_FOV`` (the relu can output 0) is clamped so the focal length stays finite.
    """
    height, width = image_hw
    fov = pose_enc[..., 7:9].clamp(min=MIN_FOV)
    k = torch.zeros(pose_enc.shape[:-1] + (3, 3), dtype=pose_enc.dtype, device=pose_enc.device)
    k[..., 0, 0] = (width / 2.0) / torch.tan(fov[..., 1] / 2.0)
    k[..., 1, 1] = (height / 2.0) / torch.tan(fov[..., 0] / 2.0)
    k[..., 0, 2] = width / 2
    k[..., 1, 2] = height / 2
    k[..., 2, 2] = 1.0
    return k

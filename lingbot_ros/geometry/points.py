"""Depth maps -> coloured world points (for PLY export, PointCloud2 and the voxel map)."""
from __future__ import annotations

from typing import Optional, Protocol

import numpy as np

__all__ = ["DepthFrame", "frame_points"]


class DepthFrame(Protocol):
    """What :func:`frame_points` reads of a frame (the session's ``FrameResult`` has it)."""

    depth: Optional[np.ndarray]  # (H, W) along the optical axis, or None
    depth_conf: Optional[np.ndarray]  # (H, W)
    rgb: Optional[np.ndarray]  # (H, W, 3) uint8, or None
    K_model: np.ndarray  # (3, 3) intrinsics at the depth map's resolution
    c2w: np.ndarray  # (4, 4) camera (OpenCV optical axes) to world


def frame_points(result: DepthFrame, stride: int = 4, min_conf: float = 1.5,
                 max_depth: float = float("inf")) -> tuple[np.ndarray, np.ndarray]:
    """World points of one frame's depth map, subsampled by ``stride``.

    Keeps pixels with confidence >= ``min_conf`` (the head's confidence is 1 + exp(.)) and a
    finite depth in (0, ``max_depth``]. Returns ``(xyz (N, 3) float32, rgb (N, 3) uint8)``;
    empty arrays when the frame has no depth.
    """
    if result.depth is None:
        return np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint8)
    depth = result.depth[::stride, ::stride]  # (h, w)
    conf = result.depth_conf[::stride, ::stride]
    vs, us = np.mgrid[0:result.depth.shape[0]:stride, 0:result.depth.shape[1]:stride]
    keep = (conf >= min_conf) & np.isfinite(depth) & (depth > 0) & (depth <= max_depth)
    z = depth[keep].astype(np.float64)
    K = result.K_model
    x = (us[keep] - K[0, 2]) / K[0, 0] * z  # pixel centres, OpenCV camera axes
    y = (vs[keep] - K[1, 2]) / K[1, 1] * z
    cam = np.stack([x, y, z], axis=1)  # (N, 3) in the camera frame
    world = cam @ result.c2w[:3, :3].T + result.c2w[:3, 3]
    rgb = (result.rgb[::stride, ::stride][keep] if result.rgb is not None
           else np.full((len(z), 3), 200, np.uint8))
    return world.astype(np.float32), rgb.astype(np.uint8)

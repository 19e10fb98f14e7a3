"""Depth maps -> coloured world points (for PLY export and PointCloud2)."""
from __future__ import annotations

import numpy as np

from .types import FrameResult


def frame_points(result: FrameResult, stride: int = 4, min_conf: float = 1.5,
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


class PointAccumulator:
    """Keyframe points of a whole run, capped at ``max_points`` by dropping every other
    stored point when full (uniform thinning, so early keyframes are not lost)."""

    def __init__(self, max_points: int = 2_000_000) -> None:
        self.max_points = max_points
        self._xyz: list[np.ndarray] = []
        self._rgb: list[np.ndarray] = []
        self.num_points = 0

    def add(self, xyz: np.ndarray, rgb: np.ndarray) -> None:
        self._xyz.append(xyz)
        self._rgb.append(rgb)
        self.num_points += len(xyz)
        while self.num_points > self.max_points:
            xyz_all, rgb_all = self.arrays()
            self._xyz, self._rgb = [xyz_all[::2]], [rgb_all[::2]]
            self.num_points = len(self._xyz[0])

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if not self._xyz:
            return np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint8)
        return np.concatenate(self._xyz), np.concatenate(self._rgb)

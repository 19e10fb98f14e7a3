"""A rendered synthetic camera sequence with exact ground truth: :class:`SyntheticSequence`.

What :func:`lingbot_ros.tools.synthetic.render.render_sequence` returns and what the writers in
:mod:`lingbot_ros.tools.synthetic.writers` write. Pure numpy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SyntheticSequence"]


@dataclass(frozen=True)
class SyntheticSequence:
    """Frames with exact ground truth. ``images`` (N, H, W, 3) uint8 **RGB**; ``depths``
    (N, H, W) float32 z-depth in metres; ``c2w`` (N, 4, 4) float64 camera-to-world (OpenCV
    camera axes, room world, z up); ``K`` (3, 3) float64; ``stamps_ns`` (N,) int64."""

    images: np.ndarray
    depths: np.ndarray
    c2w: np.ndarray
    K: np.ndarray
    stamps_ns: np.ndarray
    fps: float

    def __len__(self) -> int:
        return len(self.images)

    @property
    def c2w_relative(self) -> np.ndarray:
        """c2w with the first camera as the world (the model's convention)."""
        first = self.c2w[0]
        inv = np.eye(4)
        inv[:3, :3] = first[:3, :3].T
        inv[:3, 3] = -first[:3, :3].T @ first[:3, 3]
        return inv @ self.c2w

    @property
    def index_stamps_ns(self) -> np.ndarray:
        """``round(i * 1e9 / fps)``: what a folder or video source yields."""
        return np.round(np.arange(len(self)) * (1e9 / self.fps)).astype(np.int64)

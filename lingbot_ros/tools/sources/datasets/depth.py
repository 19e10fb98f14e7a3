"""The depth images of the dataset layouts that have them, for ``--scale depth``.

Listed in a :class:`lingbot_ros.tools.sources.depth_stream.DepthFileList` (``Dataset.depth``:
TUM RGB-D's ``depth.txt``, 7-Scenes' ``frame-N.depth.png``), decoded to **32FC1 metres** by
the layout's reader: :func:`read_tum_depth` (16-bit PNG, 5000 per metre, 0 = no reading) or
:func:`read_seven_scenes_depth` (16-bit PNG in millimetres, 65535 = no reading). Invalid
readings become NaN (REP-118).

A bag's depth topic is read by ``BagDepthStream`` (:mod:`lingbot_ros.tools.sources.bag`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..depth_stream import DepthFileList, DepthReading, DepthStream

__all__ = ["DepthReading", "DepthStream", "DepthFileList", "TUM_DEPTH_FACTOR",
           "SEVEN_SCENES_INVALID", "read_depth_png", "read_tum_depth",
           "read_seven_scenes_depth"]

TUM_DEPTH_FACTOR = 5000.0  # TUM RGB-D depth PNGs: 5000 units per metre (0 = no reading)
SEVEN_SCENES_INVALID = 65535  # 7-Scenes depth PNGs: millimetres, 65535 = no reading


def read_depth_png(path: Path) -> np.ndarray:
    """A single-channel 16-bit PNG -> uint16 (H, W). ValueError for anything else."""
    import cv2
    data = np.fromfile(str(path), dtype=np.uint8)
    img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
    if img is None:
        raise ValueError(f"{path}: not a readable image")
    if img.dtype != np.uint16 or img.ndim != 2:
        raise ValueError(f"{path}: a depth image must be a 16-bit single-channel PNG, got "
                         f"{img.dtype} {img.shape}")
    return img


def read_tum_depth(path: Path) -> tuple[np.ndarray, str]:
    """A TUM RGB-D depth PNG (16-bit, 5000 per metre, 0 = no reading) -> (float32 metres,
    NaN where there is no reading; '32FC1')."""
    raw = read_depth_png(path)
    metres = raw.astype(np.float32) / np.float32(TUM_DEPTH_FACTOR)
    metres[raw == 0] = np.nan
    return metres, "32FC1"


def read_seven_scenes_depth(path: Path) -> tuple[np.ndarray, str]:
    """A 7-Scenes depth PNG (16-bit millimetres, 65535 and 0 = no reading) -> (float32
    metres, NaN where there is no reading; '32FC1')."""
    raw = read_depth_png(path)
    metres = raw.astype(np.float32) * np.float32(1e-3)
    metres[(raw == SEVEN_SCENES_INVALID) | (raw == 0)] = np.nan
    return metres, "32FC1"

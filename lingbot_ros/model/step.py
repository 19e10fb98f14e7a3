"""What one streaming step returns."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from torch import Tensor


@dataclass(frozen=True)
class StepOutputs:
    """Per-frame predictions of one step (n frames, input size H x W).

    Poses are camera-to-world with OpenCV camera axes; the world is frame 0's camera.
    """

    pose_enc: Tensor  # (n, 9) [tx, ty, tz, qx, qy, qz, qw, fov_h, fov_w], float32
    pose_enc_list: Tensor  # (iterations, n, 9) every refinement iteration (last = pose_enc)
    c2w: Tensor  # (n, 4, 4) camera-to-world
    intrinsics: Tensor  # (n, 3, 3) pinhole K at the input resolution
    time_index: int  # time index (3D-RoPE f) of the first frame = committed frames before it
    depth: Optional[Tensor] = None  # (n, H, W, 1) when the depth head ran
    depth_conf: Optional[Tensor] = None  # (n, H, W)
    world_points: Optional[Tensor] = None  # (n, H, W, 3) when the point head exists
    world_points_conf: Optional[Tensor] = None  # (n, H, W)

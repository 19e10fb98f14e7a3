"""What a streaming session hands to its front ends (ROS node, offline runner, benchmark)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

if TYPE_CHECKING:  # pragma: no cover -- an annotation only: this module imports no torch
    from ..preprocess import CropInfo


class FrameRejected(ValueError):
    """A pushed frame was refused; ``reason`` is a short counter key, the message says why.

    The session is unchanged and keeps running: log the message, count the reason, go on.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class FrameFailed(RuntimeError):
    """A frame went through the model but its output is unusable (``reason``: ``non_finite``).

    The step was rolled back (the caches are exactly as before the frame) and nothing was
    published or added to the trajectory; the stream goes on with the next frame.
    ``stamps`` and ``tickets``: the input stamps and the ``submit`` tickets of the frames of
    that step (the anchor frames, or one).
    """

    def __init__(self, reason: str, message: str, stamps: tuple[int, ...] = (),
                 tickets: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.reason = reason
        self.stamps = tuple(stamps)
        self.tickets = tuple(tickets)


@dataclass(frozen=True)
class FrameResult:
    """The estimate for one input frame.

    Poses are camera-to-world with OpenCV optical axes (x right, y down, z forward); the
    world is the first frame's camera, kept continuous across segment rollovers by Sim(3)
    alignment (scale is the model's, monocular: not metric).
    """

    index: int  # frames processed since the last reset (0-based)
    ticket: int  # what ``submit`` returned for this frame (unique over the session's life)
    stamp_ns: int  # the input stamp, unchanged
    keyframe: bool  # committed to the caches (scale-phase frames always are)
    segment: int  # rollovers since the last reset (the stretch between two rollovers)
    c2w: np.ndarray  # (4, 4) float64 camera-to-world in the world frame
    pose_enc: np.ndarray  # (9,) float32 raw model output, in its segment's frame
    K: np.ndarray  # (3, 3) float64 intrinsics of the ORIGINAL image
    K_model: np.ndarray  # (3, 3) float64 intrinsics at the model resolution
    crop: CropInfo  # original image <-> model input mapping
    latency_ms: float  # hand-in to result: preprocessing, the step (and, pipelined, the wait
    # for the frame before it; for anchor frames, the whole scale phase)
    depth: Optional[np.ndarray] = None  # (H', W') float32 at model resolution, world scale
    depth_conf: Optional[np.ndarray] = None  # (H', W') float32, >= 1
    rgb: Optional[np.ndarray] = None  # (H', W', 3) uint8 model input, for coloured points
    # (P, C) float32 the model's patch features of this frame (the DINOv2 patch tokens),
    # with SessionConfig.return_features: what the back end's place descriptor pools
    features: Optional[np.ndarray] = None

    @property
    def model_hw(self) -> tuple[int, int]:
        return self.crop.output_hw

"""What crosses into the model for one step (``StepContext``) and what comes back
(``StepOutputs``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generator, Optional, TypeVar

from torch import Tensor

from .fused_kernels import UNFUSED, FusedKernels

if TYPE_CHECKING:  # pragma: no cover
    from ..attention.backend import AttentionBackend
    from ..cache.camera_cache import CameraCacheTxn
    from ..cache.frame_txn import KVWriter
    from .rope import VideoRope


T = TypeVar("T")

#: A step's forward cut into slices: each ``next`` queues the next stretch of its kernels
#: (a block, a head) and returns; ``StopIteration.value`` is the step's result. Draining it
#: at once (``run_to_end``) runs exactly the kernels of the plain forward, in its order.
Slices = Generator[None, None, T]


def run_to_end(slices: "Slices[T]") -> T:
    """Run every slice of a sliced forward; its result."""
    while True:
        try:
            next(slices)
        except StopIteration as stop:
            return stop.value


@dataclass(frozen=True)
class StepContext:
    """Everything one step's forward needs besides its images; the stream's runner (or its
    CUDA graph) builds it once the attention backend is planned for the step.

    Nothing in it is read back on the host during the forward: the rotation comes in
    ``rope``, K/V go to ``kv_writer``, the camera cache is reached through ``camera``, and
    ``first_frame`` only picks the special-token variants (identical for every streaming
    frame), which is what lets a CUDA graph capture the forward once.

    ``frame_indices``: the time index of each of the step's frames when they are not
    ``first_frame ..`` of one stream: a batched step of B streams x 1 frame
    (``session.batch_step``) gives each stream's own index; None: ``first_frame + i``.
    """

    first_frame: int  # time index of the step's first frame (committed frames before it)
    num_scale_frames: int  # phase-1 size: frames that get the first scale-token variant
    rope: "VideoRope"  # the step's 3D rotation (``Aggregator.video_rope``)
    kv_writer: "KVWriter"  # where the global layers put their K/V (the step's ``FrameTxn``)
    camera: "CameraCacheTxn"  # the step's camera-head cache access
    backend: "AttentionBackend"  # attention over the paged storage, planned for the step
    fused: FusedKernels = UNFUSED  # the stream's fused kernels
    with_depth: bool = True  # run the depth head (when the model has one)
    with_points: bool = True  # run the point head (when the model has one)
    frame_indices: Optional[tuple[int, ...]] = None  # per frame; None: first_frame + i


@dataclass(frozen=True)
class StepOutputs:
    """Per-frame predictions of one step (n frames, input size H x W).

    Poses are camera-to-world with OpenCV camera axes; the world is frame 0's camera.
    """

    pose_enc: Tensor  # (n, 9) [tx, ty, tz, qx, qy, qz, qw, fov_h, fov_w], float32
    pose_enc_list: Tensor  # (iterations, n, 9) every refinement iteration (last = pose_enc)
    c2w: Tensor  # (n, 4, 4) camera-to-world
    intrinsics: Tensor  # (n, 3, 3) pinhole K at the input resolution
    depth: Optional[Tensor] = None  # (n, H, W, 1) when the depth head ran
    depth_conf: Optional[Tensor] = None  # (n, H, W)
    world_points: Optional[Tensor] = None  # (n, H, W, 3) when the point head exists
    world_points_conf: Optional[Tensor] = None  # (n, H, W)
    # (n, P, C) the DINO patch tokens (P = patches of the H x W grid), aggregator dtype: the
    # frames' own features before any attention across frames (context-free)
    patch_tokens: Optional[Tensor] = None

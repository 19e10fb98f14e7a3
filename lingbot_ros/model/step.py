"""What one streaming step returns: the outputs and the transaction over both caches."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Optional

from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover
    from ..cache.camera_cache import CameraCacheTxn
    from ..cache.frame_txn import FrameTxn


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


class StepTxn:
    """Both caches' transactions of one step: ``commit()`` or ``rollback()``, exactly once.

    Commit keeps the step's frames in the paged KV cache (aggregator) and in the camera-head
    cache; rollback forgets them in both (a non-keyframe). Used as a context manager it rolls
    back if the body raises or decides nothing.
    """

    def __init__(self, frame_txn: "FrameTxn", camera_txn: "CameraCacheTxn") -> None:
        self.frame_txn = frame_txn
        self.camera_txn = camera_txn
        self.state = "pending"

    @property
    def num_frames(self) -> int:
        return self.frame_txn.num_frames

    @property
    def first_frame(self) -> int:
        return self.frame_txn.first_frame

    def commit(self) -> None:
        """Keep the step's frames in both caches (runs the deferred window eviction)."""
        self._finish("commit")

    def rollback(self) -> None:
        """Forget the step's frames in both caches; both are as before the step."""
        self._finish("rollback")

    def _finish(self, action: str) -> None:
        if self.state != "pending":
            raise RuntimeError(f"cannot {action}: this step is already {self.state}")
        self.state = "committed" if action == "commit" else "rolled back"
        try:
            getattr(self.frame_txn, action)()
        except Exception:
            # The paged cache refused (e.g. it was reset meanwhile): never keep the camera
            # frames of a step the aggregator cache does not hold.
            if self.camera_txn.state == "pending":
                try:
                    self.camera_txn.rollback()
                except Exception:  # the camera cache was reset as well: nothing to undo
                    pass
            self.state = "failed"
            raise
        getattr(self.camera_txn, action)()

    def __enter__(self) -> "StepTxn":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.state == "pending":
            self.rollback()


class StepResult(NamedTuple):
    """``outputs, txn = model.step(...)``."""

    outputs: StepOutputs
    txn: StepTxn

"""StepTxn: one step's transactions over both caches of a stream, closed exactly once.

Commit keeps the step's frames in the paged KV cache (aggregator; the deferred window
eviction runs then) and in the camera-head cache; rollback forgets them in both (a
non-keyframe): both caches are then exactly as before the step. Used as a context manager it
rolls back if the body raises or decides nothing. Opened by ``StreamRunner.begin``. Misuse (a
second commit or rollback) raises the caches' ``TransactionError``.
"""
from __future__ import annotations

from ..cache import CameraCacheTxn, FrameTxn, StepKind, TransactionError


class StepTxn:
    def __init__(self, frame_txn: FrameTxn, camera_txn: CameraCacheTxn,
                 attention_planned: bool = False) -> None:
        self.frame_txn = frame_txn
        self.camera_txn = camera_txn
        # the backend that runs the step already holds its attention plan (made ahead)
        self.attention_planned = attention_planned
        self.state = "pending"

    @property
    def kind(self) -> StepKind:
        return self.frame_txn.kind

    @property
    def num_frames(self) -> int:
        return self.frame_txn.num_frames

    @property
    def first_frame(self) -> int:
        """Time index of the step's first frame (= committed frames before it)."""
        return self.frame_txn.first_frame

    def commit(self) -> None:
        """Keep the step's frames in both caches (runs the deferred window eviction)."""
        self._finish("commit")

    def rollback(self) -> None:
        """Forget the step's frames in both caches; both are as before the step."""
        self._finish("rollback")

    def _finish(self, action: str) -> None:
        if self.state != "pending":
            raise TransactionError(f"cannot {action}: this step is already {self.state}")
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

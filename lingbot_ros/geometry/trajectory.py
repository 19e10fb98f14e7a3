"""A tiny thread-safe trajectory: stamped 4x4 poses, reset, save/load as TUM."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from .atomic_file import PathLike
from .tum import read_tum, write_tum

__all__ = ["Trajectory"]


SESSION_FRAME = ("camera_optical (x right, y down, z forward) in world = the first frame's "
                 "camera_optical; monocular scale")


class Trajectory:
    """Stamped poses (integer ns, float64 4x4) in append order.

    Stamps must strictly increase (TUM/evo associate by time); a non-increasing stamp or a
    non-finite pose raises ValueError and leaves the trajectory unchanged. Safe to append
    from a worker thread while another thread saves (one lock).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stamps: list[int] = []
        self._poses: list[np.ndarray] = []

    def append(self, stamp_ns: int, pose) -> None:
        stamp = int(stamp_ns)
        m = np.array(pose, dtype=np.float64)
        if m.shape != (4, 4):
            raise ValueError(f"pose must be 4x4, got shape {m.shape}")
        if not np.isfinite(m).all():
            raise ValueError("pose contains non-finite values")
        with self._lock:
            if self._stamps and stamp <= self._stamps[-1]:
                raise ValueError(f"stamp {stamp} ns is not after the last one "
                                 f"({self._stamps[-1]} ns)")
            self._stamps.append(stamp)
            self._poses.append(m)

    def reset(self) -> None:
        with self._lock:
            self._stamps.clear()
            self._poses.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._stamps)

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies: (stamps_ns int64 (N,), poses float64 (N, 4, 4))."""
        with self._lock:
            stamps = np.asarray(self._stamps, dtype=np.int64)
            poses = np.stack(self._poses) if self._poses else np.zeros((0, 4, 4))
        return stamps, poses

    @property
    def stamps_ns(self) -> np.ndarray:
        return self.snapshot()[0]

    @property
    def poses(self) -> np.ndarray:
        return self.snapshot()[1]

    def save_tum(self, path: PathLike) -> Path:
        """Write the trajectory as a TUM file (atomically); returns the path. The poses are
        the session's: the camera's optical frame (OpenCV axes) in the world = the stream's
        first camera optical frame, as the file's header line says."""
        stamps, poses = self.snapshot()
        return write_tum(path, stamps, poses, frame=SESSION_FRAME)

    @classmethod
    def load_tum(cls, path: PathLike) -> "Trajectory":
        traj = cls()
        for stamp, pose in zip(*read_tum(path)):
            traj.append(int(stamp), pose)
        return traj

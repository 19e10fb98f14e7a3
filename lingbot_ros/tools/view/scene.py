"""The viewer's scene, pure numpy: what ``lingbot-ros-view`` shows, whatever feeds it.

One :class:`SceneModel` per viewer, written by one source (a finished run's folder, the
offline runner's hook, a node's topics) and read by the viewer's thread as frozen
:class:`SceneSnapshot` values. Every part is bounded:

- points: at most ``max_points``. Points added a keyframe at a time go through the package's
  one accumulator (:class:`~lingbot_ros.geometry.VoxelMap`: one point per voxel, the voxel
  doubling at the bound); a whole map handed in at once (a PLY, ``~/map_points``) is
  subsampled to the budget by a seeded draw, so the same input always shows the same points,
  in their input order;
- the front-end trajectory: at most ``max_poses`` positions (beyond, every other one is
  dropped, the last one always kept); the optimised one is replaced whole;
- keyframes: the last ``max_keyframes`` poses;
- the camera: the latest pose, intrinsics and image only.

Each part carries its own version number, so the viewer re-sends only what changed.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from ...geometry import VoxelMap

__all__ = ["Counters", "ScaleView", "CameraView", "SceneSnapshot", "SceneModel",
           "subsample", "POINT_SEED"]

POINT_SEED = 0  # the seed of the points' subsample: the same input shows the same points


def subsample(xyz: np.ndarray, rgb: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``budget`` of the points, drawn with a fixed seed, in their input order."""
    n = len(xyz)
    if n <= budget:
        return xyz, rgb
    keep = np.sort(np.random.default_rng(POINT_SEED).choice(n, budget, replace=False))
    return xyz[keep], rgb[keep]


@dataclass(frozen=True)
class Counters:
    """Frames in (read or received), processed by the model, dropped (skipped, rejected,
    dropped by a full queue), keyframes among the processed."""
    frames_in: int = 0
    processed: int = 0
    dropped: int = 0
    keyframes: int = 0


@dataclass(frozen=True)
class ScaleView:
    """The metric scale's state: ``UNKNOWN``, ``CONVERGING`` or ``LOCKED``; its source; the
    metres per model unit (None when there is no estimate); the units the scene is in."""
    state: str = "UNKNOWN"
    source: str = "none"
    metres_per_unit: Optional[float] = None
    units: str = "model units"

    def text(self) -> str:
        mpu = ("-" if self.metres_per_unit is None or not math.isfinite(self.metres_per_unit)
               else f"{self.metres_per_unit:.4g}")
        return f"{self.state} (source {self.source}), {mpu} m/unit; scene in {self.units}"


@dataclass(frozen=True)
class CameraView:
    """The latest camera: ``c2w`` (4, 4) in the scene's world, intrinsics ``K`` of an image
    of ``hw`` (height, width) pixels, and that image (H, W, 3) uint8 when there is one."""
    c2w: np.ndarray
    K: np.ndarray
    hw: tuple[int, int]
    image: Optional[np.ndarray] = None

    @property
    def fov_y(self) -> float:
        """The vertical field of view, radians."""
        return 2.0 * math.atan2(self.hw[0] / 2.0, float(self.K[1, 1]))

    @property
    def aspect(self) -> float:
        return self.hw[1] / self.hw[0]


@dataclass(frozen=True)
class SceneSnapshot:
    """One consistent read of the scene; ``versions`` tells each part's change count
    (``points``, ``trajectory``, ``keyframes``, ``camera``, ``status``)."""
    points_xyz: np.ndarray  # (N, 3) float32
    points_rgb: np.ndarray  # (N, 3) uint8
    front_end: np.ndarray  # (P, 3) float64 positions, in stream order
    optimised: np.ndarray  # (Q, 3) float64 positions (empty without loop closure)
    keyframes: np.ndarray  # (K, 4, 4) float64 c2w
    camera: Optional[CameraView]
    counters: Counters
    scale: ScaleView
    poses_seen: int  # front-end poses handed in (the shown ones are at most max_poses)
    versions: dict = field(default_factory=dict)

    def state(self) -> dict:
        """The numbers a test or a status line reads: what the scene holds."""
        return {"poses": int(self.poses_seen), "poses_shown": int(len(self.front_end)),
                "optimised_poses": int(len(self.optimised)),
                "points": int(len(self.points_xyz)), "keyframes": int(len(self.keyframes)),
                "camera": self.camera is not None,
                "frames_in": self.counters.frames_in, "processed": self.counters.processed,
                "dropped": self.counters.dropped, "scale_state": self.scale.state,
                "metres_per_unit": self.scale.metres_per_unit, "units": self.scale.units}


_EMPTY3 = np.zeros((0, 3))


class SceneModel:
    """The scene, bounded (module doc). Thread-safe: one source writes, the viewer reads
    :meth:`snapshot`; :meth:`wait_changed` lets the viewer sleep until something changes."""

    def __init__(self, max_points: int = 200_000, max_poses: int = 20_000,
                 max_keyframes: int = 300, voxel_size: float = 0.01) -> None:
        for name, value in (("max_points", max_points), ("max_poses", max_poses),
                            ("max_keyframes", max_keyframes)):
            if not isinstance(value, int) or value < 2:
                raise ValueError(f"{name} must be an integer >= 2, got {value!r}")
        if not (voxel_size > 0 and math.isfinite(voxel_size)):
            raise ValueError(f"voxel_size must be finite and > 0, got {voxel_size!r}")
        self.max_points, self.max_poses, self.max_keyframes = max_points, max_poses, max_keyframes
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._voxels = VoxelMap(voxel_size, max_points)
        self._xyz = np.zeros((0, 3), np.float32)
        self._rgb = np.zeros((0, 3), np.uint8)
        self._front: list[np.ndarray] = []  # positions, (3,) each
        self._stride = 1  # the front end keeps every _stride-th pose handed in
        self._last_pose: Optional[np.ndarray] = None
        self._poses_seen = 0
        self._optimised = _EMPTY3
        self._keyframes: list[np.ndarray] = []
        self._camera: Optional[CameraView] = None
        self._counters = Counters()
        self._scale = ScaleView()
        self._versions = dict.fromkeys(("points", "trajectory", "keyframes", "camera",
                                        "status"), 0)

    # -- writers ------------------------------------------------------------------------
    def add_pose(self, c2w, keyframe: bool = False) -> None:
        """One front-end pose (4, 4) c2w, in stream order; a keyframe is also kept as one."""
        c2w = np.asarray(c2w, np.float64)
        if c2w.shape != (4, 4) or not np.isfinite(c2w).all():
            raise ValueError(f"a pose must be a finite (4, 4) matrix, got shape {c2w.shape}")
        with self._lock:
            self._last_pose = c2w[:3, 3].copy()
            if self._poses_seen % self._stride == 0:
                self._front.append(self._last_pose)
                if len(self._front) > self.max_poses:  # thin: every other pose, in order
                    self._front = self._front[::2]
                    self._stride *= 2
            self._poses_seen += 1
            self._bump("trajectory")
            if keyframe:
                self._keyframes.append(c2w.copy())
                del self._keyframes[:-self.max_keyframes]
                self._bump("keyframes")

    def add_keyframe(self, c2w) -> None:
        """A keyframe's pose (when it is known apart from its pose: a node's ~/status)."""
        c2w = np.asarray(c2w, np.float64)
        if c2w.shape != (4, 4) or not np.isfinite(c2w).all():
            raise ValueError(f"a pose must be a finite (4, 4) matrix, got shape {c2w.shape}")
        with self._lock:
            self._keyframes.append(c2w.copy())
            del self._keyframes[:-self.max_keyframes]
            self._bump("keyframes")

    def set_trajectory(self, poses, keyframe_mask=None) -> None:
        """The whole front-end trajectory at once ((N, 4, 4) c2w: a run's file, ``~/path``);
        ``keyframe_mask`` (N,) marks its keyframes."""
        poses = _check_poses(poses, "trajectory")
        step = max(1, math.ceil(len(poses) / self.max_poses))
        front = [p[:3, 3].copy() for p in poses[::step]]
        with self._lock:
            self._front, self._stride, self._poses_seen = front, step, len(poses)
            self._last_pose = front[-1] if (len(poses) - 1) % step == 0 and front else (
                poses[-1, :3, 3].copy() if len(poses) else None)
            self._bump("trajectory")
            if keyframe_mask is not None:
                mask = np.asarray(keyframe_mask, bool)
                if mask.shape != (len(poses),):
                    raise ValueError(f"keyframe_mask has shape {mask.shape}, the trajectory "
                                     f"{len(poses)} poses")
                self._keyframes = list(poses[mask][-self.max_keyframes:])
                self._bump("keyframes")

    def set_optimised(self, poses) -> None:
        """The optimised trajectory (loop closure), replaced whole."""
        poses = _check_poses(poses, "optimised trajectory")
        step = max(1, math.ceil(len(poses) / self.max_poses))
        with self._lock:
            self._optimised = poses[::step, :3, 3].copy()
            self._bump("trajectory")

    def add_points(self, xyz, rgb) -> None:
        """A keyframe's points (N, 3) with colours (N, 3) uint8: accumulated, one per voxel."""
        with self._lock:
            self._voxels.add(xyz, rgb)
            self._xyz, self._rgb = self._voxels.arrays()
            self._bump("points")

    def set_points(self, xyz, rgb) -> None:
        """A whole map at once (a PLY, ``~/map_points``): replaces the points, subsampled."""
        xyz = np.asarray(xyz, np.float32).reshape(-1, 3)
        rgb = np.asarray(rgb, np.uint8).reshape(-1, 3)
        if len(xyz) != len(rgb):
            raise ValueError(f"{len(xyz)} points but {len(rgb)} colours")
        finite = np.isfinite(xyz).all(axis=1)
        xyz, rgb = subsample(xyz[finite], rgb[finite], self.max_points)
        with self._lock:
            self._voxels.clear()
            self._xyz, self._rgb = xyz, rgb
            self._bump("points")

    def set_camera(self, c2w, K, hw, image=None) -> None:
        """The latest camera (the frustum), with its image when there is one."""
        c2w, K = np.asarray(c2w, np.float64), np.asarray(K, np.float64)
        if c2w.shape != (4, 4) or K.shape != (3, 3) or not (K[1, 1] > 0):
            raise ValueError("a camera needs a (4, 4) c2w and a (3, 3) K with fy > 0")
        view = CameraView(c2w, K, (int(hw[0]), int(hw[1])), image)
        with self._lock:
            self._camera = view
            self._bump("camera")

    def set_counters(self, **counts: int) -> None:
        """Frames in, processed, dropped, keyframes (any of them; the others stay)."""
        with self._lock:
            self._counters = replace(self._counters, **{k: int(v) for k, v in counts.items()})
            self._bump("status")

    def set_scale(self, scale: ScaleView) -> None:
        with self._lock:
            self._scale = scale
            self._bump("status")

    def clear(self) -> None:
        """Forget the stream (a reset): trajectory, keyframes, points, camera; not the
        counters, which count since the source started."""
        with self._lock:
            self._voxels.clear()
            self._xyz, self._rgb = np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint8)
            self._front, self._stride, self._poses_seen = [], 1, 0
            self._last_pose, self._optimised, self._keyframes = None, _EMPTY3, []
            self._camera = None
            for part in ("points", "trajectory", "keyframes", "camera"):
                self._bump(part)

    # -- readers ------------------------------------------------------------------------
    def snapshot(self) -> SceneSnapshot:
        with self._lock:
            front = list(self._front)
            if self._last_pose is not None and (not front or front[-1] is not self._last_pose):
                front.append(self._last_pose)  # the newest pose always shows
            return SceneSnapshot(
                points_xyz=self._xyz, points_rgb=self._rgb,
                front_end=np.array(front).reshape(-1, 3), optimised=self._optimised,
                keyframes=np.array(self._keyframes).reshape(-1, 4, 4), camera=self._camera,
                counters=self._counters, scale=self._scale, poses_seen=self._poses_seen,
                versions=dict(self._versions))

    def version(self) -> int:
        with self._lock:
            return sum(self._versions.values())

    def wait_changed(self, seen: int, timeout: float) -> int:
        """Wait until the total version differs from ``seen`` (or ``timeout`` seconds);
        returns the current one."""
        with self._changed:
            self._changed.wait_for(lambda: sum(self._versions.values()) != seen, timeout)
            return sum(self._versions.values())

    def _bump(self, part: str) -> None:  # under the lock
        self._versions[part] += 1
        self._changed.notify_all()


def _check_poses(poses, what: str) -> np.ndarray:
    poses = np.asarray(poses, np.float64)
    if poses.ndim != 3 or poses.shape[1:] != (4, 4):
        raise ValueError(f"the {what} must be (N, 4, 4) poses, got shape {poses.shape}")
    if not np.isfinite(poses).all():
        raise ValueError(f"the {what} has non-finite poses")
    return poses

"""A finished run's folder, read for the viewer: ``lingbot-ros-view RUN_DIR``.

What it reads (each file as our writers wrote it; a file that is there but unreadable is a
:class:`RunDirError` naming the file and why, never a half-shown scene):

- ``trajectory.tum`` (required): the front-end trajectory, its header's units and frame;
- ``trajectory_optimized.tum``: the loop-closed trajectory (``--loop-closure``);
- ``points.ply`` (``lingbot-ros-offline --ply``) or ``map.ply`` (the node's ``~/save_map``,
  as ``make demo`` leaves it): the coloured points;
- ``summary.json`` (``lingbot-ros-offline``): frames read, processed, skipped and rejected,
  keyframes, and the scale's state and metres per unit.

A ``lingbot-ros-offline --out`` folder has all of them; ``make demo``'s ``--out`` has the
node's ``trajectory.tum`` and ``map.ply``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ...geometry import (check_regular, read_ply, read_ply_comments, read_regular, read_tum,
                         read_tum_header)
from .scene import Counters, SceneModel, ScaleView

__all__ = ["RunDirError", "RunOutputs", "read_run_dir", "load_into"]

TRAJECTORY, OPTIMISED = "trajectory.tum", "trajectory_optimized.tum"  # the offline runner's
POINT_FILES = ("points.ply", "map.ply")  # lingbot-ros-offline --ply, the node's ~/save_map
SUMMARY = "summary.json"
SUMMARY_FORMAT_PREFIX = "lingbot_ros.offline.summary/"  # tools/offline/outputs.py's format
MAX_SUMMARY_BYTES = 16 * 2**20


class RunDirError(ValueError):
    """A run folder the viewer cannot show; the message names the file and says why."""


@dataclass(frozen=True)
class RunOutputs:
    """What a run's folder holds, checked."""
    folder: Path
    stamps_ns: np.ndarray  # (N,) int64
    poses: np.ndarray  # (N, 4, 4) c2w, the front end
    optimised: Optional[np.ndarray]  # (M, 4, 4) c2w, or None
    xyz: np.ndarray  # (P, 3) float32 (empty without a point file)
    rgb: np.ndarray  # (P, 3) uint8
    points_file: Optional[str]
    units: str  # from the trajectory's header: "m" or "model units ..."
    frame: str  # the trajectory's frame, from its header ("" when it names none)
    counters: Counters
    scale: ScaleView
    summary: Optional[dict]

    @property
    def up_axis(self) -> str:
        """The world's up: ``-y`` in a camera-optical world (the offline runner's: the first
        camera's, y down), ``+z`` in a map frame (the node's, REP-103)."""
        return "-y" if "camera_optical" in self.frame else "+z"


def read_run_dir(folder) -> RunOutputs:
    """Read and check a run's folder (module doc). RunDirError says what is wrong."""
    folder = Path(folder)
    if not folder.exists():
        raise RunDirError(f"RUN_DIR {folder}: no such folder")
    if not folder.is_dir():
        raise RunDirError(f"RUN_DIR {folder}: not a folder (give the run's --out folder)")
    traj = folder / TRAJECTORY
    if not traj.exists():
        raise RunDirError(f"RUN_DIR {folder}: no {TRAJECTORY} (a lingbot-ros-offline --out "
                          f"folder, or make demo's --out, has one)")
    stamps, poses = _read_trajectory(traj)
    if len(poses) == 0:
        raise RunDirError(f"{traj}: no poses (the run processed no frame)")
    header = _header(traj)
    optimised = None
    if (folder / OPTIMISED).exists():
        optimised = _read_trajectory(folder / OPTIMISED)[1]
    xyz, rgb, points_file = np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint8), None
    for name in POINT_FILES:
        if (folder / name).exists():
            xyz, rgb = _read_points(folder / name)
            points_file = name
            break
    summary = _read_summary(folder / SUMMARY) if (folder / SUMMARY).exists() else None
    units = header.get("units", "model units (the file does not say)")
    return RunOutputs(folder, stamps, poses, optimised, xyz, rgb, points_file, units,
                      header.get("frame", ""), _counters(summary, len(poses)),
                      _scale(summary, header, units), summary)


def load_into(model: SceneModel, run: RunOutputs) -> None:
    """Show a read run in ``model``: trajectories, points, the last camera, counters, scale."""
    model.set_trajectory(run.poses)
    if run.optimised is not None:
        model.set_optimised(run.optimised)
    model.set_points(run.xyz, run.rgb)
    K, hw = _intrinsics(run.summary)
    model.set_camera(run.poses[-1], K, hw)
    c = run.counters
    model.set_counters(frames_in=c.frames_in, processed=c.processed, dropped=c.dropped,
                       keyframes=c.keyframes)
    model.set_scale(run.scale)


def _read_trajectory(path: Path) -> tuple[np.ndarray, np.ndarray]:
    _regular(path)
    try:
        stamps, poses = read_tum(path)
    except UnicodeDecodeError:
        raise RunDirError(f"{path}: not a text file (a TUM trajectory is text)") from None
    except ValueError as exc:
        raise RunDirError(f"{path}: not a TUM trajectory: {exc}") from None
    if not np.isfinite(poses).all():
        raise RunDirError(f"{path}: non-finite poses")
    return stamps, poses


def _header(path: Path) -> dict:
    out = {}
    for line in read_tum_header(path):
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("units", "frame", "scale"):
            out.setdefault(key.strip(), value.strip())
    return out


def _read_points(path: Path) -> tuple[np.ndarray, np.ndarray]:
    _regular(path)
    try:
        read_ply_comments(path)
        xyz, rgb = read_ply(path)
    except (ValueError, StopIteration, UnicodeDecodeError) as exc:
        raise RunDirError(f"{path}: not a point cloud we wrote (binary PLY, x y z float, "
                          f"red green blue uchar): {exc or type(exc).__name__}") from None
    return xyz, rgb


def _read_summary(path: Path) -> dict:
    _regular(path)
    try:
        doc = json.loads(read_regular(path, MAX_SUMMARY_BYTES))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunDirError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or not str(doc.get("summary_format", "")).startswith(
            SUMMARY_FORMAT_PREFIX):
        raise RunDirError(f"{path}: not a lingbot-ros-offline summary (no summary_format "
                          f"{SUMMARY_FORMAT_PREFIX}...)")
    return doc


def _regular(path: Path) -> None:
    try:
        check_regular(path)
    except OSError as exc:
        raise RunDirError(f"{path}: {exc}") from None


def _count(doc: dict, key: str) -> int:
    value = doc.get(key)
    return int(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0


def _counters(summary: Optional[dict], num_poses: int) -> Counters:
    if summary is None:  # the node's saved trajectory: its poses are what was processed
        return Counters(frames_in=num_poses, processed=num_poses)
    frames_in, processed = _count(summary, "frames_read"), _count(summary, "frames_processed")
    rejected = summary.get("frames_rejected_by_session") or {}
    dropped = _count(summary, "frames_skipped_by_source") + sum(
        int(v) for v in rejected.values() if isinstance(v, int))
    return Counters(frames_in=frames_in, processed=processed, dropped=dropped,
                    keyframes=_count(summary, "keyframes"))


def _scale(summary: Optional[dict], header: dict, units: str) -> ScaleView:
    short = "m" if units == "m" else "model units"
    scale = (summary or {}).get("scale")
    if isinstance(scale, dict):
        mpu = scale.get("metres_per_unit") or scale.get("estimate_metres_per_unit")
        return ScaleView(state=str(scale.get("state", "UNKNOWN")).upper(),
                         source=str(scale.get("source", "none")),
                         metres_per_unit=float(mpu) if isinstance(mpu, (int, float)) else None,
                         units=short)
    text = header.get("scale", "none")  # the node's header: "depth, 0.83 m per model unit (..."
    source = text.split(",")[0].strip() or "none"
    mpu = None
    if short == "m":
        try:
            mpu = float(text.split(",")[1].split()[0])
        except (IndexError, ValueError):
            mpu = None
    state = "LOCKED" if short == "m" else ("UNKNOWN" if source == "none" else "CONVERGING")
    return ScaleView(state=state, source=source, metres_per_unit=mpu, units=short)


def _intrinsics(summary: Optional[dict]) -> tuple[np.ndarray, tuple[int, int]]:
    """A frustum's shape: the run's model input size when the summary has it (a 60 degree
    vertical field of view: the run's intrinsics are per frame, not in the files)."""
    h, w = 3, 4
    size = ((summary or {}).get("settings") or {}).get("input_size_hw")
    if isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) for v in size):
        h, w = size
    f = (h / 2.0) / math.tan(math.radians(30.0))
    return np.array([[f, 0, w / 2.0], [0, f, h / 2.0], [0, 0, 1.0]]), (h, w)

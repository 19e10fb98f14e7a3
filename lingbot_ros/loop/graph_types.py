"""The pose graph's inputs and results, numpy only (``pose_graph.py`` holds the graph and
GTSAM): ``EdgeSigmas`` (one edge's standard deviations), ``LoopResidual`` and
``GraphResult`` (what ``PoseGraph.optimize`` returns, frozen), and the checks of ids and
similarities that give a clear ValueError on bad input (rigid poses: ``ROTATION_TOL`` with
``lingbot_ros.geometry.check_rigid``)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..geometry import as_transforms, check_rigid, rigid_inverse

__all__ = ["EdgeSigmas", "LoopResidual", "GraphResult", "PoseGraphError", "ROTATION_TOL",
           "check_int", "check_id", "check_matrix", "check_similarity"]

# how far from orthonormal a rotation may be (max |R^T R - I|): the similarities here, and
# every rigid pose the back end takes (lingbot_ros.geometry.check_rigid(..., tol=ROTATION_TOL))
ROTATION_TOL = 1e-5


class PoseGraphError(ValueError):
    """GTSAM could not solve the pose graph and dropping the new loops did not help (or
    there were none): the graph is back at its last good optimize, inputs still pending."""


@dataclass(frozen=True)
class EdgeSigmas:
    """One edge's standard deviations: translation (front-end units: metres once the scale
    is locked), rotation (degrees), log of the relative scale."""

    t_m: float
    deg: float
    log_scale: float

    def __post_init__(self) -> None:
        for name in ("t_m", "deg", "log_scale"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                    math.isfinite(v) and v > 0):
                raise ValueError(f"EdgeSigmas.{name} must be a finite number > 0, got {v!r}")

    def vector(self) -> np.ndarray:
        """(7,) in GTSAM's Similarity3 tangent order: rotation (rad), translation, log s."""
        r = math.radians(self.deg)
        return np.array([r, r, r, self.t_m, self.t_m, self.t_m, self.log_scale])


@dataclass(frozen=True)
class LoopResidual:
    """A loop edge after optimisation: how far the graph is from what the loop measured."""

    id_a: int
    id_b: int
    residual_m: float  # where the loop puts b vs where the graph puts it (map units)
    residual_deg: float
    residual_log_scale: float
    chi: float  # the whitened error's norm (in sigmas)
    weight: float  # the robust kernel's weight at chi (1: fully trusted, ~0: ignored)


@dataclass(frozen=True)
class GraphResult:
    """The graph after :meth:`PoseGraph.optimize` (arrays read-only).

    ``correction_sim3`` maps the front end's world (REP-105's ``odom``) into the optimised
    map at the newest keyframe: its optimised Sim(3) node times the inverse of the front
    end's pose, ``[[s R, t], [0, 1]]``, ``s = correction_scale`` (map units per front-end
    unit there). It holds until the next loop: later keyframes are placed by it
    (:meth:`map_pose`). ``correction`` is its rigid ``map -> odom`` (a TF) at the newest
    keyframe, :meth:`correction_at` the same at any later front-end pose (it moves with
    the robot while ``s != 1``: the front end's units are not the map's)."""

    ids: tuple[int, ...]
    poses: Mapping[int, np.ndarray]  # optimised rigid T_map_kf (4, 4) by id
    scales: Mapping[int, float]  # map units per front-end unit at each keyframe
    newest_id: int
    correction_sim3: np.ndarray  # (4, 4) Sim(3) map <- odom at the newest keyframe
    correction_scale: float
    correction: np.ndarray  # (4, 4) rigid T_map_odom = poses[newest] @ inverse(front end's)
    iterations: int  # iSAM2 updates of this optimize()
    time_s: float  # their wall time
    loops: tuple[LoopResidual, ...]
    # (id_a, id_b) of the loops this optimize() dropped: GTSAM found the system
    # indeterminate with them (PoseGraph.rejected_loops counts them)
    rejected_loops: tuple[tuple[int, int], ...] = ()

    def map_pose(self, T_odom_x) -> np.ndarray:
        """The rigid map pose (4, 4) of a frame whose front-end pose is ``T_odom_x`` (rigid,
        (4, 4), at or after the newest keyframe): ``correction_sim3`` applied to it."""
        m = check_rigid(T_odom_x, "T_odom_x", tol=ROTATION_TOL)
        out = self.correction_sim3 @ m
        out[:3, :3] /= self.correction_scale
        return out

    def correction_at(self, T_odom_x) -> np.ndarray:
        """The rigid ``map -> odom`` (4, 4) at a frame whose front-end pose is ``T_odom_x``:
        ``map_pose(T_odom_x) @ inverse(T_odom_x)``."""
        pose = check_rigid(T_odom_x, "T_odom_x", tol=ROTATION_TOL)
        return self.map_pose(pose) @ rigid_inverse(pose)


def check_int(value, name: str) -> int:
    """``value`` as a Python int (numpy integers too, not bools); ValueError otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)


def check_id(value, name: str) -> int:
    """A keyframe id: an integer in [0, 2^63) (it is stored as int64)."""
    v = check_int(value, name)
    if not 0 <= v < 2 ** 63:
        raise ValueError(f"{name} must be a non-negative 64-bit integer, got {v}")
    return v


def check_matrix(T, name: str) -> np.ndarray:
    """One finite (4, 4) matrix whose last row is [0, 0, 0, 1], as a float64 copy."""
    m = as_transforms(T, name)
    if m.shape != (4, 4):
        raise ValueError(f"{name} must be one (4, 4) matrix, got {m.shape}")
    if not np.isfinite(m).all():
        raise ValueError(f"{name} is not finite")
    if np.abs(m[3] - (0.0, 0.0, 0.0, 1.0)).max() > 1e-9:
        raise ValueError(f"{name}: its last row must be [0, 0, 0, 1], got {m[3].tolist()}")
    return m.copy()


def check_similarity(T, name: str) -> np.ndarray:
    """A (4, 4) Sim(3) ``[[s R, t], [0, 1]]``, checked: ValueError naming ``name``."""
    m = check_matrix(T, name)
    det = float(np.linalg.det(m[:3, :3]))
    if not det > 0:
        raise ValueError(f"{name} is not a similarity (det of its 3x3 block {det:.4g})")
    r = m[:3, :3] / np.cbrt(det)
    off = float(np.abs(r.T @ r - np.eye(3)).max())
    if off > ROTATION_TOL:
        raise ValueError(f"{name} is not a similarity (R^T R - I up to {off:.2g} after "
                         f"removing the scale)")
    return m

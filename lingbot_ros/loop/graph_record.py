"""A run's pose-graph inputs on file (``loop_graph.json``), replayed, and a trajectory
corrected by a graph's result (numpy; GTSAM only inside :func:`replay`).

    write_graph_record(out / "loop_graph.json", record)     # what the back end was given
    record = read_graph_record(path)                         # checked; GraphRecordError
    result = replay(record, LoopConfig(...))                 # the graph, optimised again
    corrected = corrected_poses(result, record, stamps, poses)

The offline runner writes the record beside ``trajectory.tum`` with ``--loop-closure``;
``lingbot-ros-offline --reoptimize RUN`` replays it (other sigmas, the same inputs) without
the model. The record holds the graph's inputs only: each keyframe (id, stamp, segment, its
front-end pose) and each accepted loop (the two ids, the Sim(3) measurement, its sigmas).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ..geometry import check_rigid, rigid_inverse, write_atomic
from ..geometry.file_rules import read_regular
from .config import LoopConfig
from .graph_types import ROTATION_TOL, EdgeSigmas, GraphResult, check_similarity

__all__ = ["GraphRecord", "RecordedLoop", "GraphRecordError", "RECORD_FORMAT", "record_of",
           "scaled", "write_graph_record", "read_graph_record", "replay", "corrected_poses"]

RECORD_FORMAT = "lingbot_ros_loop_graph"
RECORD_SCHEMA = 1
_BEGINS = b'{\n  "format": "' + RECORD_FORMAT.encode()  # what a record we wrote starts with
_MAX_BYTES = 512 * 1024 * 1024


class GraphRecordError(ValueError):
    """A graph record that is not ours, malformed or inconsistent (the message says how)."""


@dataclass(frozen=True)
class RecordedLoop:
    id_a: int  # the stored keyframe
    id_b: int  # the current keyframe
    T_a_b: np.ndarray  # (4, 4) Sim(3) [[s R, t], [0, 1]], t in a's front-end units
    sigmas: Optional[EdgeSigmas] = None  # None: the config's loop.loop_sigma_*


@dataclass(frozen=True)
class GraphRecord:
    """Keyframes in stream order and the accepted loops in the order they were accepted."""

    ids: tuple[int, ...]
    stamps_ns: tuple[int, ...]
    segments: tuple[int, ...]
    poses: np.ndarray  # (N, 4, 4) rigid front-end (odom) poses
    loops: tuple[RecordedLoop, ...]
    units: str = "model"  # "model" or "m": the poses' and loops' translations

    def __post_init__(self) -> None:
        n = len(self.ids)
        if len(self.stamps_ns) != n or len(self.segments) != n or self.poses.shape != (n, 4, 4):
            raise GraphRecordError(f"a graph record needs as many stamps, segments and (4, 4) "
                                   f"poses as ids ({n}); got {len(self.stamps_ns)}, "
                                   f"{len(self.segments)}, {self.poses.shape}")
        if len(set(self.ids)) != n:
            raise GraphRecordError("keyframe ids repeat in the graph record")
        if any(b < a for a, b in zip(self.stamps_ns, self.stamps_ns[1:])):
            raise GraphRecordError("keyframe stamps go backwards in the graph record")
        known = set(self.ids)
        for lp in self.loops:
            if lp.id_a not in known or lp.id_b not in known:
                raise GraphRecordError(f"loop {lp.id_a} -> {lp.id_b} names a keyframe the "
                                       "record does not hold")
        if self.units not in ("model", "m"):
            raise GraphRecordError(f"units must be 'model' or 'm', got {self.units!r}")


def record_of(graph_state: dict, units: str = "model") -> GraphRecord:
    """The inputs of a ``PoseGraph`` from its ``state_dict()``: its keyframes and its loop
    edges with their sigmas (odometry and rollover edges follow from the keyframes)."""
    nodes = graph_state["edge_nodes"]
    ids = [int(i) for i in graph_state["ids"]]
    loops = []
    for kind, (a, b), measured, sig in zip(graph_state["edge_kinds"], nodes,
                                           graph_state["edge_measured"],
                                           graph_state["edge_sigmas"]):
        if kind != "loop":
            continue
        loops.append(RecordedLoop(ids[int(a)], ids[int(b)], np.array(measured, np.float64),
                                  EdgeSigmas(float(sig[3]), math.degrees(float(sig[0])),
                                             float(sig[6]))))
    return GraphRecord(tuple(ids), tuple(int(s) for s in graph_state["stamps_ns"]),
                       tuple(int(g) for g in graph_state["segments"]),
                       np.array(graph_state["front_end"], np.float64).reshape(-1, 4, 4),
                       tuple(loops), units)


def scaled(record: GraphRecord, metres_per_unit: float) -> GraphRecord:
    """``record`` (model units) in metres: translations and translation sigmas times
    ``metres_per_unit``; rotations and relative scales unchanged."""
    f = float(metres_per_unit)
    if not (math.isfinite(f) and f > 0) or record.units != "model":
        raise ValueError(f"scaled() takes a model-unit record and a factor > 0, got "
                         f"{record.units!r} and {metres_per_unit!r}")
    poses = record.poses.copy()
    poses[:, :3, 3] *= f
    loops = []
    for lp in record.loops:
        T = lp.T_a_b.copy()
        T[:3, 3] *= f
        sig = None if lp.sigmas is None else EdgeSigmas(lp.sigmas.t_m * f, lp.sigmas.deg,
                                                         lp.sigmas.log_scale)
        loops.append(RecordedLoop(lp.id_a, lp.id_b, T, sig))
    return GraphRecord(record.ids, record.stamps_ns, record.segments, poses, tuple(loops), "m")


def write_graph_record(path, record: GraphRecord) -> Path:
    """``record`` as JSON at ``path``, atomically; an existing file is replaced only if it is
    a record we wrote."""
    doc = {"format": RECORD_FORMAT, "schema": RECORD_SCHEMA, "units": record.units,
           "keyframes": [{"id": int(i), "stamp_ns": int(s), "segment": int(g),
                          "pose": [float(v) for v in p.reshape(-1)]}
                         for i, s, g, p in zip(record.ids, record.stamps_ns, record.segments,
                                               record.poses)],
           "loops": [{"id_a": lp.id_a, "id_b": lp.id_b,
                      "T_a_b": [float(v) for v in lp.T_a_b.reshape(-1)],
                      "sigmas": None if lp.sigmas is None else
                      [lp.sigmas.t_m, lp.sigmas.deg, lp.sigmas.log_scale]}
                     for lp in record.loops]}
    data = (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode()
    return write_atomic(path, data, replaces=_BEGINS)


def read_graph_record(path) -> GraphRecord:
    """The record at ``path`` (a regular file we wrote); GraphRecordError naming what is
    wrong with it."""
    raw = read_regular(path, _MAX_BYTES)
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GraphRecordError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != RECORD_FORMAT:
        raise GraphRecordError(f"{path}: not a loop graph record (no format "
                               f"{RECORD_FORMAT!r})")
    if doc.get("schema") != RECORD_SCHEMA:
        raise GraphRecordError(f"{path}: schema {doc.get('schema')!r}, this version reads "
                               f"{RECORD_SCHEMA}")
    try:
        kfs, loops = doc["keyframes"], doc["loops"]
        ids = tuple(_int(k["id"]) for k in kfs)
        stamps = tuple(_int(k["stamp_ns"]) for k in kfs)
        segments = tuple(_int(k["segment"]) for k in kfs)
        poses = np.array([_matrix(k["pose"]) for k in kfs], dtype=np.float64).reshape(-1, 4, 4)
        for i, p in zip(ids, poses):
            check_rigid(p, f"pose of keyframe {i}", tol=ROTATION_TOL)
        rec_loops = tuple(RecordedLoop(
            _int(lp["id_a"]), _int(lp["id_b"]),
            check_similarity(_matrix(lp["T_a_b"]), "T_a_b"),
            None if lp["sigmas"] is None else EdgeSigmas(*[float(v) for v in lp["sigmas"]]))
            for lp in loops)
        return GraphRecord(ids, stamps, segments, poses, rec_loops, doc.get("units", "model"))
    except GraphRecordError as exc:
        raise GraphRecordError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise GraphRecordError(f"{path}: malformed ({type(exc).__name__}: {exc})") from None


def _int(v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise GraphRecordError(f"expected an integer, got {v!r}")
    return v


def _matrix(values) -> np.ndarray:
    if not isinstance(values, list) or len(values) != 16:
        raise GraphRecordError("a matrix must be a list of 16 numbers")
    m = np.array([float(v) for v in values], dtype=np.float64).reshape(4, 4)
    if not np.all(np.isfinite(m)):
        raise GraphRecordError("a matrix holds a non-finite number")
    return m


def replay(record: GraphRecord, config: Optional[LoopConfig] = None) -> GraphResult:
    """The record's graph built and optimised as the back end did: keyframes in order, each
    loop added once its later keyframe is in and optimised then (loops in record order),
    a last ``optimize()`` at the end. Raises PoseGraphError as ``optimize`` does."""
    from .pose_graph import PoseGraph  # GTSAM: imported where the graph is used

    graph = PoseGraph(config or LoopConfig())
    position = {kf: k for k, kf in enumerate(record.ids)}
    by_ready: dict[int, list[RecordedLoop]] = {}
    for lp in record.loops:
        by_ready.setdefault(max(position[lp.id_a], position[lp.id_b]), []).append(lp)
    for k, kf in enumerate(record.ids):
        graph.add_keyframe(kf, record.stamps_ns[k], record.poses[k], record.segments[k])
        for lp in by_ready.get(k, ()):
            graph.add_loop(lp.id_a, lp.id_b, lp.T_a_b, lp.sigmas)
            graph.optimize()
    if not record.ids:
        raise GraphRecordError("the graph record holds no keyframe")
    return graph.optimize()


def corrected_poses(result: GraphResult, record: GraphRecord, stamps_ns,
                    poses) -> np.ndarray:
    """Front-end poses (N, 4, 4) at ``stamps_ns`` in the optimised map: each moved with the
    keyframe at or before its stamp (the first keyframe before the first), as its node
    places it: rotation ``R_k R_rel``, position ``s_k R_k t_rel + c_k`` for
    ``T_rel = inverse(T_odom_k) @ T_odom``; a keyframe's own pose becomes its optimised
    one exactly."""
    poses = np.asarray(poses, dtype=np.float64)
    stamps = np.asarray(stamps_ns, dtype=np.int64)
    if poses.ndim != 3 or poses.shape[1:] != (4, 4) or len(stamps) != len(poses):
        raise ValueError(f"poses must be (N, 4, 4) with N stamps, got {poses.shape} and "
                         f"{len(stamps)}")
    kf_stamps = np.asarray(record.stamps_ns, dtype=np.int64)
    k = np.clip(np.searchsorted(kf_stamps, stamps, side="right") - 1, 0, len(kf_stamps) - 1)
    out = np.empty_like(poses)
    for i, (ki, T) in enumerate(zip(k, poses)):
        kf = record.ids[ki]
        rel = rigid_inverse(record.poses[ki]) @ T  # (4, 4) the frame seen from keyframe k
        node = result.poses[kf]
        s = float(result.scales[kf])
        out[i] = np.eye(4)
        out[i, :3, :3] = node[:3, :3] @ rel[:3, :3]
        out[i, :3, 3] = s * node[:3, :3] @ rel[:3, 3] + node[:3, 3]
    if not math.isfinite(float(out.sum())):
        raise ValueError("the corrected poses are not finite")
    return out

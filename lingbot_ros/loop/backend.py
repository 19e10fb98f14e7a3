"""``LoopBackend``: the one object the node and the offline runner drive (docs/loop.md, "The
back end (LoopBackend)").

Per committed keyframe (:func:`keyframe_input` builds a :class:`KeyframeInput` from a
``FrameResult``), :meth:`LoopBackend.offer`:

1. puts the keyframe into the pose graph (every one: the front end's pose and segment, so
   the graph sees each rollover) and, through thinning, into the place database (its place
   descriptor, compact image and depth);
2. retrieves the top-k kept keyframes, never the last ``window`` offered ones (still in the
   front end's window) nor any younger than ``loop.min_age_s``;
3. verifies at most ``loop.max_verify_per_keyframe`` of them with ``pair`` (the model on the
   pair; ``None``: retrieval only), hands the verified ones to the confirmation, and puts a
   confirmed pair's two loops into the graph with the sigmas :func:`loop_sigmas` gives them
   from what their verification measured, then optimises.

The correction goes into REP-105's ``map -> odom`` (:meth:`LoopBackend.correction_at`);
``odom`` stays the front end's. Counters: :class:`LoopCounts`, each fact counted in one place
(``REJECT_REASONS``). Single-threaded: the caller owns the thread. Numpy and
``lingbot_ros.loop``; GTSAM only through ``pose_graph.py``, imported when a back end is made,
so ``import lingbot_ros.loop.backend`` works without GTSAM.
"""
from __future__ import annotations

import math
import time
from collections import deque
from types import MappingProxyType
from typing import Callable, Iterator, Optional

import numpy as np

from ..geometry import check_rigid, rotation_angle
from .backend_state import checked_backend_state, events_state
from .backend_types import REJECT_REASONS, BackendStep, KeyframeInput, LoopCounts, LoopEvent
from .config import LoopConfig
from .confirm import LoopConfirmation
from .graph_types import ROTATION_TOL, EdgeSigmas, check_id, check_int
from .place_db import PlaceCandidate, PlaceDatabase, PlaceKeyframe
from .place_descriptor import place_descriptor
from .verify import LoopVerifier, PairOutputs, VerifyResult

__all__ = ["LoopBackend", "PairFn", "keyframe_input", "loop_sigmas", "STATE_SCHEMA"]

PairFn = Callable[[PlaceKeyframe, np.ndarray], PairOutputs]
STATE_SCHEMA = 1  # of LoopBackend.state_dict()
_COUNTS = ("keyframes", "kept", "candidates", "verified", "accepted")


def keyframe_input(result) -> KeyframeInput:
    """A ``FrameResult`` (duck-typed: ``index``, ``stamp_ns``, ``segment``, ``c2w``,
    ``K_model``, ``features``, ``rgb``, ``depth``, ``depth_conf``) as the back end takes it.
    ValueError naming what is missing: ``features`` come with
    ``SessionConfig.return_features``, ``depth`` and ``rgb`` with ``return_depth``."""
    absent = [n for n in ("index", "stamp_ns", "segment", "c2w", "K_model")
              if getattr(result, n, None) is None]
    if absent:
        raise ValueError(f"a keyframe needs a frame result with {', '.join(absent)}; got a "
                         f"{type(result).__name__} without")
    if getattr(result, "features", None) is None:
        raise ValueError("the frame result has no features: the place descriptor needs them "
                         "(turn SessionConfig.return_features on)")
    lacking = [n for n in ("rgb", "depth") if getattr(result, n, None) is None]
    if lacking:
        raise ValueError(f"the frame result has no {' and no '.join(lacking)}: the keyframe "
                         "database keeps both (turn SessionConfig.return_depth on)")
    return KeyframeInput(
        keyframe_id=check_int(result.index, "index"),
        stamp_ns=check_int(result.stamp_ns, "stamp_ns"),
        segment=check_int(result.segment, "segment"),
        T_odom_cam=np.array(result.c2w, dtype=np.float64),
        K_model=np.array(result.K_model, dtype=np.float64),
        features=result.features, image=result.rgb, depth=result.depth,
        depth_conf=getattr(result, "depth_conf", None))


def loop_sigmas(config: LoopConfig, inlier_fraction: float, baseline: float) -> EdgeSigmas:
    """An accepted loop's sigmas from what its verification measured (docs/loop.md, "Sigmas
    of a loop"): ``u = (1 - inlier_fraction) / (1 - loop.min_inlier_fraction)`` in [0, 1]
    (0: every overlapping pixel agreed; 1: at the gate), each sigma
    ``best * (gate / best) ** u`` (``loop.loop_sigma_*_best`` at 0, ``loop.loop_sigma_*`` at
    1), the translation's plus ``loop.loop_sigma_t_per_m * baseline`` (the distance between
    the pair's cameras, the keyframe's units: a pair's pose error grows with it)."""
    q, b = inlier_fraction, baseline
    if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0.0 <= q <= 1.0:
        raise ValueError(f"inlier_fraction must be a number in [0, 1], got {q!r}")
    if isinstance(b, bool) or not isinstance(b, (int, float)) or not (math.isfinite(b)
                                                                      and b >= 0):
        raise ValueError(f"baseline must be a finite number >= 0, got {b!r}")
    c = config
    span = 1.0 - c.min_inlier_fraction
    u = min(1.0, max(0.0, (1.0 - q) / span)) if span > 0 else 0.0

    def mix(best: float, gate: float) -> float:
        return best * (gate / best) ** u

    return EdgeSigmas(mix(c.loop_sigma_t_best_m, c.loop_sigma_t_m) + c.loop_sigma_t_per_m * b,
                      mix(c.loop_sigma_deg_best, c.loop_sigma_deg),
                      mix(c.loop_sigma_log_scale_best, c.loop_sigma_log_scale))


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


class LoopBackend:
    """The back end over one stream (a reset starts a new one). Module docstring."""

    def __init__(self, config: LoopConfig, pair: Optional[PairFn], window: int,
                 image_stride: int = 2, depth_stride: int = 4) -> None:
        """``pair(stored_keyframe, current_image)``: the model on the pair (``run_pair``
        bound to the stream's model and settings), or None (retrieval only); ``window``:
        the front end's window in keyframes (the last ``window`` offered keyframes are
        never candidates); the strides: the place database's."""
        from .pose_graph import PoseGraph  # GTSAM, lazily: tests/test_package_deps.py
        if not isinstance(config, LoopConfig):
            raise ValueError(f"config must be a LoopConfig, got {type(config).__name__}")
        if pair is not None and not callable(pair):
            raise ValueError(f"pair must be callable or None, got {type(pair).__name__}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise ValueError(f"window must be an integer >= 0, got {window!r}")
        self.config, self.pair, self.window = config, pair, window
        self._db = PlaceDatabase(config, image_stride, depth_stride)
        self._graph = PoseGraph(config)
        self._reset_own()

    def _reset_own(self) -> None:
        self._verifier = LoopVerifier(self.config)
        self._confirm = LoopConfirmation(self.config)
        self._waiting: dict[int, tuple[VerifyResult, int]] = {}  # id(pending) -> (it, cur id)
        self._recent: deque[int] = deque(maxlen=self.window)
        self._odom: dict[int, np.ndarray] = {}  # keyframe id -> (4, 4) T_odom_cam, read-only
        self._K: dict[int, np.ndarray] = {}  # kept keyframe id -> (3, 3) K_model, read-only
        self._last: Optional[tuple[int, int]] = None  # the newest keyframe's stamp, segment
        self._counts = dict.fromkeys(_COUNTS, 0)
        self._rejected = dict.fromkeys(REJECT_REASONS, 0)
        self._events: list[LoopEvent] = []
        self._optimize_ms = math.nan

    # -- a keyframe ---------------------------------------------------------------------------
    def offer(self, kf: KeyframeInput, verify: bool = True) -> BackendStep:
        """One committed keyframe (module docstring). ``verify=False``: the caller cannot
        verify now (busy): the candidates that would have been verified count ``busy``.
        ValueError for a bad keyframe, nothing changed."""
        kid, pose, K, descriptor = self._checked(kf)
        before = self.correction_at(pose)  # map -> odom as published until now
        outcome = self._db.add(kid, kf.stamp_ns, pose, kf.segment, descriptor, kf.image,
                               kf.depth)
        self._graph.add_keyframe(kid, kf.stamp_ns, pose, kf.segment)
        self._odom[kid] = pose
        if outcome.kept:
            self._K[kid] = K
        self._last = (int(kf.stamp_ns), int(kf.segment))
        exclude = [kid, *self._recent]
        self._recent.append(kid)
        self._counts["keyframes"] += 1
        self._counts["kept"] += int(outcome.kept)
        candidates = self._db.candidates(descriptor, kf.stamp_ns, exclude_ids=exclude)
        self._counts["candidates"] += len(candidates)
        chosen = (candidates[:self.config.max_verify_per_keyframe] if self.pair is not None
                  else ())
        verified, confirmed = [], []
        if chosen and not verify:
            self._rejected["busy"] += len(chosen)
        elif chosen:
            for candidate in chosen:
                result = self._verify(candidate, kf, pose)
                if result is not None:
                    verified.append(result)
                    confirmed += self._confirm_one(result, kid)
        loops = self._accept(confirmed, pose, before) if confirmed else None
        return BackendStep(kid, bool(outcome.kept), candidates, tuple(verified),
                           loops if loops is not None else (),
                           _read_only(self.correction_at(pose)), loops is not None)

    def _checked(self, kf) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """The keyframe's id, pose, K and descriptor; ValueError before anything changes
        (the database's add checks the stamp's range, the image and the depth itself)."""
        if not isinstance(kf, KeyframeInput):
            raise ValueError(f"offer takes a KeyframeInput (keyframe_input(result)), got "
                             f"{type(kf).__name__}")
        kid = check_id(kf.keyframe_id, "keyframe_id")
        if kid in self._odom:
            raise ValueError(f"keyframe {kid} was already offered")
        stamp, segment = check_int(kf.stamp_ns, "stamp_ns"), check_int(kf.segment, "segment")
        if segment < 0:
            raise ValueError(f"segment must be >= 0, got {segment}")
        if self._last is not None and (stamp < self._last[0] or segment < self._last[1]):
            raise ValueError(f"keyframe {kid}: stamp {stamp} ns, segment {segment} after "
                             f"{self._last[0]} ns, segment {self._last[1]} (stream order; "
                             f"a reset starts a new back end)")
        pose = _read_only(check_rigid(kf.T_odom_cam, "T_odom_cam", tol=ROTATION_TOL))
        K = np.array(kf.K_model, dtype=np.float64) if isinstance(kf.K_model, np.ndarray) \
            else None
        if K is None or K.shape != (3, 3) or not np.isfinite(K).all() \
                or abs(np.linalg.det(K)) == 0:
            raise ValueError(f"K_model must be a finite, invertible (3, 3) array, got "
                             f"{getattr(kf.K_model, 'shape', type(kf.K_model).__name__)}")
        hw = np.shape(kf.image)[:2]
        for name in ("depth", "depth_conf"):
            a = getattr(kf, name)
            if (a is not None or name == "depth") and np.shape(a) != hw:
                raise ValueError(f"{name} must be the image's (H, W) {hw} (model resolution), "
                                 f"got {np.shape(a)}")
        return kid, pose, _read_only(K), place_descriptor(kf.features)

    def _verify(self, candidate: PlaceCandidate, kf: KeyframeInput,
                pose: np.ndarray) -> Optional[VerifyResult]:
        """One candidate on the pair; None (counted ``pair_failed``) when the pair or the
        verification raised ValueError (a pair the session did not return whole, sizes that
        do not match): the step goes on."""
        stored = self._db.get(candidate.keyframe_id)
        try:
            outputs = self.pair(stored, kf.image)
            result = self._verifier.verify(outputs, stored, pose, kf.stamp_ns,
                                           current_depth=kf.depth)
        except ValueError:
            self._rejected["pair_failed"] += 1
            return None
        if result.accepted:
            self._counts["verified"] += 1
        else:
            self._rejected[result.reason] += 1
        return result

    def _confirm_one(self, result: VerifyResult, current_id: int) -> list:
        """The confirmation's answer for a verification: the (loop, current keyframe id)
        pairs it confirmed; a verified loop it let go unconfirmed counts ``unconfirmed``."""
        if not result.accepted:
            return []
        self._waiting[id(result)] = (result, current_id)
        outcome = self._confirm.offer(result)
        out = [self._waiting.pop(id(r)) for r in outcome.loops] if outcome.confirmed else []
        pending = {id(p) for p in self._confirm.pending}
        for key in [k for k in self._waiting if k not in pending]:  # expired or pushed out
            del self._waiting[key]
            self._rejected["unconfirmed"] += 1
        return out

    def _accept(self, confirmed: list, pose: np.ndarray, before: np.ndarray) -> tuple:
        """The confirmed loops into the graph (add_loop, then optimize); their LoopEvents."""
        added = []
        for result, current_id in confirmed:
            baseline = float(np.linalg.norm(result.measurement[:3, 3]))
            sigmas = loop_sigmas(self.config, float(result.inlier_fraction), baseline)
            try:
                self._graph.add_loop(result.keyframe_id, current_id, result.measurement,
                                     sigmas)
            except ValueError:
                self._rejected["graph_rejected"] += 1
                continue
            added.append((result, current_id))
        if not added:
            return None
        start = time.perf_counter()
        graph = self._graph.optimize()  # PoseGraphError (a ValueError) propagates
        self._optimize_ms = (time.perf_counter() - start) * 1e3
        after = _read_only(graph.correction_at(pose))
        jump_m = float(np.linalg.norm(after[:3, 3] - before[:3, 3]))
        jump_deg = math.degrees(float(rotation_angle(before[:3, :3].T @ after[:3, :3])))
        residuals = {(r.id_a, r.id_b): r for r in graph.loops}
        dropped = set(graph.rejected_loops)
        events = []
        for result, current_id in added:
            key = (result.keyframe_id, current_id)
            if key in dropped or key not in residuals:
                self._rejected["graph_rejected"] += 1
                continue
            res = residuals[key]
            events.append(LoopEvent(
                stamp_ns=result.stamp_ns, keyframe_id=current_id,
                matched_id=result.keyframe_id,
                matched_stamp_ns=self._db.get(result.keyframe_id).stamp_ns,
                correction=after, jump_m=jump_m, jump_deg=jump_deg,
                residual_m=res.residual_m, residual_deg=res.residual_deg,
                inlier_fraction=float(result.inlier_fraction),
                relative_scale=float(result.relative_scale)))
        self._counts["accepted"] += len(events)
        self._events += events
        return tuple(events)

    # -- the map ------------------------------------------------------------------------------
    def correction_at(self, T_odom_cam) -> np.ndarray:
        """The rigid ``map -> odom`` (4, 4) at a frame whose front-end pose is ``T_odom_cam``
        (at or after the newest keyframe); identity before the first loop."""
        result = self._graph.result
        if result is None:
            check_rigid(T_odom_cam, "T_odom_cam", tol=ROTATION_TOL)
            return np.eye(4)
        return result.correction_at(T_odom_cam)

    def map_pose(self, T_odom_cam) -> np.ndarray:
        """The rigid pose (4, 4) in the map of a frame whose front-end pose is
        ``T_odom_cam`` (at or after the newest keyframe)."""
        result = self._graph.result
        return check_rigid(T_odom_cam, "T_odom_cam", tol=ROTATION_TOL) if result is None \
            else result.map_pose(T_odom_cam)

    def _map_pose_of(self, kid: int) -> tuple[np.ndarray, float]:
        """Keyframe ``kid``'s optimised rigid T_map_cam and its scale (map units per
        front-end unit); one not optimised yet is placed by the last correction."""
        result = self._graph.result
        if result is None:
            return self._odom[kid], 1.0
        if kid in result.scales:
            return result.poses[kid], result.scales[kid]
        return _read_only(result.map_pose(self._odom[kid])), result.correction_scale

    def keyframe_poses(self) -> dict[int, np.ndarray]:
        """Every offered keyframe's rigid T_map_cam (4, 4) by id, read-only."""
        return {kid: self._map_pose_of(kid)[0] for kid in self._odom}

    def keyframe_depths(self) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray,
                                                int]]:
        """For rebuilding the map, each kept keyframe as ``(id, T_map_cam, depth, K,
        stride)``: ``depth`` (h, w) float32 is its stored depth (every ``stride``-th pixel
        of the model-resolution depth) in map units (times the keyframe's scale), ``K`` its
        intrinsics at model resolution: pixel (r, c) of ``depth`` is pixel
        (r * stride, c * stride) of the model image."""
        for kid in self._db.ids().tolist():
            stored = self._db.get(kid)
            pose, scale = self._map_pose_of(kid)
            yield (kid, pose, stored.depth.astype(np.float32) * np.float32(scale),
                   self._K[kid], stored.depth_stride)

    def optimize(self):
        """The graph optimised over every keyframe offered so far (a ``GraphResult``; None
        before the first keyframe): what the whole run's corrected trajectory is read from
        (keyframes since the last loop are placed by the last correction until then)."""
        return self._graph.optimize() if len(self._graph) else None

    def graph_state(self) -> dict:
        """The pose graph's ``state_dict()``: its inputs (``loop.graph_record.record_of``)."""
        return self._graph.state_dict()

    @property
    def database(self) -> PlaceDatabase:
        """The place database, for reading (a stored map is made of it); its owner is this
        back end: never add to it."""
        return self._db

    @property
    def intrinsics(self) -> dict[int, np.ndarray]:
        """Each kept keyframe's K at model resolution (3, 3), read-only, by id."""
        return dict(self._K)

    @property
    def counts(self) -> LoopCounts:
        return LoopCounts(**self._counts, rejected=MappingProxyType(dict(self._rejected)),
                          optimize_ms_last=self._optimize_ms)

    @property
    def events(self) -> tuple[LoopEvent, ...]:
        """Every accepted loop since the back end began, in order."""
        return tuple(self._events)

    # -- snapshots ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The database's and the graph's states and the back end's own (recent ids, kept
        keyframes' intrinsics, counters, events): JSON values and numpy arrays. Loops
        waiting for confirmation are not kept."""
        ms = self._optimize_ms
        return {"schema": STATE_SCHEMA, "db": self._db.state_dict(),
                "graph": self._graph.state_dict(),
                "recent": np.array(self._recent, dtype=np.int64),
                "K_ids": np.array(list(self._K), dtype=np.int64),
                "K": np.array(list(self._K.values()), dtype=np.float64).reshape(-1, 3, 3),
                "counts": dict(self._counts), "rejected": dict(self._rejected),
                "optimize_ms_last": None if math.isnan(ms) else ms,
                "events": events_state(self._events)}

    def load_state_dict(self, state) -> None:
        """Continue a saved back end: the same poses, bit for bit. ValueError (nothing
        changed) for a malformed state or one the database or the graph refuses."""
        from .pose_graph import PoseGraph
        if not isinstance(state, dict) or state.get("schema") != STATE_SCHEMA:
            got = state.get("schema") if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"back end state: schema {got!r}, expected {STATE_SCHEMA}")
        db = PlaceDatabase(self.config, self._db.image_stride, self._db.depth_stride)
        db.load_state_dict(state.get("db"))
        graph = PoseGraph(self.config)
        try:
            graph.load_state_dict(state.get("graph"))
        except RuntimeError as err:  # GTSAM could not rebuild it
            raise ValueError(f"back end state: the pose graph does not solve ({err})") from None
        own = checked_backend_state(state, db.ids(), state["graph"], _COUNTS, REJECT_REASONS)
        self._db, self._graph = db, graph
        self._reset_own()
        self._odom = {k: _read_only(p) for k, p in own["odom"].items()}
        self._K = {k: _read_only(m) for k, m in own["K"].items()}
        self._recent.extend(own["recent"])
        self._last = own["last"]
        self._counts.update(own["counts"])
        self._rejected.update(own["rejected"])
        self._events = own["events"]
        self._optimize_ms = own["optimize_ms_last"]

"""``PoseGraph``: the keyframe pose graph, optimised incrementally with GTSAM's iSAM2.

Nodes are keyframes (integer ids, fed in stream order), each a **Sim(3)** node ``X_k``:
``x_map = s_k R_k x + c_k`` maps keyframe k's frame, in the front end's local units, into
the map. The front end is scale-agnostic and its scale drifts along a segment and across
rollovers, so each node carries its own scale: a loop that finds the scale changed
spreads that change along the loop, which a rigid graph cannot (it can only bend the path).
Once metres are locked the relative scales are pinned by small log-scale sigmas, and the
graph behaves as an SE(3) graph (docs/loop.md "Pose graph").

Edges (GTSAM ``BetweenFactorSimilarity3``; error in the Similarity3 tangent: rotation (3),
translation (3), log scale (1)):

* odometry: the front end's relative motion between consecutive keyframes of a segment,
  relative scale 1; sigmas from :class:`~lingbot_ros.loop.config.LoopConfig` per metre
  moved, with minimums; ``scale_sigma_log`` (the log relative scale's sigma) also widens the
  translation's by ``distance * scale_sigma_log`` (the translation is measured at a scale
  somewhere between the two ends');
* rollover: the same between the last keyframe of a segment and the first of the next (the
  ``segment`` argument says which), with the rollover's Sim(3) alignment's scale sigma;
* loop: a verified measurement of keyframe b seen from keyframe a (a Sim(3), scale = the
  relative scale), under a robust kernel (``loop.loop_robust_kernel``: Huber, whose pull is
  bounded but never vanishes; Cauchy would ignore a correct loop whose residual against
  the drifted estimate is large, which it is by construction: docs/loop.md).

A prior pins the first keyframe (the gauge). :meth:`PoseGraph.optimize` feeds what was
added since the last call to iSAM2 and returns a frozen :class:`GraphResult`; the state
(:meth:`PoseGraph.state_dict`) keeps every input and the estimate, and a load rebuilds
the graph at that estimate in one batch. The state's format and checks, and the rebuild
after GTSAM fails, are ``graph_state.py``'s (numpy only).
"""
from __future__ import annotations

import math
import time
from types import MappingProxyType
from typing import Optional

import gtsam
import numpy as np

from ..geometry import check_rigid, rigid_inverse, rotation_angle
from .config import LoopConfig
from .graph_state import (EDGE_KINDS, INDETERMINATE, LOOP, ODOMETRY, ROLLOVER, STATE_VERSION,
                          GraphEdge, GraphState, recover)
from .graph_types import (ROTATION_TOL, EdgeSigmas, GraphResult, LoopResidual, PoseGraphError,
                          check_id, check_int, check_similarity)

__all__ = ["PoseGraph", "GraphResult", "LoopResidual", "EdgeSigmas", "PoseGraphError",
           "EDGE_KINDS", "STATE_VERSION", "INDETERMINATE"]

PRIOR_SIGMA = 1e-6  # the first keyframe's prior (the gauge), every tangent component
RELINEARIZE_THRESHOLD = 0.01  # iSAM2: a variable whose delta exceeds this is relinearized


class PoseGraph:
    """The keyframe pose graph: ``add_keyframe`` in stream order, ``add_loop``, then
    ``optimize`` (incremental, iSAM2). Each iSAM2 update relinearizes the variables that
    moved more than ``RELINEARIZE_THRESHOLD`` and takes one Gauss-Newton step; optimize()
    repeats it until an update relinearizes nothing (converged), at most
    ``max_iterations`` updates: a loop's correction moves far, so it takes a few."""

    def __init__(self, config: Optional[LoopConfig] = None, max_iterations: int = 10) -> None:
        self.config = config if config is not None else LoopConfig()
        if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) \
                or max_iterations < 2:
            raise ValueError(f"max_iterations must be an integer >= 2, got {max_iterations!r}")
        self.max_iterations = max_iterations
        self._reset()

    def _reset(self) -> None:
        params = gtsam.ISAM2Params()
        params.setRelinearizeThreshold(RELINEARIZE_THRESHOLD)
        params.relinearizeSkip = 1
        self._isam = gtsam.ISAM2(params)
        self._ids: list[int] = []
        self._index: dict[int, int] = {}
        self._stamps: list[int] = []
        self._segments: list[int] = []
        self._front_end: list[np.ndarray] = []  # (4, 4) rigid T_world_kf as given
        self._initial: list[np.ndarray] = []  # (4, 4) Sim(3) initial value of each node
        self._edges: list[GraphEdge] = []
        self._fed_nodes = self._fed_edges = 0  # how many are in iSAM2
        self._estimate = np.zeros((0, 4, 4))  # (fed nodes, 4, 4) Sim(3) after the last
        self._result: Optional[GraphResult] = None
        self._rejected: dict[str, int] = {INDETERMINATE: 0}

    # --- inputs ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(self._ids)

    @property
    def result(self) -> Optional[GraphResult]:
        """The last optimize()'s result (None before the first)."""
        return self._result

    @property
    def rejected_loops(self) -> MappingProxyType:
        """How many loops optimize() dropped, by reason (``"indeterminate"``: GTSAM found
        the system indeterminate with them), since the graph began (kept in its state)."""
        return MappingProxyType(dict(self._rejected))

    def add_keyframe(self, kf_id: int, stamp_ns: int, T_world_kf, segment: int, *,
                     scale_sigma_log: Optional[float] = None,
                     rollover_sigmas: Optional[EdgeSigmas] = None) -> None:
        """A keyframe of the front end, in stream order: its id, stamp (integer ns), pose
        in the stream's world (rigid 4x4, the front end's units) and segment. From the
        second on, an edge from the previous keyframe: odometry within a segment (its
        log-scale sigma ``scale_sigma_log``, default per metre moved from the config), a
        rollover when the segment changed (``rollover_sigmas``, default the odometry's
        with ``loop.rollover_sigma_log_scale``)."""
        kf_id = check_id(kf_id, "keyframe id")
        if kf_id in self._index:
            raise ValueError(f"keyframe {kf_id} is already in the pose graph")
        stamp_ns, segment = check_int(stamp_ns, "stamp_ns"), check_int(segment, "segment")
        pose = check_rigid(T_world_kf, f"T_world_kf of keyframe {kf_id}", tol=ROTATION_TOL)
        if self._ids and stamp_ns < self._stamps[-1]:
            raise ValueError(f"keyframe {kf_id}: stamp {stamp_ns} ns is older than keyframe "
                             f"{self._ids[-1]}'s {self._stamps[-1]} ns (stream order)")
        if self._ids and segment < self._segments[-1]:
            raise ValueError(f"keyframe {kf_id}: segment {segment} after segment "
                             f"{self._segments[-1]} (segments only grow)")
        edge = None
        if self._ids:
            rel = rigid_inverse(self._front_end[-1]) @ pose
            kind = ODOMETRY if segment == self._segments[-1] else ROLLOVER
            sigmas = self._motion_sigmas(float(np.linalg.norm(rel[:3, 3])), kind,
                                         scale_sigma_log, rollover_sigmas)
            edge = GraphEdge(kind, len(self._ids) - 1, len(self._ids), rel, sigmas, "", 0.0)
            prev = len(self._ids) - 1
            base = self._estimate[prev] if prev < len(self._estimate) else self._initial[prev]
            initial = base @ rel  # the new node continues from its neighbour's estimate
        else:
            initial = pose
        self._append_node(kf_id, stamp_ns, segment, pose, initial)
        if edge is not None:
            self._edges.append(edge)

    def add_loop(self, id_a: int, id_b: int, T_a_b, sigmas: Optional[EdgeSigmas] = None) -> None:
        """A verified loop: keyframe ``id_b`` seen from keyframe ``id_a``, ``T_a_b`` a
        Sim(3) ``[[s R, t], [0, 1]]`` (4, 4) with ``t`` in a's front-end units and ``s`` the
        relative scale (b's unit in a's units; 1 for a rigid measurement). ``sigmas``:
        default ``loop.loop_sigma_*``. Under the robust kernel of ``loop.loop_robust_*``."""
        a, b = self._node(id_a, "id_a"), self._node(id_b, "id_b")
        if a == b:
            raise ValueError(f"a loop needs two keyframes, got {id_a} twice")
        measured = check_similarity(T_a_b, f"T_a_b of the loop {id_a} -> {id_b}")
        c = self.config
        sig = sigmas if sigmas is not None else EdgeSigmas(
            c.loop_sigma_t_m, c.loop_sigma_deg, c.loop_sigma_log_scale)
        if not isinstance(sig, EdgeSigmas):
            raise ValueError(f"sigmas must be an EdgeSigmas, got {type(sig).__name__}")
        self._edges.append(GraphEdge(LOOP, a, b, measured, sig.vector(),
                                     c.loop_robust_kernel, float(c.loop_robust_k)))

    def _motion_sigmas(self, dist: float, kind: str, scale_sigma_log: Optional[float],
                       rollover: Optional[EdgeSigmas]) -> np.ndarray:
        c = self.config
        if kind == ROLLOVER and rollover is not None:
            if not isinstance(rollover, EdgeSigmas):
                raise ValueError(f"rollover_sigmas must be an EdgeSigmas, got "
                                 f"{type(rollover).__name__}")
            return rollover.vector()
        if scale_sigma_log is None:
            scale_sigma_log = (c.rollover_sigma_log_scale if kind == ROLLOVER else
                               max(c.odom_sigma_log_scale_min,
                                   c.odom_sigma_log_scale_per_m * dist))
        log_s = EdgeSigmas(1.0, 1.0, scale_sigma_log).log_scale  # checked > 0
        t = math.hypot(max(c.odom_sigma_t_min_m, c.odom_sigma_t_per_m * dist), dist * log_s)
        deg = max(c.odom_sigma_deg_min, c.odom_sigma_deg_per_m * dist)
        return EdgeSigmas(t, deg, log_s).vector()

    def _node(self, kf_id, name: str) -> int:
        kf_id = check_id(kf_id, name)
        if kf_id not in self._index:
            raise ValueError(f"{name}: keyframe {kf_id} is not in the pose graph")
        return self._index[kf_id]

    def _append_node(self, kf_id: int, stamp_ns: int, segment: int, pose: np.ndarray,
                     initial: np.ndarray) -> None:
        self._index[kf_id] = len(self._ids)
        self._ids.append(kf_id)
        self._stamps.append(stamp_ns)
        self._segments.append(segment)
        self._front_end.append(pose)
        self._initial.append(initial)

    # --- optimisation -----------------------------------------------------------------------

    def optimize(self) -> GraphResult:
        """Feed what was added since the last call to iSAM2, update until converged, and
        return the result (the last one if nothing is new)."""
        if not self._ids:
            raise ValueError("the pose graph has no keyframe yet")
        if self._result is not None and self._fed_nodes == len(self._ids) \
                and self._fed_edges == len(self._edges):
            return self._result
        fed = (self._fed_nodes, self._fed_edges)
        start = time.perf_counter()
        try:
            iterations = self._feed(len(self._ids), len(self._edges))
        except RuntimeError as err:  # GTSAM's IndeterminantLinearSystemException and kin
            rebuilt, result, failure = recover(self, fed, err)  # graph_state.py
            rebuilt._result = result  # the last good one on a failure: the caller holds it
            self.__dict__.update(rebuilt.__dict__)
            if failure is not None:
                raise failure from err
            return result
        elapsed = time.perf_counter() - start
        self._result = self._build_result(iterations, elapsed)
        return self._result

    def _feed(self, nodes: int, edges: int, start: Optional[np.ndarray] = None) -> int:
        """The nodes and edges not yet in iSAM2, up to ``nodes`` and ``edges``, into it
        (a node's value: its initial one, or ``start[k]`` (F, 4, 4) where given), then
        updates until one relinearizes nothing. Returns how many updates ran."""
        fed_nodes, fed_edges = self._fed_nodes, self._fed_edges
        graph, values = gtsam.NonlinearFactorGraph(), gtsam.Values()
        for k in range(fed_nodes, nodes):
            value = start[k] if start is not None and k < len(start) else self._initial[k]
            values.insert(k, _to_gtsam(value))
        if fed_nodes == 0:
            graph.add(gtsam.PriorFactorSimilarity3(
                0, _to_gtsam(self._initial[0]), gtsam.noiseModel.Isotropic.Sigma(7, PRIOR_SIGMA)))
        for e in self._edges[fed_edges:edges]:
            graph.add(gtsam.BetweenFactorSimilarity3(e.a, e.b, _to_gtsam(e.measured),
                                                     _noise(e)))
        self._isam.update(graph, values)
        self._fed_nodes, self._fed_edges = nodes, edges
        done = 1
        while done < self.max_iterations:
            done += 1
            if self._isam.update().getVariablesRelinearized() == 0:
                break
        return done

    def _build_result(self, iterations: int, elapsed: float,
                      sims: Optional[np.ndarray] = None) -> GraphResult:
        """The result of the fed nodes, at iSAM2's estimate (or at ``sims`` (F, 4, 4))."""
        n, ids = self._fed_nodes, self._ids[:self._fed_nodes]
        if sims is None:
            values = self._isam.calculateEstimate()
            # (F, 4, 4) GTSAM's matrices [[R, t'], [0, 1 / s]] -> ours [[s R, s t'], [0, 1]]
            sims = np.array([values.atSimilarity3(k).matrix() for k in range(n)])
            sims = sims.reshape(n, 4, 4) / sims[:, 3:, 3:].reshape(n, 1, 1)
        scales = np.cbrt(np.linalg.det(sims[:, :3, :3]))  # (F,)
        poses = sims.copy()
        poses[:, :3, :3] /= scales[:, None, None]
        self._estimate = sims
        poses.setflags(write=False)
        correction = poses[-1] @ rigid_inverse(self._front_end[n - 1])
        correction_sim3 = sims[-1] @ rigid_inverse(self._front_end[n - 1])
        for a in (correction, correction_sim3):
            a.setflags(write=False)
        loops = tuple(_loop_residual(e, sims, self._ids)
                      for e in self._edges[:self._fed_edges] if e.kind == LOOP)
        return GraphResult(
            ids=tuple(ids), poses=MappingProxyType(dict(zip(ids, poses))),
            scales=MappingProxyType({i: float(s) for i, s in zip(ids, scales)}),
            newest_id=ids[-1], correction_sim3=correction_sim3,
            correction_scale=float(scales[-1]), correction=correction,
            iterations=iterations, time_s=elapsed, loops=loops)

    # --- snapshot ----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Every input, how many are in iSAM2 (``fed_nodes``, ``fed_edges``) and their
        estimate (Sim(3), (fed_nodes, 4, 4)): JSON values and numpy arrays
        (``graph_state.GraphState``)."""
        return GraphState(tuple(self._ids), tuple(self._stamps), tuple(self._segments),
                          tuple(self._front_end), tuple(self._initial), tuple(self._edges),
                          self._fed_nodes, self._fed_edges, self._estimate,
                          self._rejected).to_dict()

    def load_state_dict(self, state: dict) -> None:
        """Rebuild from :meth:`state_dict`: the same nodes and edges into a fresh iSAM2 in one
        batch, linearized at the saved estimate (so it is already optimal: one elimination,
        not the history's), the result at that estimate (the saved result's poses, bit for
        bit). What follows agrees with the saved graph's to iSAM2's convergence (its
        linearization points were others). ValueError (and this graph unchanged) on a
        state that does not fit."""
        loaded = PoseGraph(self.config, self.max_iterations)
        loaded._load(GraphState.from_dict(state))
        self.__dict__.update(loaded.__dict__)

    def _load(self, state: GraphState) -> None:
        """A fresh graph's nodes, edges and estimate from a checked state."""
        for k, kf_id in enumerate(state.ids):
            self._append_node(kf_id, state.stamps_ns[k], state.segments[k],
                              state.front_end[k], state.initial[k])
        self._edges = list(state.edges)
        self._rejected = dict(state.rejected)
        if state.fed_nodes:
            start = time.perf_counter()
            iterations = self._feed(state.fed_nodes, state.fed_edges, start=state.estimate)
            self._result = self._build_result(iterations, time.perf_counter() - start,
                                              sims=state.estimate)


# --- GTSAM ------------------------------------------------------------------------------------

def _to_gtsam(m: np.ndarray) -> gtsam.Similarity3:
    """Our ``[[s R, t], [0, 1]]`` (x -> s R x + t) as GTSAM's (R, t / s, s): x -> s (R x + t')."""
    s = float(np.cbrt(np.linalg.det(m[:3, :3])))
    return gtsam.Similarity3(gtsam.Rot3.ClosestTo(m[:3, :3] / s), m[:3, 3] / s, s)


def _kernel(kind: str, k: float):
    est = gtsam.noiseModel.mEstimator
    return est.Huber.Create(k) if kind == "huber" else est.Cauchy.Create(k)


def _noise(e: GraphEdge):
    diag = gtsam.noiseModel.Diagonal.Sigmas(e.sigmas)
    return gtsam.noiseModel.Robust.Create(_kernel(e.kernel, e.robust_k), diag) \
        if e.kernel else diag


def _loop_residual(e: GraphEdge, sims: np.ndarray, ids: list[int]) -> LoopResidual:
    pred = sims[e.a] @ e.measured  # where the loop puts b, in the map
    got = sims[e.b]
    s_pred, s_got = (float(np.cbrt(np.linalg.det(x[:3, :3]))) for x in (pred, got))
    r_pred, r_got = pred[:3, :3] / s_pred, got[:3, :3] / s_got
    err = np.linalg.inv(e.measured) @ np.linalg.inv(sims[e.a]) @ got  # (4, 4) Sim(3)
    chi = float(np.linalg.norm(gtsam.Similarity3.Logmap(_to_gtsam(err)) / e.sigmas))
    weight = float(_kernel(e.kernel, e.robust_k).weight(chi)) if e.kernel else 1.0
    return LoopResidual(ids[e.a], ids[e.b], float(np.linalg.norm(pred[:3, 3] - got[:3, 3])),
                        math.degrees(float(rotation_angle(r_pred.T @ r_got))),
                        math.log(s_got / s_pred), chi, weight)

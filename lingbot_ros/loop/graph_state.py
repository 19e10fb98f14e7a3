"""The pose graph's state (``pose_graph.py``): its edges, its snapshot and its recovery
when GTSAM fails. Numpy only: the graph itself, and GTSAM, stay in ``pose_graph.py``.

* :class:`GraphState`: every input of a ``PoseGraph`` (keyframes, edges), how many are in
  iSAM2 and their estimate; :meth:`GraphState.to_dict` is ``PoseGraph.state_dict()`` (JSON
  values and numpy arrays), :meth:`GraphState.from_dict` reads one back, every field checked
  (ValueError naming it);
* :func:`recover`: after GTSAM failed in ``optimize()``, the graph rebuilt from its state
  without the loops added since its last good optimize (docs/loop.md "When GTSAM fails").
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from ..geometry import check_rigid
from .graph_types import (ROTATION_TOL, GraphResult, PoseGraphError, check_id, check_int,
                          check_similarity)

__all__ = ["GraphEdge", "GraphState", "recover", "EDGE_KINDS", "STATE_VERSION",
           "INDETERMINATE", "ODOMETRY", "ROLLOVER", "LOOP", "KERNELS"]

ODOMETRY, ROLLOVER, LOOP = "odometry", "rollover", "loop"
EDGE_KINDS = (ODOMETRY, ROLLOVER, LOOP)
KERNELS = ("", "huber", "cauchy")  # an edge's robust kernel ("": none)
STATE_VERSION = 1  # of PoseGraph.state_dict()
INDETERMINATE = "indeterminate"  # rejected_loops' reason: GTSAM could not solve with them
_EDGE_KEYS = ("edge_kinds", "edge_nodes", "edge_measured", "edge_sigmas", "edge_kernels",
              "edge_robust_k")  # state_dict's per-edge fields


@dataclass(frozen=True)
class GraphEdge:
    """One edge of the pose graph, between node indices ``a`` and ``b``."""

    kind: str  # one of EDGE_KINDS
    a: int  # node indices
    b: int
    measured: np.ndarray  # (4, 4) Sim(3) [[s R, t], [0, 1]] of b in a
    sigmas: np.ndarray  # (7,) tangent order
    kernel: str  # one of KERNELS
    robust_k: float


@dataclass(frozen=True)
class GraphState:
    """A pose graph's inputs and estimate: per node (index k) its keyframe id, stamp (ns),
    segment, the front end's rigid pose ``front_end[k]`` and its initial Sim(3) value
    ``initial[k]`` (both (4, 4)); the edges; ``fed_nodes`` and ``fed_edges`` of them in
    iSAM2, their Sim(3) ``estimate`` (fed_nodes, 4, 4); ``rejected`` loops by reason."""

    ids: tuple[int, ...]
    stamps_ns: tuple[int, ...]
    segments: tuple[int, ...]
    front_end: tuple[np.ndarray, ...]
    initial: tuple[np.ndarray, ...]
    edges: tuple[GraphEdge, ...]
    fed_nodes: int
    fed_edges: int
    estimate: np.ndarray
    rejected: Mapping[str, int]

    def to_dict(self) -> dict:
        """JSON values and numpy arrays (copies): ``PoseGraph.state_dict()``."""
        e = self.edges
        return {
            "version": STATE_VERSION,
            "ids": np.array(self.ids, dtype=np.int64),
            "stamps_ns": np.array(self.stamps_ns, dtype=np.int64),
            "segments": np.array(self.segments, dtype=np.int64),
            "front_end": np.array(self.front_end, dtype=np.float64).reshape(-1, 4, 4),
            "initial": np.array(self.initial, dtype=np.float64).reshape(-1, 4, 4),
            "edge_kinds": [x.kind for x in e],
            "edge_nodes": np.array([(x.a, x.b) for x in e], dtype=np.int64).reshape(-1, 2),
            "edge_measured": np.array([x.measured for x in e]).reshape(-1, 4, 4),
            "edge_sigmas": np.array([x.sigmas for x in e]).reshape(-1, 7),
            "edge_kernels": [x.kernel for x in e],
            "edge_robust_k": np.array([x.robust_k for x in e], dtype=np.float64),
            "fed_nodes": self.fed_nodes, "fed_edges": self.fed_edges,
            "estimate": self.estimate.copy(),
            "rejected_loops": dict(self.rejected),
        }

    @classmethod
    def from_dict(cls, state: dict) -> GraphState:
        """:meth:`to_dict`'s output read back, every field checked: ValueError otherwise."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            got = state.get("version") if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"pose graph state: version {got!r}, expected {STATE_VERSION}")
        try:
            ids = np.asarray(state["ids"], dtype=np.int64).reshape(-1)
            n, m = len(ids), len(state["edge_kinds"])
            cols = {"stamps_ns": (n,), "segments": (n,), "front_end": (n, 4, 4),
                    "initial": (n, 4, 4), "edge_nodes": (m, 2), "edge_measured": (m, 4, 4),
                    "edge_sigmas": (m, 7), "edge_robust_k": (m,)}
            arr = {k: np.asarray(state[k]).reshape(shape) for k, shape in cols.items()}
            kernels = list(state["edge_kernels"])
            fed_nodes, fed_edges = (check_int(state[k], k) for k in ("fed_nodes", "fed_edges"))
            estimate = np.array(state["estimate"], dtype=np.float64)  # a copy: ours from now
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"pose graph state: missing or malformed field ({err})") from None
        seen: set[int] = set()
        front_end, initial = [], []
        for k in range(n):
            kf_id = check_id(int(ids[k]), "pose graph state: keyframe id")
            if kf_id in seen:
                raise ValueError(f"pose graph state: keyframe {kf_id} twice")
            seen.add(kf_id)
            name = f"pose graph state: keyframe {kf_id}"
            front_end.append(check_rigid(arr["front_end"][k], name, tol=ROTATION_TOL))
            initial.append(check_similarity(arr["initial"][k], name))
        edges = []
        for j, kind in enumerate(state["edge_kinds"]):
            a, b = (int(x) for x in arr["edge_nodes"][j])
            sig = np.array(arr["edge_sigmas"][j], dtype=np.float64)
            if kind not in EDGE_KINDS or not (0 <= a < n and 0 <= b < n and a != b) \
                    or kernels[j] not in KERNELS \
                    or not (np.isfinite(sig).all() and (sig > 0).all()):
                raise ValueError(f"pose graph state: edge {j} ({kind!r} {a} -> {b}) is "
                                 f"malformed")
            edges.append(GraphEdge(kind, a, b, check_similarity(
                arr["edge_measured"][j], f"pose graph state: edge {j}"), sig, kernels[j],
                float(arr["edge_robust_k"][j])))
        if not (0 <= fed_nodes <= n and 0 <= fed_edges <= m
                and (fed_nodes > 0 or fed_edges == 0)
                and all(max(e.a, e.b) < fed_nodes for e in edges[:fed_edges])):
            raise ValueError(f"pose graph state: {fed_nodes} nodes and {fed_edges} edges fed "
                             f"of {n} and {m}")
        if estimate.shape != (fed_nodes, 4, 4):
            raise ValueError(f"pose graph state: the estimate is {estimate.shape}, expected "
                             f"({fed_nodes}, 4, 4)")
        for k in range(fed_nodes):
            check_similarity(estimate[k], f"pose graph state: the estimate of node {k}")
        rejected = state.get("rejected_loops", {INDETERMINATE: 0})  # absent in older states
        if not isinstance(rejected, dict) or set(rejected) != {INDETERMINATE} or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 0
                for v in rejected.values()):
            raise ValueError(f"pose graph state: rejected_loops {rejected!r} is malformed")
        return cls(tuple(int(i) for i in ids), tuple(int(s) for s in arr["stamps_ns"]),
                   tuple(int(s) for s in arr["segments"]), tuple(front_end), tuple(initial),
                   tuple(edges), fed_nodes, fed_edges, estimate, dict(rejected))


def _trimmed(state: dict, fed: tuple[int, int], drop: list[int]) -> dict:
    """``state`` (a ``state_dict()``, changed in place) as of ``fed`` (nodes, edges) fed,
    without the edges ``drop``."""
    state["fed_nodes"], state["fed_edges"] = fed
    state["estimate"] = state["estimate"][:fed[0]]  # (fed nodes, 4, 4) as last solved
    dropped = set(drop)
    keep = [j for j in range(len(state["edge_kinds"])) if j not in dropped]
    for key in _EDGE_KEYS:
        col = state[key]
        state[key] = [col[j] for j in keep] if isinstance(col, list) else col[keep]
    return state


def recover(graph, fed: tuple[int, int], err: RuntimeError
            ) -> tuple[object, Optional[GraphResult], Optional[PoseGraphError]]:
    """GTSAM failed while ``graph`` (a ``PoseGraph``; this module does not import it, so
    GTSAM stays out) fed its new inputs (``fed``: its nodes and edges in iSAM2 before), so
    its iSAM2 may hold part of the update. Rebuild it as ``load_state_dict`` does (one batch
    at the last good estimate) without the loops added since, then optimize what else is
    new: ``(rebuilt graph, its result with rejected_loops, None)``. No new loop, or the
    rebuilt graph fails too: ``(the graph at its last good optimize, the result it had,
    PoseGraphError)``, the new inputs pending. The caller takes the returned graph's place
    (and raises the error). Raises PoseGraphError itself when not even the last good state
    could be rebuilt."""
    why = " ".join(str(err).split())[:160]
    saved = graph.state_dict()
    kinds, nodes = saved["edge_kinds"], saved["edge_nodes"]
    drop = [j for j in range(fed[1], len(kinds)) if kinds[j] == LOOP]
    if drop:
        state = _trimmed(saved, fed, drop)
        state["rejected_loops"][INDETERMINATE] += len(drop)
        fresh = type(graph)(graph.config, graph.max_iterations)
        try:
            fresh.load_state_dict(state)
            result = fresh.optimize()
        except (RuntimeError, PoseGraphError) as again:
            why = f"{why}; without its {len(drop)} new loop(s): {' '.join(str(again).split())}"
        else:
            ids = graph.ids
            pairs = tuple((ids[int(nodes[j][0])], ids[int(nodes[j][1])]) for j in drop)
            return fresh, dataclasses.replace(result, rejected_loops=pairs), None
    back = type(graph)(graph.config, graph.max_iterations)
    try:
        back.load_state_dict(_trimmed(graph.state_dict(), fed, []))  # it solved before
    except RuntimeError as worse:
        raise PoseGraphError(f"pose graph: GTSAM could not solve the graph ({why}) nor "
                             f"rebuild its last good state ({worse}): load a snapshot")
    return back, graph.result, PoseGraphError(
        f"pose graph: GTSAM could not solve the graph ({why}); "
        + ("no loop was added since the last optimize" if not drop else
           f"dropping the {len(drop)} loop(s) added since the last optimize did not help")
        + "; the graph is back at its last optimize, the new inputs pending")

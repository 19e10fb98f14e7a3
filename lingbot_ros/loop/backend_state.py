"""The back end's own part of its snapshot (``backend.py``): its accepted loops as columns,
and the checks of a saved state that give a clear ValueError before anything changes.
Numpy only."""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from .backend_types import LoopEvent

__all__ = ["events_state", "checked_backend_state"]

_EVENT_INTS = ("stamp_ns", "keyframe_id", "matched_id", "matched_stamp_ns")
_EVENT_FLOATS = ("jump_m", "jump_deg", "residual_m", "residual_deg", "inlier_fraction",
                 "relative_scale")


def events_state(events: Sequence[LoopEvent]) -> dict:
    """LoopEvents as three arrays: ints (n, 4), floats (n, 6), corrections (n, 4, 4)."""
    return {"ints": np.array([[getattr(e, n) for n in _EVENT_INTS] for e in events],
                             dtype=np.int64).reshape(-1, len(_EVENT_INTS)),
            "floats": np.array([[getattr(e, n) for n in _EVENT_FLOATS] for e in events],
                               dtype=np.float64).reshape(-1, len(_EVENT_FLOATS)),
            "corrections": np.array([e.correction for e in events],
                                    dtype=np.float64).reshape(-1, 4, 4)}


def _array(state: dict, name: str, dtype, shape: tuple) -> np.ndarray:
    """``state[name]`` as a numpy array of ``dtype`` and ``shape`` (-1: any length)."""
    a = state.get(name) if isinstance(state, dict) else None
    ok = isinstance(a, np.ndarray) and a.dtype == dtype and a.ndim == len(shape) and all(
        want in (-1, got) for want, got in zip(shape, a.shape))
    if not ok:
        raise ValueError(f"back end state: {name} must be a {np.dtype(dtype)} array of shape "
                         f"{shape} (-1: any), got {getattr(a, 'dtype', type(a).__name__)} "
                         f"{getattr(a, 'shape', '')}")
    return a


def _counter(state: dict, name: str, keys: Iterable[str]) -> dict:
    d = state.get(name)
    keys = tuple(keys)
    if not isinstance(d, dict) or set(d) != set(keys) or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in d.values()):
        raise ValueError(f"back end state: {name} must map {keys} to integers >= 0, got {d!r}")
    return dict(d)


def checked_backend_state(state: dict, db_ids: np.ndarray, graph: dict,
                          count_keys: Iterable[str], reasons: Iterable[str]) -> dict:
    """The back end's own fields of ``state``, checked against the database's kept ids and
    the (already loaded, so well-formed) graph state: ``odom`` (id -> (4, 4) front-end
    pose), ``K`` (kept id -> (3, 3)), ``recent``, ``last`` (stamp, segment), ``counts``,
    ``rejected``, ``optimize_ms_last``, ``events`` (LoopEvents)."""
    ids = np.asarray(graph["ids"], dtype=np.int64).reshape(-1)
    front = np.asarray(graph["front_end"], dtype=np.float64).reshape(-1, 4, 4)
    known = set(ids.tolist())
    kept = db_ids.tolist()
    if not set(kept) <= known:
        raise ValueError("back end state: the database keeps keyframes the graph lacks")
    k_ids = _array(state, "K_ids", np.int64, (-1,))
    ks = _array(state, "K", np.float64, (len(k_ids), 3, 3))
    if sorted(k_ids.tolist()) != sorted(kept) or not np.isfinite(ks).all() \
            or (np.abs(np.linalg.det(ks)) == 0).any():
        raise ValueError("back end state: K_ids must be the kept keyframes' ids, each K "
                         "finite and invertible")
    recent = _array(state, "recent", np.int64, (-1,)).tolist()
    if not set(recent) <= known:
        raise ValueError("back end state: a recent keyframe is not in the graph")
    ms = state.get("optimize_ms_last")
    if ms is not None and (isinstance(ms, bool) or not isinstance(ms, (int, float))
                           or not math.isfinite(ms) or ms < 0):
        raise ValueError(f"back end state: optimize_ms_last must be None or a number >= 0, "
                         f"got {ms!r}")
    ev = state.get("events")
    ints = _array(ev, "ints", np.int64, (-1, len(_EVENT_INTS)))
    floats = _array(ev, "floats", np.float64, (len(ints), len(_EVENT_FLOATS)))
    corrections = _array(ev, "corrections", np.float64, (len(ints), 4, 4))
    if not (set(ints[:, 1].tolist()) | set(ints[:, 2].tolist())) <= known:
        raise ValueError("back end state: a loop event names a keyframe the graph lacks")
    events = [LoopEvent(**dict(zip(_EVENT_INTS, (int(x) for x in i))),
                        **dict(zip(_EVENT_FLOATS, (float(x) for x in f))),
                        correction=_frozen(c))
              for i, f, c in zip(ints, floats, corrections)]
    n = len(ids)
    return {"odom": {int(k): front[j].copy() for j, k in enumerate(ids)},
            "K": {int(k): m.copy() for k, m in zip(k_ids, ks)},
            "recent": recent,
            "last": ((int(np.asarray(graph["stamps_ns"]).reshape(-1)[-1]),
                      int(np.asarray(graph["segments"]).reshape(-1)[-1])) if n else None),
            "counts": _counter(state, "counts", count_keys),
            "rejected": _counter(state, "rejected", reasons),
            "optimize_ms_last": math.nan if ms is None else float(ms),
            "events": events}


def _frozen(a: np.ndarray) -> np.ndarray:
    out = a.copy()
    out.flags.writeable = False
    return out

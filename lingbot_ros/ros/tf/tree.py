"""TransformTree: a small TF buffer (frames as a tree, REP-105) without tf2_ros.

Pure numpy (no rclpy), so it is unit-testable anywhere; :mod:`.listener` fills it from
``/tf`` and ``/tf_static``.

Conventions (as in :mod:`lingbot_ros.geometry.poses`): ``T_a_b`` is the pose of frame ``b`` in
frame ``a`` -- it maps b-coordinates to a-coordinates. An edge ``parent -> child`` stores
``T_parent_child``. Stamps are integer nanoseconds.

* Each frame has at most one parent. A transform that names a new parent for an existing
  child replaces the edge (and its history); so does a static transform for an edge that was
  dynamic, or the reverse. Each replacement is counted in ``reparents`` and described by
  ``last_reparent``, so the caller can warn (two publishers disagreeing about the tree).
* Static edges are timeless. Dynamic edges keep a history sorted by stamp (messages may
  arrive out of order) of ``cache_s`` seconds before the edge's newest stamp; an older stamp
  is dropped (counted in ``dropped``). A repeated stamp replaces the sample.
* ``lookup(target, source, stamp_ns)`` walks both frames up to their common ancestor.
  ``stamp_ns=None`` means the latest time every dynamic edge of that chain has (tf2's
  ``Time(0)``; static-only chains need no time). Between two samples, translation is
  interpolated linearly and rotation by quaternion slerp (shortest arc); an exact stamp
  returns the stored transform. ``lookup(x, x, ...)`` is the identity for any (non-empty)
  name, known or not, at any stamp -- as tf2 does.
* ``extrapolation_tolerance_s`` (default 0) lets a stamp up to that far outside an edge's
  history use the nearest sample as is (held, not extrapolated).

Thread safety: one lock guards the tree. A lookup holds it only to walk the chain and pick
the samples it needs (stored samples are never mutated); the matrix arithmetic runs after it
is released.
"""
from __future__ import annotations

import bisect
import threading
from typing import NamedTuple, Optional, Union

import numpy as np

from ...geometry import format_stamp, interpolate_tq, rigid_inverse, rotation_to_quaternion

__all__ = ["TransformTree", "TransformError", "UnknownFrameError", "NotConnectedError",
           "ExtrapolationError", "Reparent", "normalize_frame"]

MAX_LISTED_FRAMES = 12  # frames named in an 'unknown frame' message
RIGID_ATOL = 1e-6  # tolerance of the rotation block's orthonormality check


class TransformError(LookupError):
    """A lookup that cannot be answered (the frames, their connection or the time)."""


class UnknownFrameError(TransformError):
    """A frame no transform has named (yet)."""


class NotConnectedError(TransformError):
    """Both frames are known but lie in different trees."""


class ExtrapolationError(TransformError):
    """The stamp lies outside an edge's history: ``direction`` 'past' or 'future', by
    ``by_ns`` nanoseconds, on the edge ``parent -> child``."""

    def __init__(self, message: str, direction: str, by_ns: int, parent: str,
                 child: str) -> None:
        super().__init__(message)
        self.direction, self.by_ns, self.parent, self.child = direction, by_ns, parent, child


class Reparent(NamedTuple):
    """An edge replaced by one with another parent (or a static <-> dynamic switch)."""

    child: str
    old_parent: str
    new_parent: str
    old_static: bool
    new_static: bool


class _Sample(NamedTuple):
    T: np.ndarray  # (4, 4) T_parent_child, read-only
    t: np.ndarray  # (3,) translation
    q: np.ndarray  # (4,) xyzw unit quaternion


class _Edge:
    __slots__ = ("parent", "static", "stamps", "samples")

    def __init__(self, parent: str, static: bool) -> None:
        self.parent = parent
        self.static = static
        self.stamps: list[int] = []  # sorted, unique
        self.samples: list[_Sample] = []


# An edge's contribution to one lookup, picked under the lock: a sample, or two and a ratio.
_Pick = Union[_Sample, tuple[_Sample, _Sample, float]]


def normalize_frame(name: str) -> str:
    """``name`` without a leading '/' (as tf2); ValueError if that leaves nothing."""
    if not isinstance(name, str):
        raise ValueError(f"a frame id must be a string, got {type(name).__name__}")
    stripped = name[1:] if name.startswith("/") else name
    if not stripped:
        raise ValueError(f"empty frame id {name!r}")
    return stripped


def _format_s(stamp_ns: int) -> str:
    return f"{format_stamp(stamp_ns)} s"


def _evaluate(pick: _Pick) -> np.ndarray:
    if isinstance(pick, _Sample):
        return pick.T
    a, b, ratio = pick
    return interpolate_tq(a.t, a.q, b.t, b.q, ratio)


class TransformTree:
    """A thread-safe tree of static and time-stamped transforms (see the module docstring)."""

    def __init__(self, cache_s: float = 10.0, extrapolation_tolerance_s: float = 0.0) -> None:
        if not cache_s > 0:
            raise ValueError(f"cache_s must be > 0, got {cache_s}")
        if not extrapolation_tolerance_s >= 0:
            raise ValueError(f"extrapolation_tolerance_s must be >= 0, "
                             f"got {extrapolation_tolerance_s}")
        self.cache_ns = int(round(cache_s * 1e9))
        self.tolerance_ns = int(round(extrapolation_tolerance_s * 1e9))
        self._lock = threading.Lock()
        self._edges: dict[str, _Edge] = {}  # child -> edge to its parent
        self._children: dict[str, set[str]] = {}  # parent -> its children
        self.reparents = 0  # edges replaced by another parent / static-ness
        self.last_reparent: Optional[Reparent] = None
        self.dropped = 0  # dynamic samples older than their edge's history

    # -- writing ---------------------------------------------------------------------------
    def set_transform(self, parent: str, child: str, T, stamp_ns: int, static: bool) -> None:
        """Add ``T_parent_child`` (4x4, rigid) at ``stamp_ns`` (static: timeless).

        ValueError for an empty frame id, ``parent == child``, a transform that is not a
        finite rigid 4x4, or an edge that would close a loop (``parent`` below ``child``).
        """
        parent, child = normalize_frame(parent), normalize_frame(child)
        if parent == child:
            raise ValueError(f"a transform from frame {child!r} to itself")
        m = np.array(T, dtype=np.float64)  # a copy: the caller may reuse its array
        if m.shape != (4, 4):
            raise ValueError(f"T must have shape (4, 4), got {m.shape}")
        if not np.all(np.isfinite(m)):
            raise ValueError(f"non-finite transform {parent!r} -> {child!r}")
        r = m[:3, :3]
        if (not np.allclose(m[3], [0.0, 0.0, 0.0, 1.0], atol=RIGID_ATOL)
                or not np.allclose(r.T @ r, np.eye(3), atol=RIGID_ATOL)
                or np.linalg.det(r) < 0):
            raise ValueError(f"transform {parent!r} -> {child!r} is not rigid")
        m[3] = [0.0, 0.0, 0.0, 1.0]
        m.flags.writeable = False
        sample = _Sample(m, m[:3, 3].copy(), rotation_to_quaternion(r))
        stamp = int(stamp_ns)
        static = bool(static)
        with self._lock:
            edge = self._edges.get(child)
            if edge is None or edge.parent != parent or edge.static != static:
                self._check_no_loop(parent, child)
                if edge is not None:
                    self._unlink(child, edge.parent)
                    self.reparents += 1
                    self.last_reparent = Reparent(child, edge.parent, parent, edge.static,
                                                  static)
                edge = _Edge(parent, static)
                self._edges[child] = edge
                self._children.setdefault(parent, set()).add(child)
            if static:
                edge.stamps, edge.samples = [stamp], [sample]
                return
            self._insert(edge, stamp, sample)

    def _check_no_loop(self, parent: str, child: str) -> None:
        frame = parent
        for _ in range(len(self._edges) + 1):
            if frame == child:
                raise ValueError(f"transform {parent!r} -> {child!r} would close a loop: "
                                 f"{parent!r} is below {child!r} in the tree")
            edge = self._edges.get(frame)
            if edge is None:
                return
            frame = edge.parent

    def _unlink(self, child: str, parent: str) -> None:
        kids = self._children.get(parent)
        if kids is not None:
            kids.discard(child)
            if not kids:
                del self._children[parent]

    def _insert(self, edge: _Edge, stamp: int, sample: _Sample) -> None:
        stamps = edge.stamps
        if stamps and stamp < stamps[-1] - self.cache_ns:
            self.dropped += 1
            return
        i = bisect.bisect_left(stamps, stamp)
        if i < len(stamps) and stamps[i] == stamp:
            edge.samples[i] = sample
            return
        stamps.insert(i, stamp)
        edge.samples.insert(i, sample)
        cut = bisect.bisect_left(stamps, stamps[-1] - self.cache_ns)
        if cut:
            del stamps[:cut]
            del edge.samples[:cut]

    def clear(self) -> None:
        """Forget every transform (e.g. after a jump back in time); counters are kept."""
        with self._lock:
            self._edges.clear()
            self._children.clear()

    # -- reading ---------------------------------------------------------------------------
    def frames(self) -> list[str]:
        """Every frame named by a transform, sorted."""
        with self._lock:
            return sorted(set(self._edges) | set(self._children))

    def can_transform(self, target: str, source: str, stamp_ns: Optional[int] = None) -> bool:
        """Whether :meth:`lookup` would succeed."""
        try:
            self.lookup(target, source, stamp_ns)
        except TransformError:
            return False
        return True

    def latest_common_time(self, target: str, source: str) -> Optional[int]:
        """The stamp a ``stamp_ns=None`` lookup uses: the oldest of the newest stamps of the
        chain's dynamic edges; None when the chain is static only (or ``target == source``).
        Raises TransformError for unknown or unconnected frames."""
        target, source = normalize_frame(target), normalize_frame(source)
        if target == source:
            return None
        with self._lock:
            return self._common_time(self._chain(target, source))

    def lookup(self, target: str, source: str, stamp_ns: Optional[int] = None) -> np.ndarray:
        """``T_target_source`` (4x4 float64, a new array): maps points in ``source``
        coordinates to ``target`` coordinates, at ``stamp_ns`` (None: the latest common time
        of the chain, see the module docstring). Raises TransformError."""
        target, source = normalize_frame(target), normalize_frame(source)
        if target == source:
            return np.eye(4)
        with self._lock:
            up_source, up_target = self._chain(target, source)
            stamp = (self._common_time((up_source, up_target)) if stamp_ns is None
                     else int(stamp_ns))
            picks_source = [self._pick(e, c, stamp, target, source) for c, e in up_source]
            picks_target = [self._pick(e, c, stamp, target, source) for c, e in up_target]
        T_ancestor_source = np.eye(4)
        for pick in reversed(picks_source):  # from the ancestor down to source
            T_ancestor_source = T_ancestor_source @ _evaluate(pick)
        T_ancestor_target = np.eye(4)
        for pick in reversed(picks_target):
            T_ancestor_target = T_ancestor_target @ _evaluate(pick)
        return rigid_inverse(T_ancestor_target) @ T_ancestor_source

    # -- under the lock --------------------------------------------------------------------
    def _path_up(self, frame: str) -> list[tuple[str, _Edge]]:
        """(child, edge) from ``frame`` up to its root."""
        path = []
        edge = self._edges.get(frame)
        while edge is not None and len(path) <= len(self._edges):  # loops are refused anyway
            path.append((frame, edge))
            frame = edge.parent
            edge = self._edges.get(frame)
        return path

    def _known(self, frame: str) -> bool:
        return frame in self._edges or frame in self._children

    def _chain(self, target: str, source: str):
        """The edges from source and from target up to their common ancestor."""
        for frame in (target, source):
            if not self._known(frame):
                raise UnknownFrameError(self._unknown_message(frame))
        up_source, up_target = self._path_up(source), self._path_up(target)
        source_frames = [source] + [e.parent for _, e in up_source]
        target_frames = [target] + [e.parent for _, e in up_target]
        in_target = {f: i for i, f in enumerate(target_frames)}
        for i, frame in enumerate(source_frames):
            if frame in in_target:
                return up_source[:i], up_target[:in_target[frame]]
        raise NotConnectedError(
            f"frames {target!r} and {source!r} are not connected: {target!r} is in the tree "
            f"rooted at {target_frames[-1]!r}, {source!r} in the tree rooted at "
            f"{source_frames[-1]!r}; a transform joining the two trees is missing "
            f"(is its publisher running?)")

    def _unknown_message(self, frame: str) -> str:
        known = sorted(set(self._edges) | set(self._children))
        if not known:
            return (f"frame {frame!r} does not exist: no transforms received yet "
                    f"(are /tf and /tf_static published?)")
        listed = ", ".join(repr(f) for f in known[:MAX_LISTED_FRAMES])
        more = (f", ... ({len(known) - MAX_LISTED_FRAMES} more)"
                if len(known) > MAX_LISTED_FRAMES else "")
        return f"frame {frame!r} does not exist; known frames: {listed}{more}"

    @staticmethod
    def _common_time(chain) -> Optional[int]:
        newest = [e.stamps[-1] for part in chain for _, e in part if not e.static]
        return min(newest) if newest else None

    def _pick(self, edge: _Edge, child: str, stamp: Optional[int], target: str,
              source: str) -> _Pick:
        if edge.static:
            return edge.samples[0]
        stamps = edge.stamps
        assert stamp is not None  # None only for static-only chains
        i = bisect.bisect_left(stamps, stamp)
        if i < len(stamps) and stamps[i] == stamp:
            return edge.samples[i]
        if 0 < i < len(stamps):
            t0, t1 = stamps[i - 1], stamps[i]
            return edge.samples[i - 1], edge.samples[i], (stamp - t0) / (t1 - t0)
        direction, by = ("past", stamps[0] - stamp) if i == 0 else ("future", stamp - stamps[-1])
        if by <= self.tolerance_ns:
            return edge.samples[0] if i == 0 else edge.samples[-1]
        span = (f"data from {_format_s(stamps[0])} to {_format_s(stamps[-1])} "
                f"({len(stamps)} samples)" if len(stamps) > 1
                else f"a single sample, at {_format_s(stamps[0])}")
        raise ExtrapolationError(
            f"cannot transform {source!r} into {target!r} at {_format_s(stamp)}: that would "
            f"extrapolate into the {direction} by {by / 1e6:.3f} ms; edge {edge.parent!r} -> "
            f"{child!r} has {span}", direction, by, edge.parent, child)

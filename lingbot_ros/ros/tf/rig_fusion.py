"""RigFusion: one robot pose from the cameras of a rig, all rigid on one base.

Each camera's stream gives ``T_s(t)``: its own estimate of the base in ITS map, in metres
(its ``FrameChain`` with its locked scale; its map is the base at its first frame, so the maps
of two streams differ by where each started). The fused odometry frame is one of them:

- **Alignment.** Each stream has an ``A_s`` (SE(3)) into the fused frame, and its estimate
  of the fused base is ``A_s T_s(t)``. The first stream that tracks is the reference,
  ``A = I`` (the primary, given ``stall_timeout_s`` of the rig's stamps to track first).
  Another stream is anchored when its latest tracking frame is covered by the fused history:
  ``A_s := F(t) T_s(t)^-1`` with ``F(t)`` the fused pose interpolated at its stamp.
- **Source.** The fused pose is the source's ``A_s T_s(t)``. A stream is eligible while its
  last frame tracked (scale locked, the step succeeded; the caller's ``tracking``), it was not
  reset since, and its last stamp is within ``stall_timeout_s`` of the newest stamp of the rig.
  The primary is the source while it is eligible. When the source is not, the first eligible
  of (primary, the other names in order) takes over (a failover; reasons ``lost``,
  ``reset``, ``stalled``); a secondary source keeps the pose until it fails itself, or until
  the primary has tracked ``failback_frames`` frames in a row (a failback). No eligible
  stream: no source, no fused pose; the first to track again resumes (``resume``, counted
  as a failover), re-anchored at the last fused pose (the motion meanwhile is lost).
- **No jump.** Every switch re-anchors the new source at a common stamp ``t*`` (the later of
  the two histories' ends that both reach, each interpolated there; translation linear,
  rotation slerp): ``A_s := F(t*) T_s(t*)^-1``. The first fused pose after the switch is
  then the last one moved by the new source's own motion since ``t*``. On a rigid rig the
  jump is therefore bounded by the motion over the stamp gap:
  ``jump_m <= v_max * ((t_new - t_last) + anchor_gap)``, with ``t_last`` / ``t_new`` the
  stamps of the last fused pose before and the first after, and ``anchor_gap`` the distance
  between the two stamps used for ``t*`` (0 when the histories overlap, the normal case
  in a rig stepped together; ``t_new - t_last`` is at most a frame period plus
  ``cameras.max_wait_ms``). Each ``Switch`` records ``anchor_gap_ns`` and, at the first
  fused pose after it, ``jump_m`` and ``jump_dt_ns``; ``stale_m`` is what the old anchor
  would have jumped by (the new source's last disagreement).
- **Disagreement.** For every anchored stream other than the source: the distance in
  metres (and the angle in radians) between ``A_s T_s(t)`` and ``F(t)`` at its latest
  tracking frame covered by the fused history; 0 for the source. Over
  ``max_disagreement_m`` it is flagged (a warning level, it changes nothing).
- **Reset.** ``reset(name)``: that stream's map restarts, so its history and anchor go; a
  reset source fails over at once. A reset primary is anchored again when it tracks, and
  takes back over after ``failback_frames``. The fused frame itself never restarts
  (``reset_all`` does: a fresh fusion).

Frames of one camera come in increasing stamps (integer ns); cameras may interleave in any
order. Pure numpy over ``geometry/``: no rclpy, no messages; results are frozen.
"""
from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from ...geometry import check_rigid, interpolate_tq, matrix_to_tq, rigid_inverse, rotation_angle
from ..params.rig import CAMERA_NAME_RE  # one rule for NodeConfig's names and the fusion's
REASONS = ("start", "lost", "reset", "stalled", "failback", "resume")
RIGID_TOL = 1e-6


def _frozen(m: np.ndarray) -> np.ndarray:
    out = np.array(m, dtype=np.float64)
    out.setflags(write=False)
    return out


@dataclass(frozen=True)
class RigFusionConfig:
    """The fusion's settings (the ``cameras.*`` parameters)."""

    names: tuple[str, ...]
    primary: str = ""  # "" = names[0]
    failback_frames: int = 30  # the primary's frames tracked in a row before it takes back over
    stall_timeout_s: float = 1.0  # a stream this far behind the rig's newest stamp is stalled
    max_disagreement_m: float = 0.5  # warning level of a stream's disagreement
    history: int = 64  # poses kept per stream and of the fused pose, for interpolation

    def __post_init__(self) -> None:
        names = tuple(self.names)
        object.__setattr__(self, "names", names)
        if not names:
            raise ValueError("cameras.names: a rig needs at least one camera")
        bad = [n for n in names if not isinstance(n, str) or not CAMERA_NAME_RE.fullmatch(n)]
        if bad:
            raise ValueError(f"cameras.names: {bad} are not names of [a-z0-9_]+")
        if len(set(names)) != len(names):
            raise ValueError(f"cameras.names: {list(names)} has a name twice")
        if self.primary and self.primary not in names:
            raise ValueError(f"cameras.primary: {self.primary!r} is not in cameras.names "
                             f"{list(names)}")
        if int(self.failback_frames) != self.failback_frames or self.failback_frames < 0:
            raise ValueError(f"cameras.failback_frames must be an integer >= 0, "
                             f"got {self.failback_frames}")
        if not self.stall_timeout_s > 0:
            raise ValueError(f"stall_timeout_s must be > 0, got {self.stall_timeout_s}")
        if not self.max_disagreement_m > 0:
            raise ValueError(f"cameras.max_disagreement_m must be > 0, "
                             f"got {self.max_disagreement_m}")
        if int(self.history) != self.history or self.history < 2:
            raise ValueError(f"history must be an integer >= 2, got {self.history}")

    @property
    def primary_name(self) -> str:
        return self.primary or self.names[0]


@dataclass(frozen=True)
class FusedPose:
    """The robot's base in the fused odometry frame, in metres, from ``source``'s frame."""

    stamp_ns: int
    source: str
    T_odom_base: np.ndarray  # (4, 4), read-only


@dataclass(frozen=True)
class Switch:
    """A change of source. ``jump_m`` / ``jump_dt_ns``: between the last fused pose before
    and the first after (None until that one came)."""

    stamp_ns: int  # the rig's newest stamp when it was decided
    from_camera: str  # "" = none
    to_camera: str  # "" = none (no stream tracks)
    reason: str  # one of REASONS
    anchor_gap_ns: int  # between the two stamps the re-anchoring used (0: exact)
    stale_m: Optional[float]  # the new source's disagreement before its re-anchoring
    jump_m: Optional[float] = None
    jump_dt_ns: Optional[int] = None


@dataclass(frozen=True)
class CameraFusion:
    """One stream as the fusion sees it."""

    name: str
    tracking: bool  # its last frame tracked and it was not reset since
    eligible: bool  # tracking and not stalled
    anchored: bool
    frames_tracking: int  # frames tracked in a row (since the last lost frame or reset)
    last_stamp_ns: Optional[int]
    disagreement_m: Optional[float]  # vs the fused pose at disagreement_stamp_ns
    disagreement_rad: Optional[float]
    disagreement_stamp_ns: Optional[int]
    over_limit: bool  # disagreement_m > max_disagreement_m


@dataclass(frozen=True)
class RigFacts:
    """The fusion's state for /diagnostics."""

    source: str  # "" = none
    primary: str
    failovers: int
    failbacks: int
    last_switch: Optional[Switch]
    cameras: tuple[CameraFusion, ...]


@dataclass(frozen=True)
class FusionStep:
    """What one camera frame did: the fused pose it gave (if it is the source), the switch
    it caused, and its disagreement with the fused pose (None: not known yet)."""

    camera: str
    stamp_ns: int
    fused: Optional[FusedPose]
    switch: Optional[Switch]
    disagreement_m: Optional[float]


class _History:
    """Stamped poses, bounded, interpolated (clamped to their range)."""

    def __init__(self, size: int) -> None:
        self.stamps: deque[int] = deque(maxlen=size)
        self.poses: deque[np.ndarray] = deque(maxlen=size)

    def append(self, stamp_ns: int, pose: np.ndarray) -> None:
        self.stamps.append(stamp_ns)
        self.poses.append(pose)

    def __bool__(self) -> bool:
        return bool(self.stamps)

    def clamp(self, stamp_ns: int) -> int:
        return min(max(stamp_ns, self.stamps[0]), self.stamps[-1])

    def covers(self, stamp_ns: int) -> bool:
        return bool(self.stamps) and self.stamps[0] <= stamp_ns <= self.stamps[-1]

    def at(self, stamp_ns: int) -> np.ndarray:
        """The pose at ``stamp_ns`` clamped into the range."""
        s = self.clamp(stamp_ns)
        stamps = list(self.stamps)
        j = bisect.bisect_left(stamps, s)
        if stamps[j] == s:
            return self.poses[j]
        i = j - 1
        t0, q0 = matrix_to_tq(self.poses[i])
        t1, q1 = matrix_to_tq(self.poses[j])
        return interpolate_tq(t0, q0, t1, q1, (s - stamps[i]) / (stamps[j] - stamps[i]))


class _Camera:
    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        self.clear()

    def clear(self) -> None:
        self.history = _History(self.size)
        self.anchor: Optional[np.ndarray] = None
        self.tracking = False
        self.streak = 0
        self.last_stamp: Optional[int] = None
        self.disagreement: Optional[tuple[float, float, int]] = None  # m, rad, stamp


class RigFusion:
    """The fused base pose of a rig; see the module's docstring. Not thread-safe: one owner
    (the rig's worker) calls everything, and hands the frozen ``facts()`` to the others."""

    def __init__(self, config: RigFusionConfig) -> None:
        self.config = config
        self._stall_ns = int(round(config.stall_timeout_s * 1e9))
        self.reset_all()

    def reset_all(self) -> None:
        """A fresh fusion: no reference, no source, counters at 0."""
        self._cams = {n: _Camera(n, self.config.history) for n in self.config.names}
        self._fused = _History(self.config.history)
        self._source = ""
        self._clock: Optional[int] = None
        self._first_tracking: Optional[int] = None
        self._failovers = 0
        self._failbacks = 0
        self._last_switch: Optional[Switch] = None
        self._pending_jump: Optional[tuple[int, np.ndarray]] = None  # last fused before it

    # -- inputs ------------------------------------------------------------------------------

    def update(self, camera: str, stamp_ns: int, pose: Optional[np.ndarray],
               tracking: bool) -> FusionStep:
        """One frame of ``camera``: ``pose`` its base in its own map in metres (4, 4); used
        only when ``tracking`` (then required)."""
        cam = self._camera(camera)
        stamp_ns = int(stamp_ns)
        if cam.last_stamp is not None and stamp_ns <= cam.last_stamp:
            raise ValueError(f"camera {camera!r}: stamp {stamp_ns} ns is not after its last "
                             f"frame's {cam.last_stamp} ns")
        if tracking and pose is None:
            raise ValueError(f"camera {camera!r}: a tracking frame needs a pose")
        m = _frozen(check_rigid(pose, f"{camera} pose", tol=RIGID_TOL)) if tracking else None
        cam.last_stamp = stamp_ns  # checked: now the state changes
        self._clock = stamp_ns if self._clock is None else max(self._clock, stamp_ns)
        if tracking:
            cam.history.append(stamp_ns, m)
            cam.tracking = True
            cam.streak += 1
            if self._first_tracking is None:
                self._first_tracking = stamp_ns
        else:
            cam.tracking = False
            cam.streak = 0
        switch = self._select()
        fused = None
        if camera == self._source and tracking and cam.anchor is not None and (
                not self._fused or stamp_ns > self._fused.stamps[-1]):
            fused = self._emit(camera, stamp_ns, cam.anchor @ cam.history.poses[-1])
        self._refresh()
        d = cam.disagreement
        known = d is not None and d[2] == stamp_ns
        return FusionStep(camera, stamp_ns, fused, switch, d[0] if known else None)

    def reset(self, camera: str) -> Optional[Switch]:
        """``camera``'s stream restarted its map: its history and anchor go; a reset source
        fails over at once (the switch, or None)."""
        self._camera(camera).clear()
        return self._select(reset=True) if camera == self._source else None

    # -- reads -------------------------------------------------------------------------------

    @property
    def source(self) -> str:
        return self._source

    def alignment(self, camera: str) -> Optional[np.ndarray]:
        """``camera``'s ``A_s`` (read-only (4, 4)): its map into the fused odometry, for its
        own outputs (its pose in the fused frame); None until it is anchored."""
        anchor = self._camera(camera).anchor
        return None if anchor is None else _frozen(anchor)

    def fused_pose(self) -> Optional[FusedPose]:
        """The last fused pose (None before the first)."""
        if not self._fused:
            return None
        return FusedPose(self._fused.stamps[-1], self._source, self._fused.poses[-1])

    def facts(self) -> RigFacts:
        cams = []
        for c in self._cams.values():
            d = c.disagreement
            cams.append(CameraFusion(
                c.name, c.tracking, self._eligible(c), c.anchor is not None, c.streak,
                c.last_stamp, d[0] if d else None, d[1] if d else None, d[2] if d else None,
                bool(d and d[0] > self.config.max_disagreement_m)))
        return RigFacts(self._source, self.config.primary_name, self._failovers,
                        self._failbacks, self._last_switch, tuple(cams))

    # -- the rules ---------------------------------------------------------------------------

    def _camera(self, name: str) -> _Camera:
        try:
            return self._cams[name]
        except KeyError:
            raise ValueError(f"unknown camera {name!r}; cameras.names: "
                             f"{list(self.config.names)}") from None

    def _eligible(self, c: _Camera) -> bool:
        return (c.tracking and bool(c.history) and self._clock is not None
                and self._clock - c.history.stamps[-1] <= self._stall_ns)

    def _order(self) -> list[str]:
        p = self.config.primary_name
        return [p] + [n for n in self.config.names if n != p]

    def _select(self, reset: bool = False) -> Optional[Switch]:
        """Keep, fail over, fail back, start or resume; the switch made, or None."""
        primary = self._cams[self.config.primary_name]
        if self._source:
            src = self._cams[self._source]
            if self._eligible(src):
                if (src is not primary and self._eligible(primary)
                        and primary.streak >= self.config.failback_frames):
                    return self._switch(primary.name, "failback")
                return None
            why = "reset" if reset else "lost" if not src.tracking else "stalled"
            return self._switch(self._first_eligible(), why)
        if not self._fused and not self._eligible(primary) and (
                self._first_tracking is None
                or self._clock - self._first_tracking <= self._stall_ns):
            return None  # no reference yet: the primary's grace
        first = self._first_eligible()
        if not first:
            return None
        return self._switch(first, "resume" if self._fused else "start")

    def _first_eligible(self) -> str:
        return next((n for n in self._order() if self._eligible(self._cams[n])), "")

    def _switch(self, to: str, reason: str) -> Switch:
        old, gap, stale = self._source, 0, None
        if to and self._cams[to].disagreement:
            stale = self._cams[to].disagreement[0]
        if to and not self._fused:  # the reference: the fused frame is its map
            self._cams[to].anchor = _frozen(np.eye(4))
        elif to:
            gap = self._anchor(self._cams[to], forced=True)
            self._pending_jump = (self._fused.stamps[-1], self._fused.poses[-1])
        if reason == "failback":
            self._failbacks += 1
        elif to and reason != "start":
            self._failovers += 1  # another stream took over (or resumed after none tracked)
        self._source = to
        self._last_switch = Switch(self._clock, old, to, reason, gap, stale)
        return self._last_switch

    def _anchor(self, c: _Camera, forced: bool) -> int:
        """Anchors ``c`` into the fused frame; returns the gap (ns) between the stamps used.
        Unforced: only at a stamp of ``c`` that the fused history covers (else no anchor)."""
        f, h = self._fused, c.history
        if not forced:
            covered = [s for s in h.stamps if f.covers(s)]
            if not covered:
                return 0
            s = covered[-1]
            c.anchor = _frozen(f.at(s) @ rigid_inverse(h.at(s)))
            return 0
        t = min(f.stamps[-1], h.stamps[-1])
        tf, th = f.clamp(t), h.clamp(t)
        c.anchor = _frozen(f.at(tf) @ rigid_inverse(h.at(th)))
        c.disagreement = None
        return abs(tf - th)

    def _emit(self, camera: str, stamp_ns: int, pose: np.ndarray) -> FusedPose:
        pose = _frozen(pose)
        if self._pending_jump is not None and self._last_switch is not None:
            s0, p0 = self._pending_jump
            jump = float(np.linalg.norm(pose[:3, 3] - p0[:3, 3]))
            self._last_switch = replace(self._last_switch, jump_m=jump,
                                        jump_dt_ns=stamp_ns - s0)
            self._pending_jump = None
        self._fused.append(stamp_ns, pose)
        self._cams[camera].disagreement = (0.0, 0.0, stamp_ns)
        return FusedPose(stamp_ns, camera, pose)

    def _refresh(self) -> None:
        """Anchors and disagreements of the other streams, at their latest tracking frame
        the fused history covers."""
        if not self._fused:
            return
        for c in self._cams.values():
            if c.name == self._source or not c.history:
                continue
            if c.anchor is None:
                self._anchor(c, forced=False)
                if c.anchor is None:
                    continue
            covered = [s for s in c.history.stamps if self._fused.covers(s)]
            if not covered or (c.disagreement and c.disagreement[2] >= covered[-1]):
                continue
            s = covered[-1]
            est = c.anchor @ c.history.at(s)
            ref = self._fused.at(s)
            c.disagreement = (float(np.linalg.norm(est[:3, 3] - ref[:3, 3])),
                              float(rotation_angle(ref[:3, :3].T @ est[:3, :3])), s)

"""The ``odometry`` source: the base's displacements from odometry vs the model's.

Frames ``(stamp, c2w)`` (c2w in model units) wait in a sliding window of ``odom_window``
frames; odometry poses ``T_odom_base`` (metres) wait in a :class:`PoseBuffer` and are
interpolated to the image stamps (linear translation, geodesic rotation; a stamp must lie
between two odometry poses at most ``odom_max_dt_s`` away, so frames newer than the odometry
simply wait for a later fit).

The fit walks back from the newest frame and pairs frames whose *odometry* base moved at
least ``odom_min_step_m`` apart (stationary stretches and turns on the spot add no pair),
until the pairs' path reaches ``min_baseline_m``. For a pair (i, j), in the base frame at i:

    odometry:  d = R_odom_i^T (p_j - p_i)                                       [metres]
    model:     k a + b,  a = R_bo R_i^T (c_j - c_i),  b = R_bo R_i^T (R_j - R_i) t_ob

with ``c2w = [R | c]``, ``T_bo`` the camera's optical frame in the base (metres) and
``t_ob`` the base origin in the optical frame: ``b`` is the lever arm's share (metres
already), ``a`` the camera centres' (model units). ``k = sum a.(d - b) / sum a.a`` (least
squares); ``planar`` drops the base z components (wheel odometry knows no z).

Snapshots: ``OdometrySource.state_dict()`` gives the window (each frame's stamp, c2w and the
odometry pose interpolated at its stamp once covered), the buffered odometry poses and the
``T_base_optical`` they were made with, as plain JSON values; ``load_state_dict`` continues
it, and a restored source gives bit-identical samples on the same next frames and odometry.
"""
from __future__ import annotations

import bisect
import math
from collections import deque
from typing import Optional, Union

import numpy as np

from .config import ScaleConfig
from .json_floats import float_from_json, float_to_json
from .samples import Rejection, SampleResult, ScaleSample, ns_of
from ..geometry import is_rigid, rotation_angle
from .se3 import POSE_TOL, interpolate_pose, rigid_inverse

__all__ = ["PoseBuffer", "OdometrySource", "fit_odometry_scale", "odometry_rejection"]

TURN_RAD = 0.1  # a window whose odometry turned more than this (and moved too little) turned
STATE_VERSION = 2  # of OdometrySource.state_dict(); 1: stamps in float seconds (read too)


def _is_stamp(stamp_ns) -> bool:
    return isinstance(stamp_ns, (int, np.integer)) and not isinstance(stamp_ns, bool)


def odometry_rejection(stamp_ns, pose) -> Optional[Rejection]:
    """The Rejection (``non_finite``) of an odometry pose that cannot be used -- a stamp that
    is not an integer (ns), a pose that is not a finite rigid 4x4 -- else None. Checked where
    a pose is taken, also before a stream's first frame (when the source is not built yet)."""
    if not _is_stamp(stamp_ns) or not is_rigid(pose, tol=POSE_TOL, last_row_tol=POSE_TOL):
        return Rejection(int(stamp_ns) if _is_stamp(stamp_ns) else None, "non_finite",
                         "odometry pose is not a finite rigid transform")
    return None


class PoseBuffer:
    """Stamped rigid poses (e.g. odom -> base_link), interpolated at any covered stamp."""

    def __init__(self, max_dt_s: float, capacity: int = 4096) -> None:
        self._max_dt_s = float(max_dt_s)
        self._max_dt_ns = ns_of(max_dt_s)
        self._capacity = int(capacity)
        self._stamps: list[int] = []
        self._poses: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self._stamps)

    def clear(self) -> None:
        self._stamps.clear()
        self._poses.clear()

    def poses(self) -> list[tuple[int, np.ndarray]]:
        """The buffered ``(stamp, pose)`` in stamp order (the poses are the buffer's own:
        read them, do not change them)."""
        return list(zip(self._stamps, self._poses))

    def push(self, stamp_ns: int, pose) -> Optional[Rejection]:
        """Add a pose (kept sorted by stamp; a repeated stamp replaces). A stamp that is not
        an integer or a pose that is not a finite rigid 4x4 is refused with a Rejection."""
        rejected = odometry_rejection(stamp_ns, pose)
        if rejected is not None:
            return rejected
        stamp_ns = int(stamp_ns)
        pose = np.array(pose, dtype=np.float64)
        i = bisect.bisect_left(self._stamps, stamp_ns)
        if i < len(self._stamps) and self._stamps[i] == stamp_ns:
            self._poses[i] = pose
            return None
        self._stamps.insert(i, stamp_ns)
        self._poses.insert(i, pose)
        if len(self._stamps) > self._capacity:
            del self._stamps[0], self._poses[0]
        return None

    def at(self, stamp_ns: int) -> Union[np.ndarray, Rejection]:
        """The pose at ``stamp_ns``: exact, or interpolated between the poses around it when
        both are within ``max_dt_s``; else a Rejection (no_odometry / out_of_sync)."""
        stamp_ns = int(stamp_ns)
        if not self._stamps:
            return Rejection(stamp_ns, "no_odometry", "no odometry received")
        i = bisect.bisect_left(self._stamps, stamp_ns)
        if i < len(self._stamps) and self._stamps[i] == stamp_ns:
            return self._poses[i]
        if i == 0 or i == len(self._stamps):
            return Rejection(stamp_ns, "out_of_sync", "the image stamp is outside the "
                             f"odometry's [{_s(self._stamps[0])}, {_s(self._stamps[-1])}] s")
        t0, t1 = self._stamps[i - 1], self._stamps[i]
        if stamp_ns - t0 > self._max_dt_ns or t1 - stamp_ns > self._max_dt_ns:
            return Rejection(stamp_ns, "out_of_sync", f"odometry gap [{_s(t0)}, {_s(t1)}] s "
                             f"around the image (max {self._max_dt_s} s each side)")
        return interpolate_pose(self._poses[i - 1], self._poses[i],
                                (stamp_ns - t0) / (t1 - t0))  # exact ints: one rounding


class _BaselineWalk:
    """The fit's pairing, one frame at a time from the newest back: each frame is paired with
    the last paired one (the newest, first) when the odometry base moved at least
    ``odom_min_step_m`` between them, until the pairs' path reaches ``min_baseline_m``.
    Frame numbers count back: 0 is the newest."""

    def __init__(self, config: ScaleConfig) -> None:
        self._min_step = config.odom_min_step_m
        self._min_baseline = config.min_baseline_m
        self.pairs: list[tuple[int, int]] = []  # (older, newer) frame numbers, newest first
        self.path = 0.0  # metres of base motion over the pairs
        self._anchor: Optional[tuple[int, list]] = None  # the last paired frame, its position
        self._count = 0

    @property
    def long_enough(self) -> bool:
        return self.path >= self._min_baseline

    def add(self, position: list) -> bool:
        """The next older frame's base position (3 floats, metres); True once the pairs'
        path is long enough (no older frame changes the fit)."""
        number, self._count = self._count, self._count + 1
        if self._anchor is None:
            self._anchor = (number, position)
            return False
        step = math.dist(self._anchor[1], position)
        if step >= self._min_step:
            self.pairs.append((number, self._anchor[0]))
            self.path += step
            self._anchor = (number, position)
        return self.long_enough


def fit_odometry_scale(c2w: np.ndarray, odom: np.ndarray, T_base_optical: np.ndarray,
                       config: ScaleConfig) -> Union[tuple[float, int], str]:
    """Frames in time order: ``c2w`` (N, 4, 4) model poses, ``odom`` (N, 4, 4) the base in
    the odometry frame at the same stamps (metres). Returns (metres per unit, pairs used) from
    the newest frames back to ``min_baseline_m`` of path, or a rejection reason."""
    c2w = np.asarray(c2w, dtype=np.float64)
    odom = np.asarray(odom, dtype=np.float64)
    if not (np.isfinite(c2w).all() and np.isfinite(odom).all()):
        return "non_finite"
    walk = _BaselineWalk(config)
    for position in odom[::-1, :3, 3].tolist():
        if walk.add(position):
            break
    if not walk.long_enough:
        if walk.path > 0:
            return "short_baseline"
        r = odom[:-1, :3, :3].transpose(0, 2, 1) @ odom[1:, :3, :3]
        turned = rotation_angle(r).sum()
        return "pure_rotation" if turned > TURN_RAD else "stationary"
    last = len(c2w) - 1  # frame numbers back -> indices in time order
    i_idx = np.array([last - older for older, _ in walk.pairs])
    j_idx = np.array([last - newer for _, newer in walk.pairs])
    bo = np.asarray(T_base_optical, dtype=np.float64)
    t_ob = rigid_inverse(bo)[:3, 3]
    ri_t = c2w[i_idx, :3, :3].transpose(0, 2, 1)  # (P, 3, 3) R_i^T
    to_base = bo[:3, :3] @ ri_t  # R_bo R_i^T
    a = np.einsum("pxy,py->px", to_base, c2w[j_idx, :3, 3] - c2w[i_idx, :3, 3])
    b = np.einsum("pxy,py->px", to_base, (c2w[j_idx, :3, :3] - c2w[i_idx, :3, :3]) @ t_ob)
    d = np.einsum("pyx,py->px", odom[i_idx, :3, :3], odom[j_idx, :3, 3] - odom[i_idx, :3, 3])
    if config.planar:
        a[:, 2] = b[:, 2] = d[:, 2] = 0.0
    aa = float((a * a).sum())
    if not aa > 1e-18:
        return "degenerate"
    k = float((a * (d - b)).sum()) / aa
    if not (math.isfinite(k) and k > 0):
        return "degenerate"
    return k, len(walk.pairs)


class OdometrySource:
    """The odometry source of one stream: feed odometry poses and each frame's c2w."""

    def __init__(self, config: ScaleConfig, T_base_optical: np.ndarray,
                 odom_capacity: int = 4096) -> None:
        if not is_rigid(T_base_optical, tol=POSE_TOL, last_row_tol=POSE_TOL):
            raise ValueError("T_base_optical must be a finite rigid 4x4 transform (metres)")
        self._config = config
        self._bo = np.array(T_base_optical, dtype=np.float64)
        self._odom = PoseBuffer(config.odom_max_dt_s, odom_capacity)
        self._frames: deque[list] = deque(maxlen=config.odom_window)

    def reset(self) -> None:
        """A new stream: forget frames and odometry."""
        self._odom.clear()
        self._frames.clear()

    def push_odometry(self, stamp_ns: int, T_odom_base) -> Optional[Rejection]:
        """One odometry pose (metres); a Rejection (to count) if it is not usable."""
        return self._odom.push(stamp_ns, T_odom_base)

    def sample(self, stamp_ns: int, c2w) -> SampleResult:
        """Add the frame ``(stamp_ns, c2w)`` and fit over the window's frames the odometry
        covers so far. The sample's stamp is the newest frame used."""
        if not _is_stamp(stamp_ns):  # a window's stamps are integers, increasing
            return Rejection(None, "non_finite", f"the frame's stamp is {stamp_ns!r}, not "
                             "integer ns")
        stamp_ns = int(stamp_ns)
        c2w = np.asarray(c2w, dtype=np.float64)
        if c2w.shape != (4, 4):
            return Rejection(stamp_ns, "wrong_size", f"c2w must be 4x4, got {c2w.shape}")
        if not np.isfinite(c2w).all():
            return Rejection(stamp_ns, "non_finite", "c2w has NaN/inf")
        if self._frames and not stamp_ns > self._frames[-1][0]:
            self._frames.clear()  # stamps went back: a new stretch
        self._frames.append([stamp_ns, c2w, None])  # [stamp, c2w, odometry pose]
        stamps, poses, odoms = [], [], []
        last: Optional[Rejection] = None
        walk = _BaselineWalk(self._config)  # where the fit stops: no older frame is needed
        for frame in reversed(self._frames):
            if frame[2] is None:  # interpolated once: the first walk back that finds it covered
                o = self._odom.at(frame[0])
                if isinstance(o, Rejection):
                    if odoms:
                        break  # a gap: fit the covered stretch after it
                    last = o  # not covered yet (newer than the odometry): wait
                    continue
                frame[2] = o
            stamps.append(frame[0])
            poses.append(frame[1])
            odoms.append(frame[2])
            if walk.add(frame[2][:3, 3].tolist()):
                break
        if len(odoms) < 2:
            return last if last is not None else Rejection(stamp_ns, "stationary",
                                                           "one frame in the window")
        fit = fit_odometry_scale(np.stack(poses[::-1]), np.stack(odoms[::-1]), self._bo,
                                 self._config)
        if isinstance(fit, str):
            return Rejection(stamp_ns, fit, f"{len(odoms)} frames in the window")
        k, n_pairs = fit
        return ScaleSample(stamps[0], k, "odometry", support=n_pairs)

    # --- snapshots ----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The window as plain JSON values: ``frames`` ([stamp, c2w, odometry pose at the stamp
        or None while the odometry does not cover it], oldest first), the buffered
        ``odometry`` ([stamp, pose], in stamp order), the ``T_base_optical`` they were made with
        (``load_state_dict`` checks it); poses as 16 floats, row-major. Finite floats
        round-trip exactly through JSON (non-finite ones as "nan"/"inf"/"-inf")."""
        return {"version": STATE_VERSION, "T_base_optical": _floats(self._bo),
                "frames": [[t, _floats(c2w), None if o is None else _floats(o)]
                           for t, c2w, o in self._frames],
                "odometry": [[t, _floats(p)] for t, p in self._odom.poses()]}

    def load_state_dict(self, state) -> None:
        """Continue the window of ``state`` (``state_dict``'s output): its frames replace this
        source's (the newest ``odom_window`` of them), its odometry poses join the ones this
        source holds (a held pose wins at the same stamp; a fresh source holds exactly the
        saved ones). ValueError, and this source unchanged, when ``state`` is malformed or was
        made with another ``T_base_optical`` (the model's base positions depend on it)."""
        frames, odometry = self._parse_state(state)
        held = self._odom.poses()
        self._odom.clear()
        for stamp_ns, pose in odometry + held:
            self._odom.push(stamp_ns, pose)
        self._frames.clear()
        self._frames.extend(frames)

    def _parse_state(self, state) -> tuple[list, list]:
        if not isinstance(state, dict):
            raise ValueError(f"odometry window: expected a dict, got {type(state).__name__}")
        version = state.get("version")
        if version not in (1, STATE_VERSION):
            raise ValueError(f"odometry window: version {version!r} is unknown; this build "
                             f"reads versions {STATE_VERSION} and 1")
        stamp = _stamp_v1 if version == 1 else _stamp_v2
        try:
            bo = _matrix(state["T_base_optical"])
            frames = [[stamp(t), _matrix(c2w), None if o is None else _matrix(o)]
                      for t, c2w, o in state["frames"]]
            odometry = [(stamp(t), _matrix(p)) for t, p in state["odometry"]]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"odometry window is malformed ({type(exc).__name__}: {exc})") \
                from None
        if not np.allclose(bo, self._bo, atol=1e-9):  # as ScaleStream tells mounts apart
            raise ValueError("the odometry window was made with another T_base_optical (the "
                             "camera's mount on the base changed)")
        stamps = [f[0] for f in frames]
        if not (all(a < b for a, b in zip(stamps, stamps[1:]))
                and all(np.isfinite(f[1]).all() and (f[2] is None or is_rigid(
                    f[2], tol=POSE_TOL, last_row_tol=POSE_TOL)) for f in frames)):
            raise ValueError("odometry window: frames need increasing stamps, finite poses "
                             "and rigid odometry poses")
        stamps = [t for t, _ in odometry]
        if not (all(a < b for a, b in zip(stamps, stamps[1:]))
                and all(is_rigid(p, tol=POSE_TOL, last_row_tol=POSE_TOL) for _, p in odometry)):
            raise ValueError("odometry window: odometry poses need increasing stamps and "
                             "rigid poses")
        return frames, odometry


def _s(stamp_ns: int) -> str:
    """A stamp for a message, in seconds."""
    return f"{stamp_ns / 1e9:.3f}"


def _stamp_v2(value) -> int:
    if not _is_stamp(value):
        raise ValueError(f"stamp {value!r} is not an integer (ns)")
    return int(value)


def _stamp_v1(value) -> int:
    """A version-1 window's stamp (float seconds) in ns."""
    seconds = float_from_json(value)
    if not math.isfinite(seconds):
        raise ValueError(f"stamp {value!r} is not finite")
    return round(seconds * 1e9)


def _floats(matrix: np.ndarray) -> list:
    """A 4x4 as 16 JSON floats, row-major."""
    return [float_to_json(v) for v in np.asarray(matrix, dtype=np.float64).reshape(-1)]


def _matrix(values) -> np.ndarray:
    """16 JSON floats (``_floats``' output) back to a 4x4; ValueError otherwise."""
    if not isinstance(values, list) or len(values) != 16:
        raise ValueError("a pose must be a list of 16 numbers")
    return np.array([float_from_json(v) for v in values], dtype=np.float64).reshape(4, 4)

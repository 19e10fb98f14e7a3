"""StreamScale: one stream's metric scale in the node (the ``scale.*`` parameters).

Owned by the worker side: the ``FrameWorker`` feeds it each finished frame (``on_frame``)
before the frame's outputs go out, resets it with the stream (``~/reset``, a restart of the
stream; a rollover keeps it) and hands the resulting :class:`~lingbot_ros.scale.ScaleEstimate`
snapshot to ``Outputs``, which converts at the boundary. The executor thread only pushes
sensor data in (``push_depth``, ``push_odometry``) and reads snapshots (``estimate``,
``stale_reason``, ``info``): the buffers it shares with the worker are guarded by one lock;
the estimator itself is touched by the worker only (and by ``reset``, which the worker's own
reset calls under its frame lock).

Sources: ``none``, ``fixed``, ``depth`` (the relative topic ``aligned_depth``),
``odometry`` (nav_msgs/Odometry on ``odom_in``, pushed by the executor; or, with
``scale.odometry_input: tf``, another node's odom -> base looked up in the node's TF tree at
each frame's stamp), ``camera_height`` (the floor in the frame's predicted depth, unprojected
with the model's intrinsics on the depth source's pixel grid; the camera's height is
``scale.camera_height_m``, else TF ``frames.ground`` -> the camera at the frame's stamp). The
TF lookups are handed in at activation (``attach_tf``: ``RobotFrames``' methods) and run on
the worker's thread; a missing transform is a counted rejection (``no_ground_frame``; for
odometry ``no_odometry`` / ``out_of_sync``) whose detail the stale reason carries (see
docs/node.md, "Scale").
"""
from __future__ import annotations

import copy
import logging
import math
import threading
import time
from collections import deque
from typing import Callable, Optional

import numpy as np

from ...scale import (DEPTH_ENCODINGS, DepthSource, OdometrySource, Rejection, ScaleConfig,
                     ScaleEstimate, ScaleEstimator, camera_height_depth_sample,
                     odometry_rejection)
from ..tf.tree import ExtrapolationError, TransformError

__all__ = ["StreamScale", "depth_msg_to_array", "odometry_msg_pose", "SOURCES_FOR_A_ROBOT"]

# What the activation warning names for a robot whose outputs stay in model units.
SOURCES_FOR_A_ROBOT = ("depth (an RGB-D camera's aligned depth on 'aligned_depth')",
                       "odometry (wheel/VIO odometry on 'odom_in', or odom -> base on TF)",
                       "camera_height (a level floor in view, the camera's height)",
                       "fixed (a calibrated scale.factor)")
TF_PENDING_MAX = 64  # frames whose odometry TF did not have yet, looked up again later
ODOMETRY_KEY = "odometry"  # state_dict()[ODOMETRY_KEY]: OdometrySource.state_dict()
_log = logging.getLogger(__name__)


def depth_msg_to_array(msg) -> np.ndarray:
    """A sensor_msgs/Image depth message -> its (H, W) array, without copying or checking
    the values (the depth source masks and counts bad readings). An unknown encoding gives
    the raw bytes as uint8 (the source rejects it: ``wrong_encoding``); a buffer that does not
    hold height x width pixels gives an empty array (``wrong_size``)."""
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    known = DEPTH_ENCODINGS.get(str(msg.encoding).lower())
    dtype = np.dtype(np.uint8) if known is None else known[0]
    dtype = dtype.newbyteorder(">" if msg.is_bigendian else "<")
    data = np.frombuffer(msg.data, dtype=np.uint8)
    row = w * dtype.itemsize
    if h <= 0 or w <= 0 or step < row or data.size < step * (h - 1) + row:
        return np.zeros((0, 0), dtype=dtype.newbyteorder("="))
    rows = np.lib.stride_tricks.as_strided(data, shape=(h, row), strides=(step, 1))
    return np.ascontiguousarray(rows).view(dtype).reshape(h, w).astype(
        dtype.newbyteorder("="), copy=False)


class StreamScale:
    def __init__(self, config: ScaleConfig, log=None) -> None:
        """``log``: where a warning goes (the node's logger; default Python's ``logging``
        for this module), called ``log.warning(text)`` from each site."""
        self.config = config
        self._log = log if log is not None else _log
        self._estimator = ScaleEstimator(config)
        self._lock = threading.Lock()  # the sources' buffers: executor pushes, worker samples
        self._depth = DepthSource(config) if config.source == "depth" else None
        self._odometry: Optional[OdometrySource] = None  # built at the first frame's chain
        self._odometry_T_bo: Optional[np.ndarray] = None
        self._odometry_pending: list = []  # odometry before the first frame (T_bo unknown)
        self._odometry_saved: Optional[dict] = None  # a snapshot's window, until the source is
        #                                              built (T_bo known) at the next frame
        self._estimate = self._estimator.estimate
        self._last_frame: Optional[tuple[float, float]] = None  # (stamp s, time.monotonic())
        self.depth_received = 0  # depth images pushed (executor thread)
        self._frame_ns: dict[float, int] = {}  # a recent frame's stamp in s -> in ns
        self.odometry_received = 0  # odometry poses pushed (executor thread; TF: the worker)
        # TF lookups (``attach_tf``), called on the worker's thread: stamp_ns -> 4x4, raising
        # TransformError; None = not from TF
        self._ground_lookup: Optional[Callable[[int], np.ndarray]] = None
        self._odometry_lookup: Optional[Callable[[int], np.ndarray]] = None
        self._tf_pending: deque[int] = deque(maxlen=TF_PENDING_MAX)  # stamps to look up again
        self._tf_error = ""  # why the last TF lookup failed ("" once one succeeded)
        self._detail = ""  # the detail of the last rejection (the stale reason shows it)

    @property
    def estimate(self) -> ScaleEstimate:
        """The latest snapshot (immutable): what ~/scale, diagnostics and the outputs read."""
        return self._estimate

    @property
    def needs_depth(self) -> bool:
        """The source reads every frame's predicted depth (the session must return it):
        ``depth`` and ``camera_height``."""
        return self.config.reads_predicted_depth

    def attach_tf(self, ground: Optional[Callable[[int], np.ndarray]] = None,
                  odometry: Optional[Callable[[int], np.ndarray]] = None) -> None:
        """The TF lookups the source reads (at activation; ``attach_tf()`` detaches them):
        ``ground(stamp_ns)`` -> T_ground_optical (camera_height without
        ``camera_height_m``), ``odometry(stamp_ns)`` -> T_odom_base (odometry from TF). Each
        raises TransformError when TF cannot answer. Called while no frame is in flight."""
        with self._lock:
            self._ground_lookup, self._odometry_lookup = ground, odometry
            self._tf_pending.clear()

    # -- the executor's side -------------------------------------------------------------------
    def push_depth(self, msg) -> None:
        """An ``aligned_depth`` Image; kept for the colour frame with its stamp."""
        stamp_s = _stamp_s(msg.header.stamp)
        image = depth_msg_to_array(msg)
        with self._lock:
            self.depth_received += 1
            if self._depth is not None:
                self._depth.push_depth(stamp_s, image, str(msg.encoding))

    def push_odometry(self, stamp_s: float, T_odom_base: np.ndarray) -> None:
        """One odometry pose of the base (metres) at ``stamp_s``; one that cannot be used
        (NaN, not rigid) is a counted ``non_finite`` rejection, also before the first frame
        (when the source waits for the camera's mount and keeps the poses)."""
        with self._lock:
            self.odometry_received += 1
            if self._odometry is not None:
                rejected = self._odometry.push_odometry(stamp_s, T_odom_base)
            elif self.config.source == "odometry":
                rejected = odometry_rejection(stamp_s, T_odom_base)
                if rejected is None:
                    self._odometry_pending.append((stamp_s, np.array(T_odom_base, float)))
                    del self._odometry_pending[:-4096]
            else:
                rejected = None
            if rejected is not None:  # counted with the frames' reasons
                self._estimate = self._estimator.add(rejected)
                self._detail = rejected.detail

    def stamp_ns(self, stamp_s: float) -> Optional[int]:
        """The exact ROS stamp (ns) of a recent frame whose stamp in seconds is ``stamp_s``
        (an estimate's ``stamp_s``), else None: float seconds lose ~100 ns at 1.7e9 s."""
        with self._lock:
            return self._frame_ns.get(stamp_s)

    def on_submit(self, stamp_ns: int) -> None:
        """Worker: a frame was handed to the session; the depth source pins its depth image
        now (the result may come many depth images later on a slow machine)."""
        if self._depth is not None:
            with self._lock:
                self._depth.pin(stamp_ns * 1e-9)

    def stale_reason(self, now_monotonic: float) -> Optional[str]:
        """Why the source has yielded no sample for ``stale_timeout_s``, or None (also before
        the first frame: no images is the input's own health). The estimator counts in the
        frames' stamps; the time since the last frame is added in steady seconds, so a camera
        that stopped still ages the estimate."""
        with self._lock:
            last = self._last_frame
            if last is None:
                return None
            reason = self._estimator.stale_reason(last[0] + max(0.0, now_monotonic - last[1]))
            detail = self._detail if reason == self._estimate.reason else ""
        return f"{reason} ({detail})" if reason and detail else reason

    def health_warning(self, now_monotonic: float) -> Optional[str]:
        """The scale's WARN for /diagnostics, or None: the source yields no sample (the stale
        reason) or, LOCKED, the recent samples disagree with the applied scale (the drift's
        figures: recent vs applied, in sigmas, for how long)."""
        stale = self.stale_reason(now_monotonic)
        e = self._estimate
        if stale:
            return (f"scale ({self.config.source}): no sample for "
                    f"{self.config.stale_timeout_s:g} s: {stale}; {e.status_text}")
        return e.drift_warning

    def info(self) -> dict:
        """Diagnostics key/values: the ~/scale fields, the rejections by reason, and once
        LOCKED on samples the recent samples' drift (``scale_recent_metres_per_unit``,
        ``scale_drift_sigma``, ``scale_drift_s``)."""
        e = self._estimate
        out = {"scale": ("monocular: the model's units, not metres" if e.source == "none"
                         else f"{e.units} ({e.status_text})"),
               "scale_state": e.state.value, "scale_source": e.source,
               "scale_metres_per_unit": e.metres_per_unit, "scale_sigma_log": e.sigma_log,
               "scale_samples": e.samples, "scale_segment": e.segment,
               "scale_units": e.units, "scale_last_rejection": e.reason or "none",
               "scale_last_rejection_detail": (self._detail if e.reason else "") or "none",
               "scale_depth_received": self.depth_received,
               "scale_odometry_received": self.odometry_received}
        if e.drift is not None:
            out.update(scale_recent_metres_per_unit=e.drift.recent_metres_per_unit,
                       scale_drift_sigma=e.drift.sigmas, scale_drift_s=e.drift.for_s)
        out.update({f"scale_rejected_{reason}": n for reason, n in e.rejections})
        return out

    # -- the worker's side ---------------------------------------------------------------------
    def on_frame(self, result, T_base_optical: np.ndarray) -> ScaleEstimate:
        """Feed one finished frame (a ``FrameResult``, model units) to the source; the
        snapshot to apply to this frame's outputs."""
        stamp_s = result.stamp_ns * 1e-9
        source = self.config.source
        sample = None
        if source == "camera_height":  # the frame's own points only: outside the lock
            sample = self._camera_height_sample(result, stamp_s, T_base_optical)
        with self._lock:
            self._last_frame = (stamp_s, time.monotonic())
            self._frame_ns[stamp_s] = result.stamp_ns
            if len(self._frame_ns) > 64:  # the oldest (insertion order)
                del self._frame_ns[next(iter(self._frame_ns))]
            if source == "depth":
                if result.depth is None:
                    sample = Rejection(stamp_s, "no_depth", "no predicted depth for this frame")
                else:
                    sample = self._depth.sample(stamp_s, result.depth, result.depth_conf,
                                                result.crop)
            elif source == "odometry":
                odometry = self._odometry_source(T_base_optical)
                if self._odometry_lookup is not None:
                    self._pull_tf_odometry(result.stamp_ns)
                sample = odometry.sample(stamp_s, result.c2w)
                if (isinstance(sample, Rejection) and self._tf_error
                        and sample.reason in ("no_odometry", "out_of_sync")):
                    sample = Rejection(sample.stamp_s, sample.reason,
                                       f"{sample.detail}; TF: {self._tf_error}")
            if sample is not None:
                self._estimate = self._estimator.add(sample)
                if isinstance(sample, Rejection):
                    self._detail = sample.detail
        return self._estimate

    def _camera_height_sample(self, result, stamp_s: float, T_base_optical: np.ndarray):
        """The floor in the frame's predicted points; the height configured, else from TF
        (then the ground frame's z axis is the up axis the floor's normal is held to). The
        worker's thread; reads no buffer the executor writes (the lookup is set while no
        frame is in flight)."""
        if result.depth is None:
            return Rejection(stamp_s, "no_depth", "no predicted depth for this frame")
        height_m, T_up = self.config.camera_height_m, T_base_optical
        if height_m is None:
            if self._ground_lookup is None:
                return Rejection(stamp_s, "no_ground_frame", "no TF tree to look the ground "
                                 "frame up in (set scale.camera_height_m)")
            try:
                T_up = self._ground_lookup(result.stamp_ns)
            except TransformError as exc:
                return Rejection(stamp_s, "no_ground_frame", str(exc))
            height_m = float(T_up[2, 3])
        return camera_height_depth_sample(stamp_s, result.depth, result.K_model, T_up,
                                          height_m, self.config, result.depth_conf)

    def _pull_tf_odometry(self, stamp_ns: int) -> None:
        """Odometry from TF: the base in odom at this frame's stamp (interpolated by the
        tree), and again at the earlier frames TF did not cover yet. Under the lock."""
        self._tf_pending.append(int(stamp_ns))
        keep = []
        for s in self._tf_pending:
            try:
                T = self._odometry_lookup(s)
            except ExtrapolationError as exc:
                self._tf_error = str(exc)
                if exc.direction == "future":  # not on TF yet: the next frame asks again
                    keep.append(s)
                continue
            except TransformError as exc:  # no odom or base frame (yet)
                self._tf_error = str(exc)
                keep.append(s)
                continue
            self.odometry_received += 1
            self._tf_error = ""
            rejected = self._odometry.push_odometry(s * 1e-9, T)
            if rejected is not None:
                self._estimate = self._estimator.add(rejected)
        self._tf_pending.clear()
        self._tf_pending.extend(keep)

    def reset(self) -> ScaleEstimate:
        """A new stream (``~/reset``, a restart): a new estimate in a new segment; the sensor
        buffers are kept (they hold the sensor's data, not the stream's)."""
        with self._lock:
            if self._odometry is not None:
                self._odometry.reset()
            self._odometry_saved = None
            self._tf_pending.clear()
            self._last_frame = None
            self._detail = ""
            self._estimate = self._estimator.reset()
        return self._estimate

    def _odometry_source(self, T_base_optical: np.ndarray) -> OdometrySource:
        T_bo = np.asarray(T_base_optical, float)
        if self._odometry is None or not np.allclose(T_bo, self._odometry_T_bo, atol=1e-9):
            self._odometry = OdometrySource(self.config, T_bo)
            self._odometry_T_bo = T_bo
            if self._odometry_saved is not None:  # a restored snapshot's window
                self._restore_odometry(self._odometry_saved)
                self._odometry_saved = None
            for stamp_s, T in self._odometry_pending:
                self._odometry.push_odometry(stamp_s, T)
            self._odometry_pending = []
        return self._odometry

    # -- stream snapshots (ros/lifecycle/snapshot_handlers.py) --------------------------------
    def state_dict(self) -> dict:
        """The scale for a stream snapshot, as JSON values: the estimate
        (``ScaleEstimator.state_dict``'s keys) and, with ``scale.source: odometry``, the
        odometry source's window under ``"odometry"`` (``OdometrySource.state_dict``: the
        frames the fit pairs and the odometry poses buffered). The depth images are the
        sensor's and are not saved."""
        with self._lock:
            state = self._estimator.state_dict()
            if self._odometry is not None:
                state[ODOMETRY_KEY] = self._odometry.state_dict()
            elif self._odometry_saved is not None:  # restored, no frame since: carried on
                state[ODOMETRY_KEY] = self._odometry_saved
        return state

    def check_state_dict(self, state) -> None:
        """ValueError (naming why) unless ``state`` can continue in this stream's scale."""
        self._estimator.check_state_dict(state)

    def load_state_dict(self, state) -> ScaleEstimate:
        """Continue a snapshot's estimate (LOCKED stays LOCKED at its value); ValueError, and
        nothing changed, for another source or settings. With ``scale.source: odometry`` the
        snapshot's window continues too (the frames it holds pair with the odometry that
        follows, as in the uninterrupted stream), loaded when the source knows the camera's
        mount (at the next frame, or now if it has seen one): a window made with another
        ``T_base_optical``, or malformed, is dropped with a warning and the window starts
        anew, as does one missing from the snapshot (an older build's)."""
        with self._lock:
            self._estimator.check_state_dict(state)
            saved = state.get(ODOMETRY_KEY) if self.config.source == "odometry" else None
            self._odometry_saved = None
            if self._odometry is not None:
                if saved is None or not self._restore_odometry(saved):
                    self._odometry.reset()
            else:  # built at the next frame (T_bo known): the window waits until then
                self._odometry_saved = copy.deepcopy(saved)
            self._last_frame = None
            self._estimate = self._estimator.load_state_dict(state)
        return self._estimate

    def _restore_odometry(self, saved) -> bool:
        """Load a snapshot's window into the odometry source (under the lock); False, with a
        warning, when it cannot continue there."""
        try:
            self._odometry.load_state_dict(saved)
        except ValueError as exc:
            self._log.warning(f"scale.source odometry: the snapshot's odometry window is "
                              f"dropped ({exc}); new samples come once the robot has moved "
                              "scale.min_baseline_m")
            return False
        return True


def odometry_msg_pose(msg) -> tuple[float, np.ndarray]:
    """nav_msgs/Odometry -> (stamp in s, T_odom_base 4x4). A quaternion of zero length (or
    NaN) gives a NaN rotation, which the source rejects and counts (``non_finite``): it is no
    rotation, and taking it as the identity would corrupt the fit silently."""
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    x, y, z, w = q.x, q.y, q.z, q.w
    n = math.sqrt(x * x + y * y + z * z + w * w)
    n = n if n > 1e-9 else math.nan
    x, y, z, w = x / n, y / n, z / n, w / n
    T = np.eye(4)
    T[:3, :3] = [[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                 [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                 [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]]
    T[:3, 3] = [p.x, p.y, p.z]
    return _stamp_s(msg.header.stamp), T


def _stamp_s(stamp) -> float:
    """A ROS stamp in seconds, computed as the frames' (``stamp_ns * 1e-9``): equal stamps
    give equal floats."""
    return (stamp.sec * 1_000_000_000 + stamp.nanosec) * 1e-9

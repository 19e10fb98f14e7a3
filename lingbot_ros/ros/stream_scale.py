"""StreamScale: one stream's metric scale in the node (the ``scale.*`` parameters).

Owned by the worker side: the ``FrameWorker`` feeds it each finished frame (``on_frame``)
before the frame's outputs go out, resets it with the stream (``~/reset``, a restart of the
stream; a rollover keeps it) and hands the resulting :class:`~lingbot_ros.scale.ScaleEstimate`
snapshot to ``Outputs``, which converts at the boundary. The executor thread only pushes
sensor data in (``push_depth``, ``push_odometry``) and reads snapshots (``estimate``,
``stale_reason``, ``info``): the buffers it shares with the worker are guarded by one lock;
the estimator itself is touched by the worker only (and by ``reset``, which the worker's own
reset calls under its frame lock).

Sources wired here: ``none``, ``fixed``, ``depth`` (the relative topic ``aligned_depth``),
``odometry`` (``odom_in``, nav_msgs/Odometry). ``camera_height`` is not wired into the node
yet: it stays UNKNOWN and reports ``no_floor`` (see docs/node.md, "Scale").
"""
from __future__ import annotations

import math
import threading
import time
from typing import Optional

import numpy as np

from ..scale import (DEPTH_ENCODINGS, DepthSource, OdometrySource, Rejection, ScaleConfig,
                     ScaleEstimate, ScaleEstimator)

__all__ = ["StreamScale", "depth_msg_to_array", "odometry_msg_pose", "units_header",
           "SOURCES_FOR_A_ROBOT"]

# What the activation warning names for a robot whose outputs stay in model units.
SOURCES_FOR_A_ROBOT = ("depth (an RGB-D camera's aligned depth on 'aligned_depth')",
                       "odometry (wheel/VIO odometry on 'odom_in')",
                       "fixed (a calibrated scale.factor)")


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
    def __init__(self, config: ScaleConfig) -> None:
        self.config = config
        self._estimator = ScaleEstimator(config)
        self._lock = threading.Lock()  # the sources' buffers: executor pushes, worker samples
        self._depth = DepthSource(config) if config.source == "depth" else None
        self._odometry: Optional[OdometrySource] = None  # built at the first frame's chain
        self._odometry_T_bo: Optional[np.ndarray] = None
        self._odometry_pending: list = []  # odometry before the first frame (T_bo unknown)
        self._estimate = self._estimator.estimate
        self._last_frame: Optional[tuple[float, float]] = None  # (stamp s, time.monotonic())
        self.depth_received = 0  # depth images pushed (executor thread)
        self.odometry_received = 0  # odometry poses pushed (executor thread)

    @property
    def estimate(self) -> ScaleEstimate:
        """The latest snapshot (immutable): what ~/scale, diagnostics and the outputs read."""
        return self._estimate

    @property
    def needs_depth(self) -> bool:
        """The source reads every frame's predicted depth (the session must return it)."""
        return self.config.source == "depth"

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
        """One odometry pose of the base (metres) at ``stamp_s``."""
        with self._lock:
            self.odometry_received += 1
            if self._odometry is not None:
                rejected = self._odometry.push_odometry(stamp_s, T_odom_base)
                if rejected is not None:  # counted with the frames' reasons
                    self._estimate = self._estimator.add(rejected)
            elif self.config.source == "odometry":
                self._odometry_pending.append((stamp_s, np.array(T_odom_base, float)))
                del self._odometry_pending[:-4096]

    def stale_reason(self, now_monotonic: float) -> Optional[str]:
        """Why the source has yielded no sample for ``stale_timeout_s``, or None (also before
        the first frame: no images is the input's own health). The estimator counts in the
        frames' stamps; the time since the last frame is added in steady seconds, so a camera
        that stopped still ages the estimate."""
        with self._lock:
            last = self._last_frame
            if last is None:
                return None
            return self._estimator.stale_reason(last[0] + max(0.0, now_monotonic - last[1]))

    def info(self) -> dict:
        """Diagnostics key/values: the ~/scale fields, the rejections by reason."""
        e = self._estimate
        out = {"scale": ("monocular: the model's units, not metres" if e.source == "none"
                         else f"{e.units} ({e.status_text})"),
               "scale_state": e.state.value, "scale_source": e.source,
               "scale_metres_per_unit": e.metres_per_unit, "scale_sigma_log": e.sigma_log,
               "scale_samples": e.samples, "scale_segment": e.segment,
               "scale_units": e.units, "scale_last_rejection": e.reason or "none",
               "scale_depth_received": self.depth_received,
               "scale_odometry_received": self.odometry_received}
        out.update({f"scale_rejected_{reason}": n for reason, n in e.rejections})
        return out

    # -- the worker's side ---------------------------------------------------------------------
    def on_frame(self, result, T_base_optical: np.ndarray) -> ScaleEstimate:
        """Feed one finished frame (a ``FrameResult``, model units) to the source; the
        snapshot to apply to this frame's outputs."""
        stamp_s = result.stamp_ns * 1e-9
        source = self.config.source
        sample = None
        with self._lock:
            self._last_frame = (stamp_s, time.monotonic())
            if source == "depth":
                if result.depth is None:
                    sample = Rejection(stamp_s, "no_depth", "no predicted depth for this frame")
                else:
                    sample = self._depth.sample(stamp_s, result.depth, result.depth_conf,
                                                result.crop)
            elif source == "odometry":
                sample = self._odometry_source(T_base_optical).sample(stamp_s, result.c2w)
            elif source == "camera_height":
                sample = Rejection(stamp_s, "no_floor", "camera_height is not wired into "
                                   "the node yet")
            if sample is not None:
                self._estimate = self._estimator.add(sample)
        return self._estimate

    def reset(self) -> ScaleEstimate:
        """A new stream (``~/reset``, a restart): a new estimate in a new segment; the sensor
        buffers are kept (they hold the sensor's data, not the stream's)."""
        with self._lock:
            if self._odometry is not None:
                self._odometry.reset()
            self._last_frame = None
            self._estimate = self._estimator.reset()
        return self._estimate

    def _odometry_source(self, T_base_optical: np.ndarray) -> OdometrySource:
        T_bo = np.asarray(T_base_optical, float)
        if self._odometry is None or not np.allclose(T_bo, self._odometry_T_bo, atol=1e-9):
            self._odometry = OdometrySource(self.config, T_bo)
            self._odometry_T_bo = T_bo
            for stamp_s, T in self._odometry_pending:
                self._odometry.push_odometry(stamp_s, T)
            self._odometry_pending = []
        return self._odometry


def odometry_msg_pose(msg) -> tuple[float, np.ndarray]:
    """nav_msgs/Odometry -> (stamp in s, T_odom_base 4x4)."""
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    x, y, z, w = q.x, q.y, q.z, q.w
    n = math.sqrt(x * x + y * y + z * z + w * w) or 1.0
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


def units_header(estimate: Optional[ScaleEstimate]) -> list[str]:
    """The header lines of a saved file (TUM, PLY): its units, the scale source and value."""
    if estimate is None or estimate.output_factor is None:
        source = "none" if estimate is None else estimate.source
        why = ("no scale source" if source == "none" else
               f"scale {source} not locked ({estimate.state.value}, "
               f"{estimate.samples}/{estimate.min_samples} samples)")
        return ["units: model units (monocular: not metres)", f"scale: {why}"]
    return ["units: m",
            f"scale: {estimate.source}, {estimate.metres_per_unit:.9g} m per model unit, "
            f"sigma_log {estimate.sigma_log:.3g}, {estimate.samples} samples, "
            f"segment {estimate.segment}"]

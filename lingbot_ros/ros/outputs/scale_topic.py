"""~/scale: the stream's metric scale (``lingbot_ros_interfaces/ScaleEstimate``), published
on change (by the worker, as a frame changes it) and at 1 Hz (the node's executor), so a late
reader learns the state within a second."""
from __future__ import annotations

import math
import threading
from typing import Optional

from builtin_interfaces.msg import Time
from rclpy.clock import Clock, ClockType
from std_msgs.msg import Header

from ...scale import ScaleEstimate

STATES = {"UNKNOWN": 0, "CONVERGING": 1, "LOCKED": 2}  # ScaleEstimate.msg's constants


def scale_msg(msg_type, estimate: ScaleEstimate, stamp, frame_id: str):
    """A ``ScaleEstimate`` message of the snapshot ``estimate``."""
    return msg_type(header=Header(stamp=stamp, frame_id=frame_id),
                    state=STATES[estimate.state.value], source=estimate.source,
                    metres_per_unit=float(estimate.metres_per_unit),
                    sigma_log=float(estimate.sigma_log), samples=int(estimate.samples),
                    segment=int(estimate.segment))


def _key(e: ScaleEstimate) -> tuple:
    return (e.state, e.metres_per_unit if math.isfinite(e.metres_per_unit) else None,
            e.sigma_log if math.isfinite(e.sigma_log) else None, e.samples, e.segment)


class ScalePublisher:
    def __init__(self, node, frame_id: str, read, rate_hz: float = 1.0) -> None:
        """``read()``: the current ``ScaleEstimate`` snapshot (``ScaleStream.estimate``)."""
        from lingbot_ros_interfaces.msg import ScaleEstimate as ScaleEstimateMsg
        self._msg_type = ScaleEstimateMsg
        self._node = node
        self._frame_id = frame_id
        self._read = read
        self._lock = threading.Lock()  # worker (on change) vs executor (timer)
        self._last: Optional[tuple] = None
        self.pub = node.create_publisher(ScaleEstimateMsg, "~/scale", 10)
        self._timer = node.create_timer(1.0 / rate_hz, self._tick,
                                        clock=Clock(clock_type=ClockType.STEADY_TIME))

    def changed(self, estimate: ScaleEstimate) -> None:
        """Worker thread: publish if ``estimate`` differs from the last one published."""
        with self._lock:
            if _key(estimate) != self._last:
                self._send(estimate)

    def destroy(self) -> None:
        self._node.destroy_timer(self._timer)
        self._node.destroy_publisher(self.pub)

    def _tick(self) -> None:
        with self._lock:
            self._send(self._read())

    def _send(self, estimate: ScaleEstimate) -> None:
        """Stamped with the last sample or rejection (the frame's stamp), else now."""
        self._last = _key(estimate)
        if estimate.stamp_ns is not None:
            ns = estimate.stamp_ns
            stamp = Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)
        else:
            stamp = self._node.get_clock().now().to_msg()
        self.pub.publish(scale_msg(self._msg_type, estimate, stamp, self._frame_id))

"""CameraStatus: ``~/<camera>/status`` of a rig's camera (TrackingStatus per frame).

The rig's worker hands each camera's frames to its ``CameraStatus`` as the single-camera
worker hands them to ``Status`` (the same methods: ``frame``, ``initializing``, ``failed``,
``paused``); the counters are the camera's own ``NodeTelemetry``. The node-wide ~/status,
~/cache_info and /diagnostics stay ``Status``'s.
"""
from __future__ import annotations

from lingbot_ros_interfaces.msg import TrackingStatus

from ..params.rig import CAMERA_NAME_RE
from .reports import tracking_status
from .telemetry import NodeTelemetry

__all__ = ["CameraStatus"]


class CameraStatus:
    """Created with the rig's outputs, destroyed with them."""

    def __init__(self, node, camera: str, telemetry: NodeTelemetry) -> None:
        if not CAMERA_NAME_RE.fullmatch(camera):
            raise ValueError(f"camera must be a camera name of [a-z0-9_]+, got {camera!r}")
        self._node = node
        self.camera = camera
        self.telemetry = telemetry
        self.status = node.create_publisher(TrackingStatus, f"~/{camera}/status", 10)
        self.state = None  # the last state published

    def frame(self, result, header, end_to_end_ms: float, message: str = "") -> None:
        """A processed frame (TRACKING); as ``Status.frame``."""
        msg = self._message(header, TrackingStatus.STATE_TRACKING, message)
        msg.keyframe, msg.frame_index = result.keyframe, result.index
        msg.compute_ms, msg.latency_ms = float(result.latency_ms), float(end_to_end_ms)
        self.status.publish(msg)

    def initializing(self, header, message: str) -> None:
        self.publish_state(header, TrackingStatus.STATE_INITIALIZING, message)

    def failed(self, header, message: str) -> None:
        self.publish_state(header, TrackingStatus.STATE_FAILED, message)

    def paused(self, header, message: str) -> None:
        self.publish_state(header, TrackingStatus.STATE_PAUSED, message)

    def publish_state(self, header, state: int, message: str) -> None:
        self.status.publish(self._message(header, state, message))

    def destroy(self) -> None:
        if self.status is not None:
            self._node.destroy_publisher(self.status)
            self.status = None

    def _message(self, header, state: int, message: str = "") -> TrackingStatus:
        self.state = state
        return tracking_status(self.telemetry, header, state, message)

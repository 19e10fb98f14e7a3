"""CameraStatus: ``~/<camera>/status`` of a rig's camera (TrackingStatus per frame).

The rig's worker hands each camera's frames to its ``CameraStatus`` as the single-camera
worker hands them to ``Status`` (the same methods: ``frame``, ``initializing``, ``failed``,
``paused``); the counters are the camera's own ``NodeTelemetry``. The node-wide ~/status,
~/cache_info and /diagnostics stay ``Status``'s.
"""
from __future__ import annotations

from lingbot_ros_interfaces.msg import TrackingStatus

from ..params.rig import CAMERA_NAME_RE
from .reports import TrackingStates
from .telemetry import NodeTelemetry

__all__ = ["CameraStatus"]


class CameraStatus(TrackingStates):
    """Created with the rig's outputs, destroyed with them (``frame``, ``initializing``,
    ``failed``, ``paused``: ``TrackingStates``')."""

    def __init__(self, node, camera: str, telemetry: NodeTelemetry) -> None:
        if not CAMERA_NAME_RE.fullmatch(camera):
            raise ValueError(f"camera must be a camera name of [a-z0-9_]+, got {camera!r}")
        self._node = node
        self.camera = camera
        self.tracked = telemetry  # the camera's own counters
        self.status = node.create_publisher(TrackingStatus, f"~/{camera}/status", 10)
        self.state = None  # the last state published

    def destroy(self) -> None:
        if self.status is not None:
            self._node.destroy_publisher(self.status)
            self.status = None

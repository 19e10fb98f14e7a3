"""Probe: a small client of a running lingbot_ros node (outputs + services), for the demo.

It can also play the robot around the node: ``static_tf`` is published on /tf_static
(reliable, transient local), as robot_state_publisher does.
"""
from __future__ import annotations

import time
from typing import Optional

from geometry_msgs.msg import PoseStamped
from lingbot_ros_interfaces.msg import TrackingStatus
from lingbot_ros_interfaces.srv import GetCacheInfo, SaveMap, SaveTrajectory
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_srvs.srv import Trigger
from tf2_msgs.msg import TFMessage

from .background_node import BackgroundNode


class Probe(BackgroundNode):
    def __init__(self, node_name: str = "/lingbot_ros", static_tf: Optional[list] = None) -> None:
        """``static_tf``: TransformStamped messages to latch on /tf_static."""
        super().__init__("lingbot_ros_probe")
        self._static_tf = static_tf or []
        self._ns = node_name.rstrip("/")
        self.num_poses = 0
        self.first_pose_time: Optional[float] = None  # time.monotonic() of the first/last pose
        self.last_pose_time: Optional[float] = None
        self.last_status: Optional[TrackingStatus] = None
        self._last_message = time.monotonic()

    def setup(self, node) -> None:
        node.create_subscription(PoseStamped, f"{self._ns}/pose", self._on_pose, 100)
        node.create_subscription(TrackingStatus, f"{self._ns}/status", self._on_status, 100)
        self._clients = {
            "reset": node.create_client(Trigger, f"{self._ns}/reset"),
            "info": node.create_client(GetCacheInfo, f"{self._ns}/get_cache_info"),
            "save": node.create_client(SaveTrajectory, f"{self._ns}/save_trajectory"),
            "save_map": node.create_client(SaveMap, f"{self._ns}/save_map")}
        if self._static_tf:
            latched = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                                 durability=DurabilityPolicy.TRANSIENT_LOCAL)
            self._static_pub = node.create_publisher(TFMessage, "/tf_static", latched)
            self._static_pub.publish(TFMessage(transforms=self._static_tf))

    def _on_pose(self, msg: PoseStamped) -> None:
        self.num_poses += 1
        self._last_message = self.last_pose_time = time.monotonic()
        if self.first_pose_time is None:
            self.first_pose_time = self.last_pose_time

    def _on_status(self, msg: TrackingStatus) -> None:
        self.last_status = msg
        self._last_message = time.monotonic()

    def wait_for_services(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(c.wait_for_service(timeout_sec=max(0.0, deadline - time.monotonic()))
                   for c in self._clients.values())

    def wait_quiet(self, idle_s: float, timeout: float) -> None:
        """Return once no pose or status arrived for ``idle_s`` seconds (or at ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and time.monotonic() - self._last_message < idle_s:
            time.sleep(0.1)

    def _call(self, name: str, request, timeout: float = 30.0):
        future = self._clients[name].call_async(request)
        deadline = time.monotonic() + timeout
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.02)
        return future.result() if future.done() else None

    def cache_info(self):
        return self._call("info", GetCacheInfo.Request())

    def save_trajectory(self, path: str):
        return self._call("save", SaveTrajectory.Request(path=path))

    def save_map(self, path: str):
        return self._call("save_map", SaveMap.Request(path=path))

    def reset(self):
        return self._call("reset", Trigger.Request())

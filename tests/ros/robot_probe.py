"""RobotProbe: the node-test Probe plus what a robot stack reads and writes around the node.

It publishes the robot's static transforms on /tf_static (as robot_state_publisher does:
reliable, transient local) and subscribes to /tf, ~/odometry, ~/camera_info, ~/depth,
~/depth/camera_info and ~/map_points; it has clients of ~/pause and ~/save_map.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from lingbot_ros.geometry import matrix_to_tq, tq_to_matrix
from tests.ros.node_harness import NODE, Got, Probe


def transform_msg(parent: str, child: str, T: np.ndarray, stamp_ns: int = 0):
    from geometry_msgs.msg import TransformStamped
    from tests.ros.node_data import header
    msg = TransformStamped(header=header(stamp_ns, parent), child_frame_id=child)
    t, q = matrix_to_tq(np.asarray(T, float)[None])
    (msg.transform.translation.x, msg.transform.translation.y,
     msg.transform.translation.z) = (float(v) for v in t[0])
    (msg.transform.rotation.x, msg.transform.rotation.y, msg.transform.rotation.z,
     msg.transform.rotation.w) = (float(v) for v in q[0])
    return msg


def matrix_of(transform) -> np.ndarray:
    """4x4 of a geometry_msgs Transform or Pose."""
    p = getattr(transform, "translation", None) or transform.position
    r = getattr(transform, "rotation", None) or transform.orientation
    return tq_to_matrix([p.x, p.y, p.z], [r.x, r.y, r.z, r.w])


class RobotProbe(Probe):
    def __init__(self, static_transforms: Optional[list] = None, node: str = NODE) -> None:
        super().__init__(node)
        self._static = static_transforms or []
        self.tf: list[Got] = []
        self.odometry: list[Got] = []
        self.camera_info: list[Got] = []
        self.depth: list[Got] = []
        self.depth_info: list[Got] = []
        self.map_points: list[Got] = []

    def setup(self, node) -> None:
        super().setup(node)
        from lingbot_ros_interfaces.srv import SaveMap
        from nav_msgs.msg import Odometry
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import CameraInfo, Image, PointCloud2
        from std_srvs.srv import SetBool
        from tf2_msgs.msg import TFMessage

        reliable = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        n = self._node_name
        for topic, msg_type, store, qos in (
                ("/tf", TFMessage, self.tf, reliable),
                (f"{n}/odometry", Odometry, self.odometry, reliable),
                (f"{n}/camera_info", CameraInfo, self.camera_info, reliable),
                (f"{n}/depth", Image, self.depth, reliable),
                (f"{n}/depth/camera_info", CameraInfo, self.depth_info, reliable),
                (f"{n}/map_points", PointCloud2, self.map_points, latched)):
            node.create_subscription(msg_type, topic,
                                     lambda m, s=store: self._on_message(s, m), qos)
        self.clients["pause"] = node.create_client(SetBool, f"{n}/pause")
        self.clients["save_map"] = node.create_client(SaveMap, f"{n}/save_map")
        self.static_pub = node.create_publisher(TFMessage, "/tf_static", latched)
        self.tf_pub = node.create_publisher(TFMessage, "/tf", reliable)
        if self._static:
            self.publish_static(self._static)

    def publish_static(self, transforms: list) -> None:
        from tf2_msgs.msg import TFMessage
        self.static_pub.publish(TFMessage(transforms=transforms))

    def wait_static_delivered(self, timeout: float = 60.0) -> None:
        """Until the node's /tf_static reader has acknowledged our static transforms (it
        then has them before any image sent after this)."""
        from rclpy.duration import Duration
        self.wait_until(lambda: self.static_pub.get_subscription_count() > 0, timeout,
                        "the node's /tf_static subscription")
        assert self.static_pub.wait_for_all_acked(Duration(seconds=timeout)), \
            "/tf_static was not acknowledged"

    def published_transforms(self) -> list:
        """Every TransformStamped received on /tf, in order."""
        return [t for g in self.snapshot("tf") for t in g.msg.transforms]

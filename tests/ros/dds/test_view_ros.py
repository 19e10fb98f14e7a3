"""lingbot-ros-view --ros over DDS: a stand-in for the node, named /robot1/lingbot_ros,
publishes the node's topics with their types and QoS (the latched ~/path and ~/map_points
before the viewer exists); the viewer's subscriber fills the scene (no browser here)."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped
from lingbot_ros_interfaces.msg import ScaleEstimate, TrackingStatus
from nav_msgs.msg import Path
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, PointCloud2

from lingbot_ros.clients.background_node import BackgroundNode
from lingbot_ros.clients.view_ros import RosViewSource, cloud_arrays, pose_matrix
from lingbot_ros.ros.outputs.messages import point_cloud
from lingbot_ros.tools.view.scene import SceneModel

TIMEOUT = 30.0  # s: discovery and delivery on a loaded machine
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)


def stamp(i: int) -> Time:
    return Time(sec=100 + i // 10, nanosec=(i % 10) * 100_000_000)


def pose_msg(i: int) -> PoseStamped:
    msg = PoseStamped()
    msg.header.stamp, msg.header.frame_id = stamp(i), "map"
    msg.pose.position.x = float(i)
    msg.pose.orientation.w = 1.0
    return msg


class FakeNode(BackgroundNode):
    """The node's outputs under its name and namespace (its relative ~/ topics)."""

    def __init__(self) -> None:
        super().__init__("lingbot_ros", namespace="/robot1", start_parameter_services=False)

    def setup(self, node) -> None:
        self.path = node.create_publisher(Path, "~/path", LATCHED)
        self.map = node.create_publisher(PointCloud2, "~/map_points", LATCHED)
        self.pose = node.create_publisher(PoseStamped, "~/pose", 100)
        self.status = node.create_publisher(TrackingStatus, "~/status", 100)
        self.scale = node.create_publisher(ScaleEstimate, "~/scale", 10)
        self.info = node.create_publisher(CameraInfo, "~/camera_info", 10)


def wait_until(predicate, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(0.02)


def test_a_namespaced_node_into_the_scene(ros_env):
    rng = np.random.default_rng(0)
    xyz = rng.normal(size=(300, 3)).astype(np.float32)
    rgb = rng.integers(0, 255, (300, 3), dtype=np.uint8)
    model = SceneModel(max_points=100)
    with FakeNode() as fake:
        path = Path()
        path.header.frame_id = "map"
        path.poses = [pose_msg(i) for i in range(5)]
        fake.path.publish(path)  # latched, before the viewer exists
        fake.map.publish(point_cloud(xyz, rgb, stamp(0), "map"))
        with RosViewSource(model, "/robot1/lingbot_ros") as source:
            wait_until(lambda: model.snapshot().poses_seen == 5, "the latched path")
            wait_until(lambda: len(model.snapshot().points_xyz) == 100, "the latched map")
            for pub in (fake.pose, fake.status, fake.scale, fake.info):
                wait_until(lambda p=pub: p.get_subscription_count() > 0, "the subscriptions")
            info = CameraInfo(height=60, width=80)
            info.k = [70.0, 0.0, 40.0, 0.0, 70.0, 30.0, 0.0, 0.0, 1.0]
            fake.info.publish(info)
            wait_until(lambda: source.messages["camera_info"] == 1, "camera_info")
            fake.pose.publish(pose_msg(3))  # already in the path: not added twice
            for i in (5, 6, 7):
                fake.pose.publish(pose_msg(i))
                status = TrackingStatus(state=TrackingStatus.STATE_TRACKING,
                                        keyframe=i == 6, frames_received=i + 2,
                                        frames_processed=i + 1, frames_dropped=1)
                status.header.stamp = stamp(i)
                fake.status.publish(status)
            fake.scale.publish(ScaleEstimate(state=ScaleEstimate.LOCKED, source="depth",
                                             metres_per_unit=0.5, sigma_log=0.01, samples=12))
            wait_until(lambda: source.messages["status"] == 3 and source.messages["scale"]
                       == 1 and source.messages["pose"] == 4, "poses, status and scale")
            wait_until(lambda: len(model.snapshot().keyframes) == 1, "the keyframe")
            snap = model.snapshot()
            assert snap.poses_seen == 8
            np.testing.assert_array_equal(snap.front_end[:, 0], np.arange(8))
            assert snap.keyframes[0][0, 3] == 6.0
            assert snap.counters.frames_in == 9 and snap.counters.processed == 8
            assert snap.counters.dropped == 1 and snap.counters.keyframes == 1
            assert snap.scale.state == "LOCKED" and snap.scale.metres_per_unit == 0.5
            assert snap.scale.units == "m"
            assert snap.camera is not None and snap.camera.hw == (60, 80)
            assert snap.camera.fov_y == pytest.approx(2 * math.atan2(30, 70))
            empty = Path()
            empty.header.frame_id = "map"
            fake.path.publish(empty)  # a reset
            wait_until(lambda: model.snapshot().poses_seen == 0, "the reset")


def test_messages_read_back():
    xyz = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    rgb = np.array([[255, 0, 10], [1, 2, 3]], np.uint8)
    got_xyz, got_rgb = cloud_arrays(point_cloud(xyz, rgb, stamp(0), "map"))
    np.testing.assert_array_equal(got_xyz, xyz)
    np.testing.assert_array_equal(got_rgb, rgb)
    np.testing.assert_allclose(pose_matrix(pose_msg(4).pose)[:3, 3], [4, 0, 0])

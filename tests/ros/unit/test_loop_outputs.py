"""The outputs under a loop-closure correction (no DDS traffic: a real rclpy node, the real
``Outputs``, ``PathPublisher`` and ``MapPoints``; what they publish is recorded): odom -> base
and ~/odometry stay the front end's, map -> odom carries the correction, ~/pose is their
product; ``PathPublisher.rewrite`` replaces the history up to the loop and keeps the poses
after it; ``MapPoints.replace`` swaps a rebuilt map in whole."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from lingbot_ros.geometry import VoxelMap, quaternion_to_rotation, rotation_exp
from lingbot_ros.ros.backend.corrections import odom_correction
from lingbot_ros.ros.params.node_config import NodeConfig
from lingbot_ros.ros.tf.frame_chain import FrameChain


@pytest.fixture
def ros_node():
    import rclpy
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("loop_outputs", context=context)
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def rigid(rng) -> np.ndarray:
    T = np.eye(4)
    T[:3, :3] = rotation_exp(rng.normal(size=3))
    T[:3, 3] = rng.normal(size=3)
    return T


def frame(c2w, stamp_ns: int):
    K = np.array([[8.0, 0.0, 4.0], [0.0, 8.0, 4.0], [0.0, 0.0, 1.0]])
    return SimpleNamespace(stamp_ns=stamp_ns, keyframe=False, index=3, c2w=c2w, K=K,
                           K_model=K, depth=None, depth_conf=None, rgb=None,
                           crop=SimpleNamespace(input_hw=(8, 8)))


def matrix(translation, rotation) -> np.ndarray:
    T = np.eye(4)
    T[:3, 3] = (translation.x, translation.y, translation.z)
    T[:3, :3] = quaternion_to_rotation([rotation.x, rotation.y, rotation.z, rotation.w])
    return T


def record(publisher) -> list:
    got: list = []
    publisher.publish = got.append
    return got


def test_map_to_odom_carries_the_correction_and_odom_to_base_stays(ros_node):
    from lingbot_ros.ros.outputs.frame_outputs import Outputs
    rng = np.random.default_rng(7)
    outputs = Outputs(ros_node, NodeConfig(depth_rate_hz=0))
    chain = FrameChain.robot("base_link", "cam", rigid(rng), camera_is_optical=True)
    tf, poses, odom = record(outputs.tf), record(outputs.pose), record(outputs.odometry)
    c2w, C = rigid(rng), rigid(rng)
    M = odom_correction(chain, C)
    outputs.publish(frame(c2w, 1_000), chain, depth_due=False)
    outputs.publish(frame(c2w, 2_000), chain, depth_due=False, map_to_odom=M)
    try:
        before, after = (m.transforms for m in tf)
        by_child = [{t.child_frame_id: matrix(t.transform.translation, t.transform.rotation)
                     for t in ts} for ts in (before, after)]
        T_odom = chain.tracked_in_map(c2w)
        np.testing.assert_allclose(by_child[0]["base_link"], T_odom, atol=1e-9)
        np.testing.assert_allclose(by_child[1]["base_link"], T_odom, atol=1e-9)  # no jump
        np.testing.assert_allclose(by_child[0]["odom"], np.eye(4), atol=1e-9)
        np.testing.assert_allclose(by_child[1]["odom"], M, atol=1e-9)
        p = poses[1].pose
        np.testing.assert_allclose(matrix(p.position, p.orientation),
                                   chain.tracked_in_map(C @ c2w), atol=1e-9)
        o = odom[1].pose.pose
        assert odom[1].header.frame_id == "odom"
        np.testing.assert_allclose(matrix(o.position, o.orientation), T_odom, atol=1e-9)
    finally:
        outputs.destroy()


def test_rewrite_replaces_the_path_up_to_the_loop_and_keeps_what_came_after(ros_node):
    from lingbot_ros.ros.outputs.messages import ns_to_stamp, pose_stamped
    from lingbot_ros.ros.outputs.path_publisher import PathPublisher
    path = PathPublisher(ros_node, "map", 1.0, 0)
    try:
        for i in range(1, 6):
            T = np.eye(4)
            T[0, 3] = i
            path.append(pose_stamped(T, ns_to_stamp(i * 1_000_000_000), "map"))
        corrected = []
        for i in (1, 3):  # the keyframes, optimised (moved up by 10 m)
            T = np.eye(4)
            T[0, 3], T[2, 3] = i, 10.0
            corrected.append((i * 1_000_000_000, T))
        path.rewrite(corrected)
        records = path.records()
        stamps = records[:, 0:4].copy().view("<i4").ravel()
        assert stamps.tolist() == [1, 3, 4, 5]
        floats = records[:, -56:].copy().view("<f8")  # (n, 7) position, orientation
        assert floats[:, 2].tolist() == [10.0, 10.0, 0.0, 0.0]
        assert floats[:, 0].tolist() == [1.0, 3.0, 4.0, 5.0]
    finally:
        path.destroy()


def test_replace_swaps_the_rebuilt_map_in_whole(ros_node):
    from lingbot_ros.ros.outputs.map_points import MapPoints
    points = MapPoints(ros_node, "map", 0.05, 1000, 1.0)
    try:
        points.add(np.zeros((3, 3), np.float32) + np.arange(3)[:, None], np.zeros((3, 3),
                                                                                  np.uint8), None)
        rebuilt = VoxelMap(0.05, 1000)
        rebuilt.add(np.array([[5.0, 5.0, 5.0]], np.float32), np.full((1, 3), 200, np.uint8))
        points.replace(rebuilt)
        xyz, rgb = points.snapshot()
        assert xyz.tolist() == [[5.0, 5.0, 5.0]] and rgb.tolist() == [[200, 200, 200]]
    finally:
        points.destroy()

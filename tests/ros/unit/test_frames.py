"""The frame algebra of the node (no DDS): FrameChain, body_velocity, RobotFrames' waiting
and health, the TF mode line, the camera_info checks and the message builders."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lingbot_ros.geometry import T_BODY_OPTICAL, c2w_to_map, rigid_inverse, tq_to_matrix
from lingbot_ros.ros.params.node_config import NodeConfig
from lingbot_ros.ros.status.health import extrinsic_wait
from lingbot_ros.ros.status.diagnostics import camera_info_check
from lingbot_ros.ros.tf.frame_chain import FrameChain, body_velocity
from lingbot_ros.ros.tf.robot_frames import RobotFrames, tf_tree_mode
from lingbot_ros.ros.tf.tree import TransformTree


def random_rigid(rng) -> np.ndarray:
    q = rng.normal(size=4)
    return tq_to_matrix(rng.normal(size=3), q / np.linalg.norm(q))


def test_camera_only_chain_is_the_old_body_frame_convention():
    rng = np.random.default_rng(0)
    for _ in range(5):
        c2w = random_rigid(rng)
        optical = FrameChain.camera_only("cam", camera_is_optical=True)
        np.testing.assert_allclose(optical.tracked_in_map(c2w), c2w_to_map(c2w, "optical"),
                                   atol=1e-12)
        body = FrameChain.camera_only("cam", camera_is_optical=False)
        np.testing.assert_allclose(body.tracked_in_map(c2w), c2w_to_map(c2w, "body"),
                                   atol=1e-12)
    assert optical.tracked_frame == optical.camera_frame == "cam"


def test_robot_chain_puts_the_map_at_the_first_base_and_moves_the_camera_rigidly():
    rng = np.random.default_rng(1)
    T_base_cam = random_rigid(rng)
    chain = FrameChain.robot("base_link", "cam", T_base_cam, camera_is_optical=True)
    np.testing.assert_allclose(chain.tracked_in_map(np.eye(4)), np.eye(4), atol=1e-12)
    c2w = random_rigid(rng)  # the camera's motion in the first camera's optical frame
    T_map_base = chain.tracked_in_map(c2w)
    # The camera through the robot: map -> base -> camera equals the first camera's mount
    # composed with the camera's own motion.
    np.testing.assert_allclose(T_map_base @ T_base_cam, T_base_cam @ c2w, atol=1e-12)
    # Points of the model world land in the map through the mount.
    np.testing.assert_allclose(chain.T_map_world, T_base_cam, atol=1e-12)
    # A non-optical camera frame (x forward): the optical axes are its body->optical turn.
    body = FrameChain.robot("base_link", "cam", T_base_cam, camera_is_optical=False)
    np.testing.assert_allclose(body.T_base_optical, T_base_cam @ T_BODY_OPTICAL, atol=1e-12)


def test_body_velocity_is_in_the_moving_frame():
    a = math.radians(30)
    T0 = np.eye(4)
    T0[:3, :3] = [[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]]
    step = np.eye(4)
    step[0, 3] = 0.5  # half a unit forward in its own x
    yaw = np.eye(4)
    b = 0.2
    yaw[:2, :2] = [[math.cos(b), -math.sin(b)], [math.sin(b), math.cos(b)]]
    linear, angular = body_velocity(T0, T0 @ step @ yaw, 0.1)
    np.testing.assert_allclose(linear, [5.0, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(angular, [0.0, 0.0, 2.0], atol=1e-12)
    linear, angular = body_velocity(T0, T0, 0.1)
    assert not linear.any() and not angular.any()
    np.testing.assert_allclose(rigid_inverse(T0) @ T0, np.eye(4), atol=1e-12)


def test_robot_frames_waits_for_the_extrinsic_then_keeps_it():
    tree = TransformTree()
    frames = RobotFrames(NodeConfig(wait_for_extrinsic_s=2.0), tree)
    assert frames.resolve("camera_optical_frame", now=10.0) is None
    assert frames.waiting_for == "base_link -> camera_optical_frame"
    level, message = extrinsic_wait(frames.facts(), 11.0)
    assert level == 0 and "frames.base" in message and "/tf_static" in message
    assert extrinsic_wait(frames.facts(), 12.5)[0] == 2  # past tf.wait_for_extrinsic_s
    T = np.eye(4)
    T[2, 3] = 1.0
    tree.set_transform("base_link", "camera_optical_frame", T, 0, static=True)
    chain = frames.resolve("camera_optical_frame", now=13.0)
    assert chain is not None and extrinsic_wait(frames.facts(), 13.0) is None
    np.testing.assert_allclose(chain.T_base_optical, T)
    tree.clear()  # kept once found: it is rigid
    assert frames.resolve("camera_optical_frame", now=14.0) is chain
    assert "extrinsic_base_optical" in frames.facts().describe()
    with pytest.raises(ValueError, match="TF tree"):
        RobotFrames(NodeConfig())


def test_bare_camera_needs_no_tf_and_uses_the_header_frame():
    frames = RobotFrames(NodeConfig(base_frame=""))
    chain = frames.resolve("", now=0.0)
    assert chain.tracked_frame == "camera_optical_frame"  # no frame_id in the header
    assert frames.resolve("cam_left", 0.0).tracked_frame == "cam_left"
    assert "camera-only" in frames.facts().describe()["tf_tree"]


def test_tf_mode_lines_name_each_combination():
    assert "identity" in tf_tree_mode(NodeConfig())
    assert "corrects another node's odom -> base_link" in tf_tree_mode(
        NodeConfig(publish_odom_to_base=False))
    assert "left to another node" in tf_tree_mode(NodeConfig(publish_map_to_odom=False))
    assert tf_tree_mode(NodeConfig(publish_map_to_odom=False,
                                   publish_odom_to_base=False)).startswith("none")


def test_frame_names_must_differ():
    with pytest.raises(ValueError, match="odom_frame must differ"):
        NodeConfig(odom_frame="map")
    with pytest.raises(ValueError, match="base_frame must differ"):
        NodeConfig(base_frame="odom")


def test_camera_info_check_flags_another_size_and_compares_focal_lengths():
    from sensor_msgs.msg import CameraInfo
    info = CameraInfo(width=640, height=480, k=[500.0, 0, 320, 0, 500.0, 240, 0, 0, 1])
    same = camera_info_check(info, (480, 640), 550.0)
    assert same["camera_info_size"] == "matches the images"
    assert same["predicted_fx_over_camera_info_fx"] == pytest.approx(1.1)
    other = camera_info_check(info, (720, 1280), 550.0)
    assert other["camera_info_size"].startswith("MISMATCH") and "1280x720" in \
        other["camera_info_size"]
    assert camera_info_check(None, (480, 640), None) == {}


def test_message_builders():
    from builtin_interfaces.msg import Time
    from lingbot_ros.ros.outputs.messages import camera_info_msg, depth_image, odometry
    K = np.array([[100.0, 0, 30], [0, 101.0, 20], [0, 0, 1]])
    ci = camera_info_msg(K, 64, 48, Time(sec=1), "cam")
    assert (ci.width, ci.height, ci.header.frame_id) == (64, 48, "cam")
    np.testing.assert_array_equal(np.array(ci.p).reshape(3, 4), np.hstack([K, np.zeros((3, 1))]))
    depth = np.arange(12, dtype=np.float32).reshape(3, 4)
    depth[0, 0] = np.nan
    img = depth_image(depth, Time(sec=1), "cam")
    back = np.frombuffer(bytes(img.data), "<f4").reshape(3, 4)
    np.testing.assert_array_equal(back, depth)
    assert (img.encoding, img.step, img.is_bigendian) == ("32FC1", 16, 0)
    odom = odometry(np.eye(4), Time(sec=1), "odom", "base_link", np.array([1.0, 2, 3]),
                    np.array([0.0, 0, 0.5]), (0.01, 0.02), (0.3, 0.4))
    assert np.diag(np.array(odom.pose.covariance).reshape(6, 6)).tolist() == [0.01] * 3 + [0.02] * 3
    assert np.diag(np.array(odom.twist.covariance).reshape(6, 6)).tolist() == [0.3] * 3 + [0.4] * 3
    assert (odom.twist.twist.linear.y, odom.twist.twist.angular.z) == (2.0, 0.5)

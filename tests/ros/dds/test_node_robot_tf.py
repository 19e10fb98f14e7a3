"""The node on a robot, over DDS: REP-105 TF on top of the robot's static transforms, the
outputs mappers consume (odometry with twist, depth + camera_info, a bounded map), and the
base -> camera extrinsic waited for.

The robot: base_link -> camera_link (0.3 m forward, 1 m up, pitched 20 deg down) ->
camera_optical_frame, on /tf_static as robot_state_publisher sends it. The node's poses are
checked against the same tiny model run here (StreamingSession, same settings) through the
frame algebra written out in this test, so a wrong composition anywhere fails."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest

from lingbot_ros.config import SessionConfig, PreprocessConfig
from lingbot_ros.geometry import T_BODY_OPTICAL
from lingbot_ros.session import open_session
from tests.ros.node_data import stamp_ns
from tests.ros.node_harness import TINY_PARAMS, NodeProcess, good_images
from tests.ros.robot_probe import RobotProbe, matrix_of, transform_msg
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

FRAMES = 10
PITCH = math.radians(20.0)
T_BASE_CAMLINK = np.array([[math.cos(PITCH), 0.0, math.sin(PITCH), 0.3],
                           [0.0, 1.0, 0.0, 0.0],
                           [-math.sin(PITCH), 0.0, math.cos(PITCH), 1.0],
                           [0.0, 0.0, 0.0, 1.0]])  # pitched down: its x axis points below
T_BASE_OPTICAL = T_BASE_CAMLINK @ T_BODY_OPTICAL
STATIC = [("base_link", "camera_link", T_BASE_CAMLINK),
          ("camera_link", "camera_optical_frame", T_BODY_OPTICAL)]
ROBOT = {"frames.base": "base_link", "qos.image": "reliable", "qos.image_depth": 100,
         "queue_size": 100, "publish.depth_rate_hz": 1000.0, "publish.map_points": True,
         "map.rate_hz": 100.0, "map.voxel_size": 0.001, "map.max_points": 50,
         "odometry.position_variance": 0.25, "odometry.angular_velocity_variance": 0.5}


def static_msgs():
    return [transform_msg(p, c, T) for p, c, T in STATIC]


def expected_results(images):
    """The same tiny model and settings as the node (TINY_PARAMS), run in this process."""
    config = SessionConfig(num_scale_frames=TINY_PARAMS["session.num_scale_frames"],
                           window=TINY_PARAMS["cache.window"], rollover_keyframes=320,
                           preprocess=PreprocessConfig(width=TINY_PARAMS["input.width"]))
    session, _ = open_session(config, "tiny", precision="auto")
    from lingbot_ros.ros.intake.convert import image_to_array
    out = {}
    for msg in images:
        for r in session.push(image_to_array(msg), stamp_ns(msg.header.stamp), msg.encoding):
            out[r.stamp_ns] = r
    return out


def send(probe, images, gap_s: float = 0.02) -> None:
    probe.wait_for_image_subscriber()
    for msg in images:
        probe.publish_image(msg)
        time.sleep(gap_s)


def test_tf_tree_odometry_depth_and_map_on_a_robot(tmp_path, ros_env):
    images = good_images(FRAMES)
    stamps = [stamp_ns(m.header.stamp) for m in images]
    expected = expected_results(images)
    with NodeProcess(ros_env, tmp_path, ROBOT) as node, RobotProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()  # else the first frames wait for it (and are dropped)
        send(probe, images)
        probe.wait_until(lambda: len(probe.poses) >= FRAMES, 90, f"{FRAMES} poses")
        probe.wait_until(lambda: len(probe.snapshot("odometry")) >= FRAMES, 30, "odometry")
        assert probe.pose_stamps() == stamps

        # ~/pose: base_link in map = T_bo @ c2w @ T_bo^-1; the map is base_link at frame 0
        # (level), not the tilted camera.
        poses = {stamp_ns(g.msg.header.stamp): g.msg for g in probe.snapshot("poses")}
        for s in stamps:
            assert poses[s].header.frame_id == "map"
            want = T_BASE_OPTICAL @ expected[s].c2w @ np.linalg.inv(T_BASE_OPTICAL)
            np.testing.assert_allclose(matrix_of(poses[s].pose), want, atol=2e-5)
        np.testing.assert_allclose(matrix_of(poses[stamps[0]].pose), np.eye(4), atol=1e-6)

        # /tf: map -> odom (identity) and odom -> base_link per image stamp; nothing else: the
        # camera keeps its one parent (the robot's camera_link). (Each output has its own
        # topic: wait for all of them, not only for the poses.)
        def tf_count():
            return sum(1 for t in probe.published_transforms()
                       if t.child_frame_id == "base_link")
        probe.wait_until(lambda: tf_count() >= FRAMES, 30, lambda: f"{FRAMES} odom -> base_link "
                         f"transforms (got {tf_count()})")
        probe.wait_until(lambda: len(probe.snapshot("camera_info")) >= FRAMES, 30,
                         "camera_info per frame")
        by_child = {}
        for t in probe.published_transforms():
            by_child.setdefault((t.header.frame_id, t.child_frame_id), {})[
                stamp_ns(t.header.stamp)] = matrix_of(t.transform)
        assert set(by_child) == {("map", "odom"), ("odom", "base_link")}, set(by_child)
        assert sorted(by_child[("odom", "base_link")]) == stamps
        for s in stamps:
            np.testing.assert_allclose(by_child[("map", "odom")][s], np.eye(4), atol=1e-9)
            chain = by_child[("map", "odom")][s] @ by_child[("odom", "base_link")][s]
            np.testing.assert_allclose(chain, matrix_of(poses[s].pose), atol=1e-9)
        # The camera through the whole tree at frame 0: the tilt of the robot's TF.
        camera0 = by_child[("odom", "base_link")][stamps[0]] @ T_BASE_OPTICAL
        view = camera0[:3, 2]  # the optical axis in the map
        assert math.degrees(math.atan2(-view[2], math.hypot(view[0], view[1]))) == \
            pytest.approx(20.0, abs=1e-3)

        # ~/odometry: odom -> base_link, twist from consecutive poses in base_link, the
        # configured constant covariances.
        odom = {stamp_ns(g.msg.header.stamp): g.msg for g in probe.snapshot("odometry")}
        for prev, s in zip(stamps, stamps[1:]):
            o = odom[s]
            assert (o.header.frame_id, o.child_frame_id) == ("odom", "base_link")
            rel = np.linalg.inv(matrix_of(poses[prev].pose)) @ matrix_of(poses[s].pose)
            linear = rel[:3, 3] / ((s - prev) * 1e-9)
            got = o.twist.twist.linear
            np.testing.assert_allclose([got.x, got.y, got.z], linear, rtol=1e-6, atol=1e-6)
            pose_cov = np.array(o.pose.covariance).reshape(6, 6)
            twist_cov = np.array(o.twist.covariance).reshape(6, 6)
            np.testing.assert_allclose(np.diag(pose_cov), [0.25] * 3 + [1e-3] * 3)
            np.testing.assert_allclose(np.diag(twist_cov), [0.1] * 3 + [0.5] * 3)
            assert np.count_nonzero(pose_cov - np.diag(np.diag(pose_cov))) == 0
        first = odom[stamps[0]].twist.twist.linear
        assert (first.x, first.y, first.z) == (0.0, 0.0, 0.0)  # no previous pose

        # ~/camera_info at the input size, ~/depth + ~/depth/camera_info at the model's.
        probe.wait_until(lambda: len(probe.snapshot("depth")) >= FRAMES, 30, "depth images")
        probe.wait_until(lambda: len(probe.snapshot("depth_info")) >= FRAMES, 30,
                         "depth camera_info")
        infos = {stamp_ns(g.msg.header.stamp): g.msg for g in probe.snapshot("camera_info")}
        depth_infos = {stamp_ns(g.msg.header.stamp): g.msg
                       for g in probe.snapshot("depth_info")}
        for got in probe.snapshot("depth"):
            d = got.msg
            s = stamp_ns(d.header.stamp)
            r = expected[s]
            assert (d.encoding, d.header.frame_id) == ("32FC1", "camera_optical_frame")
            assert (d.height, d.width) == r.depth.shape and d.step == 4 * d.width
            depth = np.frombuffer(bytes(d.data), "<f4").reshape(d.height, d.width)
            np.testing.assert_allclose(depth, r.depth, rtol=1e-5, atol=1e-6)
            di = depth_infos[s]
            assert (di.width, di.height, di.header.frame_id) == (d.width, d.height,
                                                                 "camera_optical_frame")
            np.testing.assert_allclose(np.array(di.k).reshape(3, 3), r.K_model, rtol=1e-6)
            ci = infos[s]
            assert (ci.width, ci.height) == (80, 60)
            np.testing.assert_allclose(np.array(ci.k).reshape(3, 3), r.K, rtol=1e-6)
            np.testing.assert_allclose(np.array(ci.p).reshape(3, 4)[:, :3], r.K, rtol=1e-6)

        # ~/map_points: in map, never more than map.max_points (it coarsened to stay there).
        def last_map():
            maps = probe.snapshot("map_points")
            return maps[-1].msg if maps and maps[-1].msg.width else None
        cloud = probe.wait_until(last_map, 30, "a non-empty map")
        assert cloud.header.frame_id == "map" and 0 < cloud.width <= 50
        values = probe.wait_until(lambda: probe.last_diag() if int(
            probe.last_diag().get("map_coarsenings", 0)) > 0 else None, 15,
            lambda: f"map coarsenings in diagnostics ({probe.last_diag()})")
        assert int(values["map_points"]) <= 50
        assert values["tracked_frame"] == "base_link" and "monocular" in values["scale"]
        assert "identity" in values["tf_tree"]

        # ~/save_map writes it as PLY; ~/reset clears it (an empty map is published).
        from lingbot_ros_interfaces.srv import SaveMap
        out = tmp_path / "map.ply"
        reply = probe.call("save_map", SaveMap.Request(path=str(out)))
        assert reply.success and 0 < reply.num_points <= 50, reply.message
        header = out.read_bytes().split(b"end_header\n")[0].decode()
        assert f"element vertex {reply.num_points}" in header
        assert probe.call("reset").success
        probe.wait_until(lambda: probe.snapshot("map_points")[-1].msg.width == 0, 15,
                         "an empty map after the reset")
    assert node.poll() is not None


def test_the_extrinsic_is_waited_for_then_used(tmp_path, ros_env):
    """No base -> camera transform: frames are dropped (counted), ~/status says what is
    missing, /diagnostics turns ERROR after tf.wait_for_extrinsic_s; once the robot's TF
    arrives, poses flow."""
    params = {**ROBOT, "tf.wait_for_extrinsic_s": 0.5, "publish.diagnostics_rate_hz": 5.0}
    images = good_images(300)
    with NodeProcess(ros_env, tmp_path, params) as node, RobotProbe() as probe:
        probe.wait_active(node)
        send(probe, images[:5])
        probe.wait_until(lambda: probe.counter("dropped_waiting_for_tf") >= 5, 30,
                         lambda: f"5 frames dropped for TF ({probe.last_diag()})")
        waiting = [g.msg for g in probe.snapshot("state_changes")]
        assert waiting and all(m.state == m.STATE_INITIALIZING for m in waiting)
        assert "base_link -> camera_optical_frame" in waiting[-1].message

        _, message = probe.wait_until(
            lambda: probe.last_level() if probe.last_level()[0] == 2 else None, 20,
            lambda: f"an ERROR on /diagnostics (last: {probe.last_level()})")
        assert "base_link -> camera_optical_frame" in message
        assert "frames.base" in message  # says how to run a bare camera
        assert len(probe.poses) == 0

        probe.publish_static(static_msgs())
        # Frames keep coming (a camera); once the transform has reached the node, they give
        # poses. (A loaded machine may take a while to deliver it: no time bound here.)
        deadline = time.monotonic() + 90
        for msg in images[5:]:
            probe.publish_image(msg)
            if len(probe.poses) >= 10 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        probe.wait_until(lambda: len(probe.poses) >= 10, 30, "poses once the TF is there")
    assert "waiting for the transform base_link -> camera_optical_frame" in node.log()
    assert "TF found" in node.log()


def test_another_odometry_is_corrected_by_map_to_odom(tmp_path, ros_env):
    """tf.publish_odom_to_base false: wheel odometry owns odom -> base_link; the node
    publishes map -> odom = T_map_base @ (odom -> base_link at the image stamp)^-1."""
    params = {**ROBOT, "tf.publish_odom_to_base": False, "publish.map_points": False}
    images = good_images(8)
    stamps = [stamp_ns(m.header.stamp) for m in images]

    def wheel(s):  # the wheel odometry's drifting estimate: 1 m/s forward, a slow yaw
        t = (s - stamps[0]) * 1e-9
        yaw = 0.1 * t
        T = np.eye(4)
        T[:2, :2] = [[math.cos(yaw), -math.sin(yaw)], [math.sin(yaw), math.cos(yaw)]]
        T[0, 3] = t
        return T

    with NodeProcess(ros_env, tmp_path, params) as node, RobotProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        from tf2_msgs.msg import TFMessage
        # Wheel odometry at 100 Hz around the images' stamps, sent before them.
        wheel_stamps = range(stamps[0] - 50_000_000, stamps[-1] + 50_000_000, 10_000_000)
        probe.wait_until(lambda: probe.tf_pub.get_subscription_count() > 0, 30, "a /tf reader")
        for s in wheel_stamps:
            probe.tf_pub.publish(TFMessage(transforms=[
                transform_msg("odom", "base_link", wheel(s), s)]))
        time.sleep(0.5)
        send(probe, images)
        probe.wait_until(lambda: len(probe.poses) >= len(images), 90, "poses")
        poses = {stamp_ns(g.msg.header.stamp): matrix_of(g.msg.pose)
                 for g in probe.snapshot("poses")}

        def corrections():
            got = {stamp_ns(t.header.stamp): matrix_of(t.transform)
                   for t in probe.published_transforms()
                   if (t.header.frame_id, t.child_frame_id) == ("map", "odom")}
            return got if len(got) >= len(images) else None
        got = probe.wait_until(corrections, 30, "map -> odom per image")
        for s in stamps:
            # map -> odom -> base_link (the wheel's, at the stamp) lands on our estimate
            np.testing.assert_allclose(got[s] @ wheel(s), poses[s], atol=1e-6)
        # Only the wheel odometry (this probe) published odom -> base_link, nobody else.
        assert len([t for t in probe.published_transforms()
                    if t.child_frame_id == "base_link"]) == len(wheel_stamps)
        odom = probe.snapshot("odometry")[-1].msg
        assert (odom.header.frame_id, odom.child_frame_id) == ("map", "base_link")

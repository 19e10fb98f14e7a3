"""Metric scale over DDS (docs/node.md, "Scale"): the node on a robot with a scale source.

As in test_node_robot_tf.py, the tiny model runs in this test too (same settings) as the
oracle. ``depth``: the aligned sensor depth is k x the model's own predicted depth (the images
are the model's size, so preprocessing cuts nothing), so the node must lock at k; every output
must then equal the oracle's scaled through the written-out frame algebra
``T_map_base = T_bo . S_k(c2w) . T_bo^-1``. Before the lock nothing goes out in metres (TF,
odometry, pose, depth withheld; ~/status says "estimating scale n/N (depth)"), and once
locked ~/path and save_trajectory cover every frame in metres. ``fixed``: the same at once.
Bad depth input: counted by reason, a clear status and a WARN, never a crash nor a pose."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tests.ros.dds.test_node_robot_tf import (ROBOT, T_BASE_OPTICAL, expected_results, send,
                                          static_msgs)
from tests.ros.node_data import stamp_ns
from tests.ros.node_harness import NodeProcess, good_images
from tests.ros.robot_probe import RobotProbe, matrix_of
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

FRAMES = 10
W, H = 56, 42  # the tiny model's input size (input.width 56): no resize, no crop
K = 2.5  # metres per model unit of the simulated sensor
MIN_SAMPLES = 3
SCALE = {**ROBOT, "publish.map_points": False, "scale.min_samples": MIN_SAMPLES,
         "scale.min_pixels": 100}
DEPTH_TOPIC = "/aligned_depth"


class ScaleProbe(RobotProbe):
    """A robot probe that also reads ~/scale and publishes the aligned depth."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.scale: list = []

    def setup(self, node) -> None:
        super().setup(node)
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image
        from lingbot_ros_interfaces.msg import ScaleEstimate
        reliable = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        node.create_subscription(ScaleEstimate, f"{self._node_name}/scale",
                                 lambda m: self._on_message(self.scale, m), reliable)
        self.depth_pub = node.create_publisher(Image, DEPTH_TOPIC, reliable)

    def last_scale(self):
        """The last ~/scale message, or None."""
        got = self.snapshot("scale")
        return got[-1].msg if got else None

    def locked(self):
        for got in reversed(self.snapshot("scale")):
            if got.msg.state == got.msg.LOCKED:
                return got.msg
        return None


def depth_msg(depth_m: np.ndarray, stamp, encoding: str = "32FC1"):
    from sensor_msgs.msg import Image
    from std_msgs.msg import Header
    h, w = depth_m.shape
    data = np.ascontiguousarray(depth_m, "<f4").tobytes()
    return Image(header=Header(stamp=stamp, frame_id="camera_optical_frame"), height=h,
                 width=w, encoding=encoding, is_bigendian=0, step=len(data) // h, data=data)


def metric_base(c2w: np.ndarray, k: float) -> np.ndarray:
    """The written-out algebra: T_bo . S_k(c2w) . T_bo^-1."""
    S = np.array(c2w, float)
    S[:3, 3] *= k
    return T_BASE_OPTICAL @ S @ np.linalg.inv(T_BASE_OPTICAL)


def assert_metric_path(probe, stamps, expected, k: float, tol: float) -> None:
    """The last ~/path holds every frame of ``stamps``, each base pose in metres (k)."""
    def full_path():
        paths = probe.snapshot("paths")
        last = paths[-1].msg if paths else None
        return last if last is not None and len(last.poses) == len(stamps) else None
    path = probe.wait_until(full_path, 30, "a path of every frame")
    assert [stamp_ns(p.header.stamp) for p in path.poses] == stamps
    for p in path.poses:
        np.testing.assert_allclose(matrix_of(p.pose), metric_base(
            expected[stamp_ns(p.header.stamp)].c2w, k), atol=tol)


def send_depth(probe, images, expected, k: float = K) -> None:
    probe.wait_until(lambda: probe.depth_pub.get_subscription_count() > 0, 30,
                     "the node's aligned_depth subscription")
    for msg in images:
        probe.depth_pub.publish(depth_msg(k * expected[stamp_ns(msg.header.stamp)].depth,
                                          msg.header.stamp))
    # the node has them all before the first image: it counts what it received
    probe.wait_until(lambda: probe.counter("scale_depth_received") >= len(images), 30,
                     lambda: f"{len(images)} depth images received ({probe.last_diag()})")


@pytest.mark.parametrize("raw_take", [False, True])
def test_depth_source_locks_at_k_and_every_output_is_in_metres(tmp_path, ros_env, raw_take):
    """``raw_take``: the colour and depth images are read from their serialized bytes
    (topics.image_raw_take): the same outputs."""
    images = good_images(FRAMES, width=W, height=H)
    stamps = [stamp_ns(m.header.stamp) for m in images]
    expected = expected_results(images)
    assert all(r.crop.resized_hw == r.crop.input_hw == (H, W) for r in expected.values())
    params = {**SCALE, "scale.source": "depth", "topics.image_raw_take": raw_take}
    with NodeProcess(ros_env, tmp_path, params) as node, ScaleProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        send_depth(probe, images, expected)
        if raw_take:  # bytes that are no Image on the depth topic: refused and counted
            from rclpy.serialization import serialize_message
            probe.depth_pub.publish(serialize_message(depth_msg(
                np.ones((H, W), np.float32), images[0].header.stamp))[:-8])
            probe.wait_until(lambda: probe.counter("depth_rejected_decode_failed") == 1, 30,
                             lambda: f"the malformed depth counted ({probe.last_diag()})")
        # qos.image auto: a reliable depth publisher gets a reliable subscription (large
        # images lose fragments best effort), as the colour image does
        from rclpy.qos import ReliabilityPolicy
        probe.wait_until(lambda: [i.qos_profile.reliability for i in
                                  probe.node.get_subscriptions_info_by_topic(DEPTH_TOPIC)]
                         == [ReliabilityPolicy.RELIABLE], 30,
                         "the node's aligned depth input reliable (auto)")
        send(probe, images)
        locked = probe.wait_until(probe.locked, 90, "~/scale LOCKED")
        assert locked.source == "depth" and locked.samples >= MIN_SAMPLES
        assert locked.metres_per_unit == pytest.approx(K, rel=1e-3)
        assert locked.header.frame_id == "map" and math.isfinite(locked.sigma_log)
        published = stamps[MIN_SAMPLES - 1:]  # the third sample locks: frames 0, 1 withheld
        probe.wait_until(lambda: len(probe.poses) >= len(published), 90, "the metric poses")
        probe.wait_until(lambda: len(probe.snapshot("odometry")) >= len(published), 30,
                         "odometry")
        probe.wait_until(lambda: len(probe.snapshot("depth")) >= len(published), 30, "depth")
        assert probe.pose_stamps() == published

        # Before LOCKED: nothing in metres (nor in model units): INITIALIZING says why.
        withheld = set(stamps) - set(published)
        initializing = [g.msg for g in probe.snapshot("state_changes")
                        if stamp_ns(g.msg.header.stamp) in withheld
                        and "estimating scale" in g.msg.message]
        assert [m.message.split(": ", 1)[1] for m in initializing] == [
            f"estimating scale {i}/{MIN_SAMPLES} (depth)" for i in (1, 2)], initializing
        assert all(m.state == m.STATE_INITIALIZING for m in initializing)
        for store in ("odometry", "depth"):
            assert not withheld & {stamp_ns(g.msg.header.stamp) for g in probe.snapshot(store)}
        assert not withheld & {stamp_ns(t.header.stamp) for t in probe.published_transforms()}
        assert probe.snapshot("scale")[0].msg.state != probe.snapshot("scale")[0].msg.LOCKED

        # After: pose, TF and odometry through T_bo . S_k(c2w) . T_bo^-1.
        poses = {stamp_ns(g.msg.header.stamp): matrix_of(g.msg.pose)
                 for g in probe.snapshot("poses")}
        for s in published:
            np.testing.assert_allclose(poses[s], metric_base(expected[s].c2w, K), atol=1e-5)
        probe.wait_until(lambda: len([t for t in probe.published_transforms()
                                      if t.child_frame_id == "base_link"]) >= len(published),
                         30, "odom -> base_link per metric frame")
        tf = {stamp_ns(t.header.stamp): matrix_of(t.transform)
              for t in probe.published_transforms() if t.child_frame_id == "base_link"}
        assert sorted(tf) == published
        for s in published:
            np.testing.assert_allclose(tf[s], poses[s], atol=1e-9)
        odom = {stamp_ns(g.msg.header.stamp): g.msg for g in probe.snapshot("odometry")}
        for prev, s in zip(published, published[1:]):
            rel = np.linalg.inv(poses[prev]) @ poses[s]
            got = odom[s].twist.twist.linear
            np.testing.assert_allclose([got.x, got.y, got.z], rel[:3, 3] / ((s - prev) * 1e-9),
                                       rtol=1e-5, atol=1e-5)
            # the configured variance (m^2 now) plus the scale's uncertainty along the position
            cov = np.array(odom[s].pose.covariance).reshape(6, 6)
            t = poses[s][:3, 3]
            want = np.diag([0.25] * 3 + [1e-3] * 3)
            want[:3, :3] += locked.sigma_log ** 2 * np.outer(t, t)
            np.testing.assert_allclose(cov, want, rtol=1e-6, atol=1e-9)
        # ~/depth: REP-118 32FC1 metres = k x the model's depth (= the sensor's here)
        for got in probe.snapshot("depth"):
            d = got.msg
            depth = np.frombuffer(bytes(d.data), "<f4").reshape(d.height, d.width)
            np.testing.assert_allclose(depth, K * expected[stamp_ns(d.header.stamp)].depth,
                                       rtol=1e-5, atol=1e-5)

        # ~/path covers every frame, the withheld ones too, in metres.
        assert_metric_path(probe, stamps, expected, K, 1e-5)

        # save_trajectory: every frame in metres, the header says so.
        from lingbot_ros_interfaces.srv import SaveTrajectory
        out = tmp_path / "traj.tum"
        reply = probe.call("save_trajectory", SaveTrajectory.Request(path=str(out)))
        assert reply.success and reply.num_poses == FRAMES, reply.message
        text = out.read_text()
        assert "# units: m\n" in text and "# scale: depth, 2.5" in text
        rows = [line.split() for line in text.splitlines() if not line.startswith("#")]
        for row in rows:
            s = round(float(row[0]) * 1e9)
            s = min(stamps, key=lambda t: abs(t - s))
            np.testing.assert_allclose([float(v) for v in row[1:4]],
                                       metric_base(expected[s].c2w, K)[:3, 3], atol=1e-5)

        values = probe.wait_until(lambda: probe.last_diag() if probe.last_diag().get(
            "scale_state") == "LOCKED" else None, 15, "LOCKED on /diagnostics")
        assert float(values["scale_metres_per_unit"]) == pytest.approx(K, rel=1e-3)
        assert values["scale_source"] == "depth" and values["scale_units"] == "m"
    assert node.poll() is not None
    taken_raw = node.log().count("(taken as serialized bytes)")  # image and depth inputs
    assert taken_raw == (2 if raw_take else 0), node.log()[-3000:]


def test_fixed_scale_converts_from_the_first_frame(tmp_path, ros_env):
    images = good_images(6, width=W, height=H)
    stamps = [stamp_ns(m.header.stamp) for m in images]
    expected = expected_results(images)
    params = {**SCALE, "scale.source": "fixed", "scale.factor": 0.4}
    with NodeProcess(ros_env, tmp_path, params) as node, ScaleProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        send(probe, images)
        probe.wait_until(lambda: len(probe.poses) >= len(images), 90, "poses")
        assert probe.pose_stamps() == stamps
        for g in probe.snapshot("poses"):
            np.testing.assert_allclose(matrix_of(g.msg.pose), metric_base(
                expected[stamp_ns(g.msg.header.stamp)].c2w, 0.4), atol=1e-5)
        locked = probe.wait_until(probe.locked, 15, "~/scale")
        assert (locked.metres_per_unit, locked.sigma_log, locked.source) == (0.4, 0.0, "fixed")
    assert node.poll() is not None


def test_bad_depth_is_counted_and_reported_never_a_metric_output(tmp_path, ros_env):
    images = good_images(6, width=W, height=H)
    params = {**SCALE, "scale.source": "depth", "scale.stale_timeout_s": 0.5,
              "publish.diagnostics_rate_hz": 5.0}
    with NodeProcess(ros_env, tmp_path, params) as node, ScaleProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        probe.wait_until(lambda: probe.depth_pub.get_subscription_count() > 0, 30,
                         "the node's aligned_depth subscription")
        for i, msg in enumerate(images):
            bad = np.full((H, W), 1.0, np.float32)
            if i % 3 == 0:  # no depth encoding: the decoder refuses it (image_decode)
                probe.depth_pub.publish(depth_msg(bad, msg.header.stamp, "rgb8"))
            elif i % 3 == 1:  # wrong size
                probe.depth_pub.publish(depth_msg(bad[:10], msg.header.stamp))
            else:  # all invalid
                probe.depth_pub.publish(depth_msg(bad * np.nan, msg.header.stamp))
        probe.wait_until(lambda: probe.counter("scale_depth_received") >= 4
                         and probe.counter("depth_rejected_unknown_encoding") == 2, 30,
                         lambda: f"the depth images received ({probe.last_diag()})")
        send(probe, images)
        probe.wait_until(lambda: len([g for g in probe.snapshot("state_changes")
                                      if "estimating scale" in g.msg.message]) >= len(images),
                         90, "a status per frame")
        values = probe.wait_until(
            lambda: probe.last_diag() if sum(int(probe.last_diag().get(
                f"scale_rejected_{r}", 0)) for r in ("out_of_sync", "no_depth", "wrong_size",
                                                     "all_invalid")) >= len(images) else None,
            30, lambda: f"every rejection counted ({probe.last_diag()})")
        for reason in ("wrong_size", "all_invalid"):
            assert int(values[f"scale_rejected_{reason}"]) == 2, values
        # the frames whose depth was refused found none of their own
        assert int(values.get("scale_rejected_out_of_sync", 0)) + int(values.get(
            "scale_rejected_no_depth", 0)) == 2, values
        assert int(values["scale_depth_received"]) == 4, values
        assert values["scale_state"] == "UNKNOWN" and values["scale_units"] == "model units"
        messages = [g.msg.message for g in probe.snapshot("state_changes")]
        assert any("estimating scale 0/3 (depth, last rejection: wrong_size)" in m
                   for m in messages), messages
        level, message = probe.wait_until(
            lambda: probe.last_level() if probe.last_level()[0] == 1
            and "scale" in probe.last_level()[1] else None, 30,
            lambda: f"a WARN for the stale scale (last: {probe.last_level()})")
        assert "no sample for 0.5 s: all_invalid" in message, message
        assert len(probe.poses) == 0 and not probe.snapshot("odometry")
        assert not [t for t in probe.published_transforms() if t.child_frame_id == "base_link"]
        assert node.poll() is None  # still running
    assert node.poll() is not None


def odometry_msg(T: np.ndarray, stamp):
    from geometry_msgs.msg import Point, Quaternion
    from nav_msgs.msg import Odometry
    from std_msgs.msg import Header
    from lingbot_ros.geometry import rotation_to_quaternion
    x, y, z, w = (float(v) for v in rotation_to_quaternion(T[:3, :3]))
    msg = Odometry(header=Header(stamp=stamp, frame_id="odom"), child_frame_id="base_link")
    msg.pose.pose.position = Point(x=float(T[0, 3]), y=float(T[1, 3]), z=float(T[2, 3]))
    msg.pose.pose.orientation = Quaternion(x=x, y=y, z=z, w=w)
    return msg


class OdometryProbe(ScaleProbe):
    def setup(self, node) -> None:
        super().setup(node)
        from nav_msgs.msg import Odometry
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        self.odom_pub = node.create_publisher(
            Odometry, "/odom_in", QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))


def test_odometry_source_locks_at_k_with_the_lever_arm(tmp_path, ros_env):
    """Wheel odometry reports the base's true (metric) motion: k x the model's base motion,
    the camera 0.3 m ahead and 1 m up (the lever arm is in metres): the node locks at k."""
    images = good_images(FRAMES, width=W, height=H)
    stamps = [stamp_ns(m.header.stamp) for m in images]
    expected = expected_results(images)
    params = {**SCALE, "scale.source": "odometry"}
    with NodeProcess(ros_env, tmp_path, params) as node, OdometryProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        probe.wait_until(lambda: probe.odom_pub.get_subscription_count() > 0, 30,
                         "the node's odom_in subscription")
        for msg in images:
            s = stamp_ns(msg.header.stamp)
            probe.odom_pub.publish(odometry_msg(metric_base(expected[s].c2w, K),
                                                msg.header.stamp))
        probe.wait_until(lambda: probe.counter("scale_odometry_received") >= FRAMES, 30,
                         lambda: f"the odometry received ({probe.last_diag()})")
        send(probe, images)
        locked = probe.wait_until(probe.locked, 90, "~/scale LOCKED")
        assert locked.source == "odometry"
        assert locked.metres_per_unit == pytest.approx(K, rel=1e-3)
        # frame 0 alone gives no pair; frames 1, 2, 3 give the three samples
        published = stamps[MIN_SAMPLES:]
        probe.wait_until(lambda: len(probe.poses) >= len(published), 90, "the metric poses")
        assert probe.pose_stamps() == published
        for g in probe.snapshot("poses"):
            np.testing.assert_allclose(matrix_of(g.msg.pose), metric_base(
                expected[stamp_ns(g.msg.header.stamp)].c2w, K), atol=1e-5)
    assert node.poll() is not None

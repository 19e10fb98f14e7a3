"""The scale sources that read the robot's TF, over DDS (docs/node.md, "Scale").

As in test_node_scale.py, the tiny model runs in this test too (same settings) as the oracle.

``odometry`` with ``scale.odometry_input: tf``: another node (the probe, in this process)
owns odom -> base_link and publishes it on /tf at each image stamp, k x the model's own base
motion (the camera 0.3 m ahead and 1 m up: the lever arm is in metres); the node does not
publish odom -> base_link (``tf.publish_odom_to_base: false``: reading its own back would be
circular) and must lock at k, its poses the oracle's through ``T_bo . S_k(c2w) . T_bo^-1``.

``camera_height``: random weights predict no floor, so every frame is a counted rejection
(``no_floor`` with ``scale.camera_height_m`` set; ``no_ground_frame`` when the height comes
from TF and ``frames.ground`` is not on it), ~/status and /diagnostics say why, and nothing
goes out (no pose, odometry, TF of the base, depth): withheld until a lock that never comes.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.ros.dds.test_node_robot_tf import expected_results, send, static_msgs
from tests.ros.dds.test_node_scale import (FRAMES, H, K, MIN_SAMPLES, SCALE, W, ScaleProbe,
                                       metric_base)
from tests.ros.node_data import stamp_ns
from tests.ros.node_harness import NodeProcess, good_images
from tests.ros.robot_probe import matrix_of, transform_msg
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture


def publish_odometry_tf(probe, transforms: list) -> None:
    """odom -> base_link on /tf (volatile, as a robot's odometry): sent once the node's /tf
    reader matched (the probe's own reader counts too) and acknowledged by it, so the node
    has it before the images."""
    from rclpy.duration import Duration
    from tf2_msgs.msg import TFMessage
    probe.wait_until(lambda: probe.tf_pub.get_subscription_count() >= 2, 30,
                     "the node's /tf subscription")
    for t in transforms:
        probe.tf_pub.publish(TFMessage(transforms=[t]))
    assert probe.tf_pub.wait_for_all_acked(Duration(seconds=30)), "/tf was not acknowledged"


def test_odometry_from_another_nodes_tf_locks_at_k(tmp_path, ros_env):
    images = good_images(FRAMES, width=W, height=H)
    stamps = [stamp_ns(m.header.stamp) for m in images]
    expected = expected_results(images)
    params = {**SCALE, "scale.source": "odometry", "scale.odometry_input": "tf",
              "tf.publish_odom_to_base": False}
    with NodeProcess(ros_env, tmp_path, params) as node, ScaleProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        odometry = {s: metric_base(expected[s].c2w, K) for s in stamps}  # metres
        publish_odometry_tf(probe, [transform_msg("odom", "base_link", odometry[s], s)
                                    for s in stamps])
        send(probe, images)
        locked = probe.wait_until(probe.locked, 90, lambda: f"~/scale LOCKED "
                                  f"({probe.last_diag()})")
        assert locked.source == "odometry"
        assert locked.metres_per_unit == pytest.approx(K, rel=1e-3)
        # frame 0 alone gives no pair; frames 1, 2, 3 give the three samples
        published = stamps[MIN_SAMPLES:]
        probe.wait_until(lambda: len(probe.poses) >= len(published), 90, "the metric poses")
        assert probe.pose_stamps() == published
        poses = {stamp_ns(g.msg.header.stamp): matrix_of(g.msg.pose)
                 for g in probe.snapshot("poses")}
        for s in published:
            np.testing.assert_allclose(poses[s], metric_base(expected[s].c2w, K), atol=1e-5)
        # The node publishes map -> odom only: the correction that puts the other node's
        # odometry on its estimate (the identity here, the odometry being exact); never
        # odom -> base_link, which the other node owns.
        probe.wait_until(lambda: len([t for t in probe.published_transforms()
                                      if t.child_frame_id == "odom"]) >= len(published), 30,
                         "map -> odom per metric frame")
        mine = [t for t in probe.published_transforms() if t.header.frame_id != "odom"]
        assert {(t.header.frame_id, t.child_frame_id) for t in mine} == {("map", "odom")}
        for t in mine:
            np.testing.assert_allclose(matrix_of(t.transform), np.eye(4), atol=1e-5)
        values = probe.wait_until(lambda: probe.last_diag() if probe.last_diag().get(
            "scale_state") == "LOCKED" else None, 15, "LOCKED on /diagnostics")
        assert int(values["scale_odometry_received"]) >= MIN_SAMPLES + 1, values
    assert node.poll() is not None


@pytest.mark.parametrize("height_m, reason, says", [
    (1.2, "no_floor", "no ground plane within 10.0 deg of up below the camera"),
    (0.0, "no_ground_frame", "no ground frame 'base_footprint' in TF"),
], ids=["configured_height", "ground_frame_missing"])
def test_camera_height_without_a_floor_is_counted_and_nothing_metric_goes_out(
        tmp_path, ros_env, height_m, reason, says):
    images = good_images(6, width=W, height=H)
    # no output reads the depth: the frames carry it only because the source needs it
    params = {**SCALE, "scale.source": "camera_height", "scale.camera_height_m": height_m,
              "scale.stale_timeout_s": 0.5, "publish.diagnostics_rate_hz": 5.0,
              "publish.depth_rate_hz": 0.0}
    with NodeProcess(ros_env, tmp_path, params) as node, ScaleProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()  # the robot's TF, without base_footprint
        send(probe, images)
        probe.wait_until(lambda: len([g for g in probe.snapshot("state_changes")
                                      if "estimating scale" in g.msg.message]) >= len(images),
                         90, "a status per frame")
        values = probe.wait_until(
            lambda: probe.last_diag() if int(probe.last_diag().get(
                f"scale_rejected_{reason}", 0)) >= len(images) else None,
            30, lambda: f"every frame rejected as {reason} ({probe.last_diag()})")
        assert int(values[f"scale_rejected_{reason}"]) == len(images), values
        assert not [k for k in values if k.startswith("scale_rejected_") and
                    not k.endswith(reason)], values  # the depth came: not no_depth
        assert values["scale_state"] == "UNKNOWN" and values["scale_units"] == "model units"
        assert values["scale_last_rejection"] == reason
        assert says in values["scale_last_rejection_detail"], values
        messages = [g.msg.message for g in probe.snapshot("state_changes")]
        assert any(f"estimating scale 0/{MIN_SAMPLES} (camera_height, last rejection: "
                   f"{reason})" in m for m in messages), messages
        level, message = probe.wait_until(
            lambda: probe.last_level() if probe.last_level()[0] == 1
            and "scale" in probe.last_level()[1] else None, 30,
            lambda: f"a WARN for the stale scale (last: {probe.last_level()})")
        assert f"no sample for 0.5 s: {reason} (" in message and says in message, message
        # withheld: nothing in metres, nor in model units
        assert len(probe.poses) == 0 and not probe.snapshot("odometry")
        assert not probe.snapshot("depth")
        assert not [t for t in probe.published_transforms() if t.child_frame_id == "base_link"]
        locked = [g for g in probe.snapshot("scale") if g.msg.state == g.msg.LOCKED]
        assert not locked and probe.snapshot("scale")[-1].msg.source == "camera_height"
        assert node.poll() is None  # still running
    assert node.poll() is not None

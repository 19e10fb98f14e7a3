"""The odometry input over DDS (issue 32): a NaN pose and a zero quaternion on odom_in before
the first image are counted (``scale_rejected_non_finite``) at once, and the good odometry
around them still locks the scale at k. Before, both were kept until the first frame, then
dropped uncounted (a zero quaternion was even taken as no rotation)."""
from __future__ import annotations

import math

import pytest

from tests.ros.dds.test_node_robot_tf import expected_results, send, static_msgs
from tests.ros.dds.test_node_scale import (FRAMES, H, K, SCALE, W, OdometryProbe, metric_base,
                                       odometry_msg)
from tests.ros.node_data import header, stamp_ns
from tests.ros.node_harness import NodeProcess, good_images
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture


def test_unusable_odometry_before_the_first_image_is_counted(tmp_path, ros_env):
    import numpy as np
    images = good_images(FRAMES, width=W, height=H)
    expected = expected_results(images)
    first_ns = stamp_ns(images[0].header.stamp)
    nan_pose = odometry_msg(np.eye(4), header(first_ns - 10_000_000).stamp)
    nan_pose.pose.pose.position.x = math.nan
    zero_quaternion = odometry_msg(np.eye(4), header(first_ns - 5_000_000).stamp)
    zero_quaternion.pose.pose.orientation.w = 0.0
    with NodeProcess(ros_env, tmp_path, {**SCALE, "scale.source": "odometry"}) as node, \
            OdometryProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        probe.wait_until(lambda: probe.odom_pub.get_subscription_count() > 0, 30,
                         "the node's odom_in subscription")
        probe.odom_pub.publish(nan_pose)
        probe.odom_pub.publish(zero_quaternion)
        for msg in images:
            probe.odom_pub.publish(odometry_msg(
                metric_base(expected[stamp_ns(msg.header.stamp)].c2w, K), msg.header.stamp))
        values = probe.wait_until(
            lambda: (v := probe.last_diag()).get("scale_odometry_received") == str(FRAMES + 2)
            and v, 30, lambda: f"the odometry received ({probe.last_diag()})")
        assert values.get("received", "0") == "0"  # no image yet
        assert values.get("scale_rejected_non_finite") == "2", values
        assert values["scale_last_rejection_detail"] == \
            "odometry pose is not a finite rigid transform"
        send(probe, images)
        locked = probe.wait_until(probe.locked, 90, "~/scale LOCKED")
        assert locked.metres_per_unit == pytest.approx(K, rel=1e-3)
        assert probe.counter("scale_rejected_non_finite") == 2  # not again at the first frame

"""qos.image auto: the node subscribes reliable while every image publisher is reliable (no
frame lost to a dropped fragment), best effort as soon as one is best effort (only that
matches it), and follows the publishers as they come and go; over DDS."""
from __future__ import annotations

import time

from rclpy.qos import QoSProfile, ReliabilityPolicy

from lingbot_ros.ros.intake.image_input import fitting_reliability
from tests.ros.node_harness import IMAGE_TOPIC, NodeProcess, Probe, good_images
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture


def test_fitting_reliability():
    R, B = ReliabilityPolicy.RELIABLE, ReliabilityPolicy.BEST_EFFORT
    assert fitting_reliability([])[0] == B
    assert fitting_reliability([R, R])[0] == R
    assert fitting_reliability([R, B])[0] == B
    assert "best effort" in fitting_reliability([B])[1]


def node_subscription(probe) -> ReliabilityPolicy:
    infos = [i for i in probe.node.get_subscriptions_info_by_topic(IMAGE_TOPIC)
             if i.node_name == "lingbot_ros"]
    return infos[0].qos_profile.reliability if len(infos) == 1 else None


def test_auto_follows_the_publishers(tmp_path, ros_env):
    from sensor_msgs.msg import Image
    with NodeProcess(ros_env, tmp_path, {"publish.diagnostics_rate_hz": 5.0}) as node, \
            Probe() as probe:
        probe.wait_active(node)
        # The probe's image publisher is reliable (image_transport's default).
        probe.wait_until(lambda: node_subscription(probe) == ReliabilityPolicy.RELIABLE, 30,
                         lambda: f"a reliable subscription (now {node_subscription(probe)})")
        probe.wait_until(lambda: probe.last_diag().get("image_qos", "").startswith(
            "reliable (auto: every publisher"), 30, lambda: f"{probe.last_diag()}")
        # A camera streams: the first frames may go out before this publisher has matched
        # the node's new subscription (discovery after the re-subscription); later ones come.
        deadline = time.monotonic() + 60
        for msg in good_images(300):
            probe.publish_image(msg)
            if len(probe.poses) >= 4 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        probe.wait_until(lambda: len(probe.poses) >= 4, 30, "4 poses over the reliable input")

        # A best-effort camera joins: only best effort matches it.
        best_effort = probe.node.create_publisher(
            Image, IMAGE_TOPIC, QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT))
        probe.wait_until(lambda: node_subscription(probe) == ReliabilityPolicy.BEST_EFFORT,
                         30, lambda: f"a best-effort subscription (now "
                         f"{node_subscription(probe)})")
        probe.wait_until(lambda: "a publisher is best effort" in probe.last_diag().get(
            "image_qos", ""), 30, lambda: f"{probe.last_diag()}")
        probe.node.destroy_publisher(best_effort)  # it leaves: reliable again
        probe.wait_until(lambda: node_subscription(probe) == ReliabilityPolicy.RELIABLE, 30,
                         lambda: f"reliable again (now {node_subscription(probe)})")
    assert "image input /camera/image_raw: now best effort" in node.log()

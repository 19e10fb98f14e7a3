"""``publish.depth_rate_hz: 0`` is off, over DDS: every image gives its pose (the anchor frames
included) and no ~/depth is published, nor advertised. (It divided by zero while publishing
the anchor frames: with 4 anchors, 10 images gave 6 poses.)"""
from __future__ import annotations

from tests.ros.dds.test_node_pause_failed import send
from tests.ros.image_fates import wait_every_image_counted
from tests.ros.node_harness import NODE, NodeProcess, good_images, stamp_ns
from tests.ros.robot_probe import RobotProbe
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

PARAMS = {"qos.image": "reliable", "qos.image_depth": 100, "queue_size": 100,
          "publish.diagnostics_rate_hz": 5.0, "session.num_scale_frames": 4,
          "publish.depth_rate_hz": 0.0}


def test_depth_rate_zero_publishes_every_pose_and_no_depth(tmp_path, ros_env):
    images = good_images(10)
    with NodeProcess(ros_env, tmp_path, PARAMS) as node, RobotProbe() as probe:
        probe.wait_active(node)
        send(probe, images)
        probe.wait_until(lambda: len(probe.poses) >= len(images), 60,
                         lambda: f"{len(images)} poses (got {len(probe.poses)})")
        assert probe.pose_stamps() == [stamp_ns(m.header.stamp) for m in images]
        # The camera_info of each frame went out beside its pose: the frame's outputs are
        # all out, and no ~/depth (nor ~/depth/camera_info) came among them.
        probe.wait_until(lambda: len(probe.camera_info) >= len(images), 30,
                         "each frame's ~/camera_info")
        assert probe.snapshot("depth") == [] and probe.snapshot("depth_info") == []
        assert probe.node.count_publishers(f"{NODE}/depth") == 0
        assert probe.node.count_publishers(f"{NODE}/depth/camera_info") == 0
        counted = wait_every_image_counted(probe, len(images))
        assert counted == {"processed": len(images)}, counted
        assert node.poll() is None
    assert "ZeroDivisionError" not in node.log()

"""RigIO (ros/intake/rig.py) on a real rclpy node (no DDS traffic): built from a rig's
settings, it makes each camera's subscription and ``~/<camera>/`` topics, the fused ones and
one map; images offered per camera (as their callbacks do) come out as each camera's pose
and status, one fused odom -> base_link, and both cameras' points in the one map."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from lingbot_ros.ros.intake.rig import RigIO, fusion_config
from lingbot_ros.ros.params.declare import build_settings
from lingbot_ros.ros.tf.tree import TransformTree
from tests.ros.node_data import good_images
from tests.ros.rig_streams import rclpy_node, rig_session

NODE = "rig_io"
PARAMS = {"frames.base": "base_link", "input.width": 56, "input.height": 42,
          "scale.source": "fixed", "cameras.names": "front,rear", "cameras.primary": "rear",
          "cameras.front.image_topic": "/front/image_raw", "cameras.front.frame": "front_opt",
          "cameras.rear.image_topic": "/rear/image_raw", "cameras.rear.frame": "rear_opt",
          "publish.map_points": True, "map.rate_hz": 100.0, "publish.points_stride": 8,
          "publish.depth_rate_hz": 0.0, "cameras.failback_frames": 7}


@pytest.fixture
def ros_node():
    with rclpy_node(NODE) as node:
        yield node


def rig_tree() -> TransformTree:
    tree = TransformTree()
    for child, x in (("front_opt", 0.2), ("rear_opt", -0.2)):
        T = np.eye(4)
        T[:3, 3] = (x, 0.0, 0.5)
        tree.set_transform("base_link", child, T, 0, static=True)
    return tree


def recorded(publisher) -> list:
    sent, real = [], publisher.publish
    publisher.publish = lambda msg: (sent.append(msg), real(msg))
    return sent


def test_the_fusion_settings_come_from_the_parameters():
    config = fusion_config(build_settings(PARAMS).node.rig)
    assert config.names == ("front", "rear") and config.primary_name == "rear"
    assert config.failback_frames == 7 and config.stall_timeout_s == 1.0


def test_a_rig_on_a_node_publishes_per_camera_and_one_fused_pose(ros_node):
    settings = build_settings(PARAMS)
    clock = iter(np.arange(0.0, 100.0, 0.001)).__next__
    io = RigIO(ros_node, settings, rig_session(("front", "rear")), rig_tree(),
               log=logging.getLogger("test_rig_io"), clock=clock)
    try:
        assert [i.topic for i in io.inputs] == ["/front/image_raw", "/rear/image_raw"]
        front, rear = io.units
        assert front.outputs.pose.topic_name == f"/{NODE}/front/pose"
        assert rear.status.status.topic_name == f"/{NODE}/rear/status"
        assert io.fused.tf.topic_name == "/tf" and front.outputs.tf is None
        assert front.outputs.map is io.map and rear.outputs.map is io.map
        poses = {u.name: recorded(u.outputs.pose) for u in io.units}
        statuses = {u.name: recorded(u.status.status) for u in io.units}
        tfs = recorded(io.fused.tf)
        images = good_images(4)
        for msg in images:
            io.offer("front", msg)
            io.offer("rear", msg)
            assert io.worker.run_once(timeout=0)
        assert len(poses["front"]) == len(poses["rear"]) == 4
        assert poses["front"][0].header.frame_id == "map"
        assert [m.state for m in statuses["rear"]][-1] == statuses["rear"][-1].STATE_TRACKING
        assert statuses["front"][-1].frames_received == 4
        child = {(t.header.frame_id, t.child_frame_id) for m in tfs for t in m.transforms}
        assert child == {("odom", "base_link"), ("map", "odom")} and len(tfs) == 4
        assert io.worker.rig_facts.source == "rear"  # cameras.primary
        assert io.map.info()["map_points"] > 0
        io.worker.reset("rear")
        assert io.worker.rig_facts.source == "front" and io.worker.rig_facts.failovers == 1
        with pytest.raises(ValueError, match="no camera 'left'"):
            io.offer("left", images[0])
    finally:
        io.destroy()


def test_no_rig_no_rig_io(ros_node):
    with pytest.raises(ValueError, match="needs a rig"):
        RigIO(ros_node, build_settings({}), None, None, log=logging.getLogger("x"))


def test_pause_check_and_a_whole_rig_reset(ros_node):
    """``paused``: each image dropped on arrival (counted); ``check``: the rig's diagnostics
    with each camera's taken frames; ``reset()``: every camera, the fused pose and the map;
    a camera's camera_info topic is subscribed."""
    settings = build_settings({**PARAMS, "cameras.front.camera_info_topic": "/front/info"})
    paused = [False]
    clock = iter(np.arange(0.0, 100.0, 0.001)).__next__
    io = RigIO(ros_node, settings, rig_session(("front", "rear")), rig_tree(),
               log=logging.getLogger("test_rig_io"), clock=clock, paused=lambda: paused[0])
    try:
        assert [s.topic_name for s in io._subs] == ["/front/info"]
        images = good_images(3)
        for msg in images:
            io.offer("front", msg)
            io.offer("rear", msg)
            assert io.worker.run_once(timeout=0)
        level, message, values = io.check()
        assert values["front_taken"] == values["rear_taken"] == 3
        assert values["rig_source"] == "rear" and level == 0, message
        assert io.map.info()["map_points"] > 0
        paused[0] = True
        assert not io.offer("front", images[0])
        assert io.units[0].telemetry.snapshot().counters["dropped_paused"] == 1
        paused[0] = False
        io.offer("rear", images[0])
        assert io.drop_queued() == 1
        assert io.units[1].telemetry.snapshot().counters["dropped_paused"] == 1
        io.reset()
        assert io.map.info()["map_points"] == 0 and io.worker.rig_facts.source == ""
    finally:
        io.destroy()

"""The node's lifecycle driven over lifecycle_msgs services from another process, and
autostart with invalid parameters."""
from __future__ import annotations

import time

import pytest

from tests.ros.node_data import IMAGE_TOPIC
from tests.ros.node_harness import (ACTIVATE, ACTIVE, CLEANUP, CONFIGURE, DEACTIVATE,
                                    INACTIVE, SHUTDOWN_FROM, UNCONFIGURED,
                                    NodeProcess, Probe, good_images, stamp_ns)
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

PARAMS = {"autostart": False, "qos.image": "reliable", "qos.image_depth": 50,
          "queue_size": 50}


def publish(probe, images) -> None:
    for msg in images:
        probe.publish_image(msg)
        time.sleep(0.02)


def assert_no_image_intake(probe) -> None:
    """The node (discovered: it answered a service) has no subscription on the image topic:
    an unconfigured or inactive node takes no images (the rest is checked after activate:
    no pose, and the node's count of received images)."""
    assert probe.image_pub.get_subscription_count() == 0
    topics = dict(probe.node.get_subscriber_names_and_types_by_node("lingbot_ros", "/"))
    assert IMAGE_TOPIC not in topics, sorted(topics)


def received_by(probe, stamp: int) -> int:
    """frames_received (the node's count of images that reached it) in the status of the
    frame of ``stamp``."""
    got = probe.wait_until(lambda: next((g.msg for g in probe.snapshot("status")
                                          if stamp_ns(g.msg.header.stamp) == stamp), None),
                           10, f"the status of the frame {stamp}")
    return got.frames_received


def test_lifecycle_transitions(tmp_path, ros_env):
    images = good_images(30)
    stamps = [stamp_ns(m.header.stamp) for m in images]
    with NodeProcess(ros_env, tmp_path, PARAMS) as node, Probe() as probe:
        assert probe.get_state(timeout=60) == (UNCONFIGURED, "unconfigured")
        assert_no_image_intake(probe)  # none before activate

        assert probe.change_state(CONFIGURE)
        assert probe.get_state() == (INACTIVE, "inactive")
        # Answered: the probe knows the readers configure made (the services' ones). Inactive,
        # the node has no intake: no image subscription among them.
        reply = probe.call("get_cache_info")
        assert reply.success and reply.info.frames_committed == 0, reply.message
        assert_no_image_intake(probe)
        publish(probe, images[:5])  # inactive: the node must never see these

        assert probe.change_state(ACTIVATE)
        assert probe.get_state() == (ACTIVE, "active")
        probe.wait_for_image_subscriber()
        publish(probe, images[5:15])
        # images[14], published last, is the sentinel: poses of the inactive images would
        # come before its pose; the node's own counter says whether it received them at all.
        assert probe.wait_for_pose_of(stamps[14]) == stamps[5:15]
        assert received_by(probe, stamps[14]) == 10, "images received while inactive"

        assert probe.change_state(DEACTIVATE)
        assert probe.get_state() == (INACTIVE, "inactive")
        probe.wait_until(lambda: probe.image_pub.get_subscription_count() == 0, 30,
                         "the image subscription to go away")
        assert_no_image_intake(probe)
        publish(probe, images[15:20])  # inactive again: never seen (checked after activate)
        reply = probe.call("get_cache_info")  # inactive: the session keeps its state
        assert reply.success and reply.info.frames_committed == 10, reply

        # Active again: the stream goes on where it was (frame indices continue).
        assert probe.change_state(ACTIVATE)
        assert probe.get_state() == (ACTIVE, "active")
        probe.wait_for_image_subscriber()
        publish(probe, images[20:25])
        # images[24]: the sentinel after the second inactive spell
        assert probe.wait_for_pose_of(stamps[24]) == stamps[5:15] + stamps[20:25]
        assert received_by(probe, stamps[24]) == 15, "images received while inactive"
        probe.wait_until(lambda: probe.status and probe.status[-1].msg.frame_index == 14, 10,
                         "the status of frame 14")
        assert probe.change_state(DEACTIVATE)
        assert probe.get_state() == (INACTIVE, "inactive")

        # Cleanup frees the session: the services say so.
        assert probe.change_state(CLEANUP)
        assert probe.get_state() == (UNCONFIGURED, "unconfigured")
        reply = probe.call("get_cache_info")
        assert not reply.success and "not configured" in reply.message, reply
        assert not probe.call("reset").success
        reply = probe.call("save_trajectory", _save_request(tmp_path / "t.tum"))
        assert not reply.success and not (tmp_path / "t.tum").exists()

        # Configure again works (services created once, answering again).
        assert probe.change_state(CONFIGURE)
        reply = probe.call("get_cache_info")
        assert reply.success and reply.info.frames_committed == 0, reply

        assert probe.change_state(SHUTDOWN_FROM[INACTIVE])
        assert node.wait(30) == 0, node.log()[-3000:]  # finalized: the process ends
    log = node.log()
    assert "Traceback" not in log and "terminate called" not in log, log[-3000:]
    assert "[ERROR]" not in log, log[-3000:]


def _save_request(path):
    from lingbot_ros_interfaces.srv import SaveTrajectory
    return SaveTrajectory.Request(path=str(path))


@pytest.mark.parametrize("name, value, why", [
    ("keyframes.policy", "bogus", "must be one of"),  # our choice list
    ("cache.window", 0, ""),  # refused by the descriptor's integer range at declaration
    ("input.width", 100, "step"),  # refused by the descriptor's step (14) at declaration
    ("map.max_points", 4, ""),  # the descriptor's range: the voxel map needs 8
    ("topics.camera_info", "camera info", "not a valid topic name"),  # built settings
])
def test_invalid_parameter_exits_with_status_1(tmp_path, ros_env, name, value, why):
    with NodeProcess(ros_env, tmp_path, {name: value}) as node:
        rc = node.wait(60)
        err = node.stderr()
    assert rc == 1, err[-3000:]
    assert f"'{name}'" in err and why in err, err[-3000:]
    assert "configure failed" in err and "Traceback" not in err, err[-3000:]


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_signal_while_processing_exits_cleanly(tmp_path, ros_env, sig):
    """Ctrl-C (or a launch system's SIGTERM) in the middle of a frame: the worker is stopped
    before the node is torn down, the process exits 0 without a crash."""
    import signal
    import threading

    images = good_images(60, width=160, height=120)
    params = {"input.width": 112, "qos.image": "reliable", "queue_size": 4}
    with NodeProcess(ros_env, tmp_path, params) as node, Probe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        stop = threading.Event()

        def stream():
            for msg in images:
                if stop.is_set():
                    return
                probe.publish_image(msg)
                time.sleep(0.01)
        streamer = threading.Thread(target=stream, daemon=True)
        streamer.start()
        try:
            probe.wait_until(lambda: len(probe.poses) >= 5, 60, "poses")
            node.proc.send_signal(getattr(signal, sig))  # images still arriving
            rc = node.wait(30)
        finally:
            stop.set()
            streamer.join(timeout=10)
    log = node.log()
    assert rc == 0, log[-3000:]
    assert "Traceback" not in log and "terminate called" not in log, log[-3000:]
    assert "[ERROR]" not in log, log[-3000:]

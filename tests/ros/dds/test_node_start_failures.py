"""Start failures and parameters, as a robot integrator meets them (issue 23): a failure in
configure or activate is logged at ERROR and ends an autostarted process with status 1, or
leaves a managed node unconfigured and configurable again; values are checked when set;
``use_sim_time`` can be set; a cleanup clears ~/pause."""
from __future__ import annotations

import pytest

from tests.ros.dds.test_node_signals import set_parameter
from tests.ros.node_harness import (ACTIVATE, ACTIVE, CLEANUP, CONFIGURE, DEACTIVATE, INACTIVE,
                                    UNCONFIGURED, NodeProcess, Probe, good_images)
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

MANAGED = {"autostart": False, "qos.image": "reliable", "queue_size": 20}


@pytest.mark.parametrize("name, value, says", [
    # passed the old checks and configured, then made activate raise: a silent zombie
    ("map.max_points", 4, "map.max_points"),  # the voxel map needs 8: the descriptor says so
    ("topics.camera_info", "camera info", "not a valid topic name"),  # malformed
    # a valid name, but the node's own ~/pose (another type): only activate can find out
    ("topics.camera_info", "~/pose", "activate failed"),
])
def test_a_start_that_cannot_configure_or_activate_exits_1_with_the_reason(
        tmp_path, ros_env, name, value, says):
    with NodeProcess(ros_env, tmp_path, {name: value, "publish.map_points": True}) as node:
        rc = node.wait(60)
        log = node.log()
    assert rc == 1, log[-3000:]
    errors = [line for line in log.splitlines() if "[ERROR]" in line]
    assert any(says in line for line in errors), log[-3000:]
    assert "exiting with status 1" in log and "Traceback" not in log, log[-3000:]


def test_a_failed_activate_leaves_a_node_that_can_be_configured_again(tmp_path, ros_env):
    with NodeProcess(ros_env, tmp_path, {**MANAGED, "topics.camera_info": "~/pose"}) as node, \
            Probe() as probe:
        assert probe.get_state(timeout=60) == (UNCONFIGURED, "unconfigured")
        assert probe.change_state(CONFIGURE)
        assert not probe.change_state(ACTIVATE)
        assert probe.get_state() == (UNCONFIGURED, "unconfigured")
        assert "activate failed" in node.log() and "[ERROR]" in node.log()
        fixed = set_parameter(probe, "topics.camera_info", "camera_info")
        assert fixed.successful, fixed.reason  # unconfigured again: parameters can change
        assert probe.change_state(CONFIGURE)
        assert probe.change_state(ACTIVATE)
        assert probe.get_state() == (ACTIVE, "active")
        probe.wait_for_image_subscriber()
        for msg in good_images(3):
            probe.publish_image(msg)
        probe.wait_until(lambda: len(probe.poses) >= 3, 60, "3 poses")
        node.interrupt()
        assert node.wait(30) == 0
    assert "Traceback" not in node.log()


@pytest.mark.parametrize("name, value, says", [
    ("input.width", 225, "step"),  # in [14, 4088] but not a multiple of 14
    ("map.max_points", 4, "map.max_points"),
    ("topics.camera_info", "camera info", "not a valid topic name"),
    ("frames.odom", "map", "odom_frame must differ from map_frame"),  # one value vs another
])
def test_values_are_checked_when_set(tmp_path, ros_env, name, value, says):
    with NodeProcess(ros_env, tmp_path, MANAGED) as node, Probe() as probe:
        assert probe.get_state(timeout=60) == (UNCONFIGURED, "unconfigured")
        result = set_parameter(probe, name, value)
        assert not result.successful, f"{name}: {value!r} was accepted"
        assert says in result.reason, result.reason
        node.interrupt()
        assert node.wait(30) == 0


def test_use_sim_time_can_be_set_while_active(tmp_path, ros_env):
    from builtin_interfaces.msg import Time
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    params = {"publish.diagnostics_rate_hz": 5.0}
    with NodeProcess(ros_env, tmp_path, params) as node, Probe() as probe:
        probe.wait_active(node)
        result = set_parameter(probe, "use_sim_time", True)
        assert result.successful, result.reason
        # The node's clock follows /clock now: /diagnostics carries its stamps.
        clock_pub = probe.node.create_publisher(
            Clock, "/clock", QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))

        def diag_at_sim_time():
            clock_pub.publish(Clock(clock=Time(sec=4242, nanosec=0)))
            return any(g.msg.header.stamp.sec == 4242 for g in probe.snapshot("diagnostics"))
        probe.wait_until(diag_at_sim_time, 60, "/diagnostics stamped with the sim time",
                         interval=0.2)
        refused = set_parameter(probe, "cache.window", 9)  # ours still apply at configure
        assert not refused.successful and "apply at configure" in refused.reason
        node.interrupt()
        assert node.wait(30) == 0


def test_a_cleanup_clears_the_pause(tmp_path, ros_env):
    from std_srvs.srv import SetBool

    with NodeProcess(ros_env, tmp_path, MANAGED) as node, Probe() as probe:
        probe.clients["pause"] = probe.node.create_client(SetBool, "/lingbot_ros/pause")
        assert probe.get_state(timeout=60) == (UNCONFIGURED, "unconfigured")
        assert probe.change_state(CONFIGURE) and probe.change_state(ACTIVATE)
        assert probe.call("pause", SetBool.Request(data=True)).success
        assert probe.change_state(DEACTIVATE) and probe.change_state(CLEANUP)
        assert probe.change_state(CONFIGURE)
        assert probe.get_state() == (INACTIVE, "inactive")
        assert probe.change_state(ACTIVATE)
        probe.wait_for_image_subscriber()
        for msg in good_images(3):
            probe.publish_image(msg)
        probe.wait_until(lambda: len(probe.poses) >= 3, 60,
                         lambda: f"3 poses (a pause survived the cleanup? "
                                 f"{probe.last_diag().get('paused')})")
        node.interrupt()
        assert node.wait(30) == 0

"""The health monitor's facts over DDS (issue 23): a lost external odometry, a stalled sim
clock (diagnostics on the steady clock), a changed base -> camera extrinsic, the status's
name under a namespace, and ~/status once per image the worker takes."""
from __future__ import annotations

import time

import numpy as np
import pytest

from tests.ros.dds.test_node_robot_tf import ROBOT, STATIC, static_msgs
from tests.ros.node_harness import (TINY_PARAMS, NodeProcess, Probe, good_images, header,
                                    stamp_ns)
from tests.ros.robot_probe import RobotProbe, transform_msg
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

FAST_DIAG = {"publish.diagnostics_rate_hz": 5.0, "diagnostics.stall_timeout_s": 1.0}
WARN, ERROR = 1, 2
ANCHORS = TINY_PARAMS["session.num_scale_frames"]  # the test node's anchor frames


def stream(probe, images, until, timeout: float, gap_s: float = 0.05) -> None:
    """Publish ``images`` one by one until ``until()``; fail after ``timeout`` s."""
    probe.wait_for_image_subscriber()
    deadline = time.monotonic() + timeout
    for msg in images:
        if until():
            return
        assert time.monotonic() < deadline, "timed out streaming"
        probe.publish_image(msg)
        time.sleep(gap_s)
    probe.wait_until(until, max(1.0, deadline - time.monotonic()), "the condition")


def test_lost_external_odometry_is_an_error_and_shows_on_status(tmp_path, ros_env):
    """tf.publish_odom_to_base false and no odom -> base_link on /tf: map -> odom cannot be
    published for any frame. /diagnostics says so (WARN, then ERROR after
    diagnostics.stall_timeout_s) and each TRACKING status carries the reason."""
    params = {**ROBOT, **FAST_DIAG, "tf.publish_odom_to_base": False,
              "publish.map_points": False}
    images = good_images(200)
    with NodeProcess(ros_env, tmp_path, params) as node, RobotProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()

        def errored():
            level, message = probe.last_level()
            return level == ERROR and "map -> odom not published" in message
        stream(probe, images, errored, 120)
        _, message = probe.last_level()
        assert "odom -> base" in message and "tf.publish_odom_to_base" in message, message
        assert probe.counter("tf_failures") > 0
        tracking = [g.msg for g in probe.snapshot("status")]
        assert tracking and all("map -> odom not published" in m.message for m in tracking)


def test_a_stalled_sim_clock_is_reported_and_diagnostics_go_on(tmp_path, ros_env):
    from builtin_interfaces.msg import Time
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    with NodeProcess(ros_env, tmp_path, {**FAST_DIAG, "use_sim_time": True}) as node, \
            Probe() as probe:
        probe.wait_active(node)
        clock_pub = probe.node.create_publisher(
            Clock, "/clock", QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
        sec = [100]

        def ticking():  # /clock advances: diagnostics follow it
            sec[0] += 1
            clock_pub.publish(Clock(clock=Time(sec=sec[0])))
            return any(g.msg.header.stamp.sec > 100 for g in probe.snapshot("diagnostics"))
        probe.wait_until(ticking, 60, "/diagnostics on the sim clock", interval=0.1)
        paused_at = sec[0]  # the sim clock pauses here: no more /clock

        def stalled():
            level, message = probe.last_level()
            return level == WARN and "sim clock" in message and "not advanced" in message
        probe.wait_until(stalled, 60, lambda: f"a stalled-clock WARN ({probe.last_level()})")
        count = len(probe.snapshot("diagnostics"))
        probe.wait_until(lambda: len(probe.snapshot("diagnostics")) >= count + 5, 30,
                         "/diagnostics going on while the clock is paused")
        last = probe.snapshot("diagnostics")[-1].msg
        assert last.header.stamp.sec == paused_at  # stamped with the paused sim time
        assert probe.last_diag()["ros_clock"].startswith("sim time")


def test_the_diagnostic_name_carries_the_namespace(tmp_path, ros_env):
    node = NodeProcess(ros_env, tmp_path, FAST_DIAG)
    node.cmd += ["-r", "__ns:=/robot7"]
    with node, Probe(node="/robot7/lingbot_ros") as probe:
        probe.wait_active(node)
        probe.wait_until(lambda: probe.last_level()[0] is not None, 30,
                         lambda: "a DiagnosticStatus named '/robot7/lingbot_ros: tracking' "
                                 f"(got {[s.name for g in probe.snapshot('diagnostics') for s in g.msg.status]})")


def test_a_changed_extrinsic_is_logged_and_applied_on_reset(tmp_path, ros_env):
    params = {**ROBOT, **FAST_DIAG, "publish.map_points": False}
    images = good_images(400)
    moved = STATIC[0][2].copy()
    moved[0, 3] += 0.05  # a corrected calibration: the camera 5 cm further forward
    with NodeProcess(ros_env, tmp_path, params) as node, RobotProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        feed = iter(images)
        stream(probe, feed, lambda: len(probe.poses) >= 3, 90)
        old = probe.wait_until(lambda: probe.last_diag().get("extrinsic_base_optical"), 30,
                               "the extrinsic in use on /diagnostics")
        probe.publish_static([transform_msg("base_link", "camera_link", moved),
                              transform_msg(*STATIC[1])])
        stream(probe, feed, lambda: "extrinsic base_link -> camera_optical_frame changed"
               in node.log(), 90)
        log = node.log()
        line = next(l for l in log.splitlines() if "changed on TF" in l)
        assert "[WARN]" in line and "in use t 0.3000" in line and "new t 0.3500" in line, line
        assert probe.last_diag()["extrinsic_base_optical"] == old  # not applied mid-stream
        assert probe.call("reset").success
        probe.wait_until(lambda: "applying the new extrinsic" in node.log(), 30,
                         "the reset to apply it")
        stream(probe, feed, lambda: probe.last_diag().get("extrinsic_base_optical", old) != old,
               90)
        assert probe.last_diag()["extrinsic_base_optical"].startswith("t 0.3500"), \
            probe.last_diag()
        assert "extrinsic_pending" not in probe.last_diag()


def test_status_once_per_image_the_worker_takes(tmp_path, ros_env):
    """docs/node.md: one ~/status per image the worker takes from the queue (TRACKING per
    pose, INITIALIZING while waiting for TF, FAILED for a model failure or a rejected image;
    an anchor image also gets an INITIALIZING when taken); images the full queue drops get
    none (counted in frames_dropped). Overload: a burst into a queue of 1.

    The anchor images go in one at a time first: an anchor's fate (its pose) comes only
    with the last of them, and how many of a burst the worker takes depends on the scheduler (on a
    loaded machine it took only the last of 40, and the stream never left its anchors)."""
    from sensor_msgs.msg import Image

    images = good_images(40)
    bad = Image(header=header(stamp_ns(images[-1].header.stamp) + 10**9), height=60, width=80,
                encoding="yuv_mystery", step=160, data=bytes(160 * 60))
    params = {"qos.image": "reliable", "qos.image_depth": 100, "queue_size": 1,
              "publish.diagnostics_rate_hz": 5.0}
    with NodeProcess(ros_env, tmp_path, params) as node, Probe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()

        def settled(count):  # every image received, and each one's fate counted
            def check():
                d = probe.last_diag()
                received = int(d.get("received", 0))
                fates = sum(int(v) for k, v in d.items()
                            if k == "processed" or k.startswith(("dropped_", "rejected_",
                                                                 "failed_")))
                return received == count and fates == received
            probe.wait_until(check, 120, lambda: f"the fate of {count} images "
                                                 f"({probe.last_diag()})")
        def anchors_taken():
            return sum(1 for g in probe.snapshot("status") + probe.snapshot("state_changes")
                       if g.msg.message.startswith("collecting anchor frames"))
        for i, msg in enumerate(images[:ANCHORS]):  # one at a time: each one taken
            probe.publish_image(msg)
            if i + 1 < ANCHORS:
                probe.wait_until(lambda: anchors_taken() == i + 1, 60,
                                 lambda: f"anchor image {i + 1} taken ({probe.last_diag()})")
        settled(ANCHORS)  # the anchor batch ran: each of them has its pose
        for msg in images[ANCHORS:]:  # a burst: most are dropped by the queue
            probe.publish_image(msg)
        settled(len(images))
        probe.publish_image(bad)  # alone: the worker takes it
        settled(len(images) + 1)
        d = probe.last_diag()
        taken = len(images) + 1 - int(d.get("dropped_queue_full", 0))

        def split():  # an anchor is INITIALIZING when taken, then TRACKING with the last one
            statuses = [g.msg for g in probe.snapshot("status") + probe.snapshot("state_changes")]
            anchors = [m for m in statuses if m.message.startswith("collecting anchor frames")]
            outcomes = [m for m in statuses if not m.message.startswith("collecting anchor")]
            return statuses, anchors, outcomes
        probe.wait_until(lambda: len(split()[2]) >= taken, 30,
                         lambda: f"{taken} statuses, one per image taken (got "
                                 f"{[(m.state, m.message) for m in split()[0]]})")
        statuses, anchors, outcomes = split()
        assert len(outcomes) == taken, [(m.state, m.message) for m in statuses]
        assert len({stamp_ns(m.header.stamp) for m in outcomes}) == taken
        assert {stamp_ns(m.header.stamp) for m in anchors} <= \
            {stamp_ns(m.header.stamp) for m in outcomes}
        tracking = [m for m in statuses if m.state == m.STATE_TRACKING]
        # a pose and its status travel on two topics: the last poses may land after the
        # statuses on a loaded machine (the pose is published first, but not delivered first)
        probe.wait_until(lambda: len(probe.snapshot("poses")) >= int(d["processed"]), 30,
                         lambda: f"{d['processed']} poses (got {len(probe.snapshot('poses'))})")
        assert len(tracking) == len(probe.snapshot("poses")) == int(d["processed"])
        rejected = [m for m in statuses if m.message.startswith("rejected (unknown_encoding)")]
        assert len(rejected) == 1 and rejected[0].state == rejected[0].STATE_FAILED, statuses
        assert stamp_ns(rejected[0].header.stamp) == stamp_ns(bad.header.stamp)
        assert max(m.frames_dropped for m in statuses) <= int(d.get("dropped_queue_full", 0))


@pytest.mark.parametrize("freeze", [False, True])
def test_the_collectors_full_collections_are_on_diagnostics(tmp_path, ros_env, freeze):
    """/diagnostics carries the garbage collector's figures (ros/status/gc_pauses.py): the full
    collections and their pauses, consistent, and the objects gc_freeze kept out of them."""
    node = NodeProcess(ros_env, tmp_path, {**FAST_DIAG, "gc_freeze": freeze})
    with node, Probe() as probe:
        probe.wait_active(node)
        d = probe.wait_until(lambda: (lambda v: v if "gc_full_collections" in v else None)(
            probe.last_diag()), 30, "gc_* on /diagnostics")
        count = int(d["gc_full_collections"])
        assert count >= 0
        if count == 0:
            assert float(d["gc_full_pause_max_ms"]) == -1.0
        else:
            assert float(d["gc_full_pause_max_ms"]) > 0.0
        assert float(d["gc_full_pause_total_ms"]) >= max(0.0, float(d["gc_full_pause_max_ms"]))
        frozen = int(d["gc_frozen_objects"])
        if freeze:  # everything imported and built by configure: torch, rclpy, the model
            assert frozen > 50_000, d
        else:
            assert frozen == 0, d

"""The time and size policy over DDS: a looped stream restarts (one WARN naming both stamps,
counted, INITIALIZING on ~/status, WARN on /diagnostics), a new size that persists restarts
the stream on it, and a node that gets only unusable images says ERROR instead of OK."""
from __future__ import annotations

import time

from tests.ros.node_harness import NodeProcess, Probe, good_images, header, stamp_ns
from tests.ros.ros_helpers import BAG_START_NS, ros_env  # noqa: F401 -- the fixture

PARAMS = {"qos.image": "reliable", "qos.image_depth": 50, "queue_size": 50,
          "publish.diagnostics_rate_hz": 5.0}
INITIALIZING = 1


def publish(probe, images, period: float = 0.02) -> None:
    for msg in images:
        probe.publish_image(msg)
        time.sleep(period)


def last_status(probe):
    """(level, message) of the node's last DiagnosticStatus."""
    return probe.last_level()


def test_a_looped_stream_restarts_once_with_a_warning(tmp_path, ros_env):
    images = good_images(6)
    stamps = [stamp_ns(m.header.stamp) for m in images]
    with NodeProcess(ros_env, tmp_path, PARAMS) as node, Probe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        publish(probe, images)
        probe.wait_until(lambda: len(probe.poses) >= 6, 60, "6 poses")
        publish(probe, images)  # the loop: the same stamps again
        probe.wait_until(lambda: len(probe.poses) >= 12, 60, "12 poses")
        assert probe.pose_stamps() == stamps + stamps  # nothing lost, nothing rejected

        values = probe.wait_until(
            lambda: probe.last_diag() if probe.last_diag().get(
                "restart_stamp_backwards") == "1" else None, 15, "the restart counted")
        assert not [k for k in values if k.startswith("rejected_")], values
        restarting = [g.msg for g in probe.snapshot("state_changes")
                      if g.msg.state == INITIALIZING and "restarted" in g.msg.message]
        assert len(restarting) == 1 and str(stamps[0]) in restarting[0].message
        level, message = probe.wait_until(
            lambda: last_status(probe) if last_status(probe)[0] == 1 else None, 15,
            lambda: f"a WARN on /diagnostics (last: {last_status(probe)})")
        assert "restarted" in message
        assert node.poll() is None
    warnings = [line for line in node.log().splitlines()
                if "[WARN]" in line and "stream restarted" in line]
    assert len(warnings) == 1, warnings
    assert str(stamps[0]) in warnings[0] and str(stamps[-1]) in warnings[0]


def test_a_new_size_that_persists_restarts_the_stream(tmp_path, ros_env):
    wide = good_images(4)  # 80x60 -> 42x56 model input
    square = good_images(4, width=60, height=60, start_ns=BAG_START_NS + 10**9)  # -> 56x56
    with NodeProcess(ros_env, tmp_path, {**PARAMS, "session.size_change_frames": 3}) as node, \
            Probe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        publish(probe, wide)
        probe.wait_until(lambda: len(probe.poses) >= 4, 60, "4 poses")
        publish(probe, square)  # 2 rejected, the 3rd restarts the stream, the 4th follows
        probe.wait_until(lambda: len(probe.poses) >= 6, 60, "2 poses of the new stream")
        expected = {"rejected_size_changed": "2", "restart_size_changed": "1", "processed": "6"}
        probe.wait_until(lambda: all(probe.last_diag().get(k) == v for k, v in expected.items()),
                         15, lambda: f"{expected} on /diagnostics (last: {probe.last_diag()})")
        assert probe.pose_stamps()[-2:] == [stamp_ns(m.header.stamp) for m in square[2:]]
    assert "42x56 to 56x56" in node.log()


def test_only_unusable_images_is_an_error_not_ok(tmp_path, ros_env):
    from sensor_msgs.msg import Image
    bad = [Image(header=header(BAG_START_NS + i * 33_000_000), height=60, width=80,
                 encoding="yuv_mystery", step=160, data=bytes(160 * 60)) for i in range(200)]
    params = {**PARAMS, "diagnostics.stall_timeout_s": 1.0}
    with NodeProcess(ros_env, tmp_path, params) as node, Probe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        deadline = time.monotonic() + 60
        level, message = None, ""
        for msg in bad:  # ~25 Hz until the node says ERROR (after stall_timeout_s)
            probe.publish_image(msg)
            time.sleep(0.04)
            level, message = last_status(probe)
            if level == 2 or time.monotonic() > deadline:
                break
        assert level == 2, (level, message)
        assert "no frame was processed" in message and "rejected_unknown_encoding" in message
        assert probe.poses == [] and node.poll() is None

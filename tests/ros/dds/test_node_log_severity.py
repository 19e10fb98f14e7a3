"""Every logging site that logs at two severities, made to log at each in turn, over real
DDS with the real node (rclpy refuses a change of severity between two calls of one site:
such a site once made the second call raise and the node exit 1, or the worker thread die).

- ~/load_session: a mistyped path (WARN), then the right one (INFO): the node stays up and
  the second load succeeds.
- ~/save_session: a good save (INFO), then one onto a file that is no snapshot (ERROR): the
  node stays up and saves again.
- the worker: a rejected image (WARN) and later failed frames (ERROR; a diverged checkpoint
  makes every pose non-finite): the worker goes on taking images, each under one counter.
"""
from __future__ import annotations

from tests.ros.dds.test_node_pause_failed import FAILED, nan_checkpoint, send, states
from tests.ros.image_fates import wait_every_image_counted
from tests.ros.node_harness import ACTIVE, NodeProcess, Probe, good_images, header
from tests.ros.ros_helpers import BAG_START_NS, ros_env  # noqa: F401 -- the fixture

PARAMS = {"qos.image": "reliable", "qos.image_depth": 100, "queue_size": 100,
          "publish.diagnostics_rate_hz": 5.0}


def params(tmp_path) -> dict:
    # files.root (issue 32): the test's folder holds every path these tests give
    return {**PARAMS, "files.root": str(tmp_path)}


def still_up(node, probe) -> None:
    assert node.poll() is None, node.log()[-3000:]
    assert probe.get_state()[0] == ACTIVE
    assert "Logger severity cannot be changed" not in node.log()


def test_a_failed_load_then_a_good_one(tmp_path, ros_env):
    images = good_images(8)
    snap = tmp_path / "stream.snap"
    with NodeProcess(ros_env, tmp_path, params(tmp_path)) as node, Probe() as probe:
        probe.wait_active(node)
        send(probe, images[:4])
        probe.wait_until(lambda: len(probe.poses) >= 4, 60, "4 poses")
        assert probe.save_session(snap).success

        reply = probe.load_session(tmp_path / "stream.snp")  # mistyped
        assert not reply.success and "stream.snp" in reply.message, reply.message
        reply = probe.load_session(snap)
        assert reply.success and reply.frames == 4, reply.message
        still_up(node, probe)
        send(probe, images[4:])
        probe.wait_until(lambda: len(probe.poses) >= 8, 60, "the poses after the load")
        still_up(node, probe)
    log = node.log()
    assert "~/load_session: " in log and "stream.snp" in log


def test_a_good_save_then_a_failed_one(tmp_path, ros_env):
    images = good_images(6)
    not_a_snapshot = tmp_path / "notes.txt"
    not_a_snapshot.write_text("not a snapshot\n")
    with NodeProcess(ros_env, tmp_path, params(tmp_path)) as node, Probe() as probe:
        probe.wait_active(node)
        send(probe, images[:4])
        probe.wait_until(lambda: len(probe.poses) >= 4, 60, "4 poses")
        assert probe.save_session(tmp_path / "first.snap").success

        reply = probe.save_session(not_a_snapshot)
        assert not reply.success and "notes.txt" in reply.message, reply.message
        assert not_a_snapshot.read_text() == "not a snapshot\n"
        still_up(node, probe)
        reply = probe.save_session(tmp_path / "second.snap")  # and INFO again
        assert reply.success, reply.message
        send(probe, images[4:])
        probe.wait_until(lambda: len(probe.poses) >= 6, 60, "the poses after the saves")
        still_up(node, probe)
    assert "~/save_session: cannot write" in node.log()


def unknown_encoding(stamp_ns: int):
    from sensor_msgs.msg import Image
    return Image(header=header(stamp_ns), height=60, width=80, encoding="yuv_mystery",
                 step=160, data=bytes(80 * 60 * 2))


def test_a_rejected_image_then_failed_frames_the_worker_goes_on(tmp_path, ros_env):
    """WARN (rejected) then ERROR (failed) then WARN then ERROR from the worker: every image
    is taken and counted once (before the fix the worker thread died at the first failure
    and the images after it were under no counter)."""
    checkpoint = nan_checkpoint(tmp_path / "diverged.safetensors")
    good = good_images(4)
    sequence = [unknown_encoding(BAG_START_NS - 2), *good[:2],   # rejected, one failed step
                unknown_encoding(BAG_START_NS - 1), *good[2:]]   # rejected, another one
    with NodeProcess(ros_env, tmp_path, {**params(tmp_path), "checkpoint": str(checkpoint)}) \
            as node, Probe() as probe:
        probe.wait_active(node)
        send(probe, sequence[:3])
        probe.wait_until(lambda: states(probe, FAILED)[1:], 60,
                         "a rejected image's then a failed step's FAILED status")
        send(probe, sequence[3:])
        counted = wait_every_image_counted(probe, len(sequence), 60)
        assert counted == {"rejected_unknown_encoding": 2, "failed_non_finite": 4}, counted
        failed = [m.message for m in states(probe, FAILED)]
        assert [m.startswith("rejected (unknown_encoding)") for m in failed] == [
            True, False, True, False], failed
        assert all("not finite" in m for m in failed[1::2]), failed
        assert node.poll() is None and not probe.poses
    log = node.log()
    assert "Logger severity cannot be changed" not in log
    assert "rejected (unknown_encoding)" in log and "failed: FrameFailed" in log

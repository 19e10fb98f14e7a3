"""The worker thread never dies of a frame, and every image lands under exactly one counter.

A real tiny session on the CPU, the worker's own thread, and real rclpy parts in one process:
the node's ``Outputs`` and ``Status`` on a real rclpy node, its real logger (one severity per
call site, or rclpy raises). The errors are real: a publisher destroyed under the worker
raises rclpy's ``InvalidHandle`` when published on, as one does when the node tears its
publishers down. Also: anchors that a stream restart drops are counted (they were under no
counter).
"""
from __future__ import annotations

import time

import pytest

from lingbot_ros.ros.intake.worker import FrameWorker
from lingbot_ros.ros.params.node_config import NodeConfig
from lingbot_ros.ros.status.telemetry import NodeTelemetry
from lingbot_ros.ros.tf.robot_frames import RobotFrames
from lingbot_ros.session import open_session
from tests.ros.image_fates import fates, unaccounted
from tests.ros.node_data import good_images, header, stamp_ns
from tests.ros.unit.test_frame_worker import SESSION, RecordedOutputs, RecordedStatus, Rig

CAMERA_ONLY = NodeConfig(base_frame="")


@pytest.fixture
def ros_node():
    import rclpy
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("frame_worker_errors", context=context)
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def unknown_encoding(stamp: int):
    from sensor_msgs.msg import Image
    return Image(header=header(stamp), height=60, width=80, encoding="yuv_mystery", step=160,
                 data=bytes(160 * 60))


def worker_of(node, outputs, status, telemetry) -> FrameWorker:
    session, _ = open_session(SESSION, "tiny")
    return FrameWorker(session, outputs, status, telemetry,
                       robot_frames=RobotFrames(CAMERA_ONLY), log=node.get_logger(),
                       queue_size=64, max_image_pixels=4096 * 4096)


def run_thread(worker, telemetry, images, timeout: float = 120.0):
    """Offer ``images`` to the running worker thread, wait until each has its fate; return
    the telemetry snapshot. The thread must still be alive then."""
    worker.start()
    try:
        for msg in images:
            telemetry.image_received(time.monotonic())
            assert not worker.offer(msg, time.monotonic())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            snap = telemetry.snapshot()
            if unaccounted(snap.counters) == 0:
                break
            time.sleep(0.01)
        assert worker._thread.is_alive(), "the worker thread died"
    finally:
        worker.stop()
    snap = telemetry.snapshot()
    assert snap.received == len(images) and unaccounted(snap.counters) == 0, dict(
        snap.counters)
    return snap


def test_a_frame_whose_outputs_cannot_go_out_is_failed_and_the_next_ones_go_on(ros_node):
    """~/depth's publisher destroyed: the frames whose depth is due (the two anchors; then
    none for 1000 s) are ``failed_publishing`` with the reason on ~/status, the others are
    published; each image is counted once."""
    from lingbot_ros.ros.outputs.frame_outputs import Outputs
    telemetry = NodeTelemetry()
    outputs = Outputs(ros_node, NodeConfig(base_frame="", depth_rate_hz=0.001))
    status = RecordedStatus()
    worker = worker_of(ros_node, outputs, status, telemetry)
    ros_node.destroy_publisher(outputs.depth)
    images = good_images(8)
    snap = run_thread(worker, telemetry, images)
    assert fates(snap.counters) == {"failed_publishing": 2, "processed": 6}, dict(
        snap.counters)
    failed = [(stamp, message) for state, stamp, message in status.states if state == "failed"]
    stamps = [stamp_ns(m.header.stamp) for m in images]
    assert [stamp for stamp, _ in failed] == stamps[:2]
    assert all(m.startswith("InvalidHandle") for _, m in failed), failed
    tracking = [stamp for state, stamp, _ in status.states if state == "tracking"]
    assert tracking == stamps[2:]  # the worker went on, frame after frame
    assert snap.last_error == ""  # a frame succeeded since
    outputs.destroy()


def test_a_status_publisher_that_refuses_never_stops_the_worker(ros_node):
    """The real ``Status`` with its ~/status publisher destroyed: every status the worker
    sends raises (anchors collecting, a rejected image, each frame). The worker reports it
    (``worker: InvalidHandle...`` as the last error: /diagnostics ERROR) and goes on: every
    frame's outputs go out and every image is counted once."""
    from lingbot_ros.ros.status.reports import Status, StatusReads
    telemetry = NodeTelemetry()
    status = Status(ros_node, CAMERA_ONLY, StatusReads(telemetry))
    outputs = RecordedOutputs()
    worker = worker_of(ros_node, outputs, status, telemetry)
    ros_node.destroy_publisher(status.status)
    images = good_images(6)
    bad = unknown_encoding(stamp_ns(images[2].header.stamp) + 1)
    snap = run_thread(worker, telemetry, [*images[:3], bad, *images[3:]])
    assert fates(snap.counters) == {"rejected_unknown_encoding": 1, "processed": 6}, dict(
        snap.counters)
    assert [s for s, _ in outputs.published] == [stamp_ns(m.header.stamp) for m in images]
    assert snap.last_error.startswith("worker: InvalidHandle"), snap.last_error
    status.destroy()


def test_anchors_a_stream_restart_dropped_are_counted():
    """The first anchor waits for the second; a stamp going backwards restarts the stream on
    it (policy reset) and drops the waiting anchor: ``dropped_no_outcome`` once the new
    stream's anchors are out."""
    rig = Rig()
    images = good_images(4)
    rig.feed([images[3], images[1], images[2]])
    counters = rig.telemetry.snapshot().counters
    assert fates(counters) == {"processed": 2, "dropped_no_outcome": 1}, dict(counters)
    assert counters["restart_stamp_backwards"] == 1 and unaccounted(counters) == 0
    assert [s for s, _ in rig.outputs.published] == [
        stamp_ns(m.header.stamp) for m in images[1:3]]


def test_anchors_a_reset_dropped_are_counted():
    rig = Rig()
    images = good_images(3)
    rig.feed(images[:1])  # an anchor waiting for the second
    rig.worker.reset()
    rig.feed(images[1:])
    counters = rig.telemetry.snapshot().counters
    assert fates(counters) == {"processed": 2, "dropped_reset": 1}, dict(counters)
    assert unaccounted(counters) == 0

"""FrameWorker without DDS: a real tiny session on the CPU, the worker's public API, and the
outputs and ~/status it would publish recorded in plain lists.

Every frame the session accepts has its pose published exactly once, whatever the stamps do
(repeated, repeated while the frame is still in the session, going backwards under both
policies); refused frames are counted once; a reset publishes the frame in flight and drops
the queue; the telemetry is read as immutable snapshots.
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace

import pytest

from lingbot_ros.config import PreprocessConfig, SessionConfig
from lingbot_ros.ros.intake.worker import FrameWorker
from lingbot_ros.ros.params.node_config import NodeConfig
from lingbot_ros.ros.status.telemetry import NodeTelemetry
from lingbot_ros.ros.tf.robot_frames import RobotFrames
from lingbot_ros.session import open_session
from tests.ros.node_data import good_images, header, stamp_ns
from tests.ros.stamp_cases import CASES, case_images

# The node tests' tiny configuration (tests/ros/node_harness.py TINY_PARAMS).
SESSION = SessionConfig(num_scale_frames=2, window=4, preprocess=PreprocessConfig(width=56))


class RecordedOutputs:
    """What ``Outputs`` would publish: each frame's (stamp, ticket), resets and restarts."""

    def __init__(self) -> None:
        self.published: list[tuple[int, int]] = []
        self.restarts = self.clears = 0

    def depth_wanted(self) -> tuple[bool, bool]:
        return False, False

    def publish(self, result, chain, depth_due=None) -> str:
        assert chain.tracked_frame == "camera_optical_frame"
        self.published.append((result.stamp_ns, result.ticket))
        return ""

    def restart(self) -> None:
        self.restarts += 1

    def clear(self) -> None:
        self.clears += 1


class RecordedStatus:
    def __init__(self) -> None:
        self.states: list[tuple[str, int, str]] = []  # (state, stamp ns, message)

    def frame(self, result, header, end_to_end_ms: float, message: str = "") -> None:
        assert end_to_end_ms >= 0 and result.latency_ms >= 0
        self.states.append(("tracking", stamp_ns(header.stamp), message))

    def initializing(self, header, message: str) -> None:
        self.states.append(("initializing", stamp_ns(header.stamp), message))

    def failed(self, header, message: str) -> None:
        self.states.append(("failed", stamp_ns(header.stamp), message))


class Rig:
    def __init__(self, session_config: SessionConfig = SESSION, queue_size: int = 64) -> None:
        session, random_weights = open_session(session_config, "tiny")
        assert random_weights
        self.outputs, self.status, self.telemetry = (RecordedOutputs(), RecordedStatus(),
                                                     NodeTelemetry())
        self.worker = FrameWorker(
            session, self.outputs, self.status, self.telemetry,
            robot_frames=RobotFrames(NodeConfig(base_frame="")),
            log=logging.getLogger("test_frame_worker"), queue_size=queue_size,
            max_image_pixels=4096 * 4096)

    def feed(self, images) -> None:
        """Each image as the callback queues it, then the worker's turn on it."""
        for msg in images:
            self.telemetry.image_received(time.monotonic())
            assert not self.worker.offer(msg, time.monotonic())
            assert self.worker.run_once(timeout=0)
        self.worker.finish()


@pytest.mark.parametrize("policy", list(CASES))
def test_every_accepted_frame_is_published_exactly_once_whatever_the_stamps(policy):
    case = CASES[policy]
    rig = Rig(replace(SESSION, on_stamp_backwards=policy))
    images = case_images(case)
    rig.feed(images)
    frame_stamps = {k: stamp_ns(m.header.stamp) for k, m in zip(case.fed, images)}
    stamps = [stamp for stamp, _ in rig.outputs.published]
    tickets = [ticket for _, ticket in rig.outputs.published]
    assert stamps == [frame_stamps[k] for k in case.published]
    assert len(set(tickets)) == len(tickets)  # no frame twice
    counters = rig.telemetry.snapshot().counters
    assert {k: counters.get(k, 0) for k in case.counters} == case.counters
    tracking = [stamp for state, stamp, _ in rig.status.states if state == "tracking"]
    assert tracking == stamps
    assert rig.outputs.restarts == case.counters.get("restart_stamp_backwards", 0)


def test_a_refused_repeat_of_an_anchor_keeps_the_anchor():
    """The first anchor waits in the session for the second; its stamp comes again."""
    rig = Rig()
    images = good_images(3)
    rig.feed([images[0], images[0]])
    assert rig.outputs.published == []
    s0 = stamp_ns(images[0].header.stamp)
    # one status per image taken from the queue: the anchor waits, its repeat is refused
    assert [(state, stamp) for state, stamp, _ in rig.status.states] == [
        ("initializing", s0), ("failed", s0)]
    assert rig.status.states[-1][2].startswith("rejected (duplicate_stamp)")
    rig.feed(images[1:])
    assert [s for s, _ in rig.outputs.published] == [stamp_ns(m.header.stamp) for m in images]


def test_a_bad_image_is_counted_once_and_the_stream_goes_on():
    from sensor_msgs.msg import Image
    rig = Rig()
    images = good_images(4)
    bad = Image(header=header(stamp_ns(images[1].header.stamp) + 1), height=60, width=80,
                encoding="yuv_mystery", step=160, data=bytes(160 * 60))
    rig.feed([images[0], images[1], bad, images[2], images[3]])
    snap = rig.telemetry.snapshot()
    assert snap.counters["rejected_unknown_encoding"] == 1 and snap.rejected == 1
    failed = [(stamp, message) for state, stamp, message in rig.status.states
              if state == "failed"]
    assert len(failed) == 1 and failed[0][0] == stamp_ns(bad.header.stamp)
    assert failed[0][1].startswith("rejected (unknown_encoding)"), failed
    assert snap.processed == 4 and snap.received == 5 and snap.last_error == ""
    assert snap.last_input_hw == (60, 80) and snap.last_fx > 0
    assert snap.end_to_end_ms["count"] == 4
    assert snap.session_info.frames_processed == 4


def test_a_reset_drops_the_queue_and_starts_a_new_stream():
    rig = Rig()
    images = good_images(6)
    rig.feed(images[:3])
    for msg in images[3:5]:  # queued, not yet taken by the worker
        rig.worker.offer(msg, time.monotonic())
    assert rig.worker.reset() == 2
    assert not rig.worker.run_once(timeout=0)  # nothing left queued
    snap = rig.telemetry.snapshot()
    assert snap.counters["dropped_reset"] == 2 and snap.counters["resets"] == 1
    assert snap.session_info.trajectory_poses == 0 and snap.end_to_end_ms["count"] == 0
    assert rig.outputs.clears == 1
    rig.feed(images[5:])  # the first anchor of the new stream: no pose yet
    assert len(rig.outputs.published) == 3
    assert rig.status.states[-1][0] == "initializing"


def test_snapshots_are_immutable_and_do_not_follow_later_counts():
    telemetry = NodeTelemetry()
    telemetry.count("dropped_queue_full", 2)
    before = telemetry.snapshot()
    telemetry.count("dropped_queue_full")
    with pytest.raises(TypeError):
        before.counters["dropped_queue_full"] = 0  # type: ignore[index]
    with pytest.raises(AttributeError):
        before.last_error = "x"  # type: ignore[misc]
    assert before.dropped == 2 and telemetry.snapshot().dropped == 3


def test_the_worker_thread_publishes_what_is_offered():
    rig = Rig()
    images = good_images(4)
    rig.worker.start()
    try:
        for msg in images:
            rig.worker.offer(msg, time.monotonic())
    finally:
        deadline = time.monotonic() + 120
        while len(rig.outputs.published) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        rig.worker.stop()
    assert [s for s, _ in rig.outputs.published] == [stamp_ns(m.header.stamp) for m in images]

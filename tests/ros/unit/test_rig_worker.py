"""RigWorker without DDS: a real ``MultiStreamSession`` of the tiny model on the CPU (one
stream per camera, the batched step), the real ``RigGather`` on a fake clock and the real
``RigFusion``;
each camera's outputs and status, and the fused poses, recorded in plain lists.

Two cameras see the same images (identical streams, identical poses): both publish every
frame; the fused pose follows the primary; a reset of the primary fails over to the rear
without a jump and the primary takes back over after ``failback_frames``; a frame queued
before its camera's reset is dropped; a late camera is not waited for beyond max_wait_ms.
"""
from __future__ import annotations

import logging
import time

import numpy as np
import pytest

from lingbot_ros.ros.intake.rig_gather import RigGather
from lingbot_ros.ros.intake.rig_worker import CameraUnit, RigWorker
from lingbot_ros.ros.params.node_config import NodeConfig
from lingbot_ros.ros.status.telemetry import NodeTelemetry
from lingbot_ros.ros.tf.rig_fusion import RigFusion, RigFusionConfig
from lingbot_ros.ros.tf.robot_frames import RobotFrames
from tests.ros.node_data import good_images, stamp_ns
from tests.ros.rig_streams import rig_session

NAMES = ("front", "rear")


class RecordedOutputs:
    def __init__(self) -> None:
        self.published: list[tuple[int, object]] = []  # (stamp, map_to_odom)
        self.clears = self.restarts = 0

    def depth_wanted(self):
        return False, False

    def publish(self, result, chain, depth_due=None, scale=None, map_to_odom=None) -> str:
        self.published.append((result.stamp_ns, map_to_odom))
        return ""

    def withholds(self, scale) -> bool:
        return False

    def clear(self) -> None:
        self.clears += 1

    def restart(self) -> None:
        self.restarts += 1


class RecordedStatus:
    def __init__(self) -> None:
        self.states: list[tuple[str, int]] = []

    def frame(self, result, header, end_to_end_ms, message=""):
        self.states.append(("tracking", stamp_ns(header.stamp)))

    def initializing(self, header, message):
        self.states.append(("initializing", stamp_ns(header.stamp)))

    def failed(self, header, message):
        self.states.append(("failed", stamp_ns(header.stamp)))


class RecordedFused:
    def __init__(self) -> None:
        self.poses = []

    def publish(self, fused) -> None:
        self.poses.append(fused)

    def clear(self) -> None:
        self.poses.append(None)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Rig:
    def __init__(self, failback_frames: int = 2, max_wait_ms: float = 30.0) -> None:
        self.session = rig_session(NAMES)
        self.units = {n: CameraUnit(n, RecordedOutputs(), RecordedStatus(), NodeTelemetry(),
                                    RobotFrames(NodeConfig(base_frame=""))) for n in NAMES}
        self.fusion = RigFusion(RigFusionConfig(NAMES, failback_frames=failback_frames))
        self.fused = RecordedFused()
        self.clock = FakeClock()
        self.gather = RigGather(NAMES, max_wait_ms, clock=self.clock)
        self.worker = RigWorker(self.session, list(self.units.values()), self.fusion,
                                self.fused, self.gather, log=logging.getLogger("test_rig"),
                                max_image_pixels=4096 * 4096)

    def tick(self, images: dict) -> bool:
        for name, msg in images.items():
            self.worker.offer(name, msg, time.monotonic())
        return self.worker.run_once(timeout=0)

    def published(self, name) -> list[int]:
        return [s for s, _ in self.units[name].outputs.published]


def test_both_cameras_publish_and_the_fused_pose_follows_the_primary():
    rig = Rig()
    images = good_images(5)
    for msg in images:
        assert rig.tick({"front": msg, "rear": msg})
    stamps = [stamp_ns(m.header.stamp) for m in images]
    assert rig.published("front") == stamps and rig.published("rear") == stamps
    assert [f.stamp_ns for f in rig.fused.poses] == stamps
    assert {f.source for f in rig.fused.poses} == {"front"}
    facts = rig.worker.rig_facts
    assert facts.source == "front" and facts.failovers == 0
    # identical streams: the rear is anchored with the identity, no disagreement
    rear = [c for c in facts.cameras if c.name == "rear"][0]
    assert rear.anchored and rear.disagreement_m == pytest.approx(0.0, abs=1e-6)
    _, alignment = rig.units["rear"].outputs.published[-1]
    assert np.allclose(alignment, np.eye(4), atol=1e-6)
    assert [(s.from_camera, s.to_camera, s.reason) for s in rig.worker.switches] == [
        ("", "front", "start")]
    assert rig.units["front"].telemetry.snapshot().processed == 5


def test_a_reset_primary_fails_over_without_a_jump_and_takes_back_over():
    rig = Rig(failback_frames=2)
    images = good_images(12)
    for msg in images[:4]:
        rig.tick({"front": msg, "rear": msg})
    before = rig.fused.poses[-1]
    rig.worker.reset("front")
    assert rig.session.info()["front"].frames_in == 0 and rig.units["front"].outputs.clears == 1
    assert rig.session.info()["rear"].frames_in == 4  # the other camera untouched
    assert [(s.from_camera, s.to_camera, s.reason) for s in rig.worker.switches][1:] == [
        ("front", "rear", "reset")]
    rig.tick({"front": images[4], "rear": images[4]})
    after = rig.fused.poses[-1]
    assert after.source == "rear" and after.stamp_ns == stamp_ns(images[4].header.stamp)
    # the jump is the base's motion over one frame (identical streams: the rear's own)
    jump = np.linalg.norm(after.T_odom_base[:3, 3] - before.T_odom_base[:3, 3])
    step = np.linalg.norm(np.diff([p.T_odom_base[:3, 3] for p in rig.fused.poses[:4]],
                                  axis=0), axis=1)
    assert jump <= 3 * step.max() + 1e-9
    for msg in images[5:]:
        rig.tick({"front": msg, "rear": msg})
    reasons = [(s.from_camera, s.to_camera, s.reason) for s in rig.worker.switches]
    assert reasons == [("", "front", "start"), ("front", "rear", "reset"),
                       ("rear", "front", "failback")]
    assert rig.fused.poses[-1].source == "front"
    assert rig.worker.rig_facts.failovers == 1 and rig.worker.rig_facts.failbacks == 1


def test_a_frame_queued_before_its_cameras_reset_is_dropped():
    rig = Rig()
    images = good_images(3)
    rig.worker.offer("rear", images[0], time.monotonic())
    rig.worker.offer("front", images[0], time.monotonic())
    assert rig.worker.reset("rear") == 1  # its waiting frame: cleared, counted
    assert rig.units["rear"].telemetry.snapshot().counters["dropped_reset"] == 1
    assert rig.worker.run_once(timeout=0) is False  # front waits for the rear (live)
    rig.clock.now += 0.030
    assert rig.worker.run_once(timeout=0)  # max_wait_ms: the front runs alone
    assert rig.gather.counts()["rear"].missed == 1


def test_a_late_camera_does_not_hold_the_other_back():
    rig = Rig()
    images = good_images(4)
    rig.tick({"front": images[0], "rear": images[0]})
    rig.worker.offer("front", images[1], time.monotonic())
    assert not rig.worker.run_once(timeout=0)
    rig.clock.now += 0.031
    assert rig.worker.run_once(timeout=0)
    for msg in images[2:]:  # the rear is not waited for until it sends again
        assert rig.tick({"front": msg})
    front, rear = rig.published("front"), rig.published("rear")
    assert front == [stamp_ns(m.header.stamp) for m in images] and rear == []  # anchors
    assert rig.units["rear"].status.states == []


def test_the_rigs_names_must_agree():
    rig = Rig()
    with pytest.raises(ValueError, match="differ from the gather"):
        RigWorker(rig.session, list(rig.units.values()), rig.fusion, rig.fused,
                  RigGather(("front",), 30.0), log=logging.getLogger("x"),
                  max_image_pixels=100)
    with pytest.raises(ValueError, match="no camera 'left'"):
        rig.worker.reset("left")

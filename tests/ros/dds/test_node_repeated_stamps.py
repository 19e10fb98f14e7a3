"""Repeated and backward stamps over DDS (issue 21): every frame the node accepts has its pose
published on ~/pose exactly once, also when its stamp comes again while it is still in the
session (it waits there for the second anchor), under both ``session.on_stamp_backwards``
policies. The cases are tests/ros/stamp_cases.py's, which test_frame_worker.py also runs
without DDS."""
from __future__ import annotations

import time

import pytest

from tests.ros.node_harness import NodeProcess, Probe, stamp_ns
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture
from tests.ros.stamp_cases import CASES, case_images

PARAMS = {"qos.image": "reliable", "qos.image_depth": 50, "queue_size": 50,
          "publish.diagnostics_rate_hz": 5.0}


@pytest.mark.parametrize("policy", list(CASES))
def test_every_accepted_frame_is_published_exactly_once(tmp_path, ros_env, policy):
    case = CASES[policy]
    images = case_images(case)
    expected = [stamp_ns(images[case.fed.index(k)].header.stamp) for k in case.published]
    want = {k: str(v) for k, v in case.counters.items()}
    with NodeProcess(ros_env, tmp_path, {**PARAMS, "session.on_stamp_backwards": policy}) \
            as node, Probe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        for msg in images:
            probe.publish_image(msg)
            time.sleep(0.02)
        # Every image received and accounted for: what was accepted is published (counted
        # once each as processed), what was refused is counted by reason.
        probe.wait_until(
            lambda: all(probe.last_diag().get(k) == v for k, v in want.items()), 60,
            lambda: f"{want} on /diagnostics (last: {probe.last_diag()})")
        probe.wait_until(lambda: len(probe.poses) >= len(expected), 30,
                         lambda: f"{len(expected)} poses (got {probe.pose_stamps()})")
        assert probe.pose_stamps() == expected
        assert node.poll() is None

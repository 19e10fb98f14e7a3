"""Scale health tells the truth (issue 32): the aligned depth's ratio to the model's depth moves
1.5x mid-stream, and /diagnostics turns WARN with the figure while the applied scale lags.

Before, the window's median (100 samples) did not move for ~50 frames and then followed at
``scale.max_change_per_s``: ~/depth stayed at 0.67x the true metres with diagnostics OK. The
stream runs in lockstep (a depth image, then its colour image, then that frame's ~/status), so
the last frames are processed while images still arrive: no "no image" WARN covers the scale's.
"""
from __future__ import annotations

import re

import pytest

from tests.ros.dds.test_node_robot_tf import expected_results, static_msgs
from tests.ros.dds.test_node_scale import H, K, MIN_SAMPLES, SCALE, W, ScaleProbe, depth_msg
from tests.ros.node_data import stamp_ns
from tests.ros.node_harness import NodeProcess, good_images
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

BEFORE, AFTER = 8, 14  # frames at K, then at 1.5 K
WARN_S = 0.2  # scale.drift_warn_s: 6 frames at the images' 30 Hz stamps
PARAMS = {**SCALE, "scale.source": "depth", "scale.drift_warn_s": WARN_S,
          "publish.diagnostics_rate_hz": 20.0}
DRIFT = re.compile(r"scale drift \(depth\): the last (\d+) samples give ([\d.]+) m per model "
                   r"unit, the applied scale is ([\d.]+) \(([+-]\d+) %, (\d+) sigma\) for "
                   r"([\d.]+) s")


def drift_messages(probe) -> list[str]:
    out = []
    for got in probe.snapshot("diagnostics"):
        out += [s.message for s in got.msg.status if s.message.startswith("scale drift")]
    return out


def taken(probe) -> int:
    """~/status messages: one per image the worker took."""
    return len(probe.snapshot("status")) + len(probe.snapshot("state_changes"))


def test_a_ratio_change_mid_stream_warns_with_the_figure(tmp_path, ros_env):
    images = good_images(BEFORE + AFTER, width=W, height=H)
    expected = expected_results(images)
    ratios = [K] * BEFORE + [1.5 * K] * AFTER
    with NodeProcess(ros_env, tmp_path, PARAMS) as node, ScaleProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        probe.wait_until(lambda: probe.depth_pub.get_subscription_count() > 0, 30,
                         "the node's aligned_depth subscription")
        probe.wait_for_image_subscriber()
        for i, (msg, k) in enumerate(zip(images, ratios)):
            if i == BEFORE:  # locked at K; nothing disagreed so far
                locked = probe.wait_until(probe.locked, 30, "~/scale LOCKED")
                assert locked.metres_per_unit == pytest.approx(K, rel=1e-3)
                probe.wait_until(lambda: probe.last_diag().get("scale_drift_s") == "0.000",
                                 30, lambda: f"the drift figures ({probe.last_diag()})")
                assert probe.last_level()[0] == 0, probe.last_level()
                assert drift_messages(probe) == []
            probe.depth_pub.publish(depth_msg(k * expected[stamp_ns(msg.header.stamp)].depth,
                                              msg.header.stamp))
            probe.wait_until(lambda: probe.counter("scale_depth_received") > i, 30,
                             lambda: f"depth image {i} received ({probe.last_diag()})")
            probe.publish_image(msg)
            probe.wait_until(lambda: taken(probe) > i, 60, f"image {i} taken")
        messages = probe.wait_until(lambda: drift_messages(probe), 30, lambda: (
            f"a scale drift WARN (last: {probe.last_level()}, {probe.last_diag()})"))
        assert probe.counter("scale_withheld_frames") == MIN_SAMPLES - 1  # before the lock
        found = DRIFT.fullmatch(messages[-1])
        assert found, messages[-1]
        samples, recent, applied, change, sigmas, for_s = found.groups()
        assert int(samples) == MIN_SAMPLES
        assert float(recent) == pytest.approx(1.5 * K, rel=1e-3)
        assert float(applied) == pytest.approx(K, rel=1e-2)  # it lags: 0.67x the truth
        assert change == "+50" and int(sigmas) > 5 and float(for_s) >= WARN_S
        level = [s.level for got in probe.snapshot("diagnostics") for s in got.msg.status
                 if s.message == messages[-1]][0]
        assert (int.from_bytes(level, "little") if isinstance(level, bytes)
                else int(level)) == 1  # WARN
        values = probe.last_diag()
        assert float(values["scale_recent_metres_per_unit"]) == pytest.approx(1.5 * K,
                                                                                rel=1e-3)
        assert float(values["scale_drift_sigma"]) > 5

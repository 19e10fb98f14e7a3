"""A rig's part of /diagnostics (``diagnostics.rig_check``) from the real ``RigFusion``:
OK while the primary gives the pose, WARN on a failover (with its reason) and on a camera
that disagrees beyond cameras.max_disagreement_m, ERROR when no camera tracks any more."""
from __future__ import annotations

import numpy as np

from lingbot_ros.ros.intake.rig_gather import RigGather
from lingbot_ros.ros.status.diagnostics import rig_check
from lingbot_ros.ros.tf.rig_fusion import RigFusion, RigFusionConfig


def pose(x: float) -> np.ndarray:
    T = np.eye(4)
    T[0, 3] = x
    return T


def test_levels_and_values_through_a_failover():
    fusion = RigFusion(RigFusionConfig(("front", "rear"), max_disagreement_m=0.5,
                                       failback_frames=100))
    level, message, values = rig_check(fusion.facts())
    assert level == 0 and "no fused pose yet" in message and values["rig_source"] == "(none)"
    for i in range(3):
        fusion.update("front", 1000 + i, pose(0.1 * i), True)
        fusion.update("rear", 1000 + i, pose(0.1 * i), True)
    level, message, values = rig_check(fusion.facts())
    assert (level, message) == (0, "rig: fused pose from front")
    assert values["rig_failovers"] == 0 and values["front_tracking"] is True
    assert values["rear_disagreement_m"] == 0.0
    fusion.reset("front")
    level, message, values = rig_check(fusion.facts())
    assert level == 1 and message == "rig: failed over to rear: primary front not tracking (reset)"
    assert values["rig_failovers"] == 1 and values["rig_last_switch"].startswith(
        "front -> rear (reset)")
    fusion.update("rear", 2000, None, False)
    level, message, _ = rig_check(fusion.facts())
    assert level == 2 and "no camera tracks" in message


def test_a_disagreeing_camera_warns_and_the_gather_counts_show():
    fusion = RigFusion(RigFusionConfig(("front", "rear"), max_disagreement_m=0.5))
    for i in range(3):
        fusion.update("front", 1000 + i, pose(0.1 * i), True)
        fusion.update("rear", 1000 + i, pose(0.1 * i + (0.0 if i < 2 else 0.8)), True)
    gather = RigGather(("front", "rear"), 30.0, clock=lambda: 0.0)
    gather.put("rear", 1)
    gather.put("rear", 2)
    level, message, values = rig_check(fusion.facts(), gather.counts())
    assert level == 1 and message == "rig: cameras disagree with the fused pose: rear 0.80 m"
    assert values["rear_dropped"] == 1 and values["front_missed"] == 0

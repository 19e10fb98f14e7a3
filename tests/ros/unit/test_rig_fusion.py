"""RigFusion on a synthetic rigid rig (no ROS): a base driving a circle, a front and a rear
camera whose streams each estimate the base in their own map (the base at their first frame).
The fused pose is the primary's while it tracks, fails over without a jump beyond the motion
over the stamp gap, fails back, and reports each stream's disagreement in metres."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from lingbot_ros.geometry import rigid_inverse, tq_to_matrix
from lingbot_ros.ros.tf.rig_fusion import REASONS, RigFusion, RigFusionConfig

DT = 100_000_000  # ns: 10 Hz
T0 = 1_000_000_000_000
RADIUS, OMEGA = 2.0, 0.5  # m, rad/s: the base's speed is 1 m/s
V_MAX = RADIUS * OMEGA


def base(t_ns: int) -> np.ndarray:
    """The base in the world at ``t_ns``: a circle, facing along it."""
    a = OMEGA * (t_ns - T0) / 1e9
    h = a + math.pi / 2
    return tq_to_matrix(np.array([RADIUS * math.cos(a), RADIUS * math.sin(a), 0.0]),
                        np.array([0.0, 0.0, math.sin(h / 2), math.cos(h / 2)]))


def estimate(t_ns: int, first_ns: int, drift_m_per_s: float = 0.0) -> np.ndarray:
    """A stream's base in its map (the base at its first frame ``first_ns``); with a drift
    along the map's z that grows linearly from its first frame."""
    m = rigid_inverse(base(first_ns)) @ base(t_ns)
    m[2, 3] += drift_m_per_s * (t_ns - first_ns) / 1e9
    return m


def fusion(**kw) -> RigFusion:
    kw.setdefault("names", ("front", "rear"))
    kw.setdefault("failback_frames", 5)
    return RigFusion(RigFusionConfig(**kw))


def truth(t_ns: int) -> np.ndarray:
    return estimate(t_ns, T0)  # the fused frame: the primary's first map


def test_fused_is_the_primary_while_it_tracks_and_disagreement_is_in_metres():
    f = fusion(max_disagreement_m=0.1)
    drift = 0.05  # m/s of the rear stream's z drift
    for k in range(40):
        t = T0 + k * DT
        front = estimate(t, T0)
        step = f.update("front", t, front, tracking=True)
        assert step.fused is not None and step.fused.source == "front"
        assert np.array_equal(step.fused.T_odom_base, front)  # A_primary = I: bit for bit
        assert step.disagreement_m == 0.0
        rear = f.update("rear", t, estimate(t, T0, drift), tracking=True)
        assert rear.fused is None
        # The rear is anchored at its first frame (covered by the fused history), so its
        # disagreement is its drift since then.
        assert rear.disagreement_m == pytest.approx(drift * k * DT / 1e9, abs=1e-9)
    facts = f.facts()
    assert (facts.source, facts.primary, facts.failovers, facts.failbacks) == \
        ("front", "front", 0, 0)
    assert facts.last_switch.reason == "start" and facts.last_switch.to_camera == "front"
    front_f, rear_f = facts.cameras
    assert front_f.disagreement_m == 0.0 and not front_f.over_limit
    assert rear_f.anchored and rear_f.eligible and rear_f.frames_tracking == 40
    assert rear_f.disagreement_m == pytest.approx(drift * 3.9, abs=1e-9)
    assert rear_f.disagreement_rad == pytest.approx(0.0, abs=1e-9)
    assert rear_f.over_limit  # 0.195 m > 0.1 m: a warning, the source stays
    with pytest.raises(ValueError):
        step.fused.T_odom_base[0, 0] = 2.0  # read-only
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.source = "rear"


def test_reset_primary_fails_over_without_a_jump_and_fails_back():
    f = fusion(failback_frames=5)
    reset_k, front_first = 20, None
    fused = {}
    for k in range(60):
        t = T0 + k * DT
        if k == reset_k:
            sw = f.reset("front")
            assert (sw.from_camera, sw.to_camera, sw.reason, sw.anchor_gap_ns) == \
                ("front", "rear", "reset", 0)
            assert f.facts().failovers == 1 and f.source == "rear"
            front_first = t  # the reset stream's new map: the base at its next frame
        first = T0 if front_first is None else front_first
        s = f.update("front", t, estimate(t, first), tracking=True)
        if s.fused:
            fused[t] = s.fused
        s = f.update("rear", t, estimate(t, T0 + 0 * DT), tracking=True)
        if s.fused:
            fused[t] = s.fused
    # One fused pose per tick, each on the true path of the first map: no jump at either
    # switch, whoever was the source.
    assert sorted(fused) == [T0 + k * DT for k in range(60)]
    for t, p in fused.items():
        np.testing.assert_allclose(p.T_odom_base, truth(t), atol=1e-9)
    sources = [fused[T0 + k * DT].source for k in range(60)]
    # The reset front tracks again from tick 20; after 5 frames in a row (tick 24) it
    # takes back over, its front frame coming first in the tick.
    assert sources == ["front"] * 20 + ["rear"] * 4 + ["front"] * 36
    facts = f.facts()
    assert (facts.source, facts.failovers, facts.failbacks) == ("front", 1, 1)
    sw = facts.last_switch
    assert (sw.from_camera, sw.to_camera, sw.reason) == ("rear", "front", "failback")
    assert sw.jump_m == pytest.approx(np.linalg.norm(truth(T0 + 24 * DT)[:3, 3]
                                                     - truth(T0 + 23 * DT)[:3, 3]), abs=1e-9)
    assert sw.jump_dt_ns == DT
    assert facts.cameras[1].disagreement_m == pytest.approx(0.0, abs=1e-9)


def test_lost_primary_jump_is_within_the_bound_with_offset_stamps_and_a_drifting_rear():
    """The rear runs 7 ms after the front and drifts 0.05 m/s: its old anchor is 0.15 m off
    by the failover, yet re-anchoring keeps the jump within v_max * (stamp gap + anchor gap)
    (+1 mm for the interpolation and the drift over one frame)."""
    f = fusion(failback_frames=5)
    off, drift, lost_k = 7_000_000, 0.05, 30
    for k in range(45):
        t = T0 + k * DT
        ok = not lost_k <= k < lost_k + 5
        s = f.update("front", t, estimate(t, T0) if ok else None, tracking=ok)
        if k == lost_k:
            assert s.switch.reason == "lost" and s.switch.to_camera == "rear"
            assert s.switch.anchor_gap_ns == 0  # interpolated in both histories
            before = s.switch.stale_m
            # Its latest frame the fused history covers: lost_k - 2 (+7 ms), anchored at +7 ms.
            assert before == pytest.approx(drift * (lost_k - 2) * DT / 1e9, abs=1e-6)
        f.update("rear", t + off, estimate(t + off, T0 + off, drift), tracking=True)
    sw = f.facts().last_switch
    assert sw.reason == "failback" and f.source == "front"  # after 5 frames back
    facts = f.facts()
    assert (facts.failovers, facts.failbacks) == (1, 1)
    # The failover's jump, recorded at its first fused pose (rear at lost_k + 7 ms):
    f2 = fusion(failback_frames=5)
    for k in range(lost_k + 2):
        t = T0 + k * DT
        ok = k < lost_k
        f2.update("front", t, estimate(t, T0) if ok else None, tracking=ok)
        f2.update("rear", t + off, estimate(t + off, T0 + off, drift), tracking=True)
        if k == lost_k:
            sw = f2.facts().last_switch
            assert sw.reason == "lost" and sw.jump_m is not None
    bound = V_MAX * (sw.jump_dt_ns + sw.anchor_gap_ns) / 1e9 + 1e-3
    assert sw.jump_dt_ns == DT + off
    assert sw.jump_m <= bound
    assert before > bound  # the stale anchor would have jumped by more than the bound


def test_stalled_primary_fails_over_on_the_rig_clock():
    f = fusion(stall_timeout_s=0.25)
    for k in range(10):
        t = T0 + k * DT
        if k < 5:  # then the front's frames stop coming at all
            f.update("front", t, estimate(t, T0), tracking=True)
        s = f.update("rear", t, estimate(t, T0), tracking=True)
        if k < 7:
            assert f.source == "front" and s.switch is None
        if k == 7:  # 0.3 s behind the rig's newest stamp > 0.25 s
            assert s.switch.reason == "stalled" and s.switch.to_camera == "rear"
            assert s.fused is not None and s.fused.source == "rear"
            np.testing.assert_allclose(s.fused.T_odom_base, truth(t), atol=1e-9)
    cams = {c.name: c for c in f.facts().cameras}
    assert cams["front"].tracking and not cams["front"].eligible


def test_start_gives_the_primary_its_grace_then_no_source_then_resume():
    f = fusion(stall_timeout_s=0.25, failback_frames=3)
    for k in range(3):  # the rear tracks, the front's scale is not locked yet
        t = T0 + k * DT
        f.update("front", t, None, tracking=False)
        s = f.update("rear", t, estimate(t, T0), tracking=True)
        assert f.source == "" and s.fused is None
    t = T0 + 3 * DT  # grace over (0.3 s > 0.25 s): the rear is the reference, decided
    s = f.update("front", t, None, tracking=False)  # on the front's frame, the rig's clock
    assert s.switch.reason == "start" and s.switch.to_camera == "rear"
    assert s.switch.stale_m is None and s.fused is None
    s = f.update("rear", t, estimate(t, T0), tracking=True)
    np.testing.assert_allclose(s.fused.T_odom_base, estimate(t, T0), atol=1e-12)
    assert f.facts().failovers == 0
    # Both lost: no source, no fused pose.
    t = T0 + 4 * DT
    f.update("front", t, None, tracking=False)
    s = f.update("rear", t, None, tracking=False)
    assert s.switch.reason == "lost" and s.switch.to_camera == "" and f.source == ""
    assert f.fused_pose().stamp_ns == T0 + 3 * DT
    # The front tracks first (its map: the base at T0 + 5 DT): it resumes at once,
    # re-anchored at the last fused pose.
    t = T0 + 5 * DT
    s = f.update("front", t, estimate(t, t), tracking=True)
    assert s.switch.reason == "resume" and s.switch.to_camera == "front"
    np.testing.assert_allclose(s.fused.T_odom_base, estimate(T0 + 3 * DT, T0), atol=1e-12)
    assert f.facts().failovers == 1


def test_the_config_and_the_inputs_are_checked():
    for kw, word in [(dict(names=()), "at least one"), (dict(names=("Front",)), "[a-z0-9_]+"),
                     (dict(names=("a", "a")), "twice"),
                     (dict(names=("a", "b"), primary="c"), "cameras.primary"),
                     (dict(names=("a",), failback_frames=-1), "failback_frames"),
                     (dict(names=("a",), stall_timeout_s=0.0), "stall_timeout_s"),
                     (dict(names=("a",), max_disagreement_m=0.0), "max_disagreement_m"),
                     (dict(names=("a",), history=1), "history")]:
        with pytest.raises(ValueError, match=word.replace("+", r"\+").replace("[", r"\[")):
            RigFusionConfig(**kw)
    assert RigFusionConfig(names=("a", "b"), primary="b").primary_name == "b"
    assert set(REASONS) == {"start", "lost", "reset", "stalled", "failback", "resume"}
    f = fusion()
    with pytest.raises(ValueError, match="unknown camera 'side'"):
        f.update("side", T0, np.eye(4), tracking=True)
    with pytest.raises(ValueError, match="needs a pose"):
        f.update("front", T0, None, tracking=True)
    f.update("front", T0 + 1, np.eye(4), tracking=True)
    with pytest.raises(ValueError, match="not after"):
        f.update("front", T0 + 1, np.eye(4), tracking=True)
    with pytest.raises(ValueError, match="not a rigid transform"):
        f.update("front", T0 + 2, 2 * np.eye(4), tracking=True)
    with pytest.raises(ValueError, match="shape"):
        f.update("front", T0 + 2, np.eye(3), tracking=True)
    before = f.facts()
    assert before.cameras[0].last_stamp_ns == T0 + 1  # a refused frame changes nothing
    assert f.update("front", T0 + 2, np.eye(4), tracking=True).fused.stamp_ns == T0 + 2


def test_three_cameras_fail_over_in_order_and_a_secondary_source_is_kept():
    """Primary "front" lost: "left" (first in the names after the primary) takes over; "right"
    is not preferred when "left" returns, and a reset of a camera that is not the source
    switches nothing (it is anchored again once it tracks)."""
    f = fusion(names=("left", "front", "right"), primary="front", failback_frames=100)
    down = {"front": range(10, 200), "left": range(20, 25)}
    sources = []
    for k in range(40):
        t = T0 + k * DT
        if k == 30:
            assert f.reset("left") is None
        for name in ("front", "left", "right"):
            ok = k not in down.get(name, ())
            first = T0 + 30 * DT if name == "left" and k >= 30 else T0
            s = f.update(name, t, estimate(t, first) if ok else None, tracking=ok)
            if s.fused:
                sources.append(s.fused.source)
                np.testing.assert_allclose(s.fused.T_odom_base, truth(t), atol=1e-9)
            if k == 30 and name == "left":  # its first frame after the reset: ahead of
                assert not f.facts().cameras[0].anchored  # the fused pose, pending
        if k == 30:  # anchored once the source's frame at its stamp came
            assert f.facts().cameras[0].anchored
            assert f.facts().cameras[0].disagreement_stamp_ns == t
    assert sources == ["front"] * 10 + ["left"] * 10 + ["right"] * 20
    facts = f.facts()
    assert (facts.source, facts.failovers, facts.failbacks) == ("right", 2, 0)
    left = facts.cameras[0]
    assert left.anchored and left.frames_tracking == 10
    assert left.disagreement_m == pytest.approx(0.0, abs=1e-9)


def test_alignment_is_none_until_anchored_then_maps_the_camera_into_the_fused_frame():
    fusion = RigFusion(RigFusionConfig(("front", "rear"), stall_timeout_s=1.0))
    assert fusion.alignment("front") is None and fusion.alignment("rear") is None
    shift = np.eye(4)
    shift[:3, 3] = (0.0, 2.0, 0.0)  # the rear's map starts 2 m away from the front's
    for i in range(3):
        pose = np.eye(4)
        pose[:3, 3] = (0.1 * i, 0.0, 0.0)
        fusion.update("front", 1_000 + i * 100, pose, True)
        fusion.update("rear", 1_000 + i * 100, np.linalg.inv(shift) @ pose, True)
    assert np.array_equal(fusion.alignment("front"), np.eye(4))
    rear = fusion.alignment("rear")
    assert np.allclose(rear, shift, atol=1e-9) and not rear.flags.writeable
    with pytest.raises(ValueError, match="unknown camera"):
        fusion.alignment("left")

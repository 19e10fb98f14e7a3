"""Before and after the scale locks, over DDS (docs/node.md, "Scale"): the node on a robot
with ``scale.source: depth``, the tiny model run in this test as the oracle (as in
test_node_scale.py: the images are the model's size, the sensor depth is k x the model's own
predicted depth, so every sample is k).

* ``scale.before_lock: publish_model_units``: until LOCKED, pose, TF and odometry go out in
  model units (the oracle's unscaled c2w through ``T_bo . c2w . T_bo^-1``) while ~/scale
  says it is not locked; from the locking frame on, in metres; ~/path is rebuilt in metres.
* ``withhold`` (the default), a property: nothing on pose, TF or odometry before LOCKED;
  after it, the sensor's k drifts slowly, then jumps by half: the applied metres_per_unit
  (on ~/scale, which the published TF agrees with) never changes faster than
  ``scale.max_change_per_s`` per second of stamps, and no step of the map -> odom ->
  base_link chain between consecutive frames exceeds the bound that rate implies for the
  model's own displacement between them.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pytest

from tests.ros.dds.test_node_robot_tf import T_BASE_OPTICAL, expected_results, send, static_msgs
from tests.ros.dds.test_node_scale import (MIN_SAMPLES, SCALE, H, ScaleProbe, W,
                                       assert_metric_path, depth_msg, metric_base)
from tests.ros.node_data import stamp_ns
from tests.ros.node_harness import NodeProcess, good_images
from tests.ros.robot_probe import matrix_of
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

K = 2.0  # metres per model unit of the simulated sensor until it drifts
TOL = 1e-5  # the DDS tests' tolerance on poses (float32 model outputs)


def send_depth_per_frame(probe, images, expected, k_of) -> None:
    """The aligned depth of frame i: ``k_of(i)`` x the oracle's predicted depth, all of it
    received by the node before the first image."""
    probe.wait_until(lambda: probe.depth_pub.get_subscription_count() > 0, 30,
                     "the node's aligned_depth subscription")
    for i, msg in enumerate(images):
        depth = expected[stamp_ns(msg.header.stamp)].depth
        probe.depth_pub.publish(depth_msg(k_of(i) * depth, msg.header.stamp))
    probe.wait_until(lambda: probe.counter("scale_depth_received") >= len(images), 30,
                     lambda: f"{len(images)} depth images received ({probe.last_diag()})")


AHEAD, LAG = 3, 4  # paced sending: depth this many frames ahead; the node this far behind


def samples_so_far(probe) -> int:
    return max((g.msg.samples for g in probe.snapshot("scale") if g.msg.segment == 0),
               default=0)


def send_paced(probe, images, expected, k_of, gap_s: float = 0.02) -> None:
    """More frames than the node's depth buffer (16) holds: each depth image goes out AHEAD
    frames before its colour image, and image i only once the node has sampled frame
    i - LAG, so that every frame finds its depth however slow the machine."""
    probe.wait_until(lambda: probe.depth_pub.get_subscription_count() > 0, 30,
                     "the node's aligned_depth subscription")
    probe.wait_for_image_subscriber()

    def depth(i):
        msg = images[i]
        d = expected[stamp_ns(msg.header.stamp)].depth
        probe.depth_pub.publish(depth_msg(k_of(i) * d, msg.header.stamp))
    for i in range(min(AHEAD, len(images))):
        depth(i)
    for i, msg in enumerate(images):
        probe.wait_until(lambda: samples_so_far(probe) >= i - LAG, 90,
                         f"the node's sample of frame {i - LAG}")
        if i + AHEAD < len(images):
            depth(i + AHEAD)
        probe.publish_image(msg)
        time.sleep(gap_s)


def by_stamp(gots) -> dict:
    return {stamp_ns(g.msg.header.stamp): g.msg for g in gots}


def base_transforms(probe) -> dict:
    """stamp -> odom -> base_link, composed with map -> odom of the same stamp."""
    tf = {}
    for t in probe.published_transforms():
        tf.setdefault((t.header.frame_id, t.child_frame_id), {})[
            stamp_ns(t.header.stamp)] = matrix_of(t.transform)
    odom_base = tf.get(("odom", "base_link"), {})
    map_odom = tf.get(("map", "odom"), {})
    assert set(odom_base) == set(map_odom), "map -> odom and odom -> base_link per frame"
    return {s: map_odom[s] @ odom_base[s] for s in odom_base}


def scale_by_stamp(probe, stamps, locked: bool) -> dict:
    """frame stamp -> the ~/scale message of that frame (LOCKED ones, or the others): the
    node stamps ~/scale with the exact stamp of the frame that gave the estimate."""
    out, frames = {}, set(stamps)
    for g in probe.snapshot("scale"):
        if (g.msg.state == g.msg.LOCKED) != locked or g.msg.segment != 0:
            continue
        s = stamp_ns(g.msg.header.stamp)
        if s in frames:
            out[s] = g.msg
    return out


def test_publish_model_units_before_the_lock_then_metres(tmp_path, ros_env):
    frames = 8
    images = good_images(frames, width=W, height=H)
    stamps = [stamp_ns(m.header.stamp) for m in images]
    expected = expected_results(images)
    params = {**SCALE, "scale.source": "depth", "scale.before_lock": "publish_model_units"}
    with NodeProcess(ros_env, tmp_path, params) as node, \
            ScaleProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        send_depth_per_frame(probe, images, expected, lambda i: K)
        send(probe, images)
        # every frame goes out: in model units before the lock, in metres from it
        probe.wait_until(lambda: len(probe.poses) >= frames, 90, f"{frames} poses")
        probe.wait_until(lambda: len(probe.snapshot("odometry")) >= frames, 30, "odometry")
        probe.wait_until(lambda: len(base_transforms(probe)) >= frames, 30, "TF per frame")
        assert probe.pose_stamps() == stamps
        before, after = stamps[:MIN_SAMPLES - 1], stamps[MIN_SAMPLES - 1:]

        # ~/scale: not locked for the frames before (model units), LOCKED at k from then on
        probe.wait_until(lambda: set(after) <= set(scale_by_stamp(probe, stamps, True)), 30,
                         "~/scale LOCKED for every metric frame")
        unlocked = scale_by_stamp(probe, stamps, False)
        for i, s in enumerate(before):
            assert unlocked[s].state == unlocked[s].CONVERGING and unlocked[s].samples == i + 1
            assert s not in scale_by_stamp(probe, stamps, True)
        for s, msg in scale_by_stamp(probe, stamps, True).items():
            assert msg.metres_per_unit == pytest.approx(K, rel=1e-3)

        poses, odom = by_stamp(probe.snapshot("poses")), by_stamp(probe.snapshot("odometry"))
        tf = base_transforms(probe)
        for s in stamps:
            k = 1.0 if s in before else K  # model units: the oracle's c2w as it is
            want = metric_base(expected[s].c2w, k)
            np.testing.assert_allclose(matrix_of(poses[s].pose), want, atol=TOL)
            np.testing.assert_allclose(matrix_of(odom[s].pose.pose), want, atol=TOL)
            np.testing.assert_allclose(tf[s], want, atol=TOL)
        # the model-unit poses really differ from the metric ones (the test can fail)
        moved = [s for s in before if np.linalg.norm(expected[s].c2w[:3, 3]) > 1e-3]
        for s in moved:
            assert not np.allclose(matrix_of(poses[s].pose), metric_base(expected[s].c2w, K),
                                   atol=TOL)
        # the twist never mixes units: within each stretch it is the poses' own difference
        for prev, s in zip(stamps, stamps[1:]):
            if (prev in before) != (s in before):
                continue  # the frame that changes units: its twist is checked below
            rel = np.linalg.inv(matrix_of(poses[prev].pose)) @ matrix_of(poses[s].pose)
            got = odom[s].twist.twist.linear
            np.testing.assert_allclose([got.x, got.y, got.z], rel[:3, 3] / ((s - prev) * 1e-9),
                                       rtol=1e-5, atol=1e-5)

        # ~/path: rebuilt in metres at the lock, every frame
        assert len(stamps) == frames
        assert_metric_path(probe, stamps, expected, K, TOL)

        # The locking frame's twist: from the previous pose in metres, or none (a restart of
        # the twist, as after a withheld stretch), never model units mixed with metres.
        first = after[0]
        prev = stamps[stamps.index(first) - 1]
        rel = (np.linalg.inv(metric_base(expected[prev].c2w, K))
               @ metric_base(expected[first].c2w, K))
        got = odom[first].twist.twist.linear
        metric = rel[:3, 3] / ((first - prev) * 1e-9)
        assert np.allclose([got.x, got.y, got.z], metric, rtol=1e-5, atol=1e-5) or \
            np.allclose([got.x, got.y, got.z], 0.0), \
            f"the locking frame's twist mixes model units and metres: {got}, want {metric} or 0"
    assert node.poll() is not None


# The property run: 3 frames lock at K; then k drifts by +0.5 % a frame (15 %/s at 30 Hz:
# the window's median follows it below the bound), then jumps by half (log 0.405): once the
# median takes it (the new samples outnumber the old), the applied value moves at the bound
# (3 % a frame) and has not arrived by the end.
MAX_CHANGE_PER_S = 0.9
# The node counts the scale's time in float seconds: at ~1.7e9 s a stamp is exact to one
# float64 spacing (2.4e-7 s), so a difference of two stamps to two.
STAMP_EPS_S = 2 * float(np.spacing(1.7e9))
LOCK_FRAMES, DRIFT_FRAMES, JUMP_FRAMES = MIN_SAMPLES, 8, 20


def jump_bound(a: np.ndarray, b: np.ndarray, m_a: float, dt_s: float) -> float:
    """The largest step of base_link in the map between frames a and b (model poses ``a``,
    ``b``; metres per unit ``m_a`` at a) that a scale changing at most MAX_CHANGE_PER_S
    allows. With T_map_base = T_bo . S_m(c2w) . T_bo^-1:
        step = R_bo (m_b t_b - m_a t_a) - R_bo (R_b - R_a) R_bo^T t_bo,
        m_b t_b - m_a t_a = m_b (t_b - t_a) + (m_b - m_a) t_a,  m_b <= m_a exp(rate dt)."""
    R_bo, t_bo = T_BASE_OPTICAL[:3, :3], T_BASE_OPTICAL[:3, 3]
    grow = math.exp(MAX_CHANGE_PER_S * (dt_s + STAMP_EPS_S))
    return (m_a * grow * np.linalg.norm(b[:3, 3] - a[:3, 3])
            + m_a * (grow - 1) * np.linalg.norm(a[:3, 3])
            + np.linalg.norm((b[:3, :3] - a[:3, :3]) @ R_bo.T @ t_bo) + TOL)


def k_of(i: int) -> float:
    drift = min(max(i - LOCK_FRAMES + 1, 0), DRIFT_FRAMES)
    k = K * math.exp(0.005 * drift)
    return k * 1.5 if i >= LOCK_FRAMES + DRIFT_FRAMES else k


def test_withheld_until_locked_then_no_jump_beyond_the_rate_bound(tmp_path, ros_env):
    frames = LOCK_FRAMES + DRIFT_FRAMES + JUMP_FRAMES
    images = good_images(frames, width=W, height=H)
    stamps = [stamp_ns(m.header.stamp) for m in images]
    expected = expected_results(images)
    params = {**SCALE, "scale.source": "depth", "scale.max_change_per_s": MAX_CHANGE_PER_S}
    with NodeProcess(ros_env, tmp_path, params) as node, \
            ScaleProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        send_paced(probe, images, expected, k_of)
        published = stamps[MIN_SAMPLES - 1:]
        probe.wait_until(lambda: len(probe.poses) >= len(published), 90, "the metric poses")
        probe.wait_until(lambda: len(probe.snapshot("odometry")) >= len(published), 30,
                         "odometry")
        probe.wait_until(lambda: len(base_transforms(probe)) >= len(published), 30,
                         "TF per metric frame")
        probe.wait_until(lambda: set(published) <= set(scale_by_stamp(probe, stamps, True)), 30,
                         "~/scale for every metric frame")

        # Before LOCKED: nothing on pose, odometry or TF (in any unit).
        assert probe.pose_stamps() == published
        assert sorted(by_stamp(probe.snapshot("odometry"))) == published
        tf = base_transforms(probe)
        assert sorted(tf) == published
        assert not {stamp_ns(t.header.stamp) for t in probe.published_transforms()} \
            - set(published)
        assert not set(stamps[:MIN_SAMPLES - 1]) & set(scale_by_stamp(probe, stamps, True))

        # The applied scale: on ~/scale per frame, and the TF is the oracle's through it.
        m = {s: scale_by_stamp(probe, stamps, True)[s].metres_per_unit for s in published}
        assert m[published[0]] == pytest.approx(K, rel=1e-3)
        for s in published:
            np.testing.assert_allclose(tf[s], metric_base(expected[s].c2w, m[s]), atol=TOL)
        # ... it changes at most max_change_per_s per second of stamps
        steps = []
        for prev, s in zip(published, published[1:]):
            dt = (s - prev) * 1e-9
            step = abs(math.log(m[s] / m[prev]))
            assert step <= MAX_CHANGE_PER_S * (dt + STAMP_EPS_S), (s, step, dt)
            steps.append(step / (MAX_CHANGE_PER_S * dt))
        # ... it followed the drift below the bound, and once the window's median took the
        # jump, it moved at the bound (a rate-limited change, not a constant), still short of
        # the sensor's k at the end: no jump
        jump_at = published.index(stamps[LOCK_FRAMES + DRIFT_FRAMES])
        assert 0 < max(steps[:jump_at]) < 0.9, steps
        at_bound = [i for i, r in enumerate(steps) if r == pytest.approx(1.0, rel=1e-4)]
        assert len(at_bound) >= 5 and at_bound[0] >= jump_at, steps
        assert m[published[-1]] < k_of(frames - 1) * (1 - 1e-3)
        assert m[published[-1]] > m[stamps[LOCK_FRAMES + DRIFT_FRAMES - 1]] * 1.2

        # No step of map -> odom -> base_link beyond the bound the rate implies for the
        # model's own displacement (jump_bound); its rotation is the model's own (scale-free)
        # rotation between the frames.
        R_bo = T_BASE_OPTICAL[:3, :3]
        for prev, s in zip(published, published[1:]):
            a, b = expected[prev].c2w, expected[s].c2w
            bound = jump_bound(a, b, m[prev], (s - prev) * 1e-9)
            jump = np.linalg.norm(tf[s][:3, 3] - tf[prev][:3, 3])
            assert jump <= bound, (s, jump, bound)
            np.testing.assert_allclose(tf[prev][:3, :3].T @ tf[s][:3, :3],
                                       R_bo @ a[:3, :3].T @ b[:3, :3] @ R_bo.T, atol=TOL)
        # the sensor's k, applied at once where the median took it, would have broken it
        prev, at = published[at_bound[0]], published[at_bound[0] + 1]
        abrupt = metric_base(expected[at].c2w, k_of(stamps.index(at)))
        assert np.linalg.norm(abrupt[:3, 3] - tf[prev][:3, 3]) > jump_bound(
            expected[prev].c2w, expected[at].c2w, m[prev], (at - prev) * 1e-9)
    assert node.poll() is not None

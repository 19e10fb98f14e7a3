"""The odometry source: known k with a lever arm, stationary gaps, turning in place, planar,
odometry at its own rate, bad inputs, and each sample the fit over the whole covered window
(its snapshots: test_odometry_snapshot.py)."""
from __future__ import annotations

import math

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from lingbot_ros.scale import (OdometrySource, PoseBuffer, Rejection, ScaleConfig,
                               ScaleEstimator, ScaleSample, fit_odometry_scale)
from lingbot_ros.scale.se3 import interpolate_pose

from .synth import base_path, model_poses, mount, ns, pose

CFG = ScaleConfig(source="odometry", min_baseline_m=0.3, odom_window=60)
DT = 1 / 30


def run(source, odom, c2w, stamps, odom_stamps=None, odom_poses=None, est=None):
    """Feed odometry (by default at the image stamps) and frames; returns the results.
    Stamps in seconds, fed as integer ns."""
    odom_stamps = stamps if odom_stamps is None else odom_stamps
    odom_poses = odom if odom_poses is None else odom_poses
    for t, p in zip(odom_stamps, odom_poses):
        assert source.push_odometry(ns(t), p) is None
    out = []
    for t, c in zip(stamps, c2w):
        r = source.sample(ns(t), c)
        out.append(r)
        if est is not None:
            est.add(r)
    return out


@pytest.mark.parametrize("k", [0.01, 0.7, 1.0, 42.0])
@pytest.mark.parametrize("forward, pitch", [(0.0, 0.0), (0.3, 0.0), (0.45, 0.35)])
def test_recovers_k_with_a_lever_arm(k, forward, pitch):
    T_bo = mount(forward=forward, up=0.4, pitch_down_rad=pitch)
    odom = base_path("arc", 90, DT, speed=0.6, yaw_rate=0.8)
    c2w = model_poses(odom, T_bo, k)
    stamps = np.arange(90) * DT
    out = run(OdometrySource(CFG, T_bo), odom, c2w, stamps)
    samples = [r for r in out if isinstance(r, ScaleSample)]
    assert len(samples) > 30
    for s in samples:
        assert s.metres_per_unit == pytest.approx(k, rel=1e-6)


def test_lever_arm_ignored_would_be_wrong():
    """The lever arm matters: fitting with the camera at the base biases k when turning."""
    T_bo = mount(forward=0.5, up=0.3)
    odom = base_path("arc", 90, DT, speed=0.3, yaw_rate=1.2)
    c2w = model_poses(odom, T_bo, 2.0)
    right = fit_odometry_scale(c2w, odom, T_bo, CFG)
    T_at_base = T_bo.copy()
    T_at_base[:3, 3] = 0.0
    wrong = fit_odometry_scale(c2w, odom, T_at_base, CFG)
    assert right[0] == pytest.approx(2.0, rel=1e-9)
    assert abs(wrong[0] / 2.0 - 1) > 0.02


def test_noisy_odometry_through_the_estimator():
    rng = np.random.default_rng(5)
    T_bo = mount(forward=0.3, up=0.5)
    n = 400
    odom = base_path("arc", n, DT, speed=0.5, yaw_rate=0.4)
    c2w = model_poses(odom, T_bo, 3.0)
    c2w[:, :3, 3] += rng.normal(0, 0.002 / 3.0, (n, 3))  # 2 mm of model noise
    est = ScaleEstimator(CFG)
    run(OdometrySource(CFG, T_bo), odom, c2w, np.arange(n) * DT, est=est)
    e = est.estimate
    assert e.locked and e.metres_per_unit == pytest.approx(3.0, rel=0.01)


def test_stationary_stretch_gives_no_sample_and_is_skipped():
    T_bo = mount(forward=0.3)
    n = 180
    odom = base_path("stop_go", n, DT, speed=0.6, yaw_rate=0.2)
    rng = np.random.default_rng(2)
    c2w = model_poses(odom, T_bo, 0.5)
    still = slice(n // 3, 2 * n // 3)
    c2w[still, :3, 3] += rng.normal(0, 0.003, (n // 3, 3))  # the model jitters while still
    out = run(OdometrySource(CFG, T_bo), odom, c2w, np.arange(n) * DT)
    # well inside the stop (window full of still frames... after the drive left it)
    samples = [r for r in out if isinstance(r, ScaleSample)]
    assert samples and all(s.metres_per_unit == pytest.approx(0.5, rel=0.01) for s in samples)
    first_still = fit_odometry_scale(c2w[n // 3 + 1:2 * n // 3], odom[n // 3 + 1:2 * n // 3],
                                     T_bo, CFG)
    assert first_still == "stationary"


@pytest.mark.parametrize("kind", ["arc", "stop_go", "spin", "still"])
def test_each_sample_is_the_fit_over_the_whole_covered_window(kind):
    """The source stops walking back once the pairs' path reaches min_baseline_m (the frames
    before it cannot change the fit); every result, sample or reason, is still exactly the
    fit over all the window's frames (the window's own bookkeeping, here: all covered)."""
    T_bo = mount(forward=0.3, up=0.2, pitch_down_rad=0.2)
    n = 240
    odom = base_path(kind, n, DT, speed=0.6, yaw_rate=0.5)
    c2w = model_poses(odom, T_bo, 0.8)
    c2w[:, :3, 3] += np.random.default_rng(5).normal(0, 1e-3, (n, 3))
    source = OdometrySource(CFG, T_bo)
    for i, r in enumerate(run(source, odom, c2w, np.arange(n) * DT)):
        lo = max(0, i + 1 - CFG.odom_window)
        if i == 0:
            assert isinstance(r, Rejection)
            continue
        fit = fit_odometry_scale(c2w[lo:i + 1], odom[lo:i + 1], T_bo, CFG)
        if isinstance(fit, str):
            assert isinstance(r, Rejection) and r.reason == fit, (i, r, fit)
        else:
            assert isinstance(r, ScaleSample), (i, r, fit)
            assert (r.metres_per_unit, r.support) == fit  # bit for bit


def test_turning_in_place_is_pure_rotation():
    T_bo = mount(forward=0.3)
    odom = base_path("spin", 60, DT, yaw_rate=1.0)
    c2w = model_poses(odom, T_bo, 1.0)
    out = run(OdometrySource(CFG, T_bo), odom, c2w, np.arange(60) * DT)
    assert all(isinstance(r, Rejection) for r in out)
    assert out[-1].reason == "pure_rotation"
    still = base_path("still", 30, DT)
    assert fit_odometry_scale(model_poses(still, T_bo, 1.0), still, T_bo, CFG) == "stationary"


def test_planar_ignores_z_of_the_odometry():
    """Wheel odometry reports z = 0 while the robot drives up a ramp: planar still fits k."""
    T_bo = mount(forward=0.2)
    n = 90
    true = base_path("arc", n, DT, speed=0.5, yaw_rate=0.3)
    true[:, 2, 3] = np.linspace(0, 0.4, n)  # the ramp, which the odometry does not see
    c2w = model_poses(true, T_bo, 2.0)
    flat = true.copy()
    flat[:, 2, 3] = 0.0
    planar = ScaleConfig(source="odometry", planar=True, min_baseline_m=0.3)
    k3d = fit_odometry_scale(c2w, flat, T_bo, CFG)[0]
    k2d = fit_odometry_scale(c2w, flat, T_bo, planar)[0]
    assert k2d == pytest.approx(2.0, rel=1e-3)
    assert abs(k3d / 2.0 - 1) > 2e-3


def test_odometry_at_its_own_rate_is_interpolated():
    T_bo = mount(forward=0.3)
    fine = base_path("arc", 600, 1 / 100, speed=0.6, yaw_rate=0.5)  # 100 Hz odometry
    odom_stamps = np.arange(600) / 100
    img_stamps = np.arange(0.005, 5.9, 1 / 30)  # images between the odometry stamps
    poses_at_img = []
    for t in img_stamps:
        i = int(t * 100)
        poses_at_img.append(interpolate_pose(fine[i], fine[i + 1], t * 100 - i))
    c2w = model_poses(np.stack(poses_at_img), T_bo, 1.5)
    src = OdometrySource(CFG, T_bo)
    out = run(src, None, c2w, img_stamps, odom_stamps, fine)
    samples = [r for r in out if isinstance(r, ScaleSample)]
    assert len(samples) > 100
    # a constant-rate arc: interpolation is exact up to the chord's curvature
    assert all(s.metres_per_unit == pytest.approx(1.5, rel=1e-3) for s in samples)


def test_frames_newer_than_the_odometry_wait():
    T_bo = mount()
    odom = base_path("arc", 60, DT, speed=0.6)
    c2w = model_poses(odom, T_bo, 1.0)
    src = OdometrySource(CFG, T_bo)
    r = src.sample(0, c2w[0])
    assert r.reason == "no_odometry" and r.stamp_ns == 0
    for i in range(30):  # odometry only up to frame 29
        src.push_odometry(ns(i * DT), odom[i])
    results = [src.sample(ns(i * DT), c2w[i]) for i in range(1, 40)]
    assert results[-1].stamp_ns == ns(29 * DT)  # newest covered frame
    assert isinstance(results[-1], ScaleSample)


def test_bad_inputs_are_counted_reasons():
    T_bo = mount()
    src = OdometrySource(CFG, T_bo)
    assert src.push_odometry(0, np.full((4, 4), np.nan)).reason == "non_finite"
    assert src.push_odometry(0, np.eye(3)).reason == "non_finite"
    assert src.push_odometry(0, 2 * np.eye(4)).reason == "non_finite"  # not rigid
    # a stamp that is not integer ns: non_finite, without a stamp
    for stamp in (float("nan"), math.inf, 0.0, 1.5, True):
        r = src.push_odometry(stamp, np.eye(4))
        assert (r.reason, r.stamp_ns) == ("non_finite", None), stamp
        r = src.sample(stamp, np.eye(4))
        assert (r.reason, r.stamp_ns) == ("non_finite", None), stamp
    assert src.state_dict()["odometry"] == [] and src.state_dict()["frames"] == []
    r = src.push_odometry(ns(2.0), np.full((4, 4), np.nan))
    assert (r.reason, r.stamp_ns) == ("non_finite", ns(2.0))  # the pose's fault: stamped
    assert src.sample(0, np.eye(3)).reason == "wrong_size"
    assert src.sample(0, np.full((4, 4), np.inf)).reason == "non_finite"
    assert src.push_odometry(0, np.eye(4)) is None  # integer ns, also numpy's
    assert src.push_odometry(np.int64(ns(1.0)), np.eye(4)) is None
    r = src.sample(ns(0.5), np.eye(4))
    assert (r.reason, r.stamp_ns) == ("out_of_sync", ns(0.5))  # a 1 s gap in the odometry
    with pytest.raises(ValueError, match="T_base_optical"):
        OdometrySource(CFG, np.zeros((4, 4)))


def test_pose_buffer_orders_and_replaces():
    buf = PoseBuffer(max_dt_s=0.1)
    buf.push(ns(0.2), pose(t=(2, 0, 0)))
    buf.push(0, pose(t=(0, 0, 0)))
    buf.push(ns(0.1), pose(t=(9, 0, 0)))
    buf.push(ns(0.1), pose(t=(1, 0, 0)))  # same stamp: replaced
    assert len(buf) == 3
    assert [(t, p[0, 3]) for t, p in buf.poses()] == [(0, 0), (ns(0.1), 1), (ns(0.2), 2)]
    assert all(type(t) is int for t, _ in buf.poses())
    assert buf.at(ns(0.15))[0, 3] == pytest.approx(1.5)
    assert buf.at(ns(0.1))[0, 3] == 1.0  # exact
    assert buf.at(ns(0.3)).reason == "out_of_sync"
    assert buf.at(-1).reason == "out_of_sync"
    assert PoseBuffer(max_dt_s=0.1).at(0).reason == "no_odometry"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                                    st.integers(-2**62, 2**62), st.integers(0, 10**9),
                                    st.booleans()),
                          st.sampled_from(["nan", "scaled", "ok", "shape", "int"])),
                min_size=1, max_size=12))
def test_garbage_never_raises(items):
    src = OdometrySource(CFG, mount())
    est = ScaleEstimator(CFG)
    for i, (t, kind) in enumerate(items):
        p = {"nan": np.full((4, 4), np.nan), "scaled": 3 * np.eye(4), "ok": pose(t=(i, 0, 0)),
             "shape": np.eye(3), "int": np.eye(4, dtype=int)}[kind]
        r = src.push_odometry(t, p)
        if r is not None:
            est.add(r)
        est.add(src.sample(ns(i / 30), p if kind != "ok" else np.eye(4)))
    assert est.estimate.samples + sum(n for _, n in est.estimate.rejections) >= len(items)

"""The camera_height source: RANSAC floors at known heights, tilt bounds, no floor, bad input."""
from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from lingbot_ros.scale import (Rejection, ScaleConfig, ScaleEstimator, ScaleSample,
                               bench_camera_height_source, camera_height_sample,
                               depth_grid_points, fit_ground_plane)
from lingbot_ros.scale.se3 import rigid_inverse

from .synth import mount, ns, pose

CFG = ScaleConfig(source="camera_height", camera_height_m=1.65)


def scene_in_optical(T_bo, height_m, k, rng, floor=True, n_floor=6000, n_clutter=3000,
                     wall=False, floor_tilt=0.0, noise=0.003):
    """Points (model units) in the camera's optical frame: a floor at z = 0 of the base
    (the camera at ``height_m`` above it), clutter above it, optionally a wall."""
    pts = []
    if floor:
        f = np.column_stack([rng.uniform(1, 15, n_floor), rng.uniform(-5, 5, n_floor),
                             rng.normal(0, noise, n_floor)])
        f = f @ pose((floor_tilt, 0.0, 0.0))[:3, :3].T
        pts.append(f)
    clutter = np.column_stack([rng.uniform(1, 10, n_clutter), rng.uniform(-4, 4, n_clutter),
                               rng.uniform(0.1, 3.0, n_clutter)])
    pts.append(clutter)
    if wall:
        w = np.column_stack([np.full(4000, 4.0), rng.uniform(-4, 4, 4000),
                             rng.uniform(0.0, 3.0, 4000)])
        pts.append(w)
    base = np.concatenate(pts)  # in a frame whose z = 0 is the floor
    # T_bo here puts the camera at its mount height over base_link; the base sits on the
    # floor: optical = T_ob @ (base point - height offset of base_link, 0 here)
    T_ob = rigid_inverse(T_bo)
    opt = base @ T_ob[:3, :3].T + T_ob[:3, 3]
    assert T_bo[2, 3] == pytest.approx(height_m)
    return opt / k


@pytest.mark.parametrize("height", [0.3, 1.65, 2.5])
@pytest.mark.parametrize("k", [0.05, 1.0, 17.0])
@pytest.mark.parametrize("pitch", [0.0, 0.4])
def test_recovers_k_from_the_floor(height, k, pitch):
    rng = np.random.default_rng(int(height * 100 + k))
    T_bo = mount(forward=0.2, up=height, pitch_down_rad=pitch)
    pts = scene_in_optical(T_bo, height, k, rng)
    s = camera_height_sample(ns(3.0), pts, T_bo, height, CFG)
    assert isinstance(s, ScaleSample), s
    assert s.metres_per_unit == pytest.approx(k, rel=0.01)
    assert s.stamp_ns == ns(3.0) and s.support >= CFG.ground_min_inliers


def test_image_shaped_points_with_confidence_and_configured_height():
    rng = np.random.default_rng(1)
    T_bo = mount(up=1.65)
    pts = scene_in_optical(T_bo, 1.65, 2.0, rng, n_floor=6000, n_clutter=3000)
    img = pts[:9000].reshape(90, 100, 3)
    conf = np.full((90, 100), 3.0)
    garbage = rng.random((90, 100)) < 0.2
    img = img.copy()
    img[garbage] = rng.normal(0, 3, (int(garbage.sum()), 3))  # low confidence: masked
    conf[garbage] = 1.0
    s = camera_height_sample(0, img, T_bo, None, CFG, conf=conf)
    assert s.metres_per_unit == pytest.approx(2.0, rel=0.01)


def test_no_floor_gives_no_sample():
    rng = np.random.default_rng(2)
    T_bo = mount(up=1.0)
    for kw in ({"floor": False}, {"floor": False, "wall": True},
               {"floor_tilt": 0.6}):  # a 34 degree slope is not a floor (max 10)
        pts = scene_in_optical(T_bo, 1.0, 1.0, rng, **kw)
        r = camera_height_sample(ns(2.5), pts, T_bo, 1.0, CFG)
        assert isinstance(r, Rejection) and r.reason == "no_floor", kw
        assert r.stamp_ns == ns(2.5)
    est = ScaleEstimator(CFG)
    est.add(r)
    assert est.estimate.rejection_count("no_floor") == 1


def test_a_gentle_slope_within_the_tilt_bound_is_a_floor():
    rng = np.random.default_rng(3)
    T_bo = mount(up=1.2)
    pts = scene_in_optical(T_bo, 1.2, 1.0, rng, floor_tilt=0.05, n_clutter=500)
    plane = fit_ground_plane(pts, T_bo[2, :3], CFG)
    assert plane is not None and np.degrees(np.arccos(plane.normal @ T_bo[2, :3])) \
        == pytest.approx(np.degrees(0.05), abs=0.3)


def test_bad_inputs_are_reasons():
    T_bo = mount(up=1.0)
    pts = np.zeros((100, 3))
    assert camera_height_sample(0, pts, T_bo, None, ScaleConfig(source="camera_height")) \
        .reason == "no_height"
    assert camera_height_sample(0, pts, T_bo, float("nan"), CFG).reason == "no_height"
    assert camera_height_sample(0, np.zeros((10, 2)), T_bo, 1.0, CFG).reason == "wrong_size"
    assert camera_height_sample(0, np.zeros((10, 3), int), T_bo, 1.0, CFG).reason \
        == "wrong_size"
    bad = np.ones((10, 3))
    bad[0, 0] = np.nan
    assert camera_height_sample(0, bad, T_bo, 1.0, CFG).reason == "non_finite"
    assert camera_height_sample(0, pts, np.zeros((4, 4)), 1.0, CFG).reason == "non_finite"
    assert camera_height_sample(0, pts, T_bo, 1.0, CFG, conf=np.ones(5)).reason \
        == "wrong_size"
    assert camera_height_sample(0, pts, T_bo, 1.0, CFG).reason == "no_floor"


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 3000), st.sampled_from([np.float32, np.float64]),
       st.sampled_from([0.0, np.nan, np.inf, 1e30, -1.0]), st.integers(0, 2**31))
def test_garbage_never_raises(n, dtype, fill, seed):
    rng = np.random.default_rng(seed)
    pts = rng.normal(0, 2, (n, 3)).astype(dtype)
    pts[::7] = fill
    r = camera_height_sample(0, pts, mount(up=1.0), 1.0, CFG)
    assert isinstance(r, (Rejection, ScaleSample))


def test_a_small_floor_among_clutter_and_a_wall_is_found():
    """A floor of a fifth to a half of the points below the camera: enough hypotheses are
    tried."""
    for i, height in enumerate((0.5, 1.2, 2.0)):
        rng = np.random.default_rng(40 + i)
        T_bo = mount(forward=0.2, up=height, pitch_down_rad=0.3)
        pts = scene_in_optical(T_bo, height, 3.0, rng, n_floor=1500, n_clutter=6000,
                               wall=True)
        s = camera_height_sample(0, pts, T_bo, height, CFG)
        assert isinstance(s, ScaleSample), (height, s)
        assert s.metres_per_unit == pytest.approx(3.0, rel=0.01)


def test_deterministic_and_the_same_from_float32_points():
    rng = np.random.default_rng(7)
    T_bo = mount(up=1.65, pitch_down_rad=0.2)
    pts = scene_in_optical(T_bo, 1.65, 2.0, rng)
    first = camera_height_sample(0, pts, T_bo, 1.65, CFG)
    assert camera_height_sample(0, pts, T_bo, 1.65, CFG) == first
    s32 = camera_height_sample(0, pts.astype(np.float32), T_bo, 1.65, CFG)
    assert s32.metres_per_unit == pytest.approx(first.metres_per_unit, rel=1e-4)


def test_depth_grid_points_unproject_the_grid_through_the_pinhole():
    K = np.array([[50.0, 0.0, 20.0], [0.0, 40.0, 15.0], [0.0, 0.0, 1.0]])
    depth = np.random.default_rng(0).uniform(0.5, 4.0, (30, 41)).astype(np.float32)
    depth[1, 4] = 0.0  # a hole on the grid (every 3rd pixel from 1): dropped
    conf = np.arange(depth.size, dtype=np.float32).reshape(depth.shape)
    for d in (depth, depth.astype(np.float64)):
        points, c = depth_grid_points(d, K, 3, conf)
        assert points.dtype == d.dtype and points.shape == (10 * 14 - 1, 3)
        vs, us = np.mgrid[1:30:3, 1:41:3]
        z = d[1::3, 1::3]
        keep = z > 0
        expected = np.stack([(us[keep] - 20.0) / 50.0 * z[keep],
                             (vs[keep] - 15.0) / 40.0 * z[keep], z[keep]], axis=1)
        np.testing.assert_allclose(points, expected, rtol=1e-6)
        np.testing.assert_array_equal(c, conf[1::3, 1::3][keep])
    nan = depth.copy()
    nan[4, 7] = np.nan
    assert depth_grid_points(nan, K, 3).reason == "non_finite"
    assert depth_grid_points(depth, np.zeros((3, 3)), 3).reason == "non_finite"
    assert depth_grid_points(depth[..., None, None], K, 3).reason == "wrong_size"


def test_the_bench_recovers_its_factor():
    """The cost benchmark's contract (numbers, not speed: speed is shown by benchmarks)."""
    out = bench_camera_height_source(frames=5)
    assert out["model_hw"] == [378, 518] and out["frames"] == 5
    assert 0 < out["p50_us"] <= out["p99_us"]
    assert out["metres_per_unit"] == pytest.approx(2.5, rel=0.01)

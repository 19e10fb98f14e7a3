"""The boundary conversions and the REP-105 algebra T_map_base = T_bo · S(c2w) · T_bo⁻¹."""
from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from lingbot_ros.scale import (base_in_map_metres, c2w_to_metres, check_factor,
                               depth_to_metres, points_to_metres)
from lingbot_ros.scale.se3 import rigid_inverse

from .synth import base_path, model_poses, mount, pose


def test_c2w_scales_translation_only():
    c2w = pose((0.1, -0.2, 0.3), (1.0, 2.0, -3.0))
    m = c2w_to_metres(c2w, 2.5)
    np.testing.assert_array_equal(m[:3, :3], c2w[:3, :3])
    np.testing.assert_allclose(m[:3, 3], [2.5, 5.0, -7.5])
    np.testing.assert_array_equal(m[3], [0, 0, 0, 1])
    batch = c2w_to_metres(np.stack([c2w, c2w]), 2.5)
    assert batch.shape == (2, 4, 4) and np.array_equal(batch[1], m)
    assert c2w[0, 3] == 1.0  # the input is not modified


def test_depth_and_points():
    d = np.array([[1.0, np.nan], [np.inf, 0.0]], np.float32)
    out = depth_to_metres(d, 0.5)
    assert out.dtype == np.float32 and out[0, 0] == 0.5 and np.isnan(out[0, 1])
    assert np.isinf(out[1, 0]) and out[1, 1] == 0
    p = np.ones((5, 3), np.float32)
    q = points_to_metres(p, 3.0)
    assert q.dtype == np.float32 and np.all(q == 3.0)
    assert points_to_metres(np.ones((2, 3), int), 2.0).dtype == np.float64
    with pytest.raises(ValueError, match="shape"):
        points_to_metres(np.ones((3, 2)), 1.0)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), True, "1"])
def test_factor_must_be_positive_finite(bad):
    with pytest.raises(ValueError, match="metres_per_unit"):
        check_factor(bad)


@pytest.mark.parametrize("k", [0.2, 1.0, 4.0])
def test_turning_in_place_keeps_the_base_put(k):
    """The issue's example: a camera 0.3 m ahead of base_link, the robot turning in place.
    With the scale applied before composing, base_link stays at the origin; composing model
    units with the metric extrinsic (the old algebra) moves it."""
    T_bo = mount(forward=0.3, up=0.4)
    odom = base_path("spin", 90, 1 / 30, yaw_rate=1.0)
    c2w = model_poses(odom, T_bo, k)
    T_map_base = base_in_map_metres(c2w, T_bo, k)
    np.testing.assert_allclose(T_map_base[:, :3, 3], 0.0, atol=1e-12)
    np.testing.assert_allclose(T_map_base, odom, atol=1e-12)
    if k != 1.0:
        old = T_bo @ c2w @ rigid_inverse(T_bo)
        assert np.abs(old[:, :3, 3]).max() > 0.05


@settings(max_examples=50, deadline=None)
@given(st.floats(0.01, 100.0), st.floats(-1.0, 1.0), st.floats(-0.5, 0.5),
       st.floats(0.0, 0.6))
def test_property_base_in_map_is_the_metric_base_trajectory(k, forward, yaw, pitch):
    """For any scale and mount, T_map_base equals the base's true motion in metres."""
    T_bo = mount(forward=forward, up=0.3, pitch_down_rad=pitch, yaw_rad=yaw)
    odom = base_path("arc", 20, 0.1, speed=1.0, yaw_rate=0.7)
    odom = rigid_inverse(odom[0]) @ odom
    np.testing.assert_allclose(base_in_map_metres(model_poses(odom, T_bo, k), T_bo, k), odom,
                               atol=1e-9)

"""The ``scale.*`` parameters (and ``frames.ground``): rows of the parameter table that build
``Settings.scale`` (a ``ScaleConfig``); bad values are refused naming the parameter."""
from __future__ import annotations

import dataclasses

import pytest

from lingbot_ros.ros.params.declare import build_settings, check_update
from lingbot_ros.ros.params.table import PARAMS, rows
from lingbot_ros.scale import ScaleConfig


def test_the_rows_build_the_default_scale_config():
    """Every ScaleConfig field is a parameter row (docs/scale.md lists them all as ROS
    parameters; six had none: depth_stride, odom_window, odom_max_dt_s, ground_inlier_ratio,
    ground_min_inliers, max_samples)."""
    settings = build_settings({})
    assert settings.scale == ScaleConfig()
    assert settings.node.ground_frame == "base_footprint"
    fields = {f.name for f in dataclasses.fields(ScaleConfig)}
    attributes = {p.attribute for p in rows("scale")}
    assert attributes == fields
    assert all(p.name == "scale." + p.attribute for p in rows("scale"))
    s = build_settings({"scale.depth_stride": 2, "scale.odom_window": 40,
                        "scale.max_samples": 50, "scale.ground_min_inliers": 100})
    assert (s.scale.depth_stride, s.scale.odom_window, s.scale.max_samples,
            s.scale.ground_min_inliers) == (2, 40, 50, 100)


def test_values_reach_the_scale_config():
    s = build_settings({"scale.source": "depth", "scale.depth_unit_m": 1e-4,
                        "scale.camera_height_m": 1.65, "scale.min_samples": 4,
                        "scale.before_lock": "publish_model_units", "scale.planar": True})
    assert (s.scale.source, s.scale.depth_unit_m, s.scale.camera_height_m) == \
        ("depth", 1e-4, 1.65)
    assert (s.scale.min_samples, s.scale.before_lock, s.scale.planar) == \
        (4, "publish_model_units", True)
    assert s.session.return_depth  # the depth source reads every frame's depth
    assert build_settings({"scale.depth_unit_m": 0.0}).scale.depth_unit_m is None


@pytest.mark.parametrize("name, value, says", [
    ("scale.source", "lidar", "must be one of"),
    ("scale.before_lock", "guess", "must be one of"),
    ("scale.factor", 0.0, "must be in"),
    ("scale.min_samples", 0, "must be in"),
    ("scale.depth_min_m", 20.0, "scale.depth_min_m"),  # above depth_max_m: ScaleConfig's rule
    ("scale.odom_min_step_m", 1.0, "scale.odom_min_step_m"),  # above min_baseline_m
])
def test_bad_scale_values_are_refused_with_the_parameter_name(name, value, says):
    with pytest.raises(ValueError, match=says) as err:
        check_update({p.name: p.default for p in PARAMS}, {name: value})
    assert repr(name) in str(err.value) or name in str(err.value)

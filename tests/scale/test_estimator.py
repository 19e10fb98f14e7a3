"""ScaleEstimator: states, robust lock, bounded refinement, reset, stale reasons, counters."""
from __future__ import annotations

import math

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from lingbot_ros.scale import (REASONS, Rejection, ScaleConfig, ScaleEstimator, ScaleSample,
                               ScaleState)


def depth_cfg(**kw) -> ScaleConfig:
    return ScaleConfig(source="depth", **kw)


def feed(est, values, t0=0.0, dt=1 / 30, source="depth"):
    out = []
    for i, v in enumerate(values):
        out.append(est.add(ScaleSample(t0 + i * dt, float(v), source)))
    return out


def test_none_stays_unknown_in_model_units():
    est = ScaleEstimator(ScaleConfig())
    e = est.estimate
    assert e.state is ScaleState.UNKNOWN and e.output_factor is None
    assert e.units == "model units" and math.isnan(e.metres_per_unit)
    assert "model units" in e.status_text
    assert est.stale_reason(1e9) is None


def test_fixed_is_locked_at_once():
    est = ScaleEstimator(ScaleConfig(source="fixed", factor=0.25))
    e = est.estimate
    assert e.locked and e.output_factor == 0.25 and e.sigma_log == 0.0 and e.units == "m"
    assert est.reset().output_factor == 0.25  # a new stream: still the factor
    assert est.stale_reason(1e9) is None


def test_converging_then_locked_at_min_samples():
    est = ScaleEstimator(depth_cfg(min_samples=10))
    rng = np.random.default_rng(0)
    snaps = feed(est, 2.0 * np.exp(rng.normal(0, 0.01, 10)))
    assert [s.state for s in snaps[:9]] == [ScaleState.CONVERGING] * 9
    assert all(s.output_factor is None for s in snaps[:9])
    assert snaps[3].status_text == "estimating scale 4/10 (depth)"
    assert snaps[9].locked
    assert snaps[9].metres_per_unit == pytest.approx(2.0, rel=0.01)
    assert 0 < snaps[9].sigma_log < 0.01 and snaps[9].samples == 10


def test_median_resists_outliers():
    est = ScaleEstimator(depth_cfg(min_samples=20))
    values = [3.0] * 14 + [300.0, 0.001, 1e6, 0.5, 7.0, 1e-4]  # 30 % wild samples
    e = feed(est, values)[-1]
    assert e.locked and e.metres_per_unit == pytest.approx(3.0, rel=1e-9)


def test_no_lock_while_the_spread_is_large():
    est = ScaleEstimator(depth_cfg(min_samples=5, lock_spread=0.05))
    rng = np.random.default_rng(1)
    e = feed(est, np.exp(rng.normal(0, 0.5, 50)))[-1]
    assert e.state is ScaleState.CONVERGING and e.output_factor is None


def test_after_lock_the_change_is_rate_bounded():
    cfg = depth_cfg(min_samples=5, max_change_per_s=0.01, max_samples=20)
    est = ScaleEstimator(cfg)
    feed(est, [1.0] * 5)
    assert est.estimate.locked
    # the truth jumps to 2.0: the applied value creeps at 1 %/s of sample stamps
    snaps = feed(est, [2.0] * 40, t0=5 / 30, dt=0.5)
    logs = [math.log(s.metres_per_unit) for s in snaps]
    assert all(abs(b - a) <= 0.01 * 0.5 + 1e-12 for a, b in zip(logs, logs[1:]))
    assert logs[-1] > 0.05  # it moves toward 2.0
    assert snaps[-1].sigma_log > 0.3  # the lag is part of the uncertainty


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-0.2, 2.0), st.floats(0.05, 50.0)), min_size=1,
                max_size=80),
       st.floats(0.001, 0.2))
def test_property_nothing_metric_before_lock_and_bounded_after(steps, rate):
    """Before LOCKED no output factor; after it, consecutive applied scales change at most
    max_change_per_s x (stamp advance), whatever the samples and stamps (even backwards)."""
    est = ScaleEstimator(depth_cfg(min_samples=3, lock_spread=0.5, max_change_per_s=rate))
    t, prev, prev_t = 0.0, None, None
    for dt, value in steps:
        t += dt
        e = est.add(ScaleSample(t, value, "depth"))
        if not e.locked:
            assert e.output_factor is None and e.units == "model units"
            assert prev is None  # never unlocks
            continue
        assert e.output_factor == e.metres_per_unit
        if prev is not None:
            bound = rate * max(0.0, t - prev_t) + 1e-12
            assert abs(math.log(e.metres_per_unit) - math.log(prev)) <= bound
            prev_t = max(prev_t, t)
        else:
            prev_t = t
        prev = e.metres_per_unit


def test_reset_starts_a_new_segment():
    est = ScaleEstimator(depth_cfg(min_samples=3), segment=4)
    feed(est, [2.0] * 3)
    assert est.estimate.locked and est.estimate.segment == 4
    e = est.reset()
    assert e.state is ScaleState.UNKNOWN and e.samples == 0 and e.segment == 5
    assert est.reset(segment=11).segment == 11


def test_rejections_are_counted_by_reason():
    est = ScaleEstimator(depth_cfg())
    for reason in ("wrong_size", "wrong_size", "out_of_sync"):
        est.add(Rejection(1.0, reason))
    e = est.estimate
    assert e.rejection_count("wrong_size") == 2 and e.rejection_count("out_of_sync") == 1
    assert e.reason == "out_of_sync" and e.state is ScaleState.UNKNOWN
    assert "last rejection: out_of_sync" in e.status_text
    est.add(ScaleSample(2.0, 1.0, "depth"))
    assert est.estimate.reason == ""


def test_stale_reason_names_why():
    est = ScaleEstimator(depth_cfg(stale_timeout_s=2.0))
    assert est.stale_reason(100.0) is None  # the clock starts at the first look
    assert est.stale_reason(103.0) == "no_depth"  # nothing ever came
    est.add(ScaleSample(104.0, 1.0, "depth"))
    assert est.stale_reason(105.0) is None
    est.add(Rejection(105.5, "out_of_sync"))
    assert est.stale_reason(105.9) is None  # within the timeout
    assert est.stale_reason(106.5) == "out_of_sync"
    odo = ScaleEstimator(ScaleConfig(source="odometry", stale_timeout_s=1.0))
    odo.add(Rejection(0.0, "stationary"))
    assert odo.stale_reason(1.5) == "stationary"


def test_wrong_inputs_are_programming_errors():
    est = ScaleEstimator(depth_cfg())
    with pytest.raises(ValueError, match="odometry"):
        est.add(ScaleSample(0.0, 1.0, "odometry"))
    with pytest.raises(ValueError, match="ScaleSample or a Rejection"):
        est.add(1.0)
    with pytest.raises(ValueError, match="unknown rejection reason"):
        Rejection(0.0, "bogus")
    with pytest.raises(ValueError, match="metres_per_unit"):
        ScaleSample(0.0, float("nan"), "depth")
    assert len(set(REASONS)) == len(REASONS)


@pytest.mark.parametrize("kw, match", [
    ({"source": "lidar"}, "scale.source must be one of"),
    ({"before_lock": "guess"}, "scale.before_lock"),
    ({"factor": 0.0}, "scale.factor must be a finite number > 0"),
    ({"factor": float("inf")}, "scale.factor"),
    ({"depth_unit_m": -1.0}, "scale.depth_unit_m"),
    ({"depth_min_m": 5.0, "depth_max_m": 1.0}, "must be below"),
    ({"depth_min_conf": 0.5}, "depth_min_conf must be >= 1"),
    ({"min_samples": 0}, "scale.min_samples must be an integer >= 1"),
    ({"min_samples": True}, "scale.min_samples"),
    ({"min_samples": 20, "max_samples": 10}, "max_samples"),
    ({"max_ground_tilt_deg": 95.0}, "below 90"),
    ({"planar": "yes"}, "scale.planar must be a bool"),
    ({"lock_spread": -0.1}, "scale.lock_spread"),
    ({"camera_height_m": 0.0}, "scale.camera_height_m"),
])
def test_config_validation_messages(kw, match):
    with pytest.raises(ValueError, match=match):
        ScaleConfig(**kw)


def test_config_defaults():
    cfg = ScaleConfig()
    assert cfg.source == "none" and not cfg.metric and cfg.before_lock == "withhold"
    with pytest.raises(AttributeError):
        cfg.source = "depth"  # frozen

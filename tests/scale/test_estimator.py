"""ScaleEstimator: states, robust lock, bounded refinement, reset, stale reasons, counters."""
from __future__ import annotations

import math

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from lingbot_ros.scale import (REASONS, Rejection, ScaleConfig, ScaleDrift, ScaleEstimator,
                               ScaleSample, ScaleState)


def ns(t: float) -> int:
    """A stamp in seconds as the estimator takes it: integer ns."""
    return round(t * 1e9)


def depth_cfg(**kw) -> ScaleConfig:
    return ScaleConfig(source="depth", **kw)


def feed(est, values, t0=0.0, dt=1 / 30, source="depth"):
    out = []
    for i, v in enumerate(values):
        out.append(est.add(ScaleSample(ns(t0 + i * dt), float(v), source)))
    return out


def test_none_stays_unknown_in_model_units():
    est = ScaleEstimator(ScaleConfig())
    e = est.estimate
    assert e.state is ScaleState.UNKNOWN and e.output_factor is None
    assert e.units == "model units" and math.isnan(e.metres_per_unit)
    assert "model units" in e.status_text
    assert est.stale_reason(ns(1e9)) is None


def test_fixed_is_locked_at_once():
    est = ScaleEstimator(ScaleConfig(source="fixed", factor=0.25))
    e = est.estimate
    assert e.locked and e.output_factor == 0.25 and e.sigma_log == 0.0 and e.units == "m"
    assert est.reset().output_factor == 0.25  # a new stream: still the factor
    assert est.stale_reason(ns(1e9)) is None


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
        e = est.add(ScaleSample(ns(t), value, "depth"))
        if not e.locked:
            assert e.output_factor is None and e.units == "model units"
            assert prev is None  # never unlocks
            continue
        assert e.output_factor == e.metres_per_unit
        if prev is not None:
            bound = rate * max(0.0, (ns(t) - ns(prev_t)) / 1e9) + 1e-12
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
        est.add(Rejection(ns(1.0), reason))
    e = est.estimate
    assert e.rejection_count("wrong_size") == 2 and e.rejection_count("out_of_sync") == 1
    assert e.reason == "out_of_sync" and e.state is ScaleState.UNKNOWN
    assert "last rejection: out_of_sync" in e.status_text
    est.add(ScaleSample(ns(2.0), 1.0, "depth"))
    assert est.estimate.reason == ""


def test_stale_reason_names_why():
    est = ScaleEstimator(depth_cfg(stale_timeout_s=2.0))
    assert est.stale_reason(ns(100.0)) is None  # the clock starts at the first look
    assert est.stale_reason(ns(103.0)) == "no_depth"  # nothing ever came
    est.add(ScaleSample(ns(104.0), 1.0, "depth"))
    assert est.stale_reason(ns(105.0)) is None
    est.add(Rejection(ns(105.5), "out_of_sync"))
    assert est.stale_reason(ns(105.9)) is None  # within the timeout
    assert est.stale_reason(ns(106.5)) == "out_of_sync"
    odo = ScaleEstimator(ScaleConfig(source="odometry", stale_timeout_s=1.0))
    odo.add(Rejection(ns(0.0), "stationary"))
    assert odo.stale_reason(ns(1.5)) == "stationary"


def test_wrong_inputs_are_programming_errors():
    est = ScaleEstimator(depth_cfg())
    with pytest.raises(ValueError, match="odometry"):
        est.add(ScaleSample(ns(0.0), 1.0, "odometry"))
    with pytest.raises(ValueError, match="ScaleSample or a Rejection"):
        est.add(1.0)
    with pytest.raises(ValueError, match="unknown rejection reason"):
        Rejection(ns(0.0), "bogus")
    with pytest.raises(ValueError, match="metres_per_unit"):
        ScaleSample(ns(0.0), float("nan"), "depth")
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


# --- snapshots: state_dict / load_state_dict -------------------------------------------------

def same(a, b) -> bool:
    """Two ScaleEstimates bit-identical (NaN equal to NaN)."""
    def key(e):
        drift = () if e.drift is None else tuple(
            getattr(e.drift, f) for f in ScaleDrift.__dataclass_fields__)
        return tuple(("nan",) if isinstance(v, float) and math.isnan(v) else v
                     for v in (e.state, e.source, e.metres_per_unit, e.sigma_log, e.samples,
                               e.segment, e.min_samples, e.reason, e.rejections, e.stamp_ns)
                     + drift)
    return key(a) == key(b)


def play(est, event):
    kind, t, value = event
    if kind == "sample":
        return est.add(ScaleSample(ns(t), value, est.config.source))
    if kind == "rejection":
        return est.add(Rejection(ns(t), value))
    return est.reset()


EVENT = st.one_of(
    st.tuples(st.just("sample"), st.floats(-0.1, 2.0), st.floats(0.05, 50.0)),
    st.tuples(st.just("rejection"), st.floats(-0.1, 2.0),
              st.sampled_from(["all_invalid", "out_of_sync", "stationary", "no_floor"])),
    st.tuples(st.just("reset"), st.just(0.0), st.just(0.0)))


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["depth", "odometry", "camera_height", "fixed", "none"]),
       st.lists(EVENT, max_size=60), st.lists(EVENT, min_size=1, max_size=60),
       st.floats(0.001, 0.5), st.integers(1, 4), st.integers(0, 6))
def test_property_a_restored_estimator_continues_bit_identically(source, before, after, rate,
                                                                 min_samples, extra):
    """Whatever came before (samples, rejections, resets, stamps backwards), an estimator
    restored from a JSON round trip of ``state_dict`` gives the same estimates and stale
    reasons as the original on the same following events."""
    import json
    cfg = ScaleConfig(source=source, factor=0.7, min_samples=min_samples, lock_spread=0.3,
                      max_samples=min_samples + extra, max_change_per_s=rate,
                      stale_timeout_s=1.0)
    a = ScaleEstimator(cfg, segment=3)
    t = 0.0
    timeline = []
    for kind, dt, value in before + after:
        t += dt
        timeline.append((kind, t, value))
    for event in timeline[:len(before)]:
        play(a, event)
    a.stale_reason(ns(t / 2))  # the stale clock's start is part of the state too
    state = json.loads(json.dumps(a.state_dict(), allow_nan=False))  # strict JSON
    b = ScaleEstimator(cfg, segment=99)
    assert same(b.load_state_dict(state), a.estimate)
    for event in timeline[len(before):]:
        got, want = play(b, event), play(a, event)
        assert same(got, want), (got, want)
        assert b.stale_reason(ns(event[1] + 1.5)) == a.stale_reason(ns(event[1] + 1.5))
    assert b.state_dict() == a.state_dict()


def test_locked_stays_locked_at_the_same_value():
    a = ScaleEstimator(depth_cfg(min_samples=3))
    feed(a, [2.0, 2.01, 1.99, 2.0])
    b = ScaleEstimator(depth_cfg(min_samples=3))
    e = b.load_state_dict(a.state_dict())
    assert e.locked and e.metres_per_unit == a.estimate.metres_per_unit and e.samples == 4
    assert e.segment == a.estimate.segment


@pytest.mark.parametrize("saved, here, match", [
    (depth_cfg(), ScaleConfig(source="odometry"),
     "made with scale.source 'depth', this stream's is 'odometry'"),
    (depth_cfg(), ScaleConfig(), "this stream's is 'none'"),
    (ScaleConfig(source="fixed", factor=0.5), ScaleConfig(source="fixed", factor=0.25),
     r"scale.factor: saved 0.5, here 0.25"),
    (depth_cfg(min_samples=3), depth_cfg(min_samples=4), r"scale.min_samples: saved 3"),
    (ScaleConfig(source="camera_height", camera_height_m=1.2),
     ScaleConfig(source="camera_height", camera_height_m=1.65), "camera_height_m"),
])
def test_a_state_of_other_settings_is_refused_and_nothing_changes(saved, here, match):
    a = ScaleEstimator(saved)
    if saved.source != "fixed":
        feed(a, [2.0] * 12, source=saved.source)
    b = ScaleEstimator(here)
    if here.source not in ("none", "fixed"):
        feed(b, [3.0] * 2, source=here.source)
    before = b.state_dict()
    with pytest.raises(ValueError, match=match):
        b.load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match=match):
        b.check_state_dict(a.state_dict())
    assert b.state_dict() == before


@pytest.mark.parametrize("change, match", [
    (lambda s: s.update(version=7), "version 7 is unknown"),
    (lambda s: s.pop("logs"), "malformed"),
    (lambda s: s.update(state="SURE"), "malformed"),
    (lambda s: s.update(logs=["nan"]), "all finite"),
    (lambda s: s.update(logs=[0.1] * 101), "at most 100"),
    (lambda s: s.update(applied_log="x"), "malformed"),
    (lambda s: s.update(count=0), "inconsistent"),
    (lambda s: s.update(applied_log="nan"), "LOCKED without a finite value"),
    (lambda s: s.update(logs=[]), "without samples"),
    (lambda s: s.update(rejections={"x": -1}), "inconsistent"),
    (lambda s: s.update(settings=None), "no settings"),
    (lambda s: s.update(since_ns=0.5), "since_ns 0.5 is not an integer"),
    (lambda s: s.update(applied_ns=True), "applied_ns True is not an integer"),
    (lambda s: s.pop("stamp_ns"), "malformed"),
])
def test_a_malformed_state_is_refused(change, match):
    a = ScaleEstimator(depth_cfg(min_samples=3))
    feed(a, [2.0] * 4)
    state = a.state_dict()
    change(state)
    b = ScaleEstimator(depth_cfg(min_samples=3))
    with pytest.raises(ValueError, match=match):
        b.load_state_dict(state)
    assert b.estimate.state is ScaleState.UNKNOWN

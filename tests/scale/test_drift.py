"""The drift detector: once LOCKED, the recent samples against the applied scale (issue 32: a
1.5x change of the sensor/model ratio left ~/depth at 0.67x the true metres for 45 frames
while diagnostics said OK)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lingbot_ros.scale import (Rejection, ScaleConfig, ScaleEstimator, ScaleSample,
                               measure_drift)
from lingbot_ros.scale.drift import SPREAD_FLOOR

from .synth import as_version_1, ns

HZ = 30.0
TRUE = 2.5  # metres per model unit before the change


def noisy(n: int, value: float, noise: float, seed: int) -> list[float]:
    """``n`` samples around ``value`` with a relative (log) noise ``noise``."""
    rng = np.random.default_rng(seed)
    return [value * math.exp(noise * g) for g in rng.standard_normal(n)]


def run(est: ScaleEstimator, values, t0: float = 0.0):
    """Feed samples at 30 Hz from ``t0`` (seconds; stamped in integer ns); the snapshot after
    each."""
    return [est.add(ScaleSample(ns(t0 + i / HZ), v, "depth")) for i, v in enumerate(values)]


def locked_estimator(noise: float = 0.02, seed: int = 0, **kw) -> ScaleEstimator:
    est = ScaleEstimator(ScaleConfig(source="depth", **kw))
    run(est, noisy(100, TRUE, noise, seed))
    assert est.estimate.locked
    return est


def test_agreeing_samples_give_a_small_drift_and_no_warning():
    d = measure_drift([0.0] * 10, 0.0, ns(5.0), None, 5.0, 1.0)
    assert d.sigmas == 0.0 and not d.warning and d.for_s == 0.0 and d.since_ns is None
    assert d.recent_metres_per_unit == d.applied_metres_per_unit == 1.0


def test_a_disagreement_counts_its_duration_from_its_first_sample():
    recent = [math.log(1.5)] * 10
    first = measure_drift(recent, 0.0, ns(10.0), None, 5.0, 1.0)
    assert first.since_ns == ns(10.0) and first.for_s == 0.0 and not first.warning
    later = measure_drift(recent, 0.0, ns(10.9), first.since_ns, 5.0, 1.0)
    assert later.since_ns == ns(10.0)
    assert later.for_s == pytest.approx(0.9) and not later.warning
    last = measure_drift(recent, 0.0, ns(11.0), later.since_ns, 5.0, 1.0)
    assert last.since_ns == ns(10.0)
    assert last.for_s == pytest.approx(1.0) and last.warning
    # integer ns: exactly drift_warn_s, also at an epoch stamp (float seconds: ~0.24 us off)
    epoch = 1_700_000_000_123_456_789
    start = measure_drift(recent, 0.0, epoch, None, 5.0, 1.0)
    assert start.since_ns == epoch
    assert not measure_drift(recent, 0.0, epoch + 999_999_999, epoch, 5.0, 1.0).warning
    held = measure_drift(recent, 0.0, epoch + 10**9, epoch, 5.0, 1.0)
    assert held.for_s == 1.0 and held.warning and held.since_ns == epoch
    # noiseless samples: the spread floor, not a division by zero
    assert last.sigmas == pytest.approx(
        math.log(1.5) / (1.2533 * SPREAD_FLOOR / math.sqrt(10)))
    assert "+50 %" in last.text and "for 1.0 s" in last.text


def test_stamps_going_back_start_the_disagreement_anew():
    recent = [math.log(1.5)] * 10
    d = measure_drift(recent, 0.0, ns(4.0), ns(10.0), 5.0, 1.0)
    assert d.since_ns == ns(4.0) and d.for_s == 0.0


def test_no_stamp_is_no_disagreement_under_way():
    recent = [math.log(1.5)] * 10
    d = measure_drift(recent, 0.0, None, ns(10.0), 5.0, 1.0)
    assert d.since_ns is None and d.for_s == 0.0 and not d.warning and d.sigmas > 5.0


def test_the_probes_change_warns_with_the_figure_within_a_second_and_a_half():
    """The sensor/model ratio moves 1.5x (the metres per unit the samples give are 1/1.5 of
    the applied): WARN, naming the recent value, the applied, the sigmas and how long; at
    30 Hz within 6 samples + 1 s. Before it, 100 noisy samples never warned."""
    est = locked_estimator()
    assert est.estimate.drift is not None and not est.estimate.drift.warning
    after = run(est, noisy(90, TRUE / 1.5, 0.02, 1), t0=100 / HZ)
    warned = [i for i, e in enumerate(after) if e.drift_warning]
    assert warned, [round(e.drift.sigmas, 1) for e in after]
    assert warned[0] <= 6 + HZ + 1  # half the recent samples, then drift_warn_s
    assert warned == list(range(warned[0], len(after)))  # it holds
    e = after[warned[0]]
    assert e.drift.for_s >= 1.0 and e.drift.sigmas < -5.0
    assert e.drift.recent_metres_per_unit == pytest.approx(TRUE / 1.5, rel=0.03)
    assert e.drift.applied_metres_per_unit == pytest.approx(TRUE, rel=0.03)
    text = e.drift_warning
    assert text.startswith("scale drift (depth): the last 10 samples give 1.6")
    d = e.drift
    assert (f"the applied scale is {d.applied_metres_per_unit:.4g} "
            f"({100 * (d.recent_metres_per_unit / d.applied_metres_per_unit - 1):+.0f} %, "
            f"{abs(d.sigmas):.0f} sigma) for {d.for_s:.1f} s") in text
    assert text.endswith(" for 1.0 s") or text.endswith(" for 1.1 s")


@pytest.mark.parametrize("seed", range(5))
def test_noise_alone_never_warns(seed):
    """2 % sample noise around a constant ratio, 60 s at 30 Hz, a few wild samples."""
    est = locked_estimator(seed=seed)
    values = noisy(1800, TRUE, 0.02, 100 + seed)
    values[::97] = [TRUE * 3.0] * len(values[::97])  # outliers
    assert not any(e.drift_warning for e in run(est, values, t0=100 / HZ))


def test_a_sub_percent_disagreement_never_warns():
    est = locked_estimator(noise=0.0)
    assert not any(e.drift_warning for e in run(est, [TRUE * 1.005] * 300, t0=100 / HZ))


def test_one_agreeing_stretch_ends_it_and_the_applied_value_catching_up_ends_it():
    est = locked_estimator()
    t = 100 / HZ
    assert run(est, noisy(60, TRUE / 1.5, 0.02, 2), t0=t)[-1].drift_warning
    back = run(est, noisy(20, TRUE, 0.02, 3), t0=t + 2.0)
    assert not back[-1].drift_warning and back[-1].drift.for_s == 0.0
    # a fast-following estimator (max_change_per_s large) catches up: the WARN goes
    fast = locked_estimator(max_change_per_s=10.0)
    out = run(fast, noisy(200, TRUE / 1.5, 0.02, 4), t0=t)
    assert any(e.drift_warning for e in out) and not out[-1].drift_warning


def test_no_drift_before_lock_after_reset_or_on_rejections():
    est = ScaleEstimator(ScaleConfig(source="depth"))
    assert all(e.drift is None for e in run(est, [TRUE] * 9))  # CONVERGING
    run(est, noisy(60, TRUE / 1.5, 0.02, 5), t0=1.0)
    drift = est.estimate.drift
    assert est.add(Rejection(ns(10.0), "out_of_sync")).drift is drift  # kept as it was
    assert est.add(Rejection(None, "non_finite")).drift is drift
    assert est.reset().drift is None


def test_a_restored_estimator_continues_the_drift():
    est = locked_estimator()
    run(est, noisy(20, TRUE / 1.5, 0.02, 6), t0=100 / HZ)
    assert est.estimate.drift.for_s > 0  # under way, not warning yet
    state = json.loads(json.dumps(est.state_dict(), allow_nan=False))
    saved = est.estimate.drift
    copy = ScaleEstimator(est.config)
    assert copy.load_state_dict(state).drift == saved
    more = noisy(30, TRUE / 1.5, 0.02, 7)
    t0 = 120 / HZ
    assert [e.drift for e in run(copy, more, t0)] == [e.drift for e in run(est, more, t0)]
    assert est.estimate.drift_warning and copy.estimate.drift_warning
    assert state["version"] == 2 and state["drift_since_ns"] is not None
    v1 = as_version_1(state)  # stamps in float seconds: a version-1 build's, drift and all
    assert ScaleEstimator(est.config).load_state_dict(v1).drift == saved
    del v1["drift_since_s"], v1["drift_stamp_s"], v1["drift_before_s"]
    older = ScaleEstimator(est.config)  # a snapshot of an older build: no drift under way
    assert older.load_state_dict(v1).drift.for_s == 0.0


@pytest.mark.parametrize("kw, match", [
    ({"drift_warn_sigma": 0.0}, "drift_warn_sigma"),
    ({"drift_warn_sigma": math.inf}, "drift_warn_sigma"),
    ({"drift_warn_s": -1.0}, "drift_warn_s"),
])
def test_config_checks(kw, match):
    with pytest.raises(ValueError, match=match):
        ScaleConfig(source="depth", **kw)
    assert ScaleConfig(drift_warn_s=0.0).drift_warn_s == 0.0

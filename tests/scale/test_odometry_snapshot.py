"""The odometry source's window in snapshots: state_dict / load_state_dict (a restored source
continues bit for bit; a window of another mount or a malformed one is refused unchanged; an
older build's version-1 window, stamps in float seconds, loads)."""
from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from lingbot_ros.scale import OdometrySource, Rejection, ScaleConfig, ScaleSample
from lingbot_ros.scale.se3 import interpolate_pose

from .synth import base_path, model_poses, mount, ns, pose
from .test_odometry import CFG, DT


def lagging_stream(n: int, k: float, T_bo: np.ndarray, lag: int = 4, seed: int = 3,
                   t0_ns: int = 0):
    """Events of a robot that drives, stands still, turns in place and drives on: odometry at
    its own stamps (half a frame later, ``lag`` frames behind the images, so some frames wait
    for it and others are interpolated) and the frames' model poses (2 mm of noise). Stamps
    in integer ns from ``t0_ns``."""
    rng = np.random.default_rng(seed)
    odom = base_path("stop_go", n, DT, speed=0.6, yaw_rate=0.5)
    c2w = model_poses(odom, T_bo, k)
    c2w[:, :3, 3] += rng.normal(0.0, 0.002 / k, (n, 3))
    odom_t = (np.arange(n) + 0.5) * DT
    odom_at = np.stack([interpolate_pose(odom[max(i, 0)], odom[min(i + 1, n - 1)], 0.5)
                        for i in range(n)])
    events = []
    for i in range(n):
        events.append(("frame", t0_ns + ns(i * DT), c2w[i]))
        if i >= lag:
            events.append(("odom", t0_ns + ns(odom_t[i - lag]), odom_at[i - lag]))
    return events


def feed(source, events) -> list:
    out = []
    for kind, t, p in events:
        out.append(source.push_odometry(t, p) if kind == "odom" else source.sample(t, p))
    return out


def same(a, b) -> bool:
    """Two sample results are the same, bit for bit."""
    if isinstance(a, ScaleSample) and isinstance(b, ScaleSample):
        return (a.stamp_ns, a.metres_per_unit, a.support) == (b.stamp_ns, b.metres_per_unit,
                                                               b.support)
    return a == b


EPOCH_NS = 1_700_000_000_123_456_789  # a ROS stamp: float seconds are ~0.24 us coarse here


def as_version_1(state: dict) -> dict:
    """An odometry window as an older build saved it (version 1): the same window with its
    stamps in float seconds."""
    state = copy.deepcopy(state)
    return {**state, "version": 1,
            "frames": [[t / 1e9, *rest] for t, *rest in state["frames"]],
            "odometry": [[t / 1e9, p] for t, p in state["odometry"]]}


@pytest.mark.parametrize("split", [1, 3, 17, 60, 95, 150, 230])
@pytest.mark.parametrize("planar", [False, True])
@pytest.mark.parametrize("t0_ns", [0, EPOCH_NS])
def test_a_restored_source_gives_the_same_samples_bit_for_bit(split, planar, t0_ns):
    """Run, save (through strict JSON), load into a fresh source, then feed both the same
    frames and odometry: every result is bit-identical to the uninterrupted source's, and so
    is the window saved at the end (integer ns: also at epoch stamps)."""
    cfg = ScaleConfig(source="odometry", min_baseline_m=0.3, odom_window=40, planar=planar)
    T_bo = mount(forward=0.35, up=0.45, pitch_down_rad=0.2)
    events = lagging_stream(240, 0.8, T_bo, t0_ns=t0_ns)
    a = OdometrySource(cfg, T_bo)
    feed(a, events[:split])
    state = json.loads(json.dumps(a.state_dict(), allow_nan=False))
    assert state["version"] == 2
    assert all(type(f[0]) is int for f in state["frames"] + state["odometry"])
    b = OdometrySource(cfg, T_bo)
    b.load_state_dict(state)
    assert b.state_dict() == a.state_dict()
    after_a, after_b = feed(a, events[split:]), feed(b, events[split:])
    assert all(same(x, y) for x, y in zip(after_a, after_b, strict=True))
    assert sum(isinstance(r, ScaleSample) for r in after_a) > 20  # samples were compared
    assert b.state_dict() == a.state_dict()


@pytest.mark.parametrize("t0_ns", [0, EPOCH_NS])
@pytest.mark.parametrize("split", [17, 95, 150])
def test_a_version_1_window_loads_and_continues(split, t0_ns):
    """An older build's window (stamps in float seconds, built here from a version-2 one)
    loads: its stamps become the nearest integer ns, its poses are the saved ones, and on the
    same next frames and odometry it gives the saved source's results within float
    tolerance (at an epoch stamp a float second is ~0.24 us coarse: a waiting frame's
    odometry is interpolated a little elsewhere). Near 0 s the ns come back exactly, and
    then so does every result, bit for bit."""
    cfg = ScaleConfig(source="odometry", min_baseline_m=0.3, odom_window=40)
    T_bo = mount(forward=0.35, up=0.45, pitch_down_rad=0.2)
    events = lagging_stream(240, 0.8, T_bo, t0_ns=t0_ns)
    a = OdometrySource(cfg, T_bo)
    feed(a, events[:split])
    saved = a.state_dict()
    old = json.loads(json.dumps(as_version_1(saved), allow_nan=False))
    assert old["version"] == 1
    assert all(type(f[0]) is float for f in old["frames"] + old["odometry"])
    b = OdometrySource(cfg, T_bo)
    b.load_state_dict(old)
    loaded = b.state_dict()
    assert loaded["version"] == 2 and loaded["T_base_optical"] == saved["T_base_optical"]
    for key in ("frames", "odometry"):
        assert len(loaded[key]) == len(saved[key]) > 0
        for x, y in zip(loaded[key], saved[key]):
            assert type(x[0]) is int and abs(x[0] - y[0]) <= 500, (key, x[0], y[0])
            assert x[1:] == y[1:]  # the poses exactly
    if t0_ns == 0:
        assert loaded == saved
    after_a, after_b = feed(a, events[split:]), feed(b, events[split:])
    samples = 0
    for x, y in zip(after_a, after_b, strict=True):
        if t0_ns == 0:
            assert same(x, y), (x, y)
        if isinstance(x, ScaleSample):
            assert isinstance(y, ScaleSample), (x, y)
            assert abs(x.stamp_ns - y.stamp_ns) <= 500 and x.support == y.support
            assert y.metres_per_unit == pytest.approx(x.metres_per_unit, rel=1e-6)
            samples += 1
        elif isinstance(x, Rejection):
            assert isinstance(y, Rejection) and x.reason == y.reason, (x, y)
            assert abs(x.stamp_ns - y.stamp_ns) <= 500
        else:
            assert x is None and y is None  # odometry taken
    assert samples > 20
    if t0_ns == 0:
        assert b.state_dict() == a.state_dict()


def test_the_saved_window_pairs_at_once_where_an_empty_one_waits():
    """What the snapshot is for: right after a restore, a source continuing the saved window
    gives samples at once; one starting empty needs the robot to move min_baseline_m first."""
    T_bo = mount(forward=0.3)
    odom = base_path("arc", 60, DT, speed=0.6, yaw_rate=0.3)
    c2w = model_poses(odom, T_bo, 2.0)
    events = [e for i in range(60) for e in (("odom", ns(i * DT), odom[i]),
                                             ("frame", ns(i * DT), c2w[i]))]
    a = OdometrySource(CFG, T_bo)
    feed(a, events[:80])
    restored, empty = OdometrySource(CFG, T_bo), OdometrySource(CFG, T_bo)
    restored.load_state_dict(a.state_dict())
    first = feed(restored, events[80:82])[1]
    assert isinstance(first, ScaleSample) and first.metres_per_unit == pytest.approx(2.0)
    assert feed(empty, events[80:82])[1].reason == "stationary"


def test_loading_keeps_the_odometry_the_source_holds():
    """A running source (odometry received before the load) keeps its poses next to the
    saved ones (its own wins at a repeated stamp); the frames are the saved window's."""
    T_bo = mount()
    a = OdometrySource(CFG, T_bo)
    a.push_odometry(0, pose(t=(0, 0, 0)))
    a.push_odometry(ns(0.1), pose(t=(1, 0, 0)))
    a.sample(ns(0.05), np.eye(4))
    b = OdometrySource(CFG, T_bo)
    b.push_odometry(ns(0.1), pose(t=(5, 0, 0)))
    b.push_odometry(ns(0.2), pose(t=(2, 0, 0)))
    b.sample(ns(0.15), np.eye(4))
    b.load_state_dict(a.state_dict())
    state = b.state_dict()
    assert [t for t, _ in state["odometry"]] == [0, ns(0.1), ns(0.2)]
    assert state["odometry"][1][1][3] == 5.0  # the held pose at 0.1 s
    assert [f[0] for f in state["frames"]] == [ns(0.05)]
    assert all(type(t) is int for t, _ in state["odometry"])


def test_a_window_of_another_mount_or_malformed_is_refused_unchanged():
    T_bo = mount(forward=0.3)
    a = OdometrySource(CFG, T_bo)
    odom = base_path("arc", 20, DT)
    feed(a, [e for i in range(20) for e in (("odom", ns(i * DT), odom[i]),
                                            ("frame", ns(i * DT), odom[i]))])
    good = a.state_dict()
    b = OdometrySource(CFG, T_bo)
    b.push_odometry(ns(5.0), np.eye(4))
    before = b.state_dict()
    with pytest.raises(ValueError, match="another T_base_optical"):
        OdometrySource(CFG, mount(forward=0.31)).load_state_dict(good)

    def broken(edit):
        state = copy.deepcopy(good)
        edit(state)
        return state

    def swap_frames(s):
        s["frames"][0], s["frames"][1] = s["frames"][1], s["frames"][0]

    old = as_version_1(good)
    bad = [None, [], broken(lambda s: s.update(version=3)), broken(lambda s: s.update(version=0)),
           broken(lambda s: s.pop("version")), broken(lambda s: s.pop("frames")),
           broken(lambda s: s["frames"][0].__setitem__(1, [1.0] * 15)),
           broken(lambda s: s["frames"][0][1].__setitem__(3, "nan")),
           broken(lambda s: s["frames"][0][1].__setitem__(3, True)),
           broken(lambda s: s["frames"][0].__setitem__(0, "inf")),
           broken(lambda s: s["frames"][0].__setitem__(0, 0.0)),  # version 2: ns, not s
           broken(lambda s: s["frames"][0].__setitem__(0, True)),
           broken(lambda s: s["odometry"][0].__setitem__(0, 1e-9)),
           broken(lambda s: s["frames"][0].__setitem__(0, None)),
           broken(swap_frames),
           broken(lambda s: s["frames"][0].__setitem__(2, [2.0] * 16)),  # not rigid
           broken(lambda s: s["odometry"].reverse()),
           broken(lambda s: s["odometry"][0].__setitem__(1, "abc")),
           broken(lambda s: s["T_base_optical"].pop()),
           {**old, "frames": [["inf", *old["frames"][0][1:]], *old["frames"][1:]]},
           {**old, "frames": old["frames"][::-1]},
           {**old, "odometry": [[None, old["odometry"][0][1]]]}]
    for state in bad:
        with pytest.raises(ValueError, match="odometry window"):
            b.load_state_dict(state)
        assert b.state_dict() == before


def test_a_frame_without_a_finite_stamp_is_counted_not_kept():
    src = OdometrySource(CFG, mount())
    for t in (math.nan, math.inf, None, 0.5, 1e9, True, "1"):  # not integer ns
        r = src.sample(t, np.eye(4))
        assert isinstance(r, Rejection) and (r.reason, r.stamp_ns) == ("non_finite", None)
    assert src.state_dict()["frames"] == []
    assert src.sample(np.int64(7), np.eye(4)).stamp_ns == 7  # numpy's integers are ns too
    assert src.state_dict()["frames"][0][0] == 7

"""ScaleStream's state in stream snapshots: the estimate and, for ``scale.source: odometry``,
the source's window of frames continue after a restore exactly as the uninterrupted stream
(no node, no DDS: the node's snapshot paths are tests/ros/dds/test_node_session_snapshot.py)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from lingbot_ros.geometry import T_BODY_OPTICAL, rigid_inverse
from lingbot_ros.scale import ScaleConfig, ScaleStream
from tests.ros.unit.test_scale_outputs import camera_mount, rot_z

ODOM_CFG = ScaleConfig(source="odometry", min_samples=40, min_baseline_m=0.3,
                       odom_min_step_m=0.05, odom_window=30)


def odometry_events(n: int, k: float, T_bo: np.ndarray, lag: int = 3) -> list:
    """A base that drives along a curve (metres) and the model's c2w of its camera (model
    units = metres / k, 1 mm of noise): frames at 20 Hz; odometry half a frame later and
    ``lag`` frames behind them, so some frames wait for it and others are interpolated."""
    rng = np.random.default_rng(7)
    t0_ns, dt_ns = 50_000_000_000, 50_000_000

    def base_pose(t):  # seconds since t0
        T = rot_z(0.4 * t)
        T[:3, 3] = [0.5 * t, 0.1 * t * t, 0.0]
        return T

    events = []
    for i in range(n):
        m = rigid_inverse(T_bo) @ base_pose(i * 0.05) @ T_bo
        m[:3, 3] = m[:3, 3] / k + rng.normal(0.0, 0.001 / k, 3)
        events.append(("frame", SimpleNamespace(stamp_ns=t0_ns + i * dt_ns, c2w=m)))
        if i >= lag:
            j = i - lag + 0.5
            events.append(("odom", (round(t0_ns + j * dt_ns), base_pose(j * 0.05))))
    return events


def feed_scale(scale: ScaleStream, events, T_bo) -> list:
    out = []
    for kind, item in events:
        if kind == "odom":
            scale.push_odometry(*item)
        else:
            out.append(scale.on_frame(item, T_bo))
    return out


@pytest.mark.parametrize("split", [2, 9, 40, 101])
def test_stream_scale_odometry_window_continues_bit_for_bit_after_a_restore(split):
    """ScaleStream A runs; its state (through strict JSON) goes into a fresh ScaleStream B,
    whose odometry source is only built at its first frame (T_base_optical known then; the
    odometry received before it waits): on the same odometry and frames, B's estimates and
    final state equal A's exactly (every sample's log value is in the state)."""
    import json
    T_bo = camera_mount() @ T_BODY_OPTICAL
    events = odometry_events(160, 0.4, T_bo)
    a = ScaleStream(ODOM_CFG)
    feed_scale(a, events[:split], T_bo)
    state = json.loads(json.dumps(a.state_dict(), allow_nan=False))
    assert state["source"]["frames"] and state["estimator"]["state"] == a.estimate.state.value
    b = ScaleStream(ODOM_CFG)
    b.check_state_dict(state)
    assert b.load_state_dict(state) == a.estimate
    assert b.state_dict() == a.state_dict()  # restored, no frame yet: carried on as loaded
    after_a, after_b = feed_scale(a, events[split:], T_bo), feed_scale(b, events[split:], T_bo)
    assert after_b == after_a
    assert a.estimate.samples > 60 and a.estimate.locked
    assert b.state_dict() == a.state_dict()


def test_stream_scale_drops_a_window_of_another_mount_with_a_warning(caplog):
    """The window holds the model's base positions through T_base_optical: a restored stream
    whose first frame comes with another one drops it (a warning) and starts the window anew;
    the estimate itself continues."""
    T_bo = camera_mount() @ T_BODY_OPTICAL
    events = odometry_events(60, 0.4, T_bo)
    a = ScaleStream(ODOM_CFG)
    feed_scale(a, events[:40], T_bo)
    b = ScaleStream(ODOM_CFG)
    b.load_state_dict(a.state_dict())
    moved = T_bo.copy()
    moved[0, 3] += 0.05
    first = next(item for kind, item in events[40:] if kind == "frame")
    with caplog.at_level("WARNING", logger="lingbot_ros.scale.stream"):
        b.on_frame(first, moved)
    assert "odometry window is dropped" in caplog.text and "another T_base_optical" in caplog.text
    window = b.state_dict()["source"]
    assert len(window["frames"]) == 1 and window["odometry"] == []
    assert b.estimate.samples == a.estimate.samples  # the estimate continued


def test_stream_scale_load_into_a_running_odometry_source():
    """~/load_session on a running stream: the source it has built takes the snapshot's window
    at once; a snapshot without one (an older build's) starts the window anew; other sources
    save none."""
    T_bo = camera_mount() @ T_BODY_OPTICAL
    events = odometry_events(60, 0.4, T_bo)
    saved = ScaleStream(ODOM_CFG)
    feed_scale(saved, events[:30], T_bo)
    state = saved.state_dict()
    running = ScaleStream(ODOM_CFG)
    feed_scale(running, events[30:40], T_bo)  # its source is built, with frames and odometry
    held = running.state_dict()["source"]["odometry"]
    assert held
    running.load_state_dict(state)
    window = running.state_dict()["source"]
    assert window["frames"] == state["source"]["frames"]
    assert window["odometry"] == state["source"]["odometry"] + held  # both kept
    older = state["estimator"]  # an older node's: the estimator's state alone, no window
    running.load_state_dict(older)
    assert running.state_dict()["source"]["frames"] == []
    assert running.estimate == saved.estimate
    assert ScaleStream(ScaleConfig(source="fixed", factor=2.0)).state_dict()["source"] is None

"""The pose graph (lingbot_ros/loop/pose_graph.py) on a synthetic loop with injected drift.

The room: 200 keyframes around a 3 m circle, back to the start (lingbot_ros/loop/synthetic.py).
The front end: the ground truth's relative motions with a rotation bias, a translation bias
and a scale drift accumulated along the path (8 degrees of heading and 8 % of scale by the
end). Loops: from the ground truth, the last keyframes to the first (exact, so their sigmas
are tight). ATE: Sim(3)-aligned (the front end is monocular), lingbot_ros.geometry.ate_rmse.
"""
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from lingbot_ros.geometry import ate_rmse, rigid_inverse, rotation_angle, rotation_exp
from lingbot_ros.loop.config import LoopConfig
from lingbot_ros.loop.pose_graph import EdgeSigmas, PoseGraph
from lingbot_ros.loop.synthetic import drifted, loop_measurement, loop_path

N = 200  # the loop's keyframes; keyframe N is back at keyframe 0's place
EXACT = EdgeSigmas(0.01, 0.1, 0.005)  # loops from the ground truth
LOOPS = ((0, N), (1, N - 1), (2, N))


@pytest.fixture(scope="module")
def room():
    truth = loop_path(N + 1, per_lap=N)  # (N + 1, 4, 4)
    front_end, units = drifted(truth, seed=1)
    return truth, front_end, units


def build(front_end, config=None, upto=None, **kw) -> PoseGraph:
    graph = PoseGraph(config, **kw)
    for k in range(len(front_end) if upto is None else upto):
        graph.add_keyframe(k, 1_000 + k * 100_000_000, front_end[k], 0)
    return graph


def close(graph, truth, units, wrong=False) -> None:
    for a, b in LOOPS:
        graph.add_loop(a, b, loop_measurement(truth, units, a, b), EXACT)
    if wrong:
        bad = loop_measurement(truth, units, 3, N - 2)
        bad[:3, 3] += (3.0, 0.0, 0.0)  # 3 m off
        graph.add_loop(3, N - 2, bad, EXACT)


def centres(result) -> np.ndarray:
    return np.stack([result.poses[i][:3, 3] for i in result.ids])  # (N + 1, 3)


def test_the_injected_drift_is_rotation_translation_and_scale(room):
    truth, fe, units = room
    assert np.allclose(truth[0], truth[N], atol=1e-12) and np.array_equal(fe[0], truth[0])
    assert math.degrees(rotation_angle(truth[N, :3, :3].T @ fe[N, :3, :3])) > 5.0
    assert np.linalg.norm(fe[N, :3, 3] - fe[0, :3, 3]) > 0.3  # the loop does not close
    assert units[N] / units[0] > 1.07
    assert ate_rmse(fe[:, :3, 3], truth[:, :3, 3]) > 0.1  # Sim(3)-aligned: not a global scale


def test_loops_remove_the_drift(room):
    truth, fe, units = room
    graph = build(fe)
    before = graph.optimize()
    assert before.loops == () and before.correction_scale == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(centres(before), fe[:, :3, 3], atol=1e-6)  # nothing to correct
    close(graph, truth, units)
    result = graph.optimize()
    drifted_ate = ate_rmse(fe[:, :3, 3], truth[:, :3, 3])
    assert ate_rmse(centres(result), truth[:, :3, 3]) <= 0.1 * drifted_ate
    # the scale drift is undone: the newest keyframe's map units per front-end unit
    assert result.correction_scale == pytest.approx(units[0] / units[N], rel=0.01)
    assert all(r.residual_m < 0.01 and r.weight == 1.0 for r in result.loops)
    assert 2 <= result.iterations < graph.max_iterations and result.time_s > 0
    # REP-105: map -> odom at the newest keyframe, rigid
    newest = result.poses[N]
    np.testing.assert_allclose(result.correction @ fe[N], newest, atol=1e-9)
    r = result.correction[:3, :3]
    np.testing.assert_allclose(r.T @ r, np.eye(3), atol=1e-9)
    with pytest.raises(ValueError):  # frozen arrays
        result.correction[0, 0] = 2.0


def test_a_wrong_loop_is_contained_by_the_robust_kernel(room):
    truth, fe, units = room
    graph = build(fe)
    close(graph, truth, units, wrong=True)
    result = graph.optimize()
    assert ate_rmse(centres(result), truth[:, :3, 3]) <= 0.1 * ate_rmse(fe[:, :3, 3],
                                                                          truth[:, :3, 3])
    *good, bad = result.loops
    assert (bad.id_a, bad.id_b) == (3, N - 2)
    assert bad.residual_m > 2.5 and bad.chi > 100 and bad.weight < 0.01  # reported
    assert all(r.residual_m < 0.05 for r in good)


def test_without_a_kernel_the_wrong_loop_would_bend_the_map(room):
    """What the kernel is for: the same wrong loop under a huge threshold (no down-weighting)
    drags the map by more than the drift it corrects."""
    truth, fe, units = room
    graph = build(fe, LoopConfig(loop_robust_k=1e6))
    close(graph, truth, units, wrong=True)
    result = graph.optimize()
    assert ate_rmse(centres(result), truth[:, :3, 3]) > ate_rmse(fe[:, :3, 3], truth[:, :3, 3])


def test_a_rollover_edge_absorbs_a_scale_jump(room):
    """A rollover whose alignment got the scale 15 % wrong: its edge's wide log-scale sigma
    takes the jump when a loop says so; the odometry edges keep their scale. Fed as one
    segment, the jump is spread over the odometry edges instead."""
    truth, _, _ = room
    units = np.where(np.arange(N + 1) >= 100, 1.15, 1.0)  # (N + 1,) front-end units / m
    fe = truth.copy()
    for k in range(1, N + 1):
        rel = rigid_inverse(truth[k - 1]) @ truth[k]
        rel[:3, 3] *= units[k - 1]  # keyframe 99 -> 100 still in segment 0's units
        fe[k] = fe[k - 1] @ rel
    results = {}
    for rollover in (True, False):
        graph = PoseGraph()
        for k in range(N + 1):
            graph.add_keyframe(k, k, fe[k], 1 if rollover and k >= 100 else 0)
        for a, b in LOOPS:
            graph.add_loop(a, b, loop_measurement(truth, units, a, b), EXACT)
        results[rollover] = graph.optimize()
        kinds = graph.state_dict()["edge_kinds"]  # edge k - 1: keyframe k - 1 -> k
        assert kinds[99] == ("rollover" if rollover else "odometry")
        assert kinds.count("rollover") == (1 if rollover else 0)
    result = results[True]
    assert result.scales[50] == pytest.approx(1.0, abs=0.01)
    assert result.scales[150] == pytest.approx(1 / 1.15, abs=0.01)
    drifted_ate = ate_rmse(fe[:, :3, 3], truth[:, :3, 3])
    assert ate_rmse(centres(result), truth[:, :3, 3]) <= 0.1 * drifted_ate
    spread = results[False]
    assert abs(spread.scales[50] - 1.0) > 0.015  # the jump smeared over segment 0 too
    assert ate_rmse(centres(spread), truth[:, :3, 3]) > 2 * ate_rmse(centres(result),
                                                                     truth[:, :3, 3])


def test_odometry_sigmas_grow_with_distance_and_the_scale_widens_translation():
    c = LoopConfig()
    graph = PoseGraph(c)
    graph.add_keyframe(0, 0, np.eye(4), 0)
    step = np.eye(4)
    step[:3, 3] = (0.001, 0.0, 0.0)  # standing: the minimums
    graph.add_keyframe(1, 1, step, 0)
    far = np.eye(4)
    far[:3, 3] = (2.001, 0.0, 0.0)  # 2 m: per metre
    graph.add_keyframe(2, 2, far, 0, scale_sigma_log=0.05)
    sig = graph.state_dict()["edge_sigmas"]  # (2, 7): rotation (rad), translation, log scale
    assert sig[0, 0] == pytest.approx(math.radians(c.odom_sigma_deg_min))
    assert sig[0, 3] == pytest.approx(c.odom_sigma_t_min_m, rel=1e-3)
    assert sig[0, 6] == c.odom_sigma_log_scale_min
    assert sig[1, 0] == pytest.approx(math.radians(2 * c.odom_sigma_deg_per_m))
    assert sig[1, 3] == pytest.approx(math.hypot(2 * c.odom_sigma_t_per_m, 2 * 0.05))
    assert sig[1, 6] == 0.05


def test_new_keyframes_after_a_loop_keep_the_correction(room):
    """Between loops the map -> odom correction does not move: a new keyframe starts from
    its neighbour's optimised pose, and nothing pulls it elsewhere."""
    truth, fe, units = room
    graph = build(fe)
    close(graph, truth, units)
    first = graph.optimize()
    assert graph.optimize() is first  # nothing new: the same result
    step = np.eye(4)
    step[:3, :3] = rotation_exp(np.array([0.0, 0.0, 0.1]))
    step[:3, 3] = (0.1, 0.0, 0.0)
    pose = fe[N].copy()
    for k in range(N + 1, N + 6):
        pose = pose @ step
        graph.add_keyframe(k, 1_000 + k * 100_000_000, pose, 0)
    later = graph.optimize()
    assert later.newest_id == N + 5
    np.testing.assert_allclose(later.correction_sim3, first.correction_sim3, atol=1e-9)
    assert later.correction_scale == pytest.approx(first.correction_scale, abs=1e-12)
    np.testing.assert_allclose(later.poses[N + 5], first.map_pose(pose), atol=1e-9)
    np.testing.assert_allclose(later.correction, first.correction_at(pose), atol=1e-9)
    # the rigid map -> odom moves with the robot: the scale was corrected (s != 1)
    assert np.abs(later.correction - first.correction)[:3, 3].max() > 0.01


def test_a_snapshot_round_trip_gives_the_same_graph(room):
    truth, fe, units = room
    graph = build(fe, upto=150)
    graph.optimize()
    for k in range(150, N + 1):
        graph.add_keyframe(k, 1_000 + k * 100_000_000, fe[k], 0)
    close(graph, truth, units, wrong=True)
    saved = graph.optimize()
    graph.add_keyframe(N + 1, 1_000 + (N + 1) * 100_000_000, fe[N] @ fe[1], 0)  # pending
    state = graph.state_dict()
    plain = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    assert json.loads(json.dumps(plain)) == plain  # JSON values and numpy arrays only
    loaded = PoseGraph()
    loaded.load_state_dict(state)
    assert loaded.ids == graph.ids and loaded.result.ids == saved.ids
    for i in saved.ids:  # the optimised poses, identical
        assert np.array_equal(loaded.result.poses[i], saved.poses[i])
        assert loaded.result.scales[i] == saved.scales[i]
    assert loaded.result.loops == saved.loops
    assert np.array_equal(loaded.result.correction_sim3, saved.correction_sim3)
    assert loaded.result.iterations <= 3  # rebuilt at its optimum: nothing left to do
    # both go on alike, to iSAM2's convergence (variables move less than its relinearize
    # threshold, 0.01, between relinearizations): the pending keyframe, a new loop
    for g in (graph, loaded):
        g.add_loop(0, N + 1, loop_measurement(truth, units, 0, 1), EXACT)
    a, b = graph.optimize(), loaded.optimize()
    gap = max(np.abs(a.poses[i] - b.poses[i]).max() for i in a.ids)
    assert gap < 5e-3, gap
    assert loaded.state_dict()["fed_nodes"] == N + 2


def test_bad_input_is_refused_clearly(room):
    _, fe, _ = room
    graph = build(fe, upto=3)
    with pytest.raises(ValueError, match="keyframe 2 is already in the pose graph"):
        graph.add_keyframe(2, 10**12, fe[3], 0)
    with pytest.raises(ValueError, match="keyframe 99 is not in the pose graph"):
        graph.add_loop(0, 99, np.eye(4))
    with pytest.raises(ValueError, match="two keyframes"):
        graph.add_loop(1, 1, np.eye(4))
    scaled = fe[3].copy()
    scaled[:3, :3] *= 1.1
    shear = fe[3].copy()
    shear[0, 1] += 0.2
    mirror = fe[3] @ np.diag([1.0, 1.0, -1.0, 1.0])
    row = fe[3].copy()
    row[3, 0] = 0.5
    nan = fe[3].copy()
    nan[0, 3] = np.nan
    for bad, match in ((scaled, "not a rigid transform"), (shear, "not a rigid transform"),
                       (mirror, "not a rigid transform"), (row, "last row"),
                       (nan, "not finite"), (np.eye(3), "shape")):
        with pytest.raises(ValueError, match=match):
            graph.add_keyframe(3, 10**12, bad, 0)
    with pytest.raises(ValueError, match="not a similarity"):
        graph.add_loop(0, 2, shear)
    with pytest.raises(ValueError, match="older than keyframe 2"):
        graph.add_keyframe(3, 0, fe[3], 0)
    with pytest.raises(ValueError, match="segments only grow"):
        graph.add_keyframe(3, 10**12, fe[3], -1)
    for bad_id in (True, 1.5, -1, "3"):
        with pytest.raises(ValueError, match="keyframe id"):
            graph.add_keyframe(bad_id, 10**12, fe[3], 0)
    with pytest.raises(ValueError, match="log_scale must be a finite number > 0"):
        graph.add_keyframe(3, 10**12, fe[3], 0, scale_sigma_log=0.0)
    assert graph.ids == (0, 1, 2)  # nothing half-added
    with pytest.raises(ValueError, match="no keyframe yet"):
        PoseGraph().optimize()
    with pytest.raises(ValueError, match="loop_robust_kernel"):
        LoopConfig(loop_robust_kernel="tukey")


def test_a_bad_state_is_refused_and_leaves_the_graph_as_it_was(room):
    _, fe, _ = room
    graph = build(fe, upto=5)
    graph.optimize()
    good = graph.state_dict()
    before = graph.result
    for broken, match in (({**good, "version": 9}, "version 9"),
                          ({k: v for k, v in good.items() if k != "front_end"}, "front_end"),
                          ({**good, "edge_nodes": good["edge_nodes"] + 7}, "edge 0"),
                          ({**good, "ids": np.array([0, 1, 2, 3, 3])}, "keyframe 3 twice"),
                          ({**good, "fed_nodes": 9}, "9 nodes"),
                          ({**good, "estimate": good["estimate"][:2]}, "estimate")):
        with pytest.raises(ValueError, match=match):
            graph.load_state_dict(broken)
        assert graph.result is before and len(graph) == 5


def test_the_loop_package_imports_without_gtsam():
    code = ("import sys, lingbot_ros.loop, lingbot_ros.loop.config, lingbot_ros.loop.synthetic;"
            "assert 'gtsam' not in sys.modules, 'gtsam imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr

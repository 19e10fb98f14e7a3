"""The back end (lingbot_ros/loop/backend.py) over a synthetic stream (tests/loop/
backend_scene.py): retrieval, verification through a geometric pair, confirmation, the pose
graph (real GTSAM), REP-105's correction, counters, snapshots, bad input, and the per-loop
sigma rule on the synthetic room with noisy loops."""
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from lingbot_ros.geometry import ate_rmse, rotation_exp
from lingbot_ros.loop.backend import LoopBackend, keyframe_input, loop_sigmas
from lingbot_ros.loop.backend_types import REJECT_REASONS
from lingbot_ros.loop.config import LoopConfig
from lingbot_ros.loop.pose_graph import PoseGraph
from lingbot_ros.loop.synthetic import drifted, loop_measurement, loop_path

from .backend_scene import CEILING_M, H, N, PAIR_UNITS, STEP_NS, W, Scene

WINDOW = 16
# thinning off (every keyframe kept: retrieval finds the very place), candidates 5 s old
CONFIG = LoopConfig(min_keyframe_distance_m=0.0, min_age_s=5.0)


def run(scene, config=CONFIG, pair=True, upto=None, backend=None, start=0):
    backend = backend or LoopBackend(config, scene.pair if pair else None, WINDOW)
    steps = [backend.offer(scene.keyframe(k)) for k in range(start, upto or scene.n)]
    return backend, steps


def centres(poses: dict, ids) -> np.ndarray:
    return np.stack([poses[i][:3, 3] for i in ids])  # (n, 3)


@pytest.fixture(scope="module")
def closed():
    scene = Scene()
    backend, steps = run(scene)
    return scene, backend, steps


def test_retrieval_finds_the_revisited_places_and_never_a_recent_frame():
    scene = Scene()
    backend, steps = run(scene, pair=False)
    for k, step in enumerate(steps):
        assert step.kept and step.verified == () and step.loops == ()
        for c in step.candidates:  # never in the window, never younger than min_age_s
            assert c.keyframe_id < k - WINDOW
            assert (k - c.keyframe_id) * STEP_NS >= CONFIG.min_age_s * 1e9
        if k >= N:  # the revisit: the same images, the first frames on top
            assert step.candidates[0].keyframe_id == k - N
            assert step.candidates[0].score == pytest.approx(1.0, abs=1e-4)
            assert step.candidates[1].score < 0.9
    # a robot standing still (the same features every keyframe): with no minimum age, the
    # window alone keeps its own recent frames out
    still = LoopBackend(LoopConfig(min_keyframe_distance_m=0.0, min_age_s=0.0), None, WINDOW)
    for k in range(40):
        step = still.offer(scene.keyframe(k, features=scene.features[0]))
        assert all(c.keyframe_id < k - WINDOW for c in step.candidates)
        assert len(step.candidates) == min(CONFIG.top_k, max(0, k - WINDOW))
    assert backend.counts.accepted == 0 and backend.counts.candidates > 0


def test_a_confirmed_loop_corrects_the_drift_into_map_not_odom(closed):
    scene, backend, steps = closed
    events = backend.events
    assert events and all(s.optimized == bool(s.loops) for s in steps)
    assert {(e.matched_id, e.keyframe_id) for e in events if e.matched_id == e.keyframe_id - N}
    ids = list(range(scene.n))
    poses = backend.keyframe_poses()
    assert sorted(poses) == ids
    drifted_ate = ate_rmse(scene.front_end[:, :3, 3], scene.truth[:, :3, 3])
    ate = ate_rmse(centres(poses, ids), scene.truth[:, :3, 3])
    assert ate <= 0.1 * drifted_ate, (ate, drifted_ate)
    # odom untouched: the graph holds the front end's poses as given
    front = backend.state_dict()["graph"]["front_end"]
    assert np.array_equal(front, scene.front_end)
    # map pose = correction_at(odom) @ odom, and it lands on the truth; odom does not
    last = scene.front_end[-1]
    np.testing.assert_allclose(backend.map_pose(last), backend.correction_at(last) @ last,
                               atol=1e-12)
    assert np.linalg.norm(backend.map_pose(last)[:3, 3] - scene.truth[-1, :3, 3]) < 0.05
    assert np.linalg.norm(last[:3, 3] - scene.truth[-1, :3, 3]) > 0.3
    e = events[0]
    assert e.jump_m > 0.1 and e.jump_deg > 1.0 and e.inlier_fraction == 1.0
    assert e.residual_m < 0.05 and e.matched_stamp_ns < e.stamp_ns
    assert e.relative_scale == pytest.approx(scene.units[e.matched_id]
                                             / scene.units[e.keyframe_id], rel=2e-3)
    np.testing.assert_allclose(steps[-1].correction, backend.correction_at(last), atol=1e-12)


def test_stored_depth_rebuilds_the_map_in_corrected_poses(closed):
    scene, backend, _ = closed
    errors = {}
    for kid, pose, depth, K, stride in backend.keyframe_depths():
        assert depth.dtype == np.float32 and depth.shape == (-(-H // stride), -(-W // stride))
        vs, us = np.mgrid[0:H:stride, 0:W:stride]
        rays = np.linalg.inv(K) @ np.stack([us.ravel(), vs.ravel(), np.ones(us.size)])
        z = (pose[:3, :3] @ (rays * depth.ravel()) + pose[:3, 3:4])[2]  # (h w,) heights
        errors[kid] = float(np.abs(z - CEILING_M).max())
    assert sorted(errors) == list(range(scene.n))
    assert max(errors.values()) < 0.05  # every keyframe's points on the ceiling
    # the front end's own poses and depths (no correction) miss it, halfway round
    k = N // 2
    raw = scene.keyframe(k)
    z = (raw.T_odom_cam[:3, :3] @ (np.linalg.inv(raw.K_model) @ [31.0, 23.0, 1.0])
         * raw.depth[23, 31] + raw.T_odom_cam[:3, 3])[2]
    assert abs(z - CEILING_M) > 2 * errors[k]


def test_gates_and_confirmation_reject_wrong_loops_and_counters_add_up():
    scene = Scene(revisit=20)
    wrong = np.eye(4)
    wrong[:3, 3] = (0.75, 0.0, 0.0)  # the pair puts place 5 1.5 m off, self-consistently
    scene.wrong[5] = wrong
    turned = np.eye(4)
    turned[:3, :3] = rotation_exp(np.radians([0.0, 0.0, 25.0]))  # 17 degrees off: implausible
    scene.wrong[8] = turned
    config = LoopConfig(min_keyframe_distance_m=0.0, min_age_s=5.0, confirm_window_s=0.5,
                        max_verify_per_keyframe=1)
    pair = scene.pair

    def flaky(stored, image):  # the pair's session fails on place 210
        if image.tobytes() == scene.images[10].tobytes():
            raise ValueError("the pair's session returned 1 result")
        return pair(stored, image)

    backend = LoopBackend(config, flaky, WINDOW)
    _, steps = run(scene, backend=backend, upto=N + 6)
    busy = backend.offer(scene.keyframe(N + 6), verify=False)
    assert busy.verified == () and busy.candidates
    steps += [busy] + run(scene, backend=backend, start=N + 7)[1]
    ids = {(e.matched_id, e.keyframe_id) for e in backend.events}
    assert ids and (5, N + 5) not in ids and (8, N + 8) not in ids and (10, N + 10) not in ids
    c = backend.counts
    assert set(c.rejected) == set(REJECT_REASONS)
    assert c.rejected["implausible"] == 1 and c.rejected["pair_failed"] == 1
    assert c.rejected["busy"] == 1 and c.rejected["unconfirmed"] >= 1, c
    assert c.keyframes == c.kept == scene.n and c.accepted == len(backend.events)
    tried = c.verified + sum(c.rejected[r] for r in ("non_finite", "too_few_pixels",
                                                     "little_overlap", "inconsistent",
                                                     "implausible", "pair_failed"))
    # each candidate verified (at most one a keyframe here) is counted once: by its outcome
    assert tried + c.rejected["busy"] == sum(min(len(s.candidates), 1) for s in steps)
    assert c.candidates == sum(len(s.candidates) for s in steps)
    waiting = len(backend._confirm.pending)
    assert c.verified == (c.accepted + c.rejected["unconfirmed"] + c.rejected["graph_rejected"]
                          + waiting)
    poses = backend.keyframe_poses()
    ids = list(range(scene.n))
    assert ate_rmse(centres(poses, ids), scene.truth[:, :3, 3]) <= 0.1 * ate_rmse(
        scene.front_end[:, :3, 3], scene.truth[:, :3, 3])


def test_loops_the_graph_cannot_solve_count_graph_rejected():
    """Absurd sigmas (1e-15) make GTSAM's system indeterminate: the graph drops the new
    loops (docs/loop.md "When GTSAM fails"); the back end counts them, reports no event and
    keeps the front end's poses."""
    scene = Scene(revisit=4)
    config = LoopConfig(min_keyframe_distance_m=0.0, min_age_s=5.0, loop_sigma_t_per_m=0.0,
                        loop_sigma_t_best_m=1e-15, loop_sigma_deg_best=1e-15,
                        loop_sigma_log_scale_best=1e-15)
    backend, steps = run(scene, config)
    c = backend.counts
    assert c.verified >= 2 and c.accepted == 0 and backend.events == ()
    assert c.rejected["graph_rejected"] == c.verified - len(backend._confirm.pending)
    assert any(s.optimized for s in steps) and all(s.loops == () for s in steps)
    poses = backend.keyframe_poses()
    assert max(np.abs(poses[k] - scene.front_end[k]).max() for k in poses) < 1e-9


def test_a_rollover_is_seen_by_the_graph():
    scene = Scene(revisit=0)
    backend = LoopBackend(CONFIG, None, WINDOW)
    for k in range(12):
        kf = scene.keyframe(k)
        backend.offer(kf.__class__(**{**kf.__dict__, "segment": int(k >= 6)}))
    kinds = backend.state_dict()["graph"]["edge_kinds"]
    assert kinds == ["odometry"] * 5 + ["rollover"] + ["odometry"] * 5


def test_a_snapshot_round_trips_bit_for_bit_and_continues(closed):
    scene, backend, _ = closed
    half, _ = run(scene, upto=N + 6)
    state = half.state_dict()
    plain = {k: v for k, v in state.items() if not isinstance(v, (np.ndarray, dict))}
    assert json.loads(json.dumps(plain)) == plain
    loaded = LoopBackend(CONFIG, scene.pair, WINDOW)
    loaded.load_state_dict(state)
    before, after = half.keyframe_poses(), loaded.keyframe_poses()
    assert sorted(before) == sorted(after)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    assert loaded.counts == half.counts and len(loaded.events) == len(half.events)
    assert all(np.array_equal(a.correction, b.correction) and a.jump_m == b.jump_m
               for a, b in zip(loaded.events, half.events))
    for d1, d2 in zip(half.keyframe_depths(), loaded.keyframe_depths()):
        assert d1[0] == d2[0] and all(np.array_equal(a, b) for a, b in zip(d1[1:4], d2[1:4]))
    # both continue to the same map (iSAM2's linearisation points differ: to a millimetre)
    run(scene, backend=loaded, start=N + 6)
    final = loaded.keyframe_poses()
    ref = backend.keyframe_poses()
    assert max(np.linalg.norm(final[k][:3, 3] - ref[k][:3, 3]) for k in ref) < 5e-3
    # a malformed state is refused and changes nothing
    fresh = loaded.state_dict()
    for broken in ({**state, "schema": 9}, {**state, "K": state["K"][:-1]},
                   {**state, "recent": np.array([10 ** 9])},
                   {**state, "counts": {**state["counts"], "kept": -1}},
                   {**state, "db": {**state["db"], "descriptor": "other"}},
                   {**state, "graph": {**state["graph"], "version": 0}}, [1, 2]):
        with pytest.raises(ValueError):
            loaded.load_state_dict(broken)
        after = loaded.state_dict()
        assert np.array_equal(after["graph"]["estimate"], fresh["graph"]["estimate"])
        assert after["counts"] == fresh["counts"]


def test_bad_input_is_a_clear_value_error(closed):
    scene = closed[0]
    result = SimpleNamespace(index=3, stamp_ns=5, segment=0, c2w=np.eye(4), K_model=np.eye(3),
                             features=None, rgb=np.zeros((H, W, 3), np.uint8),
                             depth=np.ones((H, W), np.float32), depth_conf=None)
    with pytest.raises(ValueError, match="return_features"):
        keyframe_input(result)
    result.features, result.depth = np.ones((4, 8), np.float32), None
    with pytest.raises(ValueError, match="return_depth"):
        keyframe_input(result)
    result.depth = np.ones((H, W), np.float32)
    assert keyframe_input(result).keyframe_id == 3
    backend = LoopBackend(CONFIG, scene.pair, WINDOW)
    backend.offer(scene.keyframe(5))
    good = scene.keyframe(6)
    bad = [good.__class__(**{**good.__dict__, **change}) for change in (
        {"keyframe_id": 5}, {"stamp_ns": 1}, {"T_odom_cam": 2 * np.eye(4)},
        {"depth": np.ones((H, W + 1), np.float32)}, {"K_model": np.zeros((3, 3))},
        {"features": np.full((4, 8), np.nan, np.float32)},
        {"image": np.zeros((H, W, 3), np.float32)})]
    for kf in bad + ["not a keyframe"]:
        with pytest.raises(ValueError):
            backend.offer(kf)
        assert backend.counts.keyframes == 1 and len(backend.keyframe_poses()) == 1
    assert backend.offer(good).keyframe_id == 6
    with pytest.raises(ValueError):
        LoopBackend(CONFIG, scene.pair, -1)
    with pytest.raises(ValueError):
        LoopBackend(CONFIG, "a pair", WINDOW)
    for bad_setting in ({"max_verify_per_keyframe": 0}, {"loop_sigma_t_per_m": -0.1},
                        {"loop_sigma_log_scale_best": 0.0}, {"loop_sigma_deg_best": math.inf}):
        with pytest.raises(ValueError):
            LoopConfig(**bad_setting)


def test_the_sigma_rule_brings_noisy_loops_within_ten_percent():
    """Loops with a few cm / 0.5 degree / 0.5 % of measurement noise, fed to the graph with
    the rule's sigmas (a verification with 95 % inliers), leave at most 10 % of the drifted
    ATE on the synthetic room; the loose gate sigmas (the old loop defaults) leave far
    more."""
    truth = loop_path(N + 1, per_lap=N)
    fe, units = drifted(truth, seed=1)
    loops = ((0, N), (1, N - 1), (2, N), (3, N - 2), (0, N - 1), (1, N))
    drifted_ate = ate_rmse(fe[:, :3, 3], truth[:, :3, 3])
    config = LoopConfig()
    worst = {}
    for rule in (True, False):
        ates = []
        for seed in range(3):
            rng = np.random.default_rng(seed)
            graph = PoseGraph(config)
            for k in range(N + 1):
                graph.add_keyframe(k, k, fe[k], 0)
            for a, b in loops:
                m = loop_measurement(truth, units, a, b)
                m[:3, :3] = m[:3, :3] @ rotation_exp(np.radians(0.5) * rng.standard_normal(3))
                m[:3, :3] *= math.exp(0.005 * rng.standard_normal())
                m[:3, 3] += 0.03 * rng.standard_normal(3)
                sig = loop_sigmas(config, 0.95 if rule else config.min_inlier_fraction,
                                  float(np.linalg.norm(m[:3, 3])))
                graph.add_loop(a, b, m, sig)
            r = graph.optimize()
            ates.append(ate_rmse(centres(r.poses, r.ids), truth[:, :3, 3]) / drifted_ate)
        worst[rule] = max(ates)
    assert worst[True] <= 0.10, worst
    assert worst[False] > 1.5 * worst[True], worst


def test_the_sigma_rule():
    c = LoopConfig()
    best = loop_sigmas(c, 1.0, 0.0)
    assert (best.t_m, best.deg, best.log_scale) == (
        c.loop_sigma_t_best_m, c.loop_sigma_deg_best, c.loop_sigma_log_scale_best)
    gate = loop_sigmas(c, c.min_inlier_fraction, 2.0)
    assert gate.deg == pytest.approx(c.loop_sigma_deg)
    assert gate.t_m == pytest.approx(c.loop_sigma_t_m + 2.0 * c.loop_sigma_t_per_m)
    assert loop_sigmas(c, 0.0, 0.0) == loop_sigmas(c, c.min_inlier_fraction, 0.0)
    mid = loop_sigmas(c, 0.8, 0.0)
    assert best.log_scale < mid.log_scale < gate.log_scale
    for q, b in ((1.5, 0.0), (float("nan"), 0.0), (0.9, -1.0), (0.9, float("inf"))):
        with pytest.raises(ValueError):
            loop_sigmas(c, q, b)
    assert PAIR_UNITS > 0

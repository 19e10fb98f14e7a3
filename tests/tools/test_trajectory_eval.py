"""trajectory_eval against evo's Python API on the same TUM files (evo is the reference)."""
import copy

import numpy as np
import pytest
from evo.core import geometry, metrics, sync
from evo.core.trajectory import PoseTrajectory3D
from evo.tools import file_interface
from scipy.spatial.transform import Rotation

from lingbot_ros.geometry import Sim3, read_tum, write_tum
from lingbot_ros.tools.metrics.trajectory import associate, ate, evaluate, rpe

T0 = 1_700_000_000_000_000_000  # epoch-sized stamps, as recordings have
HZ = 30.0
MS = 1_000_000
REL = 1e-9
TRANS = metrics.PoseRelation.translation_part
ANGLE = metrics.PoseRelation.rotation_angle_deg
SCALE = 0.37  # estimate units per ground-truth metre (monocular: arbitrary)


def ground_truth(n=200):
    """A smooth 3D path (~6 m) with a turning, rolling camera, 30 Hz."""
    t = np.arange(n) / HZ
    poses = np.tile(np.eye(4), (n, 1, 1))
    poses[:, :3, :3] = Rotation.from_rotvec(np.stack(
        [0.1 * np.sin(0.7 * t), 0.4 * t, 0.05 * np.cos(1.1 * t)], 1)).as_matrix()
    poses[:, :3, 3] = np.stack([2.0 * np.sin(0.5 * t), 1.5 * np.sin(0.3 * t + 1.0),
                                0.6 * t + 0.2 * np.sin(t)], 1)
    return T0 + np.round(t * 1e9).astype(np.int64), poses


def estimate_of(stamps, poses, rng, shift_ns=MS, jitter_ns=3 * MS):
    """The ground truth in another world and scale, noisy, with jittered, shifted stamps."""
    to_est = Sim3(SCALE, Rotation.from_rotvec([0.3, -1.0, 0.5]).as_matrix(), [1.0, -2.0, 0.5])
    est = to_est.apply_c2w(poses)
    drift = np.cumsum(rng.normal(0.0, 0.004, (len(est), 3)), 0)  # metres, a random walk
    est[:, :3, 3] += SCALE * (drift + rng.normal(0.0, 0.01, (len(est), 3)))
    est[:, :3, :3] = est[:, :3, :3] @ Rotation.from_rotvec(
        rng.normal(0.0, np.radians(0.3), (len(est), 3))).as_matrix()
    jitter = rng.integers(-jitter_ns, jitter_ns + 1, len(stamps))
    return stamps + shift_ns + jitter, est


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """TUM files: a ground truth with 15 poses missing, and its estimate."""
    rng = np.random.default_rng(7)
    gt_t, gt_p = ground_truth()
    est_t, est_p = estimate_of(gt_t, gt_p, rng)
    keep = np.ones(len(gt_t), bool)
    keep[rng.choice(np.arange(1, len(gt_t) - 1), 15, replace=False)] = False
    d = tmp_path_factory.mktemp("traj")
    write_tum(d / "gt.tum", gt_t[keep], gt_p[keep])
    write_tum(d / "est.tum", est_t, est_p)
    return d / "gt.tum", d / "est.tum"


def ours(gt_path, est_path, max_diff_ns=10 * MS, offset_ns=0):
    gt_t, gt_p = read_tum(gt_path)
    est_t, est_p = read_tum(est_path)
    ei, gi = associate(est_t, gt_t, max_diff_ns, offset_ns)
    return (est_t, est_p, gt_t, gt_p), ei, gi


def evo_synced(gt_path, est_path, max_diff=0.01, offset=0.0):
    """evo_ape's way: reference first, the offset applied to the estimate (offset_2)."""
    gt = file_interface.read_tum_trajectory_file(str(gt_path))
    est = file_interface.read_tum_trajectory_file(str(est_path))
    ref, est_s = sync.associate_trajectories(gt, est, max_diff=max_diff, offset_2=offset)
    return gt, est, ref, est_s


def assert_same_association(gt, est, ref, est_s, ei, gi):
    """Our indices pick exactly the poses evo's synchronised trajectories hold, in order."""
    assert len(ei) == len(gi) == ref.num_poses == est_s.num_poses
    np.testing.assert_array_equal(gt.timestamps[gi], ref.timestamps)
    np.testing.assert_array_equal(est.timestamps[ei], est_s.timestamps)
    np.testing.assert_array_equal(gt.positions_xyz[gi], ref.positions_xyz)
    np.testing.assert_array_equal(est.positions_xyz[ei], est_s.positions_xyz)


def evo_ape(ref, est_s, align):
    est_a = copy.deepcopy(est_s)
    scale = 1.0
    if align != "none":
        scale = est_a.align(ref, correct_scale=align == "sim3")[2]
    ape = metrics.APE(TRANS)
    ape.process_data((ref, est_a))
    return ape, scale, est_a


def evo_rpe(ref, est_a, relation, delta, unit, all_pairs=False):
    r = metrics.RPE(relation, delta=delta, delta_unit=unit, all_pairs=all_pairs,
                    pairs_from_reference=True)
    r.process_data((ref, est_a))
    return r


def close(a, b, rel=REL):
    assert a == pytest.approx(b, rel=rel, abs=1e-15)


# --------------------------------------------------------------------------- association


def test_association_matches_evo_on_jittered_shifted_stamps_with_gaps(case):
    (est_t, _, gt_t, _), ei, gi = ours(*case)
    gt, est, ref, est_s = evo_synced(*case)
    assert_same_association(gt, est, ref, est_s, ei, gi)
    assert len(gi) == len(gt_t) == 185  # every ground-truth pose found its estimate
    assert (np.abs(est_t[ei] - gt_t[gi]) <= 10 * MS).all()


def test_association_when_the_estimate_is_the_shorter(case, tmp_path):
    """The other walk of evo's rule: the estimate (fewer poses) looks up the ground truth."""
    gt_path, est_path = case
    est_t, est_p = read_tum(est_path)
    drop = np.ones(len(est_t), bool)
    drop[10:40] = False  # the estimate lost track for a second
    write_tum(tmp_path / "est.tum", est_t[drop], est_p[drop])
    gt_t, _ = read_tum(gt_path)
    assert drop.sum() < len(gt_t)
    _, ei, gi = ours(gt_path, tmp_path / "est.tum")
    assert_same_association(*evo_synced(gt_path, tmp_path / "est.tum"), ei, gi)
    assert len(ei) < drop.sum()  # estimates whose ground truth is missing are dropped


@pytest.mark.parametrize("max_diff_ms", [1, 4, 20, 40])
@pytest.mark.parametrize("offset_ms", [-25, 0, 3, 1000])
def test_association_max_diff_and_offset_match_evo(case, max_diff_ms, offset_ms):
    _, ei, gi = ours(*case, max_diff_ms * MS, offset_ms * MS)
    gt = file_interface.read_tum_trajectory_file(str(case[0]))
    est = file_interface.read_tum_trajectory_file(str(case[1]))
    try:
        ref, est_s = sync.associate_trajectories(gt, est, max_diff=max_diff_ms / 1e3,
                                                 offset_2=offset_ms / 1e3)
    except sync.SyncException:  # evo raises where we return nothing
        assert len(ei) == len(gi) == 0
        return
    assert_same_association(gt, est, ref, est_s, ei, gi)


def test_offset_is_added_to_the_estimate_stamps():
    gt = np.arange(10, dtype=np.int64) * 100 * MS
    est = gt + 5_000 * MS  # the estimate's clock runs 5 s ahead
    assert len(associate(est, gt)[0]) == 0
    ei, gi = associate(est, gt, offset_ns=-5_000 * MS)
    np.testing.assert_array_equal(ei, np.arange(10))
    np.testing.assert_array_equal(gi, np.arange(10))


def small_traj(stamps_s):
    n = len(stamps_s)
    xyz = np.stack([np.arange(n, dtype=float), np.zeros(n), np.zeros(n)], 1)
    quat = np.tile([1.0, 0.0, 0.0, 0.0], (n, 1))
    return PoseTrajectory3D(xyz, quat, np.asarray(stamps_s, dtype=float))


def evo_indices(gt_s, est_s, max_diff_s, offset_s=0.0):
    """Indices of evo's synchronised poses in the inputs (positions are the indices)."""
    ref, est = sync.associate_trajectories(small_traj(gt_s), small_traj(est_s),
                                           max_diff=max_diff_s, offset_2=offset_s)
    return (est.positions_xyz[:, 0].astype(int).tolist(),
            ref.positions_xyz[:, 0].astype(int).tolist())


S = 1_000_000_000


@pytest.mark.parametrize("gt_s, est_s, max_diff_s", [
    ([1.0, 2.0, 3.0, 4.0], [1.5, 3.5, 4.0], 0.5),  # ties go to the earlier stamp; = max_diff ok
    ([1.0, 2.0, 3.0], [1.25, 1.5, 1.75, 2.9, 5.0], 0.6),  # the ground truth walks, est longer
    ([0.0, 1.0, 2.0, 6.0, 7.0], [0.0, 0.9, 1.1, 1.2], 0.5),  # many-to-one: 0.9, 1.1, 1.2 -> 1.0
    ([0.0, 1.0, 1.0, 2.0, 3.0], [1.0, 2.5, 9.0], 0.5),  # duplicate stamps: evo takes the last
    ([2.0, 0.0, 1.0, 3.0], [0.5, 2.2, 2.5], 0.5),  # unsorted ground truth: evo's linear search
    ([0.0, 1.0, 2.0], [3.0, 4.0], 0.5),  # nothing within max_diff
])
def test_ties_many_to_one_duplicates_unsorted_as_evo(gt_s, est_s, max_diff_s):
    ei, gi = associate((np.asarray(est_s) * S).astype(np.int64),
                       (np.asarray(gt_s) * S).astype(np.int64), int(max_diff_s * S))
    try:
        want = evo_indices(gt_s, est_s, max_diff_s)
    except sync.SyncException:
        want = ([], [])
    assert (ei.tolist(), gi.tolist()) == want


def test_tie_and_many_to_one_rules_spelled_out():
    ei, gi = associate(np.array([15, 35, 40]) * MS, np.array([10, 20, 30, 40]) * MS, 5 * MS)
    assert (ei.tolist(), gi.tolist()) == ([0, 1, 2], [0, 2, 3])  # halfway -> the earlier one
    ei, gi = associate(np.array([90, 100, 110]) * MS, np.array([0, 100, 500, 600]) * MS,
                       20 * MS)
    assert (ei.tolist(), gi.tolist()) == ([0, 1, 2], [1, 1, 1])  # not one-to-one, as evo


# --------------------------------------------------------------------------- ATE


@pytest.mark.parametrize("align", ["sim3", "se3", "none"])
def test_ate_matches_evo_ape(case, align):
    (est_t, est_p, gt_t, gt_p), ei, gi = ours(*case)
    _, _, ref, est_s = evo_synced(*case)
    ape, scale, _ = evo_ape(ref, est_s, align)
    res = ate(est_p[ei], gt_p[gi], align)
    stats = ape.get_all_statistics()
    for key in ("rmse", "mean", "median", "std", "min", "max"):
        close(res[key], stats[key])
    close(res["scale"], scale)
    np.testing.assert_allclose(res["errors"], ape.error, rtol=REL, atol=1e-12)
    if align == "sim3":
        close(res["scale"], 1.0 / SCALE, rel=0.05)  # the known scale, up to the drift
        assert res["rmse"] < 0.1


def test_ground_truth_shifted_by_1ms_associates_and_gives_evos_ate(tmp_path):
    """The issue's case: exact stamps but 1 ms apart gave "fewer than 3 ... no ATE"."""
    gt_t, gt_p = ground_truth()
    est_t, est_p = estimate_of(gt_t, gt_p, np.random.default_rng(3), shift_ns=0, jitter_ns=0)
    write_tum(tmp_path / "gt.tum", gt_t + MS, gt_p)
    write_tum(tmp_path / "est.tum", est_t, est_p)
    (e_t, e_p, g_t, g_p), ei, gi = ours(tmp_path / "gt.tum", tmp_path / "est.tum")
    assert len(ei) == len(gt_t)
    _, _, ref, est_s = evo_synced(tmp_path / "gt.tum", tmp_path / "est.tum")
    ape, _, _ = evo_ape(ref, est_s, "sim3")
    summary = evaluate(e_t, e_p, g_t, g_p)
    assert summary["error"] is None and summary["associated"] == len(gt_t)
    close(summary["ate_sim3"]["rmse"], ape.get_statistic(metrics.StatisticsType.rmse))


# --------------------------------------------------------------------------- RPE


@pytest.mark.parametrize("delta, unit, evo_unit", [(1, "frames", metrics.Unit.frames),
                                                   (5, "frames", metrics.Unit.frames),
                                                   (1.0, "m", metrics.Unit.meters),
                                                   (0.5, "m", metrics.Unit.meters)])
@pytest.mark.parametrize("all_pairs", [False, True])
def test_rpe_matches_evo_rpe(case, delta, unit, evo_unit, all_pairs):
    (_, est_p, _, gt_p), ei, gi = ours(*case)
    _, _, ref, est_s = evo_synced(*case)
    _, _, est_a = evo_ape(ref, est_s, "sim3")  # evo_rpe -as: align, then the pairs
    t_ref = evo_rpe(ref, est_a, TRANS, delta, evo_unit, all_pairs)
    r_ref = evo_rpe(ref, est_a, ANGLE, delta, evo_unit, all_pairs)
    res = rpe(est_p[ei], gt_p[gi], delta, unit, all_pairs=all_pairs, align="sim3")
    assert res["pairs"][:, 1].tolist() == t_ref.delta_ids  # the same pose pairs
    assert res["num_pairs"] == len(t_ref.error) > 3
    np.testing.assert_allclose(res["trans_errors"], t_ref.error, rtol=REL, atol=1e-13)
    np.testing.assert_allclose(res["rot_errors_deg"], r_ref.error, rtol=REL, atol=1e-12)
    t_stats, r_stats = t_ref.get_all_statistics(), r_ref.get_all_statistics()
    for key in ("rmse", "mean", "median", "std", "min", "max"):
        close(res[f"trans_{key}"], t_stats[key])
        close(res[f"rot_{key}_deg"], r_stats[key])
    # drift: mean translation error over the ground-truth path length of each pair, in %
    dist = geometry.accumulated_distances(ref.positions_xyz)
    i, j = res["pairs"].T
    close(res["drift_pct"], float(np.mean(100 * t_ref.error / (dist[j] - dist[i]))))


def test_rpe_metre_pairs_follow_the_ground_truth_path_by_default(case):
    (_, est_p, _, gt_p), ei, gi = ours(*case)
    res = rpe(est_p[ei], gt_p[gi], 1.0, "m")
    lengths = res["path_lengths"]
    assert (lengths >= 1.0).all() and (lengths < 1.1).all()  # consecutive cuts at >= 1 m
    assert res["pairs"][0, 0] == 0
    assert (res["pairs"][1:, 0] == res["pairs"][:-1, 1]).all()


def test_rpe_pairs_from_the_estimate_as_evos_default(case):
    (_, est_p, _, gt_p), ei, gi = ours(*case)
    _, _, ref, est_s = evo_synced(*case)
    _, _, est_a = evo_ape(ref, est_s, "sim3")
    r = metrics.RPE(TRANS, delta=1.0, delta_unit=metrics.Unit.meters)  # evo's defaults
    r.process_data((ref, est_a))
    res = rpe(est_p[ei], gt_p[gi], 1.0, "m", pairs_from_reference=False)
    assert res["pairs"][:, 1].tolist() == r.delta_ids
    np.testing.assert_allclose(res["trans_errors"], r.error, rtol=REL, atol=1e-13)


def test_rpe_of_a_path_shorter_than_delta_raises():
    _, gt_p = ground_truth(20)  # ~0.4 m
    with pytest.raises(ValueError, match="no pose pair"):
        rpe(gt_p, gt_p, 1.0, "m")


# --------------------------------------------------------------------------- evaluate


def test_evaluate_summary_agrees_with_evo(case):
    import json
    (est_t, est_p, gt_t, gt_p), _, _ = ours(*case)
    s = evaluate(est_t, est_p, gt_t, gt_p)
    json.dumps(s)  # JSON-ready
    assert s["error"] is None
    assert (s["associated"], s["estimate_poses"], s["ground_truth_poses"]) == (185, 200, 185)
    _, _, ref, est_s = evo_synced(*case)
    for align in ("sim3", "se3"):
        ape, scale, est_a = evo_ape(ref, est_s, align)
        for key in ("rmse", "mean", "median", "max"):
            close(s[f"ate_{align}"][key], ape.get_all_statistics()[key])
        close(s[f"ate_{align}"]["scale"], scale)
    _, _, est_a = evo_ape(ref, est_s, "sim3")
    close(s["rpe_1_frame"]["trans_rmse"],
          evo_rpe(ref, est_a, TRANS, 1, metrics.Unit.frames).get_statistic(
              metrics.StatisticsType.rmse))
    close(s["rpe_1_frame"]["rot_rmse_deg"],
          evo_rpe(ref, est_a, ANGLE, 1, metrics.Unit.frames).get_statistic(
              metrics.StatisticsType.rmse))
    metre = evo_rpe(ref, est_a, TRANS, 1.0, metrics.Unit.meters)
    close(s["rpe_1_m"]["trans_rmse"], metre.get_statistic(metrics.StatisticsType.rmse))
    assert s["rpe_1_m"]["pairs"] == len(metre.error)
    assert 0 < s["rpe_1_m"]["drift_pct"] < 20
    close(s["gt_path_length_m"], float(geometry.arc_len(ref.positions_xyz)))


def test_evaluate_offset_matches_evo_t_offset(case, tmp_path):
    (est_t, est_p, gt_t, gt_p), _, _ = ours(*case)
    write_tum(tmp_path / "est.tum", est_t + 100_000 * MS, est_p)  # clock 100 s ahead
    est2_t, est2_p = read_tum(tmp_path / "est.tum")
    assert evaluate(est2_t, est2_p, gt_t, gt_p)["error"] is not None
    s = evaluate(est2_t, est2_p, gt_t, gt_p, offset_ns=-100_000 * MS)
    _, _, ref, est_s = evo_synced(case[0], tmp_path / "est.tum", offset=-100.0)
    assert s["associated"] == ref.num_poses == 185
    close(s["ate_sim3"]["rmse"], evo_ape(ref, est_s, "sim3")[0].get_statistic(
        metrics.StatisticsType.rmse))


def test_evaluate_reports_too_few_associations_instead_of_raising():
    gt_t, gt_p = ground_truth(50)
    est_t = gt_t + 250 * MS  # another clock, 0.25 s off
    s = evaluate(est_t[:2], gt_p[:2], gt_t, gt_p)
    assert s["associated"] == 0 and "ate_sim3" not in s
    msg = s["error"]
    assert "only 0 estimated pose(s)" in msg and "at least 3" in msg
    assert "2 poses, stamps 1700000000.250 .. 1700000000.283 s" in msg  # the estimate's range
    assert "50 poses, stamps 1700000000.000 .. 1700000001.633 s" in msg  # the ground truth's
    assert "--offset" in msg and "--max-diff" in msg and "10 ms" in msg
    # two associate: still an error, saying 2
    s = evaluate(gt_t[:2], gt_p[:2], gt_t, gt_p)
    assert s["associated"] == 2 and s["error"].startswith("only 2 ")
    empty = evaluate(np.zeros(0, np.int64), np.zeros((0, 4, 4)), gt_t, gt_p)
    assert "Estimate: no poses" in empty["error"]
    # --max-diff widens the window: 0.25 s apart, within 300 ms
    wide = evaluate(est_t, gt_p, gt_t, gt_p, max_diff_ns=300 * MS)
    assert wide["error"] is None and wide["associated"] == 50


def test_evaluate_degenerate_estimate_is_an_error_not_an_exception():
    gt_t, gt_p = ground_truth(30)
    frozen = np.tile(np.eye(4), (30, 1, 1))  # the estimate never moved
    s = evaluate(gt_t, frozen, gt_t, gt_p)
    assert s["associated"] == 30 and "no alignment possible" in s["error"]


def test_evaluate_short_path_has_no_metre_rpe_but_the_rest():
    gt_t, gt_p = ground_truth(20)
    s = evaluate(gt_t, gt_p, gt_t, gt_p)
    assert s["error"] is None and s["ate_sim3"]["rmse"] < 1e-9
    assert "error" in s["rpe_1_m"] and s["rpe_1_frame"]["trans_rmse"] < 1e-9

"""The evaluation plot: one PNG, the estimate drawn Sim(3)-aligned onto the ground truth."""
import copy
import struct

import numpy as np
import pytest
from evo.core import sync
from evo.tools import file_interface
from scipy.spatial.transform import Rotation

from lingbot_ros.geometry import Sim3, umeyama, write_tum
from lingbot_ros.tools.metrics import plot
from lingbot_ros.tools.metrics.plot import (MATPLOTLIB_HINT, plot_data, plot_evaluation,
                                    require_matplotlib, view_axes)
from lingbot_ros.tools.metrics.trajectory import associate

PNG = b"\x89PNG\r\n\x1a\n"
MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24]), len(data)


def walk(n=150, hz=30.0, seed=0):
    """A z-up ground truth (a loop with a little height change) and its estimate: another
    world (the first camera's optical frame), another scale, noise and a drift."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / hz
    gt = np.tile(np.eye(4), (n, 1, 1))
    gt[:, :3, 3] = np.stack([3 * np.cos(0.8 * t) - 3, 2 * np.sin(0.8 * t), 0.1 * np.sin(t)], 1)
    gt[:, :3, :3] = Rotation.from_euler("z", (0.8 * t + np.pi / 2)[:, None]).as_matrix()
    to_est = Sim3(0.5, Rotation.from_rotvec([1.2, -0.4, 0.3]).as_matrix(), [0.2, 0.1, -1.0])
    est = to_est.apply_c2w(gt)
    est[:, :3, 3] += 0.5 * np.cumsum(rng.normal(0, 0.005, (n, 3)), 0)
    gt_t = T0 + np.round(t * 1e9).astype(np.int64)
    est_t = gt_t + MS + rng.integers(-2 * MS, 2 * MS + 1, n)
    return est_t, est, gt_t[::2], gt[::2]  # the ground truth at 15 Hz


def test_require_matplotlib_says_how_to_install(monkeypatch):
    assert require_matplotlib() is not None
    import builtins
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.split(".")[0] == "matplotlib":
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(RuntimeError, match="--plot needs matplotlib: pip install matplotlib"):
        require_matplotlib()
    assert MATPLOTLIB_HINT == "--plot needs matplotlib: pip install matplotlib"


def test_module_does_not_import_matplotlib_at_import_time():
    import ast
    import inspect
    tree = ast.parse(inspect.getsource(plot))
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.name for n in top for a in n.names} | {getattr(n, "module", None) for n in top}
    assert not any(str(n).startswith("matplotlib") for n in names)


def test_png_with_ground_truth_and_keyframes(tmp_path):
    est_t, est, gt_t, gt = walk()
    kf = np.zeros(len(est_t), bool)
    kf[::4] = True
    data = plot_evaluation(tmp_path / "eval.png", est_t, est, gt_t, gt, keyframe_mask=kf,
                           title="loop")
    (w, h), size = png_size(tmp_path / "eval.png")
    assert (w, h) == (1300, 1000) and size > 30_000
    assert data.alignment is not None and data.gt_xyz is not None and data.note == ""
    assert len(data.est_idx) == len(gt_t) == len(data.ate_errors)
    np.testing.assert_array_equal(data.keyframes, np.nonzero(kf)[0])
    assert (data.ate_time_s >= 0).all() and data.ate_errors.max() < 0.2


def test_png_without_ground_truth(tmp_path):
    est_t, est, _, _ = walk()
    data = plot_evaluation(tmp_path / "est.png", est_t, est,
                           keyframe_mask=np.arange(len(est_t)) % 3 == 0)
    (w, h), size = png_size(tmp_path / "est.png")
    assert (w, h) == (1300, 600) and size > 20_000
    assert data.alignment is None and data.gt_xyz is None
    np.testing.assert_array_equal(data.est_xyz, est[:, :3, 3])  # drawn as estimated
    # the optical world's views: top x (right) - z (forward), side against up = -y
    np.testing.assert_array_equal(data.top.horizontal, [1, 0, 0])
    np.testing.assert_array_equal(data.top.vertical, [0, 0, 1])
    np.testing.assert_array_equal(data.side.vertical, [0, -1, 0])


def test_ground_truth_that_does_not_associate_draws_the_estimate_alone(tmp_path):
    est_t, est, gt_t, gt = walk()
    data = plot_evaluation(tmp_path / "p.png", est_t, est, gt_t + 3600 * 10**9, gt)
    assert png_size(tmp_path / "p.png")[0] == (1300, 600)
    assert data.gt_xyz is None and "0 pose(s) associate" in data.note


def test_the_drawn_estimate_is_the_sim3_aligned_one(tmp_path):
    est_t, est, gt_t, gt = walk()
    data = plot_evaluation(tmp_path / "p.png", est_t, est, gt_t, gt)
    ei, gi = associate(est_t, gt_t)
    np.testing.assert_array_equal(data.est_idx, ei)
    sim = umeyama(est[ei, :3, 3], gt[gi, :3, 3], with_scale=True)
    aligned = sim.apply_points(est[:, :3, 3])  # every pose, fitted on the associated ones
    np.testing.assert_allclose(data.est_xyz, aligned, rtol=0, atol=1e-12)
    np.testing.assert_allclose(data.ate_errors, np.linalg.norm(aligned[ei] - gt[gi, :3, 3], axis=1),
                               atol=1e-12)
    # what is drawn is that, projected on the views' axes
    np.testing.assert_allclose(data.top_est, aligned @ np.stack([data.top.horizontal,
                                                                 data.top.vertical], 1))
    np.testing.assert_allclose(data.side_gt, gt[:, :3, 3] @ np.stack([data.side.horizontal,
                                                                      data.side.vertical], 1))
    assert np.abs(data.top_est[ei] - data.top_gt[gi]).max() < 0.2  # on top of each other


def test_the_drawn_estimate_equals_evos_aligned_trajectory(tmp_path):
    est_t, est, gt_t, gt = walk()
    write_tum(tmp_path / "gt.tum", gt_t, gt)
    write_tum(tmp_path / "est.tum", est_t, est)
    ref, est_s = sync.associate_trajectories(
        file_interface.read_tum_trajectory_file(str(tmp_path / "gt.tum")),
        file_interface.read_tum_trajectory_file(str(tmp_path / "est.tum")), max_diff=0.01)
    est_a = copy.deepcopy(est_s)
    est_a.align(ref, correct_scale=True)
    data = plot_data(est_t, est, gt_t, gt)
    np.testing.assert_allclose(data.est_xyz[data.est_idx], est_a.positions_xyz, atol=1e-9)


def test_views_follow_the_ground_truths_motion():
    est_t, est, gt_t, gt = walk()
    data = plot_data(est_t, est, gt_t, gt)
    top, side = data.top, data.side
    # a z-up loop: top view x-y seen from above, side view against z
    np.testing.assert_array_equal(top.horizontal, [1, 0, 0])
    np.testing.assert_array_equal(top.vertical, [0, 1, 0])
    np.testing.assert_array_equal(side.vertical, [0, 0, 1])
    assert top.xlabel == "x (m)" and side.ylabel == "z, up (m)"
    # a camera-style world (y down, KITTI): top view x-z seen from -y (above)
    xyz = gt[:, :3, 3][:, [0, 2, 1]] * [1, -1, 1]
    top, side = view_axes(xyz)
    np.testing.assert_array_equal(top.horizontal, [1, 0, 0])
    np.testing.assert_array_equal(top.vertical, [0, 0, 1])
    np.testing.assert_array_equal(side.vertical, [0, -1, 0])
    # a tilted plane: the principal axes, labelled as such, right-handed
    tilt = Rotation.from_euler("xy", [40, 30], degrees=True).as_matrix()
    top, side = view_axes(gt[:, :3, 3] @ tilt.T)
    assert top.xlabel.startswith("PC1 = ") and side.ylabel.startswith("PC3 = ")
    normal = tilt @ [0, 0, 1]
    assert abs(abs(side.vertical @ normal) - 1) < 1e-2
    np.testing.assert_allclose(np.cross(top.horizontal, top.vertical), side.vertical)


def test_keyframe_mask_must_match_the_poses(tmp_path):
    est_t, est, _, _ = walk()
    with pytest.raises(ValueError, match="keyframe_mask"):
        plot_data(est_t, est, keyframe_mask=np.ones(3, bool))


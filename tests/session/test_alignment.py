"""The window rollover's Sim(3) (the reference's rule): it recovers a known similarity
exactly, from numpy or torch inputs, and chained rollovers stay continuous."""
import numpy as np
import pytest
import torch

from lingbot_ros.geometry import Sim3
from lingbot_ros.session.alignment import (SCALE_CLAMP, depth_ratio_scale, reference_alignment,
                                           select_anchor)
from tests.geometry.sim3_cases import random_c2w, random_rotation, random_sim3


def test_a_sim3_scales_device_depth_in_place_of_the_tensor_kind():
    s = Sim3(2.5)
    d = torch.rand(2, 4, 4)
    out = s.apply_depth(d)
    assert isinstance(out, torch.Tensor) and out.dtype == d.dtype and out.device == d.device
    assert torch.equal(out, d * 2.5)


# --- the reference rule ------------------------------------------------------------------

def test_select_anchor():
    assert select_anchor([1, 1, 0, 1], [1, 0, 1, 1]) == (3, [0, 3])
    assert select_anchor([True, False], [True, True]) == (0, [0])
    assert select_anchor([0, 0, 0], [1, 1, 1]) == (0, [0])  # fallback: first overlap frame
    assert select_anchor([1, 1, 1], [1, 1]) == (1, [0, 1])
    with pytest.raises(ValueError, match="empty"):
        select_anchor([], [])


def test_depth_ratio_scale():
    prev = np.array([2.0, 4.0, 6.0, np.nan, 1.0, 3.0])
    curr = np.array([1.0, 2.0, 3.0, 1.0, 0.0, np.inf])
    assert depth_ratio_scale(prev, curr) == 2.0  # nan, zero and inf pairs are ignored
    assert depth_ratio_scale([1.0, 3.0], [1.0, 1.0]) == 1.0  # lower median, as torch
    assert depth_ratio_scale([1e6], [1.0]) == SCALE_CLAMP[1]
    assert depth_ratio_scale([1e-9], [1.0]) == SCALE_CLAMP[0]
    assert depth_ratio_scale([np.nan], [1.0]) == 1.0
    assert depth_ratio_scale(torch.full((2, 3), 3.0), torch.ones(2, 3)) == 3.0
    with pytest.raises(ValueError, match="shapes differ"):
        depth_ratio_scale(np.ones(3), np.ones(4))


@pytest.mark.parametrize("seed", range(5))
def test_reference_alignment_recovers_a_known_similarity(seed):
    rng = np.random.default_rng(seed)
    truth = random_sim3(rng)  # maps the current window's world into the previous one's
    prev = random_c2w(rng, 4)  # overlap frames in the (aligned) previous window
    curr = truth.inverse().apply_c2w(prev)  # the same frames as the new window sees them
    prev_depth = rng.uniform(0.5, 10.0, (3, 12, 16))  # paired keyframes 0, 1, 3
    curr_depth = prev_depth / truth.scale
    anchor, pairs = select_anchor([1, 1, 0, 1], [1, 1, 1, 1])
    est = reference_alignment(prev[anchor], curr[anchor], prev_depth, curr_depth)
    assert abs(est.scale - truth.scale) <= 1e-6 * truth.scale
    assert np.abs(est.rotation - truth.rotation).max() <= 1e-6
    assert np.abs(est.translation - truth.translation).max() <= 1e-6
    assert np.abs(est.apply_c2w(curr) - prev).max() <= 1e-6
    assert np.abs(est.apply_depth(curr_depth) - prev_depth).max() <= 1e-6 * 10
    # torch float64 inputs work the same
    est_t = reference_alignment(torch.from_numpy(prev[anchor]), torch.from_numpy(curr[anchor]),
                                torch.from_numpy(prev_depth), torch.from_numpy(curr_depth))
    assert np.allclose(est_t.matrix(), est.matrix(), atol=1e-9)


def test_reference_alignment_without_depth_keeps_the_scale():
    rng = np.random.default_rng(9)
    truth = Sim3(1.0, random_rotation(rng), rng.normal(size=3))
    prev = random_c2w(rng, 1)[0]
    est = reference_alignment(prev, truth.inverse().apply_c2w(prev))
    assert est.scale == 1.0 and np.allclose(est.matrix(), truth.matrix(), atol=1e-9)


def window_predictions(gt_c2w, gt_depth, start, end, rng):
    """What a fresh window sees: its own world = its first frame's camera, its own scale."""
    s = float(rng.uniform(0.3, 3.0))
    first = gt_c2w[start]
    to_global = Sim3(s, first[:3, :3], first[:3, 3])  # window world -> global world
    local = to_global.inverse()
    return to_global, local.apply_c2w(gt_c2w[start:end]), gt_depth[start:end] / s


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_chained_rollovers_stay_continuous(dtype):
    """Windows of 16 frames overlapping by 5, each in its own world and scale, aligned one
    after the other by the reference rule, reproduce the whole trajectory and depth."""
    rng = np.random.default_rng(42)
    n, window, overlap = 60, 16, 5
    t = np.linspace(0, 3, n)
    gt = np.tile(np.eye(4), (n, 1, 1))
    for i, ti in enumerate(t):  # a smooth path with turning and climbing
        a = 0.8 * ti
        gt[i, :3, :3] = [[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]]
        gt[i, :3, 3] = [np.sin(ti) * 2, 0.1 * ti, ti]
    gt_depth = rng.uniform(1.0, 8.0, (n, 6, 8))
    kf = rng.random(n) < 0.7  # random non-keyframes inside the windows

    starts = list(range(0, n - overlap, window - overlap))
    stitched_pose, stitched_depth = {}, {}
    prev = None  # (start, aligned poses, aligned depths, keyframe flags) of the last window
    to_global0 = None
    for k, start in enumerate(starts):
        end = min(start + window, n)
        to_global, poses, depths = window_predictions(gt, gt_depth, start, end, rng)
        poses, depths = poses.astype(dtype), depths.astype(dtype)
        flags = kf[start:end].copy()
        flags[:overlap] = True if k else flags[:overlap]  # scale frames are always kept
        if prev is None:
            align = Sim3.identity()
            to_global0 = to_global
        else:
            p_start, p_poses, p_depths, p_flags = prev
            off = start - p_start  # overlap frames are p_poses[off:], poses[:overlap]
            anchor, pairs = select_anchor(p_flags[off:off + overlap], flags[:overlap])
            align = reference_alignment(p_poses[off + anchor], poses[anchor],
                                        p_depths[[off + i for i in pairs]], depths[pairs])
        poses, depths = align.apply_c2w(poses), align.apply_depth(depths)
        prev = (start, poses, depths, flags)
        for j in range(end - start):  # newer windows overwrite the overlap (the reference)
            stitched_pose[start + j], stitched_depth[start + j] = poses[j], depths[j]

    est = np.stack([stitched_pose[i] for i in range(n)]).astype(np.float64)
    truth = to_global0.inverse().apply_c2w(gt)  # everything in window 0's world
    tol = 1e-6 if dtype == np.float64 else 1e-4
    assert np.abs(est - truth).max() <= tol
    est_depth = np.stack([stitched_depth[i] for i in range(n)])
    assert np.abs(est_depth - gt_depth / to_global0.scale).max() <= tol * 10
    steps = np.linalg.norm(np.diff(est[:, :3, 3], axis=0), axis=1)
    true_steps = np.linalg.norm(np.diff(truth[:, :3, 3], axis=0), axis=1)
    assert np.abs(steps - true_steps).max() <= tol  # no jump at any boundary

"""Verification (loop/verify.py, loop/pair_runner.py) and confirmation (loop/confirm.py): the
measurement's algebra on synthetic views of a known plane, each gate, the confirmation rule,
and the in-test model as oracle (random weights: algebra only, never accuracy)."""
import dataclasses
import math

import numpy as np
import pytest

from lingbot_ros.config import PreprocessConfig, SessionConfig
from lingbot_ros.geometry import rigid_inverse, rotation_exp
from lingbot_ros.loop.config import LoopConfig
from lingbot_ros.loop.confirm import LoopConfirmation
from lingbot_ros.loop.pair_runner import pair_config, run_pair, stored_image
from lingbot_ros.loop.place_db import PlaceDatabase
from lingbot_ros.loop.verify import (REJECTIONS, LoopReason, LoopVerifier, PairOutputs,
                                     implied_pose, verify_pair)

H, W = 48, 64
K = np.array([[50.0, 0.0, 31.5], [0.0, 50.0, 23.5], [0.0, 0.0, 1.0]])
NORMAL = np.array([0.1, -0.15, 1.0]) / np.linalg.norm([0.1, -0.15, 1.0])  # the plane n.X = 4
STAMP = 1_000_000_000_000


def pose(rotvec, t) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3] = rotation_exp(np.asarray(rotvec, float))
    out[:3, 3] = t
    return out


def plane_depth(c2w: np.ndarray) -> np.ndarray:
    """(H, W) depth of the plane n.X = 4 (pair world) seen by a camera at ``c2w``."""
    n_cam = c2w[:3, :3].T @ NORMAL
    d = 4.0 - NORMAL @ c2w[:3, 3]
    vs, us = np.mgrid[0:H, 0:W]
    rays = np.linalg.inv(K) @ np.stack([us.ravel(), vs.ravel(), np.ones(H * W)])  # (3, HW)
    return (d / (n_cam @ rays)).reshape(H, W)


C2W_KF = pose((0.02, -0.03, 0.01), (0.1, -0.05, 0.2))
T_PAIR = pose((0.01, 0.08, -0.02), (0.3, 0.02, -0.1))  # the current frame in the keyframe's
C2W_CUR = C2W_KF @ T_PAIR
T_WORLD_KF = pose((0.3, -1.2, 0.4), (5.0, -2.0, 1.5))  # the stored pose (stream world)


def pair(depth_cur=None, conf_kf=2.0, conf_cur=2.0) -> PairOutputs:
    # the pair's depths made float16-exact, so the stored (float16) depth at a power-of-two
    # scale is exact too and the median ratio is exactly the scale
    kf = plane_depth(C2W_KF).astype(np.float16).astype(np.float32)
    cur = plane_depth(C2W_CUR) if depth_cur is None else depth_cur
    return PairOutputs(C2W_KF, C2W_CUR, kf, np.full((H, W), conf_kf), cur,
                       np.full((H, W), conf_cur), K, K)


def keyframe(p: PairOutputs, scale: float, depth_stride: int = 4):
    db = PlaceDatabase(LoopConfig(), image_stride=2, depth_stride=depth_stride)
    rng = np.random.default_rng(0)
    desc = rng.standard_normal(256)
    image = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    db.add(7, STAMP, T_WORLD_KF, 0, desc, image, p.depth_kf.astype(np.float64) * scale)
    return db.get(7)


def truth(scale: float, sigma: float = 1.0) -> np.ndarray:
    m = np.eye(4)
    m[:3, :3] = sigma * T_PAIR[:3, :3]
    m[:3, 3] = scale * T_PAIR[:3, 3]
    return m


def fe_pose(scale: float, shift=(0.0, 0.0, 0.0), rotvec=(0.0, 0.0, 0.0)) -> np.ndarray:
    """The front end's current pose: the true one (from the stored pose and the truth),
    moved by ``shift`` and turned by ``rotvec`` in the world."""
    true = T_WORLD_KF.copy()
    true[:3, :3] = T_WORLD_KF[:3, :3] @ T_PAIR[:3, :3]
    true[:3, 3] = T_WORLD_KF[:3, :3] @ (scale * T_PAIR[:3, 3]) + T_WORLD_KF[:3, 3]
    return pose(rotvec, shift) @ true


@pytest.mark.parametrize("scale", [4.0, 0.5])
def test_a_known_sim3_is_recovered_and_plugs_into_the_pose_graph(scale):
    p = pair()
    kf = keyframe(p, scale)
    r = verify_pair(p, kf, fe_pose(scale), STAMP + 30 * 10**9, LoopConfig())
    assert r.accepted and r.reason == LoopReason.VERIFIED, r.reason
    assert r.scale == scale and r.relative_scale == 1.0
    np.testing.assert_allclose(r.measurement, truth(scale), rtol=0, atol=1e-12)
    assert r.inlier_fraction == 1.0 and r.overlap_pixels >= LoopConfig().min_valid_pixels
    assert r.correction_m < 1e-9 and r.correction_deg < 1e-6
    np.testing.assert_allclose(r.correction(), np.eye(4), atol=1e-9)
    np.testing.assert_allclose(implied_pose(T_WORLD_KF, r.measurement), fe_pose(scale),
                               atol=1e-12)
    pose_graph = pytest.importorskip("lingbot_ros.loop.pose_graph")
    graph = pose_graph.PoseGraph(LoopConfig())
    graph.add_keyframe(7, STAMP, T_WORLD_KF, 0)
    graph.add_keyframe(8, STAMP + 1, fe_pose(scale), 0)
    graph.add_loop(7, 8, r.measurement)  # Sim(3) as add_loop takes it
    assert graph.optimize().loops[0].residual_m < 1e-6


def test_the_relative_scale_comes_from_the_front_ends_current_depth():
    p = pair()
    kf = keyframe(p, 4.0)
    current = p.depth_cur.astype(np.float64) * 5.0  # the front end's units moved: 5 per pair
    r = verify_pair(p, kf, fe_pose(4.0), STAMP, LoopConfig(), current_depth=current)
    assert r.accepted
    assert r.relative_scale == pytest.approx(0.8, rel=1e-6)
    np.testing.assert_allclose(r.measurement, truth(4.0, 0.8), rtol=1e-6, atol=1e-12)


def test_an_arbitrary_scale_is_tied_to_float16_rounding():
    p = pair()
    r = verify_pair(p, keyframe(p, 1.7), fe_pose(1.7), STAMP, LoopConfig())
    assert r.accepted and r.scale == pytest.approx(1.7, rel=1e-3)


def test_scrambled_depth_fails_geometric_consistency():
    rng = np.random.default_rng(1)
    cur = plane_depth(C2W_CUR) * rng.uniform(0.3, 3.0, (H, W))
    p = pair(depth_cur=cur)
    r = verify_pair(p, keyframe(p, 4.0), fe_pose(4.0), STAMP, LoopConfig())
    assert not r.accepted and r.reason == LoopReason.INCONSISTENT
    assert r.inlier_fraction < LoopConfig().min_inlier_fraction
    assert r.measurement is not None  # computed, then refused


def test_too_few_confident_pixels_for_the_scale_tie_or_the_overlap():
    p = pair(conf_kf=1.2)  # below verify_min_conf 1.5
    r = verify_pair(p, keyframe(p, 4.0), fe_pose(4.0), STAMP, LoopConfig())
    assert r.reason == LoopReason.TOO_FEW_PIXELS and r.measurement is None
    p = pair(conf_cur=1.2)
    r = verify_pair(p, keyframe(p, 4.0), fe_pose(4.0), STAMP, LoopConfig())
    assert r.reason == LoopReason.LITTLE_OVERLAP and r.overlap_pixels == 0


@pytest.mark.parametrize("shift,rotvec,ok", [((6.0, 0, 0), (0, 0, 0), True),
                                             ((12.0, 0, 0), (0, 0, 0), False),
                                             ((0, 0, 0), (0, 0, math.radians(9)), True),
                                             ((0, 0, 0), (0, 0, math.radians(11)), False)])
def test_plausibility_bounds_the_implied_correction(shift, rotvec, ok):
    p = pair()
    r = verify_pair(p, keyframe(p, 4.0), fe_pose(4.0, shift, rotvec), STAMP, LoopConfig())
    assert r.accepted is ok
    assert r.reason == (LoopReason.VERIFIED if ok else LoopReason.IMPLAUSIBLE)


def test_the_verifier_counts_candidates_by_reason():
    v = LoopVerifier(LoopConfig())
    good, bad = pair(), pair(conf_kf=1.0)
    v.verify(good, keyframe(good, 4.0), fe_pose(4.0), STAMP)
    v.verify(bad, keyframe(bad, 4.0), fe_pose(4.0), STAMP)
    v.verify(good, keyframe(good, 4.0), fe_pose(4.0, (50.0, 0, 0)), STAMP)
    assert v.counts == {"candidates": 3, "verified": 1, "too_few_pixels": 1, "implausible": 1}
    assert set(v.counts) - {"candidates", "verified"} <= set(REJECTIONS)


def verified(stamp_s: float, shift=(3.0, 0, 0)):
    p = pair()
    return verify_pair(p, keyframe(p, 4.0), fe_pose(4.0, shift), STAMP + round(stamp_s * 1e9),
                       LoopConfig())


def test_two_agreeing_verifications_confirm_and_disagreeing_ones_wait():
    c = LoopConfirmation(LoopConfig())
    first = verified(0.0)
    assert c.offer(first).reason == "pending"
    other = c.offer(verified(1.0, (5.0, 0, 0)))  # 2 m off the first's correction
    assert not other.confirmed and other.distance == pytest.approx(2.0)
    out = c.offer(verified(2.0, (3.5, 0, 0)))  # 0.5 m: agrees with the first
    assert out.confirmed and out.loops[0] is first and out.distance == pytest.approx(0.5)
    assert [p.correction_m for p in c.pending] == [pytest.approx(5.0)]


def test_confirmation_skips_repeats_expires_and_is_bounded():
    config = LoopConfig(confirm_max_pending=3)
    c = LoopConfirmation(config)
    first = verified(0.0)
    c.offer(first)
    assert c.offer(first).reason == "pending"  # the same keyframe and stamp: no second opinion
    c = LoopConfirmation(config)
    c.offer(verified(0.0))
    assert c.offer(verified(config.confirm_window_s + 1)).reason == "pending"  # expired
    assert c.counts["expired"] == 1
    for i in range(10):
        c.offer(verified(20.0 + i, (3.0 + 2 * i, 0, 0)))
    assert len(c.pending) == 3
    assert c.offer(pair_rejected()).reason == "not_verified"


def pair_rejected():
    p = pair(conf_kf=1.0)
    return verify_pair(p, keyframe(p, 4.0), fe_pose(4.0), STAMP, LoopConfig())


def test_bad_input_is_refused():
    p = pair()
    with pytest.raises(ValueError, match="shape"):
        PairOutputs(C2W_KF, C2W_CUR, p.depth_kf, p.conf_kf[:-1], p.depth_cur, p.conf_cur, K, K)
    with pytest.raises(ValueError, match="invertible"):
        PairOutputs(C2W_KF, C2W_CUR, p.depth_kf, p.conf_kf, p.depth_cur, p.conf_cur, K,
                    np.zeros((3, 3)))
    with pytest.raises(ValueError, match="T_world_cur"):
        verify_pair(p, keyframe(p, 4.0), 2 * np.eye(4), STAMP, LoopConfig())
    with pytest.raises(ValueError, match="min_inlier_fraction"):
        LoopConfig(min_inlier_fraction=1.5)


def test_the_stored_image_is_upsampled_by_repeating_blocks():
    db = PlaceDatabase(LoopConfig(), image_stride=2, depth_stride=1)
    image = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)
    db.add(1, STAMP, np.eye(4), 0, np.ones(256), image, np.ones((5, 7)))
    up = stored_image(db.get(1))
    small = db.get(1).image  # (2, 3, 3)
    assert up.shape == (5, 7, 3)
    np.testing.assert_array_equal(up[:4, :6], np.repeat(np.repeat(small, 2, 0), 2, 1))
    np.testing.assert_array_equal(up[4], up[3])
    np.testing.assert_array_equal(up[:, 6], up[:, 5])


# --- the in-test model as oracle ---------------------------------------------------------------

def test_the_pair_on_the_tiny_model_composes_as_documented_and_leaves_the_stream_alone():
    from lingbot_ros.session import StreamingSession, open_session
    size = PreprocessConfig(width=56, height=42)
    stream_cfg = SessionConfig(num_scale_frames=2, window=4, preprocess=size)
    stream, random_weights = open_session(stream_cfg, preset="tiny")
    assert random_weights
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (42, 56, 3), dtype=np.uint8) for _ in range(5)]
    results = [r for i, im in enumerate(images[:3]) for r in stream.push(im, STAMP + i)]
    kf_result, cur = results[0], results[2]
    db = PlaceDatabase(LoopConfig(), image_stride=2, depth_stride=2)
    db.add(0, STAMP, kf_result.c2w, 0, np.ones(256), kf_result.rgb, kf_result.depth)
    kf = db.get(0)

    def make(config):
        return StreamingSession(stream.model, config)

    out = run_pair(make, stream_cfg, kf, cur.rgb)
    again = run_pair(make, stream_cfg, kf, cur.rgb)
    assert np.array_equal(out.c2w_cur, again.c2w_cur)  # a fresh session: the same pair
    config = LoopConfig(verify_min_conf=1.0, min_valid_pixels=1, min_inlier_fraction=1e-9,
                        max_correction_m=1e9, max_correction_deg=180.0)
    r = verify_pair(out, kf, cur.c2w, cur.stamp_ns, config, current_depth=cur.depth)
    # by hand, as docs/loop.md "Verification" states it
    t_pair = rigid_inverse(out.c2w_kf) @ out.c2w_cur
    stored = kf.depth.astype(np.float64)
    pk = out.depth_kf[::2, ::2].astype(np.float64)
    ok = (stored > 0) & (pk > 0) & (out.conf_kf[::2, ::2] >= 1.0)
    s = np.median(stored[ok] / pk[ok])
    fe = cur.depth[::2, ::2].astype(np.float64)
    pc = out.depth_cur[::2, ::2].astype(np.float64)
    ok = (fe > 0) & (pc > 0) & (out.conf_cur[::2, ::2] >= 1.0)
    sigma = s / np.median(fe[ok] / pc[ok])
    expected = np.eye(4)
    expected[:3, :3] = sigma * t_pair[:3, :3]
    expected[:3, 3] = s * t_pair[:3, 3]
    assert r.scale == s and r.relative_scale == sigma
    np.testing.assert_array_equal(r.measurement, expected)
    assert r.reason in (LoopReason.VERIFIED,) + REJECTIONS

    # the stream's own session is untouched: its next frames equal a run without the pairs
    rest = [r for i, im in enumerate(images[3:]) for r in stream.push(im, STAMP + 3 + i)]
    alone = StreamingSession(stream.model, stream_cfg)
    ref = [r for i, im in enumerate(images) for r in alone.push(im, STAMP + i)][3:]
    for a, b in zip(rest, ref, strict=True):
        assert np.array_equal(a.c2w, b.c2w) and np.array_equal(a.depth, b.depth)
    assert pair_config(stream_cfg).num_scale_frames == 2
    with pytest.raises(ValueError, match="current_image"):
        run_pair(make, stream_cfg, kf, images[0][:40])
    assert dataclasses.replace(stream_cfg) == stream_cfg

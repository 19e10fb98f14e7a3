"""Relocalization (loop/relocalize.py) on synthetic geometry: a stored map of a plane seen
from known poses, a stream started at an offset of the map's frame that it does not know, and
an oracle pair (two synthetic views, as tests/loop/test_verify.py builds them): the offset is
found exactly, and only when two verifications agree."""
import numpy as np
import pytest

from lingbot_ros.geometry import rigid_inverse, rotation_exp
from lingbot_ros.loop.backend_types import KeyframeInput
from lingbot_ros.loop.config import LoopConfig
from lingbot_ros.loop.place_db import PlaceDatabase
from lingbot_ros.loop.place_descriptor import place_descriptor
from lingbot_ros.loop.place_map import place_map_from, read_place_map, to_metres, write_place_map
from lingbot_ros.loop.relocalize import LocalizeReason, Relocalizer, relocalization_config
from lingbot_ros.loop.verify import PairOutputs

H, W = 48, 64
K = np.array([[50.0, 0.0, 31.5], [0.0, 50.0, 23.5], [0.0, 0.0, 1.0]])
NORMAL = np.array([0.1, -0.15, 1.0]) / np.linalg.norm([0.1, -0.15, 1.0])  # the plane n.X = 4
PAIR_UNITS_PER_M = 0.5  # the pair's own units: a power of two keeps the scale tie exact
MODEL_UNITS_PER_M = 0.5  # the saved stream's units, before to_metres
SECOND = 1_000_000_000


def pose(rotvec, t) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3] = rotation_exp(np.asarray(rotvec, float))
    out[:3, 3] = t
    return out


def plane_depth(T_map_cam: np.ndarray) -> np.ndarray:
    """(H, W) metric depth of the plane n.X = 4 (the map's frame) from a camera there."""
    n_cam = T_map_cam[:3, :3].T @ NORMAL
    d = 4.0 - NORMAL @ T_map_cam[:3, 3]
    vs, us = np.mgrid[0:H, 0:W]
    rays = np.linalg.inv(K) @ np.stack([us.ravel(), vs.ravel(), np.ones(H * W)])  # (3, HW)
    return (d / (n_cam @ rays)).reshape(H, W)


def f16(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float16).astype(np.float64)


MAP_POSES = {100: pose((0.02, -0.03, 0.01), (0.1, -0.05, 0.2)),  # T_map_cam, metres
             101: pose((-0.03, 0.05, 0.0), (-0.2, 0.1, 0.0))}
FAR = {102 + i: pose((0.0, 0.1 * i, 0.0), (60.0 + 5 * i, 0.0, 0.0)) for i in range(3)}
CURRENT = [pose((0.01, 0.08, -0.02), (0.3, 0.02, -0.1)), pose((0.0, 0.06, 0.01), (0.25, 0.0, 0.0)),
           pose((0.02, 0.05, 0.0), (0.2, -0.05, 0.05))]  # the current frames' true T_map_cam
OFFSET = pose((0.4, -1.0, 2.0), (30.0, -12.0, 3.0))  # the stream's odom in the map: unknown
RNG = np.random.default_rng(5)
FEATURES = RNG.standard_normal((20, 64))


class Oracle:
    """The pair as the model would give it if it were exact: both frames' poses in a pair
    world of its own (rotated, shifted, in half-metres), the plane's depths there; ``lie``
    moves the current frame 1.5 m forward, consistently (a wrong place the pair explains)."""

    G = pose((0.3, 0.2, -0.1), (1.0, 2.0, -3.0))

    def __init__(self):
        self.current, self.lie, self.calls = None, False, 0

    def to_pair(self, T: np.ndarray) -> np.ndarray:
        out = self.G @ T
        out[:3, 3] *= PAIR_UNITS_PER_M
        return out

    def __call__(self, keyframe, image) -> PairOutputs:
        assert image.shape == (H, W, 3)
        self.calls += 1
        T_kf = keyframe.pose
        T_cur = self.current @ pose((0, 0, 0), (0, 0, 1.5)) if self.lie else self.current
        kf = (f16(plane_depth(T_kf)) * PAIR_UNITS_PER_M).astype(np.float32)
        cur = (plane_depth(T_cur) * PAIR_UNITS_PER_M).astype(np.float32)
        conf = np.full((H, W), 2.0, np.float32)
        return PairOutputs(self.to_pair(T_kf), self.to_pair(T_cur), kf, conf, cur, conf, K, K)


def stored_map(tmp_path):
    """A stream's database in its own (model) units, saved in metres: two keyframes on the
    plane, three far away; the optimised poses are the map's."""
    db = PlaceDatabase(LoopConfig(), image_stride=2, depth_stride=4)
    rng = np.random.default_rng(6)
    poses = {}
    for kid, T in {**MAP_POSES, **FAR}.items():
        features = (FEATURES + rng.normal(0, 0.1, FEATURES.shape) if kid in MAP_POSES
                    else rng.standard_normal(FEATURES.shape))
        depth = plane_depth(T) if kid in MAP_POSES else np.full((H, W), 9.0)
        stream_pose = pose((0, 0, 0.5), (kid, 0, 0))  # the saving stream's own world
        db.add(kid, kid * SECOND, stream_pose, 0, place_descriptor(features),
               rng.integers(0, 256, (H, W, 3), np.uint8), depth * MODEL_UNITS_PER_M)
        poses[kid] = T.copy()
        poses[kid][:3, 3] *= MODEL_UNITS_PER_M
    m = to_metres(place_map_from(db, poses, units="model"), 1 / MODEL_UNITS_PER_M,
                  "scale.locked")
    return read_place_map(write_place_map(tmp_path / "lab", m))


def frame(i: int, stamp_s: float) -> KeyframeInput:
    T_map_cam = CURRENT[i]
    return KeyframeInput(keyframe_id=i, stamp_ns=round(stamp_s * SECOND), segment=0,
                         T_odom_cam=rigid_inverse(OFFSET) @ T_map_cam, K_model=K,
                         features=FEATURES + RNG.normal(0, 0.05, FEATURES.shape),
                         image=np.zeros((H, W, 3), np.uint8),
                         depth=plane_depth(T_map_cam).astype(np.float32))


def relocalizer(tmp_path, top_k: int):
    oracle = Oracle()
    return Relocalizer(LoopConfig(top_k=top_k), stored_map(tmp_path), oracle), oracle


def test_the_stream_finds_its_offset_in_the_stored_map(tmp_path):
    reloc, oracle = relocalizer(tmp_path, top_k=2)
    oracle.current = CURRENT[0]
    out = reloc.offer(frame(0, 5.0))
    assert {c.keyframe_id for c in out.candidates} == {100, 101}  # retrieval: the plane's
    assert out.localized and out.reason == LocalizeReason.LOCALIZED and out.verified == 2
    assert out.matched_id in (100, 101)
    np.testing.assert_allclose(out.T_map_odom, OFFSET, rtol=0, atol=1e-6)
    assert not out.T_map_odom.flags.writeable
    # the offset is beyond any loop's plausibility bound: relocalization opens that gate
    assert np.linalg.norm(OFFSET[:3, 3]) > LoopConfig().max_correction_m
    assert reloc.counts == {"localized": 1}
    assert reloc.candidate_counts == {"candidates": 2, "verified": 2}


def test_one_verification_alone_does_not_localize(tmp_path):
    reloc, oracle = relocalizer(tmp_path, top_k=1)
    oracle.current = CURRENT[0]
    first = reloc.offer(frame(0, 5.0))
    assert not first.localized and first.reason == LocalizeReason.UNCONFIRMED
    assert first.verified == 1 and first.T_map_odom is None and reloc.T_map_odom is None
    oracle.current = CURRENT[1]
    second = reloc.offer(frame(1, 6.0))
    assert second.localized
    np.testing.assert_allclose(second.T_map_odom, OFFSET, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(reloc.T_map_odom, second.T_map_odom)


def test_a_disagreeing_second_verification_does_not_localize(tmp_path):
    reloc, oracle = relocalizer(tmp_path, top_k=1)
    oracle.current = CURRENT[0]
    assert reloc.offer(frame(0, 5.0)).reason == LocalizeReason.UNCONFIRMED
    oracle.current, oracle.lie = CURRENT[1], True
    wrong = reloc.offer(frame(1, 6.0))
    assert wrong.verified == 1  # the pair explains the wrong place: it passes every gate
    assert not wrong.localized and wrong.reason == LocalizeReason.UNCONFIRMED
    assert reloc.T_map_odom is None
    oracle.current, oracle.lie = CURRENT[2], False
    third = reloc.offer(frame(2, 7.0))  # agrees with the first, still pending
    assert third.localized
    np.testing.assert_allclose(third.T_map_odom, OFFSET, rtol=0, atol=1e-6)
    assert reloc.counts == {"unconfirmed": 2, "localized": 1}


def test_a_prior_limits_the_candidates_and_the_answer(tmp_path):
    reloc, oracle = relocalizer(tmp_path, top_k=2)
    oracle.current = CURRENT[0]
    away = pose((0, 0, 0), (100.0, 0, 0))
    out = reloc.offer(frame(0, 5.0), prior=away, prior_radius_m=5.0)
    assert out.reason == LocalizeReason.NO_CANDIDATES and oracle.calls == 0
    # the prior reaches both stored keyframes but not where they put the camera
    near = pose((0, 0, 0), (-2.6, 0.0, 0.2))
    radius = 2.8
    for T in MAP_POSES.values():
        assert np.linalg.norm(T[:3, 3] - near[:3, 3]) < radius
    assert np.linalg.norm(CURRENT[0][:3, 3] - near[:3, 3]) > radius
    out = reloc.offer(frame(0, 5.0), prior=near, prior_radius_m=radius)
    assert out.reason == LocalizeReason.NOT_VERIFIED
    assert reloc.candidate_counts["far_from_prior"] == 2
    out = reloc.offer(frame(0, 5.0), prior=CURRENT[0], prior_radius_m=1.0)
    assert out.localized
    np.testing.assert_allclose(out.T_map_odom, OFFSET, rtol=0, atol=1e-6)


def test_distractors_fail_verification_and_pair_failures_are_counted(tmp_path):
    reloc, oracle = relocalizer(tmp_path, top_k=5)
    oracle.current = CURRENT[0]
    out = reloc.offer(frame(0, 5.0))
    assert out.localized  # the two plane keyframes rank first and agree
    (tmp_path / "b").mkdir()
    failing = Relocalizer(LoopConfig(), stored_map(tmp_path / "b"), _raise)
    out = failing.offer(frame(0, 5.0))
    assert out.reason == LocalizeReason.NOT_VERIFIED
    assert failing.candidate_counts["pair_failed"] == len(out.candidates) == 5


def _raise(keyframe, image):
    raise ValueError("the pair's session returned 0 results")


def test_a_map_not_in_metres_is_refused(tmp_path):
    db = PlaceDatabase(LoopConfig())
    db.add(1, 1, np.eye(4), 0, place_descriptor(FEATURES), np.zeros((H, W, 3), np.uint8),
           np.ones((H, W)))
    m = place_map_from(db, {1: np.eye(4)}, units="model")
    with pytest.raises(ValueError, match="not metres"):
        Relocalizer(LoopConfig(), m, Oracle())
    reloc = Relocalizer(LoopConfig(), to_metres(m, 1.0, "test"), Oracle())
    with pytest.raises(ValueError, match="prior"):
        reloc.offer(frame(0, 1.0), prior_radius_m=2.0)
    with pytest.raises(ValueError, match="prior_radius_m"):
        reloc.offer(frame(0, 1.0), prior=np.eye(4))
    with pytest.raises(ValueError, match="KeyframeInput"):
        reloc.offer("frame")
    assert relocalization_config(LoopConfig()).max_correction_deg == 180.0

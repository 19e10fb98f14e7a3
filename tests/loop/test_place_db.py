"""The keyframe database (lingbot_ros/loop/place_db.py) and its place descriptor
(lingbot_ros/loop/place_descriptor.py): retrieval, its exclusions, thinning, bounded growth,
the descriptor's properties, snapshots and bad inputs. Seeded, real algebra."""
import json
import math

import numpy as np
import pytest

from lingbot_ros.geometry.poses import rotation_exp
from lingbot_ros.loop.config import LoopConfig
from lingbot_ros.loop.place_db import PlaceDatabase, bytes_per_keyframe
from lingbot_ros.loop.place_descriptor import (DESCRIPTOR_DIM, gem, place_descriptor,
                                               projection)

S = 1_000_000_000  # ns per second
IMAGE = (np.arange(12 * 16 * 3) % 256).astype(np.uint8).reshape(12, 16, 3)
DEPTH = np.linspace(0.5, 5.0, 12 * 16, dtype=np.float32).reshape(12, 16)


def pose(x=0.0, y=0.0, z=0.0, yaw_deg=0.0) -> np.ndarray:
    m = np.eye(4)
    m[:3, :3] = rotation_exp(np.array([0.0, 0.0, math.radians(yaw_deg)]))
    m[:3, 3] = (x, y, z)
    return m


def frames(n: int, seed: int = 0, patches: int = 40, width: int = 64) -> list:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((patches, width)).astype(np.float32) for _ in range(n)]


def driven(features, step_m: float = 1.0, config=LoopConfig()) -> PlaceDatabase:
    """A database of ``features``, one keyframe a second, ``step_m`` apart along x."""
    db = PlaceDatabase(config)
    for i, f in enumerate(features):
        assert db.add(i, i * S, pose(i * step_m), 0, place_descriptor(f), IMAGE, DEPTH).kept
    return db


# -- retrieval ----------------------------------------------------------------------------------

def test_a_revisit_finds_the_first_frames_as_the_top_candidates():
    feats = frames(60)
    db = driven(feats)
    now = 60 * S  # the revisit: the first ten frames' features again, a minute later
    for i in range(10):
        found = db.candidates(place_descriptor(feats[i]), now + i * S, exclude_ids=range(50, 60))
        assert len(found) == LoopConfig().top_k
        assert found[0].keyframe_id == i and found[0].score > 0.999
        assert found[1].score < found[0].score - 0.3
        assert [c.score for c in found] == sorted((c.score for c in found), reverse=True)


def test_a_recent_frame_is_never_a_candidate_and_the_age_limit_is_exact():
    feats = frames(40)
    db = driven(feats)
    last = 39 * S
    for i in (39, 30, 25):  # younger than min_age_s = 20 s: never, even when identical
        found = db.candidates(place_descriptor(feats[i]), last, k=40)
        assert i not in {c.keyframe_id for c in found}
        assert all(db.get(c.keyframe_id).stamp_ns <= last - 20 * S for c in found)
    assert len(db.candidates(place_descriptor(feats[0]), last, k=40)) == 20  # 0..19
    # keyframe 19 (stamp 19 s) is exactly 20 s old at 39 s, and 1 ns too young before
    assert db.candidates(place_descriptor(feats[19]), 39 * S)[0].keyframe_id == 19
    assert 19 not in {c.keyframe_id for c in db.candidates(place_descriptor(feats[19]),
                                                           39 * S - 1, k=40)}
    assert db.candidates(place_descriptor(feats[0]), 19 * S - 1) == ()


def test_an_excluded_id_is_never_a_candidate():
    feats = frames(30)
    db = driven(feats)
    query = place_descriptor(feats[3])
    assert db.candidates(query, 100 * S)[0].keyframe_id == 3
    found = db.candidates(query, 100 * S, exclude_ids=[3, 4, 999], k=30)
    assert {c.keyframe_id for c in found} == set(range(30)) - {3, 4}
    assert db.candidates(query, 100 * S, exclude_ids=range(30)) == ()
    assert PlaceDatabase(LoopConfig()).candidates(query, 100 * S) == ()


def test_ties_are_ordered_by_id():
    db = PlaceDatabase(LoopConfig())
    d = place_descriptor(frames(1)[0])
    for i in (7, 3, 5):
        db.add(i, 0, pose(10.0 * i), 0, d, IMAGE, DEPTH)
    assert [c.keyframe_id for c in db.candidates(d, 100 * S)] == [3, 5, 7]


def test_the_top_k_of_a_large_database_is_the_brute_force_one():
    rng = np.random.default_rng(5)
    n = 3000  # 46 blocks of the pre-selection
    units = rng.standard_normal((n, DESCRIPTOR_DIM)).astype(np.float32)
    units /= np.linalg.norm(units, axis=1, keepdims=True)
    twins = [2999, 40, 1777, 5, 903, 2100, 64]  # share one descriptor: a tie at the top
    units[twins] = units[0]
    db = PlaceDatabase(LoopConfig(min_keyframe_distance_m=0.0))
    for i, u in enumerate(units):
        db.add(i, i * S, pose(), 0, u, IMAGE[:2, :2], DEPTH[:1, :1])
    stored = np.stack([db.get(i).descriptor for i in range(n)]).astype(np.float64)
    now, window = (n + 5) * S, range(n - 64, n)
    for q in [stored[0], *stored[100:110]]:  # stored ones: the query's own quantisation
        found = db.candidates(q, now, exclude_ids=window, k=8)
        score = stored @ q
        eligible = [i for i in range(n) if i < n - 64 and i * S <= now - 20 * S]
        expected = sorted(eligible, key=lambda i: (-score[i], i))[:8]
        assert [c.keyframe_id for c in found] == expected
    assert [c.keyframe_id for c in db.candidates(units[0], now, k=5)] == [0, 5, 40, 64, 903]
    few = db.candidates(units[0], 22 * S, k=5)  # only keyframes 0..2 are old enough
    assert [c.keyframe_id for c in few][0] == 0 and len(few) == 3


# -- thinning -----------------------------------------------------------------------------------

def test_thinning_keeps_one_of_nearby_poses_but_a_far_or_a_turned_one():
    db = PlaceDatabase(LoopConfig(min_keyframe_distance_m=0.5, min_keyframe_angle_deg=15.0))
    d = place_descriptor(frames(1)[0])
    add = lambda i, p: db.add(i, i * S, p, 0, d, IMAGE, DEPTH)  # noqa: E731
    edge = 63 / 128  # just below the cell boundary at 0.5 (binary-exact, as 127 / 128)
    assert add(0, pose(edge)).kept
    for i, p in enumerate([pose(0.51), pose(0.2, 0.2), pose(0.7, yaw_deg=10),
                           pose(0.3, z=-0.3, yaw_deg=-14.9)], start=1):
        outcome = add(i, p)
        assert not outcome.kept and outcome.reason == "near_kept" and outcome.near_id == 0
        assert outcome.distance < 0.5 and outcome.angle_deg < 15.0
    assert add(10, pose(127 / 128)).kept  # exactly 0.5 away: "within" is strict
    assert add(11, pose(edge, yaw_deg=40)).kept  # same place, strongly turned
    assert add(12, pose(-0.5)).kept  # 0.99 from the first
    near = add(13, pose(0.45, yaw_deg=38))
    assert not near.kept and near.near_id == 11  # the turned one is its neighbour
    assert sorted(db.ids()) == [0, 10, 11, 12] and (db.offered, db.thinned) == (9, 5)


def test_zero_thresholds_keep_everything():
    for config in (LoopConfig(min_keyframe_distance_m=0.0), LoopConfig(min_keyframe_angle_deg=0)):
        db = PlaceDatabase(config)
        d = place_descriptor(frames(1)[0])
        assert all(db.add(i, i, pose(), 0, d, IMAGE, DEPTH).kept for i in range(5))


def test_the_database_grows_with_the_area_not_with_time():
    rng = np.random.default_rng(3)
    d = place_descriptor(frames(1)[0])
    db = PlaceDatabase(LoopConfig())
    radius, per_lap = 6.0, 400  # a 38 m loop, a frame every 9.4 cm
    sizes, n = [], 0
    for centre in (0.0, 30.0):  # the same loop 10 times, then another loop 10 times
        for _lap in range(10):
            for a in np.linspace(0, 2 * math.pi, per_lap, endpoint=False):
                x, y = centre + radius * math.cos(a), radius * math.sin(a)
                noise = rng.normal(0, 0.02, 3)  # 2 cm, 1 degree
                p = pose(x + noise[0], y + noise[1], noise[2],
                         math.degrees(a) + 90 + rng.normal(0, 1.0))
                db.add(n, n * S // 10, p, 0, d, IMAGE, DEPTH)
                n += 1
            sizes.append(len(db))
    first = sizes[0]
    assert 60 <= first <= 120  # about one per 0.5 m of the 38 m loop
    assert sizes[1:10] == [first] * 9  # nine more laps of the same loop: nothing
    assert sizes[10] >= 2 * first - 3 and sizes[11:] == [sizes[10]] * 9  # a new area: its own
    assert db.offered == n and db.thinned == n - len(db)


# -- the descriptor -------------------------------------------------------------------------------

def test_the_descriptor_is_unit_float32_and_ignores_the_patch_order():
    f = frames(1, patches=70, width=96)[0]
    d = place_descriptor(f)
    assert d.shape == (DESCRIPTOR_DIM,) and d.dtype == np.float32
    assert abs(float(np.linalg.norm(d.astype(np.float64))) - 1) < 1e-6
    perm = np.random.default_rng(1).permutation(70)
    np.testing.assert_allclose(place_descriptor(f[perm]), d, atol=1e-6)
    np.testing.assert_array_equal(place_descriptor(f.astype(np.float64)), d)
    assert float(place_descriptor(frames(1, seed=9, patches=70, width=96)[0]) @ d) < 0.9


def test_gem_is_the_usual_gem_on_non_negative_features_and_odd_in_sign():
    x = np.abs(frames(1, patches=50, width=32)[0]).astype(np.float64)
    np.testing.assert_allclose(gem(x), np.mean(x ** 3, axis=0) ** (1 / 3), rtol=1e-12)
    np.testing.assert_allclose(gem(x, 1), x.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(gem(-x), -gem(x), rtol=1e-12)
    big = x.copy()
    big[:, 0] = 0.0
    big[7, 0] = 5.0  # one strong patch: GeM leans to it (mean 0.1, GeM 5 / 50^(1/3))
    assert gem(big)[0] == pytest.approx(5 / 50 ** (1 / 3))


def test_one_high_norm_token_does_not_dominate_the_descriptor():
    f = frames(1, patches=60, width=64)[0]
    outlier = f.copy()
    outlier[5] *= 1000.0  # a DINOv2 artefact token: its direction counts once, not its norm
    np.testing.assert_allclose(place_descriptor(outlier), place_descriptor(f), atol=1e-6)


@pytest.mark.parametrize("width", [64, 256, 1024])
def test_the_projection_is_fixed_and_orthonormal(width):
    p = projection(width)
    assert p.shape == (width, DESCRIPTOR_DIM) and not p.flags.writeable
    small = min(width, DESCRIPTOR_DIM)
    gram = p.T @ p if width >= DESCRIPTOR_DIM else p @ p.T
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-12)
    projection.cache_clear()
    np.testing.assert_array_equal(projection(width), p)  # rebuilt from the seed: the same


# -- snapshots --------------------------------------------------------------------------------

def assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
            assert a[key].tobytes() == b[key].tobytes(), key
        else:
            assert type(a[key]) is type(b[key]) and a[key] == b[key], key


def test_a_snapshot_round_trip_is_bit_identical_and_continues_the_same():
    feats = frames(30)
    rng = np.random.default_rng(2)
    db = PlaceDatabase(LoopConfig())
    for i, f in enumerate(feats):
        image = rng.integers(0, 256, (14 + i % 3, 20, 3), dtype=np.uint8)  # sizes may vary
        db.add(i, i * S, pose(i % 10, i // 10 * 0.2, 0, yaw_deg=0.5 * i), i // 12,
               place_descriptor(f), image, rng.random((9, 11 + i % 2)))
    state = db.state_dict()
    json.dumps({k: v for k, v in state.items() if not isinstance(v, np.ndarray)})
    copy = PlaceDatabase(LoopConfig())
    copy.load_state_dict(state)
    assert_same_state(copy.state_dict(), state)
    assert len(copy) == len(db) < 30 and copy.offered == 30 and copy.thinned == db.thinned
    query = place_descriptor(feats[4])
    assert copy.candidates(query, 100 * S) == db.candidates(query, 100 * S)
    outcomes = [[other.add(100 + i, (40 + i) * S, pose(i * 0.3), 3, query, IMAGE, DEPTH)
                 for i in range(8)] for other in (db, copy)]  # thinning after the load too
    assert outcomes[0] == outcomes[1] and not all(o.kept for o in outcomes[0])
    assert_same_state(copy.state_dict(), db.state_dict())
    k = copy.get(7)
    assert k.pose.tobytes() == db.get(7).pose.tobytes() and k.image_hw == (15, 20)


def test_an_empty_database_round_trips():
    state = PlaceDatabase(LoopConfig()).state_dict()
    copy = PlaceDatabase(LoopConfig(min_keyframe_distance_m=1.0))
    copy.load_state_dict(state)
    assert len(copy) == 0 and copy.candidates(place_descriptor(frames(1)[0]), S) == ()
    assert_same_state(copy.state_dict(), state)


def test_a_bad_state_is_refused_and_changes_nothing():
    db = driven(frames(5))
    good = db.state_dict()
    target = driven(frames(3, seed=4))
    before = target.state_dict()
    bad = [("descriptor", "vlad"), ("image_stride", 1), ("ids", good["ids"][:3]),
           ("ids", np.zeros(5, np.int64)), ("codes", good["codes"].astype(np.float32)),
           ("images", good["images"][:-1]), ("poses", good["poses"] * 2),
           ("depths", np.full_like(good["depths"], np.nan)), ("offered", -1)]
    for key, value in bad:
        with pytest.raises(ValueError):
            target.load_state_dict({**good, key: value})
        assert_same_state(target.state_dict(), before)
    with pytest.raises(ValueError, match="needs 2"):
        PlaceDatabase(LoopConfig(), image_stride=2).load_state_dict(
            PlaceDatabase(LoopConfig(), image_stride=1).state_dict())


# -- what is kept --------------------------------------------------------------------------

def test_a_kept_keyframe_holds_its_compact_image_depth_and_pose():
    db = PlaceDatabase(LoopConfig(), image_stride=2, depth_stride=4)
    f = frames(1)[0]
    p = pose(1.0, 2.0, 3.0, yaw_deg=30)
    db.add(42, 7 * S, p, 2, place_descriptor(f), IMAGE, DEPTH)
    k = db.get(42)
    assert (k.keyframe_id, k.stamp_ns, k.segment, k.image_hw, k.depth_hw) == \
        (42, 7 * S, 2, (12, 16), (12, 16))
    np.testing.assert_array_equal(k.pose, p)
    expected = IMAGE.astype(np.float64).reshape(6, 2, 8, 2, 3).mean(axis=(1, 3))
    np.testing.assert_array_equal(k.image, np.floor(expected + 0.5).astype(np.uint8))
    np.testing.assert_array_equal(k.depth, DEPTH[::4, ::4].astype(np.float16))
    assert float(k.descriptor @ place_descriptor(f)) > 0.9999
    assert not (k.image.flags.writeable or k.depth.flags.writeable or k.pose.flags.writeable)
    assert db.nbytes() > k.image.nbytes + k.depth.nbytes
    b = bytes_per_keyframe((392, 518), (392, 518))
    assert (b["image"], b["depth"]) == (196 * 259 * 3, 98 * 130 * 2)
    assert b["total"] == sum(v for key, v in b.items() if key != "total")


# -- bad inputs --------------------------------------------------------------------------------

def test_bad_inputs_are_refused_with_a_clear_message():
    db = driven(frames(2))
    d = place_descriptor(frames(1)[0])
    nan = np.ones((5, 8))
    nan[2, 3] = np.nan
    for features, match in [(np.ones(8), "N_patches, C"), (np.ones((0, 8)), "N_patches, C"),
                            (nan, "non-finite"), (np.zeros((5, 8)), "no signal"),
                            ([[1.0, 2.0]], "numpy array"), (np.ones((2, 2), bool), "real")]:
        with pytest.raises(ValueError, match=match):
            place_descriptor(features)
    args = dict(keyframe_id=9, stamp_ns=9 * S, pose=pose(50), segment=0, descriptor=d,
                image=IMAGE, depth=DEPTH)
    bad_pose = pose(50)
    bad_pose[0, 0] = 2.0
    cases = [("stamp_ns", 1.5e9, "stamp_ns must be an integer"),
             ("stamp_ns", True, "stamp_ns must be an integer"),
             ("stamp_ns", np.float64(1e9), "stamp_ns must be an integer"),
             ("keyframe_id", 1, "already in the database"),
             ("segment", -1, "segment must be in"),
             ("pose", np.eye(3), r"\(4, 4\)"), ("pose", bad_pose, "rigid"),
             ("pose", pose(np.nan), "non-finite"),
             ("descriptor", d[:100], "256"), ("descriptor", d * np.nan, "finite"),
             ("descriptor", np.zeros(256, np.float32), "non-zero"),
             ("image", IMAGE.astype(np.float32), "uint8"), ("image", IMAGE[..., 0], "uint8"),
             ("depth", DEPTH[None], "float"), ("depth", DEPTH * np.inf, "finite"),
             ("depth", DEPTH * 1e6, "float16")]
    for key, value, match in cases:
        with pytest.raises(ValueError, match=match):
            db.add(**{**args, key: value})
    assert len(db) == 2 and db.offered == 2  # nothing changed
    assert db.add(**{**args, "stamp_ns": np.int64(9 * S)}).kept  # numpy integers are ints
    with pytest.raises(ValueError, match="now_stamp_ns must be an integer"):
        db.candidates(d, 5.0)
    with pytest.raises(ValueError, match="k must be in"):
        db.candidates(d, 5 * S, k=0)
    with pytest.raises(ValueError, match="exclude_ids"):
        db.candidates(d, 5 * S, exclude_ids=["a"])
    for kwargs in ({"image_stride": 0}, {"depth_stride": 2.0}):
        with pytest.raises(ValueError, match="stride"):
            PlaceDatabase(LoopConfig(), **kwargs)

"""TransformTree: pure unit tests (no DDS), against matrices composed here with numpy."""
from __future__ import annotations

import re
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation, Slerp

from lingbot_ros.geometry import slerp, tq_to_matrix
from lingbot_ros.ros.tf.tree import (ExtrapolationError, NotConnectedError, Reparent,
                                     TransformError, TransformTree, UnknownFrameError)

S = 10**9  # ns per second


def rigid(rng: np.random.Generator) -> np.ndarray:
    q = rng.normal(size=4)
    return tq_to_matrix(rng.uniform(-2, 2, 3), q)


def yaw(deg: float, t=(0.0, 0.0, 0.0)) -> np.ndarray:
    a = np.radians(deg)
    return tq_to_matrix(t, [0.0, 0.0, np.sin(a / 2), np.cos(a / 2)])


def inv(T: np.ndarray) -> np.ndarray:
    return np.linalg.inv(T)


@pytest.fixture
def robot():
    """A REP-105 tree: map -> odom -> base_link -> {camera_link -> camera_optical_frame,
    laser}, with random static transforms; odom -> base_link dynamic at 1 s and 2 s."""
    rng = np.random.default_rng(7)
    T = {name: rigid(rng) for name in ("map_odom", "base_cam", "cam_opt", "base_laser",
                                       "odom_base1", "odom_base2")}
    tree = TransformTree()
    tree.set_transform("map", "odom", T["map_odom"], 0, static=True)
    tree.set_transform("base_link", "camera_link", T["base_cam"], 0, static=True)
    tree.set_transform("camera_link", "camera_optical_frame", T["cam_opt"], 0, static=True)
    tree.set_transform("base_link", "laser", T["base_laser"], 0, static=True)
    tree.set_transform("odom", "base_link", T["odom_base1"], 1 * S, static=False)
    tree.set_transform("odom", "base_link", T["odom_base2"], 2 * S, static=False)
    return tree, T


# -- composition -------------------------------------------------------------------------------
def test_chains_up_down_and_across(robot):
    tree, T = robot
    base_opt = T["base_cam"] @ T["cam_opt"]
    # up: source below target
    np.testing.assert_allclose(tree.lookup("base_link", "camera_optical_frame", 0), base_opt,
                               atol=1e-12)
    # down: target below source
    np.testing.assert_allclose(tree.lookup("camera_optical_frame", "base_link", 0),
                               inv(base_opt), atol=1e-12)
    # across branches, through base_link
    np.testing.assert_allclose(tree.lookup("laser", "camera_optical_frame", 0),
                               inv(T["base_laser"]) @ base_opt, atol=1e-12)
    # through the dynamic edge at an exact stamp, up to the root
    np.testing.assert_allclose(tree.lookup("map", "camera_optical_frame", 2 * S),
                               T["map_odom"] @ T["odom_base2"] @ base_opt, atol=1e-12)
    np.testing.assert_allclose(tree.lookup("camera_optical_frame", "map", 1 * S),
                               inv(T["map_odom"] @ T["odom_base1"] @ base_opt), atol=1e-12)
    # maps points: a point in the optical frame, in base_link coordinates
    p_opt = np.array([0.1, -0.2, 3.0, 1.0])
    np.testing.assert_allclose(tree.lookup("base_link", "camera_optical_frame", 0) @ p_opt,
                               T["base_cam"] @ (T["cam_opt"] @ p_opt), atol=1e-12)


def test_inverse_consistency(robot):
    tree, _ = robot
    frames = tree.frames()
    for a in frames:
        for b in frames:
            ab = tree.lookup(a, b, 1_500_000_000)
            ba = tree.lookup(b, a, 1_500_000_000)
            np.testing.assert_allclose(ab @ ba, np.eye(4), atol=1e-12)


def test_identity_for_the_same_frame_known_or_not(robot):
    tree, _ = robot
    for frame in ("base_link", "odom", "no_such_frame"):
        for stamp in (None, 0, 123 * S):
            np.testing.assert_array_equal(tree.lookup(frame, frame, stamp), np.eye(4))
    assert tree.can_transform("no_such_frame", "/no_such_frame", 5)
    assert TransformTree().can_transform("x", "x")


def test_results_are_copies(robot):
    tree, T = robot
    got = tree.lookup("base_link", "camera_link", 0)
    got[:] = 0
    np.testing.assert_allclose(tree.lookup("base_link", "camera_link", 0), T["base_cam"])
    tree2 = TransformTree()
    m = yaw(30)
    tree2.set_transform("a", "b", m, 0, static=True)
    m[:] = 0  # the caller reusing its array changes nothing
    np.testing.assert_allclose(tree2.lookup("a", "b"), yaw(30))


def test_frames_and_leading_slash(robot):
    tree, T = robot
    assert tree.frames() == sorted(["map", "odom", "base_link", "camera_link",
                                    "camera_optical_frame", "laser"])
    tree.set_transform("/base_link", "/imu", np.eye(4), 0, static=True)
    assert "imu" in tree.frames() and "/imu" not in tree.frames()
    np.testing.assert_allclose(tree.lookup("/camera_link", "imu", 0),
                               inv(T["base_cam"]), atol=1e-12)


def test_clear(robot):
    tree, _ = robot
    tree.clear()
    assert tree.frames() == []
    assert not tree.can_transform("base_link", "camera_link", 0)


# -- static vs dynamic, time -------------------------------------------------------------------
def test_static_edges_are_timeless(robot):
    tree, T = robot
    for stamp in (None, -5 * S, 0, 10**18):
        np.testing.assert_allclose(tree.lookup("base_link", "camera_optical_frame", stamp),
                                   T["base_cam"] @ T["cam_opt"], atol=1e-12)
    assert tree.latest_common_time("base_link", "camera_optical_frame") is None


def test_dynamic_edges_need_their_time(robot):
    tree, _ = robot
    assert tree.can_transform("odom", "base_link", 1 * S)
    assert tree.can_transform("odom", "base_link", 2 * S)
    assert not tree.can_transform("odom", "base_link", 1 * S - 1)
    assert not tree.can_transform("odom", "base_link", 2 * S + 1)


def test_exact_stamp_returns_the_stored_transform():
    tree = TransformTree()
    m1, m2 = yaw(10, (1, 2, 3)), yaw(50, (4, 5, 6))
    tree.set_transform("odom", "base_link", m1, 10, static=False)
    tree.set_transform("odom", "base_link", m2, 20, static=False)
    np.testing.assert_array_equal(tree.lookup("odom", "base_link", 10), m1)
    np.testing.assert_array_equal(tree.lookup("odom", "base_link", 20), m2)


def test_interpolation_midpoint_yaw_and_translation():
    tree = TransformTree()
    tree.set_transform("odom", "base_link", yaw(0, (0, 0, 0)), 1 * S, static=False)
    tree.set_transform("odom", "base_link", yaw(90, (2, -4, 1)), 2 * S, static=False)
    np.testing.assert_allclose(tree.lookup("odom", "base_link", 1_500_000_000),
                               yaw(45, (1, -2, 0.5)), atol=1e-12)
    np.testing.assert_allclose(tree.lookup("odom", "base_link", 1_250_000_000),
                               yaw(22.5, (0.5, -1, 0.25)), atol=1e-12)
    # inverse direction interpolates the same edge
    np.testing.assert_allclose(tree.lookup("base_link", "odom", 1_500_000_000),
                               inv(yaw(45, (1, -2, 0.5))), atol=1e-12)


def test_interpolation_takes_the_shortest_arc():
    tree = TransformTree()
    tree.set_transform("odom", "base_link", yaw(170), 0, static=False)
    tree.set_transform("odom", "base_link", yaw(-170), 10, static=False)  # 20 deg apart
    np.testing.assert_allclose(tree.lookup("odom", "base_link", 5), yaw(180), atol=1e-12)
    np.testing.assert_allclose(tree.lookup("odom", "base_link", 1), yaw(172), atol=1e-12)


def test_slerp_matches_scipy():
    rng = np.random.default_rng(3)
    for _ in range(50):
        q0, q1 = (q / np.linalg.norm(q) for q in rng.normal(size=(2, 4)))
        ratio = rng.uniform()
        want = Slerp([0, 1], Rotation.from_quat([q0, q1]))([ratio]).as_matrix()[0]
        got = Rotation.from_quat(slerp(q0, q1, ratio)).as_matrix()
        np.testing.assert_allclose(got, want, atol=1e-9)
    q = np.array([0.0, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(slerp(q, q, 0.3), q)  # identical ends: the nlerp branch


def test_interpolation_in_a_chain_with_two_dynamic_edges():
    tree = TransformTree()
    tree.set_transform("map", "odom", yaw(0, (0, 0, 0)), 0, static=False)
    tree.set_transform("map", "odom", yaw(0, (10, 0, 0)), 10 * S, static=False)
    tree.set_transform("odom", "base_link", yaw(0), 2 * S, static=False)
    tree.set_transform("odom", "base_link", yaw(60, (0, 1, 0)), 4 * S, static=False)
    np.testing.assert_allclose(tree.lookup("map", "base_link", 3 * S),
                               yaw(0, (3, 0, 0)) @ yaw(30, (0, 0.5, 0)), atol=1e-12)
    # None: the newest time both edges have (4 s, the older of the two newest stamps)
    assert tree.latest_common_time("map", "base_link") == 4 * S
    np.testing.assert_allclose(tree.lookup("map", "base_link", None),
                               yaw(0, (4, 0, 0)) @ yaw(60, (0, 1, 0)), atol=1e-12)


def test_none_stamp_is_the_latest_common_time(robot):
    tree, T = robot
    base_opt = T["base_cam"] @ T["cam_opt"]
    np.testing.assert_allclose(tree.lookup("odom", "camera_optical_frame", None),
                               T["odom_base2"] @ base_opt, atol=1e-12)
    np.testing.assert_allclose(tree.lookup("odom", "camera_optical_frame"),
                               T["odom_base2"] @ base_opt, atol=1e-12)
    assert tree.latest_common_time("map", "laser") == 2 * S
    assert tree.latest_common_time("laser", "laser") is None
    # a single-sample edge: None finds it, any other stamp extrapolates
    tree.set_transform("base_link", "wheel", yaw(5), 7 * S, static=False)
    np.testing.assert_allclose(tree.lookup("base_link", "wheel"), yaw(5), atol=1e-12)
    assert not tree.can_transform("base_link", "wheel", 7 * S + 1)
    # a chain through both dynamic edges: 2 s (odom -> base_link) is older than 7 s, so the
    # wheel edge would have to extrapolate into the past
    assert tree.latest_common_time("odom", "wheel") == 2 * S
    with pytest.raises(ExtrapolationError, match="past"):
        tree.lookup("odom", "wheel", None)


def test_out_of_order_inserts():
    rng = np.random.default_rng(11)
    stamps = list(range(0, 10 * S, S // 2))
    poses = {s: rigid(rng) for s in stamps}
    in_order, shuffled = TransformTree(), TransformTree()
    for s in stamps:
        in_order.set_transform("odom", "base_link", poses[s], s, static=False)
    for s in rng.permutation(stamps):
        shuffled.set_transform("odom", "base_link", poses[int(s)], int(s), static=False)
    for s in range(0, stamps[-1], S // 7):
        np.testing.assert_allclose(shuffled.lookup("odom", "base_link", s),
                                   in_order.lookup("odom", "base_link", s), atol=1e-12)
    for s in stamps:
        np.testing.assert_array_equal(shuffled.lookup("odom", "base_link", s), poses[s])


def test_repeated_stamp_replaces_the_sample():
    tree = TransformTree()
    tree.set_transform("odom", "base_link", yaw(10), 5, static=False)
    tree.set_transform("odom", "base_link", yaw(20), 5, static=False)
    np.testing.assert_allclose(tree.lookup("odom", "base_link", 5), yaw(20), atol=1e-12)


def test_history_is_pruned_to_cache_s():
    tree = TransformTree(cache_s=2.0)
    for k in range(11):  # 0 .. 5 s every 0.5 s
        tree.set_transform("odom", "base_link", yaw(k), k * S // 2, static=False)
    # kept: newest (5 s) - 2 s = 3 s onwards
    assert tree.can_transform("odom", "base_link", 3 * S)
    assert not tree.can_transform("odom", "base_link", 3 * S - 1)
    with pytest.raises(ExtrapolationError) as err:
        tree.lookup("odom", "base_link", 2 * S)
    assert "3.000000000 s to 5.000000000 s (5 samples)" in str(err.value)
    # a stamp older than the history is dropped (and counted); a newer out-of-order one kept
    tree.set_transform("odom", "base_link", yaw(99), 1 * S, static=False)
    assert tree.dropped == 1
    assert not tree.can_transform("odom", "base_link", 1 * S)
    tree.set_transform("odom", "base_link", yaw(40), 3_200_000_000, static=False)
    np.testing.assert_allclose(tree.lookup("odom", "base_link", 3_200_000_000), yaw(40),
                               atol=1e-12)


def test_extrapolation_tolerance_holds_the_nearest_sample():
    tree = TransformTree(extrapolation_tolerance_s=0.05)
    tree.set_transform("odom", "base_link", yaw(10), 1 * S, static=False)
    tree.set_transform("odom", "base_link", yaw(20), 2 * S, static=False)
    np.testing.assert_allclose(tree.lookup("odom", "base_link", 2 * S + 50_000_000), yaw(20),
                               atol=1e-12)
    np.testing.assert_allclose(tree.lookup("odom", "base_link", 1 * S - 50_000_000), yaw(10),
                               atol=1e-12)
    assert not tree.can_transform("odom", "base_link", 2 * S + 50_000_001)
    with pytest.raises(ValueError):
        TransformTree(extrapolation_tolerance_s=-1)
    with pytest.raises(ValueError):
        TransformTree(cache_s=0)


# -- the tree's shape ----------------------------------------------------------------------------
def test_reparenting_replaces_the_edge_and_is_counted():
    tree = TransformTree()
    tree.set_transform("base_link", "camera_link", yaw(10), 0, static=True)
    tree.set_transform("base_link", "camera_link", yaw(20), 0, static=True)  # an update
    assert tree.reparents == 0 and tree.last_reparent is None
    np.testing.assert_allclose(tree.lookup("base_link", "camera_link"), yaw(20), atol=1e-12)

    tree.set_transform("mount", "camera_link", yaw(30), 0, static=True)
    assert tree.reparents == 1
    assert tree.last_reparent == Reparent("camera_link", "base_link", "mount", True, True)
    np.testing.assert_allclose(tree.lookup("mount", "camera_link"), yaw(30), atol=1e-12)
    assert "base_link" not in tree.frames()  # it was named by that edge only
    with pytest.raises(UnknownFrameError):
        tree.lookup("base_link", "camera_link")

    # static -> dynamic for the same parent replaces it too
    tree.set_transform("mount", "camera_link", yaw(40), 3 * S, static=False)
    assert tree.reparents == 2
    assert tree.last_reparent == Reparent("camera_link", "mount", "mount", True, False)
    assert not tree.can_transform("mount", "camera_link", 4 * S)  # no longer timeless


def test_refused_transforms():
    tree = TransformTree()
    tree.set_transform("a", "b", np.eye(4), 0, static=True)
    tree.set_transform("b", "c", np.eye(4), 0, static=True)
    with pytest.raises(ValueError, match="loop"):
        tree.set_transform("c", "a", np.eye(4), 0, static=True)
    with pytest.raises(ValueError, match="itself"):
        tree.set_transform("/a", "a", np.eye(4), 0, static=True)
    for bad in ("", "/"):
        with pytest.raises(ValueError, match="empty frame id"):
            tree.set_transform(bad, "x", np.eye(4), 0, static=True)
        with pytest.raises(ValueError, match="empty frame id"):
            tree.set_transform("x", bad, np.eye(4), 0, static=True)
        with pytest.raises(ValueError, match="empty frame id"):
            tree.lookup(bad, "a")
    nan = np.eye(4)
    nan[0, 3] = np.nan
    scaled = np.eye(4) * 2
    scaled[3, 3] = 1
    mirror = np.diag([1.0, 1.0, -1.0, 1.0])
    for T in (nan, scaled, mirror, np.eye(3)):
        with pytest.raises(ValueError):
            tree.set_transform("a", "z", T, 0, static=True)
    assert tree.frames() == ["a", "b", "c"]  # nothing refused was kept
    assert tree.reparents == 0


# -- error messages ------------------------------------------------------------------------------
def test_unknown_frame_message_lists_known_frames(robot):
    tree, _ = robot
    with pytest.raises(UnknownFrameError) as err:
        tree.lookup("base_link", "camera_color_optical_frame", 0)
    msg = str(err.value)
    assert isinstance(err.value, TransformError) and isinstance(err.value, LookupError)
    assert "'camera_color_optical_frame' does not exist" in msg
    for frame in ("base_link", "camera_link", "camera_optical_frame", "odom", "map", "laser"):
        assert repr(frame) in msg
    with pytest.raises(UnknownFrameError, match="'nope' does not exist"):
        tree.lookup("nope", "base_link", 0)


def test_unknown_frame_message_is_truncated():
    tree = TransformTree()
    for k in range(30):
        tree.set_transform("root", f"f{k:02d}", np.eye(4), 0, static=True)
    with pytest.raises(UnknownFrameError) as err:
        tree.lookup("root", "nope")
    msg = str(err.value)
    assert "... (19 more)" in msg and "'f00'" in msg and "'f29'" not in msg


def test_unknown_frame_message_of_an_empty_tree():
    with pytest.raises(UnknownFrameError, match="no transforms received yet"):
        TransformTree().lookup("base_link", "camera_link")


def test_not_connected_message_names_both_roots(robot):
    tree, _ = robot
    tree.set_transform("world", "gps", np.eye(4), 0, static=True)
    with pytest.raises(NotConnectedError) as err:
        tree.lookup("gps", "camera_optical_frame", 0)
    msg = str(err.value)
    assert "'gps' is in the tree rooted at 'world'" in msg
    assert "'camera_optical_frame' in the tree rooted at 'map'" in msg
    assert not tree.can_transform("camera_optical_frame", "gps", 0)


def test_extrapolation_messages(robot):
    tree, _ = robot
    with pytest.raises(ExtrapolationError) as err:
        tree.lookup("map", "camera_optical_frame", 2 * S + 35_200_000)
    e = err.value
    assert (e.direction, e.by_ns, e.parent, e.child) == ("future", 35_200_000, "odom",
                                                         "base_link")
    msg = str(e)
    assert "into the future by 35.200 ms" in msg
    assert "edge 'odom' -> 'base_link'" in msg
    assert "1.000000000 s to 2.000000000 s (2 samples)" in msg
    assert "'camera_optical_frame' into 'map' at 2.035200000 s" in msg

    with pytest.raises(ExtrapolationError) as err:
        tree.lookup("base_link", "odom", 1 * S - 1_500_000)
    assert err.value.direction == "past"
    assert "into the past by 1.500 ms" in str(err.value)

    tree.set_transform("base_link", "wheel", np.eye(4), 7 * S, static=False)
    with pytest.raises(ExtrapolationError, match=re.escape("a single sample, at 7.000000000 s")):
        tree.lookup("base_link", "wheel", 8 * S)


# -- threads -------------------------------------------------------------------------------------
def test_concurrent_writes_and_lookups():
    tree = TransformTree(cache_s=1.0)
    tree.set_transform("base_link", "camera_link", yaw(90, (0.1, 0, 0)), 0, static=True)
    tree.set_transform("odom", "base_link", yaw(0), 0, static=False)
    stop = threading.Event()
    errors = []

    def write():
        k = 1
        while not stop.is_set() and k < 200_000:
            tree.set_transform("odom", "base_link", yaw(0, (k * 1e-3, 0, 0)), k * 1_000_000,
                               static=False)
            k += 1

    def read():
        try:
            for _ in range(3000):
                T = tree.lookup("odom", "camera_link", None)
                np.testing.assert_allclose(T[:3, :3], yaw(90)[:3, :3], atol=1e-9)
        except Exception as err:  # noqa: BLE001 -- reported below
            errors.append(err)

    writer = threading.Thread(target=write)
    readers = [threading.Thread(target=read) for _ in range(2)]
    writer.start()
    for r in readers:
        r.start()
    for r in readers:
        r.join(timeout=120)
    stop.set()
    writer.join(timeout=120)
    assert not errors, errors


# -- property: random trees ----------------------------------------------------------------------
quaternions = st.tuples(*[st.floats(-1, 1) for _ in range(4)]).filter(
    lambda q: np.linalg.norm(q) > 0.1)
translations = st.tuples(*[st.floats(-10, 10) for _ in range(3)])


@st.composite
def random_trees(draw):
    """(parents, transforms, insertion order): frame i > 0 hangs below parents[i] < i."""
    n = draw(st.integers(2, 9))
    parents = [None] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    transforms = [None] + [tq_to_matrix(draw(translations), draw(quaternions))
                           for _ in range(1, n)]
    order = draw(st.permutations(list(range(1, n))))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                          min_size=1, max_size=10))
    return parents, transforms, order, pairs


@settings(deadline=None, max_examples=150)
@given(random_trees())
def test_random_trees_match_composed_poses(case):
    parents, transforms, order, pairs = case
    tree = TransformTree()
    for i in order:  # any insertion order builds the same tree
        tree.set_transform(f"f{parents[i]}", f"f{i}", transforms[i], 0, static=True)
    world = [np.eye(4)]  # T_f0_fi, composed root-down
    for i in range(1, len(parents)):
        world.append(world[parents[i]] @ transforms[i])
    for a, b in pairs:
        got = tree.lookup(f"f{a}", f"f{b}", None)
        np.testing.assert_allclose(got, inv(world[a]) @ world[b], atol=1e-9)
        np.testing.assert_allclose(got @ tree.lookup(f"f{b}", f"f{a}", 123), np.eye(4),
                                   atol=1e-9)


@settings(deadline=None, max_examples=150)
@given(translations, quaternions, translations, quaternions, st.floats(0, 1),
       st.integers(1, 10**10))
def test_random_interpolation(t0, q0, t1, q1, ratio, dt):
    tree = TransformTree(cache_s=100.0)
    tree.set_transform("odom", "base_link", tq_to_matrix(t0, q0), 0, static=False)
    tree.set_transform("odom", "base_link", tq_to_matrix(t1, q1), dt, static=False)
    stamp = int(round(ratio * dt))
    a = stamp / dt
    got = tree.lookup("odom", "base_link", stamp)
    np.testing.assert_allclose(got[:3, 3], np.add(t0, a * np.subtract(t1, t0)), atol=1e-9)
    r0, r1 = Rotation.from_quat(q0), Rotation.from_quat(q1)
    want = Slerp([0, 1], Rotation.concatenate([r0, r1]))([a]).as_matrix()[0]
    np.testing.assert_allclose(got[:3, :3], want, atol=1e-7)

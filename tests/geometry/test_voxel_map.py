"""VoxelMap: one point per voxel (the first one seen), bounded by coarsening, never forgetting.

A property test replays random batches (with NaN/inf rows, far points outside the key range,
points on voxel borders) against a plain reference: the set of every accepted point so far.
"""
import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis.extra.numpy import arrays

from lingbot_ros.geometry import INDEX_LIMIT, VoxelMap

NAN, INF = float("nan"), float("inf")


def voxel_index(xyz, size):
    """(N, 3) float -> (N, 3) float64 voxel indices, as documented: floor(x / voxel_size)."""
    return np.floor(np.asarray(xyz, np.float32).astype(np.float64) / size)


def in_range(xyz, size):
    idx = voxel_index(xyz, size)
    return ((idx >= -INDEX_LIMIT) & (idx < INDEX_LIMIT)).all(axis=1)


def voxel_set(xyz, size) -> set:
    return {tuple(v) for v in voxel_index(xyz, size).astype(np.int64).tolist()}


def first_per_voxel(xyz, rgb, size):
    """The reference content: the earliest point of each voxel, ordered by voxel."""
    _, first = np.unique(voxel_index(xyz, size), axis=0, return_index=True)
    return xyz[first], rgb[first]


def by_voxel(xyz, rgb, size):
    order = np.lexsort(voxel_index(xyz, size).T[::-1])
    return xyz[order], rgb[order]


# --- properties ----------------------------------------------------------------------------

COORD = st.one_of(st.floats(-6, 6, width=32),
                  st.integers(-24, 24).map(lambda k: k * 0.25))  # also exactly on borders
SPECIAL = st.sampled_from([NAN, INF, -INF,
                           3e5, -3e5, 6e5])  # out of the key range at 0.25 (and 0.5) only


@st.composite
def batches(draw):
    n = draw(st.integers(0, 50))
    xyz = draw(arrays(np.float32, (n, 3), elements=COORD))
    if n:  # a few rows with a special coordinate
        for row, col, value in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 2),
                                                       SPECIAL), max_size=3)):
            xyz[row, col] = value
    rgb = draw(arrays(np.uint8, (n, 3)))
    return xyz, rgb


@settings(max_examples=200, deadline=None, derandomize=True)
@given(voxel_size=st.sampled_from([0.25, 0.5, 0.3, 1.0]), max_points=st.integers(8, 40),
       adds=st.lists(batches(), min_size=1, max_size=8))
def test_any_sequence_of_adds_keeps_the_invariants(voxel_size, max_points, adds):
    m = VoxelMap(voxel_size, max_points)
    seen_xyz = np.zeros((0, 3), np.float32)  # every accepted point so far, in order
    seen_rgb = np.zeros((0, 3), np.uint8)
    nonfinite = out_of_range = coarsening_adds = 0
    for xyz, rgb in adds:
        coarsenings_before = m.coarsenings
        got = m.add(xyz, rgb)
        size = m.voxel_size
        assert size == voxel_size * 2 ** m.coarsenings and m.initial_voxel_size == voxel_size
        finite = np.isfinite(xyz).all(axis=1)
        accepted = finite.copy()
        accepted[finite] = in_range(xyz[finite], size)
        nonfinite += int((~finite).sum())
        out_of_range += int((finite & ~accepted).sum())
        # (b) non-finite rows (and out-of-range ones) were ignored, and counted
        assert (m.dropped_nonfinite, m.dropped_out_of_range) == (nonfinite, out_of_range)
        # the returned count: voxels of this batch that no earlier point occupied
        new_voxels = voxel_set(xyz[accepted], size) - voxel_set(seen_xyz, size)
        assert got == len(new_voxels)
        # (e) coarsening only when needed: at half the size everything seen did not fit
        if m.coarsenings > coarsenings_before:
            coarsening_adds += 1
            finer = size / 2
            batch = xyz[finite][in_range(xyz[finite], finer)]
            assert len(voxel_set(seen_xyz, finer) | voxel_set(batch, finer)) > max_points
        seen_xyz = np.concatenate([seen_xyz, xyz[accepted]])
        seen_rgb = np.concatenate([seen_rgb, rgb[accepted]])

        stored_xyz, stored_rgb = m.arrays()
        assert stored_xyz.dtype == np.float32 and stored_rgb.dtype == np.uint8
        assert len(m) == m.num_points == len(stored_xyz) == len(stored_rgb)
        # (c) bounded
        assert m.num_points <= max_points
        # (a) one point per voxel at the current size
        assert len(voxel_set(stored_xyz, size)) == len(stored_xyz)
        # (d) nothing seen is forgotten (only coarsened), and nothing unseen appears
        assert voxel_set(stored_xyz, size) == voxel_set(seen_xyz, size)
        # each voxel holds the first point (position and colour) that fell into it
        ref_xyz, ref_rgb = first_per_voxel(seen_xyz, seen_rgb, size)
        got_xyz, got_rgb = by_voxel(stored_xyz, stored_rgb, size)
        assert np.array_equal(got_xyz, ref_xyz) and np.array_equal(got_rgb, ref_rgb)
        assert np.isfinite(stored_xyz).all()
    # what the examples exercised (pytest --hypothesis-show-statistics)
    event(f"adds that coarsened: {min(coarsening_adds, 2)}{'+' if coarsening_adds > 1 else ''}")
    event(f"out-of-range rows dropped: {out_of_range > 0}")
    event(f"non-finite rows dropped: {nonfinite > 0}")


# --- exact cases ---------------------------------------------------------------------------

def colours(n):
    return (np.arange(3 * n, dtype=np.uint8) + 1).reshape(n, 3)


def test_known_voxels_and_the_returned_count():
    m = VoxelMap(1.0, 100)
    xyz = np.array([[0.2, 0.2, 0.2], [0.7, 0.9, 0.1], [1.5, 0, 0], [-0.1, 0, 0],
                    [1.0, 1.0, 1.0], [-1.0, 0, 0]], np.float32)
    # voxels: (0,0,0) twice, (1,0,0), (-1,0,0) twice (-0.1 and -1.0 both floor to -1), (1,1,1)
    assert m.add(xyz, colours(6)) == 4
    got_xyz, got_rgb = m.arrays()
    assert np.array_equal(got_xyz, xyz[[0, 2, 3, 4]])  # the first point of each voxel
    assert np.array_equal(got_rgb, colours(6)[[0, 2, 3, 4]])
    again = np.array([[0.9, 0.9, 0.9], [2.5, 0, 0], [2.9, 0.5, 0.5]], np.float32)
    assert m.add(again, colours(3)) == 1  # (0,0,0) is taken; (2,0,0) new, once
    assert len(m) == m.num_points == 5 and m.coarsenings == 0 and m.voxel_size == 1.0
    assert np.array_equal(m.arrays()[0][-1], again[1])
    assert m.add(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint8)) == 0


def test_float64_input_is_stored_as_float32_and_keyed_from_what_is_stored():
    m = VoxelMap(0.1, 100)
    x = np.array([[0.3, 0.0, 0.0]])  # as float64, 0.3 / 0.1 = 2.9999999999999996: voxel 2
    assert m.add(x, colours(1)) == 1
    xyz, _ = m.arrays()
    assert xyz.dtype == np.float32 and xyz[0, 0] == np.float32(0.3)
    # stored as float32 0.30000001192...: voxel 3, the voxel of 0.35 (keys follow what is kept)
    assert m.add(np.array([[0.35, 0, 0]], np.float32), colours(1)) == 0


def test_non_finite_rows_are_ignored_and_counted():
    m = VoxelMap(1.0, 100)
    xyz = np.array([[0, 0, 0], [NAN, 0, 0], [0, INF, 0], [0, 0, -INF], [5, 5, 5]], np.float32)
    assert m.add(xyz, colours(5)) == 2
    assert m.dropped_nonfinite == 3 and m.dropped_out_of_range == 0
    assert np.array_equal(m.arrays()[1], colours(5)[[0, 4]])
    with np.errstate(over="raise"):  # float64 beyond float32 is inf once stored: ignored
        assert m.add(np.array([[1e39, 0, 0]]), colours(1)) == 0
    assert m.dropped_nonfinite == 4 and len(m) == 2


def test_points_outside_the_key_range_are_dropped_and_counted_not_wrapped():
    m = VoxelMap(1.0, 100)
    lim = float(INDEX_LIMIT)  # 2**20: indices in [-2**20, 2**20)
    xyz = np.array([[lim - 0.5, 0, 0], [-lim, 0, 0], [0, 0, lim - 0.5],
                    [lim, 0, 0], [0, -lim - 0.5, 0], [0, 0, 3e30]], np.float32)
    assert m.add(xyz, colours(6)) == 3
    assert m.dropped_out_of_range == 3 and m.dropped_nonfinite == 0
    assert np.array_equal(m.arrays()[0], xyz[:3])


def test_coarsening_doubles_the_voxel_and_keeps_the_first_point_of_each():
    m = VoxelMap(1.0, 8)
    corners = np.array([[x, y, z] for x in (0.5, 1.5) for y in (0.5, 1.5) for z in (0.5, 1.5)],
                       np.float32)  # 8 voxels of size 1 inside one voxel of size 2
    assert m.add(corners, colours(8)) == 8 and m.coarsenings == 0
    assert m.add(np.array([[2.5, 0.5, 0.5]], np.float32), colours(1)) == 1  # 9 > 8
    assert (m.coarsenings, m.voxel_size, m.initial_voxel_size) == (1, 2.0, 1.0)
    xyz, rgb = m.arrays()
    assert np.array_equal(xyz, [[0.5, 0.5, 0.5], [2.5, 0.5, 0.5]])
    assert np.array_equal(rgb, [colours(8)[0], colours(1)[0]])
    m.clear()
    assert (len(m), m.coarsenings, m.voxel_size, m.nbytes) == (0, 0, 1.0, 0)
    assert m.dropped_nonfinite == m.dropped_out_of_range == 0
    assert m.add(corners, colours(8)) == 8 and m.voxel_size == 1.0  # fine again


def test_a_batch_alone_larger_than_the_bound_coarsens_until_it_fits():
    m = VoxelMap(1.0, 8)
    xyz = np.zeros((100, 3), np.float32)
    xyz[:, 0] = np.arange(100)  # 100 voxels of size 1; 13 of size 8; 7 of size 16
    assert m.add(xyz, colours(100)) == 7
    assert (m.coarsenings, m.voxel_size) == (4, 16.0)
    assert np.array_equal(m.arrays()[0][:, 0], [0, 16, 32, 48, 64, 80, 96])
    # on both sides of the origin: 8 voxels at most at a large enough size, so it always fits
    m = VoxelMap(0.01, 8)
    corners = np.array([[x, y, z] for x in (-300, 300) for y in (-1, 1) for z in (-5, 5)],
                       np.float32)
    assert m.add(np.concatenate([corners, corners / 7]), colours(16)) == 8
    assert len(m) == 8 and np.array_equal(m.arrays()[0], corners)
    assert m.voxel_size == 0.01 * 2 ** 15  # the first size > 300: voxels -1 and 0 per axis


def test_arrays_are_copies():
    m = VoxelMap(1.0, 100)
    m.add(np.zeros((1, 3), np.float32), colours(1))
    xyz, rgb = m.arrays()
    xyz[:] = 7
    rgb[:] = 7
    assert np.array_equal(m.arrays()[0], [[0, 0, 0]]) and np.array_equal(m.arrays()[1],
                                                                          colours(1))


@pytest.mark.parametrize("voxel_size,max_points,match", [
    (0.0, 10, "voxel_size must be a finite number > 0"),
    (-0.1, 10, "voxel_size must be a finite number > 0"),
    (NAN, 10, "voxel_size must be a finite number > 0"),
    (INF, 10, "voxel_size must be a finite number > 0"),
    (True, 10, "voxel_size must be a finite number > 0"),
    ("5cm", 10, "voxel_size must be a number"),
    (None, 10, "voxel_size must be a number"),
    (0.1, 7, "max_points must be an integer >= 8"),
    (0.1, 0, "max_points must be an integer >= 8"),
    (0.1, 1e6, "max_points must be an integer >= 8"),
    (0.1, INF, "max_points must be an integer >= 8"),
    (0.1, True, "max_points must be an integer >= 8"),
])
def test_invalid_construction_is_refused(voxel_size, max_points, match):
    with pytest.raises(ValueError, match=match):
        VoxelMap(voxel_size, max_points)


@pytest.mark.parametrize("xyz,rgb,match", [
    (np.zeros(3, np.float32), np.zeros(3, np.uint8), r"xyz must have shape \(N, 3\), got \(3,\)"),
    (np.zeros((4, 2), np.float32), np.zeros((4, 2), np.uint8), r"xyz must have shape \(N, 3\)"),
    (np.zeros((4, 3), np.int32), np.zeros((4, 3), np.uint8), "xyz must be a float array, got "
                                                             "dtype int32"),
    (np.zeros((4, 3), np.float32), np.zeros((3, 3), np.uint8), r"rgb must have shape \(4, 3\) "
                                                               r"like xyz, got \(3, 3\)"),
    (np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32), "rgb must be uint8, got dtype "
                                                                 "float32"),
])
def test_invalid_adds_are_refused_and_change_nothing(xyz, rgb, match):
    m = VoxelMap(1.0, 100)
    m.add(np.ones((1, 3), np.float32), colours(1))
    with pytest.raises(ValueError, match=match):
        m.add(xyz, rgb)
    assert len(m) == 1 and m.dropped_nonfinite == 0 and np.array_equal(m.arrays()[0], [[1, 1, 1]])


# --- size --------------------------------------------------------------------------------

def surface_points(rng, n):
    """Points on a 40 m x 40 m floor and a 4 m high wall, like keyframe depth points."""
    xyz = rng.random((n, 3)) * [40, 40, 4]
    xyz[: n // 2, 2] = 0.0  # the floor
    xyz[n // 2:, 1] = 40.0  # the wall
    return xyz.astype(np.float32)


def test_a_500k_point_stream_stays_within_the_bound_and_its_memory_is_as_documented():
    rng = np.random.default_rng(0)
    bounded = VoxelMap(0.01, 100_000)
    unbounded = VoxelMap(1e-3, 1_000_000)  # 1 mm: nearly every point has a voxel of its own
    seen = []
    for _ in range(34):  # 34 keyframes of 15k points: 510k points
        xyz = surface_points(rng, 15_000)
        rgb = rng.integers(0, 256, (15_000, 3), dtype=np.uint8)
        bounded.add(xyz, rgb)
        unbounded.add(xyz, rgb)
        seen.append(xyz)
        assert len(bounded) <= 100_000 and bounded.capacity <= 100_000
    fine_voxels = len(np.unique(voxel_index(np.concatenate(seen), 1e-3), axis=0))
    # a 40 m x 40 m floor needs 250k voxels of 8 cm, 62.5k of 16 cm (+ 6k for the wall)
    assert bounded.coarsenings == 4 and bounded.voxel_size == 0.01 * 2 ** 4
    assert len(bounded) > 100_000 // 4  # a doubling is not more than it needs
    assert len(unbounded) == fine_voxels > 509_000 and unbounded.coarsenings == 0
    for m in (bounded, unbounded):
        assert len(m) <= m.capacity <= m.max_points
        assert m.nbytes == 15 * m.capacity + 8 * len(m) <= 23 * m.max_points
    assert unbounded.nbytes < 23 * 1_000_000  # 510k points: 15 MB of buffers + 4 MB of keys

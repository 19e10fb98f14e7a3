"""The one rigid-transform check (lingbot_ros/geometry/rigid.py): the deviation it measures,
the tolerances its callers state, the messages that name what is off, batches and labels."""
import numpy as np
import pytest

from lingbot_ros.geometry import check_rigid, is_rigid, rigid_error, tq_to_matrix


def random_poses(rng, n):
    q = rng.normal(size=(n, 4))
    return tq_to_matrix(rng.normal(size=(n, 3)), q / np.linalg.norm(q, axis=1, keepdims=True))


def stretched(T, e):
    """``T`` with its first rotation column scaled by (1 + e): |R^T R - I| = (1 + e)^2 - 1."""
    out = np.array(T, dtype=np.float64)
    out[:3, 0] *= 1.0 + e
    return out


def test_a_rigid_transform_deviates_by_rounding_only_and_a_batch_gives_one_value_each():
    poses = random_poses(np.random.default_rng(0), 50)
    err = rigid_error(poses)
    assert err.shape == (50,) and (err < 1e-14).all()
    assert isinstance(rigid_error(poses[0]), float)
    assert rigid_error(poses.reshape(5, 10, 4, 4)).shape == (5, 10)
    assert rigid_error(np.zeros((0, 4, 4))).shape == (0,)


@pytest.mark.parametrize("e", [1e-7, 3e-6, 2e-4, 0.05])
def test_the_deviation_is_the_largest_entry_of_rtr_minus_i(e):
    T = stretched(random_poses(np.random.default_rng(1), 1)[0], e)
    assert rigid_error(T) == pytest.approx((1.0 + e) ** 2 - 1.0, rel=1e-6)


def test_what_can_never_be_rigid_deviates_infinitely():
    T = random_poses(np.random.default_rng(2), 1)[0]
    mirror = T @ np.diag([1.0, 1.0, -1.0, 1.0])
    nan = T.copy()
    nan[0, 3] = np.nan
    row = T.copy()
    row[3, 2] = 1e-6
    batch = np.stack([T, mirror, nan, row])
    assert rigid_error(batch).tolist() == [pytest.approx(0.0, abs=1e-14), np.inf, np.inf, np.inf]
    assert rigid_error(row, last_row_tol=1e-5) < 1e-14  # the caller's last-row tolerance
    exact = T.copy()
    exact[3, 3] = 1.0 + 1e-15
    assert rigid_error(exact) < 1e-14 and rigid_error(exact, last_row_tol=0.0) == np.inf
    with pytest.raises(ValueError, match=r"\(\.\.\., 4, 4\)"):
        rigid_error(np.eye(3))


def test_check_rigid_passes_within_its_callers_tolerance_and_says_what_is_off():
    T = random_poses(np.random.default_rng(3), 1)[0]
    off = stretched(T, 2e-5)  # |R^T R - I| = 4e-5
    out = check_rigid(off, "T_a", tol=1e-4)
    assert out.dtype == np.float64 and np.array_equal(out, off) and out is not off
    out[0, 0] = 7.0  # a copy: the caller's array is never handed back
    assert off[0, 0] != 7.0
    with pytest.raises(ValueError, match=r"^T_a: not a rigid transform \(\|R\^T R - I\| = "
                                         r"4e-05 > 1e-05\)$"):
        check_rigid(off, "T_a", tol=1e-5)
    with pytest.raises(ValueError, match=r"^m: not a rigid transform \(det R = -1: not a "
                                         r"rotation\)$"):
        check_rigid(T @ np.diag([-1.0, 1.0, 1.0, 1.0]), "m", tol=1e-4)
    row = T.copy()
    row[3, 0] = 0.5
    with pytest.raises(ValueError, match=r"last row \[0\.5, 0\.0, 0\.0, 1\.0\], not \[0, 0, "
                                         r"0, 1\]"):
        check_rigid(row, "m", tol=1e-4)
    tiny = T.copy()
    tiny[3, 1] = 1e-12  # within the default 1e-9, not within an exact last row
    check_rigid(tiny, "m", tol=1e-4)
    with pytest.raises(ValueError, match="last row"):
        check_rigid(tiny, "m", tol=1e-4, last_row_tol=0.0)
    nan = T.copy()
    nan[1, 1] = np.inf
    with pytest.raises(ValueError, match=r"^m is not finite \(1 non-finite value\(s\)\)$"):
        check_rigid(nan, "m", tol=1e-4)


def test_check_rigid_takes_lists_and_refuses_other_shapes_and_tolerances():
    assert np.array_equal(check_rigid(np.eye(4).tolist(), "m", tol=0.0), np.eye(4))
    with pytest.raises(ValueError, match=r"^pose must have shape \(4, 4\), got \(3, 3\)$"):
        check_rigid(np.eye(3), "pose", tol=1e-4)
    with pytest.raises(ValueError, match=r"must have shape \(4, 4\), got \(2, 4, 4\)"):
        check_rigid(np.stack([np.eye(4)] * 2), "pose", tol=1e-4)  # one expected
    with pytest.raises(ValueError, match=r"must have shape \(N, 4, 4\), got \(4, 4\)"):
        check_rigid(np.eye(4), "poses", tol=1e-4, batch=True)
    with pytest.raises(ValueError, match="cannot read"):
        check_rigid("not a matrix", "pose", tol=1e-4)
    for bad in (-1.0, float("nan"), float("inf"), True, "1e-4"):
        with pytest.raises(ValueError, match="tol must be a finite number >= 0"):
            check_rigid(np.eye(4), "pose", tol=bad)


def test_a_batch_names_its_first_bad_matrix_by_label_or_index():
    poses = random_poses(np.random.default_rng(4), 6)
    assert check_rigid(poses, "poses", tol=1e-9, batch=True).shape == (6, 4, 4)
    assert check_rigid(np.zeros((0, 4, 4)), "poses", tol=1e-9, batch=True).shape == (0, 4, 4)
    poses[4] = stretched(poses[4], 0.01)
    poses[2, :3, :3] *= -1.0
    labels = [f"05.txt:{i + 1}" for i in range(6)]
    with pytest.raises(ValueError, match=r"^05\.txt:3: not a rigid transform \(det R"):
        check_rigid(poses, "poses", tol=1e-3, batch=True, labels=labels)
    with pytest.raises(ValueError, match=r"^poses\[2\]: not a rigid transform"):
        check_rigid(poses, "poses", tol=1e-3, batch=True)
    with pytest.raises(ValueError, match="6 labels"):
        check_rigid(poses[:5], "poses", tol=1e-3, batch=True, labels=labels)
    with pytest.raises(ValueError, match="labels name each matrix of a batch"):
        check_rigid(poses[0], "pose", tol=1e-3, labels=labels[:1])


def test_check_passes_exactly_what_the_error_and_the_predicate_call_rigid():
    rng = np.random.default_rng(5)
    poses = random_poses(rng, 200)
    for k, e in enumerate(rng.uniform(-3e-4, 3e-4, size=200)):
        poses[k] = stretched(poses[k], e)
    poses[::17, 3, 3] += 1e-6  # some last rows off
    for tol in (1e-5, 1e-4, 1e-3):
        err = rigid_error(poses)
        for T, e in zip(poses, err):
            try:
                check_rigid(T, "T", tol=tol)
                passed = True
            except ValueError:
                passed = False
            assert passed == (e <= tol) == is_rigid(T, tol=tol)


def test_is_rigid_never_raises():
    T = random_poses(np.random.default_rng(6), 1)[0]
    assert is_rigid(T, tol=1e-9) and is_rigid(T.tolist(), tol=1e-9)
    assert not is_rigid(2 * T, tol=1e-4)
    for junk in (None, "abc", object(), np.eye(3), np.stack([T, T]), [[1, 2], [3]]):
        assert not is_rigid(junk, tol=1e-4)
    row = T.copy()
    row[3, 0] = 5e-5
    assert not is_rigid(row, tol=1e-4) and is_rigid(row, tol=1e-4, last_row_tol=1e-4)

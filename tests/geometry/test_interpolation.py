"""The one pose interpolation (geometry/poses.py) gives the same bits as the three copies it
replaced (kept verbatim below) on the inputs each caller gives: ``interpolate_poses`` (the
synthetic ground truth), the node's TF tree (integer-nanosecond stamps) and the metric-scale
odometry (matrices and a float ratio)."""
import math
from typing import NamedTuple

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lingbot_ros.geometry import (as_transforms, interpolate_pose, interpolate_poses,
                                  interpolate_tq, matrix_to_tq, rigid_inverse,
                                  rotation_to_quaternion, rotation_vector, tq_to_matrix)
from lingbot_ros.ros.tf import tree as tf_tree
from lingbot_ros.scale import se3


# -- the three copies as they were (de283fd), verbatim -----------------------------------------
def old_slerp(q0, q1, ratio):
    dot = float(np.dot(q0, q1))
    if dot < 0.0:
        q1, dot = -q1, -dot
    if dot > 1.0 - 1e-10:
        q = q0 + ratio * (q1 - q0)
    else:
        theta = math.acos(min(dot, 1.0))
        s = math.sin(theta)
        q = (math.sin((1.0 - ratio) * theta) / s) * q0 + (math.sin(ratio * theta) / s) * q1
    return q / np.linalg.norm(q)


def old_interpolate_poses(stamps_ns, poses, query_ns):  # geometry/poses.py
    stamps = np.asarray(stamps_ns, np.int64)
    m = as_transforms(poses, "poses").reshape(-1, 4, 4)
    query = np.asarray(query_ns, np.int64)
    t, q = matrix_to_tq(m)
    out = np.empty((len(query), 4, 4))
    for k, s in enumerate(query):
        i = int(np.clip(np.searchsorted(stamps, s, side="right") - 1, 0, max(len(m) - 2, 0)))
        j = min(i + 1, len(m) - 1)
        span = int(stamps[j] - stamps[i])
        ratio = (int(s) - int(stamps[i])) / span if span else 0.0
        out[k] = tq_to_matrix(t[i] + ratio * (t[j] - t[i]), old_slerp(q[i], q[j], ratio))
    return out


class _Sample(NamedTuple):  # ros/tf/tree.py
    T: np.ndarray
    t: np.ndarray
    q: np.ndarray


def old_tf_evaluate(pick):  # ros/tf/tree.py:118
    if isinstance(pick, _Sample):
        return pick.T
    a, b, ratio = pick
    return tq_to_matrix(a.t + ratio * (b.t - a.t), old_slerp(a.q, b.q, ratio))


def old_so3_exp(w):  # scale/se3.py
    w = np.asarray(w, dtype=np.float64)
    angle = float(np.linalg.norm(w))
    k = np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])
    if angle < 1e-9:
        return np.eye(3) + k
    k /= angle
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)


def old_se3_interpolate_pose(t0, t1, alpha):  # scale/se3.py
    t0 = np.asarray(t0, dtype=np.float64)
    t1 = np.asarray(t1, dtype=np.float64)
    out = np.eye(4)
    r0 = t0[:3, :3]
    out[:3, :3] = r0 @ old_so3_exp(alpha * rotation_vector(r0.T @ t1[:3, :3]))
    out[:3, 3] = (1.0 - alpha) * t0[:3, 3] + alpha * t1[:3, 3]
    return out


# -- inputs ------------------------------------------------------------------------------------
_coord = st.floats(-50.0, 50.0, allow_nan=False, allow_infinity=False)
_rotvec = st.tuples(*[st.floats(-4.0, 4.0, allow_nan=False)] * 3)


@st.composite
def rigid(draw, near=None):
    """A rigid (4, 4); with ``near``, often a small rotation away from it (the nlerp
    branch of slerp, a rotation_vector near 0) or nearly opposite (near pi)."""
    w = np.array(draw(_rotvec))
    if near is not None:
        pick = draw(st.sampled_from(["any", "tiny", "same"]))
        if pick == "tiny":
            w = near[1] + w * 1e-7
        elif pick == "same":
            w = near[1].copy()
    T = np.eye(4)
    T[:3, :3] = old_so3_exp(w)
    T[:3, 3] = [draw(_coord) for _ in range(3)]
    return T, w


@st.composite
def pose_pair(draw):
    a = draw(rigid())
    b = draw(rigid(near=a))
    return a[0], b[0]


_ratio = st.floats(0.0, 1.0, allow_nan=False)


# -- bit identity ------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.lists(rigid(), min_size=1, max_size=6),
       st.lists(st.integers(1, 10**12), min_size=5, max_size=5, unique=True),
       st.integers(0, 2**62), st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8))
def test_interpolate_poses_same_bits_as_before(samples, gaps, t0, fractions):
    poses = np.stack([p for p, _ in samples])
    stamps = [t0]
    for g in gaps[:len(poses) - 1]:
        stamps.append(stamps[-1] + g)
    query = [stamps[0] + int(f * (stamps[-1] - stamps[0])) for f in fractions] + stamps
    got = interpolate_poses(stamps, poses, query)
    assert np.array_equal(got, old_interpolate_poses(stamps, poses, query))


def _tree_sample(T):
    m = np.array(T, dtype=np.float64)
    m[3] = [0.0, 0.0, 0.0, 1.0]
    m.flags.writeable = False
    return _Sample(m, m[:3, 3].copy(), rotation_to_quaternion(m[:3, :3]))


@settings(max_examples=300, deadline=None)
@given(pose_pair(), st.integers(0, 2**62), st.integers(2, 10**11), st.floats(0.0, 1.0))
def test_tf_tree_same_bits_as_before(pair, s0, span, fraction):
    """As the tree stores its samples and computes its ratio from int ns stamps; once at
    ``_evaluate`` and once through a lookup on a real TransformTree."""
    a, b = (_tree_sample(T) for T in pair)
    s1 = s0 + span
    stamp = s0 + 1 + int(fraction * (span - 2))
    ratio = (stamp - s0) / (s1 - s0)
    old = old_tf_evaluate((a, b, ratio))
    assert np.array_equal(tf_tree._evaluate((tf_tree._Sample(*a), tf_tree._Sample(*b), ratio)),
                          old)
    tree = tf_tree.TransformTree(cache_s=1e9)
    tree.set_transform("odom", "base", pair[0], s0, static=False)
    tree.set_transform("odom", "base", pair[1], s1, static=False)
    expected = rigid_inverse(np.eye(4)) @ (np.eye(4) @ old)
    assert np.array_equal(tree.lookup("odom", "base", stamp), expected)


@settings(max_examples=300, deadline=None)
@given(pose_pair(), _ratio)
def test_scale_odometry_interpolation_same_bits_as_before(pair, alpha):
    T0, T1 = pair
    old = old_se3_interpolate_pose(T0, T1, alpha)
    assert se3.interpolate_pose is interpolate_pose
    assert np.array_equal(interpolate_pose(T0, T1, alpha), old)


@settings(max_examples=200, deadline=None)
@given(pose_pair(), _ratio)
def test_the_two_arithmetic_forms_give_the_same_pose(pair, ratio):
    """``interpolate_pose`` (matrices, geodesic) and ``interpolate_tq`` (t, q, slerp) are
    the same interpolation, not the same bits (why both are kept: poses.py)."""
    T0, T1 = pair
    (t0, q0), (t1, q1) = matrix_to_tq(T0), matrix_to_tq(T1)
    np.testing.assert_allclose(interpolate_pose(T0, T1, ratio),
                               interpolate_tq(t0, q0, t1, q1, ratio), atol=1e-9)

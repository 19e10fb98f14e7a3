"""Pose conventions: the model's OpenCV c2w -> ROS frames (REP-103/105), SE(3), quaternions.

Frames (see docs/session.md):

* **optical** -- OpenCV / ROS ``*_optical_frame``: x right, y down, z forward.
* **body** -- REP-103 camera body (``camera_link``): x forward, y left, z up.
* **model world** -- the model's c2w poses map optical-frame points into the world of the
  stream, which is the *first frame's optical frame* (``c2w[0] ≈ I``).
* **map** -- here the *first frame's body frame*, so z is up in ``map`` when the camera
  started level: a bare camera's map. (On a robot the node's map is base_link at the first
  frame instead: ``lingbot_ros/ros/tf/frame_chain.py`` composes the robot's extrinsic from TF.)

``T_a_b`` is the pose of frame b in frame a (maps b-coordinates to a-coordinates). With
``T_body_optical`` the fixed mount of the optical frame in the body frame:

    T_map_optical_k = T_body_optical @ c2w_k
    T_map_body_k    = T_body_optical @ c2w_k @ T_body_optical^-1

A real mount (``base_link -> camera_optical_frame`` from TF) can be passed as
``T_body_optical``; its translation is then applied in the model's (scale-free) units.

Everything is float64 numpy; quaternions are (x, y, z, w), scalar last, as in ROS and TUM
(TUM files: :mod:`.tum`).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["R_BODY_OPTICAL", "T_BODY_OPTICAL", "T_OPTICAL_BODY", "as_transforms", "c2w_to_map",
           "rigid_inverse", "rotation_to_quaternion", "quaternion_to_rotation", "matrix_to_tq",
           "tq_to_matrix", "slerp", "interpolate_tq", "interpolate_poses", "interpolate_pose",
           "rotation_angle", "rotation_vector", "rotation_exp"]

# Columns are the optical axes expressed in the body frame: x_opt = -y_body (right),
# y_opt = -z_body (down), z_opt = +x_body (forward). Equals RPY (-pi/2, 0, -pi/2), the
# standard camera_link -> camera_optical_frame rotation.
R_BODY_OPTICAL = np.array([[0.0, 0.0, 1.0],
                           [-1.0, 0.0, 0.0],
                           [0.0, -1.0, 0.0]])
T_BODY_OPTICAL = np.eye(4)
T_BODY_OPTICAL[:3, :3] = R_BODY_OPTICAL
T_OPTICAL_BODY = np.eye(4)
T_OPTICAL_BODY[:3, :3] = R_BODY_OPTICAL.T
for _a in (R_BODY_OPTICAL, T_BODY_OPTICAL, T_OPTICAL_BODY):
    _a.flags.writeable = False


def as_transforms(x, name: str) -> np.ndarray:
    """``x`` as float64 transforms (..., 4, 4); ValueError naming ``name`` otherwise."""
    try:  # torch CPU tensors convert; CUDA tensors must be moved by the caller (.cpu())
        m = np.asarray(x, dtype=np.float64)
    except TypeError as err:
        raise ValueError(f"{name}: cannot convert {type(x).__name__} to numpy "
                         f"(move tensors to the CPU first): {err}") from None
    if m.shape[-2:] != (4, 4):
        raise ValueError(f"{name} must have shape (..., 4, 4), got {m.shape}")
    return m


def rigid_inverse(t: np.ndarray) -> np.ndarray:
    """Inverse of rigid transforms (..., 4, 4): ``[R | p]^-1 = [R^T | -R^T p]``, exact."""
    t = np.asarray(t, dtype=np.float64)
    out = np.zeros_like(t)
    rt = np.swapaxes(t[..., :3, :3], -1, -2)
    out[..., :3, :3] = rt
    out[..., :3, 3] = -(rt @ t[..., :3, 3:4])[..., 0]
    out[..., 3, 3] = 1.0
    return out


def c2w_to_map(c2w, frame: str = "body", T_body_optical=T_BODY_OPTICAL,
               origin_c2w=None) -> np.ndarray:
    """Model c2w (..., 4, 4) -> pose of the camera ``frame`` ('body' or 'optical') in ``map``.

    ``origin_c2w``: if given, the model pose that defines the map origin (e.g. the first
    frame's prediction, when it is not exactly the identity); default: the model world is
    taken as the first camera's optical frame as is.
    """
    c = as_transforms(c2w, "c2w")
    if origin_c2w is not None:
        c = rigid_inverse(as_transforms(origin_c2w, "origin_c2w")) @ c
    bo = as_transforms(T_body_optical, "T_body_optical")
    if frame == "optical":
        return bo @ c
    if frame == "body":
        return bo @ c @ rigid_inverse(bo)
    raise ValueError(f"frame must be 'body' or 'optical', got {frame!r}")


def rotation_to_quaternion(R) -> np.ndarray:
    """(..., 3, 3) rotation -> (..., 4) unit quaternion xyzw with w >= 0 (Shepperd's method,
    stable for every rotation; a slightly non-orthonormal input gives the nearest unit q)."""
    r = np.asarray(R, dtype=np.float64)
    if r.shape[-2:] != (3, 3):
        raise ValueError(f"R must have shape (..., 3, 3), got {r.shape}")
    shape = r.shape[:-2]
    r = r.reshape(-1, 3, 3)
    tr = np.trace(r, axis1=1, axis2=2)
    diag = np.diagonal(r, axis1=1, axis2=2)
    # four candidate (unnormalised) quaternions; pick the best conditioned per matrix
    cands = np.stack([
        np.stack([r[:, 2, 1] - r[:, 1, 2], r[:, 0, 2] - r[:, 2, 0], r[:, 1, 0] - r[:, 0, 1],
                  1 + tr], -1),
        np.stack([1 + 2 * diag[:, 0] - tr, r[:, 0, 1] + r[:, 1, 0], r[:, 0, 2] + r[:, 2, 0],
                  r[:, 2, 1] - r[:, 1, 2]], -1),
        np.stack([r[:, 0, 1] + r[:, 1, 0], 1 + 2 * diag[:, 1] - tr, r[:, 1, 2] + r[:, 2, 1],
                  r[:, 0, 2] - r[:, 2, 0]], -1),
        np.stack([r[:, 0, 2] + r[:, 2, 0], r[:, 1, 2] + r[:, 2, 1], 1 + 2 * diag[:, 2] - tr,
                  r[:, 1, 0] - r[:, 0, 1]], -1),
    ], 1)  # (n, 4 candidates, xyzw)
    pick = np.argmax(np.concatenate([tr[:, None], diag], 1), 1)
    q = cands[np.arange(len(r)), pick]
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    q = np.where(q[:, 3:4] < 0, -q, q)
    return q.reshape(shape + (4,))


def quaternion_to_rotation(q) -> np.ndarray:
    """(..., 4) xyzw quaternion (any non-zero norm) -> (..., 3, 3) rotation."""
    q = np.asarray(q, dtype=np.float64)
    if q.shape[-1] != 4:
        raise ValueError(f"q must have shape (..., 4), got {q.shape}")
    n = np.linalg.norm(q, axis=-1, keepdims=True)
    if not np.all(n > 0):
        raise ValueError("zero quaternion")
    x, y, z, w = np.moveaxis(q / n, -1, 0)
    return np.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
        2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
        2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y),
    ], -1).reshape(q.shape[:-1] + (3, 3))


def matrix_to_tq(T) -> tuple[np.ndarray, np.ndarray]:
    """(..., 4, 4) rigid transform -> (translation (..., 3), quaternion xyzw (..., 4))."""
    m = as_transforms(T, "T")
    return m[..., :3, 3].copy(), rotation_to_quaternion(m[..., :3, :3])


def tq_to_matrix(t, q) -> np.ndarray:
    """(translation (..., 3), quaternion xyzw (..., 4)) -> (..., 4, 4)."""
    t = np.asarray(t, dtype=np.float64)
    r = quaternion_to_rotation(q)
    if t.shape[-1] != 3:
        raise ValueError(f"t must have shape (..., 3), got {t.shape}")
    shape = np.broadcast_shapes(t.shape[:-1], r.shape[:-2])
    m = np.zeros(shape + (4, 4))
    m[..., :3, :3] = r
    m[..., :3, 3] = t
    m[..., 3, 3] = 1.0
    return m


def slerp(q0: np.ndarray, q1: np.ndarray, ratio: float) -> np.ndarray:
    """Unit quaternion (xyzw) a ``ratio`` of the way from ``q0`` to ``q1`` on the shortest arc."""
    dot = float(np.dot(q0, q1))
    if dot < 0.0:  # q and -q are the same rotation: take the nearer one
        q1, dot = -q1, -dot
    if dot > 1.0 - 1e-10:  # within ~1e-5 rad: normalised lerp (exact to ~1e-15; no 0 / 0)
        q = q0 + ratio * (q1 - q0)
    else:
        theta = math.acos(min(dot, 1.0))
        s = math.sin(theta)
        q = (math.sin((1.0 - ratio) * theta) / s) * q0 + (math.sin(ratio * theta) / s) * q1
    return q / np.linalg.norm(q)


def interpolate_tq(t0: np.ndarray, q0: np.ndarray, t1: np.ndarray, q1: np.ndarray,
                   ratio: float) -> np.ndarray:
    """The pose interpolation: (4, 4) pose a ``ratio`` of the way from (``t0``, ``q0``) to
    (``t1``, ``q1``) (translations (3,), unit quaternions xyzw (4,)): translation linearly,
    rotation by :func:`slerp`. ``interpolate_poses`` and the node's TF tree use it; the
    ratio comes from integer-nanosecond stamps (``(s - s0) / (s1 - s0)``, Python ints)."""
    return tq_to_matrix(t0 + ratio * (t1 - t0), slerp(q0, q1, ratio))


def interpolate_poses(stamps_ns, poses, query_ns) -> np.ndarray:
    """Poses (N, 4, 4) at increasing ``stamps_ns`` sampled at ``query_ns`` (within their
    range): translation linearly, rotation by slerp between the two neighbours."""
    stamps = np.asarray(stamps_ns, np.int64)
    m = as_transforms(poses, "poses").reshape(-1, 4, 4)
    query = np.asarray(query_ns, np.int64)
    if len(stamps) != len(m) or not len(m):
        raise ValueError(f"{len(stamps)} stamps for {len(m)} poses")
    if len(query) and (query.min() < stamps[0] or query.max() > stamps[-1]):
        raise ValueError("query stamps outside the poses' range")
    t, q = matrix_to_tq(m)
    out = np.empty((len(query), 4, 4))
    for k, s in enumerate(query):
        i = int(np.clip(np.searchsorted(stamps, s, side="right") - 1, 0, max(len(m) - 2, 0)))
        j = min(i + 1, len(m) - 1)
        span = int(stamps[j] - stamps[i])
        ratio = (int(s) - int(stamps[i])) / span if span else 0.0
        out[k] = interpolate_tq(t[i], q[i], t[j], q[j], ratio)
    return out


def interpolate_pose(T0, T1, ratio: float) -> np.ndarray:
    """(4, 4) pose a ``ratio`` of the way from the rigid ``T0`` to ``T1`` (4, 4), taking
    matrices: translation ``(1 - ratio) t0 + ratio t1``, rotation
    ``R0 exp(ratio log(R0^T R1))`` (the geodesic, constant angular rate).

    The same pose as :func:`interpolate_tq` on the matrices' (t, q) to ~1e-12, but not the
    same bits: the metric-scale odometry (``scale/``) uses this arithmetic, and its scale
    estimates (so its published metres) are kept bit for bit. Use :func:`interpolate_tq`
    in new code."""
    t0 = np.asarray(T0, dtype=np.float64)
    t1 = np.asarray(T1, dtype=np.float64)
    out = np.eye(4)
    r0 = t0[:3, :3]
    out[:3, :3] = r0 @ rotation_exp(ratio * rotation_vector(r0.T @ t1[:3, :3]))
    out[:3, 3] = (1.0 - ratio) * t0[:3, 3] + ratio * t1[:3, 3]
    return out


def rotation_angle(r) -> np.ndarray:
    """Angle in radians of (..., 3, 3) rotations, accurate for small and large angles
    (``atan2(|vee(R - R^T)| / 2, (tr R - 1) / 2)``). The one rotation-angle helper."""
    r = np.asarray(r, dtype=np.float64)
    w = np.stack([r[..., 2, 1] - r[..., 1, 2], r[..., 0, 2] - r[..., 2, 0],
                  r[..., 1, 0] - r[..., 0, 1]], -1)
    cos = (np.trace(r, axis1=-2, axis2=-1) - 1.0) / 2.0
    return np.arctan2(np.linalg.norm(w, axis=-1) / 2.0, cos)


def rotation_vector(r) -> np.ndarray:
    """(3, 3) rotation -> rotation vector (3,): axis * angle, angle in [0, pi] (SO(3) log)."""
    r = np.asarray(r, dtype=np.float64)
    w = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]])
    angle = float(rotation_angle(r))
    if angle < 1e-7:
        return 0.5 * w
    if np.pi - angle < 1e-4:  # near pi: the axis from the symmetric part
        b = (r + np.eye(3)) / 2.0
        axis = b[int(np.argmax(np.diag(b)))]
        axis = axis / np.linalg.norm(axis)
        return (-axis if axis @ w < 0 else axis) * angle
    return w / np.linalg.norm(w) * angle



def rotation_exp(w) -> np.ndarray:
    """Rotation vector (3,) -> rotation matrix (3, 3) (Rodrigues; SO(3) exp, the inverse of
    :func:`rotation_vector`)."""
    w = np.asarray(w, dtype=np.float64)
    angle = float(np.linalg.norm(w))
    k = np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])
    if angle < 1e-9:
        return np.eye(3) + k
    k /= angle
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)

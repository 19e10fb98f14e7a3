"""FrameResult / session info -> ROS messages. Pure builders: no node, no publishing."""
from __future__ import annotations

import math

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose, PoseStamped, Quaternion, TransformStamped, Vector3
from nav_msgs.msg import Odometry
from sensor_msgs.msg import CameraInfo, Image, PointCloud2, PointField
from std_msgs.msg import Header

from ...geometry import rotation_to_quaternion

_CACHE_FIELDS_INT = ("frames_seen", "frames_committed", "frames_rolled_back", "frames_cached",
                     "scale_frames", "window_frames", "special_frames", "special_tokens",
                     "patch_pages_used", "patch_pages_total", "special_pages_used",
                     "special_pages_total", "page_size", "tokens_visible", "bytes_used",
                     "bytes_reserved")


def stamp_to_ns(stamp: Time) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def ns_to_stamp(ns: int) -> Time:
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def pose_of(T: np.ndarray) -> Pose:
    q = rotation_to_quaternion(T[:3, :3])  # xyzw
    pose = Pose()
    pose.position.x, pose.position.y, pose.position.z = (float(x) for x in T[:3, 3])
    pose.orientation = Quaternion(x=float(q[0]), y=float(q[1]), z=float(q[2]), w=float(q[3]))
    return pose


def pose_stamped(T: np.ndarray, stamp: Time, frame_id: str) -> PoseStamped:
    return PoseStamped(header=Header(stamp=stamp, frame_id=frame_id), pose=pose_of(T))


def odometry(T: np.ndarray, stamp: Time, frame_id: str, child_frame_id: str,
             linear: np.ndarray, angular: np.ndarray, pose_variances,
             twist_variances) -> Odometry:
    """Pose in ``frame_id``; twist (``linear``, ``angular``) in ``child_frame_id``, as
    nav_msgs/Odometry defines it. Covariances: ``(first3, last3)`` constant diagonals
    (x y z, roll pitch yaw), or a full row-major 6x6 (36 values, ``scaled_covariance``)."""
    msg = Odometry(header=Header(stamp=stamp, frame_id=frame_id), child_frame_id=child_frame_id)
    msg.pose.pose = pose_of(T)
    msg.pose.covariance = _covariance6(pose_variances)
    msg.twist.twist.linear = Vector3(x=float(linear[0]), y=float(linear[1]), z=float(linear[2]))
    msg.twist.twist.angular = Vector3(x=float(angular[0]), y=float(angular[1]),
                                      z=float(angular[2]))
    msg.twist.covariance = _covariance6(twist_variances)
    return msg


def _covariance6(cov) -> np.ndarray:
    if len(cov) == 2:
        return _diagonal6(*cov)
    return np.asarray(cov, dtype=np.float64).reshape(36)


def scaled_covariance(first3: float, last3: float, sigma_log: float,
                      vector: np.ndarray) -> np.ndarray:
    """A 6x6 covariance (row-major, 36) of a metric output: the configured diagonal (``first3``
    on x y z, in m^2 or (m/s)^2; ``last3`` on the rotations) plus the scale's own uncertainty
    along ``vector`` (a position or a velocity, in metres): a relative error ``sigma_log`` of
    the scale moves it by ``sigma_log * vector``, so ``sigma_log^2 * v v^T``."""
    cov = np.diag([first3] * 3 + [last3] * 3).astype(np.float64)
    if math.isfinite(sigma_log) and sigma_log > 0:
        v = np.asarray(vector, dtype=np.float64).reshape(3)
        cov[:3, :3] += sigma_log ** 2 * np.outer(v, v)
    return cov.reshape(36)


def _diagonal6(first3: float, last3: float) -> np.ndarray:
    """Row-major 6x6 covariance with ``first3`` on x y z and ``last3`` on the rotations."""
    return np.diag([first3] * 3 + [last3] * 3).astype(np.float64).reshape(36)


def depth_image(depth: np.ndarray, stamp: Time, frame_id: str) -> Image:
    """(H, W) depth -> 32FC1 Image (REP-118: float metres once the scale is applied, else the
    model's units; a non-finite value is "no depth")."""
    h, w = depth.shape
    return Image(header=Header(stamp=stamp, frame_id=frame_id), height=h, width=w,
                 encoding="32FC1", is_bigendian=0, step=4 * w,
                 data=np.ascontiguousarray(depth, dtype="<f4").tobytes())


def camera_info_msg(K: np.ndarray, width: int, height: int, stamp: Time,
                    frame_id: str) -> CameraInfo:
    """Pinhole intrinsics ``K`` (3, 3) of a ``width`` x ``height`` image, no distortion (the
    model predicts an undistorted pinhole camera), as the projection ``P = [K | 0]``."""
    k = [float(v) for v in np.asarray(K, float).reshape(9)]
    return CameraInfo(header=Header(stamp=stamp, frame_id=frame_id), width=int(width),
                      height=int(height), distortion_model="plumb_bob", d=[0.0] * 5, k=k,
                      r=[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
                      p=k[0:3] + [0.0] + k[3:6] + [0.0] + k[6:9] + [0.0])


def transform(T: np.ndarray, stamp: Time, parent: str, child: str) -> TransformStamped:
    msg = TransformStamped(header=Header(stamp=stamp, frame_id=parent), child_frame_id=child)
    p = pose_of(T)
    msg.transform.translation = Vector3(x=p.position.x, y=p.position.y, z=p.position.z)
    msg.transform.rotation = p.orientation
    return msg


def point_cloud(xyz: np.ndarray, rgb: np.ndarray, stamp: Time, frame_id: str) -> PointCloud2:
    """x, y, z float32 and rgb packed in a float32 (the PCL / RViz convention)."""
    n = len(xyz)
    rec = np.empty(n, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("rgb", "<u4")])
    rec["x"], rec["y"], rec["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    rgb = rgb.astype(np.uint32)
    rec["rgb"] = (rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2]
    fields = [PointField(name=name, offset=4 * i, datatype=PointField.FLOAT32, count=1)
              for i, name in enumerate(("x", "y", "z", "rgb"))]
    return PointCloud2(header=Header(stamp=stamp, frame_id=frame_id), height=1, width=n,
                       fields=fields, is_bigendian=False, point_step=16, row_step=16 * n,
                       data=rec.tobytes(), is_dense=True)


def cache_info(msg_type, info, stamp: Time):
    """``lingbot_ros_interfaces/CacheInfo`` from a ``KVCacheInfo`` (``SessionInfo``'s
    ``stream.cache``)."""
    msg = msg_type(stamp=stamp)
    for name in _CACHE_FIELDS_INT:
        setattr(msg, name, int(getattr(info, name)))
    bound = info.max_special_frames
    msg.max_special_frames = -1 if bound is None else int(bound)
    return msg

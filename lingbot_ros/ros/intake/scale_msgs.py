"""The node's scale inputs as the ROS-free ``ScaleStream`` (scale/stream.py) takes them.

The stream's scale (the ``scale.*`` parameters) is owned by :class:`~lingbot_ros.scale.ScaleStream`:
estimator, source (from the one registry), lock, segment and snapshot. This module only adapts
messages and TF to it: an ``aligned_depth`` Image -> (stamp ns, array, encoding)
(:func:`depth_msg_input`, decoded by the one raw-image decoder, ``image_decode.decode_depth``), a nav_msgs/Odometry -> (stamp ns, T_odom_base)
(:func:`odometry_msg_pose`), and the TF tree's lookups -> lookups that raise the stream's
:class:`~lingbot_ros.scale.LookupMissed` (:func:`tf_lookup`). The worker feeds the stream each
finished frame (``on_frame``); the executor pushes sensor data (``push_depth``,
``push_odometry``) and reads snapshots (see docs/node.md, "Scale").
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

from ...image_decode import decode_depth
from ...scale import LookupMissed
from ..tf.tree import ExtrapolationError, TransformError

__all__ = ["depth_msg_input", "odometry_msg_pose", "tf_lookup",
           "SOURCES_FOR_A_ROBOT"]

# What the activation warning names for a robot whose outputs stay in model units.
SOURCES_FOR_A_ROBOT = ("depth (an RGB-D camera's aligned depth on 'aligned_depth')",
                       "odometry (wheel/VIO odometry on 'odom_in', or odom -> base on TF)",
                       "camera_height (a level floor in view, the camera's height)",
                       "fixed (a calibrated scale.factor)")


def odometry_msg_pose(msg) -> tuple[int, np.ndarray]:
    """nav_msgs/Odometry -> (stamp in ns, T_odom_base 4x4). A quaternion of zero length (or
    NaN) gives a NaN rotation, which the source rejects and counts (``non_finite``): it is no
    rotation, and taking it as the identity would corrupt the fit silently."""
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    x, y, z, w = q.x, q.y, q.z, q.w
    n = math.sqrt(x * x + y * y + z * z + w * w)
    n = n if n > 1e-9 else math.nan
    x, y, z, w = x / n, y / n, z / n, w / n
    T = np.eye(4)
    T[:3, :3] = [[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                 [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                 [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]]
    T[:3, 3] = [p.x, p.y, p.z]
    return _stamp_ns(msg.header.stamp), T


def depth_msg_input(msg) -> tuple[int, np.ndarray, str]:
    """An ``aligned_depth`` Image -> ``ScaleStream.push_depth``'s (stamp ns, array,
    encoding). ``ImageRejected`` (image_decode's reasons: unknown_encoding, bad_step,
    truncated, zero_size) for a depth image that cannot be read: the caller counts it."""
    image, encoding = decode_depth(msg)
    return _stamp_ns(msg.header.stamp), image, encoding


def tf_lookup(lookup: Optional[Callable[[int], np.ndarray]]):
    """A TF lookup (``RobotFrames``' ``stamp_ns -> 4x4``, raising the tree's
    ``TransformError``) as the stream takes it: raising ``LookupMissed``, ``retry`` unless
    the stamp is older than the tree holds (an ``ExtrapolationError`` into the past: it
    will never be answered). None stays None."""
    if lookup is None:
        return None

    def adapted(stamp_ns: int) -> np.ndarray:
        try:
            return lookup(stamp_ns)
        except ExtrapolationError as exc:
            raise LookupMissed(str(exc), retry=exc.direction == "future") from None
        except TransformError as exc:  # no such frame (yet)
            raise LookupMissed(str(exc)) from None
    return adapted


def _stamp_ns(stamp) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)

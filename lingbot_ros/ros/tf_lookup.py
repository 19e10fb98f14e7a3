"""TF lookups for tf.mode map_to_odom (needs tf2_ros, i.e. a ROS install)."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ..session import tq_to_matrix

Lookup = Callable[[str, str, object], Optional[np.ndarray]]


def make_tf_lookup(node) -> Optional[Lookup]:
    """``lookup(parent, child, stamp) -> 4x4 or None`` backed by a tf2 buffer on ``node``.

    Returns None (and logs why) when tf2_ros is not importable: pip-only environments have
    no tf2 wheels, so map->odom cannot be computed there.
    """
    try:
        import tf2_ros
        from rclpy.time import Time
    except ImportError:
        node.get_logger().error(
            "tf.mode 'map_to_odom' needs tf2_ros (a ROS install); it is not importable here. "
            "Use tf.mode 'map_to_camera' or run in a ROS environment.")
        return None
    buffer = tf2_ros.Buffer()
    node._tf_listener = tf2_ros.TransformListener(buffer, node)  # kept alive by the node

    def lookup(parent: str, child: str, stamp) -> Optional[np.ndarray]:
        try:
            t = buffer.lookup_transform(parent, child, Time.from_msg(stamp)).transform
        except Exception:  # not available at that stamp: the caller counts it
            return None
        return tq_to_matrix([t.translation.x, t.translation.y, t.translation.z],
                            [t.rotation.x, t.rotation.y, t.rotation.z, t.rotation.w])
    return lookup

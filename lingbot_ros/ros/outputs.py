"""Outputs: the node's publishers, and how one FrameResult becomes messages on them."""
from __future__ import annotations

import time
from collections import deque
from typing import Optional

import numpy as np
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry, Path
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Header
from tf2_msgs.msg import TFMessage

from ..config import NodeConfig
from ..session import R_BODY_OPTICAL, FrameResult, frame_points
from .messages import camera_in_map, ns_to_stamp, odometry, point_cloud, pose_stamped, transform

PATH_MIN_PERIOD_S = 0.2  # a long Path is heavy: publish it at most 5 times a second


class Outputs:
    def __init__(self, node, config: NodeConfig, tf_lookup=None) -> None:
        """Create the publishers. ``tf_lookup(parent, child, stamp) -> 4x4`` for map->odom."""
        self.config = config
        self._tf_lookup = tf_lookup
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.pose = node.create_publisher(PoseStamped, "~/pose", 10)
        self.odometry = node.create_publisher(Odometry, "~/odometry", 10)
        self.path = node.create_publisher(Path, "~/path", latched)
        self.points = (node.create_publisher(PointCloud2, "~/points", 2)
                       if config.publish_points else None)
        self.tf = _tf_publisher(node)
        self._publishers = [p for p in (self.pose, self.odometry, self.path, self.points, self.tf)
                            if p is not None]
        self._node = node
        self._path_poses: deque = deque(maxlen=config.path_max_poses or None)
        self._last_path = 0.0
        self._path_pending = False  # poses appended since the last Path message
        self._last_points = 0.0
        self.num_tf_failures = 0

    def publish(self, result: FrameResult, camera_frame: str) -> None:
        cfg = self.config
        stamp = ns_to_stamp(result.stamp_ns)
        T = camera_in_map(result.c2w, cfg.camera_is_optical)
        pose = pose_stamped(T, stamp, cfg.map_frame)
        self.pose.publish(pose)
        self.odometry.publish(odometry(T, stamp, cfg.map_frame, camera_frame))
        self._path_poses.append(pose)
        now = time.monotonic()
        if now - self._last_path >= PATH_MIN_PERIOD_S:
            self.publish_path(stamp)
        else:
            self._path_pending = True  # sent by flush_path when the stream pauses or ends
        if cfg.tf_mode == "map_to_camera":
            self.tf.publish(TFMessage(transforms=[transform(T, stamp, cfg.map_frame,
                                                            camera_frame)]))
        elif cfg.tf_mode == "map_to_odom":
            self._publish_map_to_odom(T, stamp, camera_frame)
        if (self.points is not None and result.keyframe and result.depth is not None
                and now - self._last_points >= 1.0 / cfg.points_rate_hz):
            xyz, rgb = frame_points(result, cfg.points_stride, cfg.points_min_conf)
            xyz = xyz @ R_BODY_OPTICAL.T  # session world (first optical frame) -> map (body)
            self.points.publish(point_cloud(xyz.astype(np.float32), rgb, stamp, cfg.map_frame))
            self._last_points = now

    def publish_path(self, stamp=None) -> None:
        header = Header(frame_id=self.config.map_frame,
                        stamp=stamp if stamp is not None else self._node.get_clock().now().to_msg())
        self.path.publish(Path(header=header, poses=list(self._path_poses)))
        self._last_path = time.monotonic()
        self._path_pending = False

    def flush_path(self) -> None:
        """Publish the Path if throttling held back its latest poses (the worker calls this
        when idle, so the last Path of a stream always holds every pose)."""
        if self._path_pending and self._path_poses:
            self.publish_path(self._path_poses[-1].header.stamp)

    def clear(self) -> None:
        """Forget the path (reset) and publish it empty so late joiners see the restart."""
        self._path_poses.clear()
        self.publish_path()

    def destroy(self) -> None:
        for pub in self._publishers:
            self._node.destroy_publisher(pub)
        self._publishers = []

    def _publish_map_to_odom(self, T_map_cam: np.ndarray, stamp, camera_frame: str) -> None:
        """map->odom = map->camera * (odom->camera)^-1, with odom->camera from TF at ``stamp``."""
        T_odom_cam: Optional[np.ndarray] = self._tf_lookup(self.config.odom_frame, camera_frame,
                                                           stamp)
        if T_odom_cam is None:
            self.num_tf_failures += 1
            return
        T_map_odom = T_map_cam @ np.linalg.inv(T_odom_cam)
        self.tf.publish(TFMessage(transforms=[transform(T_map_odom, stamp, self.config.map_frame,
                                                        self.config.odom_frame)]))


def _tf_publisher(node):
    """The /tf publisher: tf2_ros's broadcaster where importable (a ROS install), else a plain
    publisher of the same type and QoS (pip-only environments build tf2_msgs themselves)."""
    try:
        from tf2_ros import TransformBroadcaster
    except ImportError:
        return node.create_publisher(TFMessage, "/tf", 100)
    return TransformBroadcaster(node).pub_tf

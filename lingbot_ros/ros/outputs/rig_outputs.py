"""FusedOutputs: a rig's one robot pose out (``RigFusion``'s fused base pose, in metres).

Per fused pose (the rig's worker thread): ``odom -> base`` on /tf (with
``tf.publish_odom_to_base``) and ``map -> odom`` as the identity (with
``tf.publish_map_to_odom``), ``~/odometry`` (odom, with a twist from the previous fused
pose), ``~/pose`` and ``~/path`` (map). The cameras' own outputs go under ``~/<camera>/``
(``Outputs(camera=...)``), without TF. A rig whose odometry comes from another node
(``tf.publish_odom_to_base`` false) gets no map -> odom correction here (v1): the fused
pose is on ~/pose and ~/path only.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from tf2_msgs.msg import TFMessage

from ..params.node_config import NodeConfig
from ..tf.frame_chain import body_velocity
from ..tf.rig_fusion import FusedPose
from .messages import ns_to_stamp, odometry, pose_stamped, transform
from .path_publisher import PathPublisher

__all__ = ["FusedOutputs"]


class FusedOutputs:
    def __init__(self, node, config: NodeConfig) -> None:
        if config.camera_only:
            raise ValueError("a rig's fused pose is a robot base's: frames.base is ''")
        self.config = config
        self._node = node
        self.pose = node.create_publisher(PoseStamped, "~/pose", 10)
        self.odometry = node.create_publisher(Odometry, "~/odometry", 10)
        self.tf = node.create_publisher(TFMessage, "/tf", 100)  # tf2_ros's broadcaster QoS
        self.path = PathPublisher(node, config.map_frame, config.path_rate_hz,
                                  config.path_max_poses)
        self._previous: Optional[tuple[int, np.ndarray]] = None  # for the twist
        self.num_published = 0

    def publish(self, fused: FusedPose) -> None:
        """One fused pose (its stamp, the base in the fused odometry frame, metres)."""
        cfg = self.config
        stamp = ns_to_stamp(fused.stamp_ns)
        T = np.asarray(fused.T_odom_base, dtype=np.float64)
        pose = pose_stamped(T, stamp, cfg.map_frame)  # map -> odom is the identity
        self.pose.publish(pose)
        self.path.append(pose)
        linear, angular = self._twist(fused.stamp_ns, T)
        self.odometry.publish(odometry(
            T, stamp, cfg.odom_frame, cfg.base_frame, linear, angular,
            (cfg.odom_position_var, cfg.odom_orientation_var),
            (cfg.odom_linear_var, cfg.odom_angular_var)))
        transforms = []
        if cfg.publish_odom_to_base:
            transforms.append(transform(T, stamp, cfg.odom_frame, cfg.base_frame))
            if cfg.publish_map_to_odom:
                transforms.append(transform(np.eye(4), stamp, cfg.map_frame, cfg.odom_frame))
        if transforms:
            self.tf.publish(TFMessage(transforms=transforms))
        self.num_published += 1

    def clear(self) -> None:
        """A reset of the whole rig: the path starts empty, no twist across it."""
        self.path.clear()
        self._previous = None

    def flush_path(self) -> None:
        self.path.flush()

    def destroy(self) -> None:
        self.path.destroy()
        for pub in (self.pose, self.odometry, self.tf):
            self._node.destroy_publisher(pub)

    def _twist(self, stamp_ns: int, T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        previous, self._previous = self._previous, (stamp_ns, T)
        if previous is None or stamp_ns <= previous[0]:
            return np.zeros(3), np.zeros(3)
        return body_velocity(previous[1], T, (stamp_ns - previous[0]) * 1e-9)

"""Outputs: the node's publishers, and how one FrameResult becomes messages on them."""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Optional

import numpy as np
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry, Path
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Header
from tf2_msgs.msg import TFMessage

from ..config import NodeConfig
from ..session import R_BODY_OPTICAL, FrameResult, frame_points
from .messages import camera_in_map, ns_to_stamp, odometry, point_cloud, pose_stamped, transform

PATH_FINAL_ACK_S = 0.5  # destroy() waits this long at most for readers to take the last Path


class Outputs:
    """Per frame (worker thread): pose, odometry, TF, points, and one pose appended to the
    path history: O(1), whatever its length. The whole ``~/path`` is published on the node's
    executor, never by the worker: when poses are added, at once if the last Path is at least
    ``1 / path_rate_hz`` s old, else by a one-shot timer one period later. So Path messages are
    at least a period apart (at most ``path_rate_hz`` a second), the first poses of a stream
    go out at once, and the last Path holds every pose within a period of a pause.
    ``clear`` (reset) publishes an empty Path at once."""

    def __init__(self, node, config: NodeConfig, tf_lookup=None) -> None:
        """Create the publishers and the path timer. ``tf_lookup(parent, child, stamp) -> 4x4``
        for map->odom."""
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
        # Shared by the worker (append) and the executor (snapshot) under _path_lock, held for
        # an append or a copy only. _path_send_lock orders the Path publications (executor,
        # clear, the final one in destroy): a Path snapshotted before a reset is never
        # published after the reset's empty one.
        self._path_lock = threading.Lock()
        self._path_send_lock = threading.RLock()  # also guards the wake and timer handles
        self._path_poses: deque = deque(maxlen=config.path_max_poses or None)
        self._path_pending = False  # poses appended since the last Path message
        self._path_scheduled = False  # the executor was asked for a Path (wake or timer)
        self._path_last_sent = -math.inf  # time.monotonic() of the last non-empty Path
        self._path_period = 1.0 / config.path_rate_hz
        self._path_closed = False  # destroy() ran: no Path any more
        self.num_paths = 0  # Path messages published
        group = MutuallyExclusiveCallbackGroup()  # wake and timer never run concurrently
        self._path_wake = node.create_guard_condition(self._on_path_wake, callback_group=group)
        # One-shot (armed by reset(), cancelled when it fires). Steady clock: the rate bounds
        # CPU work, and a paused /clock (use_sim_time) must not hold poses back.
        self._path_timer = node.create_timer(
            self._path_period, self._on_path_timer, callback_group=group,
            clock=Clock(clock_type=ClockType.STEADY_TIME), autostart=False)
        self._last_points = 0.0
        self.num_tf_failures = 0

    def publish(self, result: FrameResult, camera_frame: str) -> None:
        cfg = self.config
        stamp = ns_to_stamp(result.stamp_ns)
        T = camera_in_map(result.c2w, cfg.camera_is_optical)
        pose = pose_stamped(T, stamp, cfg.map_frame)
        self.pose.publish(pose)
        self.odometry.publish(odometry(T, stamp, cfg.map_frame, camera_frame))
        with self._path_lock:  # O(1): the executor publishes the Path
            self._path_poses.append(pose)
            self._path_pending = True
            wake, self._path_scheduled = not self._path_scheduled, True
        guard = self._path_wake
        if wake and guard is not None:  # at most twice a period: the wake, the timer it arms
            guard.trigger()
        now = time.monotonic()
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

    def flush_path(self) -> None:
        """Make sure the poses appended since the last Path go out. While the node's executor
        publishes the Path (until ``destroy``) they are already on their way, within one
        period: a no-op, never a publication from the caller's thread (the worker calls this
        when idle). After ``destroy`` stopped that, it has published them already."""
        if self._path_wake is None:
            self._send_path()

    def clear(self) -> None:
        """Forget the path (reset) and publish it empty at once, so late joiners see the
        restart; a Path taken before the reset is never published after the empty one."""
        self._send_path(clear=True)

    def destroy(self) -> None:
        """Stop the path wake and timer, publish the poses held back (the last Path of a
        stream holds every pose), then remove the publishers."""
        with self._path_send_lock:  # waits for a Path publication in progress
            wake, timer = self._path_wake, self._path_timer
            self._path_wake = self._path_timer = None
            if timer is not None:
                self._node.destroy_timer(timer)
            if wake is not None:
                self._node.destroy_guard_condition(wake)
        if self._node.context.ok():
            try:
                if self._send_path():  # let reliable readers take it before the writer goes
                    self.path.wait_for_all_acked(Duration(seconds=PATH_FINAL_ACK_S))
            except Exception:  # noqa: BLE001 -- the context went down meanwhile (Ctrl-C)
                pass
        with self._path_send_lock:
            self._path_closed = True
        for pub in self._publishers:
            self._node.destroy_publisher(pub)
        self._publishers = []

    def _on_path_wake(self) -> None:
        """Poses were added and nothing was scheduled: publish now if the last Path is a
        period old, else arm the timer (it fires one period from now)."""
        with self._path_send_lock:
            with self._path_lock:
                due = time.monotonic() - self._path_last_sent >= self._path_period
            if due or self._path_timer is None:
                self._send_path(scheduled=True)
            else:
                self._path_timer.reset()  # also wakes the executor's wait

    def _on_path_timer(self) -> None:
        with self._path_send_lock:
            if self._path_timer is not None:
                self._path_timer.cancel()  # one shot
            self._send_path(scheduled=True)

    def _send_path(self, clear: bool = False, scheduled: bool = False) -> bool:
        """Publish the history (emptied first if ``clear``) as one Path, if ``clear`` or if
        poses were added since the last one. Its stamp is the last pose's, or now when empty.
        ``scheduled``: called by the wake or the timer, which may be asked again after this."""
        with self._path_send_lock:
            with self._path_lock:
                if scheduled:
                    self._path_scheduled = False
                if clear:
                    self._path_poses.clear()
                if self._path_closed or not (clear or self._path_pending):
                    return False
                poses = list(self._path_poses)
                self._path_pending = False
                if poses:
                    self._path_last_sent = time.monotonic()
            stamp = (poses[-1].header.stamp if poses
                     else self._node.get_clock().now().to_msg())
            self.path.publish(Path(header=Header(frame_id=self.config.map_frame, stamp=stamp),
                                   poses=poses))
            self.num_paths += 1
            return True

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

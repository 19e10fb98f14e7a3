"""Outputs: the node's per-frame publishers, and how one FrameResult becomes messages.

Per frame (worker thread): ``~/pose`` and ``~/path`` (map), ``~/odometry`` (odom, with a
twist), ``/tf`` (map -> odom -> tracked frame, as configured), ``~/camera_info`` (predicted
intrinsics at the input resolution); at their rates: ``~/depth`` + ``~/depth/camera_info``
(model resolution), ``~/points`` (a keyframe's cloud) and the keyframe points of the map.
The whole ``~/path`` and ``~/map_points`` are published by the node's executor
(``PathPublisher``, ``MapPoints``): building them never delays a pose.

Units (docs/scale.md): every output is converted here, where it leaves, with the frame's
``ScaleEstimate`` (``output_factor``: metres per model unit once LOCKED, else None). With
``scale.source: none`` nothing is converted (model units, as the model gives them). With a
source set and ``scale.before_lock: withhold``, a frame before the lock publishes only its
camera_info (no units): pose, odometry, TF, depth and points are withheld, and the frame is
kept so that ``~/path`` covers it in metres once the scale locks. ``publish_model_units``
publishes such frames in model units; at the lock ``~/path`` is rebuilt in metres.

A camera of a rig (``camera="front"``) has its outputs under ``~/front/``: ``pose``,
``path``, ``camera_info``, ``depth``, ``depth/camera_info``, ``points``; no ``odometry`` and
no /tf (``publish_tf=False``: the rig publishes one fused odom -> base, ~/odometry and
map -> odom); the rig's one map (``shared_map``) takes its keyframes' points but is not
this camera's (its reset, cleanup and snapshot leave it). Its ``map_to_odom`` is the
camera's alignment into the fused odometry (``RigFusion``). ``camera=""``: today's node.
"""
from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import CameraInfo, Image, PointCloud2
from tf2_msgs.msg import TFMessage

from ...geometry import frame_points, rigid_inverse
from ...scale import ScaleConfig, ScaleEstimate, depth_to_metres, units_header
from ...session import PATH_RECORDS, VOXEL_MAP, FrameResult, front_end_state, saved_part
from ..params.node_config import NodeConfig
from ..params.rig import CAMERA_NAME_RE
from ..tf.frame_chain import FrameChain, body_velocity
from ..tf.tree import TransformError
from .map_points import MapPoints
from .messages import (camera_info_msg, depth_image, ns_to_stamp, odometry, point_cloud,
                       pose_stamped, scaled_covariance, transform)
from .path_publisher import PathPublisher

_IDENTITY = np.eye(4)
_HOLD_MAX = 100_000  # frames kept before the lock when publish.path_max_poses is 0 (all)


@dataclass(frozen=True)
class OutputFacts:
    """``Outputs``' part: map -> odom failures, withheld frames, the map's units."""

    tf_failures: int = 0  # map -> odom not published: no odom -> base at the stamp
    last_tf_failure: str = ""
    # (time.monotonic() of the first failure, failures since) while the last frame's
    # map -> odom failed; None once one is published again
    tf_failing: Optional[tuple[float, int]] = None
    withheld: int = 0  # frames whose metric outputs were withheld (before the lock)
    map_units: Optional[ScaleEstimate] = None  # the scale of the map's last points

    def map_to_odom_failing(self, now: float) -> Optional[tuple[float, int, str]]:
        """(seconds since map -> odom last went out, frames failed, last error) while the
        last frame's failed; None otherwise (or when this node owns odom -> base)."""
        if self.tf_failing is None:
            return None
        return now - self.tf_failing[0], self.tf_failing[1], self.last_tf_failure

    def info(self) -> dict:
        """Diagnostics key/values."""
        return {"tf_failures": self.tf_failures, "scale_withheld_frames": self.withheld}


class HeldFrame(NamedTuple):
    """A frame published before the scale locked (or withheld): its path pose is rebuilt in
    metres at the lock."""

    stamp_ns: int
    c2w: np.ndarray
    chain: FrameChain


class Outputs:
    def __init__(self, node, config: NodeConfig, tf_tree=None,
                 scale: ScaleConfig = ScaleConfig(), *, camera: str = "",
                 publish_tf: bool = True, shared_map: Optional[MapPoints] = None) -> None:
        """Create the publishers. ``tf_tree`` (a ``TransformTree``): another node's
        odom -> base, needed when this node publishes map -> odom but not odom -> base.
        ``scale``: the stream's scale settings (source, ``before_lock``). ``camera``: a
        rig's camera (topics under ``~/<camera>/``, no ~/odometry, its map ``shared_map``);
        ``publish_tf`` False: nothing on /tf (see the module's docstring)."""
        if camera and not CAMERA_NAME_RE.fullmatch(camera):
            raise ValueError(f"camera must be a camera name of [a-z0-9_]+, got {camera!r}")
        if not camera and shared_map is not None:
            raise ValueError("shared_map is a rig's: it needs a camera")
        self.camera = camera
        prefix = f"~/{camera}/" if camera else "~/"
        self.config = config
        self.scale_config = scale
        # frames before the lock (source set): rebuilt in metres on ~/path at the lock
        self._held: deque[HeldFrame] = deque(maxlen=config.path_max_poses or _HOLD_MAX)
        self._published_model_units = False  # publish_model_units: ~/path has such poses
        self.num_withheld = 0  # frames whose metric outputs were withheld (before the lock)
        self._node = node
        self._tf_tree = tf_tree
        self.pose = node.create_publisher(PoseStamped, prefix + "pose", 10)
        self.odometry = (None if camera else
                         node.create_publisher(Odometry, "~/odometry", 10))
        self.camera_info = node.create_publisher(CameraInfo, prefix + "camera_info", 10)
        self.depth = self.depth_info = None
        if config.depth_rate_hz > 0:
            self.depth = node.create_publisher(Image, prefix + "depth", 2)
            self.depth_info = node.create_publisher(CameraInfo, prefix + "depth/camera_info", 2)
        self.points = (node.create_publisher(PointCloud2, prefix + "points", 2)
                       if config.publish_points else None)
        # tf2_ros's broadcaster QoS
        self.tf = node.create_publisher(TFMessage, "/tf", 100) if publish_tf else None
        self._publishers = [p for p in (self.pose, self.odometry, self.camera_info, self.depth,
                                        self.depth_info, self.points, self.tf) if p is not None]
        self.path = PathPublisher(node, config.map_frame, config.path_rate_hz,
                                  config.path_max_poses, topic=prefix + "path")
        self._owns_map = not camera  # a rig's map is the rig's
        self.map = (shared_map if camera else
                    MapPoints(node, config.map_frame, config.map_voxel_size,
                              config.map_max_points, config.map_rate_hz)
                    if config.map_points else None)
        self._last_points = self._last_depth = self._last_depth_request = -math.inf
        self._previous: Optional[tuple[int, np.ndarray]] = None  # (stamp ns, T) for the twist
        self.num_tf_failures = 0  # map -> odom not published: no odom -> base at the stamp
        self.last_tf_failure = ""
        # (time.monotonic() of the first failure, failures since) while the last frame's
        # map -> odom failed; None once one is published again
        self._tf_failing: Optional[tuple[float, int]] = None

    def depth_wanted(self) -> tuple[bool, bool]:
        """For a frame handed in now: (the depth topic is due, some output reads its depth).

        The depth head is ~7 % of a frame on the GPU and ~/depth runs at ``depth_rate_hz``, not
        at the camera rate: a frame that no output will read is run without it. The topic's
        period is counted from request to request (the result comes a step later), so it
        publishes at its rate; the points and the map are due on their own timers."""
        cfg = self.config
        now = time.monotonic()
        topic = (self.depth is not None
                 and now - self._last_depth_request >= 1.0 / cfg.depth_rate_hz)
        if topic:
            self._last_depth_request = now
        points = ((self.points is not None and now - self._last_points >= 1.0 / cfg.points_rate_hz)
                  or (self.map is not None and self.map.due()))
        return topic, topic or points

    def withholds(self, scale: Optional[ScaleEstimate]) -> bool:
        """Whether a frame with this scale snapshot has its metric outputs withheld (a source
        set, not LOCKED, ``before_lock: withhold``)."""
        return (self.scale_config.metric and self.scale_config.before_lock == "withhold"
                and (scale is None or scale.output_factor is None))

    def publish(self, result: FrameResult, chain: FrameChain,
                depth_due: Optional[bool] = None,
                scale: Optional[ScaleEstimate] = None,
                map_to_odom: Optional[np.ndarray] = None,
                hold_map_to_odom: bool = False) -> str:
        """All outputs of one frame. ``depth_due``: ``depth_wanted()[0]`` when the frame was
        handed in (None: the topic's own period decides here). ``scale``: the stream's scale
        snapshot for this frame (None: model units). ``map_to_odom``: (4, 4) the loop-closure
        back end's correction in the node's frames and output units (``loop.enable``;
        ros/backend/corrections.py): ~/pose, ~/path and the points go out in map through
        it, /tf carries it as map -> odom, odom -> base and ~/odometry stay the front end's
        (None: the identity); ``hold_map_to_odom``: map -> odom is not put on /tf (a stored
        map's localization is awaited). Returns "" when every output went out,
        else what did not (map -> odom without the other odometry's odom -> base; the metric
        outputs withheld before the scale locked): ~/status carries it."""
        cfg = self.config
        stamp = ns_to_stamp(result.stamp_ns)
        k = scale.output_factor if scale is not None else None
        if self.scale_config.metric and k is None:  # before the lock: kept for ~/path
            self._held.append(HeldFrame(result.stamp_ns, np.array(result.c2w, float), chain))
            if self.withholds(scale):
                self._publish_camera_info(result, chain, stamp)
                self.num_withheld += 1
                self._previous = None  # no twist across the withheld stretch
                return ("withheld until the scale locks: " +
                        (scale.status_text if scale is not None else "no scale estimate"))
            self._published_model_units = True
        elif k is not None and self._held:
            self._rebuild_path(k)
        T = chain.tracked_in_map(result.c2w, k)  # the tracked frame in odom (continuous)
        M = _IDENTITY if map_to_odom is None else map_to_odom
        T_map = M @ T  # ... in map (corrected at loop closures)
        pose = pose_stamped(T_map, stamp, cfg.map_frame)
        self.pose.publish(pose)
        self.path.append(pose)
        linear, angular = self._twist(result.stamp_ns, T)
        # Our odometry frame is odom when we own it (map -> odom: the back end's correction,
        # or the identity); otherwise our estimate lives in map only.
        odom_frame = cfg.odom_frame if cfg.publish_odom_to_base else cfg.map_frame
        T_odom = T if cfg.publish_odom_to_base else T_map
        if k is None:  # model units: the configured constant diagonals
            pose_cov = (cfg.odom_position_var, cfg.odom_orientation_var)
            twist_cov = (cfg.odom_linear_var, cfg.odom_angular_var)
        else:  # metres: the variances (the outputs' units) plus the scale's uncertainty
            pose_cov = scaled_covariance(cfg.odom_position_var, cfg.odom_orientation_var,
                                         scale.sigma_log, T_odom[:3, 3])
            twist_cov = scaled_covariance(cfg.odom_linear_var, cfg.odom_angular_var,
                                          scale.sigma_log, linear)
        if self.odometry is not None:  # a rig's camera: the rig's fused ~/odometry
            self.odometry.publish(odometry(T_odom, stamp, odom_frame, chain.tracked_frame,
                                           linear, angular, pose_cov, twist_cov))
        transforms = (self._transforms(T, M, stamp, result.stamp_ns, chain.tracked_frame,
                                       not hold_map_to_odom) if self.tf is not None else None)
        if transforms:
            self.tf.publish(TFMessage(transforms=transforms))
        self._publish_camera_info(result, chain, stamp)
        now = time.monotonic()
        if self.depth is None:  # depth_rate_hz 0: no ~/depth at all
            depth_due = False
        elif depth_due is None:  # an anchor frame: the topic's period decides here
            depth_due = now - self._last_depth >= 1.0 / cfg.depth_rate_hz
        if depth_due and result.depth is not None:
            h, w = result.depth.shape
            depth = result.depth if k is None else depth_to_metres(result.depth, k)
            self.depth.publish(depth_image(depth, stamp, chain.camera_frame))
            self.depth_info.publish(camera_info_msg(result.K_model, w, h, stamp,
                                                    chain.camera_frame))
            self._last_depth = now
        self._publish_points(result, chain, stamp, now, scale, M)
        return (f"map -> odom not published: {self.last_tf_failure}"
                if self._tf_failing is not None else "")

    def _publish_camera_info(self, result: FrameResult, chain: FrameChain, stamp) -> None:
        in_h, in_w = result.crop.input_hw
        self.camera_info.publish(camera_info_msg(result.K, in_w, in_h, stamp,
                                                 chain.camera_frame))

    def _rebuild_path(self, k: float) -> None:
        """The scale just locked: the frames kept before it go onto ~/path in metres (the
        model-unit poses published before, with ``publish_model_units``, are dropped)."""
        if self._published_model_units:  # ~/path and the map held model units
            self.path.clear()
            if self.map is not None and self._owns_map:
                self.map.clear()
            self._published_model_units = False
        cfg = self.config
        while self._held:
            held = self._held.popleft()
            T = held.chain.tracked_in_map(held.c2w, k)
            self.path.append(pose_stamped(T, ns_to_stamp(held.stamp_ns), cfg.map_frame))
            if self._previous is not None and self._previous[0] == held.stamp_ns:
                self._previous = (held.stamp_ns, T)  # the twist's last pose, now in metres

    def facts(self) -> OutputFacts:
        """What the executor may know of the outputs (``NodeFacts``; the worker publishes
        it): map -> odom failures, frames withheld, the map's units."""
        return OutputFacts(tf_failures=self.num_tf_failures, last_tf_failure=self.last_tf_failure,
                           tf_failing=self._tf_failing, withheld=self.num_withheld,
                           map_units=self.map.units() if self.map is not None else None)

    def save_map(self, path) -> Optional[tuple[int, Optional[ScaleEstimate]]]:
        """~/save_map: write the map as PLY, its header stating the units of its points;
        (points written, their scale snapshot), or None without a map."""
        if self.map is None:
            return None
        return self.map.save(path, units_header)

    def flush_path(self) -> None:
        self.path.flush()

    def clear(self) -> None:
        """Reset: the path and the map are published empty at once; the twist restarts."""
        self.path.clear()
        if self.map is not None and self._owns_map:  # a rig's map stays (other cameras')
            self.map.clear()
        self._previous = None
        self._held.clear()
        self._published_model_units = False

    def node_state(self) -> dict:
        """The outputs' own state for a stream snapshot: the voxel map (None without one)
        and the ~/path history, as snapshot parts (``session/snapshot_parts.py``)."""
        return front_end_state({VOXEL_MAP: self.map if self._owns_map else None,
                                PATH_RECORDS: self.path})

    def load_node_state(self, state: Optional[dict]) -> None:
        """Continue a restored snapshot's map and path (what ``node_state`` saved; a part
        the snapshot lacks, or this node has no owner for, is left as it is)."""
        owned_map = self.map if self._owns_map else None
        for key, owner in ((VOXEL_MAP, owned_map), (PATH_RECORDS, self.path)):
            saved = saved_part(state, key)
            if owner is not None and saved is not None:
                owner.load_state_dict(saved)

    def restart(self) -> None:
        """The stream restarted itself: no twist across the restart; frames kept for the
        lock are dropped (the restarted stream has a new scale)."""
        self._previous = None
        self._held.clear()

    def destroy(self) -> None:
        """Publish the poses held back (the last Path holds every pose), remove everything."""
        self.path.destroy()
        if self.map is not None and self._owns_map:
            self.map.destroy()
        for pub in self._publishers:
            self._node.destroy_publisher(pub)
        self._publishers = []

    def _twist(self, stamp_ns: int, T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Velocity from the previous pose of this stream (zero for its first pose)."""
        previous, self._previous = self._previous, (stamp_ns, T)
        if previous is None or stamp_ns <= previous[0]:
            return np.zeros(3), np.zeros(3)
        return body_velocity(previous[1], T, (stamp_ns - previous[0]) * 1e-9)

    def _transforms(self, T_odom_tracked: np.ndarray, M: np.ndarray, stamp, stamp_ns: int,
                    tracked: str, map_to_odom: bool = True) -> list:
        """``T_odom_tracked``: the front end's pose (odom, continuous); ``M``: map -> odom
        (the back end's correction, or the identity); ``map_to_odom`` False: not sent."""
        cfg = self.config
        out = []
        T_map_tracked = M @ T_odom_tracked
        with_map = cfg.publish_map_to_odom and map_to_odom
        if cfg.publish_odom_to_base:  # we are the odometry: map -> odom is the correction
            out.append(transform(T_odom_tracked, stamp, cfg.odom_frame, tracked))
            if with_map:
                out.append(transform(M, stamp, cfg.map_frame, cfg.odom_frame))
        elif with_map:  # another node owns odom -> base: correct its drift
            try:
                T_odom_tracked = self._tf_tree.lookup(cfg.odom_frame, tracked, stamp_ns)
            except TransformError as exc:
                self.num_tf_failures += 1
                self.last_tf_failure = str(exc)
                since, n = self._tf_failing or (time.monotonic(), 0)
                self._tf_failing = (since, n + 1)
                self._node.get_logger().warning(
                    f"map -> odom not published: {exc}", throttle_duration_sec=5.0)
                return out
            self._tf_failing = None
            out.append(transform(T_map_tracked @ rigid_inverse(T_odom_tracked), stamp,
                                 cfg.map_frame, cfg.odom_frame))
        return out

    def _publish_points(self, result: FrameResult, chain: FrameChain, stamp, now: float,
                        scale: Optional[ScaleEstimate] = None,
                        M: np.ndarray = _IDENTITY) -> None:
        """A keyframe's points on ~/points and into the map, each at its own rate."""
        cfg = self.config
        if not result.keyframe or result.depth is None:
            return
        want_cloud = (self.points is not None
                      and now - self._last_points >= 1.0 / cfg.points_rate_hz)
        want_map = self.map is not None and self.map.due()
        if not (want_cloud or want_map):
            return
        xyz, rgb = frame_points(result, cfg.points_stride, cfg.points_min_conf)
        k = scale.output_factor if scale is not None else None
        xyz = chain.points_in_map(xyz, k)  # model world -> odom (metres with a scale)
        if M is not _IDENTITY:  # -> map, through the back end's correction
            xyz = (xyz @ M[:3, :3].T + M[:3, 3]).astype(np.float32)
        if want_cloud:
            self.points.publish(point_cloud(xyz, rgb, stamp, cfg.map_frame))
            self._last_points = now
        if want_map:  # the map's units go in with its points (one lock: ~/save_map)
            self.map.add(xyz, rgb, stamp, scale)

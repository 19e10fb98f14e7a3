"""``lingbot-ros-view --ros``: a running node's topics into the viewer's scene.

A client of the node (an rclpy node of its own, :class:`~.background_node.BackgroundNode`),
subscribed under the node's full name (``--node /robot1/lingbot_ros``: its namespace and
name; docs/node.md, Topics):

- ``NODE/path`` (nav_msgs/Path, latched): the trajectory, replaced whole by each message
  (the node rewrites it at a loop closure; an empty one is a reset);
- ``NODE/pose`` (PoseStamped): the poses between two paths, and the latest camera;
- ``NODE/map_points`` (PointCloud2, latched; the node's ``publish.map_points``): the map;
- ``NODE/status`` (TrackingStatus): frames received, processed, dropped; keyframes;
- ``NODE/scale`` (ScaleEstimate): the scale's state and metres per unit;
- ``NODE/camera_info`` (CameraInfo): the frustum's intrinsics; ``--image TOPIC``: its image.

The pose is the node's tracked frame (a robot's base, REP-103: x forward); the frustum is
drawn with the optical axes (z forward) of that frame. Callbacks run on this client's own
thread: the node never waits for the viewer.
"""
from __future__ import annotations

import collections
import math
import threading

import numpy as np
from geometry_msgs.msg import PoseStamped
from lingbot_ros_interfaces.msg import ScaleEstimate, TrackingStatus
from nav_msgs.msg import Path
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, Image, PointCloud2

from ..geometry import T_BODY_OPTICAL, tq_to_matrix
from ..image_decode import ImageRejected, decode_image
from ..tools.view.scene import SceneModel, ScaleView
from .background_node import BackgroundNode

__all__ = ["RosViewSource", "pose_matrix", "cloud_arrays"]

SCALE_STATES = {ScaleEstimate.UNKNOWN: "UNKNOWN", ScaleEstimate.CONVERGING: "CONVERGING",
                ScaleEstimate.LOCKED: "LOCKED"}
RECENT = 256  # poses and keyframe stamps kept to pair a status with its pose


def pose_matrix(pose) -> np.ndarray:
    """A geometry_msgs/Pose as a (4, 4) matrix."""
    p, q = pose.position, pose.orientation
    return tq_to_matrix(np.array([[p.x, p.y, p.z]]), np.array([[q.x, q.y, q.z, q.w]]))[0]


def cloud_arrays(msg: PointCloud2) -> tuple[np.ndarray, np.ndarray]:
    """x, y, z (float32) and the packed rgb of a PointCloud2 as (N, 3) arrays; ValueError for
    a cloud without them."""
    fields = {f.name: f.offset for f in msg.fields}
    if not {"x", "y", "z"} <= set(fields) or msg.is_bigendian:
        raise ValueError(f"a little-endian x, y, z cloud was expected, got fields "
                         f"{sorted(fields)}")
    n = msg.width * msg.height
    data = np.frombuffer(bytes(msg.data), np.uint8)[:n * msg.point_step]
    rows = data.reshape(n, msg.point_step)
    xyz = np.stack([rows[:, fields[a]:fields[a] + 4].copy().view("<f4")[:, 0]
                    for a in "xyz"], axis=1)
    if "rgb" in fields:
        packed = rows[:, fields["rgb"]:fields["rgb"] + 4].copy().view("<u4")[:, 0]
        rgb = np.stack([(packed >> 16) & 255, (packed >> 8) & 255, packed & 255],
                       axis=1).astype(np.uint8)
    else:
        rgb = np.full((n, 3), 200, np.uint8)
    return xyz, rgb


class RosViewSource(BackgroundNode):
    """Feeds ``model`` from the node ``node_name``'s topics while entered."""

    def __init__(self, model: SceneModel, node_name: str = "/lingbot_ros",
                 image_topic: str = "") -> None:
        super().__init__("lingbot_ros_view")
        self.model = model
        self._ns = "/" + node_name.strip("/")
        self._image_topic = image_topic or ""
        self._lock = threading.Lock()
        self._path_end_ns = -1  # the last path's last stamp: older poses are in it already
        self._poses: collections.OrderedDict = collections.OrderedDict()
        self._keyframe_stamps: collections.deque = collections.deque(maxlen=RECENT)
        self._info = None  # the last CameraInfo
        self._image = None
        self._keyframes_seen = 0
        self.messages = collections.Counter()  # per topic, for tests and the log

    @classmethod
    def from_args(cls, model: SceneModel, args) -> "RosViewSource":
        return cls(model, args.node, args.image or "")

    def setup(self, node) -> None:
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        ns = self._ns
        node.create_subscription(Path, f"{ns}/path", self._on_path, latched)
        node.create_subscription(PointCloud2, f"{ns}/map_points", self._on_map, latched)
        node.create_subscription(PoseStamped, f"{ns}/pose", self._on_pose, 100)
        node.create_subscription(TrackingStatus, f"{ns}/status", self._on_status, 100)
        node.create_subscription(ScaleEstimate, f"{ns}/scale", self._on_scale, 10)
        node.create_subscription(CameraInfo, f"{ns}/camera_info", self._on_info, 10)
        if self._image_topic:
            node.create_subscription(Image, self._image_topic, self._on_image, 2)

    # -- callbacks (this client's executor thread) ----------------------------------------
    def _on_path(self, msg: Path) -> None:
        self.messages["path"] += 1
        if not msg.poses:  # a reset
            with self._lock:
                self._path_end_ns = -1
                self._poses.clear()
            self.model.clear()
            return
        poses = np.stack([pose_matrix(p.pose) for p in msg.poses])
        with self._lock:
            self._path_end_ns = _ns(msg.poses[-1].header.stamp)
            newer = [c2w for stamp, c2w in self._poses.items() if stamp > self._path_end_ns]
        self.model.set_trajectory(poses)
        for c2w in newer:
            self.model.add_pose(c2w)

    def _on_pose(self, msg: PoseStamped) -> None:
        self.messages["pose"] += 1
        stamp, c2w = _ns(msg.header.stamp), pose_matrix(msg.pose)
        with self._lock:
            self._poses[stamp] = c2w
            while len(self._poses) > RECENT:
                self._poses.popitem(last=False)
            fresh = stamp > self._path_end_ns
            keyframe = stamp in self._keyframe_stamps
        if fresh:
            self.model.add_pose(c2w)
        if keyframe:
            self.model.add_keyframe(c2w)
        self._show_camera(c2w)

    def _on_status(self, msg: TrackingStatus) -> None:
        self.messages["status"] += 1
        self.model.set_counters(frames_in=msg.frames_received, processed=msg.frames_processed,
                                dropped=msg.frames_dropped + msg.frames_rejected)
        if msg.state == TrackingStatus.STATE_TRACKING and msg.keyframe:
            stamp = _ns(msg.header.stamp)
            with self._lock:
                self._keyframe_stamps.append(stamp)
                c2w = self._poses.get(stamp)
                self._keyframes_seen += 1
                count = self._keyframes_seen
            self.model.set_counters(keyframes=count)
            if c2w is not None:
                self.model.add_keyframe(c2w)

    def _on_scale(self, msg: ScaleEstimate) -> None:
        self.messages["scale"] += 1
        mpu = float(msg.metres_per_unit)
        locked = msg.state == ScaleEstimate.LOCKED
        self.model.set_scale(ScaleView(
            state=SCALE_STATES.get(msg.state, str(msg.state)), source=msg.source,
            metres_per_unit=mpu if math.isfinite(mpu) else None,
            units="m" if locked else "model units"))

    def _on_map(self, msg: PointCloud2) -> None:
        self.messages["map_points"] += 1
        xyz, rgb = cloud_arrays(msg)
        self.model.set_points(xyz, rgb)

    def _on_info(self, msg: CameraInfo) -> None:
        self.messages["camera_info"] += 1
        self._info = msg

    def _on_image(self, msg: Image) -> None:
        self.messages["image"] += 1
        try:
            image = decode_image(msg)
        except (ImageRejected, ValueError):
            return
        if image.ndim == 3 and msg.encoding.startswith("bgr"):
            image = image[:, :, 2::-1]
        self._image = image if image.ndim == 3 else np.repeat(image[:, :, None], 3, axis=2)

    def _show_camera(self, c2w: np.ndarray) -> None:
        info = self._info
        if info is not None and info.k[4] > 0:
            K, hw = np.array(info.k, np.float64).reshape(3, 3), (info.height, info.width)
        else:  # no camera_info yet: a 60 degree vertical field of view, 4:3
            f = 1.5 / math.tan(math.radians(30.0))
            K, hw = np.array([[f, 0, 2.0], [0, f, 1.5], [0, 0, 1.0]]), (3, 4)
        self.model.set_camera(c2w @ T_BODY_OPTICAL, K, hw, self._image)


def _ns(stamp) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)

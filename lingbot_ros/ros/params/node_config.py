"""NodeConfig: what the ROS node subscribes to and publishes (the session has its own config).

Built by ``declare.build_settings`` from the parameter table, whose rows also give every
field's type and range (``table.rows("node")``): they are checked here, once. The rules
one value's range cannot say (non-empty names, distinct frames, a rig's robot base) are
checked here too; ``check_rig`` checks a rig against the session's and the scale's settings.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...config import SessionConfig
from ...scale.config import ScaleConfig
from .rig import RigConfig
from .table import check_value, rows


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Defaults are the parameter table's (a test keeps them equal)."""

    image_topic: str = "image"
    use_compressed: bool = False  # subscribe <image_topic>/compressed (CompressedImage)
    image_raw_take: bool = False  # images as CDR bytes, read by ros/intake/image_cdr.py
    camera_info_topic: str = "camera_info"
    image_qos: str = "auto"  # auto (fits the publishers) | sensor_data (best effort) | reliable
    image_qos_depth: int = 5
    queue_size: int = 2  # latest-wins queue between the callback and the worker
    # REP-105 frames. ``base_frame`` "" = camera-only mode (a bare camera: the camera frame
    # is the tracked frame, map = the first camera's body frame).
    map_frame: str = "map"
    odom_frame: str = "odom"
    base_frame: str = "base_link"
    camera_frame: str = ""  # "" = the image header's frame_id
    camera_is_optical: bool = True  # the camera frame has optical axes (x right, y down)
    ground_frame: str = "base_footprint"  # scale camera_height: the floor under the robot
    # scale odometry: nav_msgs/Odometry on odom_in ("topic") or another node's odom -> base
    # on /tf ("tf")
    odometry_input: str = "topic"
    publish_map_to_odom: bool = True  # map -> odom (identity, or corrects another odometry)
    publish_odom_to_base: bool = True  # odom -> base (we are the odometry source)
    wait_for_extrinsic_s: float = 10.0  # base -> camera missing this long: diagnostics ERROR
    # ~/odometry's constant diagonal covariance, in the outputs' units (metres once a scale
    # source has locked, when the scale's own uncertainty is added)
    odom_position_var: float = 1e-2
    odom_orientation_var: float = 1e-3
    odom_linear_var: float = 1e-1
    odom_angular_var: float = 1e-2
    publish_points: bool = False
    points_rate_hz: float = 1.0
    points_stride: int = 4
    points_min_conf: float = 1.5
    depth_rate_hz: float = 10.0  # ~/depth + ~/depth/camera_info; 0 = off
    map_points: bool = False  # accumulate keyframe points into ~/map_points
    map_rate_hz: float = 1.0  # keyframes added to the map and the map published at most this often
    map_voxel_size: float = 0.05  # outputs' units; doubles when the map reaches map_max_points
    map_max_points: int = 1_000_000
    path_max_poses: int = 10_000  # 0 = unbounded
    cache_info_rate_hz: float = 1.0
    diagnostics_rate_hz: float = 1.0
    max_image_pixels: int = 4096 * 4096  # larger images are rejected (counted)
    path_rate_hz: float = 1.0  # ~/path (the whole history) at most this often
    warn_drop_share: float = 0.5  # diagnostics WARN above this share of recent frames lost
    stall_timeout_s: float = 5.0  # diagnostics ERROR: input arrives, nothing processed this long
    loop_queue_size: int = 2  # keyframes waiting for verification (loop.enable)
    rig: RigConfig = RigConfig()  # cameras.*: () names = one camera (the fields above)

    def __post_init__(self) -> None:
        for row in rows("node"):  # type and range: the parameter table's
            check_value(row, getattr(self, row.attribute), label=row.attribute)
        for name in ("image_topic", "camera_info_topic", "map_frame", "odom_frame"):
            if not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string")
        if self.odom_frame == self.map_frame:
            raise ValueError(f"odom_frame must differ from map_frame ({self.map_frame!r})")
        if self.base_frame in (self.map_frame, self.odom_frame):
            raise ValueError(f"base_frame must differ from map_frame and odom_frame, got "
                             f"{self.base_frame!r}")
        cameras = len(self.rig.camera_names)
        if cameras > 1 and self.camera_only:
            raise ValueError(f"base_frame: a rig of {cameras} cameras (cameras.names) tracks "
                             f"one robot base: it needs a base frame, got ''")
        for camera in self.rig.cameras:
            if camera.frame and camera.frame in (self.map_frame, self.odom_frame,
                                                 self.base_frame):
                raise ValueError(f"parameter {camera.param('frame')!r}: {camera.frame!r} is "
                                 f"the map, odom or base frame, not a camera's")

    @property
    def camera_only(self) -> bool:
        """No robot base: the camera frame is the tracked frame (``base_frame`` "")."""
        return not self.base_frame


def outputs_read_depth(config: NodeConfig) -> bool:
    """Whether any output ever reads a frame's depth map (~/depth, ~/points, ~/map_points):
    the session then returns it (``SessionConfig.return_depth``). The one place this is
    decided; ``Outputs.depth_wanted`` then says, per frame, whether one is due."""
    return config.depth_rate_hz > 0 or config.publish_points or config.map_points



def check_scale_inputs(config: NodeConfig, scale: ScaleConfig) -> None:
    """ValueError (starting with the field, so the parameter is named) for a scale input this
    node cannot read: odometry from TF needs a robot base and another node publishing
    odom -> base; reading back this node's own odom -> base would be circular."""
    if not scale.kind.needs_odometry or config.odometry_input != "tf":
        return
    if config.camera_only:
        raise ValueError("odometry_input 'tf' reads odom -> base from TF: it needs a robot base "
                         "frame (frames.base is '')")
    if config.publish_odom_to_base:
        raise ValueError(
            f"odometry_input 'tf' reads {config.odom_frame} -> {config.base_frame} of another "
            f"node from TF, but tf.publish_odom_to_base is true: this node publishes that "
            "transform itself and would read its own estimate back (circular). Set "
            "tf.publish_odom_to_base: false (the other node owns odom -> base), or "
            "scale.odometry_input: topic")


def camera_config(config: NodeConfig, camera: str) -> NodeConfig:
    """A rig camera's own ``NodeConfig``: the node's, with the camera's image topic and
    frame (``cameras.<camera>.*``) and no rig; what its ``RobotFrames``, ``Outputs`` and
    image input are built with. Its camera info and depth topics ("" = none) are read from
    its ``CameraConfig``."""
    c = config.rig.camera(camera)
    return replace(config, image_topic=c.image_topic, use_compressed=c.use_compressed,
                   camera_frame=c.frame, camera_is_optical=c.frame_is_optical,
                   rig=RigConfig())


def check_rig(config: NodeConfig, session: SessionConfig, scale: ScaleConfig,
              loop_enable: bool) -> None:
    """ValueError naming the parameter for a rig this node cannot run: its cameras share one
    batched step, so one model input size (``input.height`` fixed: with 0 each camera's
    aspect would give its own); one fused pose needs metres (a metric ``scale.source``);
    the back end (``loop.enable``) takes one stream (v1); an
    aligned-depth scale source needs each camera's depth topic."""
    rig = config.rig
    if len(rig.camera_names) > 1 and session.preprocess.height is None:
        raise ValueError(f"parameter 'input.height': a rig of {len(rig.camera_names)} cameras "
                         f"runs one batched step: it needs one model input size for all, set "
                         f"input.height (a fixed H x W; 0 takes each camera's aspect)")
    if len(rig.camera_names) > 1 and not scale.metric:
        raise ValueError(f"parameter 'scale.source': a rig of {len(rig.camera_names)} cameras "
                         f"fuses their base poses in metres (each stream's model units "
                         f"differ): it needs a metric scale source, got {scale.source!r}")
    if len(rig.camera_names) > 1 and loop_enable:
        raise ValueError("parameter 'loop.enable': not supported with a rig of several "
                         "cameras yet (the back end takes one stream)")
    if rig.enabled and scale.kind.needs_sensor_depth:
        for camera in rig.cameras:
            if not camera.depth_topic:
                raise ValueError(f"parameter {camera.param('depth_topic')!r}: scale.source "
                                 f"{scale.source!r} reads every camera's aligned depth: set it")


def scale_reads_tf(config: NodeConfig, scale: ScaleConfig) -> bool:
    """Whether the scale source reads TF: the camera's height over ``ground_frame``
    (camera_height without scale.camera_height_m), or odom -> base (odometry_input tf)."""
    kind = scale.kind
    return ((kind.ground_from_tf and scale.camera_height_m is None)
            or (kind.needs_odometry and config.odometry_input == "tf"))

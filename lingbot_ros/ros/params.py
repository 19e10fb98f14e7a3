"""The node's parameters: one table, declared with descriptors, mapped onto typed configs.

The table is the single source of truth: ``config/lingbot_ros.yaml`` lists the same names
(a test keeps them in step), the node declares them from here, and ``build_settings`` turns
their values into ``SessionConfig`` / ``NodeConfig`` / the model choice, raising ValueError
with the parameter's name for anything invalid.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from ..config import (ATTENTION_BACKENDS, FLASHINFER_VARIANTS, FUSED_KERNEL_MODES,
                      HEAD_PRECISIONS, IMAGE_QOS, KEYFRAME_POLICIES, MAX_KV_SPLITS, PRECISIONS,
                      STAMP_BACKWARDS_POLICIES, KeyframeConfig, NodeConfig, PreprocessConfig,
                      SessionConfig)
from ..session import PRESETS


@dataclass(frozen=True)
class Param:
    name: str
    default: Any
    description: str
    min: Optional[float] = None  # numeric range (inclusive), advertised in the descriptor
    max: Optional[float] = None
    choices: tuple = ()


PARAMS: tuple[Param, ...] = (
    Param("autostart", True, "configure and activate on start (no lifecycle manager)"),
    Param("warmup", True, "run a short dummy stream at configure so frame 1 is not slow"),
    Param("checkpoint", "", "LingBot-Map weights (.pt/.safetensors); empty = random weights"),
    Param("model.preset", "tiny", "network size without a checkpoint (with one, the file's "
          "shapes pick the release's size or this one)", choices=PRESETS),
    Param("device", "cpu", "torch device: cpu | cuda | cuda:N"),
    Param("precision", "auto", "auto (bf16 aggregator on CUDA) | fp32 | bf16",
          choices=PRECISIONS),
    Param("camera_head.precision", "fp32", "camera head: fp32 (the reference) | bf16 (1.2 ms "
          "faster on an H200, pose within 1.1e-2)", choices=HEAD_PRECISIONS),
    Param("attention.backend", "auto", "auto (flashinfer on CUDA when installed) | torch_ref | "
          "flashinfer", choices=ATTENTION_BACKENDS),
    Param("attention.flashinfer_variant", "auto", "auto (fa3 on Hopper, else fa2) | fa2 | fa3",
          choices=FLASHINFER_VARIANTS),
    Param("attention.cuda_graphs", True, "replay streaming steps as CUDA graphs (CUDA + "
          "flashinfer; else eager)"),
    Param("attention.kv_splits", 4, "flashinfer split-KV parts per attention call (fills the "
          "GPU; 1 = off)", 1, MAX_KV_SPLITS),
    Param("attention.fused_kernels", "auto", "fused Triton kernels (q/k norm + RoPE, K/V "
          "write, residual + LayerNorm, split-KV merge): auto (CUDA + bf16 + Triton) | on | off",
          choices=FUSED_KERNEL_MODES),
    Param("input.width", 518, "model input width, multiple of 14", 14, 4088),
    Param("input.height", 0, "model input height, multiple of 14; 0 = from the aspect", 0, 4088),
    Param("session.num_scale_frames", 8, "anchor frames processed together first", 1, 64),
    Param("session.rollover_keyframes", 320, "keyframes per segment (then a new Sim(3)-aligned segment); 0 = never roll over", 0,
          100_000),
    Param("session.with_depth", True, "run the depth head on every frame"),
    Param("session.on_stamp_backwards", "reset", "a stamp not after the previous one: reset "
          "the stream on it | drop it (counted)", choices=STAMP_BACKWARDS_POLICIES),
    Param("session.max_gap_s", 10.0, "a forward stamp jump over this many seconds resets the "
          "stream; 0 = never", 0.0, 1e6),
    Param("session.size_change_frames", 3, "consecutive frames of a new input size that "
          "reset the stream on it", 1, 1000),
    Param("cache.window", 64, "frames of full context, current included", 1, 1024),
    Param("cache.max_special_frames", -1, "trajectory memory bound in frames; -1 = all", -1,
          10_000_000),
    Param("cache.max_cache_bytes", -1, "KV pool byte budget; -1 = device memory", -1, 2**50),
    Param("keyframes.policy", "all", "all | every_n | flow", choices=KEYFRAME_POLICIES),
    Param("keyframes.n", 2, "every_n: keyframe interval", 1, 1000),
    Param("keyframes.flow_threshold", 10.0, "flow: mean pixel flow for a keyframe", 0.0, 1e4),
    Param("keyframes.max_gap", 30, "flow: at most this many frames between keyframes", 1, 10_000),
    Param("topics.image", "image", "image topic (remappable)"),
    Param("topics.use_compressed", False, "subscribe <topics.image>/compressed instead"),
    Param("topics.camera_info", "camera_info", "camera info topic (optional input)"),
    Param("qos.image", "auto", "auto (reliable when every image publisher is, else best "
          "effort; re-checked every second) | sensor_data (best effort) | reliable",
          choices=IMAGE_QOS),
    Param("qos.image_depth", 5, "image subscription history depth", 1, 1000),
    Param("queue_size", 2, "latest-wins frames between callback and worker", 1, 100),
    Param("frames.map", "map", "world frame of pose, path, points and map (REP-105)"),
    Param("frames.odom", "odom", "odometry frame: parent of the base frame"),
    Param("frames.base", "base_link", "robot base frame, tracked in map/odom; '' = camera-only "
          "(a bare camera: the camera frame is tracked)"),
    Param("frames.camera", "", "camera frame; empty = the image header's frame_id"),
    Param("frames.camera_is_optical", True, "the camera frame has optical axes"),
    Param("tf.publish_map_to_odom", True, "publish map -> odom (identity, or the correction "
          "of another node's odom -> base when tf.publish_odom_to_base is false)"),
    Param("tf.publish_odom_to_base", True, "publish odom -> base (this node is the odometry "
          "source)"),
    Param("tf.wait_for_extrinsic_s", 10.0, "the base -> camera transform missing this long "
          "after the first image: diagnostics ERROR (the node keeps waiting)", 0.1, 3600.0),
    Param("odometry.position_variance", 1e-2, "~/odometry pose covariance diagonal, x y z "
          "(model units squared)", 0.0, 1e6),
    Param("odometry.orientation_variance", 1e-3, "~/odometry pose covariance diagonal, roll "
          "pitch yaw (rad^2)", 0.0, 1e6),
    Param("odometry.linear_velocity_variance", 1e-1, "~/odometry twist covariance diagonal, "
          "linear ((model units/s)^2)", 0.0, 1e6),
    Param("odometry.angular_velocity_variance", 1e-2, "~/odometry twist covariance diagonal, "
          "angular ((rad/s)^2)", 0.0, 1e6),
    Param("publish.points", False, "publish keyframe points on ~/points"),
    Param("publish.points_rate_hz", 1.0, "max point cloud rate", 0.01, 100.0),
    Param("publish.points_stride", 4, "pixel stride of the points (~/points and the map)", 1,
          64),
    Param("publish.points_min_conf", 1.5, "minimum depth confidence of a point", 1.0, 1e6),
    Param("publish.depth_rate_hz", 10.0, "~/depth and ~/depth/camera_info at most this often; "
          "0 = off", 0.0, 1000.0),
    Param("publish.map_points", False, "accumulate keyframe points into ~/map_points "
          "(voxel map; ~/save_map writes it)"),
    Param("map.rate_hz", 1.0, "keyframes added to the map, and the map published, at most "
          "this often", 0.01, 100.0),
    Param("map.voxel_size", 0.05, "map voxel edge (model units); doubles when the map is "
          "full", 1e-4, 1e3),
    Param("map.max_points", 1_000_000, "memory bound of the map (16 bytes a point)", 1,
          100_000_000),
    Param("publish.path_max_poses", 10_000, "poses kept in ~/path; 0 = all", 0, 10_000_000),
    Param("publish.cache_info_rate_hz", 1.0, "~/cache_info rate", 0.01, 100.0),
    Param("publish.diagnostics_rate_hz", 1.0, "/diagnostics rate", 0.01, 100.0),
    Param("publish.path_rate_hz", 1.0, "~/path (the whole history) at most this often", 0.01,
          100.0),
    Param("diagnostics.warn_drop_share", 0.5, "WARN when more than this share of recent "
          "frames is dropped or rejected", 0.01, 1.0),
    Param("diagnostics.stall_timeout_s", 5.0, "ERROR when images arrive but none was "
          "processed for this long", 0.1, 3600.0),
    Param("max_image_pixels", 4096 * 4096, "larger images are rejected", 1, 2**31 - 1),
)
PARAM_NAMES = tuple(p.name for p in PARAMS)

# The config objects check rules one value's range cannot (multiples of the patch size, one
# value against another); their errors start with the config field's name, mapped back here.
_FIELD_PARAMS = {
    "width": "input.width", "height": "input.height",
    "num_scale_frames": "session.num_scale_frames", "window": "cache.window",
    "max_special_frames": "cache.max_special_frames", "max_cache_bytes": "cache.max_cache_bytes",
    "rollover_keyframes": "session.rollover_keyframes", "policy": "keyframes.policy",
    "n": "keyframes.n", "flow_threshold": "keyframes.flow_threshold",
    "max_gap": "keyframes.max_gap", "device": "device", "attention_backend": "attention.backend",
    "flashinfer_variant": "attention.flashinfer_variant",
    "cuda_graphs": "attention.cuda_graphs", "kv_splits": "attention.kv_splits",
    "fused_kernels": "attention.fused_kernels", "image_topic": "topics.image",
    "camera_info_topic": "topics.camera_info", "map_frame": "frames.map",
    "odom_frame": "frames.odom", "base_frame": "frames.base", "image_qos_depth": "qos.image_depth",
    "wait_for_extrinsic_s": "tf.wait_for_extrinsic_s",
    "odom_position_var": "odometry.position_variance",
    "odom_orientation_var": "odometry.orientation_variance",
    "odom_linear_var": "odometry.linear_velocity_variance",
    "odom_angular_var": "odometry.angular_velocity_variance",
    "depth_rate_hz": "publish.depth_rate_hz", "map_rate_hz": "map.rate_hz",
    "map_voxel_size": "map.voxel_size", "map_max_points": "map.max_points",
    "queue_size": "queue_size", "points_stride": "publish.points_stride",
    "max_image_pixels": "max_image_pixels", "path_max_poses": "publish.path_max_poses",
    "points_rate_hz": "publish.points_rate_hz", "cache_info_rate_hz": "publish.cache_info_rate_hz",
    "diagnostics_rate_hz": "publish.diagnostics_rate_hz",
    "points_min_conf": "publish.points_min_conf", "path_rate_hz": "publish.path_rate_hz",
    "on_stamp_backwards": "session.on_stamp_backwards", "max_gap_s": "session.max_gap_s",
    "size_change_frames": "session.size_change_frames",
    "warn_drop_share": "diagnostics.warn_drop_share",
    "stall_timeout_s": "diagnostics.stall_timeout_s",
}


@dataclass(frozen=True)
class Settings:
    """Everything the node needs, validated."""

    session: SessionConfig
    node: NodeConfig
    checkpoint: str
    preset: str
    precision: str
    camera_head_precision: str
    autostart: bool
    warmup: bool


def check_value(p: Param, value) -> None:
    """Type and range of one value (ROS enforces types, but not our choice lists)."""
    if type(value) is not type(p.default) and not (isinstance(p.default, float)
                                                   and isinstance(value, int)):
        raise ValueError(f"parameter {p.name!r} must be {type(p.default).__name__}, got "
                         f"{value!r}")
    if p.choices and value not in p.choices:
        raise ValueError(f"parameter {p.name!r} must be one of {list(p.choices)}, got {value!r}")
    if p.min is not None and not p.min <= value <= p.max:
        raise ValueError(f"parameter {p.name!r} must be in [{p.min}, {p.max}], got {value!r}")


def build_settings(values: dict) -> Settings:
    """Parameter values (name -> value) -> validated settings; ValueError names the culprit."""
    v = {p.name: values.get(p.name, p.default) for p in PARAMS}
    for p in PARAMS:
        check_value(p, v[p.name])
    try:
        session = SessionConfig(
            num_scale_frames=v["session.num_scale_frames"], window=v["cache.window"],
            max_special_frames=None if v["cache.max_special_frames"] < 0
            else v["cache.max_special_frames"],
            max_cache_bytes=None if v["cache.max_cache_bytes"] < 0 else v["cache.max_cache_bytes"],
            rollover_keyframes=v["session.rollover_keyframes"] or None,
            keyframes=KeyframeConfig(policy=v["keyframes.policy"], n=v["keyframes.n"],
                                     flow_threshold=float(v["keyframes.flow_threshold"]),
                                     max_gap=v["keyframes.max_gap"]),
            preprocess=PreprocessConfig(width=v["input.width"],
                                        height=v["input.height"] or None),
            with_depth=v["session.with_depth"], return_depth=node_outputs_depth(v),
            attention_backend=v["attention.backend"],
            flashinfer_variant=v["attention.flashinfer_variant"],
            cuda_graphs=v["attention.cuda_graphs"], kv_splits=v["attention.kv_splits"],
            fused_kernels=v["attention.fused_kernels"], device=v["device"],
            on_stamp_backwards=v["session.on_stamp_backwards"],
            max_gap_s=float(v["session.max_gap_s"]) or None,
            size_change_frames=v["session.size_change_frames"])
        node = NodeConfig(
            image_topic=v["topics.image"], use_compressed=v["topics.use_compressed"],
            camera_info_topic=v["topics.camera_info"], image_qos=v["qos.image"],
            image_qos_depth=v["qos.image_depth"], queue_size=v["queue_size"],
            map_frame=v["frames.map"], odom_frame=v["frames.odom"], base_frame=v["frames.base"],
            camera_frame=v["frames.camera"], camera_is_optical=v["frames.camera_is_optical"],
            publish_map_to_odom=v["tf.publish_map_to_odom"],
            publish_odom_to_base=v["tf.publish_odom_to_base"],
            wait_for_extrinsic_s=float(v["tf.wait_for_extrinsic_s"]),
            odom_position_var=float(v["odometry.position_variance"]),
            odom_orientation_var=float(v["odometry.orientation_variance"]),
            odom_linear_var=float(v["odometry.linear_velocity_variance"]),
            odom_angular_var=float(v["odometry.angular_velocity_variance"]),
            depth_rate_hz=float(v["publish.depth_rate_hz"]), map_points=v["publish.map_points"],
            map_rate_hz=float(v["map.rate_hz"]), map_voxel_size=float(v["map.voxel_size"]),
            map_max_points=v["map.max_points"], publish_points=v["publish.points"],
            points_rate_hz=float(v["publish.points_rate_hz"]),
            points_stride=v["publish.points_stride"],
            points_min_conf=float(v["publish.points_min_conf"]),
            path_max_poses=v["publish.path_max_poses"],
            cache_info_rate_hz=float(v["publish.cache_info_rate_hz"]),
            diagnostics_rate_hz=float(v["publish.diagnostics_rate_hz"]),
            max_image_pixels=v["max_image_pixels"],
            path_rate_hz=float(v["publish.path_rate_hz"]),
            warn_drop_share=float(v["diagnostics.warn_drop_share"]),
            stall_timeout_s=float(v["diagnostics.stall_timeout_s"]))
    except ValueError as exc:
        field = re.match(r"\w*", str(exc)).group(0)
        name = _FIELD_PARAMS.get(field)
        raise ValueError(f"parameter {name!r}: {exc}" if name else f"invalid parameters: {exc}") \
            from exc
    return Settings(session, node, v["checkpoint"], v["model.preset"], v["precision"],
                    v["camera_head.precision"], v["autostart"], v["warmup"])


def node_outputs_depth(v: dict) -> bool:
    """Some output reads the depth map, so the session must return it (NodeConfig.needs_depth,
    before the NodeConfig exists)."""
    return bool(v["publish.points"] or v["publish.depth_rate_hz"] > 0 or v["publish.map_points"])


def declare(node) -> list[str]:
    """Declare every parameter with a descriptor; return the errors of bad overrides.

    A value from a params file or the command line that ROS refuses (wrong type, out of
    range) is reported instead of crashing the constructor; configure then fails with it.
    """
    from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor)
    from rclpy.exceptions import ParameterException

    errors = []
    for p in PARAMS:
        # Writable, but only while the node is unconfigured (the node's set-parameters
        # callback refuses changes otherwise): set them, then configure.
        desc = ParameterDescriptor(name=p.name, description=p.description, read_only=False)
        if p.choices:
            desc.additional_constraints = "one of: " + ", ".join(map(str, p.choices))
        if p.min is not None and isinstance(p.default, bool) is False:
            if isinstance(p.default, int):
                desc.integer_range = [IntegerRange(from_value=int(p.min), to_value=int(p.max))]
            elif isinstance(p.default, float):
                desc.floating_point_range = [FloatingPointRange(from_value=float(p.min),
                                                                to_value=float(p.max))]
        try:
            node.declare_parameter(p.name, p.default, desc)
        except (ParameterException, TypeError, ValueError) as exc:
            errors.append(f"parameter {p.name!r}: {exc}")
            node.declare_parameter(p.name, p.default, desc, ignore_override=True)
    return errors


PARAMS_BY_NAME = {p.name: p for p in PARAMS}


def check_update(name: str, value) -> None:
    """ValueError unless ``name`` is one of ours and ``value`` passes its type/range check."""
    p = PARAMS_BY_NAME.get(name)
    if p is None:
        raise ValueError(f"unknown parameter {name!r}")
    check_value(p, value)


def read(node) -> dict:
    return {p.name: node.get_parameter(p.name).value for p in PARAMS}

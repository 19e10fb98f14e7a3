"""The scale source's inputs in the node (docs/node.md, Scale), wired at activate.

The ``aligned_depth`` and ``odom_in`` subscriptions (relative names: remap them), the TF
lookups the stream's ``ScaleStream`` makes (the camera's height over ``frames.ground``;
another node's odom -> base with ``scale.odometry_input: tf``), and what the node says about
the source at activate (the warning of a robot whose outputs stay in model units). The
callbacks push into the node's current ``ScaleStream`` (none after a cleanup: dropped), each
message adapted by ros/intake/scale_msgs.py. What a source needs is asked of the registry
(``ScaleConfig.kind``), never by its name.
"""
from __future__ import annotations

from nav_msgs.msg import Odometry
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

from ...image_decode import ImageRejected
from ..params.node_config import camera_config, scale_reads_tf
from .image_input import ImageInput
from .scale_msgs import SOURCES_FOR_A_ROBOT, depth_msg_input, odometry_msg_pose, tf_lookup


def scale_inputs(node) -> list:
    """Attach the scale source's TF lookups to ``node.scale`` and create its inputs
    (returned: subscriptions, or an ``ImageInput`` for the aligned depth; the node destroys
    them at deactivate); logs the source's units."""
    settings = node.settings
    cfg, source, kind = settings.node, settings.scale.source, settings.scale.kind
    scale, frames = node.scale, node.robot_frames
    log = node.get_logger()
    from_tf = scale_reads_tf(cfg, settings.scale)
    scale.attach_tf(
        ground=tf_lookup(frames.ground_to_optical) if from_tf and kind.ground_from_tf else None,
        odometry=tf_lookup(frames.odom_to_base) if from_tf and kind.needs_odometry else None)
    if not kind.metric:
        if not cfg.camera_only:
            log.warning(
                f"scale.source is none: every distance ({cfg.base_frame} in "
                f"{cfg.map_frame}, odometry, TF, depth, points) is in the model's units, "
                "NOT metres (Nav2, robot_localization, nvblox assume metres). Sources that "
                "fit a robot: " + "; ".join(SOURCES_FOR_A_ROBOT) + " (docs/node.md, Scale)")
        return []
    log.info(
        f"scale.source {source}: outputs in metres once the scale locks"
        + (" (until then TF, odometry, pose and depth are withheld)"
           if settings.scale.before_lock == "withhold" else
           " (until then in model units: scale.before_lock publish_model_units)"))
    # reliable only when the image input is (a reliable reader misses best-effort cameras)
    qos = QoSProfile(depth=16, reliability=ReliabilityPolicy.RELIABLE
                     if cfg.image_qos == "reliable" else ReliabilityPolicy.BEST_EFFORT)
    if kind.needs_sensor_depth:  # as large as a colour image: the image input's QoS policy
        return [ImageInput(node, cfg, _depth_callback(node), label="aligned depth input",
                           topic=(node.resolve_topic_name("aligned_depth"), Image),
                           on_malformed=_malformed_depth(node) if cfg.image_raw_take
                           else None)]
    if kind.needs_odometry and from_tf:
        log.info(
            f"scale.source odometry: {cfg.odom_frame} -> {cfg.base_frame} of another node "
            "from TF, looked up at each image stamp")
    elif kind.needs_odometry:
        return [node.create_subscription(Odometry, "odom_in", _odometry_callback(node),
                                         QoSProfile(depth=100, reliability=qos.reliability))]
    elif kind.ground_from_tf:
        height = settings.scale.camera_height_m
        log.info(
            "scale.source camera_height: the floor in the predicted depth, the camera "
            + (f"{height:g} m over it (scale.camera_height_m)" if height is not None else
               f"height over {cfg.ground_frame} from TF (frames.ground)"))
    return []


def rig_scale_inputs(node, rig) -> list:
    """A camera rig's scale inputs (``rig``: its ``RigIO``): each camera's ``ScaleStream``
    gets its TF lookups (its own chain), its aligned depth from
    ``cameras.<camera>.depth_topic``, and the robot's one odometry (``odom_in``, pushed
    into every camera's stream). Returned as ``scale_inputs``' are."""
    settings = node.settings
    cfg, kind = settings.node, settings.scale.kind
    from_tf = scale_reads_tf(cfg, settings.scale)
    for unit in rig.units:
        frames = unit.robot_frames
        unit.scale.attach_tf(
            ground=(tf_lookup(frames.ground_to_optical) if from_tf and kind.ground_from_tf
                    else None),
            odometry=tf_lookup(frames.odom_to_base) if from_tf and kind.needs_odometry else None)
    if kind.needs_sensor_depth:
        inputs = []
        for unit in rig.units:
            own = camera_config(cfg, unit.name)
            topic = cfg.rig.camera(unit.name).depth_topic
            inputs.append(ImageInput(
                node, own, _unit_depth_callback(node, unit),
                label=f"{unit.name} aligned depth input",
                topic=(node.resolve_topic_name(topic), Image)))
        return inputs
    if kind.needs_odometry and not from_tf:
        reliability = (ReliabilityPolicy.RELIABLE if cfg.image_qos == "reliable"
                       else ReliabilityPolicy.BEST_EFFORT)

        def on_odometry(msg) -> None:
            pose = odometry_msg_pose(msg)
            for unit in rig.units:
                unit.scale.push_odometry(*pose)
        return [node.create_subscription(Odometry, "odom_in", on_odometry,
                                         QoSProfile(depth=100, reliability=reliability))]
    return []


def _unit_depth_callback(node, unit):
    def on_depth(msg) -> None:
        try:
            depth = depth_msg_input(msg)
        except ImageRejected as exc:
            unit.telemetry.count(f"depth_rejected_{exc.reason}")
            node.get_logger().warning(f"{unit.name}: aligned depth image rejected "
                                      f"({exc.reason}): {exc.detail}",
                                      throttle_duration_sec=2.0)
            return
        unit.scale.push_depth(*depth)
    return on_depth


def _depth_callback(node):
    on_malformed = _malformed_depth(node)

    def on_depth(msg) -> None:
        scale = node.scale
        if scale is None:
            return
        try:
            depth = depth_msg_input(msg)
        except ImageRejected as exc:  # counted as the bytes that are no Image are
            on_malformed(exc)
            return
        scale.push_depth(*depth)
    return on_depth


def _malformed_depth(node):
    def on_malformed(exc) -> None:  # bytes that are no Image, an Image that is no depth
        node.telemetry.count(f"depth_rejected_{exc.reason}")
        node.get_logger().warning(f"aligned depth image rejected ({exc.reason}): "
                                  f"{exc.detail}", throttle_duration_sec=2.0)
    return on_malformed


def _odometry_callback(node):
    def on_odometry(msg) -> None:
        scale = node.scale
        if scale is not None:
            scale.push_odometry(*odometry_msg_pose(msg))
    return on_odometry

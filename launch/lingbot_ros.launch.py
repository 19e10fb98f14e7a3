"""Launch the lingbot_ros lifecycle node (it configures and activates itself: autostart).

    ros2 launch lingbot_ros lingbot_ros.launch.py image_topic:=/camera/image_raw \
        checkpoint:=/path/lingbot-map.pt [params_file:=my.yaml] [use_sim_time:=true] \
        [namespace:=cam0] [use_compressed:=true] [camera_info_topic:=/camera/camera_info] \
        [device:=cuda] [autostart:=false] [base_frame:=base_link | bare_camera:=true] \
        [scale_source:=depth] [aligned_depth_topic:=/camera/aligned_depth_to_color/image_raw] \
        [scale_odometry_input:=topic|tf] [odom_topic:=/wheel/odometry] [use_rviz:=true]

Arguments left empty (the default of checkpoint, use_compressed, device, autostart,
base_frame, scale_source, aligned_depth_topic, scale_odometry_input, odom_topic) keep the
params file's value (or, for ``aligned_depth_topic`` and ``odom_topic``, the node's relative
``aligned_depth`` and ``odom_in``); the others are always applied.

``scale_source`` sets ``scale.source`` (none | fixed | depth | odometry | camera_height: where
the metric scale comes from, docs/node.md "Scale"); ``aligned_depth_topic`` remaps the node's
``aligned_depth`` input (an RGB-D camera's depth registered to the colour image, for
``scale_source:=depth``). For ``scale_source:=odometry``, ``scale_odometry_input`` sets
``scale.odometry_input``: ``topic`` (the params file's default: nav_msgs/Odometry on the
node's ``odom_in``, which ``odom_topic`` remaps) or ``tf`` (another node's odom -> base on
/tf; the node then refuses to configure unless ``tf.publish_odom_to_base`` is false in the
params file).

``image_topic`` remaps the node's ``image`` input. With ``use_compressed:=true`` (or
``topics.use_compressed: true`` in the params file) the node subscribes to
``<image_topic>/compressed`` (sensor_msgs/CompressedImage): it resolves ``image`` with this
remap first and appends ``/compressed`` (lingbot_ros/ros/params/topics.py). ``camera_info`` is
remapped beside the image, as image_transport names it: ``/camera/image_raw`` ->
``/camera/camera_info``; ``camera_info_topic`` overrides that when not empty.

``base_frame`` sets ``frames.base``. An empty value cannot be passed (empty means "the params
file's"), so ``bare_camera:=true`` sets ``frames.base`` to "": the camera is the base
(camera-only mode).

``use_rviz:=true`` also starts rviz2 with the installed ``config/lingbot_ros.rviz``. rviz2 is
not a dependency of this package (a robot needs no GUI): install it (ros-kilted-rviz2) on the
machine that shows it. It is looked up before anything starts: without it the launch fails
with an install hint and starts no node. Under a ``namespace`` the config's
``/lingbot_ros/...`` topics are remapped to ``/<namespace>/lingbot_ros/...``.

The launch ends with the node: when the node exits (a failed configure under autostart exits
1, e.g. a bad checkpoint; a lifecycle shutdown exits 0), the launch shuts down, and with a
non-zero status when the node's was non-zero.
"""
import os
import re

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction, RegisterEventHandler, Shutdown
from launch.event_handlers import OnProcessExit
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode, Node
from launch_ros.substitutions import FindPackageShare

NODE_NAME = "lingbot_ros"
BOOLEANS = {"true": True, "false": False}
DEVICE = re.compile(r"cpu|cuda|cuda:\d+")
SCALE_SOURCES = ("none", "fixed", "depth", "odometry", "camera_height")  # scale.source
ODOMETRY_INPUTS = ("topic", "tf")  # scale.odometry_input
# The node's topics shown by config/lingbot_ros.rviz (relative to the node: ~/<name>).
RVIZ_TOPICS = ("path", "pose", "map_points", "depth", "odometry")


class NodeExitedError(RuntimeError):
    """The node ended with a non-zero status: the launch fails with it."""


def _value(context, name: str) -> str:
    return LaunchConfiguration(name).perform(context).strip()


def _boolean(context, name: str, allow_empty: bool = False):
    """The argument as True/False; None when empty and ``allow_empty``. Else ValueError."""
    value = _value(context, name).lower()
    if value == "" and allow_empty:
        return None
    if value not in BOOLEANS:
        allowed = "true, false or empty" if allow_empty else "true or false"
        raise ValueError(f"launch argument {name} must be {allowed}, got {value!r}")
    return BOOLEANS[value]


def camera_info_topic(image_topic: str) -> str:
    """The camera_info topic beside an image topic (image_transport's convention):
    ``/camera/image_raw`` -> ``/camera/camera_info``, ``image`` -> ``camera_info``."""
    topic = image_topic.rstrip("/")
    if not topic:
        raise ValueError("launch argument image_topic must not be empty")
    parent, sep, _ = topic.rpartition("/")
    return f"{parent}{sep}camera_info"


def _overrides(context) -> dict:
    """Parameters that the arguments set over the params file's."""
    overrides = {"use_sim_time": _boolean(context, "use_sim_time")}
    checkpoint = _value(context, "checkpoint")
    if checkpoint:
        overrides["checkpoint"] = checkpoint
    use_compressed = _boolean(context, "use_compressed", allow_empty=True)
    if use_compressed is not None:
        overrides["topics.use_compressed"] = use_compressed
    autostart = _boolean(context, "autostart", allow_empty=True)
    if autostart is not None:
        overrides["autostart"] = autostart
    device = _value(context, "device").lower()
    if device:
        if not DEVICE.fullmatch(device):
            raise ValueError(f"launch argument device must be cpu, cuda, cuda:N or empty, "
                             f"got {device!r}")
        overrides["device"] = device
    base_frame = _value(context, "base_frame")
    if _boolean(context, "bare_camera"):
        if base_frame:
            raise ValueError(f"launch arguments bare_camera:=true and base_frame:={base_frame} "
                             f"contradict each other: give one")
        overrides["frames.base"] = ""
    elif base_frame:
        overrides["frames.base"] = base_frame
    for parameter, value in (
            ("scale.source", _choice(_value(context, "scale_source"), "scale_source",
                                     SCALE_SOURCES)),
            ("scale.odometry_input", _choice(_value(context, "scale_odometry_input"),
                                             "scale_odometry_input", ODOMETRY_INPUTS))):
        if value:  # empty: the params file's value stands
            overrides[parameter] = value
    return overrides


def _choice(value: str, argument: str, choices) -> str:
    """A launch argument's value, lower case, checked against ``choices`` (empty passes)."""
    value = value.lower()
    if value and value not in choices:
        raise ValueError(f"launch argument {argument} must be one of "
                         f"{', '.join(choices)} or empty, got {value!r}")
    return value


def _remappings(context) -> list:
    image_topic = _value(context, "image_topic")
    info_topic = _value(context, "camera_info_topic") or camera_info_topic(image_topic)
    # 'image' is resolved with this rule before '/compressed' is appended, so the
    # compressed input follows it too: <image_topic>/compressed.
    remappings = [("image", image_topic), ("camera_info", info_topic)]
    depth_topic = _value(context, "aligned_depth_topic")
    if depth_topic:
        remappings.append(("aligned_depth", depth_topic))
    odom_topic = _value(context, "odom_topic")
    if odom_topic:
        remappings.append(("odom_in", odom_topic))
    return remappings


def rviz2_executable():
    """The path of rviz2 as launch_ros finds it (ament index: <prefix>/lib/rviz2/rviz2), or
    None when rviz2 is not installed."""
    from ament_index_python.packages import PackageNotFoundError, get_package_prefix
    try:
        prefix = get_package_prefix("rviz2")
    except (PackageNotFoundError, KeyError, ValueError):  # KeyError: no AMENT_PREFIX_PATH
        return None
    path = os.path.join(prefix, "lib", "rviz2", "rviz2")
    return path if os.access(path, os.X_OK) else None


def _on_node_exit(event, context):
    """The node has exited: end the launch (failing it when the node's status was not 0)."""
    if context.is_shutdown:  # stopped by the launch itself (Ctrl-C): nothing to add
        return None
    if event.returncode:
        raise NodeExitedError(
            f"{event.action.name} exited with status {event.returncode} (see its log above: "
            f"with autostart, a failed configure or activate, e.g. a bad checkpoint, exits 1)")
    return [Shutdown(reason=f"{event.action.name} exited with status {event.returncode}")]


def _rviz(context, share) -> Node:
    namespace = _value(context, "namespace").strip("/")
    remappings = []
    if namespace:  # the config names the un-namespaced topics
        remappings = [(f"/{NODE_NAME}/{t}", f"/{namespace}/{NODE_NAME}/{t}")
                      for t in RVIZ_TOPICS]
    return Node(
        package="rviz2",
        executable="rviz2",
        name="rviz2",
        arguments=["-d", PathJoinSubstitution([share, "config", "lingbot_ros.rviz"])],
        parameters=[{"use_sim_time": _boolean(context, "use_sim_time")}],
        remappings=remappings,
        output="screen",
    )


def _actions(context, *args, **kwargs):
    share = FindPackageShare("lingbot_ros")
    # Checked before any action starts: a missing rviz2 must not leave the node running.
    use_rviz = _boolean(context, "use_rviz")
    if use_rviz and rviz2_executable() is None:
        distro = os.environ.get("ROS_DISTRO") or "kilted"
        raise RuntimeError(f"use_rviz:=true but rviz2 is not installed (not in the ament index "
                           f"of AMENT_PREFIX_PATH); install it (sudo apt install "
                           f"ros-{distro}-rviz2) or launch with use_rviz:=false. Nothing was "
                           f"started.")
    node = LifecycleNode(
        package="lingbot_ros",
        executable="lingbot_ros_node",
        name=NODE_NAME,
        namespace=LaunchConfiguration("namespace"),
        parameters=[LaunchConfiguration("params_file"), _overrides(context)],
        remappings=_remappings(context),
        output="screen",
    )
    actions = [RegisterEventHandler(OnProcessExit(target_action=node, on_exit=_on_node_exit)),
               node]
    if use_rviz:
        actions.append(_rviz(context, share))
    return actions


def generate_launch_description():
    default_params = PathJoinSubstitution(
        [FindPackageShare("lingbot_ros"), "config", "lingbot_ros.yaml"])
    args = [
        DeclareLaunchArgument("checkpoint", default_value="",
                              description="LingBot-Map weights (.pt/.safetensors); empty: the "
                                          "params file's checkpoint (the installed file's is "
                                          "empty: random weights, poses meaningless)"),
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="parameters file (every parameter documented)"),
        DeclareLaunchArgument("image_topic", default_value="/camera/image_raw",
                              description="image input topic: sensor_msgs/Image, or with "
                                          "compressed input <image_topic>/compressed"),
        DeclareLaunchArgument("camera_info_topic", default_value="",
                              description="camera_info input topic; empty: beside "
                                          "image_topic (/camera/image_raw -> "
                                          "/camera/camera_info)"),
        DeclareLaunchArgument("use_compressed", default_value="",
                              description="true: subscribe to <image_topic>/compressed "
                                          "(sensor_msgs/CompressedImage); false: "
                                          "<image_topic> (sensor_msgs/Image); empty: as "
                                          "topics.use_compressed in params_file"),
        DeclareLaunchArgument("device", default_value="",
                              description="cpu, cuda or cuda:N; empty: the params file's "
                                          "device"),
        DeclareLaunchArgument("autostart", default_value="",
                              description="true: configure and activate on start; false: "
                                          "wait for lifecycle transitions; empty: the params "
                                          "file's autostart"),
        DeclareLaunchArgument("base_frame", default_value="",
                              description="robot base frame (frames.base); empty: the params "
                                          "file's (use bare_camera:=true for none)"),
        DeclareLaunchArgument("bare_camera", default_value="false",
                              description="true: frames.base is empty, the camera is the "
                                          "base (camera-only mode); not with base_frame"),
        DeclareLaunchArgument("scale_source", default_value="",
                              description="scale.source: none, fixed, depth, odometry or "
                                          "camera_height (metres from the robot's sensors); "
                                          "empty: the params file's"),
        DeclareLaunchArgument("aligned_depth_topic", default_value="",
                              description="depth registered to the colour image (16UC1 mm "
                                          "or 32FC1 m) for scale_source:=depth; empty: the "
                                          "node's relative 'aligned_depth'"),
        DeclareLaunchArgument("scale_odometry_input", default_value="",
                              description="scale.odometry_input for scale_source:=odometry: "
                                          "topic (nav_msgs/Odometry on odom_in) or tf "
                                          "(another node's odom -> base on /tf; needs "
                                          "tf.publish_odom_to_base false); empty: the "
                                          "params file's (topic)"),
        DeclareLaunchArgument("odom_topic", default_value="",
                              description="the robot's nav_msgs/Odometry for "
                                          "scale_source:=odometry (scale.odometry_input "
                                          "topic); empty: the node's relative 'odom_in'"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="use /clock (bag replay)"),
        DeclareLaunchArgument("namespace", default_value="",
                              description="namespace of the node and its topics"),
        DeclareLaunchArgument("use_rviz", default_value="false",
                              description="true: also start rviz2 with config/lingbot_ros.rviz "
                                          "(rviz2 must be installed: ros-kilted-rviz2)"),
    ]
    return LaunchDescription(args + [OpaqueFunction(function=_actions)])

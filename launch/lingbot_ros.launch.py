"""Launch the lingbot_ros lifecycle node (it configures and activates itself: autostart).

    ros2 launch lingbot_ros lingbot_ros.launch.py image_topic:=/camera/image_raw \
        checkpoint:=/path/lingbot-map.pt [params_file:=my.yaml] [use_sim_time:=true] \
        [namespace:=cam0] [use_compressed:=true]

``image_topic`` remaps the node's ``image`` input. With ``use_compressed:=true`` (or
``topics.use_compressed: true`` in the params file) the node subscribes to
``<image_topic>/compressed`` (sensor_msgs/CompressedImage): it resolves ``image`` with this
remap first and appends ``/compressed`` (lingbot_ros/ros/topics.py). ``use_compressed`` left
empty (the default) keeps the params file's value.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode
from launch_ros.descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

BOOLEANS = {"true": True, "false": False}


def _node(context, *args, **kwargs):
    overrides = {"checkpoint": LaunchConfiguration("checkpoint"),
                 "use_sim_time": ParameterValue(LaunchConfiguration("use_sim_time"),
                                                value_type=bool)}
    use_compressed = LaunchConfiguration("use_compressed").perform(context).strip().lower()
    if use_compressed:  # else the params file decides
        if use_compressed not in BOOLEANS:
            raise ValueError(f"use_compressed must be true, false or empty, got "
                             f"{use_compressed!r}")
        overrides["topics.use_compressed"] = BOOLEANS[use_compressed]
    return [LifecycleNode(
        package="lingbot_ros",
        executable="lingbot_ros_node",
        name="lingbot_ros",
        namespace=LaunchConfiguration("namespace"),
        parameters=[LaunchConfiguration("params_file"), overrides],
        # 'image' is resolved with this rule before '/compressed' is appended, so the
        # compressed input follows it too: <image_topic>/compressed.
        remappings=[("image", LaunchConfiguration("image_topic"))],
        output="screen",
    )]


def generate_launch_description():
    default_params = PathJoinSubstitution(
        [FindPackageShare("lingbot_ros"), "config", "lingbot_ros.yaml"])
    args = [
        DeclareLaunchArgument("checkpoint", default_value="",
                              description="LingBot-Map weights (.pt/.safetensors); empty = "
                                          "random weights (poses meaningless)"),
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="parameters file (every parameter documented)"),
        DeclareLaunchArgument("image_topic", default_value="/camera/image_raw",
                              description="image input topic: sensor_msgs/Image, or with "
                                          "compressed input <image_topic>/compressed"),
        DeclareLaunchArgument("use_compressed", default_value="",
                              description="true: subscribe to <image_topic>/compressed "
                                          "(sensor_msgs/CompressedImage); false: "
                                          "<image_topic> (sensor_msgs/Image); empty: as "
                                          "topics.use_compressed in params_file"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="use /clock (bag replay)"),
        DeclareLaunchArgument("namespace", default_value="",
                              description="namespace of the node and its topics"),
    ]
    return LaunchDescription(args + [OpaqueFunction(function=_node)])

"""Launch the lingbot_ros lifecycle node (it configures and activates itself: autostart).

    ros2 launch lingbot_ros lingbot_ros.launch.py image_topic:=/camera/image_raw \
        checkpoint:=/path/lingbot-map.pt [params_file:=my.yaml] [use_sim_time:=true] [namespace:=cam0]
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode
from launch_ros.descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare


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
                              description="sensor_msgs/Image input topic"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="use /clock (bag replay)"),
        DeclareLaunchArgument("namespace", default_value="",
                              description="namespace of the node and its topics"),
    ]
    node = LifecycleNode(
        package="lingbot_ros",
        executable="lingbot_ros_node",
        name="lingbot_ros",
        namespace=LaunchConfiguration("namespace"),
        parameters=[
            LaunchConfiguration("params_file"),
            {"checkpoint": LaunchConfiguration("checkpoint"),
             "use_sim_time": ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool)},
        ],
        remappings=[("image", LaunchConfiguration("image_topic"))],
        output="screen",
    )
    return LaunchDescription(args + [node])

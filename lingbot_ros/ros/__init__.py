"""The ROS 2 layer: the only subpackage that imports rclpy and ROS message packages.

- ``convert``: sensor_msgs Image / CompressedImage <-> numpy arrays, with reject reasons.

Interfaces of the node come from the companion package ``lingbot_ros_interfaces`` (built by
``scripts/setup_ros.sh`` or colcon; see docs/ros.md). Submodules are imported explicitly, so
``import lingbot_ros.ros`` alone loads no ROS package.
"""

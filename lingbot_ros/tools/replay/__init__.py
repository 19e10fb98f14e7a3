"""lingbot-ros-replay: play a rosbag2 onto ROS 2 (rclpy, in its own context)."""

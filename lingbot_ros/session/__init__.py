"""A stream's state around the model: keyframe policies, Sim(3) window alignment, pose
conventions and trajectories. No rclpy, no ROS messages."""

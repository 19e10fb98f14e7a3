"""lingbot_ros: realtime camera poses and 3D structure from LingBot-Map's streaming
Geometric Context Transformer, on a paged GPU KV cache, as a ROS 2 node."""

__version__ = "0.1.0"

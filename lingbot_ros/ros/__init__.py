"""The ROS 2 layer: the only subpackage that imports rclpy and ROS message packages.

- ``node``: the lifecycle node (``LingbotNode``); ``main``: the ``lingbot_ros_node`` entry
  point (``python -m lingbot_ros.ros.node`` runs it too); ``background_job``: configure's
  heavy part on a thread a signal need not wait for.
- ``frame_worker``: the worker thread, queue -> session -> outputs (built without a node);
  ``telemetry``: the node's counters, read as snapshots; ``gc_pauses``: the garbage
  collector's full collections in the node process, timed.
- ``param_table``: every parameter, one row each; ``params``: declared, checked and built
  into ``Settings`` from it; ``node_config``: ``NodeConfig``.
- ``convert``: sensor_msgs Image / CompressedImage <-> numpy arrays, with reject reasons.
- ``outputs``, ``status``, ``services``, ``diagnostics``, ``health``: what the node
  publishes and answers.

Interfaces of the node come from the companion package ``lingbot_ros_interfaces`` (built by
``scripts/setup_ros.sh`` or colcon; see docs/ros.md). Submodules are imported explicitly, so
``import lingbot_ros.ros`` alone loads no ROS package.
"""
